"""lifelines' design (its `regressors.transform_df`) built once as one float64 array.

lifelines' `CovariateParameterMappings.transform_df` copies the whole covariate frame for each
parameter to add its intercept, materialises an intercept-only formula ("1", an AFT model's
scale) through formulaic, concatenates the parts and casts them: at 6·10^5 samples 0.23 s a
call, and the survival stage calls it some 200 times (every fit, score, prediction). Here a
parameter given as a list of columns, or as the formula "1", is read column by column into one
array, with lifelines' columns, order and values (the same float64s); any other formula goes to
lifelines. The fitters of `trashfire.survival` take it through `FastDesignMixin`.

Past ROW_BLOCK rows the mixin also fits with lifelines' own `_fit` steps but without its copies
of the design (`_frugal_fit`): each column's SD read a column at a time (pandas' `std(0)` holds
the centred n x p matrix), the design normalised in place (lifelines' `normalize` makes a new
one). At 10^7 samples each of those was 1.6 GB more in a fit worker.
"""

from __future__ import annotations

import warnings
import weakref
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from lifelines import utils
from lifelines.utils import CovariateParameterMappings

from trashfire.survival.newton import ROW_BLOCK, in_row_blocks

INTERCEPT = CovariateParameterMappings.INTERCEPT_COL


def row_index(df) -> pd.Index:
    """The index lifelines gives a prediction's rows (`lifelines.utils._get_index`): a frame's or
    a series' own index, else (a frame whose index repeats, an array) 0 .. n - 1; as an Index,
    where lifelines' is a list of Python ints, which pandas then turns back into one (10^7 rows:
    over a second a prediction)."""
    if isinstance(df, pd.DataFrame) and not df.index.is_unique:
        warnings.warn("DataFrame Index is not unique, defaulting to incrementing index instead.", stacklevel=3)  # lifelines' words
        return pd.RangeIndex(len(df))
    if isinstance(df, (pd.DataFrame, pd.Series)):
        return df.index
    return pd.RangeIndex(np.shape(df)[0])


class FastMappings(CovariateParameterMappings):
    """lifelines' mappings, whose transform_df builds lists of columns and intercepts directly."""

    @classmethod
    def of(cls, mappings: CovariateParameterMappings) -> FastMappings:
        fast = cls.__new__(cls)
        fast.__dict__.update(mappings.__dict__)
        return fast

    def columns_of(self, param: str) -> list[tuple[str, bool]] | None:
        """The parameter's design columns, each with whether it is lifelines' constant 1 (an
        intercept), or None for a formula lifelines must materialise."""
        transform = self.mappings[param]
        if isinstance(transform, list):
            columns = [(column, column == INTERCEPT and self.force_intercept) for column in transform]
        elif str(getattr(transform, "formula", "")) == "1" and tuple(getattr(transform, "column_names", ())) == (INTERCEPT,):
            columns = [(INTERCEPT, True)]
        else:
            return None
        if self.force_no_intercept and len(columns) > 1:
            columns = [column for column in columns if column[0] != INTERCEPT]
        return columns

    def layout(self) -> dict[str, list[tuple[str, bool]]] | None:
        """Each parameter's columns (`columns_of`), or None where one is a formula lifelines must materialise."""
        layout = {param: self.columns_of(param) for param in self.mappings}
        return None if not layout or any(not columns for columns in layout.values()) else layout

    def design_array(self, df: pd.DataFrame) -> tuple[np.ndarray, pd.MultiIndex]:
        """The design as one new (rows, columns) float64 array in column order, and its columns."""
        layout = self.layout()
        names = [(param, column) for param, columns in layout.items() for column, _ in columns]
        design = np.empty((len(df), len(names)), order="F")
        for position, (column, constant) in enumerate(column for columns in layout.values() for column in columns):
            design[:, position] = 1.0 if constant else df[column].to_numpy(dtype=float)
        return design, pd.MultiIndex.from_tuples(names, names=("param", "covariate"))

    def transform_df(self, df: pd.DataFrame):
        if not isinstance(df, pd.DataFrame) or self.layout() is None:
            return super().transform_df(df)
        design, columns = self.design_array(df)
        return pd.DataFrame(design, index=df.index, columns=columns, copy=False)


def copied_shallow(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` for a lifelines fit, whose first step copies the frame it is given only to pop its
    columns: past ROW_BLOCK rows, where pandas copies on write (the survival stage's setting),
    that copy is a shallow one, which the pops leave as the caller's (at 10^7 rows the deep copy
    was 1.5 GB more in a fit worker). Elsewhere `frame` itself."""
    if len(frame) <= ROW_BLOCK or pd.options.mode.copy_on_write is not True:
        return frame
    shallow = frame.copy(deep=False)
    itself = weakref.ref(shallow)  # not the frame: a cycle would keep it, and copy-on-write would count it as a second owner of the rows
    object.__setattr__(shallow, "copy", lambda deep=True: pd.DataFrame.copy(itself(), deep=False))  # this frame's copy() only
    return shallow


class FastDesignMixin:
    """A lifelines regression fitter whose `regressors` build their design with FastMappings."""

    @property
    def regressors(self):
        # a model pickled before this mixin keeps its mappings under "regressors"
        return self.__dict__.get("_regressors", self.__dict__.get("regressors"))

    @regressors.setter
    def regressors(self, value) -> None:
        self.__dict__["_regressors"] = FastMappings.of(value) if type(value) is CovariateParameterMappings else value

    def _fit(
        self,
        log_likelihood_function,
        df,
        Ts,
        regressors,
        event_col=None,
        show_progress=False,
        timeline=None,
        weights_col=None,
        robust=False,
        initial_point=None,
        entry_col=None,
        fit_options=None,
    ):
        mappings = None
        if len(df) > ROW_BLOCK and not robust and entry_col is None and timeline is None and Ts[1] is None and getattr(self, "strata", None) is None:
            covariates = df.drop(columns=[c for c in (event_col, weights_col) if c is not None])
            mappings = FastMappings.of(
                CovariateParameterMappings(
                    utils.coalesce(regressors, self.regressors, {p: None for p in self._fitted_parameter_names}),
                    covariates,
                    force_intercept=self.fit_intercept,
                    force_no_intercept=self.force_no_intercept,
                )
            )
        if mappings is None or mappings.layout() is None:
            return super()._fit(
                log_likelihood_function, df, Ts, regressors, event_col, show_progress, timeline, weights_col, robust, initial_point, entry_col, fit_options
            )
        return self._frugal_fit(log_likelihood_function, df, Ts, mappings, event_col, weights_col, initial_point, fit_options)

    def _frugal_fit(self, log_likelihood_function, df, Ts, mappings: FastMappings, event_col, weights_col, initial_point, fit_options):
        """lifelines' `ParametricRegressionFitter._fit` for right-censored rows without entry
        times, step for step, but for its copies of the design (module docstring)."""
        self._time_fit_was_called = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S") + " UTC"
        self._n_examples = n = df.shape[0]
        self.weights_col, self.entry_col, self.event_col, self.robust = weights_col, None, event_col, False
        self.timeline = np.unique(Ts[0])
        E = (
            utils.pass_for_numeric_dtypes_or_raise_array(df.pop(event_col))
            if event_col is not None
            else pd.Series(np.ones(n, dtype=bool), index=df.index, name="E")
        )
        weights = (
            utils.pass_for_numeric_dtypes_or_raise_array(df.pop(weights_col)).astype(float)
            if weights_col is not None
            else pd.Series(np.ones(n, dtype=float), index=df.index, name="weights")
        )
        entries = pd.Series(np.zeros(n, dtype=float), index=df.index, name="entry")
        utils.check_nans_or_infs(E)
        E = E.astype(bool)
        self.event_observed, self.entry, self.weights = E.copy(), entries.copy(), weights.copy()
        self._central_values = self._compute_central_values_of_raw_training_data(df, None)
        self.regressors = mappings
        design, columns = mappings.design_array(df)  # our own array: normalised in place below
        Xs = pd.DataFrame(design, index=df.index, columns=columns, copy=False)
        self._check_values_pre_fitting(Xs, Ts[0], E, weights, entries)
        _norm_std = pd.Series([pd.Series(design[:, j]).std() for j in range(design.shape[1])], index=columns)  # a column at a time
        self._cols_to_not_penalize = self._find_cols_to_not_penalize(_norm_std)
        self._norm_std = _norm_std.copy()
        self._norm_std[_norm_std < 1e-8] = 1.0
        _norm_std[_norm_std < 1e-8] = 1.0
        self._pre_fit_model(Ts, E, Xs)
        del Xs
        design /= _norm_std.to_numpy(float)
        normalised = pd.DataFrame(design, index=df.index, columns=columns, copy=False)
        _params, self.log_likelihood_, self._hessian_ = self._fit_model(
            log_likelihood_function,
            Ts,
            normalised,
            E.values,
            weights.values,
            entries.values,
            fit_options=utils.coalesce(fit_options, dict()),
            show_progress=False,
            user_supplied_initial_point=initial_point,
        )
        del normalised, design
        self.params_ = np.concatenate([_params[k] for k in self.regressors.keys()]) / self._norm_std
        self._compare_to_values = np.zeros_like(self.params_)
        self.variance_matrix_ = pd.DataFrame(self._compute_variance_matrix(), index=columns, columns=columns)
        self.standard_errors_ = self._compute_standard_errors(Ts, E.values, weights.values, entries.values, None)
        self.confidence_intervals_ = self._compute_confidence_intervals()
        if self._FAST_MEDIAN_PREDICT:  # a block of rows at a time: the prediction's design of every row was the fit's again (2.6 GB)
            self._predicted_median = pd.Series(in_row_blocks(lambda rows: self.predict_median(rows).to_numpy(), df), index=df.index)
        return self
