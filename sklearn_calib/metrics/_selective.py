"""Risk-coverage curve and AURC, published by :mod:`sklearn_calib.selective`.

The public names are listed once, in :mod:`sklearn_calib.selective`.
"""

from numbers import Real
from typing import NamedTuple

import numpy as np
from scipy.special import digamma

from ..utils._validation import (
    as_numpy_array,
    check_labels_per_row,
    check_metric_inputs,
    weight_scale,
)
from ._bin_statistics import top_label

__all__ = [
    "RiskCoverageCurve",
    "aurc",
    "coverage_at_risk",
    "excess_aurc",
    "risk_coverage_curve",
    "selective_risk",
]


class RiskCoverageCurve(NamedTuple):
    """The risk-coverage curve, one point per distinct confidence.

    Attributes
    ----------
    coverage : ndarray of shape (n_points,)
        Fraction (of the total weight) of samples accepted, increasing.
    risk : ndarray of shape (n_points,)
        Error rate among the accepted samples (selective risk).
    thresholds : ndarray of shape (n_points,)
        Confidence threshold of each point, decreasing: a sample is
        accepted when its confidence is at least the threshold.
    """

    coverage: np.ndarray
    risk: np.ndarray
    thresholds: np.ndarray


class _Statistics(NamedTuple):
    """Per tie group, by decreasing confidence: weights and errors."""

    mass: np.ndarray  # weight of the group
    loss: np.ndarray  # weighted errors of the group
    cum_mass: np.ndarray  # weight accepted up to and including the group
    cum_loss: np.ndarray  # errors accepted up to and including the group
    thresholds: np.ndarray
    total: float
    # The weights above are divided by this power of two (exact), so that
    # huge weights cannot overflow the sums; AURC reads them as counts
    # (frequency weights) and multiplies it back where the count matters.
    weight_unit: float = 1.0


def _check_confidence(confidence, n_samples):
    confidence = check_labels_per_row(
        as_numpy_array(confidence), n_samples, name="confidence", rows_of="y_prob"
    )
    if not np.issubdtype(confidence.dtype, np.number) or confidence.dtype == bool:
        raise TypeError(f"confidence must hold numbers, got dtype {confidence.dtype}.")
    confidence = confidence.astype(np.float64, copy=False)
    if not np.all(np.isfinite(confidence)):
        raise ValueError("confidence contains NaN or infinity.")
    return confidence


def selective_statistics(y_codes, y_prob, confidence, sample_weight):
    """Group the samples by decreasing confidence and sum weights and errors."""
    top_confidence, correct = top_label(y_prob, y_codes)
    if confidence is None:
        confidence = top_confidence.astype(np.float64)
    else:
        confidence = _check_confidence(confidence, y_prob.shape[0])
    weights = (
        np.ones(y_prob.shape[0]) if sample_weight is None else sample_weight
    ).astype(np.float64)
    unit = weight_scale(weights)
    weights = weights / unit
    order = np.argsort(-confidence, kind="stable")
    ranked = confidence[order]
    weights = weights[order]
    errors = np.where(correct[order], 0.0, weights)
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    mass = np.add.reduceat(weights, starts)
    loss = np.add.reduceat(errors, starts)
    thresholds = ranked[starts]
    # A group of zero weight accepts nothing: it is no point of the curve.
    keep = mass > 0
    mass, loss, thresholds = mass[keep], loss[keep], thresholds[keep]
    return _Statistics(
        mass=mass,
        loss=loss,
        cum_mass=np.cumsum(mass),
        cum_loss=np.cumsum(loss),
        thresholds=thresholds,
        total=float(mass.sum()),
        weight_unit=unit,
    )


def _digamma_of_count(mass, unit):
    """``digamma(unit * mass + 1)`` without forming an overflowing ``unit * mass``.

    Beyond 1e15 samples ``digamma(x + 1) = log(x) + 1 / (2 x)`` to double
    precision, and ``log(x) = log(unit) + log(mass)`` needs no product.
    """
    with np.errstate(over="ignore"):
        count = unit * mass
    out = np.empty_like(mass)
    small = count < 1e15
    out[small] = digamma(count[small] + 1.0)
    big = ~small
    with np.errstate(divide="ignore"):
        out[big] = np.log(unit) + np.log(mass[big]) + 0.5 / count[big]
    return out


def _area(mass, loss, cum_mass, cum_loss, total, unit=1.0):
    """``(1/W) sum_k r_k`` with ties averaged; see the module docstring.

    Inside a group the expected errors among the first ``t`` accepted grow
    linearly, ``L_prev + rho (t - K_prev)``, so the group adds
    ``sum_k (L_prev + rho (k - K_prev)) / k`` over its ``k``: ``rho m +
    (L_prev - rho K_prev) (psi(K + 1) - psi(K_prev + 1))``. With unit weights
    and no ties each term is exactly ``r_k``. The weights are given divided
    by ``unit``; only the digamma terms read them as counts.
    """
    prev_mass = cum_mass - mass
    prev_loss = cum_loss - loss
    rate = loss / mass
    harmonic = _digamma_of_count(cum_mass, unit) - _digamma_of_count(prev_mass, unit)
    return float(np.sum(loss + (prev_loss - rate * prev_mass) * harmonic) / total)


def aurc_from_statistics(stats):
    """AURC and E-AURC of grouped statistics."""
    unit = stats.weight_unit
    area = _area(
        stats.mass, stats.loss, stats.cum_mass, stats.cum_loss, stats.total, unit
    )
    errors = float(stats.cum_loss[-1])
    right = stats.total - errors
    # The ideal confidence: one group of the correct predictions, then one of
    # the errors (either may be empty).
    mass = np.array([m for m in (right, errors) if m > 0])
    loss = np.array([0.0, errors] if right > 0 and errors > 0 else [errors])
    ideal = _area(mass, loss, np.cumsum(mass), np.cumsum(loss), stats.total, unit)
    return area, area - ideal


def risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels):
    """:func:`selective_statistics` of unvalidated metric inputs."""
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    return selective_statistics(y_codes, y_prob, confidence, sample_weight)


def risk_coverage_curve(
    y_true, y_prob, *, confidence=None, sample_weight=None, labels=None
):
    """Selective risk against coverage, one point per confidence threshold.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (of any calibrator); the prediction is the
        most probable column (the first on ties).
    confidence : array-like of shape (n_samples,), default=None
        Score by which samples are accepted, higher first; None uses the
        probability of the predicted class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    curve : RiskCoverageCurve
        ``(coverage, risk, thresholds)``; the last point accepts every sample
        (coverage 1, risk = the error rate).

    See Also
    --------
    aurc : The area under this curve.
    sklearn_calib.display.RiskCoverageDisplay : Its plot.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.selective import risk_coverage_curve
    >>> y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    >>> curve = risk_coverage_curve([0, 1, 0, 1], y_prob)
    >>> curve.coverage.tolist(), curve.risk.tolist()
    ([0.25, 0.5, 0.75, 1.0], [0.0, 0.0, 0.3333333333333333, 0.5])
    >>> curve.thresholds.tolist()
    [0.9, 0.8, 0.7, 0.6]
    """
    stats = risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels)
    return RiskCoverageCurve(
        coverage=stats.cum_mass / stats.total,
        risk=stats.cum_loss / stats.cum_mass,
        thresholds=stats.thresholds,
    )


def aurc(y_true, y_prob, *, confidence=None, sample_weight=None, labels=None):
    """Area under the risk-coverage curve (lower is better).

    ``AURC = (1/n) sum_{k=1..n} r_k`` with ``r_k`` the error rate of the
    ``k`` most confident samples [1]_; ties of confidence are averaged over
    their orderings and weights count as repetitions (module docstring).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities.
    confidence : array-like of shape (n_samples,), default=None
        Score by which samples are accepted; None uses the probability of
        the predicted class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    aurc : float
        In [0, 1]; 0 when every prediction is right.

    See Also
    --------
    excess_aurc : AURC minus its ideal value at the same accuracy.

    References
    ----------
    .. [1] Y. Geifman, G. Uziel and R. El-Yaniv, "Bias-Reduced Uncertainty
       Estimation for Deep Neural Classifiers", ICLR 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.selective import aurc
    >>> y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    >>> round(aurc([0, 1, 0, 1], y_prob), 6)   # (0 + 0 + 1/3 + 1/2) / 4
    0.208333
    """
    stats = risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels)
    return aurc_from_statistics(stats)[0]


def excess_aurc(y_true, y_prob, *, confidence=None, sample_weight=None, labels=None):
    """Excess AURC (E-AURC): AURC minus the AURC of an ideal confidence.

    The ideal confidence ranks every correct prediction above every error,
    so E-AURC measures the ranking alone, not the accuracy [1]_. The ideal
    AURC uses the same definition as :func:`aurc` (so E-AURC is 0 for a
    perfect ranking); for large ``n`` it tends to the closed form
    ``r + (1 - r) log(1 - r)`` of [1]_, ``r`` the error rate.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities.
    confidence : array-like of shape (n_samples,), default=None
        Score by which samples are accepted; None uses the probability of
        the predicted class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    excess_aurc : float
        At least 0.

    References
    ----------
    .. [1] Y. Geifman, G. Uziel and R. El-Yaniv, "Bias-Reduced Uncertainty
       Estimation for Deep Neural Classifiers", ICLR 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.selective import excess_aurc
    >>> y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    >>> excess_aurc([0, 1, 0, 1], y_prob)   # errors are the least confident
    0.0
    >>> # errors ranked 1st and 4th: (1 + 1/2 + 1/3 + 1/2)/4 - (0 + 0 + 1/3 + 1/2)/4
    >>> round(excess_aurc([1, 1, 0, 0], y_prob), 6)
    0.375
    """
    stats = risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels)
    return aurc_from_statistics(stats)[1]


def _check_fraction(value, name):
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a float in (0, 1], got {value!r}.")
    return float(value)


def selective_risk(
    y_true, y_prob, *, coverage, confidence=None, sample_weight=None, labels=None
):
    """Error rate among the most confident samples making up ``coverage``.

    When the accepted fraction ends inside a tie of confidence, the tie is
    accepted in proportion (the expected risk over its orderings), as in
    :func:`aurc`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities.
    coverage : float in (0, 1]
        Fraction (of the total weight) of samples accepted.
    confidence : array-like of shape (n_samples,), default=None
        Score by which samples are accepted; None uses the probability of
        the predicted class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    risk : float
        Error rate of the accepted samples.

    See Also
    --------
    coverage_at_risk : The converse question.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.selective import selective_risk
    >>> y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    >>> selective_risk([0, 1, 0, 1], y_prob, coverage=0.5)
    0.0
    >>> selective_risk([0, 1, 0, 1], y_prob, coverage=1.0)
    0.5
    """
    coverage = _check_fraction(coverage, "coverage")
    stats = risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels)
    accepted = coverage * stats.total
    group = int(np.searchsorted(stats.cum_mass, accepted * (1 - 1e-12), side="left"))
    group = min(group, len(stats.mass) - 1)
    prev_mass = stats.cum_mass[group] - stats.mass[group]
    prev_loss = stats.cum_loss[group] - stats.loss[group]
    rate = stats.loss[group] / stats.mass[group]
    return float((prev_loss + rate * (accepted - prev_mass)) / accepted)


def coverage_at_risk(
    y_true, y_prob, *, risk, confidence=None, sample_weight=None, labels=None
):
    """Largest coverage of a confidence threshold with selective risk at most ``risk``.

    Only threshold rules (accept when the confidence is at least ``t``) are
    considered, so ties are accepted together: the coverage is one of
    :func:`risk_coverage_curve`'s, and 0 when no threshold is good enough.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities.
    risk : float in [0, 1]
        Largest acceptable error rate among the accepted samples.
    confidence : array-like of shape (n_samples,), default=None
        Score by which samples are accepted; None uses the probability of
        the predicted class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    coverage : float
        In [0, 1].

    See Also
    --------
    selective_risk : The converse question.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.selective import coverage_at_risk
    >>> y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    >>> coverage_at_risk([0, 1, 0, 1], y_prob, risk=0.4)
    0.75
    """
    if isinstance(risk, bool) or not isinstance(risk, Real) or not 0 <= risk <= 1:
        raise ValueError(f"risk must be a float in [0, 1], got {risk!r}.")
    stats = risk_coverage_statistics(y_true, y_prob, confidence, sample_weight, labels)
    rates = stats.cum_loss / stats.cum_mass
    # Rates are ratios of sums: a slack of a few ulps keeps a rate equal to
    # ``risk`` in exact arithmetic on the accepted side. The slack is relative:
    # an absolute one let risk=0 accept an error of weight 1e-17 (rate 5e-18).
    good = rates <= risk * (1 + 8 * np.finfo(np.float64).eps)
    if not np.any(good):
        return 0.0
    return float(stats.cum_mass[good].max() / stats.total)
