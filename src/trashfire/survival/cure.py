"""Mixture cure models: most samples of a fixed-budget attack are never broken, and an AFT model,
whose every sample fails at last, must bend its curve towards 0 where the Kaplan-Meier curve
levels off.

    S(t | x) = pi(x) + (1 - pi(x)) S_u(t | x),   logit pi(x) = x . c,   S_u an AFT latency in x

pi is the cured (never broken) share; S_u the survival of the breakable samples, with scale
exp(x . b) as lifelines' AFT fitters:
- `WeibullCureFitter`: S_u = exp(-(t / lambda)^rho), one shape rho (WeibullAFTFitter's);
- `LogLogisticCureFitter`: S_u = 1 / (1 + (t / alpha)^beta), its shape beta per attack family
  (LogLogisticAFTFitter's, with the family dummies). Its hazard falls after its mode, as PGD's
  failures by step do once the steps reach the eps ball's faces, where the Weibull's keeps rising
  (on the default run its AIC is some 15,000 below the Weibull cure's; README, Survival analysis).

Each is lifelines' `ParametricRegressionFitter` with that cumulative hazard, -log S (its hazard by
autograd), so fitting, standard errors, AIC and calibration are lifelines'. It starts from the
plain AFT fit with a cured share of half the censored share (from pi = 0, the plain model, the
cured share's gradient can point the wrong way).

Its mean is infinite wherever pi > 0, so it gives no E[T] for TRASH; it gives the cured share
(`cured_fraction`), the breakable samples' mean E[T_u] (`predict_expectation_breakable`) and the
restricted mean to any time in closed form, by which it ranks samples for concordance (its median
is infinite where more than half are cured).
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pandas as pd
from autograd.scipy.special import expit as anp_expit
from lifelines.fitters import ParametricRegressionFitter
from lifelines.utils.safe_exp import safe_exp
from scipy import sparse
from scipy.special import expit, gamma, logit

from trashfire.core.stats import covariance_root
from trashfire.survival.aft import NewtonLogLogisticAFTFitter, NewtonWeibullAFTFitter, log_logistic_restricted_mean, weibull_restricted_mean
from trashfire.survival.fitters import DURATION, EVENT, _covariate_columns, _no_conditioning, covariates_of, sample_weights
from trashfire.survival.km import grouped_km
from trashfire.survival.mappings import row_index
from trashfire.survival.newton import in_row_blocks
from trashfire.survival.newton_fit import NewtonRegressionMixin, start_rows
from trashfire.tables.survival_data import NUMERIC_COVARIATES


class MixtureCureFitter(NewtonRegressionMixin, ParametricRegressionFitter):
    """A logistic cured share and an AFT latency (`latency_survival`), both in every covariate;
    the latency's shape in `shape_covariates`. Subclasses name the scale and shape parameters
    as lifelines' plain fitter (`plain_fitter`) does, for its start, and give the latency's log
    density and log survival as functions of u = rho (log t - log scale) with their first two
    derivatives (`latency_in_u`), from which `row_derivatives` gives the Newton-Raphson fit
    (trashfire.survival.newton_fit) each row's derivatives in the three linear predictors."""

    scale_: str
    shape_: str
    plain_fitter: type
    fit_intercept = True
    cure_model = True  # concordance.survival_ranking ranks it by its restricted mean
    LIFELINES_LIKELIHOOD = False  # the model's own likelihood: lifelines floors its hazard at 1e-20 (docs/survival.md)

    def shape_covariates(self, covariates: list[str]) -> list[str]:
        """The covariates the latency's shape takes beside its intercept: none."""
        return []

    def fit(self, df: pd.DataFrame, duration_col: str, event_col: str | None = None, weights_col: str | None = None, **kwargs):
        covariates = _covariate_columns(df, duration_col, event_col, weights_col)
        # lifelines' own null model (print_summary's likelihood-ratio test) gives regressors of its own
        regressors = kwargs.pop("regressors", None) or {"cured_": covariates, self.scale_: covariates, self.shape_: self.shape_covariates(covariates)}
        # in sorted order, as autograd flattens them: lifelines labels its Hessian (standard
        # errors, covariance) in this dict's order and would mislabel them otherwise
        regressors = dict(sorted(regressors.items()))
        self._warm_start = self._plain_start(df, duration_col, event_col, weights_col) if "initial_point" not in kwargs else None
        self._longest = float(df[duration_col].max())
        return super().fit(df, duration_col, event_col, regressors=regressors, weights_col=weights_col, **kwargs)

    def _plain_start(self, df: pd.DataFrame, duration_col: str, event_col: str | None, weights_col: str | None) -> tuple[pd.Series, float]:
        covariates = _covariate_columns(df, duration_col, event_col, weights_col)  # past ROW_BLOCK rows, fitted on a sample of them
        plain = self.plain_fitter(penalizer=self.penalizer).fit(start_rows(df, covariates), duration_col, event_col, weights_col=weights_col)
        weights = df[weights_col].to_numpy(float) if weights_col else np.ones(len(df))
        censored = float(weights[df[event_col].to_numpy() == 0].sum() / weights.sum()) if event_col else 0.0
        return plain.params_, max(censored / 2, 0.01)  # at most 0.5: half of all

    def _create_initial_point(self, Ts, E, entries, weights, Xs):
        if self._warm_start is None:  # an explicit initial point: lifelines takes only the shape of this one
            return super()._create_initial_point(Ts, E, entries, weights, Xs)
        params, cured = self._warm_start
        # lifelines optimises on covariates divided by their SDs: coefficients times the SDs
        columns = Xs[self.scale_].columns
        scale = params.loc[self.scale_].reindex(columns).fillna(0.0) * self._norm_std.loc[self.scale_].reindex(columns)
        start = np.zeros(len(Xs["cured_"].columns))
        start[list(Xs["cured_"].columns).index("Intercept")] = logit(cured)
        shape = np.zeros(len(Xs[self.shape_].columns))  # the plain fit's one shape for every row
        shape[list(Xs[self.shape_].columns).index("Intercept")] = float(params.loc[(self.shape_, "Intercept")])
        return {"cured_": start, self.scale_: scale.to_numpy(float), self.shape_: shape}

    @staticmethod
    def latency_survival(t, scale, shape):
        """S_u(t) for arrays of autograd or numpy."""
        raise NotImplementedError

    @staticmethod
    def latency_survival_in_u(u: np.ndarray) -> np.ndarray:
        """S_u as a function of u = rho (log t - log scale)."""
        raise NotImplementedError

    @staticmethod
    def latency_in_u(u: np.ndarray) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """The latency's log density less (log rho - log t), and its log survival, as functions
        g(u) of u = rho (log t - log scale): each (g, g', g'')."""
        raise NotImplementedError

    def row_derivatives(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int = 2):
        """Each row's log-likelihood, log((1 - pi) f_u) for a failure and log(pi + (1 - pi) S_u)
        for a censored sample, and its first and second derivatives in the linear predictors
        (lifelines' order), in closed form: as fast as torch autograd's, a third less memory
        (its graph), no torch in a fit worker, and exact where torch's softplus is u past u = 20."""
        names = ("cured_", self.scale_, self.shape_)
        position = [sorted(names).index(name) for name in names]
        cured, log_scale, log_shape = (etas[position[i]] for i in range(3))
        rho = np.exp(log_shape)
        u = rho * (log_t - log_scale)
        density, survival = self.latency_in_u(u)
        log_cured, log_breakable = -np.logaddexp(0.0, -cured), -np.logaddexp(0.0, cured)
        failed = log_breakable + log_shape - log_t + density[0]
        breakable_standing = log_breakable + survival[0]
        # log(e^a + e^b) about their max, as the autograd version had it
        top = np.maximum(log_cured, breakable_standing)
        standing = top + np.log(np.exp(log_cured - top) + np.exp(breakable_standing - top))
        value = np.where(event, failed, standing)
        if not order:
            return value, None, None
        pi = np.exp(log_cured)
        # u's derivatives: du/ds = -rho, du/dk = u (s: log scale, k: log shape)
        f_s, f_k = -rho * density[1], u * density[1] + 1.0
        g_s, g_k = -rho * survival[1], u * survival[1]
        w = np.exp(breakable_standing - standing)  # the breakable share of a standing sample's likelihood
        first = np.empty((len(u), 3))
        first[:, 0] = np.where(event, -pi, 1.0 - pi - w)  # d/dc of log(1 - pi) is -pi; of log pi, 1 - pi
        first[:, 1] = np.where(event, f_s, w * g_s)
        first[:, 2] = np.where(event, f_k, w * g_k)
        second = None
        if order > 1:
            second = np.empty((len(u), 3, 3))
            spread = pi * (1.0 - pi)
            mix = w * (1.0 - w)
            (f_ss, f_sk, f_kk), (g_ss, g_sk, g_kk) = (_second_in_scale_and_shape(part, u, rho) for part in (density, survival))
            # standing: (1 - w) d2A + w d2B + w (1 - w) (dB - dA)(dB - dA)', A = log pi, B = log(1 - pi) + log S_u
            entries = {
                (0, 0): (-spread, -spread + mix),
                (0, 1): (0.0, -mix * g_s),
                (0, 2): (0.0, -mix * g_k),
                (1, 1): (f_ss, w * g_ss + mix * g_s * g_s),
                (1, 2): (f_sk, w * g_sk + mix * g_s * g_k),
                (2, 2): (f_kk, w * g_kk + mix * g_k * g_k),
            }
            for (i, j), (if_failed, if_standing) in entries.items():
                second[:, i, j] = second[:, j, i] = np.where(event, if_failed, if_standing)
        order_of = np.argsort(position)  # back to lifelines' (sorted) order
        first = first[:, order_of]
        if second is not None:
            second = second[:, order_of][:, :, order_of]
        return value, first, second

    def _cumulative_hazard(self, params, T, Xs):
        cured = anp_expit(anp.dot(Xs["cured_"], params["cured_"]))
        scale = safe_exp(anp.dot(Xs[self.scale_], params[self.scale_]))
        shape = safe_exp(anp.dot(Xs[self.shape_], params[self.shape_]))
        return -anp.log(cured + (1.0 - cured) * self.latency_survival(T, scale, shape))

    def _linear(self, df: pd.DataFrame, parameter: str) -> np.ndarray:
        return self.regressors.transform_df(df)[parameter].to_numpy(float) @ self.params_.loc[parameter].to_numpy()

    def _latency(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        return np.exp(self._linear(df, self.scale_)), np.exp(self._linear(df, self.shape_))

    def cured_fraction(self, df: pd.DataFrame) -> pd.Series:
        """pi(x): the share of such samples the attack never breaks, however long it runs."""
        return pd.Series(expit(self._linear(df, "cured_")), index=row_index(df))

    def predict_expectation_breakable(self, df: pd.DataFrame) -> pd.Series:
        """E[T_u | x]: the mean time to failure of the breakable samples."""
        return pd.Series(self.latency_mean(*self._latency(df)), index=row_index(df))

    def restricted_mean(self, df: pd.DataFrame, t_star: float | np.ndarray) -> pd.Series:
        """int_0^t* S(u | x) du = pi t* + (1 - pi) int_0^t* S_u(u | x) du."""
        cured = self.cured_fraction(df).to_numpy()
        breakable = self.latency_restricted_mean(np.asarray(t_star, float), *self._latency(df))
        return pd.Series(cured * t_star + (1.0 - cured) * breakable, index=row_index(df))

    def falls_within(self, df: pd.DataFrame, standing: np.ndarray, factor: float, draws: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
        """P(T < factor b | T > b, x) = (1 - pi) (S_u(b) - S_u(factor b)) / S(b) per row of `df`
        (b its `standing` time): the chance that a sample still standing at b falls before
        factor x b. One column per parameter vector of `draws` (rows in `params_`' order;
        default the fit's own), computed in `dtype` (float32 for a bootstrap's draws). Where
        S(b) underflows to 0 the model says the sample cannot stand: 1."""
        thetas = self.params_.to_numpy(float)[None, :] if draws is None else np.atleast_2d(draws)
        design, names = self.regressors.transform_df(df), self.params_.index.get_level_values(0)
        columns = [(design[part].to_numpy(dtype), thetas[:, names == part].T.astype(dtype)) for part in ("cured_", self.scale_, self.shape_)]
        standing, log_factor = np.log(np.asarray(standing, dtype)), dtype(np.log(factor))
        shares = np.empty((len(standing), len(thetas)), dtype)
        step = max(1, CACHED_BYTES // (shares.itemsize * max(1, len(thetas))))
        for start in range(0, len(standing), step):  # rows x draws in blocks that stay in the CPU's cache
            rows = slice(start, start + step)
            cured, log_scale, shape = ((x[rows] @ theta) for x, theta in columns)
            with np.errstate(over="ignore"):  # e^-eta = inf: cured 0
                cured = 1.0 / (1.0 + np.exp(-cured))  # scipy's expit: 5x slower
            shape = np.exp(shape)
            # in u = shape (log t - log scale), as the fit's own likelihood: no scale to exponentiate
            # and no powers (t / scale)^shape at b and at factor b
            at_budget = shape * (standing[rows, None] - log_scale)
            at_larger = self.latency_survival_in_u(at_budget + shape * log_factor)
            at_budget = self.latency_survival_in_u(at_budget)
            breakable = 1.0 - cured
            surviving = breakable * at_budget + cured
            shares[rows] = 1.0
            np.divide(breakable * (at_budget - at_larger), surviving, out=shares[rows], where=surviving > 0)
        return shares

    def parameter_draws(self, draws: int, seed: int) -> np.ndarray:
        """`draws` parameter vectors from the fit's asymptotic normal (lifelines' naive
        covariance), for a parametric bootstrap."""
        covariance = self.variance_matrix_.to_numpy(float)  # lifelines orders it as params_
        # the covariance's symmetric root, not Cholesky-or-eigh: whether Cholesky succeeds on a
        # (near-)singular matrix is decided by rounding, and so were the draws (issue 58)
        normal = np.random.default_rng(seed).standard_normal((draws, len(covariance)))
        return self.params_.to_numpy(float) + normal @ covariance_root(covariance)

    def survival_ranking(self, df: pd.DataFrame) -> np.ndarray:
        """Higher = longer survival: the restricted mean to the longest training duration."""
        return self.restricted_mean(df, self._longest).to_numpy(float)

    def predict_expectation(self, df, conditional_after=None) -> pd.Series:
        """Infinite where pi > 0 (every sample): a cured sample never fails."""
        _no_conditioning(conditional_after)
        cured = self.cured_fraction(df)
        return pd.Series(np.where(cured > 0, np.inf, self.predict_expectation_breakable(df)), index=row_index(df))

    def predict_median(self, df, *, conditional_after=None) -> pd.Series:
        return self.predict_percentile(df, p=0.5, conditional_after=conditional_after)

    def predict_percentile(self, df, *, p: float = 0.5, conditional_after=None) -> pd.Series:
        """The time t with S(t | x) = p; infinite where pi >= p."""
        _no_conditioning(conditional_after)
        cured = self.cured_fraction(df).to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            latency_share = (p - cured) / (1.0 - cured)  # S_u at that time
            times = self.latency_time(latency_share, *self._latency(df))
        return pd.Series(np.where(cured >= p, np.inf, times), index=row_index(df))


def _second_in_scale_and_shape(part: tuple[np.ndarray, ...], u: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, ...]:
    """d2/ds2, d2/ds dk and d2/dk2 of g(u), u = rho (log t - s), rho = e^k, from `part` = (g, g', g'')."""
    _, slope, bend = part
    return rho * rho * bend, -rho * (u * bend + slope), u * u * bend + u * slope


class WeibullCureFitter(MixtureCureFitter):
    """Weibull latency exp(-(t / lambda)^rho), log lambda = x . b, one shape rho."""

    _fitted_parameter_names = ["cured_", "lambda_", "rho_"]  # sorted: autograd flattens them so
    scale_, shape_, plain_fitter = "lambda_", "rho_", NewtonWeibullAFTFitter

    @staticmethod
    def latency_in_u(u):
        """log f_u = log rho - log t + u - e^u, log S_u = -e^u."""
        power = np.exp(np.minimum(u, 700.0))  # (t / lambda)^rho, held below overflow
        slope = np.where(u <= 700.0, power, 0.0)
        return (u - power, 1.0 - slope, -slope), (-power, -slope, -slope)

    @staticmethod
    def latency_survival_in_u(u):
        """S_u = exp(-(t / lambda)^rho) = exp(-e^u)."""
        with np.errstate(over="ignore"):  # e^u = inf: S_u = 0
            return np.exp(-np.exp(u))

    @staticmethod
    def latency_survival(t, scale, shape):
        return anp.exp(-((t / scale) ** shape))

    @staticmethod
    def latency_mean(scale, shape):
        """lambda Gamma(1 + 1/rho)."""
        return scale * gamma(1.0 + 1.0 / shape)

    @staticmethod
    def latency_restricted_mean(t_star, scale, shape):
        """lambda Gamma(1 + 1/rho) P(1/rho, (t*/lambda)^rho)."""
        return weibull_restricted_mean(t_star, scale, shape)

    @staticmethod
    def latency_time(share, scale, shape):
        """The t with S_u(t) = share."""
        return scale * (-np.log(share)) ** (1.0 / shape)


class LogLogisticCureFitter(MixtureCureFitter):
    """Log-logistic latency 1 / (1 + (t / alpha)^beta), log alpha = x . b, log beta = the
    attack family's: its shape per family, since one attack's failures bunch within a few steps
    and another's spread over its budget."""

    _fitted_parameter_names = ["alpha_", "beta_", "cured_"]  # sorted: autograd flattens them so
    scale_, shape_, plain_fitter = "alpha_", "beta_", NewtonLogLogisticAFTFitter

    @staticmethod
    def latency_in_u(u):
        """log f_u = log beta - log t + u - 2 log(1 + e^u), log S_u = -log(1 + e^u)."""
        spread, rising = np.logaddexp(0.0, u), expit(u)  # log(1 + (t / alpha)^beta) and its slope
        bend = -rising * expit(-u)
        return (u - 2.0 * spread, 1.0 - 2.0 * rising, 2.0 * bend), (-spread, -rising, bend)

    def shape_covariates(self, covariates: list[str]) -> list[str]:
        """The attack-family dummies (survival.data's `attack_<family>`)."""
        return [c for c in covariates if c.startswith("attack_") and c not in NUMERIC_COVARIATES]

    @staticmethod
    def latency_survival_in_u(u):
        """S_u = 1 / (1 + (t / alpha)^beta) = 1 / (1 + e^u)."""
        with np.errstate(over="ignore"):  # e^u = inf: S_u = 0
            return 1.0 / (1.0 + np.exp(u))

    @staticmethod
    def latency_survival(t, scale, shape):
        return 1.0 / (1.0 + (t / scale) ** shape)

    @staticmethod
    def latency_mean(scale, shape):
        """alpha (pi / beta) / sin(pi / beta) where beta > 1; infinite where beta <= 1 (a tail too
        heavy for a mean)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.pi / shape
            return np.where(shape > 1.0, scale * ratio / np.sin(ratio), np.inf)

    @staticmethod
    def latency_restricted_mean(t_star, scale, shape):
        """t* 2F1(1, 1/beta; 1 + 1/beta; -z), z = (t*/alpha)^beta (aft.log_logistic_restricted_mean)."""
        return log_logistic_restricted_mean(t_star, scale, shape)

    @staticmethod
    def latency_time(share, scale, shape):
        """The t with S_u(t) = share."""
        return scale * (1.0 / share - 1.0) ** (1.0 / shape)


def km_plateau(durations: np.ndarray, events: np.ndarray, weights: np.ndarray) -> float:
    """The Kaplan-Meier survival after the last time: the share never broken within the budget,
    where the curve levels off."""
    return float(grouped_km(np.zeros(len(durations)), durations, events, weights).plateau().iloc[0])


def cure_table(fitter: MixtureCureFitter, data: pd.DataFrame, cell: str, labels: list[str]) -> pd.DataFrame:
    """Per attack cell (`cell` column; its `labels` kept): its samples, the Kaplan-Meier plateau
    at its budget, the model's cured share (the mean of pi over its samples), their difference,
    and E_T_breakable, the mean over its samples of E[T_u | x] (the breakable samples' mean time
    to failure, in the data's time unit). Every cell at once (trashfire.survival.km)."""
    covariates = covariates_of(data)
    weights = sample_weights(data).astype(float)
    cured = in_row_blocks(lambda rows: fitter.cured_fraction(rows).to_numpy(), covariates)
    breakable = in_row_blocks(lambda rows: fitter.predict_expectation_breakable(rows).to_numpy(), covariates)
    sums = pd.DataFrame({"samples": weights, "_cured": weights * cured, "_breakable": weights * breakable}).groupby(data[cell].to_numpy(), sort=True).sum()
    table = data.groupby(cell, sort=True)[labels].first().join(sums)
    table["km_plateau"] = grouped_km(data[cell], data[DURATION], data[EVENT], weights).plateau()
    table["cured_fraction"] = table.pop("_cured") / table["samples"]
    table["difference"] = table["cured_fraction"] - table["km_plateau"]
    table["E_T_breakable"] = table.pop("_breakable") / table["samples"]
    table["samples"] = table["samples"].astype(int)
    return table.rename_axis(cell).reset_index()[[cell, *labels, "samples", "km_plateau", "cured_fraction", "difference", "E_T_breakable"]]


ONE_SHOT_QUERIES = 2  # a one-step attack's: its first query and the check after its step
# censored samples per chunk of budget_sufficiency: lifelines' design and the shares of 200 draws
# (52 MB of float32) per chunk; the stage's process reuses freed memory (analysis.compare), so
# each chunk's arrays take the last one's pages (at 4,096 rows a chunk, its pandas steps were
# half of the 10^7-sample table's time)
CHUNK_ROWS = 65536
CACHED_BYTES = 1 << 18  # each falls_within temporary at once (rows x draws): within a core's L2 cache


def budget_sufficiency(
    fitter: MixtureCureFitter, data: pd.DataFrame, cell: str, labels: list[str], budgets: pd.Series, factor: float = 10.0, draws: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Per attack cell (`cell` column; its `labels` kept): `still_breakable`, the model's share of
    its samples that a budget `factor` times larger would break beyond those already broken:
    the mean over the cell of P(T < factor C | T > C, x) for its censored samples (C their
    censoring time, `falls_within`), 0 for its failures. Beside it a 95% parametric-bootstrap
    interval (`draws` parameter vectors from the fit's covariance) and the cell's budget
    (`budgets`: t* per cell) and broken share. A one-step attack (FGM: no sample took more than
    ONE_SHOT_QUERIES queries) has no budget to multiply: NaN, `one_step` true. The censored
    samples go through in chunks of CHUNK_ROWS, each summed into its cell per parameter vector:
    memory grows with cells x draws, not samples x draws."""
    thetas = np.vstack([fitter.params_.to_numpy(float), fitter.parameter_draws(draws, seed)])
    weights = sample_weights(data).astype(float)
    codes, names = pd.factorize(data[cell], sort=True)
    sums = np.zeros((len(names), len(thetas)))  # per cell and parameter vector: the weighted shares
    censored = np.flatnonzero(data[EVENT].to_numpy() == 0)
    covariates, durations = covariates_of(data), data[DURATION].to_numpy(float)
    for chunk in np.array_split(censored, max(1, -(-len(censored) // CHUNK_ROWS))):
        rows = covariates.iloc[chunk]
        into_cells = sparse.csr_matrix((weights[chunk], (codes[chunk], np.arange(len(chunk)))), shape=(len(names), len(chunk)))
        sums[:, :1] += into_cells @ fitter.falls_within(rows, durations[chunk], factor, thetas[:1])
        # the draws only place the interval's ends, whose Monte Carlo error (200 draws: 1e-2)
        # float32's rounding (1e-7) does not reach: twice as fast as float64 (a survival under
        # float32's smallest, 1e-38, counts as 0 there, where float64's is 1e-308)
        sums[:, 1:] += into_cells @ fitter.falls_within(rows, durations[chunk], factor, thetas[1:], np.float32)
    samples = np.bincount(codes, weights=weights, minlength=len(names))
    cell_shares = sums / samples[:, None]  # the fit's, then each draw's
    low, high = np.percentile(cell_shares[:, 1:], [2.5, 97.5], axis=1)
    by_cell = data.groupby(cell, sort=True)
    one_step = by_cell["queries"].max().to_numpy() <= ONE_SHOT_QUERIES if "queries" in data else np.zeros(len(names), dtype=bool)
    table = by_cell[labels].first().rename_axis(cell).reset_index()
    return table.assign(
        samples=samples.astype(int),
        budget=budgets.reindex(names).to_numpy(float),
        broken=np.bincount(codes, weights=weights * data[EVENT].to_numpy(), minlength=len(names)) / samples,
        one_step=one_step,
        still_breakable=np.where(one_step, np.nan, cell_shares[:, 0]),
        still_breakable_low=np.where(one_step, np.nan, low),
        still_breakable_high=np.where(one_step, np.nan, high),
    )
