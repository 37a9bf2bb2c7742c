"""Bias-corrected temperature scaling (Alexandari, Kundaje, Shrikumar 2020).

The map is ``softmax(beta z + b)``: one inverse temperature ``beta`` shared by
every class and one bias per class, fitted jointly by the weighted NLL. That is
vector scaling with a tied scale, a convex problem in ``(beta, b)`` with
``K + 1`` parameters, solved here exactly by Newton's method in float64:

  f_i   = beta z_i + b,  q_i = softmax(f_i),  m_i = E_{q_i}[z_i]
  L     = sum_i w_i [ logsumexp(f_i) - f_{i,y_i} ]                (sum w = 1)
  dL/db_k   = sum_i w_i (q_ik - 1[y_i = k])
  dL/dbeta  = sum_i w_i (m_i - z_{i,y_i})
  H_bb      = sum_i w_i (diag(q_i) - q_i q_i^T)
  H_beta,b_k = sum_i w_i q_ik (z_ik - m_i)
  H_beta,beta = sum_i w_i Var_{q_i}[z_i]

Every term is a sum over rows, computed block by block. Adding a constant to
every bias changes nothing (H has that null direction): the Newton step is
taken in the subspace where the biases of the fitted classes sum to zero. A
class without calibration samples has no finite bias (its probability should
fall to 0): its bias is held at 0 with that mean, so it keeps its
temperature-scaling odds against the mean class (as VectorScaling does), with
a warning. The shared affine solver of ``_torch/_affine.py`` has no tied
scale; the ``K + 1`` parameters make the exact Hessian cheap (``O(N K^2)`` per
pass), so the solve is a bounded Newton iteration with a backtracking line
search, started from the exact temperature-scaling solution (``b = 0``),
which it contains: the calibration NLL is never above temperature scaling's.
"""

import functools
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseCalibrator
from ..utils._compat import Interval, check_is_fitted
from ..utils._fitted_state import check_state_array, check_state_float, check_state_int
from ..utils._math import armijo_step, row_blocks, scale_logits
from ..utils._validation import (
    check_true_class_unmasked,
    keep_masked,
    mask_of,
    zero_masked,
)
from .affine import SEPARATED_LOSS
from .temperature import TemperatureScaling

# The exact Hessian is (K + 1)^2 float64 values and costs N K^2 per pass;
# beyond this many classes, Newton-CG on Hessian-vector products.
_MAX_CLASSES = 1024
# Backtracking halvings per Newton step.
_LINE_SEARCH_TRIES = 60
# The lower bound of the scale, relative to the temperature-scaling solution
# (T at most 1e4 times it). Without a bound the NLL can fall at a negative
# scale, a map that reverses the ranking of the logits (logits that rank the
# classes against the labels once the biases are fitted); at the bound the
# calibrated logits spread 1e-4 times as much as temperature scaling's, as
# TemperatureScaling's own bound allows: nearly the class frequencies.
_MIN_SCALE = 1e-4
# A scale within this relative distance of its bound is on it.
_ON_BOUND_RTOL = 1e-9


def _mapped_blocks(logits, beta, bias, mask):
    """``(rows, z, f)`` per block of rows: the float64 logits ``z`` (0 where
    masked) and their map ``f = beta z + bias`` (``-inf`` where masked)."""
    n, k = logits.shape
    for rows in row_blocks(n, k, max_elements=2**16):
        z = np.asarray(logits[rows], dtype=np.float64)
        m = None if mask is None else mask[rows]
        z = zero_masked(z, m)
        yield rows, z, keep_masked(beta * z + bias, m)


def bcts_objective(logits, y, weights, beta, bias, *, mask=None, hessian=True):
    """Loss, gradient and Hessian of the BCTS NLL at ``(beta, bias)``.

    ``logits`` float (n, K), ``-inf`` where ``mask``; ``y`` integer codes;
    ``weights`` non-negative, summing to 1. Returns ``(loss, grad, hess)``
    with ``grad`` of shape (K + 1,) (``beta`` first) and ``hess`` of shape
    (K + 1, K + 1) or None. Everything is accumulated in float64, block by
    block of rows; the sums are what a fit over chunks would add.
    """
    k = logits.shape[1]
    loss = 0.0
    grad = np.zeros(k + 1)
    hess = np.zeros((k + 1, k + 1)) if hessian else None
    for rows, z, f in _mapped_blocks(logits, beta, bias, mask):
        w = weights[rows]
        yb = y[rows]
        top = f.max(axis=1, keepdims=True)
        e = np.exp(f - top)
        s = e.sum(axis=1, keepdims=True)
        q = e / s
        log_norm = (np.log(s) + top)[:, 0]
        true_f = f[np.arange(len(yb)), yb]
        loss += float(w @ (log_norm - true_f))
        mean_z = np.einsum("ik,ik->i", q, z)
        true_z = z[np.arange(len(yb)), yb]
        grad[0] += float(w @ (mean_z - true_z))
        grad[1:] += w @ q
        np.subtract.at(grad[1:], yb, w)
        if hessian:
            wq = w[:, None] * q
            centred = z - mean_z[:, None]
            cross = np.einsum("ik,ik->k", wq, centred)
            hess[0, 0] += float(np.einsum("ik,ik->", wq, centred * centred))
            hess[0, 1:] += cross
            hess[1:, 0] += cross
            hess[1:, 1:] += np.diag(wq.sum(axis=0)) - q.T @ wq
    return loss, grad, hess


def bcts_hessp(logits, weights, beta, bias, vector, *, mask=None):
    """Hessian-vector product of the BCTS NLL (one pass, no K x K matrix)."""
    out = np.zeros(logits.shape[1] + 1)
    for rows, z, f in _mapped_blocks(logits, beta, bias, mask):
        q = np.exp(f - f.max(axis=1, keepdims=True))
        q /= q.sum(axis=1, keepdims=True)
        change = vector[0] * z + vector[1:]
        u = q * (change - np.einsum("ik,ik->i", q, change)[:, None])
        u *= weights[rows][:, None]
        out[0] += float(np.einsum("ik,ik->", u, z))
        out[1:] += u.sum(axis=0)
    return out


def _free_basis(free):
    """Orthonormal basis of the directions that keep the mean free bias fixed.

    Columns over ``(beta, b_free)``: ``beta`` itself, and the ``F - 1``
    contrasts of the free biases (sum zero).
    """
    n_free = int(free.sum())
    contrast = np.eye(n_free) - 1.0 / n_free
    q, _ = np.linalg.qr(contrast[:, : n_free - 1])
    basis = np.zeros((1 + n_free, n_free))
    basis[0, 0] = 1.0
    basis[1:, 1:] = q
    return basis


def _trial(evaluate, theta, direction, t):
    """``(loss, theta)`` at ``theta + t * direction`` (a line search trial)."""
    candidate = theta + t * direction
    return evaluate(candidate, hessian=False)[0], candidate


def fit_bcts(logits, y, weights, *, beta0, max_iter=100, tol=1e-10):
    """Minimise the BCTS NLL by Newton's method from ``(beta0, 0)``.

    Up to ``_MAX_CLASSES`` classes the Newton step uses the exact Hessian;
    beyond, it is solved by conjugate gradients on Hessian-vector products
    (scipy's Newton-CG), in the same subspace. Returns a dict with ``beta``,
    ``bias``, ``loss``, ``gradient`` (largest entry of the projected
    gradient), ``n_iter``, ``status`` ("converged", "max_iter", "stalled", or
    "overflow" where the objective's terms overflow float64)
    and ``n_absent`` (classes without samples, held at the start).
    """
    k = logits.shape[1]
    mask = mask_of(logits)
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights / weights.sum()
    class_weight = np.bincount(y, weights=weights, minlength=k)
    absent = class_weight <= 0
    free = ~absent
    # Work on logits scaled by beta0 (the temperature solution): then the
    # scale parameter starts at 1 whatever the units of the logits.
    # In float64, as the objective computes: float32 logits spread by 1e-40
    # have a beta0 near 1e40, and their product in float32 would overflow.
    scaled = np.asarray(logits, dtype=np.float64) * beta0
    theta = np.zeros(k + 1)
    theta[0] = 1.0
    if k > _MAX_CLASSES:
        return _fit_bcts_cg(scaled, y, weights, theta, free, beta0, max_iter, tol)
    basis = _free_basis(free)
    index = np.concatenate([[0], 1 + np.flatnonzero(free)])

    def evaluate(point, hessian=True):
        # Logits whose temperature solution is extreme (a gap of 1e-284 next
        # to a gap of 1: beta0 ~ 1e284) can overflow the squared terms of
        # the Hessian; such a point is reported, not silently used.
        with np.errstate(over="ignore", invalid="ignore"):
            return bcts_objective(
                scaled, y, weights, point[0], point[1:], mask=mask, hessian=hessian
            )

    loss, grad, hess = evaluate(theta)
    status = "max_iter"
    n_iter = 0
    if not _all_finite(loss, grad, hess):
        # The temperature-scaling solution, as the start: nothing better is
        # computable in float64 here.
        return _bcts_result(theta, beta0, loss, np.inf, 0, "overflow", absent)
    # The scale is the first column of the basis (e_0) and no other column
    # touches it: at its bound, where the NLL would fall further below it,
    # the biases alone move (the bound's KKT condition: grad[0] >= 0).
    biases_only = basis[:, 1:]
    while True:
        free_basis = biases_only if theta[0] <= _MIN_SCALE and grad[0] > 0 else basis
        reduced = free_basis.T @ grad[index]
        # The gradient in the constraint subspace, back in parameter units.
        projected = np.abs(free_basis @ reduced).max()
        if projected <= tol:
            status = "converged"
            break
        if n_iter >= max_iter:
            break
        n_iter += 1
        reduced_hess = free_basis.T @ hess[np.ix_(index, index)] @ free_basis
        try:
            step = -np.linalg.solve(reduced_hess, reduced)
        except np.linalg.LinAlgError:
            step = -reduced
        direction = np.zeros(k + 1)
        with np.errstate(over="ignore", invalid="ignore"):
            direction[index] = free_basis @ step
            slope = float(grad @ direction)
        if not (slope < 0 and np.isfinite(direction).all()):
            direction[index] = -(free_basis @ reduced)
            slope = float(grad @ direction)
        if direction[0] < 0:
            # A step of at most 1 must keep the scale at or above its bound.
            room = (theta[0] - _MIN_SCALE) / -direction[0]
            if room > 0:
                direction *= min(1.0, room)
            else:  # on the bound, where the scale should rise: descend
                direction[index] = -(free_basis @ reduced)
            slope = float(grad @ direction)
        noise = 64 * np.finfo(np.float64).eps * max(1.0, abs(loss))
        if -slope <= noise:
            status = "converged" if projected <= max(tol, 1e-6) else "stalled"
            break
        accepted = armijo_step(
            functools.partial(_trial, evaluate, theta, direction),
            loss,
            slope,
            slack=noise,
            max_halvings=_LINE_SEARCH_TRIES,
        )
        if accepted is None:
            status = "stalled"
            break
        previous = theta, loss, projected
        theta = accepted[1][1]
        if theta[0] <= _MIN_SCALE * (1 + _ON_BOUND_RTOL):
            # A step to the bound lands on it up to rounding, either side:
            # just above it, the next step towards it had room for a step of
            # 1e-16 and stalled there, its biases barely moved (uninformative
            # logits: 1/3 each for class frequencies 0.3, 0.4, 0.3).
            theta[0] = _MIN_SCALE
        loss, grad, hess = evaluate(theta)
        if not _all_finite(loss, grad, hess):
            theta, loss, projected = previous
            return _bcts_result(
                theta, beta0, loss, projected, n_iter, "overflow", absent
            )
    return _bcts_result(theta, beta0, loss, projected, n_iter, status, absent)


def scale_and_biases_separate(logits, y, weights):
    """Whether ``beta z + b`` separates the samples as ``beta`` grows, ties included.

    Exact where every class has a sample of positive weight (otherwise
    ``False``: the absent classes' biases are held, and the loss criterion
    alone applies). The NLL has no finite optimum in ``beta`` (kept above its
    bound) and ``b`` exactly when some ``b`` makes every sample's true class
    score at least as high as every other unmasked class under ``z + b``,
    strictly for one (complete or quasi-complete separation): along
    ``(beta, b beta)`` the loss then decreases for ever. The conditions
    ``b_k - b_j <= w_jk``, with ``w_jk`` the least ``z_j - z_k`` over the
    samples of class ``j``, are difference constraints: feasible exactly when
    the graph of the ``w_jk`` has no negative cycle (Floyd-Warshall, reached
    only when no pair of classes overlaps and ``b = 0`` does not already
    separate; skipped, ``False``, above ``_MAX_CLASSES`` classes); with
    ``beta`` fixed (its direction 0) they are feasible, and strict somewhere
    where masks leave a class that a class it sees does not reach back.
    """
    keep = weights > 0
    logits, y = logits[keep], y[keep]
    n_classes = logits.shape[1]
    counts = np.bincount(y, minlength=n_classes)
    if not (counts > 0).all():
        return False
    order = np.argsort(y, kind="stable")
    least = np.full((n_classes, n_classes), np.inf)
    # The largest finite difference: a class whose differences vary has a
    # sample with slack in each pair (masked entries, +inf, have none).
    most = np.full((n_classes, n_classes), -np.inf)
    for block in row_blocks(*logits.shape):
        rows = order[block]
        z = logits[rows].astype(np.float64)
        codes = y[rows]
        with np.errstate(invalid="ignore"):
            gaps = z[np.arange(z.shape[0]), codes][:, None] - z
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        own = codes[starts]  # distinct: the rows are sorted by class
        least[own] = np.minimum(least[own], np.minimum.reduceat(gaps, starts))
        finite = np.where(np.isfinite(gaps), gaps, -np.inf)
        most[own] = np.maximum(most[own], np.maximum.reduceat(finite, starts))
    np.fill_diagonal(least, 0.0)
    # beta fixed (a direction of the biases alone): b_k <= b_j wherever a
    # sample of class j sees class k unmasked. Strict somewhere unless every
    # such pair reaches back (masks can leave a class that no other class's
    # samples see, whose bias then grows for ever).
    seen = np.isfinite(least)
    if not seen.all() and n_classes <= _MAX_CLASSES:
        reach = seen.copy()
        for k in range(n_classes):
            reach |= reach[:, k : k + 1] & reach[k : k + 1]
        if np.any(seen & ~reach.T):
            return True
    if np.any(least + least.T < 0):
        return False  # two classes overlap: a negative cycle of two edges
    if np.all(least >= 0) and np.any(most > least):
        return True  # b = 0: the logits themselves rank every true class first
    if n_classes > _MAX_CLASSES:
        return False  # K^3 work: the loss criterion alone
    distance = least.copy()
    for k in range(n_classes):
        np.minimum(distance, distance[:, k : k + 1] + distance[k : k + 1], out=distance)
    if np.any(np.diag(distance) < 0):
        return False
    if np.any(most > least):
        return True
    # Every sample of a class has the same gaps: strict somewhere unless each
    # edge lies on a cycle of length 0 (the biases are then forced).
    with np.errstate(invalid="ignore"):
        slack = least + distance.T
    return bool(np.any(np.isfinite(least) & (slack > 0)))


def _all_finite(loss, grad, hess):
    return bool(
        np.isfinite(loss) and np.isfinite(grad).all() and np.isfinite(hess).all()
    )


def _bcts_result(theta, beta0, loss, gradient, n_iter, status, absent):
    return {
        "beta": theta[0] * beta0,
        "bias": theta[1:],
        "loss": loss,
        "gradient": gradient,
        "n_iter": n_iter,
        "status": status,
        "n_absent": int(absent.sum()),
        "at_min_scale": bool(theta[0] <= _MIN_SCALE),
    }


def _fit_bcts_cg(scaled, y, weights, theta, free, beta0, max_iter, tol):
    """Many classes: Newton-CG on Hessian-vector products, projected likewise."""
    from scipy.optimize import minimize

    mask = mask_of(scaled)
    free_index = 1 + np.flatnonzero(free)

    def project(vector):
        # Frozen biases do not move; the free ones keep their mean.
        out = np.zeros_like(vector)
        out[0] = vector[0]
        out[free_index] = vector[free_index] - vector[free_index].mean()
        return out

    def fun(point):
        loss, grad, _ = bcts_objective(
            scaled, y, weights, point[0], point[1:], mask=mask, hessian=False
        )
        return loss, project(grad)

    def hessp(point, vector):
        product = bcts_hessp(
            scaled, weights, point[0], point[1:], project(vector), mask=mask
        )
        return project(product)

    options = {"maxiter": max_iter, "xtol": 1e-12}
    result = minimize(
        fun, theta, jac=True, hessp=hessp, method="Newton-CG", options=options
    )
    point, n_iter = result.x, int(result.nit)
    if point[0] < _MIN_SCALE:
        # The problem is convex: where its free optimum lies below the bound
        # of the scale, the bounded one lies on it, with the biases solved.
        def at_bound(bias):
            loss, grad = fun(np.concatenate([[_MIN_SCALE], bias]))
            return loss, grad[1:]

        def bias_hessp(bias, vector):
            at = np.concatenate([[_MIN_SCALE], bias])
            return hessp(at, np.concatenate([[0.0], vector]))[1:]

        bounded = minimize(
            at_bound,
            point[1:],
            jac=True,
            hessp=bias_hessp,
            method="Newton-CG",
            options=options,
        )
        point = np.concatenate([[_MIN_SCALE], bounded.x])
        n_iter += int(bounded.nit)
    loss, grad = fun(point)
    if point[0] <= _MIN_SCALE:
        grad[0] = min(grad[0], 0.0)  # the bound's KKT condition
    gradient = float(np.abs(grad).max())
    return {
        "beta": point[0] * beta0,
        "bias": point[1:],
        "loss": loss,
        "gradient": gradient,
        "n_iter": n_iter,
        "status": "converged" if gradient <= max(tol, 1e-8) else "max_iter",
        "n_absent": int((~free).sum()),
        "at_min_scale": bool(point[0] <= _MIN_SCALE),
    }


class BiasCorrectedTemperatureScaling(BaseCalibrator):
    r"""Bias-corrected temperature scaling (BCTS): one temperature, one bias per class.

    Calibrated probabilities are ``softmax(z / T + b)`` with a single
    temperature ``T > 0`` and biases ``b`` in ``R^K``, fitted jointly by the
    (weighted) negative log-likelihood on the calibration set. This is vector
    scaling with the scale tied across classes: ``K + 1`` parameters, a convex
    problem solved exactly (Newton's method in float64 with the exact
    Hessian, from the temperature-scaling solution, which it contains, so the
    calibration NLL is never above temperature scaling's).

    Alexandari et al. introduced it for label-shift adaptation: the biases
    correct the systematic per-class offsets that temperature scaling leaves,
    and expectation-maximisation of the target class priors on BCTS
    probabilities beat the black-box estimators in their experiments (see
    :class:`~sklearn_calib.label_shift.LabelShiftAdapter`). The biases can
    change the argmax, so accuracy may change; report it beside the
    calibration metrics.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the temperature-scaling start is solved. The joint Newton solve
        runs in numpy (float64). The fitted state is numpy either way.
    max_iter : int, default=100
        Maximum number of Newton iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-10
        The solve stops when the largest absolute entry of the gradient of the
        mean weighted NLL (projected on the biases summing to zero, in the
        units of ``z / T_0`` with ``T_0`` the temperature-scaling solution)
        is at most ``tol``.

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
        The fitted temperature ``T``.
    intercept_ : ndarray of shape (n_classes,)
        The biases ``b``; adding a constant to all of them changes nothing,
        and the solution returned has them summing to zero over the classes
        with calibration samples.
    objective_ : float
        The mean weighted NLL at the solution, on the calibration set.
    n_iter_ : int
        Newton iterations of the joint solve.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    TemperatureScaling : No biases; keeps the argmax.
    VectorScaling : One scale per class as well as one bias.
    sklearn_calib.label_shift.LabelShiftAdapter : Adapts the probabilities
        to new class priors; BCTS is its default calibrator.

    Notes
    -----
    **Classes without samples.** A class absent from the calibration labels
    (with ``classes=`` set) has no finite bias: its probability would fall to
    0. Its bias is held at 0 while the other biases keep a mean of 0, so it
    keeps its temperature-scaling odds against the mean class, with a
    ``UserWarning``.

    **Logits ranked against the labels.** The scale ``1 / T`` is kept at or
    above ``1e-4`` times the temperature-scaling solution's: where, with the
    biases fitted, the NLL would keep falling below it (towards a negative
    ``T``, a map that reverses the ranking of the logits), ``T`` is clamped
    to ``1e4`` times temperature scaling's, the biases are solved there (the
    exact optimum of the bounded convex problem), and a ``UserWarning`` says
    so: the probabilities are then nearly the calibration class frequencies.

    **Masked classes.** A logit of ``-inf`` keeps probability exactly 0 in
    :meth:`predict_proba`, :meth:`transform` and :meth:`to_torch`. A row
    must not mask its true class (``ValueError``).

    **Scale.** The fit does not depend on the scale of ``sample_weight``.
    Above 1024 classes the Newton step is solved by conjugate gradients on
    Hessian-vector products (the exact Hessian is ``(K + 1)^2``), to a
    gradient of at most ``max(tol, 1e-8)``.

    References
    ----------
    .. [1] A. Alexandari, A. Kundaje and A. Shrikumar, "Maximum Likelihood
       with Bias-Corrected Calibration is Hard-To-Beat at Label Shift
       Adaptation", ICML 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import BiasCorrectedTemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> logits[:, 0] += 1.0  # a systematic offset that temperature cannot fix
    >>> bcts = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)
    >>> print(f"T = {bcts.temperature_:.2f}, b = {np.round(bcts.intercept_, 2)}")
    T = 0.91, b = [-0.71  0.45  0.25]
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "device": [str],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, *, device="auto", max_iter=100, tol=1e-10, classes=None):
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        name = type(self).__name__
        n_classes = logits.shape[1]
        check_true_class_unmasked(logits, y, sample_weight)
        temperature = TemperatureScaling(device=self.device)
        temperature._fit(logits, y, sample_weight)
        result = fit_bcts(
            logits,
            y,
            sample_weight,
            beta0=1.0 / temperature.temperature_,
            max_iter=self.max_iter,
            tol=self.tol,
        )
        if result["n_absent"]:
            warnings.warn(
                f"{name}: {result['n_absent']:,} of the {n_classes:,} classes have "
                "no calibration sample, so their biases have no finite optimum; "
                "they are held at 0 (the other biases keep a mean of 0), which "
                "keeps their temperature-scaling odds against the mean class.",
                UserWarning,
                stacklevel=4,
            )
        if result["status"] == "overflow":
            warnings.warn(
                f"{name} did not converge (overflow): at the temperature-scaling "
                f"solution (T = {temperature.temperature_:.3g}) the objective's "
                "terms overflow float64 (the logits' gaps span hundreds of orders "
                "of magnitude); the fit stopped after "
                f"{result['n_iter']} Newton iterations.",
                ConvergenceWarning,
                stacklevel=4,
            )
        elif result["status"] != "converged":
            warnings.warn(
                f"{name} did not converge ({result['status']}) in "
                f"max_iter={self.max_iter} Newton iterations: the largest gradient "
                f"entry is {result['gradient']:.3e} > tol={self.tol:g}.",
                ConvergenceWarning,
                stacklevel=4,
            )
        if result["at_min_scale"]:
            warnings.warn(
                "The NLL keeps decreasing as T grows with the biases fitted: "
                "the logits rank the classes against the labels (a negative T "
                f"would reverse them). {name} clamped T to its upper bound "
                f"{1.0 / result['beta']:.4g}, 1e4 times the temperature-scaling "
                "solution: the probabilities are nearly the calibration class "
                "frequencies.",
                UserWarning,
                stacklevel=4,
            )
        if result["loss"] < SEPARATED_LOSS or scale_and_biases_separate(
            logits, y, sample_weight
        ):
            warnings.warn(
                f"{name}: the calibrated logits separate the calibration samples "
                "(where the logits are not tied at the boundary; mean NLL "
                f"{result['loss']:.1e} on them), so the likelihood has "
                "no finite optimum and the fit stopped where it was still "
                "improving. Use TemperatureScaling or more calibration samples.",
                UserWarning,
                stacklevel=4,
            )
        self.temperature_ = float(1.0 / result["beta"])
        self.intercept_ = result["bias"]
        self.objective_ = float(result["loss"])
        self.n_iter_ = int(result["n_iter"])

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_classes = len(self.classes_)
        check_state_float(self, "temperature_", low=0.0, low_open=True)
        check_state_array(self, "intercept_", shape=(n_classes,), finite=True)
        check_state_float(self, "objective_", low=0.0)
        check_state_int(self, "n_iter_")

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        mask = mask_of(logits)
        # Shifted by the row maximum first (scale_logits): the shift changes
        # no softmax of z / T + b and is exact, while z / T rounds to the
        # precision of |z| (logits offset by 1e4 moved float32
        # log-probabilities by 4e-4). Masked entries stay -inf.
        work = logits.astype(np.float64)
        out = scale_logits(work, 1.0 / self.temperature_) + self.intercept_
        return keep_masked(out, mask).astype(dtype, copy=False)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(z / T + b)`` (vector scaling's module with a tied
            scale); exportable with ``torch.export.export``.
        """
        check_is_fitted(self)
        from .._torch._scaling_modules import VectorScalingModule

        return VectorScalingModule(
            np.full(len(self.classes_), 1.0 / self.temperature_),
            self.intercept_,
            tied=True,
        )
