"""The AFT fits' Newton-Raphson (trashfire.survival.newton) on a GPU at 10^7 samples, and the
same fit on the CPU at a size it takes, side by side in one run.

Synthetic survival data as bench/survival_scaling.py makes it (the default's covariates,
one-hot attack and defence families, ~20% censored), the covariates scaled to unit SD with an
intercept, as lifelines scales them. Each of the Weibull, Log-Normal and Log-Logistic models
is fitted unpenalised: on the GPU (torch, float64) at `--rows`, and at `--check-rows` on both
the GPU and the CPU (numpy), whose log-likelihoods and coefficients must agree (the same
algorithm, the sums in another order). Printed: seconds, Newton steps, rows per second, and
the largest differences between devices. Exits 1 when they disagree beyond 1e-9 relative
(log-likelihood) or 1e-6 (coefficients), or no CUDA device is found.

    python bench/survival_gpu.py [--rows 10000000] [--check-rows 1000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from survival_scaling import synthetic_survival_data  # noqa: E402
from trashfire.survival.newton import LocationScale, extreme_value, logistic, newton, normal, torch_ops  # noqa: E402

MODELS = {"weibull": (extreme_value, -1.0), "lognormal": (normal, 1.0), "loglogistic": (logistic, -1.0)}


def design(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X with unit-SD columns and an intercept, log durations, events) of synthetic data."""
    data = synthetic_survival_data(rows, seed)
    covariates = data.drop(columns=["duration", "event", "weight"]).to_numpy(float)
    covariates = (covariates - covariates.mean(0)) / covariates.std(0)
    return np.c_[covariates, np.ones(rows)], np.log(data["duration"].to_numpy(float)), data["event"].to_numpy() == 1


def start(X, y) -> np.ndarray:
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    return np.append(b, np.log(np.std(y - X @ b)))


def fit(X, y, event, density, sign: float, ops=None, synchronise=lambda: None) -> dict:
    """One Newton fit from the least-squares start, timed (the data already in place)."""
    kwargs = {} if ops is None else {"ops": ops}
    weights = np.ones(len(y)) if ops is None else y.new_ones(len(y))
    model = LocationScale(density, X, y, event, weights, fixed_scale=False, **kwargs)
    X_host, y_host = (X, y) if ops is None else (ops.to_numpy(X[:200_000]), ops.to_numpy(y[:200_000]))
    theta = start(X_host, y_host) * np.r_[np.ones(X_host.shape[1]), sign]
    synchronise()
    began = time.perf_counter()
    params, value, gradient, _, steps = newton(model, theta, np.zeros_like(theta), sign)
    synchronise()
    return {"seconds": time.perf_counter() - began, "steps": steps, "loglik": -value * model.total, "params": params, "gradient": float(np.abs(gradient).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--check-rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("survival_gpu: no CUDA device")
    device, ops = torch.device("cuda"), torch_ops()
    figures, failures = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sizes": {}}, []
    for rows in (args.check_rows, args.rows):
        began = time.perf_counter()
        X, y, event = design(rows)
        made = time.perf_counter() - began
        on_gpu = [torch.from_numpy(a).to(device) for a in (X, y, event)]
        torch.cuda.synchronize()
        print(f"{rows:,} samples, {X.shape[1] - 1} covariates (made in {made:.1f} s; {X.nbytes / 2**30:.2f} GiB of design)", flush=True)
        sizes = figures["sizes"][str(rows)] = {}
        for name, (density, sign) in MODELS.items():
            gpu = fit(*on_gpu, density, sign, ops, torch.cuda.synchronize)
            row = {
                "gpu_seconds": round(gpu["seconds"], 3),
                "steps": gpu["steps"],
                "loglik": gpu["loglik"],
                "gpu_rows_per_second": rows * gpu["steps"] / gpu["seconds"],
            }
            line = f"  {name:12s} GPU {gpu['seconds']:7.3f} s, {gpu['steps']} Newton steps, loglik {gpu['loglik']:.4f}"
            if rows == args.check_rows:
                cpu = fit(X, y, event, density, sign)
                row |= {"cpu_seconds": round(cpu["seconds"], 3), "cpu_over_gpu": round(cpu["seconds"] / gpu["seconds"], 2)}
                row["loglik_rel"] = abs(gpu["loglik"] - cpu["loglik"]) / abs(cpu["loglik"])
                row["params_max_diff"] = float(np.abs(gpu["params"] - cpu["params"]).max())
                line += f"; CPU {cpu['seconds']:7.3f} s ({row['cpu_over_gpu']}x the GPU's); loglik {row['loglik_rel']:.1e} rel, coefficients {row['params_max_diff']:.1e} apart"
                if row["loglik_rel"] > 1e-9 or row["params_max_diff"] > 1e-6:
                    failures.append(f"{name} at {rows}: GPU and CPU disagree")
            sizes[name] = row
            print(line, flush=True)
        del on_gpu
        torch.cuda.empty_cache()
        sizes["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=float))
    for line in failures:
        print(f"MISSED {line}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
