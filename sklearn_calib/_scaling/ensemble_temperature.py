"""Ensemble temperature scaling: a convex mix of scaled, raw and uniform predictions.

The temperature comes from :class:`~sklearn_calib.TemperatureScaling`'s exact
solver; the three mix weights minimise a convex loss over the probability
simplex, solved exactly by an active-set Newton method (three variables).
"""

import functools
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseCalibrator
from ..utils._compat import Interval, StrOptions, check_is_fitted
from ..utils._fitted_state import (
    check_state_array,
    check_state_float,
    check_state_int,
    fail_state,
)
from ..utils._math import armijo_step, log_softmax, row_blocks, scale_logits
from .temperature import TemperatureScaling

# The uniform component alone ties every class. Its weight is capped below 1
# so that the mix always keeps the ranking of the logits (and so the argmax):
# 1e-6 changes the training loss by at most about 1e-6 where the cap binds.
_MIN_INFORMATIVE_WEIGHT = 1e-6


def _log_uniform(logits):
    """log of the uniform distribution over each row's unmasked (finite) classes."""
    finite = np.isfinite(logits)
    count = finite.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.where(finite, -np.log(count), -np.inf)


def component_log_proba(logits, temperature):
    """log-probabilities of the three components: scaled, raw and uniform."""
    scaled = log_softmax(scale_logits(logits, logits.dtype.type(1.0 / temperature)))
    raw = log_softmax(logits)
    return scaled, raw, _log_uniform(logits)


def mix_log_proba(components, weights):
    """log(sum_j w_j exp(component_j)), with -inf where every part is 0."""
    with np.errstate(divide="ignore"):
        log_w = np.log(np.asarray(weights, dtype=np.float64))
    out = components[0] + log_w[0]
    for part, lw in zip(components[1:], log_w[1:], strict=True):
        out = np.logaddexp(out, part + lw)
    return out


def _true_class_matrix(logits, y, temperature):
    """(n, 3) probabilities of the true class under each component, float64."""
    rows = np.arange(logits.shape[0])
    P = np.empty((logits.shape[0], 3))
    for chunk in row_blocks(*logits.shape):
        block = np.asarray(logits[chunk], dtype=np.float64)
        for j, part in enumerate(component_log_proba(block, temperature)):
            P[chunk, j] = np.exp(part[rows[: block.shape[0]], y[chunk]])
    return P


def _brier_moments(logits, y, v, temperature):
    """A = sum_i v_i P_i^T P_i and b = sum_i v_i P_i[y_i] for the Brier loss.

    ``P_i`` is the (K, 3) matrix of the components' probabilities; the mean
    Brier score of the mix ``w`` is ``w^T A w - 2 b^T w + 1``.
    """
    A = np.zeros((3, 3))
    b = np.zeros(3)
    for chunk in row_blocks(*logits.shape):
        block = np.asarray(logits[chunk], dtype=np.float64)
        parts = [np.exp(p) for p in component_log_proba(block, temperature)]
        weight = v[chunk]
        rows = np.arange(block.shape[0])
        for j in range(3):
            b[j] += weight @ parts[j][rows, y[chunk]]
            for k in range(j, 3):
                A[j, k] += weight @ np.einsum("ik,ik->i", parts[j], parts[k])
                A[k, j] = A[j, k]
    return A, b


def _face_direction(g, H, free, support, *, newton):
    """A step ``d`` with ``sum(d) = 0`` moving only the free coordinates.

    Newton's step of the quadratic model on the face, or the projected
    negative gradient. An entering coordinate (free, at 0) that the step
    would push below 0 is fixed at 0 and the step recomputed.
    """
    n = g.shape[0]
    free = free.copy()
    d = np.zeros(n)
    for _ in range(n):
        idx = np.flatnonzero(free)
        m = idx.shape[0]
        d = np.zeros(n)
        if newton:
            kkt = np.zeros((m + 1, m + 1))
            kkt[:m, :m] = H[np.ix_(idx, idx)]
            kkt[:m, m] = kkt[m, :m] = 1.0
            rhs = np.concatenate([-g[idx], [0.0]])
            d[idx] = np.linalg.lstsq(kkt, rhs, rcond=1e-14)[0][:m]
        else:
            d[idx] = -(g[idx] - g[idx].mean())
        d[idx] -= d[idx].mean()  # sum(d) = 0 exactly, not to rounding
        blocked = free & ~support & (d < 0)
        if not blocked.any():
            break
        free &= ~blocked
    return d


def _simplex_trial(objective, w, d, shrinking, limits, alpha_max, alpha):
    """``(f, g, H, w)`` at ``w + alpha d``, kept on the simplex (a line search)."""
    new_w = np.clip(w + alpha * d, 0.0, None)
    if alpha == alpha_max:
        # Land exactly on the face that blocked the step.
        new_w[np.flatnonzero(shrinking)[np.argmin(limits)]] = 0.0
    new_w /= new_w.sum()
    return (*objective(new_w), new_w)


def minimize_on_simplex(objective, w, *, tol, max_iter):
    """Minimise a smooth convex function over the probability simplex.

    Active-set Newton: each iteration takes the Newton step of the quadratic
    model restricted to the free coordinates (the support plus those whose
    gradient asks to enter) and to ``sum(d) = 0``, truncated at the boundary
    of the simplex and shortened by backtracking (Armijo). It stops when the
    KKT conditions hold to ``tol``: ``g_j = mu`` on the support and
    ``g_j >= mu`` elsewhere, with ``mu = g . w``.

    Parameters
    ----------
    objective : callable
        ``objective(w) -> (f, g, H)``: value, gradient and Hessian.
    w : ndarray of shape (n,)
        Feasible start (non-negative, summing to 1) where ``f`` is finite.
    tol : float
    max_iter : int

    Returns
    -------
    w : ndarray of shape (n,)
    f : float
    n_iter : int
    status : {"converged", "max_iter", "stalled"}
    violation : float
        The largest violation of the KKT conditions at ``w``.
    """
    f, g, H = objective(w)
    status, n_iter, violation = "max_iter", max_iter, np.inf
    for iteration in range(1, max_iter + 1):
        support = w > 0
        mu = float(g @ w)
        violation = max(
            float(np.max(np.abs(g[support] - mu))),
            float(np.max(mu - g[~support], initial=0.0)),
        )
        if violation <= tol:
            status, n_iter = "converged", iteration - 1
            break
        free = support | (g < mu)
        # The slope along d, with sum(d) = 0: (g - mu) . d equals g . d but
        # does not pick up the rounding of sum(d) times g's common level.
        centred = g - mu
        d = _face_direction(g, H, free, support, newton=True)
        if not float(centred @ d) < 0:
            # Not a descent direction (a singular Hessian): projected gradient.
            d = _face_direction(g, H, free, support, newton=False)
        slope = float(centred @ d)
        if not slope < 0:
            status, n_iter = "stalled", iteration - 1
            break
        shrinking = d < 0
        limits = -w[shrinking] / d[shrinking]
        alpha_max = float(np.min(limits, initial=np.inf))
        accepted = armijo_step(
            functools.partial(
                _simplex_trial, objective, w, d, shrinking, limits, alpha_max
            ),
            f,
            slope,
            slack=8 * np.finfo(float).eps * abs(f),
            step=min(1.0, alpha_max),
        )
        if accepted is None:
            status, n_iter = "stalled", iteration - 1
            break
        f, g, H, w = accepted[1]
    return w, f, n_iter, status, violation


class EnsembleTemperatureScaling(BaseCalibrator):
    r"""Ensemble temperature scaling (Zhang, Kailkhura and Han, ICML 2020).

    The calibrated probabilities mix three predictions of the same logits:

    .. math::

        q = w_0 \operatorname{softmax}(z / T) + w_1 \operatorname{softmax}(z)
        + w_2 \, u, \qquad w_j \ge 0,\; w_0 + w_1 + w_2 = 1,

    the temperature-scaled prediction, the raw one, and the uniform
    distribution ``u`` (over the unmasked classes of the row). The mix can
    soften a model more than a temperature alone where it is over-confident on
    rare wrong predictions (the uniform part), or keep part of the raw
    sharpness. Every component orders the classes as the logits do, so the
    argmax and the accuracy never change.

    ``T`` is the exact maximum-likelihood temperature of
    :class:`TemperatureScaling` (same solver). The weights then minimise the
    (weighted) mean loss of ``q`` over the simplex: the NLL (default) or the
    multiclass Brier score, both convex in ``w``, solved exactly by an
    active-set Newton method on the three weights (the NLL needs only the
    true class's probability under each component, one ``(n, 3)`` matrix; the
    Brier score only a ``3 x 3`` moment matrix).

    Parameters
    ----------
    loss : {"nll", "brier"}, default="nll"
        Loss minimised by the mix weights. The temperature is always the NLL
        optimum. The authors' code fits both ``T`` and the weights on the
        squared error (``"brier"`` here for the weights).
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the temperature solver runs. ``"auto"`` uses CUDA when
        available. Asking for CUDA without it falls back to the CPU with a
        warning. The fitted state is numpy either way.
    max_iter : int, default=100
        Maximum number of Newton iterations of the temperature solve and of
        the weight solve. A :class:`~sklearn.exceptions.ConvergenceWarning`
        is raised if reached.
    tol : float, default=1e-10
        The weight solve stops when the KKT conditions of the simplex hold to
        ``tol`` (the gradient entries of the support equal, the others not
        below them).

    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).

    Attributes
    ----------
    temperature_ : float
        The maximum-likelihood temperature ``T`` of the scaled component.
    weights_ : ndarray of shape (3,)
        ``(w_0, w_1, w_2)``: the weights of the scaled, raw and uniform
        predictions, non-negative and summing to 1.
    n_iter_ : int
        Newton iterations of the weight solve.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    TemperatureScaling : The special case ``w = (1, 0, 0)``.
    SMART : A temperature per sample, from the logit margin.

    Notes
    -----
    The uniform weight is capped at ``1 - 1e-6``: the uniform distribution
    alone ties every class, and the cap keeps the order of the classes (the
    training loss moves by at most about ``1e-6`` where it binds, on logits
    that carry no information about the labels).

    A masked logit (``-inf``) has probability 0 in every component, the
    uniform one included.

    The authors' code bounds ``T`` to ``[0.05, 5]`` and fits it on the
    squared error; probmetrics' ``ETSCalibrator(loss="ce")`` fits both on the
    NLL as here (with ``T`` bounded). probmetrics' ``"ts-mix"`` is a different
    method: temperature scaling followed by a fixed mix with the uniform
    distribution of weight ``1 / (n + 1)``.

    References
    ----------
    .. [1] J. Zhang, B. Kailkhura and T. Y.-J. Han, "Mix-n-Match: Ensemble and
       Compositional Methods for Uncertainty Calibration in Deep Learning",
       ICML 2020.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import EnsembleTemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> ets = EnsembleTemperatureScaling(device="cpu").fit(logits, y)
    >>> bool(np.isclose(ets.weights_.sum(), 1.0)), bool(np.all(ets.weights_ >= 0))
    (True, True)
    >>> bool(np.all(ets.predict(logits) == logits.argmax(axis=1)))
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "loss": [StrOptions({"nll", "brier"})],
        "device": [str],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }
    _preserves_argmax = True

    def __init__(
        self, *, loss="nll", device="auto", max_iter=100, tol=1e-10, classes=None
    ):
        self.classes = classes
        self.loss = loss
        self.device = device
        self.max_iter = max_iter
        self.tol = tol

    def _fit(self, logits, y, sample_weight):
        ts = TemperatureScaling(device=self.device, max_iter=self.max_iter)
        ts._fit(logits, y, sample_weight)
        self.temperature_ = ts.temperature_
        v = sample_weight / sample_weight.sum()
        if self.loss == "nll":
            P = _true_class_matrix(logits, y, self.temperature_)
            keep = v > 0
            P, v = P[keep], v[keep]

            def objective(w):
                mix = P @ w
                # A row whose true class has probability 0 under every
                # weighted component makes f infinite: the line search then
                # backs off (the start, the barycentre, is always finite).
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = P / mix[:, None]
                    f = -float(v @ np.log(mix))
                return f, -(v @ ratio), (ratio * v[:, None]).T @ ratio

        else:
            A, b = _brier_moments(logits, y, v, self.temperature_)

            def objective(w):
                return float(w @ A @ w - 2 * b @ w + 1.0), 2 * (A @ w - b), 2 * A

        w, _, n_iter, status, violation = minimize_on_simplex(
            objective, np.full(3, 1 / 3), tol=self.tol, max_iter=self.max_iter
        )
        if status != "converged":
            warnings.warn(
                f"EnsembleTemperatureScaling's weight solve stopped ({status}) after "
                f"{n_iter} Newton iterations with a KKT violation of "
                f"{violation:.3e} > tol={self.tol:g}.",
                ConvergenceWarning,
                stacklevel=4,
            )
        informative = w[0] + w[1]
        if informative < _MIN_INFORMATIVE_WEIGHT:
            share = w[:2] / informative if informative > 0 else np.array([1.0, 0.0])
            w = np.concatenate(
                [_MIN_INFORMATIVE_WEIGHT * share, [1.0 - _MIN_INFORMATIVE_WEIGHT]]
            )
        self.weights_ = w
        self.n_iter_ = n_iter

    def _check_fitted_state(self):
        super()._check_fitted_state()
        # T > 0 keeps the order of the logits in the scaled component.
        check_state_float(self, "temperature_", low=0.0, low_open=True)
        w = check_state_array(self, "weights_", shape=(3,), low=0.0, high=1.0)
        # The fit renormalises the weights: their sum is 1 up to rounding.
        if abs(float(w.sum()) - 1.0) > 1e-9:
            fail_state(self, "weights_", f"must sum to 1, got {float(w.sum())!r}")
        # The uniform component alone would tie every class (see the cap).
        if w[0] + w[1] < _MIN_INFORMATIVE_WEIGHT * (1.0 - 1e-9):
            fail_state(
                self,
                "weights_",
                f"must give the scaled and raw components at least "
                f"{_MIN_INFORMATIVE_WEIGHT:g} together, got {float(w[0] + w[1])!r}",
            )
        check_state_int(self, "n_iter_")

    def _calibrated_logits(self, logits):
        work = np.asarray(logits, dtype=np.float64)
        return mix_log_proba(
            component_log_proba(work, self.temperature_), self.weights_
        )

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log(w_0 softmax(z / T) + w_1 softmax(z) + w_2 u)``.
        """
        check_is_fitted(self)
        from .._torch._scaling_modules import EnsembleTemperatureModule

        return EnsembleTemperatureModule(self.temperature_, self.weights_)
