"""lifelines' generalised gamma regression with the covariates on its location (an AFT model),
fitted by Newton-Raphson (trashfire.survival.newton_fit), with closed-form median,
percentiles, mean and restricted mean."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from lifelines import GeneralizedGammaRegressionFitter
from scipy.special import gammainc, gammaincc, gammainccinv, gammaincinv, gammaln

from trashfire.survival.aft import NewtonLogNormalAFTFitter, _covariate_columns, _no_conditioning
from trashfire.survival.mappings import row_index
from trashfire.survival.newton_fit import NewtonRegressionMixin, start_rows

WARM_LAMBDA = 0.1  # lifelines divides by lambda: next to, not at, the log-normal limit
GENGAMMA_STEP = 1e-3  # the differences' step in lambda, relative (at least 0.1 of it)
SURVIVAL_CLIP = 1e-35  # lifelines' (autograd_gamma's) bounds on the incomplete gamma function in its log


def _log_density_in_z(z: np.ndarray, lam: np.ndarray):
    """Per row: log f_W(z) of the generalised gamma's standard variable W at shape lambda, as
    lifelines computes it (its clips included), with d/dz and d2/dz2: log f_W = log|l| + k log x
    - x - lgamma(k), x = e^(l z) k, k = 1 / l^2; and whether x is inside the clips (`free`)."""
    k = 1.0 / lam**2
    raw = np.exp(np.minimum(lam * z, 700.0)) * k
    x = np.clip(raw, 1e-300, 1e25)
    free = (raw > 1e-300) & (raw < 1e25)  # where x is not clipped: its derivatives
    log_f = np.log(np.abs(lam)) + (lam * z - 2 * np.log(np.abs(lam))) * k - x - gammaln(k)
    d_log_f = np.where(free, (1.0 - lam * lam * x) / lam, 1.0 / lam)
    dd_log_f = np.where(free, -lam * lam * x, 0.0)
    return (log_f, d_log_f, dd_log_f), (k, x, free)


def _failed_in_z(z: np.ndarray, lam: np.ndarray):
    """A failure's a = log f_W(z), da/dz, d2a/dz2."""
    return _log_density_in_z(z, lam)[0]


def _standing_in_z(z: np.ndarray, lam: np.ndarray):
    """A censored row's a = log S_W(z), da/dz, d2a/dz2: S_W = Q(k, x) (l > 0) or P(k, x), clipped
    as lifelines (autograd_gamma) does; d log S_W / dz = -f_W / S_W."""
    (log_f, d_log_f, _), (k, x, free) = _log_density_in_z(z, lam)
    tail = _survival_of_w(k, x, lam)
    inside = (tail > SURVIVAL_CLIP) & (tail < 1 - SURVIVAL_CLIP)
    log_s = np.log(np.clip(tail, SURVIVAL_CLIP, 1 - SURVIVAL_CLIP))
    hazard = np.where(inside & free, np.exp(log_f - log_s), 0.0)
    return log_s, -hazard, -hazard * (d_log_f + hazard)


def _survival_of_w(k: np.ndarray, x: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """S_W per row: Q(k, x) where lambda > 0, else P(k, x); each function only on its rows (the
    incomplete gamma function is most of a generalised gamma fit's time)."""
    tail = np.empty(np.shape(x))
    for rows, function in ((lam > 0, gammaincc), (~(lam > 0), gammainc)):
        if rows.any():
            tail[rows] = function(k[rows], x[rows])
    return tail


class GeneralizedGammaAFTFitter(NewtonRegressionMixin, GeneralizedGammaRegressionFitter):
    """lifelines' Generalised Gamma with the covariates on the location mu (an AFT model:
    log T = mu(x) + (sigma/lambda) log(lambda^2 U), U ~ Gamma(1/lambda^2)); sigma and lambda are
    intercepts. Median, percentiles and E[T] in closed form from that representation. Fitted by
    Newton-Raphson (trashfire.survival.newton_fit): the derivatives in mu and log sigma are
    analytic; those in lambda, which enters the incomplete gamma function's shape, are
    five-point differences of the analytic ones (scipy has no derivative in the shape)."""

    _FAST_MEDIAN_PREDICT = True
    fit_intercept = True
    # with a given start, lifelines still fits its univariate model (its own start, and the null
    # model of the likelihood-ratio test): 20 s of Nelder-Mead on 40,000 samples. A
    # cross-validation fold's fit (survival.validation) sets this False: nobody reads its test
    fits_null_model = True

    def fit(self, df: pd.DataFrame, duration_col: str, event_col: str | None = None, weights_col: str | None = None, **kwargs):
        covariates = _covariate_columns(df, duration_col, event_col, weights_col)
        # each gets lifelines' intercept; in sorted order, as autograd flattens the parameters in
        # score() (another order scores with the coefficients shuffled)
        regressors = {"lambda_": [], "mu_": covariates, "sigma_": []}
        given = "initial_point" in kwargs  # a second start, a cross-validation fold's
        self._start_shapes_only = given and not self.fits_null_model
        self._warm_start = self._log_normal_start(df, duration_col, event_col, weights_col) if not given else None
        return super().fit(df, duration_col, event_col, regressors=regressors, weights_col=weights_col, **kwargs)

    def _log_normal_start(self, df: pd.DataFrame, duration_col: str, event_col: str | None, weights_col: str | None) -> pd.DataFrame:
        """The log-normal AFT fit, the generalised gamma's limit lambda -> 0: starting next to it
        takes a fraction of the iterations (and of the ~70 s on 50,000 samples) that lifelines'
        two default starts take, to the same optimum (checked in the tests); past ROW_BLOCK rows,
        on a sample of them (newton_fit.start_rows)."""
        log_normal = NewtonLogNormalAFTFitter(penalizer=self.penalizer)
        log_normal.fit(start_rows(df, _covariate_columns(df, duration_col, event_col, weights_col)), duration_col, event_col, weights_col=weights_col)
        return log_normal.params_

    def _create_initial_point(self, Ts, E, entries, weights, Xs):
        columns = Xs["mu_"].columns
        if getattr(self, "_start_shapes_only", False):  # the start is given: lifelines reads only the parameters' shapes here
            self._ll_null_ = np.nan  # no null model: fits_null_model is False
            return {"lambda_": np.array([WARM_LAMBDA]), "mu_": np.zeros(len(columns)), "sigma_": np.zeros(1)}
        if getattr(self, "_warm_start", None) is None:
            return super()._create_initial_point(Ts, E, entries, weights, Xs)
        self._ll_null_ = np.nan  # lifelines' univariate fit, skipped, feeds only log_likelihood_ratio_test
        # lifelines optimises on covariates divided by their SDs: coefficients times the SDs
        mu = self._warm_start.loc["mu_"].reindex(columns).fillna(0.0) * self._norm_std.loc["mu_"].reindex(columns)
        sigma = float(self._warm_start.loc[("sigma_", "Intercept")])
        return {"lambda_": np.array([WARM_LAMBDA]), "mu_": mu.to_numpy(float), "sigma_": np.array([sigma])}

    def row_derivatives(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int = 2):
        """Each row's log-likelihood in (lambda, mu, log sigma) (lifelines' order), with its first
        and second derivatives (newton_fit's contract)."""
        lam, mu, log_sigma = etas
        sigma = np.exp(log_sigma)
        z = (log_t - mu) / sigma
        step = GENGAMMA_STEP * np.maximum(np.abs(lam), 0.1)
        a, a_z, a_zz, a_l, a_zl, a_ll = (np.empty(len(z)) for _ in range(6))
        # a failure reads the density, a censored row the survival (and, for its hazard, the density)
        for rows, in_z in ((np.flatnonzero(event), _failed_in_z), (np.flatnonzero(~event), _standing_in_z)):
            z_rows, lam_rows, step_rows = z[rows], lam[rows], step[rows]
            # a and its z-derivatives at lambda + j step: five-point differences in lambda
            parts = [in_z(z_rows, lam_rows + j * step_rows) for j in (0, 1, -1, 2, -2)] if order else [in_z(z_rows, lam_rows)]
            a[rows], a_z[rows], a_zz[rows] = parts[0]
            if order:
                (a1, a1_z, _), (am1, am1_z, _), (a2, a2_z, _), (am2, am2_z, _) = parts[1:]
                a_l[rows] = (8 * (a1 - am1) - (a2 - am2)) / (12 * step_rows)
                a_zl[rows] = (8 * (a1_z - am1_z) - (a2_z - am2_z)) / (12 * step_rows)
                a_ll[rows] = (16 * (a1 + am1) - (a2 + am2) - 30 * parts[0][0]) / (12 * step_rows**2)
        value = a - np.where(event, log_sigma + log_t, 0.0)
        if not order:
            return value, None, None
        first = np.stack([a_l, -a_z / sigma, -a_z * z - event], axis=1)
        second = np.empty((len(z), 3, 3))
        second[:, 0, 0] = a_ll
        second[:, 0, 1] = second[:, 1, 0] = -a_zl / sigma
        second[:, 0, 2] = second[:, 2, 0] = -a_zl * z
        second[:, 1, 1] = a_zz / sigma**2
        second[:, 1, 2] = second[:, 2, 1] = (a_zz * z + a_z) / sigma
        second[:, 2, 2] = a_zz * z * z + a_z * z
        return value, first, second

    def _location_and_shapes(self, df: pd.DataFrame) -> tuple[np.ndarray, float, float]:
        mu = self.regressors.transform_df(df)["mu_"].to_numpy(float) @ self.params_.loc["mu_"].to_numpy()
        sigma = float(np.exp(self.params_.loc[("sigma_", "Intercept")]))
        return mu, sigma, float(self.params_.loc[("lambda_", "Intercept")])

    def predict_percentile(self, df, *, p: float = 0.5, conditional_after=None) -> pd.Series:
        """The time t with S(t | x) = p."""
        _no_conditioning(conditional_after)
        mu, sigma, lam = self._location_and_shapes(df)
        k = 1.0 / lam**2
        u = gammainccinv(k, p) if lam > 0 else gammaincinv(k, p)  # U at the p-th survival quantile
        return pd.Series(np.exp(mu + sigma / lam * np.log(lam**2 * u)), index=row_index(df))

    def predict_median(self, df, *, conditional_after=None) -> pd.Series:
        return self.predict_percentile(df, p=0.5, conditional_after=conditional_after)

    def closed_restricted_mean(self, covariates: pd.DataFrame, t_star: np.ndarray) -> np.ndarray | None:
        """int_0^t* S(u | x) du = t* S(t*) + E[T; T < t*], from T = e^mu (l^2 U)^a, a = sigma / l,
        U ~ Gamma(k = 1/l^2): E[T; T < t*] = e^mu (l^2)^a Gamma(k + a) / Gamma(k) P(k + a, x*) (l > 0;
        Q for l < 0, where T falls as U grows), x* = e^(l z*) k, z* = (log t* - mu) / sigma. None
        where k + a <= 0 (no incomplete gamma function of that order here): the integral."""
        mu, sigma, lam = self._location_and_shapes(covariates)
        k, a = 1.0 / lam**2, sigma / lam
        if k + a <= 0:
            return None
        t_star = np.asarray(t_star, float)
        x = np.exp(lam * (np.log(t_star) - mu) / sigma) * k
        lower = gammainc if lam > 0 else gammaincc
        standing = gammaincc(k, x) if lam > 0 else gammainc(k, x)
        scale = np.exp(mu + a * math.log(lam**2) + gammaln(k + a) - gammaln(k))
        return t_star * standing + scale * lower(k + a, x)

    def predict_expectation(self, df, conditional_after=None) -> pd.Series:
        """E[T] = e^mu (lambda^2)^(sigma/lambda) Gamma(k + sigma/lambda) / Gamma(k), k = 1/lambda^2;
        infinite where k + sigma/lambda <= 0."""
        _no_conditioning(conditional_after)
        mu, sigma, lam = self._location_and_shapes(df)
        k, power = 1.0 / lam**2, sigma / lam
        if k + power <= 0:
            return pd.Series(np.inf, index=row_index(df))
        log_mean = mu + power * math.log(lam**2) + gammaln(k + power) - gammaln(k)
        return pd.Series(np.exp(log_mean), index=row_index(df))
