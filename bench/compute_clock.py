"""What the compute clock adds to the attack stage (issue 25: at most 3%).

The default grid at one seed (`split.seeds=[0]`: 22 model cells, 264 attack cells), trained
here in a scratch folder, then the attack stage run in this process (one worker, so that
every call is seen) with each of the compute clock's own parts timed where it runs:
- the model's FLOPs per query and gradient (torch's FlopCounterMode), once per model cell;
- the untimed warm-up pass at full batch, once per model cell;
- the counting inside the engine's loops (LapClock.count and .uncharged, each lap's record);
- the pricing after each cell: pooling the steps' rates, calibrations, `price`;
- the hooks that count the passes of ART's searches: their calls during the run x the cost
  of one call, measured apart (a forward with the two hooks against one without, best of
  repeats).
Printed: each part's seconds and their sum over the attack stage's wall time (target <= 0.03).

    python bench/compute_clock.py [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from trashfire.attacks import campaign, engine
from trashfire.core import clocks
from trashfire.core.config import compose, normalise, validate
from trashfire.core.records import write_json
from trashfire.stages import attack, prepare, train

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.03
SPENT: dict[str, float] = defaultdict(float)
HOOK_CALLS = [0]


def timed(part: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[part] += time.perf_counter() - start

    return wrapper


@contextlib.contextmanager
def counting_calls(classifier):
    """engine.counting_passes, and how many times its hooks are called."""
    model = classifier.model
    handles = [model.register_forward_hook(lambda *_: HOOK_CALLS.__setitem__(0, HOOK_CALLS[0] + 1))]
    try:
        with COUNTING_PASSES(classifier) as passes:
            yield passes
    finally:
        for handle in handles:
            handle.remove()


COUNTING_PASSES = engine.counting_passes


def instrument() -> None:
    for name, part in (
        ("model_cost", "FLOPs per query (FlopCounterMode)"),
        ("warm_up_batch", "warm-up pass"),
        ("steps_rates", "pricing"),
        ("price", "pricing"),
    ):
        setattr(campaign, name, timed(part, getattr(campaign, name)))
    for name in ("count", "uncharged", "new_unit", "reference_laps"):
        setattr(clocks.LapClock, name, timed("counting in the loops", getattr(clocks.LapClock, name)))
    engine.counting_passes = counting_calls


def hook_cost(model: torch.nn.Module, x: torch.Tensor, repeats: int = 7, calls: int = 300) -> float:
    """Seconds one forward call costs more with the two counting hooks than without."""

    def best(hooked: bool) -> float:
        times = []
        for _ in range(repeats):
            context = COUNTING_PASSES(type("C", (), {"model": model})()) if hooked else contextlib.nullcontext()
            with context, torch.no_grad():
                start = time.perf_counter()
                for _ in range(calls):
                    model(x)
                times.append((time.perf_counter() - start) / calls)
        return min(times)

    return max(0.0, best(True) - best(False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="trashfire-compute-clock-"))
    paths = {"raw": "data/raw", "processed": "data/processed", "models": "models", "attacks": "reports/attacks", "reports": "reports"}
    overrides = [f"paths.{k}={folder / v}" for k, v in paths.items()] + ["split.seeds=[0]", "compute.workers=1", "compute.progress=false"]
    cfg = normalise(validate(compose(overrides, conf=ROOT / "conf")))
    prepare.run(cfg)
    train.run(cfg)
    instrument()
    start = time.perf_counter()
    attack.run(cfg)
    total = time.perf_counter() - start
    from trashfire.models import build_model

    probe = build_model(dict(cfg.model.cifar_resnet8), 10, (1, 8, 8)).eval()
    SPENT["counting hooks of ART's searches"] = HOOK_CALLS[0] * hook_cost(probe, torch.zeros(1, 1, 8, 8))
    added = sum(SPENT.values())
    print(f"attack stage (default grid, seed 0, one worker): {total:.1f} s")
    for part, seconds in sorted(SPENT.items(), key=lambda item: -item[1]):
        print(f"  {part:40s} {seconds:7.3f} s  {seconds / total:6.2%}")
    ratio = added / total
    print(f"compute clock / attack stage: {ratio:.4f} (target <= {TARGET}): {'ok' if ratio <= TARGET else 'ABOVE TARGET'}")
    if args.json:
        write_json(args.json, {"attack_stage_s": total, "parts_s": dict(SPENT), "hook_calls": HOOK_CALLS[0], "ratio": ratio, "target": TARGET})


if __name__ == "__main__":
    main()
