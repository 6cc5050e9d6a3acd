"""What a DVC stage declares, and the view of the config it is given.

A stage module (`trashfire.stages.<name>`) declares a `Stage`: the params keys it reads, the
data it reads and the outputs it writes. Its artefacts are paths under the `paths` section,
written `{reports}/trash.csv` for `paths.reports`: `inputs(cfg)` and `outputs(cfg)` resolve
them against a config (the layout the stage's run writes), and dvc.yaml gets them as DVC
templates (`${paths.reports}/trash.csv`), which DVC resolves from params.yaml, so a changed
`paths` moves what DVC tracks with what the stages write. Its `run(cfg)` hands the library
`view(cfg)`, the declared keys and nothing else, so a read of an undeclared key fails in the
tests instead of leaving `dvc repro` blind to it; and `resolved(cfg)`, the declared paths
resolved, by name. The view holds no `paths`: the library reads and writes only the paths
it is handed, so it cannot write what dvc.yaml does not declare. `trashfire.dvc_yaml` writes
dvc.yaml from these declarations and from the stage modules' imports, so neither list can
drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
class Artefacts:
    """A stage's declared artefacts, resolved in one config's `paths` layout, by name (the
    declared path after its `{<paths key>}/`, or the key alone: `experiments.csv`, `survival`,
    `models`); a name under a declared folder (`survival/km_check.csv`) is a path inside it.
    Picklable, so a stage hands them to its worker processes too."""

    stage: str
    reads: Mapping[str, Path]
    writes: Mapping[str, Path]

    def input(self, name: str) -> Path:
        return self._find(self.reads, name, "deps")

    def output(self, name: str) -> Path:
        return self._find(self.writes, name, "outs or metrics")

    def _find(self, declared: Mapping[str, Path], name: str, kind: str) -> Path:
        folder, _, inside = name.partition("/")
        if name in declared:
            return declared[name]
        if inside and folder in declared:
            return declared[folder] / inside
        raise KeyError(f"stage {self.stage!r} declares no {name!r} in its {kind} ({', '.join(declared) or 'none'}); add it to its STAGE")


def artefact_name(entry: str) -> str:
    """`{reports}/trash.csv` -> trash.csv; `{models}` -> models."""
    return entry.split("/", 1)[1] if "/" in entry else PATH_FIELD.fullmatch(entry).group(1)


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
        names = [artefact_name(entry) for entry in self.artefacts()]
        if len(set(names)) < len(names):
            raise TypeError(f"Stage {self.name!r}: two artefacts share a name in {names}; the library finds each by its name")

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

    def resolved(self, cfg: DictConfig) -> Artefacts:
        """The declared artefacts in `cfg`'s paths layout, by name: what `run` hands the library."""
        reads = {artefact_name(entry): resolve(entry, cfg) for entry in self.artefacts(("deps",))}
        writes = {artefact_name(entry): resolve(entry, cfg) for entry in self.artefacts(("outs", "metrics"))}
        return Artefacts(self.name, reads, writes)

    def dvc(self, kind: str) -> list[Any]:
        """`kind`'s entries as dvc.yaml writes them: `${paths.<key>}` templates."""
        return [dvc_path(entry) if isinstance(entry, str) else {dvc_path(path): options for path, options in entry.items()} for entry in getattr(self, kind)]

    def dvc_params(self) -> list[str]:
        keys = list(self.params)
        for key in self.params:
            keys += [k for k in FOLDED_INTO.get(key, ()) if k not in keys]
        return keys

    def view(self, cfg: DictConfig) -> DictConfig:
        """The declared keys of `cfg`, in struct mode: reading any other key raises. `paths` is
        left out: the library gets its paths resolved (`resolved`), the declared ones only."""
        view = OmegaConf.create({})
        with open_dict(view):
            for key in self.params:
                if key.split(".")[0] == "paths":
                    continue
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
