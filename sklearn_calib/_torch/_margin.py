"""Margin temperature: a piecewise-linear log inverse temperature of the margin.

The calibrated log-probabilities of a row of base log-probabilities ``l`` are
``log_softmax(beta(m) * l)`` with ``m`` the gap between the two largest entries
of ``l`` and ``log beta`` linear between fixed knots ``t_0 < ... < t_J`` (and
constant beyond them). The knot values ``u`` minimise

    mean NLL + ece_weight * Charbonnier-SoftECE + alpha * ||u||^2

from ``u = 0`` (the base map itself) by scipy's L-BFGS-B, with the value and
the gradient in float64, written out by hand on SMART's passes (the class-major
rows and the soft bins of ``_smart.py``). The problem has ``J + 1``
parameters, so each evaluation is one pass over the (K - 1, N) block and a few
over the (n_bins, N) soft-bin weights; Newton steps with autograd's Hessian
polish L-BFGS-B's point.
"""

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from ._smart import _LN2, SmartProblem, SoftBins


@dataclass
class MarginTemperatureFit:
    log_inverse_temperature: np.ndarray  # u at the knots, float64
    n_iter: int
    loss: float
    converged: bool
    message: str
    gradient: float  # largest entry of the final projected gradient


def interpolation(margins, knots):
    """Left knot index and weight of the right knot, for each margin.

    Margins beyond the end knots (or infinite, a row with one finite class)
    are clamped to them; with a single knot every weight is 0.
    """
    margins = np.clip(np.nan_to_num(margins, posinf=knots[-1]), knots[0], knots[-1])
    if knots.shape[0] == 1:
        return np.zeros(margins.shape[0], np.intp), np.zeros(margins.shape[0])
    left = np.searchsorted(knots, margins, side="right") - 1
    left = np.clip(left, 0, knots.shape[0] - 2)
    width = knots[left + 1] - knots[left]
    return left, (margins - knots[left]) / width


def log_inverse_temperature(margins, knots, values):
    """``log beta(m)`` in float64 numpy, for prediction."""
    left, right_weight = interpolation(margins, knots)
    if knots.shape[0] == 1:
        return np.full(margins.shape[0], values[0])
    return values[left] * (1.0 - right_weight) + values[left + 1] * right_weight


class _Objective:
    """Value and gradient of the fitting objective at ``u``, in float64.

    ``__call__``, what L-BFGS-B reads, has its gradient written out by hand
    on SMART's passes: the objective depends on ``u`` only through each
    row's inverse temperature ``beta_i``, so one pass over the class-major
    rows (``SmartProblem.confidence_terms``) and SMART's soft bins give
    d/d beta_i, and the chain rule through the interpolation gives d/du
    (2.2 ms an evaluation against 5.5 ms through autograd at 5,000 x 100,
    one thread).
    ``value`` is the same objective through torch autograd, kept for the
    Newton polish's Hessian; tests hold the two gradients equal.
    """

    def __init__(
        self,
        shifted,
        y,
        weights,
        left,
        right_weight,
        *,
        ece_weight,
        alpha,
        n_bins,
        sigma,
        delta,
    ):
        device = shifted.device
        self.finite = torch.isfinite(shifted)
        self.masked = not bool(self.finite.all())
        # Masked entries (-inf) are replaced by 0 and dropped from the sums
        # (a copy only where there are some).
        self.shifted = shifted
        if self.masked:
            self.shifted = torch.where(self.finite, shifted, 0.0)
        rows = torch.arange(shifted.shape[0], device=device)
        self.true_shifted = self.shifted[rows, y]
        # 1 / t where the label is one of t tied top classes (see
        # utils._math.top_label_correctness): not the first tied column.
        at_top = shifted == shifted.amax(dim=1, keepdim=True)
        self.correct = at_top[rows, y].to(torch.float64) / at_top.sum(dim=1)
        self.weights = weights / weights.sum()
        self.left = left
        self.right_weight = right_weight
        self.ece_weight = ece_weight
        self.alpha = alpha
        centres = (
            torch.arange(n_bins, dtype=torch.float64, device=device) + 0.5
        ) / n_bins
        self.centres = centres
        self.inv_two_var = 1.0 / (2.0 * sigma * sigma)
        self.delta = delta
        self.device = device
        self.problem = SmartProblem(
            shifted, self.correct, weights, None, self.true_shifted
        )
        self.bins = SoftBins(n_bins, sigma, delta, True, torch.float64, device)
        self.loss = torch.zeros((), dtype=torch.float64, device=device)

    def log_beta(self, u):
        if u.shape[0] == 1:
            return u.expand(self.left.shape[0])
        return u[self.left] * (1.0 - self.right_weight) + u[self.left + 1] * (
            self.right_weight
        )

    def value(self, u):
        """The objective at the tensor ``u``, differentiable twice by autograd."""
        beta = torch.exp(self.log_beta(u))
        scaled = self.shifted * beta[:, None]
        if self.masked:
            scaled = torch.where(self.finite, scaled, -math.inf)
        log_norm = torch.logsumexp(scaled, dim=1)  # >= 0: the top entry is 0
        nll = torch.dot(self.weights, log_norm - beta * self.true_shifted)
        total = nll + self.alpha * torch.dot(u, u)
        if self.ece_weight:
            total = total + self.ece_weight * self.soft_ece(torch.exp(-log_norm))
        return total

    def soft_ece(self, confidence):
        """Charbonnier-SoftECE: sum_b sqrt(G_b^2 + delta^2 M_b^2) (METHODS.md)."""
        distance = confidence[:, None] - self.centres[None, :]
        kernel = torch.softmax(-distance.square() * self.inv_two_var, dim=1)
        weighted = kernel * self.weights[:, None]
        mass = weighted.sum(dim=0)
        gap = weighted.T @ (confidence - self.correct)
        return torch.sqrt(gap.square() + (self.delta * mass).square()).sum()

    def __call__(self, u_numpy):
        """Value and gradient at ``u``, the gradient by hand (see the class)."""
        u = torch.tensor(u_numpy, dtype=torch.float64, device=self.device)
        problem = self.problem
        beta = torch.exp(self.log_beta(u))
        # S = sum_k exp(beta l_k) (the top entry's 1 included) and
        # S1 = sum_k exp(beta l_k) l_k (in log2 units: times ln 2).
        total, first = problem.confidence_terms(beta)
        mean = first.mul_(_LN2).div_(total)  # E_q[l], d log S / d beta
        weights = problem.weights
        value = torch.dot(weights, torch.log(total) - beta * problem.true_gap)
        d_beta = weights * (mean - problem.true_gap)
        if self.ece_weight:
            confidence = total.reciprocal()
            # SoftBins returns d SoftECE / d p_i divided by the weight s_i;
            # p = 1 / S, so dp / d beta = -p E_q[l].
            d_confidence = self.bins(confidence, problem.correct, weights, self.loss)
            value = value + self.ece_weight * self.loss
            d_beta -= d_confidence.mul_(weights).mul_(confidence).mul_(mean).mul_(
                self.ece_weight
            )
        value = float(value) + self.alpha * float(torch.dot(u, u))
        d_log_beta = d_beta.mul_(beta)
        grad = 2.0 * self.alpha * u
        if u.shape[0] == 1:
            grad += d_log_beta.sum()
        else:
            grad.index_add_(0, self.left, d_log_beta * (1.0 - self.right_weight))
            grad.index_add_(0, self.left + 1, d_log_beta * self.right_weight)
        return value, grad.cpu().numpy()

    def autograd_value_and_gradient(self, u_numpy):
        """``__call__`` through torch autograd on ``value``: the reference."""
        u = torch.tensor(u_numpy, dtype=torch.float64, device=self.device)
        u.requires_grad_(True)
        value = self.value(u)
        (grad,) = torch.autograd.grad(value, u)
        return float(value.detach()), grad.cpu().numpy()

    def hessian(self, u_numpy):
        u = torch.tensor(u_numpy, dtype=torch.float64, device=self.device)
        return (
            torch.autograd.functional.hessian(self.value, u)
            .cpu()
            .numpy()
        )


# Newton steps after L-BFGS-B: quadratic convergence takes a 1e-8 gradient to
# rounding in two or three; the bound only guards a pathological objective.
_MAX_NEWTON_STEPS = 8


def _newton_polish(objective, u, value, gradient):
    """Newton steps from ``u`` while they shrink the gradient.

    A step is taken only where the exact Hessian is positive definite (a
    minimum's neighbourhood of this non-convex objective) and accepted only
    where it lowers the largest gradient entry, so the polish never moves
    away from L-BFGS-B's point towards a saddle; it stops at the rounding
    floor, where a step no longer helps.
    """
    largest = np.max(np.abs(gradient))
    for _ in range(_MAX_NEWTON_STEPS):
        hessian = objective.hessian(u)
        if not np.all(np.isfinite(hessian)):
            # autograd's second derivative of an empty soft bin (narrow
            # sigma) is NaN; L-BFGS-B's point stands.
            break
        try:
            factor = cho_factor(hessian)
        except np.linalg.LinAlgError:
            break
        step = -cho_solve(factor, gradient)
        new_value, new_gradient = objective(u + step)
        new_largest = np.max(np.abs(new_gradient))
        if not np.isfinite(new_value) or not new_largest < largest:
            break
        u, value, gradient, largest = u + step, new_value, new_gradient, new_largest
    return u, value, gradient


@contextmanager
def _one_thread(device):
    """One BLAS and one torch CPU thread for the fit, restored after.

    Each step handles a few parameters and one pass over the rows: splitting
    it over threads only adds synchronisation. On 2 busy cores, L-BFGS-B's
    tiny BLAS calls ran 5 times slower with two OpenBLAS threads (measured).
    """
    previous = torch.get_num_threads()
    with threadpool_limits(limits=1):
        if device.type == "cpu":
            torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


def fit_margin_temperature(
    shifted,
    y,
    weights,
    left,
    right_weight,
    n_knots,
    *,
    ece_weight,
    alpha,
    n_bins,
    sigma,
    delta,
    max_iter,
    tol,
):
    """Minimise the objective over the knot values from ``u = 0``.

    ``shifted`` are the base log-probabilities minus their row maximum (N, K)
    float64 tensor, ``left``/``right_weight`` each row's interpolation.
    """
    objective = _Objective(
        shifted,
        y,
        weights,
        left,
        right_weight,
        ece_weight=ece_weight,
        alpha=alpha,
        n_bins=n_bins,
        sigma=sigma,
        delta=delta,
    )
    with _one_thread(shifted.device):
        result = minimize(
            objective,
            np.zeros(n_knots),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "gtol": tol, "ftol": 1e-15},
        )
        u, loss, jac = result.x, result.fun, result.jac
        # Only after L-BFGS-B's own stop: one at max_iter stays a short stop.
        if result.success and jac.size and np.max(np.abs(jac)) > tol:
            u, loss, jac = _newton_polish(objective, u, loss, jac)
    gradient = float(np.max(np.abs(jac))) if jac.size else 0.0
    return MarginTemperatureFit(
        log_inverse_temperature=np.asarray(u, dtype=np.float64),
        n_iter=int(result.nit),
        loss=float(loss),
        converged=bool(result.success) or gradient <= tol,
        message=str(result.message),
        gradient=gradient,
    )


class MarginTemperatureModule(torch.nn.Module):
    """log_softmax(beta(m) * base(z)): a base module, then the margin temperature.

    ``base`` maps logits to log-probabilities (any calibrator's ``to_torch``);
    ``m`` is the gap between its two largest outputs and ``log beta`` is the
    piecewise-linear interpolation of ``values`` at ``knots``.
    """

    def __init__(self, base: torch.nn.Module, knots, values):
        super().__init__()
        self.base = base
        self.register_buffer("knots", torch.as_tensor(knots, dtype=torch.float64))
        self.register_buffer("values", torch.as_tensor(values, dtype=torch.float64))
        # Python floats, not buffer reads: torch.export cannot branch on data.
        self.lowest_knot = float(knots[0])
        self.highest_knot = float(knots[-1])
        self.largest_beta = float(np.finfo(np.float64).max)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        log_proba = self.base(logits)
        top2 = torch.topk(log_proba, 2, dim=-1).values.to(torch.float64)
        margin = top2[..., 0] - top2[..., 1]
        knots, values = self.knots, self.values
        margin = torch.nan_to_num(margin, posinf=self.highest_knot)
        margin = torch.clamp(margin, min=self.lowest_knot, max=self.highest_knot)
        if knots.shape[0] == 1:
            log_beta = values[0].expand_as(margin)
        else:
            left = torch.searchsorted(knots, margin, right=True) - 1
            left = torch.clamp(left, 0, knots.shape[0] - 2)
            width = knots[left + 1] - knots[left]
            frac = (margin - knots[left]) / width
            log_beta = values[left] * (1.0 - frac) + values[left + 1] * frac
        # Scaled in float64, as transform does: a beta beyond float32's range
        # (a knot value of 1e2 or more, alpha=0) was inf there, and the top
        # entry's 0 * inf NaN. beta is kept finite (its one-hot limit) and a
        # masked class (-inf) stays masked at beta = 0.
        beta = torch.exp(log_beta).clamp(max=self.largest_beta).unsqueeze(-1)
        shifted = log_proba - log_proba.amax(dim=-1, keepdim=True)
        wide = shifted.to(torch.float64)
        scaled = torch.where(torch.isneginf(wide), wide, wide * beta)
        return torch.log_softmax(scaled.to(log_proba.dtype), dim=-1)


def warn_if_short(fit, name, max_iter, tol):
    """A ConvergenceWarning when L-BFGS-B stopped above the tolerance."""
    if fit.converged:
        return
    warnings.warn(
        f"{name} stopped after {fit.n_iter} L-BFGS-B iterations (max_iter="
        f"{max_iter}) with the largest gradient entry {fit.gradient:.3e} > "
        f"tol={tol:g}: {fit.message}. Increase max_iter.",
        ConvergenceWarning,
        stacklevel=5,  # warn_if_short, _fit, fit, scikit-learn's wrapper
    )
