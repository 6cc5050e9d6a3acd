"""lifelines' CRC spline, the model of its calibration curves (Austin et al. 2020), fitted along
lifelines' own SLSQP path on a hand-written gradient (trashfire.survival.fitters.calibration)."""

from __future__ import annotations

import math

import numpy as np
from lifelines import CRCSplineFitter

from trashfire.survival.newton import torch_row_derivatives
from trashfire.survival.newton_fit import NewtonRegressionMixin

LOG_HAZARD_FLOOR = math.log(1e-20)  # lifelines' regression fitters clip the hazard at 1e-20 in their likelihood


class FastCRCSplineFitter(NewtonRegressionMixin, CRCSplineFitter):
    """lifelines' CRC spline (its calibration model: H = exp(g0 + g1 u + sum_i g_i B_i(u)),
    u = log t - x.b, B_i its restricted cubic basis), its likelihood lifelines' own (the
    hazard clipped at 1e-20 included), its gradient torch autograd's per row
    (trashfire.survival.newton_fit). Its likelihood has many optima (the intercept of b shifts
    the knots against log t: on 120 samples Newton from ten starts found five), so it keeps
    lifelines' SLSQP from lifelines' start, which stops where lifelines' own fit stops, at a
    sixth of autograd's cost per step."""

    ROWS_APART = False  # its finite-difference step reads every row's eta: its derivatives go over all rows at once

    _scipy_fit_method = "SLSQP"

    def row_derivatives(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int = 2):
        """Value and gradient by hand (SLSQP's many steps); the Hessian at the optimum, once, by
        central differences of that gradient (no torch import in the stage's main process)."""
        value, first, _ = self._value_and_gradient(log_t, event, etas, min(order, 1))
        if order < 2:
            return value, first, None
        second = np.empty((len(value), len(etas), len(etas)))
        for k in range(len(etas)):
            step = 1e-5 * max(1.0, float(np.abs(etas[k]).max()))
            shifted = [[eta + sign * step if j == k else eta for j, eta in enumerate(etas)] for sign in (1, -1)]
            up, down = (self._value_and_gradient(log_t, event, moved, 1)[1] for moved in shifted)
            second[:, :, k] = (up - down) / (2 * step)
        return value, first, (second + second.transpose(0, 2, 1)) / 2

    def autograd_row_derivatives(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int = 2):
        """`row_derivatives` by torch autograd: the reference of the hand-written ones."""
        import torch

        times, failed = torch.from_numpy(log_t), torch.from_numpy(event)
        knots = [float(k) for k in self.knots]
        spread = knots[-1] - knots[0]

        def rows(linear, *gammas):
            u = times - linear
            log_cumulative, slope = gammas[0] + gammas[1] * u, gammas[1] + 0 * u
            for i in range(2, self.n_baseline_knots):
                share = (knots[-1] - knots[i - 1]) / spread
                cubes = [torch.relu(u - knot) for knot in (knots[i - 1], knots[0], knots[-1])]
                log_cumulative = log_cumulative + gammas[i] * (cubes[0] ** 3 - share * cubes[1] ** 3 - (1 - share) * cubes[2] ** 3)
                slope = slope + gammas[i] * 3 * (cubes[0] ** 2 - share * cubes[1] ** 2 - (1 - share) * cubes[2] ** 2)
            log_hazard = log_cumulative + torch.log(slope.clamp(min=1e-300)) - times
            return torch.where(failed, log_hazard.clamp(min=LOG_HAZARD_FLOOR), 0.0) - torch.exp(log_cumulative)

        return torch_row_derivatives(rows)(etas, order)

    def _value_and_gradient(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int):
        """`row_derivatives` to order 1 in numpy: d/d(x.b) moves u = log t - x.b, d u = -1."""
        linear, gammas = etas[0], etas[1:]
        knots = [float(k) for k in self.knots]
        spread = knots[-1] - knots[0]
        u = log_t - linear
        log_cumulative, slope, curvature = gammas[0] + gammas[1] * u, gammas[1] + 0 * u, 0 * u
        basis, slopes = [np.ones_like(u), u], [np.zeros_like(u), np.ones_like(u)]
        for i in range(2, self.n_baseline_knots):
            share = (knots[-1] - knots[i - 1]) / spread
            ramps = [np.maximum(u - knot, 0.0) for knot in (knots[i - 1], knots[0], knots[-1])]
            parts = [ramps[0] ** power - share * ramps[1] ** power - (1 - share) * ramps[2] ** power for power in (3, 2, 1)]
            basis.append(parts[0])
            slopes.append(3 * parts[1])
            log_cumulative, slope, curvature = log_cumulative + gammas[i] * parts[0], slope + gammas[i] * 3 * parts[1], curvature + gammas[i] * 6 * parts[2]
        log_hazard = log_cumulative + np.log(np.maximum(slope, 1e-300)) - log_t
        active = event & (log_hazard > LOG_HAZARD_FLOOR) & (slope > 1e-300)
        cumulative = np.exp(log_cumulative)
        value = np.where(event, np.maximum(log_hazard, LOG_HAZARD_FLOOR), 0.0) - cumulative
        if order == 0:
            return value, None, None
        inverse_slope = np.where(active, 1.0 / np.maximum(slope, 1e-300), 0.0)
        # d log H and d slope in each predictor: x.b, then each gamma
        d_log_cumulative = [-slope, *basis]
        d_slope = [-curvature, *slopes]
        first = np.stack([active * d_h + inverse_slope * d_s - cumulative * d_h for d_h, d_s in zip(d_log_cumulative, d_slope)], axis=1)
        return value, first, None
