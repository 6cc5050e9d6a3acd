"""The experiment grid: training cells, model cells (a trained cell plus a predict-time
defence) and attack cells, each keyed by a hash of exactly the config that affects it.

A predict-time defence (gauss_out, conf, fsq) reuses the weights of the undefended training
cell; a train-time defence (gauss_in) is its own training cell. So adding a value to any
grid adds only new cells, and changing an attack parameter changes no training hash.

An option's `rules` (what the validator allows it) never enter a hash: a model's spec leaves
them out (its builder takes no rules), an attack's spec carries them for the attack code
(the strength's kind, the default engine, the torch loop) but its hash leaves them out, as
it leaves out the attack's properties (black_box, minimal: what the tables read). A data
set enters a training hash with every key of its option but n_classes, its rules and the
keys it lists as `unhashed` (`data_block`), so a new key its loader reads changes the hash.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trashfire.core import external
from trashfire.core.checks import RULES, UNHASHED, as_list
from trashfire.core.errors import ConfigError
from trashfire.core.records import config_hash

# Bump when a change to the code changes what a cell computes: old records then miss.
TRAIN_VERSION = 1
ATTACK_VERSION = 4  # 2: per-sample failure clock (engine, early exit, outcome arrays); 3: image searches seeded by model cell, sample and strength; 4: the compute clock (counts, priced and shared durations)
PREPARE_VERSION = 1  # what prepare writes for a data option and split settings
# The random streams' keys (`seed_key`): a cell's hash at these versions, whatever the cache
# versions above are, so that a cache bump reruns the cells with the draws they had before.
SEED_TRAIN_VERSION, SEED_ATTACK_VERSION = 1, 4

# A setting at its default stays out of a cell's spec, and so out of its hash: adding a setting
# with a default then keeps every cached cell, and stating a default changes no cell. The
# defaults (a data option's: null, `data_block`):
TRAIN_DEFAULTS = {"lr_schedule": "constant", "optimiser": "sgd"}
ATTACK_DEFAULTS = {"samples": None, "units": "standardised"}

# keys of an option that say what it is, not what it computes (an attack's black_box and
# minimal, read by the tables): never part of a cell hash (trashfire.attacks.spec checks them)
DESCRIPTIVE_KEYS = ("black_box", "minimal")

UNDEFENDED = {"name": "none", "stage": "none", "param": None, "value": 0}


GRID_GROUPS = ("data", "model", "defence", "attack")
OPTION_KEYS = ("_target_", "source", "stage")  # every option of a grid group has one


def is_leftover(spec: Any) -> bool:
    """A grid member that only a preset's values created: `experiment=trashfire_paper
    attack=[fgm]` leaves `attack.pgd: {values: ...}` behind, which is no option at all."""
    return OmegaConf.is_dict(spec) and not any(key in spec for key in OPTION_KEYS)


def options(cfg: DictConfig, group: str) -> dict[str, Any]:
    """The selected options of a grid group, by name, leftovers left out."""
    members = cfg.get(group)
    if not OmegaConf.is_dict(members):
        return {}
    return {name: spec for name, spec in members.items() if not is_leftover(spec)}


def drop_leftovers(cfg: DictConfig) -> DictConfig:
    """Remove the leftovers of every grid group from cfg itself (a composition of our own)."""
    for group in GRID_GROUPS:
        members = cfg.get(group)
        if OmegaConf.is_dict(members):
            with open_dict(members):
                for name in [n for n, spec in members.items() if is_leftover(spec)]:
                    del members[name]
    return cfg


def defence_cell(cfg: DictConfig) -> tuple[str, Any] | None:
    """`defence_cell` as (defence, value); None when it is null."""
    cell = cfg.get("defence_cell")
    if cell is None:
        return None
    defences = options(cfg, "defence")
    name, sep, text = str(cell).partition("@")
    allowed = f"<defence>@<value> with a selected defence ({', '.join(defences)}), e.g. fsq@4 or none@0"
    if not sep or name not in defences or not text:
        raise ConfigError("defence_cell", f"got {cell!r}; allowed: {allowed}")
    return name, _parse_scalar(text)


def _parse_scalar(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


@dataclass(frozen=True)
class TrainCell:
    dataset: str
    seed: int
    model: str
    depth: int | None  # None: an imported model whose depth its module gives (trashfire.models.external)
    epochs: int | None  # None: an imported model (trashfire.core.external), whose training we do not know
    lr: float | None
    defence: dict[str, Any]  # UNDEFENDED or one train-time defence value
    spec: dict[str, Any] = field(repr=False, compare=False)
    base: TrainCell | None = field(default=None, repr=False, compare=False)  # pretrained on another data set

    @property
    def pretrained_on(self) -> str | None:
        return self.base.dataset if self.base is not None else None

    @property
    def hash(self) -> str:
        return config_hash(self.spec)

    @property
    def seed_key(self) -> str:
        """The key of the cell's random draws: its hash at SEED_TRAIN_VERSION."""
        pretrained = {"pretrained": self.base.seed_key} if self.base is not None else {}
        return config_hash(self.spec | {"v": SEED_TRAIN_VERSION} | pretrained)

    @property
    def is_external(self) -> bool:
        """Imported from a checkpoint by the train stage, not trained."""
        return external.is_external(self.spec["model"])

    @property
    def data_hash(self) -> str:
        """The training data's identity (data set option, seed, test share): what a record
        of this cell must have been trained on to be a cache hit."""
        return config_hash(_data_identity(self.spec))

    @property
    def run_key(self) -> str:
        """Equal for the cells that are checkpoints of one training run."""
        return config_hash({**self.spec, "train": {k: v for k, v in self.spec["train"].items() if k != "epochs"}})

    def at_epochs(self, epochs: int) -> TrainCell:
        """The same run's checkpoint at another epoch."""
        spec = {**self.spec, "train": {**self.spec["train"], "epochs": epochs}}
        return replace(self, epochs=epochs, spec=spec)


@dataclass(frozen=True)
class ModelCell:
    train: TrainCell
    defence: dict[str, Any]  # the defence this model is evaluated with (any stage)

    @property
    def hash(self) -> str:
        return config_hash({"train": self.train.hash, "predict_defence": self._predict_defence})

    @property
    def seed_key(self) -> str:
        """The key of the cell's random draws (a predict-time defence's noise, the image
        searches' seeds): its hash with its training cell's seed key."""
        return config_hash({"train": self.train.seed_key, "predict_defence": self._predict_defence})

    @property
    def _predict_defence(self) -> dict[str, Any]:
        return self.defence if self.defence["stage"] == "predict" else UNDEFENDED


@dataclass(frozen=True)
class AttackCell:
    model: ModelCell
    attack: str
    norm: str
    param: str
    value: float
    spec: dict[str, Any] = field(repr=False, compare=False)

    @property
    def hash(self) -> str:
        return config_hash({"model": self.model.hash, "attack": self._hashed, "v": ATTACK_VERSION})

    @property
    def seed_key(self) -> str:
        """The key of the cell's random draws: its hash at SEED_ATTACK_VERSION, with its model
        cell's seed key."""
        return config_hash({"model": self.model.seed_key, "attack": self._hashed, "v": SEED_ATTACK_VERSION})

    @property
    def _hashed(self) -> dict[str, Any]:
        hashed = {key: value for key, value in without_rules(self.spec).items() if key not in DESCRIPTIVE_KEYS}
        components = (hashed.get("kwargs") or {}).get("components")
        if components:  # a component's properties describe it too, and no cell hash reads them
            hashed["kwargs"] = {
                **hashed["kwargs"],
                "components": {n: {k: v for k, v in c.items() if k not in DESCRIPTIVE_KEYS} for n, c in components.items()},
            }
        return hashed

    @property
    def data_hash(self) -> str:
        """The attacked images' identity: the training data's and the attack subset's size."""
        return attack_data_hash(self.model.train.spec, self.spec["n_attack"])


def set_apart_from(settings: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """The settings of `defaults` that differ from their default (absent: the default)."""
    return {key: _plain(settings[key]) for key, default in defaults.items() if settings.get(key, default) != default}


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def without_rules(spec: dict[str, Any]) -> dict[str, Any]:
    """An option's spec as hashed: its rules left out, so that stating or changing them keeps
    every cached cell."""
    return {key: value for key, value in spec.items() if key != RULES}


def defence_values(name: str, spec: DictConfig) -> list[dict[str, Any]]:
    """One dict per value of a defence's grid."""
    if spec.stage == "none":
        return [dict(UNDEFENDED)]
    return [
        {
            "name": name,
            "stage": spec.stage,
            "param": spec.param,
            "value": value,
            "target": spec._target_,
            "kwargs": _plain(spec.get("kwargs")) or {},
        }
        for value in as_list(spec["values"])
    ]


def _stages(cfg: DictConfig) -> set[str]:
    return {spec.stage for spec in cfg.defence.values()}


def training_cells(cfg: DictConfig) -> list[TrainCell]:
    """Undefended weights are trained when `none` or a predict-time defence needs them.
    `train.per_model` replaces the epoch and lr grids for a model (004 trains LeNet at 0.01
    for 300 epochs, ResNet-50 at 0.1 for 125); `train.pretrained_on` adds cells fine-tuned
    from another data set's final weights. An external model (a `checkpoint`) is one
    imported cell per data set and seed, undefended: a train-time defence would train it."""
    train_defences = [dict(UNDEFENDED)] if _stages(cfg) & {"none", "predict"} else []
    for name, spec in cfg.defence.items():
        if spec.stage == "train":
            train_defences += defence_values(name, spec)
    cells = []
    for (dname, _dspec), seed, (mname, _mspec), defence in itertools.product(cfg.data.items(), as_list(cfg.split.seeds), cfg.model.items(), train_defences):
        if not trains_model(cfg, defence, mname):
            continue
        if external.is_external(_mspec):
            if defence["stage"] != "train":
                cells.append(_external_cell(cfg, dname, seed, mname))
            continue
        epochs_grid, lr_grid = model_grids(cfg, mname)
        for base_data, epochs, lr in itertools.product(bases_of(cfg, dname), epochs_grid, lr_grid):
            base = None
            if base_data is not None:
                base = _train_cell(cfg, base_data, seed, mname, max(epochs_grid), lr, defence, None)
            cells.append(_train_cell(cfg, dname, seed, mname, epochs, lr, defence, base))
    return cells


def trains_model(cfg: DictConfig, defence: dict[str, Any], mname: str) -> bool:
    """A train-time defence's `models` list limits it to those of the selected models
    (adversarial training costs (steps + 1) times plain training). null, or a list naming
    none of the selected models (`model=cifar_resnet14` in a sweep trial), sets no limit."""
    if defence["stage"] != "train":
        return True
    listed = set(as_list(cfg.defence[defence["name"]].get("models") or [])) & set(cfg.model)
    return not listed or mname in listed


def model_grids(cfg: DictConfig, mname: str) -> tuple[list[int], list[float]]:
    own = (cfg.train.get("per_model") or {}).get(mname) or {}
    return as_list(own.get("epochs", cfg.train.epochs)), as_list(own.get("lr", cfg.train.lr))


def bases_of(cfg: DictConfig, dname: str) -> list[str | None]:
    """None (from scratch) and the data sets whose final weights a cell fine-tunes."""
    return as_list((cfg.train.get("pretrained_on") or {}).get(dname, [None]))


def _train_cell(cfg: DictConfig, dname: str, seed: int, mname: str, epochs: int, lr: float, defence: dict, base: TrainCell | None) -> TrainCell:
    mspec = cfg.model[mname]
    hyper = {k: _plain(cfg.train[k]) for k in ("momentum", "weight_decay", "batch_size")} | set_apart_from(cfg.train, TRAIN_DEFAULTS)
    if "lr_schedule" in hyper:
        # the decay comes at half of the run, whose length is the model's largest epoch:
        # the other epochs are that run's checkpoints (004)
        hyper["horizon"] = max(model_grids(cfg, mname)[0])
    spec = {
        **_data_spec(cfg, dname, seed),
        "model": without_rules(_plain(mspec)),
        "train": {"epochs": epochs, "lr": lr, **hyper},
        "defence": defence,
        "v": TRAIN_VERSION,
    }
    if base is not None:
        spec["pretrained"] = base.hash
    return TrainCell(dname, seed, mname, mspec.depth, epochs, float(lr), defence, spec, base)


# a data option's keys that never enter its hash besides its `unhashed` ones: its rules, and
# n_classes, which prepare checks against the data (it never changes them)
DATA_UNHASHED = (RULES, UNHASHED, "n_classes")


def data_block(dname: str, dspec: DictConfig) -> dict[str, Any]:
    """The data set as a training hash sees it: its name, source and subsample, and every
    other key of its option that is set (null, a data key's default, stays out) but
    DATA_UNHASHED and those its option lists as `unhashed`. No list of image keys: a new key
    a loader reads changes the hash unless the option says it never changes the images."""
    unhashed = {*DATA_UNHASHED, *as_list(dspec.get(UNHASHED) or [])}
    block = {"name": dname, "source": dspec.source, "subsample": _plain(dspec.get("subsample"))}
    return block | {key: _plain(value) for key, value in dspec.items() if key not in block and key not in unhashed and value is not None}


def _data_spec(cfg: DictConfig, dname: str, seed: int) -> dict[str, Any]:
    return {
        "data": data_block(dname, cfg.data[dname]),
        "split": {"seed": seed, "test_size": cfg.split.test_size},
    }


def _data_identity(spec: dict[str, Any]) -> dict[str, Any]:
    return {"data": spec["data"], "split": spec["split"], "v": PREPARE_VERSION}


def attack_data_hash(train_spec: dict[str, Any], n_attack: int) -> str:
    return config_hash({**_data_identity(train_spec), "n_attack": n_attack})


def prepared_hash(cfg: DictConfig, dname: str) -> str:
    """The name of the folder prepare writes a data set into: a hash of exactly the config it
    reads (the data option, the test share, the attack subset's size), so that data prepared
    for one config is never read for another (a sweep trial, then `dvc repro`)."""
    spec = cfg.data[dname]
    return config_hash(
        {"data": data_block(dname, spec), "n_classes": spec.n_classes, "test_size": cfg.split.test_size, "n_attack": cfg.split.n_attack, "v": PREPARE_VERSION}
    )


def split_hashes(cfg: DictConfig, dname: str, seed: int) -> dict[str, str]:
    """The identities prepare writes into a split and its readers check: its training data's
    and its attack subset's."""
    spec = _data_spec(cfg, dname, seed)
    return {"data_hash": config_hash(_data_identity(spec)), "attack_data_hash": attack_data_hash(spec, cfg.split.n_attack)}


def _external_cell(cfg: DictConfig, dname: str, seed: int, mname: str) -> TrainCell:
    """An imported model: its identity is the checkpoint's content (its sha256; the path may
    move), the module and the supplied training cost. No train.* key enters it: changing the
    epoch or lr grids keeps it."""
    key, mspec = f"model.{mname}", cfg.model[mname]
    spec = {
        **_data_spec(cfg, dname, seed),
        "model": {
            **external.module_spec(mspec),
            "depth": mspec.get("depth"),
            "checkpoint_sha256": external.current_sha256(key, mspec),
        },
        "t_train": external.t_train(key, mspec),
        "defence": dict(UNDEFENDED),
        "v": TRAIN_VERSION,
    }
    # depth: as given, else counted from the module when the train stage imports it (None here:
    # counting builds the user's torch module, which the table stages never load)
    return TrainCell(dname, seed, mname, mspec.get("depth"), None, None, dict(UNDEFENDED), spec)


def model_cells(cfg: DictConfig) -> list[ModelCell]:
    predict_defences = [value for name, spec in cfg.defence.items() if spec.stage == "predict" for value in defence_values(name, spec)]
    evaluate_undefended = "none" in _stages(cfg)
    cells = []
    for train in training_cells(cfg):
        if train.defence["stage"] == "train":
            cells.append(ModelCell(train, train.defence))
            continue
        if evaluate_undefended:
            cells.append(ModelCell(train, train.defence))
        cells += [ModelCell(train, defence) for defence in predict_defences]
    return cells


def attack_specs(cfg: DictConfig) -> list[dict[str, Any]]:
    """One dict per (attack, norm, strength) of the attack grid."""
    specs = []
    for name, spec in cfg.attack.items():
        extra = {k: _plain(spec[k]) for k in ("max_iter", "step_scale", "batch_size", "engine", "early_exit", "version", *DESCRIPTIVE_KEYS) if k in spec}
        extra |= set_apart_from(spec, ATTACK_DEFAULTS)
        for norm, value in itertools.product(as_list(spec.norms), as_list(spec["values"])):
            specs.append(
                {
                    "name": name,
                    "target": spec._target_,
                    "norm": str(norm),
                    "param": spec.param,
                    "value": value,
                    "n_attack": cfg.split.n_attack,
                    "kwargs": _plain(spec.get("kwargs")) or {},
                    **extra,
                    **({RULES: _plain(spec[RULES])} if spec.get(RULES) is not None else {}),
                }
            )
    return specs


def attack_cells(cfg: DictConfig) -> list[AttackCell]:
    """Every attack on every model cell; an attack with `only_randomised: true` only on the
    cells whose defence declares `randomised: true` (AutoAttack's rand version)."""
    specs = attack_specs(cfg)
    # looked up once per option, not per cell: a config lookup costs more than a cell (10^5 of them)
    only_randomised = {name: bool(spec.get("only_randomised")) for name, spec in cfg.attack.items()}
    randomised_defences = {name for name, spec in cfg.defence.items() if spec.get("randomised")}
    return [
        AttackCell(model, s["name"], s["norm"], s["param"], float(s["value"]), s)
        for model in model_cells(cfg)
        for s in specs
        if model.defence["name"] in randomised_defences or not only_randomised[s["name"]]
    ]


def split_groups(cfg: DictConfig, by: str) -> int:
    """How many `by` groups (train_hash, model_hash, attack_hash) the grid's attacked samples
    fall into, where under 2; 2 where more (each data set, seed and model trains or imports a
    cell of its own, attacked: a paper grid's millions of attack cells are never built here)."""
    if len(cfg.data) * len(as_list(cfg.split.seeds)) * len(cfg.model) >= 2:
        return 2
    if by == "train_hash":
        return len(training_cells(cfg))
    groups = len(model_cells(cfg))
    return len(attack_cells(cfg)) if by == "attack_hash" and groups < 2 else groups
