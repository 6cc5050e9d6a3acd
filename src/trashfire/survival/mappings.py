"""lifelines' design (its `regressors.transform_df`) built once as one float64 array.

lifelines' `CovariateParameterMappings.transform_df` copies the whole covariate frame for each
parameter to add its intercept, materialises an intercept-only formula ("1", an AFT model's
scale) through formulaic, concatenates the parts and casts them: at 6·10^5 samples 0.23 s a
call, and the survival stage calls it some 200 times (every fit, score, prediction). Here a
parameter given as a list of columns, or as the formula "1", is read column by column into one
array, with lifelines' columns, order and values (the same float64s); any other formula goes to
lifelines. The fitters of `trashfire.survival` take it through `FastDesignMixin`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from lifelines.utils import CovariateParameterMappings

INTERCEPT = CovariateParameterMappings.INTERCEPT_COL


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

    def transform_df(self, df: pd.DataFrame):
        layout = {param: self.columns_of(param) for param in self.mappings} if isinstance(df, pd.DataFrame) else {}
        if not layout or any(columns is None for columns in layout.values()) or not all(layout.values()):
            return super().transform_df(df)
        names = [(param, column) for param, columns in layout.items() for column, _ in columns]
        design = np.empty((len(df), len(names)), order="F")
        for position, (column, constant) in enumerate(column for columns in layout.values() for column in columns):
            design[:, position] = 1.0 if constant else df[column].to_numpy(dtype=float)
        return pd.DataFrame(design, index=df.index, columns=pd.MultiIndex.from_tuples(names, names=("param", "covariate")), copy=False)


class FastDesignMixin:
    """A lifelines regression fitter whose `regressors` build their design with FastMappings."""

    @property
    def regressors(self):
        # a model pickled before this mixin keeps its mappings under "regressors"
        return self.__dict__.get("_regressors", self.__dict__.get("regressors"))

    @regressors.setter
    def regressors(self, value) -> None:
        self.__dict__["_regressors"] = FastMappings.of(value) if type(value) is CovariateParameterMappings else value
