"""The survival section's checks (registered with trashfire.core.checks)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core.checks import as_list, choice, integer, nonempty_mapping, number, register
from trashfire.core.errors import ConfigError
from trashfire.survival.spec import OPTIMISERS, REPLACED, SPLIT_GROUPS, score_names


@register("survival")
def check(cfg: DictConfig) -> None:
    _validate_survival(cfg.survival)


def _validate_survival(survival: DictConfig) -> None:
    models = survival.get("models")
    nonempty_mapping("survival.models", models)
    fitters = as_list(survival.get("fitters") or [])  # empty: survival left out, E[T] and TRASH missing downstream
    for fitter in fitters:
        choice("survival.fitters", fitter, tuple(models))
        _validate_survival_model(f"survival.models.{fitter}", models[fitter])
    for position, retry in enumerate(as_list(survival.get("retries") or [])):
        _validate_retry(f"survival.retries[{position}]", retry)
    aft = tuple(f for f in fitters if models[f].get("aft"))
    if survival.get("chosen") is not None:
        choice("survival.chosen", survival.chosen, aft)
    _validate_select_by(survival.get("select_by"))
    choice("survival.split_by", survival.get("split_by"), SPLIT_GROUPS)
    number("survival.test_size", survival.get("test_size"), low=0, high=1, open_low=True, open_high=True)
    integer("survival.folds", survival.get("folds"), low=2)
    if survival.get("score_samples") is not None:  # null: every sample
        integer("survival.score_samples", survival.score_samples, low=1000)
    _validate_score_range(survival.get("score_range"))
    integer("survival.seed", survival.get("seed"), low=0)
    number("survival.t0_quantile", survival.get("t0_quantile"), low=0, high=1, open_low=True, open_high=True)
    number("survival.km_check_tolerance", survival.get("km_check_tolerance"), low=0, open_low=True)


def _validate_select_by(select_by: Any) -> None:
    """A cross-validated score or an information criterion; a name from before issue 59 says what replaced it."""
    if select_by in REPLACED:
        why = (
            "it selected on the test split the model is then judged on"
            if str(select_by).startswith("test_")
            else "it scored a model on the rows it was fitted to"
        )
        raise ConfigError(
            "survival.select_by",
            f"{select_by} was replaced by {REPLACED[select_by]} ({why}; {REPLACED[select_by]} is the same score by grouped cross-validation inside the training split); allowed: {', '.join(score_names())}",
        )
    choice("survival.select_by", select_by, score_names())


def _validate_score_range(value: Any) -> None:
    """Two quantiles of the training durations, 0 < low < high < 1."""
    pair = as_list(value) if value is not None else []
    numbers = [v for v in pair if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(pair) != 2 or len(numbers) != 2 or not 0 < numbers[0] < numbers[1] < 1:
        raise ConfigError(
            "survival.score_range", f"got {value!r}; allowed: two quantiles of the training durations [low, high] with 0 < low < high < 1, e.g. [0.1, 0.9]"
        )


def _validate_survival_model(key: str, spec: Any) -> None:
    if not isinstance(spec, DictConfig) or not isinstance(spec.get("fitter"), DictConfig) or not isinstance(spec.fitter.get("_target_"), str):
        raise ConfigError(f"{key}.fitter._target_", "missing; name the lifelines fitter class, e.g. lifelines.WeibullAFTFitter")
    number(f"{key}.fitter.penalizer", spec.fitter.get("penalizer", 0.0), low=0)
    if not isinstance(spec.get("aft"), bool):
        raise ConfigError(f"{key}.aft", f"got {spec.get('aft')!r}; allowed: true (an AFT model, gives E[T]), false")
    if spec.get("optimiser") is not None:
        choice(f"{key}.optimiser", spec.optimiser, OPTIMISERS)
    if spec.get("t0_quantile") is not None:
        number(f"{key}.t0_quantile", spec.t0_quantile, low=0, high=1, open_low=True, open_high=True)
    _fit_options(f"{key}.fit_options", spec.get("fit_options"))


def _fit_options(key: str, options: Any) -> None:
    if options is not None and not isinstance(options, DictConfig):
        raise ConfigError(key, f"got {options!r}; allowed: a mapping of the optimiser's options, e.g. {{maxiter: 500}}")


def _validate_retry(key: str, retry: Any) -> None:
    if not isinstance(retry, DictConfig) or not set(retry) or set(retry) - {"optimiser", "penalizer", "fit_options"}:
        raise ConfigError(key, f"got {retry!r}; allowed: a mapping of optimiser ({', '.join(OPTIMISERS)}), penalizer (>= 0), fit_options")
    if retry.get("optimiser") is not None:
        choice(f"{key}.optimiser", retry.optimiser, OPTIMISERS)
    if "penalizer" in retry:
        number(f"{key}.penalizer", retry.penalizer, low=0)
    _fit_options(f"{key}.fit_options", retry.get("fit_options"))
