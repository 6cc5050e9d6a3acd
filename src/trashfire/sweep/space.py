"""The search space: Optuna distributions from sweep overrides in Hydra's override grammar
(choice, range, interval), the grid's points, and the optimisation directions."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from trashfire.core.errors import ConfigError

DIRECTIONS = ("minimize", "maximize")


def last_of_each_key(lines: Sequence[str]) -> list[str]:
    """As on Hydra's command line, a later override of a key replaces an earlier one (a fixed
    value in hydra.sweeper.params would otherwise win over a later choice(...) of the key)."""
    last = {line.split("=", 1)[0].lstrip("+~"): line for line in lines}
    return list(last.values())


def _encoded(override: Override) -> list[Any]:
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    for value in values:
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise ConfigError(override.get_key_element(), f"a sweep's values must be str, int, float, bool or null; got {value!r}")
    return values


def distribution_of(override: Override) -> BaseDistribution | str:
    """Optuna's distribution for a sweep override, in Hydra's override grammar, or the value of
    a fixed one: choice(a, b) is categorical; range(start, stop[, step]) is the integers (or
    floats) from start up to, not including, stop (as Hydra's own sweepers read it; shuffled:
    categorical); interval(low, high) is uniform over [low, high], ints if both bounds are, and
    tag(log, interval(...)) log-uniform."""
    if not override.is_sweep_override():
        return override.get_value_element_as_str()
    value = override.value()
    if override.is_choice_sweep():
        assert isinstance(value, ChoiceSweep)
        return CategoricalDistribution(_encoded(override))
    if override.is_range_sweep():
        assert isinstance(value, RangeSweep)
        values = _encoded(override)
        if value.shuffle or not values:
            return CategoricalDistribution(values)
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            return FloatDistribution(float(value.start), float(values[-1]), step=float(value.step))
        return IntDistribution(int(value.start), int(values[-1]), step=int(value.step))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log_scale)
        return FloatDistribution(float(value.start), float(value.end), log=log_scale)
    raise ConfigError(override.get_key_element(), f"{override.input_line!r}: the trashfire sweeper takes choice(...), range(...) and interval(...)")


def search_space(lines: Sequence[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """The swept parameters' distributions and the fixed overrides, from override lines."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(lines)):
        found = distribution_of(override)
        if isinstance(found, BaseDistribution):
            space[override.get_key_element()] = found
        else:
            fixed[override.get_key_element()] = found
    return space, fixed


def grid_choices(name: str, distribution: BaseDistribution) -> list[Any]:
    """A grid axis: a categorical's choices, a stepped range's values."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, (IntDistribution, FloatDistribution)) and distribution.step is not None and not distribution.log:
        n = round((distribution.high - distribution.low) / distribution.step) + 1
        return [distribution.low + i * distribution.step for i in range(n)]
    raise ConfigError(f"hydra.sweeper.params.{name}", "the grid sampler needs discrete values: choice(...) or range(...), not interval(...)")


def grid_points(grid: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's choices, in a stable order."""
    return [dict(zip(grid, combination)) for combination in itertools.product(*grid.values())]


def point_key(params: dict[str, Any], names: Sequence[str]) -> tuple | None:
    if set(params) != set(names):
        return None
    return tuple((name, str(params[name])) for name in sorted(names))


def trial_params(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's parameters, also for a trial queued by `enqueue_trial` that has not suggested them."""
    return trial.params or dict(trial.system_attrs.get("fixed_params", {}))


def suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """Trial.suggest_* for a distribution."""
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    raise TypeError(f"no suggest_* for {distribution!r}")


def directions_of(direction: Any) -> list[str]:
    """`hydra.sweeper.direction`: one direction or a list, each minimize or maximize."""
    listed = list(direction) if OmegaConf.is_list(direction) or isinstance(direction, (list, tuple)) else [direction]
    names = [str(getattr(d, "name", d)).lower() for d in listed]
    bad = [n for n in names if n not in DIRECTIONS]
    if bad or not names:
        raise ConfigError(
            "hydra.sweeper.direction",
            f"got {OmegaConf.to_container(direction) if OmegaConf.is_config(direction) else direction!r}; each must be minimize or maximize",
        )
    return names
