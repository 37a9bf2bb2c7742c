"""Flexible (loess) calibration curves, their confidence band and distances.

The smoother is R's ``loess`` as the guidelines use it (Van Calster et al.
2016 and 2019, Austin and Steyerberg 2019, ``CalibrationCurves``): a local
polynomial of degree 2 in the predicted probability, tricube weights over
the ``floor(span * n)`` nearest predictions, span 0.75, no robustness
iterations (the outcomes are 0/1, not contaminated measurements). At a point
``x0`` the bandwidth ``h`` is the distance to the ``floor(span * n)``-th
nearest prediction, the weights ``w_i (1 - (|x_i - x0| / h)^3)^3`` and the
estimate the intercept of the weighted least-squares quadratic in
``x - x0``; this equals ``predict(loess(y ~ p, degree = 2, span = 0.75,
surface = "direct"))`` to rounding.

Why loess and not a spline or a logistic GAM: it is the smoother the ICI,
E50 and E90 of Austin and Steyerberg are defined with, so the distances are
comparable with published values; a span of 0.75 (R's default) is theirs,
smooth enough for the few hundred events of a typical validation study and
still local enough to show a bend in the curve. Smaller spans follow the
data more closely at the price of a wider band.

Speed on large samples: the estimate is a weighted sum over the data, so
rows with the same prediction are added up first (exactly), and beyond
``_MAX_POINTS`` distinct predictions the rows are grouped into that many
equal-width cells of the prediction, each standing at its weighted mean
prediction (linear binning, Fan and Marron 1994); the bandwidths are still
found exactly on the sorted predictions. The curve is evaluated at the
distinct predictions when there are at most ``_MAX_EXACT_EVALUATIONS`` of
them, otherwise on a grid of that many points, and linearly interpolated at
the data: on 10^6 predictions both approximations move the estimate by less
than 1e-5.

The band is pointwise: ``s(x0) +- z * se(x0)``, with ``se`` the standard
error of the linear smoother under binomial outcomes of probability
``s(x0)`` in the window, ``se^2 = s (1 - s) sum_i l_i^2`` (``l_i`` the
smoother's weight of row ``i``), clipped to [0, 1].
"""

from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from scipy import stats

from ..utils._compat import Interval, StrOptions, validate_params
from ..utils._validation import check_metric_inputs, weight_scale
from ._bin_statistics import top_label

_MAX_POINTS = 4096
_MAX_EXACT_EVALUATIONS = 1024
_GRID_BLOCK = 64


class FlexibleCalibrationCurve(NamedTuple):
    """A smooth calibration curve with its band and distances.

    Attributes
    ----------
    prob_pred : ndarray of shape (n_points,)
        Predicted probabilities at which the curve is evaluated (sorted).
    prob_true : ndarray of shape (n_points,)
        The smoothed observed frequency at each (not clipped: a local
        quadratic can leave [0, 1] at the ends, as R's loess does).
    prob_true_low, prob_true_high : ndarray of shape (n_points,)
        Pointwise confidence band, clipped to [0, 1].
    ici : float
        Integrated calibration index: the (weighted) mean over the sample of
        ``|p_i - s(p_i)|``.
    e50, e90 : float
        Median and 90th percentile of ``|p_i - s(p_i)|``.
    emax : float
        Its maximum over the sample.
    """

    prob_pred: np.ndarray
    prob_true: np.ndarray
    prob_true_low: np.ndarray
    prob_true_high: np.ndarray
    ici: float
    e50: float
    e90: float
    emax: float


def _cells(x, y, w):
    """Distinct predictions (or fine cells) with summed weights and outcomes.

    Returns the cell positions (weighted mean prediction), total weight,
    weighted outcome sum and sum of squared weights, sorted by position.
    """
    values, inverse = np.unique(x, return_inverse=True)
    if values.shape[0] > _MAX_POINTS:
        lo, hi = values[0], values[-1]
        inverse = np.minimum(
            ((x - lo) / (hi - lo) * _MAX_POINTS).astype(np.intp), _MAX_POINTS - 1
        )
    size = int(inverse.max()) + 1
    weight = np.bincount(inverse, weights=w, minlength=size)
    keep = weight > 0
    position = np.bincount(inverse, weights=w * x, minlength=size)[keep]
    outcome = np.bincount(inverse, weights=w * y, minlength=size)[keep]
    squared = np.bincount(inverse, weights=w**2, minlength=size)[keep]
    weight = weight[keep]
    return position / weight, weight, outcome, squared


def _bandwidths(sorted_x, x0, q):
    """Distance from each ``x0`` to its ``q``-th nearest of ``sorted_x``.

    The ``q`` nearest points are a window ``sorted_x[l:l + q]``; ``l`` is
    found by bisection for every ``x0`` at once (a bounded loop of
    ``log2 n`` steps).
    """
    n = sorted_x.shape[0]
    lo = np.zeros(x0.shape, dtype=np.intp)
    hi = np.full(x0.shape, n - q, dtype=np.intp)
    # Smallest l with x0 - x[l] <= x[l + q] - x0 (the window may not move right).
    for _ in range(int(np.ceil(np.log2(max(n, 2)))) + 2):
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        right = np.minimum(mid + q, n - 1)
        moves = (x0 - sorted_x[mid] > sorted_x[right] - x0) & (mid + q < n)
        lo = np.where(active & moves, mid + 1, lo)
        hi = np.where(active & ~moves, mid, hi)
    first = lo
    return np.maximum(x0 - sorted_x[first], sorted_x[first + q - 1] - x0)


def loess_fit(x0, position, weight, outcome, squared, bandwidth, degree):
    """Local polynomial estimate and its binomial standard error at ``x0``."""
    estimate = np.empty(x0.shape)
    variance_factor = np.empty(x0.shape)
    powers = np.arange(degree + 1)
    for start in range(0, x0.shape[0], _GRID_BLOCK):
        block = slice(start, start + _GRID_BLOCK)
        h = bandwidth[block][:, None]
        offset = position[None, :] - x0[block][:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.abs(offset) / h
        kernel = np.where(u < 1, (1 - np.minimum(u, 1) ** 3) ** 3, 0.0)
        # A window of zero width (x0 shared by at least q rows): the local
        # fit is the mean outcome there, the nearest cell's. Its position, a
        # weighted mean of equal predictions, may be x0 off by a rounding.
        nearest = np.abs(offset) == np.abs(offset).min(axis=1, keepdims=True)
        kernel = np.where(h > 0, kernel, nearest.astype(float))
        # Columns (x - x0)^k / h^k keep the normal equations well scaled;
        # the Gram matrix needs only the moments of orders 0 .. 2 degree.
        scale = np.where(h > 0, h, 1.0)
        # Rows outside the window (kernel 0) add nothing: their scaled
        # offsets are set to 0, not left to reach inf in the powers (a
        # window of 1e-260 beside rows 1 away: 0 * inf made the moments NaN
        # and the least-norm solve failed, 'Eigenvalues did not converge').
        with np.errstate(over="ignore"):
            scaled = np.where(kernel > 0, offset / scale, 0.0)
        k_weight = kernel * weight
        moments = np.empty((scaled.shape[0], 2 * degree + 1))
        targets = np.empty((scaled.shape[0], degree + 1))
        power = np.ones_like(scaled)
        weighted_outcome = kernel * outcome
        for m in range(2 * degree + 1):
            moments[:, m] = np.sum(k_weight * power, axis=1)
            if m <= degree:
                targets[:, m] = np.sum(weighted_outcome * power, axis=1)
            power = power * scaled
        gram = moments[:, powers[:, None] + powers[None, :]]
        # A degenerate window (fewer distinct points than coefficients) is
        # solved in the least-norm sense.
        solution = np.linalg.pinv(gram, hermitian=True)
        coef = np.einsum("gjk,gk->gj", solution, targets)
        estimate[block] = coef[:, 0]
        # Row i's weight in the estimate: e1' G^-1 x_i k_i (per unit weight).
        first = solution[:, 0, :]
        row = first[:, :1] * np.ones_like(scaled)
        power = scaled
        for m in range(1, degree + 1):
            row += first[:, m : m + 1] * power
            power = power * scaled
        row *= kernel
        variance_factor[block] = np.sum(row**2 * squared, axis=1)
    return estimate, variance_factor


def weighted_quantile(values, q, weights):
    """R's default (type 7) quantile, with weights its continuous extension.

    Type 7 interpolates linearly between the sorted values, the ``k``-th
    standing at ``(k - 1) / (n - 1)``. With weights the ``k``-th stands at
    ``A_k / (A_k + B_k)``, ``A_k`` and ``B_k`` the total weight of the rows
    before and after it (the weighted percentile with ``C = 1``): equal
    weights give type 7 exactly, any common scale changes nothing, a row of
    zero weight is a row dropped, and a weight close to the others gives a
    quantile close to the unweighted one. Integer weights are not repeated
    rows: type 7 itself moves when every row is repeated (the 0.9 quantile
    of 0, 1 is 0.9, of 0, 0, 1, 1 it is 1).
    """
    values = np.asarray(values, dtype=np.float64)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        positive = weights > 0
        values = values[positive]
        weights = weights[positive] / weight_scale(weights)
        if np.all(weights == weights[0]):
            weights = None
    if weights is None:
        return float(np.quantile(values, q))
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    before = np.concatenate(([0.0], np.cumsum(weights[:-1])))
    after = np.concatenate((np.cumsum(weights[:0:-1])[::-1], [0.0]))
    position = before / (before + after)
    return float(np.interp(q, position, values))


def distances(errors, weights):
    """ICI, E50, E90 and Emax of the absolute errors ``|p - s(p)|``."""
    if weights is None:
        return (
            float(np.mean(errors)),
            weighted_quantile(errors, 0.5, None),
            weighted_quantile(errors, 0.9, None),
            float(np.max(errors)),
        )
    return (
        float(np.average(errors, weights=weights)),
        weighted_quantile(errors, 0.5, weights),
        weighted_quantile(errors, 0.9, weights),
        float(np.max(errors[weights > 0])),
    )


def binary_scores(y_true, y_prob, sample_weight, labels):
    """Positive-class (binary) or top-label (multiclass) scores and outcomes.

    Equal weights are dropped (they change nothing), so that unit weights
    give exactly the unweighted quantiles.
    """
    y_codes, proba, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    if proba.shape[1] == 2:
        p, y = proba[:, 1], y_codes == 1
    else:
        p, y = top_label(proba, y_codes)
    if sample_weight is not None and np.all(sample_weight == sample_weight[0]):
        sample_weight = None
    return p.astype(np.float64), y, sample_weight


def flexible_curve(p, y, w, *, span, degree, confidence_level):
    """:func:`flexible_calibration_curve` on validated binary data."""
    # Divided by a power of two (exact): the band sums squared weights,
    # which must neither overflow nor underflow whatever their scale.
    weights = np.ones_like(p) if w is None else w / weight_scale(w)
    used = weights > 0
    sorted_x = np.sort(p[used])
    n = sorted_x.shape[0]
    q = int(np.floor(n * span))
    if q < degree + 1:
        raise ValueError(
            f"span={span} covers {q} of the {n} samples; the local polynomial "
            f"of degree {degree} needs at least {degree + 1}. Increase span."
        )
    position, weight, outcome, squared = _cells(
        p[used], y[used].astype(np.float64), weights[used]
    )
    if position.shape[0] <= _MAX_EXACT_EVALUATIONS:
        grid = np.unique(p[used])
        if grid.shape[0] > _MAX_EXACT_EVALUATIONS:
            grid = np.linspace(sorted_x[0], sorted_x[-1], _MAX_EXACT_EVALUATIONS)
    else:
        grid = np.linspace(sorted_x[0], sorted_x[-1], _MAX_EXACT_EVALUATIONS)
    bandwidth = _bandwidths(sorted_x, grid, q)
    estimate, factor = loess_fit(
        grid, position, weight, outcome, squared, bandwidth, degree
    )
    # The variance of a weighted smoother: sum_i l_i^2 w_i^2 s (1 - s) with
    # l_i normalised by the total kernel weight, hence weights of any scale.
    probability = np.clip(estimate, 0.0, 1.0)
    se = np.sqrt(probability * (1.0 - probability) * factor)
    z = stats.norm.isf((1 - confidence_level) / 2)
    low = np.clip(estimate - z * se, 0.0, 1.0)
    high = np.clip(estimate + z * se, 0.0, 1.0)
    smoothed = np.interp(p, grid, estimate)
    errors = np.abs(p - smoothed)
    ici, e50, e90, emax = distances(errors, w)
    return FlexibleCalibrationCurve(grid, estimate, low, high, ici, e50, e90, emax)


@validate_params(
    {
        "y_true": ["array-like"],
        "y_prob": ["array-like"],
        "span": [Interval(Real, 0, 1, closed="right")],
        "degree": [Interval(Integral, 1, 2, closed="both")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "sample_weight": ["array-like", None],
        "labels": ["array-like", None],
        "method": [StrOptions({"loess"})],
    },
    prefer_skip_nested_validation=True,
)
def flexible_calibration_curve(
    y_true,
    y_prob,
    *,
    span=0.75,
    degree=2,
    confidence_level=0.95,
    method="loess",
    sample_weight=None,
    labels=None,
):
    """Smooth (loess) calibration curve with a pointwise band, and ICI, E50, E90, Emax.

    The observed frequency of the outcome is smoothed against the predicted
    probability by loess (local quadratic, tricube weights over the
    ``floor(span * n)`` nearest predictions; see the module notes for the
    choice, the band and the treatment of large samples). The distances of
    Austin and Steyerberg (2019) summarise ``|p_i - s(p_i)|`` over the
    sample: ICI its mean, E50 its median, E90 its 90th percentile, Emax its
    maximum (quantiles: R's default rule, type 7, which weights extend
    continuously: see :func:`weighted_quantile`).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities: binary problems use the positive (second)
        class, multiclass problems the top-label confidence against
        correctness.
    span : float, default=0.75
        Fraction of the sample in each local fit, in (0, 1].
    degree : {1, 2}, default=2
        Degree of the local polynomial.
    confidence_level : float, default=0.95
        Nominal pointwise coverage of the band.
    method : {"loess"}, default="loess"
        The smoother.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights, multiplying the tricube weights; the span
        counts the rows of positive weight.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    curve : FlexibleCalibrationCurve
        ``(prob_pred, prob_true, prob_true_low, prob_true_high, ici, e50,
        e90, emax)``.

    See Also
    --------
    calibration_curve : The binned curve, with binomial intervals.
    validation_report : Everything of a validation at once.

    References
    ----------
    .. [1] P. C. Austin and E. W. Steyerberg, "The Integrated Calibration
       Index (ICI) and related metrics for quantifying the calibration of
       logistic regression models", Statistics in Medicine 38, 2019.
    .. [2] W. S. Cleveland, E. Grosse and W. M. Shyu, "Local regression
       models", Statistical Models in S, 1992.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import flexible_calibration_curve
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=5000)
    >>> curve = flexible_calibration_curve(rng.uniform(size=5000) < p, p)
    >>> bool(curve.ici < 0.02)
    True
    """
    p, y, w = binary_scores(y_true, y_prob, sample_weight, labels)
    return flexible_curve(
        p, y, w, span=span, degree=degree, confidence_level=confidence_level
    )
