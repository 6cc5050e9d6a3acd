"""What a DVC stage declares, and the view of the config it is given.

A stage module (`trashfire.stages.<name>`) declares a `Stage`: the params keys it reads, the
data it reads and the outputs it writes. Its `run(cfg)` hands the library only `view(cfg)`,
the declared keys and nothing else, so a read of an undeclared key fails in the tests instead
of leaving `dvc repro` blind to it. `trashfire.dvc_yaml` writes dvc.yaml from these
declarations and from the stage modules' imports, so neither list can drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

# Keys that normalisation (`config.normalise`) folds into a declared key before a stage
# reads it: `defence_cell: fsq@4` narrows `defence`. DVC must see them beside that key.
FOLDED_INTO = {"defence": ("defence_cell",)}


@dataclass(frozen=True)
class Stage:
    name: str
    params: tuple[str, ...]  # dotted config keys; a section means all of it
    deps: tuple[str, ...] = ()  # data it reads, in the default paths layout
    outs: tuple[Any, ...] = ()  # a path, or {path: {dvc options}}
    metrics: tuple[Any, ...] = ()
    comment: str = ""  # a note for dvc.yaml

    def __post_init__(self) -> None:
        for name in ("params", "deps", "outs", "metrics"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(f"Stage {self.name!r}: {name} must be a tuple, got {getattr(self, name)!r}")

    def dvc_params(self) -> list[str]:
        keys = list(self.params)
        for key in self.params:
            keys += [k for k in FOLDED_INTO.get(key, ()) if k not in keys]
        return keys

    def view(self, cfg: DictConfig) -> DictConfig:
        """The declared keys of `cfg`, in struct mode: reading any other key raises."""
        view = OmegaConf.create({})
        with open_dict(view):
            for key in self.params:
                value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
                if value is _ABSENT:
                    continue  # optional sections (survival, metrics) may be absent in a test's config
                OmegaConf.update(view, key, value, merge=False, force_add=True)
        OmegaConf.set_struct(view, True)
        return view


_ABSENT = object()
