"""What a DVC stage declares, and the view of the config it is given.

A stage module (`trashfire.stages.<name>`) declares a `Stage`: the params keys it reads, the
data it reads and the outputs it writes. Its artefacts are paths under the `paths` section,
written `{reports}/trash.csv` for `paths.reports`: `inputs(cfg)` and `outputs(cfg)` resolve
them against a config (the layout the stage's run writes), and dvc.yaml gets them as DVC
templates (`${paths.reports}/trash.csv`), which DVC resolves from params.yaml, so a changed
`paths` moves what DVC tracks with what the stages write. Its `run(cfg)` hands the library only `view(cfg)`,
the declared keys and nothing else, so a read of an undeclared key fails in the tests instead
of leaving `dvc repro` blind to it. `trashfire.dvc_yaml` writes dvc.yaml from these
declarations and from the stage modules' imports, so neither list can drift from the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

# Keys that normalisation (`config.normalise`) folds into a declared key before a stage
# reads it: `defence_cell: fsq@4` narrows `defence`. DVC must see them beside that key.
FOLDED_INTO = {"defence": ("defence_cell",)}
CODE = "src/"  # a dep there is package data no import reaches (dvc_yaml follows the imports)
PATH_FIELD = re.compile(r"\{(\w+)\}")  # `{reports}`: the value of paths.reports


@dataclass(frozen=True)
class Stage:
    name: str
    params: tuple[str, ...]  # dotted config keys; a section means all of it
    deps: tuple[str, ...] = ()  # data it reads: `{<paths key>}/<name>`
    outs: tuple[Any, ...] = ()  # such a path, or {path: {dvc options}}
    metrics: tuple[Any, ...] = ()
    comment: str = ""  # a note for dvc.yaml

    def __post_init__(self) -> None:
        for name in ("params", "deps", "outs", "metrics"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(f"Stage {self.name!r}: {name} must be a tuple, got {getattr(self, name)!r}")
        for entry in self.artefacts():
            for key in PATH_FIELD.findall(entry):
                if f"paths.{key}" not in self.params and "paths" not in self.params:
                    raise TypeError(f"Stage {self.name!r}: {entry} is under paths.{key}, which its params do not declare")
            if not entry.startswith("{"):
                raise TypeError(f"Stage {self.name!r}: {entry} is no path under `paths`; write it {{<paths key>}}/<name>")

    def artefacts(self, kinds: tuple[str, ...] = ("deps", "outs", "metrics")) -> list[str]:
        """The declared data paths of `kinds`, unresolved, without their DVC options (a dep
        under src/ is package data its code reads, such as the report's templates: code)."""
        paths = [path for kind in kinds for entry in getattr(self, kind) for path in ([entry] if isinstance(entry, str) else list(entry))]
        return [path for path in paths if not path.startswith(CODE)]

    def inputs(self, cfg: DictConfig) -> list[Path]:
        """The data the stage reads, in `cfg`'s paths layout."""
        return [resolve(entry, cfg) for entry in self.artefacts(("deps",))]

    def outputs(self, cfg: DictConfig) -> list[Path]:
        """What the stage writes (its outs and metrics), in `cfg`'s paths layout."""
        return [resolve(entry, cfg) for entry in self.artefacts(("outs", "metrics"))]

    def dvc(self, kind: str) -> list[Any]:
        """`kind`'s entries as dvc.yaml writes them: `${paths.<key>}` templates."""
        return [dvc_path(entry) if isinstance(entry, str) else {dvc_path(path): options for path, options in entry.items()} for entry in getattr(self, kind)]

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


def resolve(entry: str, cfg: DictConfig) -> Path:
    return Path(PATH_FIELD.sub(lambda field: str(cfg.paths[field.group(1)]).rstrip("/"), entry))


def dvc_path(entry: str) -> str:
    return PATH_FIELD.sub(lambda field: "${paths." + field.group(1) + "}", entry)


_ABSENT = object()
