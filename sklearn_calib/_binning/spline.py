"""Spline calibration of the top-label confidence (Gupta et al., ICLR 2021).

The cumulative accuracy minus the cumulative confidence, as a function of the
fraction of the calibration set sorted by confidence, is smoothed by a
cubic spline; its slope is the accuracy minus the confidence at each point,
which gives the recalibrated confidence. Only the top label's probability
changes (the others are rescaled), so the argmax is kept.
"""

from numbers import Integral

import numpy as np
from scipy.special import expit
from sklearn.isotonic import isotonic_regression

from ..base import BaseCalibrator
from ..utils._compat import Interval, check_is_fitted
from ..utils._fitted_state import check_state_array, fail_state
from ..utils._math import log_softmax, top_label_correctness
from .one_vs_rest import near_others, sum_slack

# Largest calibrated confidence: the other classes keep at least 1e-12 of
# the mass together, so log-probabilities stay finite.
CONFIDENCE_CAP = 1.0 - 1e-12
# The recalibrated top class beats the runner-up by at least this factor.
_TIE_MARGIN = 1e-9

# 4-point Gauss-Legendre on [0, 1]: exact for the degree-6 products of a cubic
# spline piece with itself.
_GAUSS_X, _GAUSS_W = np.polynomial.legendre.leggauss(4)
_GAUSS_X = 0.5 * (_GAUSS_X + 1.0)
_GAUSS_W = 0.5 * _GAUSS_W


def top_label(logits):
    """log-probabilities, predicted class, log confidence, log of the rest."""
    log_p = log_softmax(np.asarray(logits, dtype=np.float64))
    rows = np.arange(log_p.shape[0])
    top = log_p.argmax(axis=1)
    log_old = log_p[rows, top]
    others = log_p.copy()
    others[rows, top] = -np.inf
    second = others.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(np.isfinite(second), second, 0.0)
        log_rest = shift + np.log(np.exp(others - shift[:, None]).sum(axis=1))
    return log_p, top, log_old, log_rest, others, second


def apply_top_label(logits, new_confidence_of):
    """Replace the top label's probability ``p`` by ``new_confidence_of(log(1 - p))``.

    The map reads ``log(1 - p)``, the log of the other classes' total,
    computed from the logits: near ``p = 1`` it keeps apart confidences that
    float64 rounds to within an ulp of each other (or to 1).
    The other classes are rescaled by ``(1 - new) / (1 - p)`` in log space.
    ``new`` is floored just above the value at which the runner-up would tie
    with the top class (so the argmax stays) and capped at
    ``CONFIDENCE_CAP``. A row whose other classes are all masked keeps its
    probability 1.
    """
    log_p, top, log_old, log_rest, others, second = top_label(logits)
    rows = np.arange(log_p.shape[0])
    new = new_confidence_of(log_rest)
    with np.errstate(invalid="ignore"):
        # p2 / (rest + p2), from the difference of logs (both may be huge).
        tie = expit(second - log_rest)
    has_rest = np.isfinite(log_rest)
    new = np.where(has_rest, np.maximum(new, tie * (1.0 + _TIE_MARGIN)), 1.0)
    new = np.minimum(new, CONFIDENCE_CAP)
    with np.errstate(invalid="ignore"):
        # (others - rest) first: both can be huge, log1p(-new) is small.
        out = (others - log_rest[:, None]) + np.log1p(-new)[:, None]
    out[rows, top] = np.log(new)
    out[~has_rest] = log_p[~has_rest]
    tied = has_rest & (second == log_old)
    if np.any(tied):
        out[tied] = _share_tied_top(log_p[tied], new_confidence_of(log_rest[tied]))
    return out


def _share_tied_top(log_p, new):
    """:func:`apply_top_label` on rows whose maximum ``t >= 2`` columns attain.

    Each tied column gets the map's value ``new`` (that of its confidence),
    floored where the largest other class would tie with it after the
    rescaling, ``p_2 / (R + t p_2)`` (``R`` the other classes' total), and
    capped at ``CONFIDENCE_CAP / t``; the other classes share ``1 - t new``.
    With no other unmasked class, the tied classes keep ``1 / t`` each.
    """
    is_top = log_p == log_p.max(axis=1, keepdims=True)
    n_top = is_top.sum(axis=1)
    rest = np.where(is_top, -np.inf, log_p)
    second = rest.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shift = np.where(np.isfinite(second), second, 0.0)
        log_rest = shift + np.log(np.exp(rest - shift[:, None]).sum(axis=1))
        floor = 1.0 / (np.exp(log_rest - second) + n_top)
    has_rest = np.isfinite(log_rest)
    new = np.where(has_rest, np.maximum(new, floor * (1.0 + _TIE_MARGIN)), 1.0)
    new = np.minimum(new, CONFIDENCE_CAP / n_top)
    with np.errstate(invalid="ignore"):
        out = (rest - log_rest[:, None]) + np.log1p(-n_top * new)[:, None]
    out = np.where(is_top, np.log(new)[:, None], out)
    out[~has_rest] = log_p[~has_rest]
    return out


def _grouping_keys(logits, log_rest, keep):
    """``log_rest[keep]``, equal for rows holding the same logits in any order.

    The table pools equal confidences, but ``log(1 - p)`` is summed in column
    order: rows holding the same logits in another order (or the classes
    permuted) fall an ulp apart and split or join the groups (1.5e-3 on
    integer logits). Rows whose value lies within the rounding of such sums
    of another row's get it again from their sorted logits, a canonical
    order; sorting every row made the fit 4 times slower at 20,000 x 1,000.
    """
    keys = log_rest[keep]
    rows = np.flatnonzero(keep)
    finite = np.where(np.isfinite(logits[rows]), logits[rows], 0.0)
    # the sums' rounding: the row's length and its logits' magnitude
    slack = sum_slack(logits.shape[1])
    slack = slack * (1.0 + np.abs(finite).max(axis=1) + np.abs(keys))
    near = near_others(keys, slack)
    if near.any():
        keys = keys.copy()
        keys[near] = top_label(np.sort(logits[rows[near]], axis=1))[3]
    return keys


def _log_expm1(a):
    """``log(expm1(a))`` for ``a >= 0``, without overflow: ``a + log(1 - exp(-a))``."""
    return a + np.log(-np.expm1(-a))


def interpolate_in_confidence(log_complement, points, values):
    """The table linear in ``p`` between its points, located by ``log(1 - p)``.

    ``points`` are increasing values of ``log(1 - p)`` (so decreasing
    confidences) and ``values`` the table there; beyond the ends the end
    values hold. The segment is found by ``log(1 - p)``, which keeps apart
    confidences that float64 rounds to within an ulp of each other near 1,
    and the weight is the one of linear interpolation in ``p``,
    ``(p - p0) / (p1 - p0) = expm1(u - u0) / expm1(u1 - u0)``, computed
    in logs, without the cancellation of ``p - p0`` or an overflow.
    """
    log_complement = np.asarray(log_complement, dtype=np.float64)
    n = points.shape[0]
    if n == 1:
        return np.full(log_complement.shape, values[0])
    index = np.clip(np.searchsorted(points, log_complement, side="right"), 1, n - 1)
    u0, u1 = points[index - 1], points[index]
    # In logs: expm1 of a gap above ~709 overflows. Below the segment
    # (u <= u0, also u = -inf: no other class) the weight is 0.
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = log_complement - u0
        weight = np.exp(_log_expm1(np.maximum(gap, 0.0)) - _log_expm1(u1 - u0))
    weight = np.where(gap > 0, np.minimum(weight, 1.0), 0.0)
    v0 = values[index - 1]
    return v0 + weight * (values[index] - v0)


def _fractile_pieces(breaks, knots):
    """Sub-intervals of [0, 1] between every break and knot, and Gauss points."""
    edges = np.unique(np.concatenate([breaks, knots]))
    lo, hi = edges[:-1], edges[1:]
    width = hi - lo
    points = (lo[:, None] + width[:, None] * _GAUSS_X).ravel()
    weights = (width[:, None] * _GAUSS_W).ravel()
    return points, weights


def fit_spline_table(log_complement, correct, weights, n_knots):
    """The recalibration table of the spline method.

    Parameters
    ----------
    log_complement : ndarray of shape (n,)
        ``log(1 - p)`` of the top-label confidences ``p``, finite.
    correct : ndarray of shape (n,)
        1.0 where the predicted class is the label.
    weights : ndarray of shape (n,), positive
    n_knots : int

    Returns
    -------
    u : ndarray of shape (k,)
        The distinct values of ``log_complement``, decreasing (so their
        confidences increase).
    x : ndarray of shape (k,)
        Their confidences ``1 - exp(u)``, non-decreasing (float64 may round
        neighbours near 1 to the same confidence).
    values : ndarray of shape (k,)
        Their recalibrated confidences (before any monotone projection).
    knot_values : ndarray of shape (n_knots,)
        The fitted spline at the knots.
    mass : ndarray of shape (k,)
        The weight of each point.
    """
    # Imported here: scipy.interpolate is slow to import, and only a fit needs it.
    from scipy.interpolate import CubicSpline

    u, inverse = np.unique(log_complement, return_inverse=True)
    # Increasing confidence is decreasing log(1 - p).
    u = np.ascontiguousarray(u[::-1])
    inverse = u.shape[0] - 1 - inverse.reshape(-1)
    x = -np.expm1(u)
    mass = np.bincount(inverse, weights=weights, minlength=x.shape[0])
    hits = np.bincount(inverse, weights=weights * correct, minlength=x.shape[0])
    total = mass.sum()
    # Sample group g occupies [t_{g-1}, t_g] of the fractile axis, over which
    # the cumulative accuracy minus cumulative confidence D rises linearly by
    # (hits_g - x_g mass_g) / total.
    # Capped at 1: the running sum may round above the total before the end.
    t = np.minimum(np.concatenate([[0.0], np.cumsum(mass) / total]), 1.0)
    t[-1] = 1.0
    d = np.concatenate([[0.0], np.cumsum(hits - x * mass) / total])
    knots = np.linspace(0.0, 1.0, n_knots)
    points, quad_weights = _fractile_pieces(t, knots)
    target = np.interp(points, t, d)
    # Natural cubic spline basis: the spline through the unit knot vectors.
    basis = CubicSpline(knots, np.eye(n_knots), bc_type="natural")
    design = basis(points)
    root = np.sqrt(quad_weights)
    knot_values = np.linalg.lstsq(design * root[:, None], target * root, rcond=None)[0]
    # The recalibrated confidence of a group: its confidence plus the mean
    # slope of the smoothed D over the group's fractile interval.
    slope = CubicSpline(knots, knot_values, bc_type="natural").derivative()
    values = x + _mean_slopes(slope, t, knots)
    return u, x, values, knot_values, mass


def _mean_slopes(slope, breaks, knots):
    """The mean of ``slope`` (a spline's derivative) between each two ``breaks``.

    ``(g(t1) - g(t0)) / (t1 - t0)`` cancels where a group's weight is tiny
    against the total (its rounding is ``eps |g| / (t1 - t0)``: 1e-3 off for
    a weight of 1e-12 among 200 unit ones) and is 0 / 0 where the interval
    rounds to a point (a weight below ``eps`` of the total). The slope ``g'``
    is a quadratic on each piece between the breaks and the knots, where
    Simpson's rule integrates it exactly; an interval of width 0 takes the
    slope at its point.
    """
    edges = np.unique(np.concatenate([breaks, knots]))
    lo, hi = edges[:-1], edges[1:]
    width = hi - lo
    slope_lo, slope_mid, slope_hi = slope(np.stack([lo, 0.5 * (lo + hi), hi]))
    integral = width * (slope_lo + 4.0 * slope_mid + slope_hi) / 6.0
    group = np.searchsorted(breaks, lo, side="right") - 1
    n_groups = breaks.shape[0] - 1
    total = np.bincount(group, weights=integral, minlength=n_groups)
    length = np.bincount(group, weights=width, minlength=n_groups)
    at_point = slope(breaks[:-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, total / length, at_point)


class SplineCalibration(BaseCalibrator):
    r"""Spline calibration of the top-label confidence (Gupta et al., ICLR 2021).

    Sort the calibration samples by their confidence ``p = max_k
    softmax(z)_k`` and let ``t`` be the (weighted) fraction of samples up to
    a point. The cumulative accuracy ``A(t)`` and the cumulative confidence
    ``C(t)`` are then two increasing curves whose slopes are the accuracy and
    the confidence at ``t``; a calibrated model has ``A = C``. The method fits
    a natural cubic spline ``g`` with ``n_knots`` equally spaced knots to
    ``D = A - C`` by least squares, and recalibrates a confidence ``p`` at
    fraction ``t`` to

    .. math::

        \hat p = p + g'(t),

    the confidence plus the smoothed gap between accuracy and confidence
    there. Between calibration confidences the map is linear; beyond them it
    keeps its end values. The table's points are stored and located as
    ``log(1 - p)``, computed from the logits, so that confidences near 1 that
    float64 rounds within an ulp of each other (or to 1) stay distinct. The
    predicted class gets ``\hat p`` and the other classes are rescaled by
    ``(1 - \hat p) / (1 - p)``, so the argmax and the accuracy never change.

    The fit is the continuous least-squares projection of the piecewise-linear
    ``D`` (each sample occupies an interval of ``t`` as long as its weight) on
    the spline space, computed exactly by Gauss-Legendre quadrature. For unit
    weights it matches the paper's least squares over the points ``t = i / N``
    up to ``O(1 / N)``, and integer weights give exactly the fit of repeated
    samples. A sample's ``g'`` is the mean slope of ``g`` over its interval.

    Parameters
    ----------
    n_knots : int, default=6
        Number of spline knots on ``[0, 1]`` (the paper's default is 6).
        More knots follow the calibration data more closely.
    monotonic : bool, default=True
        Project the recalibrated confidences on the non-decreasing sequences
        (weighted isotonic regression), so that a more confident prediction
        is never less confident after calibration. The spline's slope can
        make the map decrease where the data are sparse; where it does not,
        the projection changes nothing. ``False`` is the paper's method as
        published.

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
    log_complements_ : ndarray of shape (n_points,)
        The distinct values of ``log(1 - p)`` over the calibration set's
        top-label confidences ``p``, decreasing: the table's points.
    confidences_ : ndarray of shape (n_points,)
        Their confidences ``1 - exp(log_complements_)``, non-decreasing
        (equal where float64 rounds neighbouring confidences alike).
    calibrated_ : ndarray of shape (n_points,)
        Their recalibrated confidences, in ``[0, 1]`` (non-decreasing when
        ``monotonic=True``).
    knot_values_ : ndarray of shape (n_knots,)
        The fitted spline ``g`` at the knots ``linspace(0, 1, n_knots)``.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    HistogramBinning : Binning of the confidence (``mode="top_label"``).
    IsotonicCalibration : A monotone step map (``mode="top_label"``).
    TemperatureScaling : Also keeps the argmax.

    Notes
    -----
    The recalibrated confidence is floored just above the value at which the
    runner-up class would tie with the predicted one (the argmax stays) and
    capped at ``1 - 1e-12`` (the other classes keep some probability, so the
    log-probabilities stay finite). A masked logit (``-inf``) keeps
    probability 0; a row with one unmasked class keeps probability 1 and is
    left out of the fit.

    probmetrics' ``CDFSplineCalibrator`` ports the authors' code: the same
    spline on the points ``t = i / (N - 1)`` and a linear interpolation of
    ``p + g'(t)`` over the sorted calibration confidences. The tests check
    that both agree on real logits.

    References
    ----------
    .. [1] K. Gupta, A. Rahimi, T. Ajanthan, T. Mensink, C. Sminchisescu and
       R. Hartley, "Calibration of Neural Networks using Splines", ICLR 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import SplineCalibration
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=1000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(1000, 3))
    >>> spline = SplineCalibration().fit(2.0 * logits, y)
    >>> bool(np.all(np.diff(spline.calibrated_) >= 0))
    True
    >>> bool(np.all(spline.predict(logits) == logits.argmax(axis=1)))
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_knots": [Interval(Integral, 3, None, closed="left")],
        "monotonic": ["boolean"],
    }
    _preserves_argmax = True

    def __init__(self, *, n_knots=6, monotonic=True, classes=None):
        self.classes = classes
        self.n_knots = n_knots
        self.monotonic = monotonic

    def _fit(self, logits, y, sample_weight):
        log_p, top, log_old, log_rest, _, _ = top_label(logits)
        keep = (sample_weight > 0) & np.isfinite(log_rest)
        if not keep.any():
            raise ValueError(
                "SplineCalibration needs rows with at least two unmasked classes "
                "and a positive weight; every row has a single finite logit."
            )
        correct = top_label_correctness(log_p, y)[keep]
        u, x, values, knot_values, mass = fit_spline_table(
            _grouping_keys(logits, log_rest, keep),
            correct,
            sample_weight[keep],
            self.n_knots,
        )
        if self.monotonic:
            values = isotonic_regression(values, sample_weight=mass)
        self.log_complements_ = u
        self.confidences_ = x
        self.calibrated_ = np.clip(values, 0.0, 1.0)
        self.knot_values_ = knot_values

    def __setstate__(self, state):
        # Files of an earlier version hold a table in p only (strictly
        # increasing confidences); 1 - p below float64's resolution (p = 1)
        # becomes 2**-54.
        if "confidences_" in state and "log_complements_" not in state:
            x = np.asarray(state["confidences_"], dtype=np.float64)
            with np.errstate(divide="ignore"):
                u = np.log1p(-x)
            state["log_complements_"] = np.maximum(u, np.log(2.0**-54))
            state["confidences_"] = -np.expm1(state["log_complements_"])
        super().__setstate__(state)

    def _check_fitted_state(self):
        super()._check_fitted_state()
        # Finite: a fit keeps the rows with another unmasked class, and a
        # point at -inf (p = 1) would give NaN weights in the interpolation.
        u = check_state_array(self, "log_complements_", ndim=1, finite=True, high=0.0)
        # The table is read by searchsorted: distinct points, as np.unique
        # gives them.
        if u.shape[0] < 1 or np.any(np.diff(u) >= 0):
            fail_state(
                self,
                "log_complements_",
                "must be at least one log(1 - p), strictly decreasing",
            )
        x = check_state_array(self, "confidences_", shape=u.shape, low=0.0, high=1.0)
        # To rounding: numpy's expm1 may differ by an ulp between memory
        # layouts (vectorised or not).
        if not np.allclose(x, -np.expm1(u), rtol=1e-12, atol=0.0):
            fail_state(self, "confidences_", "must be 1 - exp(log_complements_)")
        values = check_state_array(
            self, "calibrated_", shape=u.shape, low=0.0, high=1.0
        )
        if self.monotonic and np.any(np.diff(values) < 0):
            fail_state(self, "calibrated_", "must be non-decreasing (monotonic=True)")
        check_state_array(self, "knot_values_", shape=(self.n_knots,), finite=True)

    def _new_confidence(self, log_complement):
        return interpolate_in_confidence(
            log_complement, self.log_complements_[::-1], self.calibrated_[::-1]
        )

    def _calibrated_logits(self, logits):
        return apply_top_label(logits, self._new_confidence)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            The top-label recalibration by the fitted table (linear
            interpolation, with the same floor and cap as
            :meth:`predict_proba`).
        """
        check_is_fitted(self)
        from .._torch._binning_modules import TopLabelTableModule

        return TopLabelTableModule(
            self.log_complements_[::-1].copy(),
            self.calibrated_[::-1].copy(),
            CONFIDENCE_CAP,
        )
