"""Binned calibration metrics: the ECE family and the reliability curve.

The public functions validate their inputs, add the data to one
:class:`~sklearn_calib.metrics.BinnedCalibrationAccumulator` (equal-width
bins) or bin them in memory (equal-mass bins, whose edges are quantiles of all
the scores) and read the metric off the bin sums. The binning convention and
its kernels live in :mod:`sklearn_calib.metrics._bin_statistics`.
"""

from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from ..utils._compat import Interval, StrOptions, validate_params
from ..utils._validation import (
    check_metric_inputs,
    scale_free_weights,
    weight_scale,
)
from ._accumulators import BinnedCalibrationAccumulator
from ._bin_statistics import Binning

COMMON_CONSTRAINTS = {
    "y_true": ["array-like"],
    "y_prob": ["array-like"],
    "sample_weight": ["array-like", None],
    "labels": ["array-like", None],
}
BINNED_CONSTRAINTS = {
    **COMMON_CONSTRAINTS,
    "n_bins": [Interval(Integral, 1, None, closed="left")],
    "strategy": [StrOptions({"uniform", "quantile"})],
}


def binned_state(
    y_codes, y_prob, sample_weight, *, n_bins, strategy, multiclass="top-label"
):
    """The accumulator state of validated in-memory data.

    Equal-width bins: one update of a
    :class:`~sklearn_calib.metrics.BinnedCalibrationAccumulator`, the state
    that takes chunks. Equal-mass bins: the edges are quantiles of all the
    scores, so the in-memory binning finds them and the sums together, and
    the state holds those edges as fixed ``bin_edges``.
    """
    if strategy == "uniform":
        state = BinnedCalibrationAccumulator(n_bins=n_bins, multiclass=multiclass)
        return state._update_validated(y_codes, y_prob, sample_weight)
    binning = Binning(
        y_codes, y_prob, n_bins=n_bins, strategy=strategy, multiclass=multiclass
    )
    return BinnedCalibrationAccumulator._from_statistics(
        binning.statistics(sample_weight),
        multiclass=multiclass,
        strategy=strategy,
        n_classes=y_prob.shape[1],
        n_samples=y_prob.shape[0],
    )


def _binned_metric(
    y_true,
    y_prob,
    sample_weight,
    labels,
    *,
    reduction,
    multiclass="top-label",
    **params,
):
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    state = binned_state(
        y_codes, y_prob, scale_free_weights(sample_weight), multiclass=multiclass,
        **params,
    )  # fmt: skip
    return state._value(reduction)


# --- public metrics ---------------------------------------------------------------


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def expected_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Expected calibration error (ECE) of the top-label prediction.

    Each sample's confidence is its largest predicted probability
    ``p_i = max_k q_ik``; it is correct when that class is the true label.
    Samples are binned by confidence and

    .. math::

        \mathrm{ECE} = \sum_b \frac{W_b}{W} \big|\mathrm{acc}_b - \mathrm{conf}_b\big|,

    where ``W_b`` is the (weighted) number of samples in bin ``b``,
    ``acc_b`` the fraction of them that is correct and ``conf_b`` their mean
    confidence. Empty bins are skipped.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities, rows summing to 1. A 1-D array holds the
        positive-class probabilities ``p`` of a binary problem (the columns
        ``(1 - p, p)``). torch tensors and pandas objects are accepted.
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: equal-width bins ``(b/M, (b+1)/M]``, a confidence of 0
        in the first bin and of 1 in the last. ``"quantile"``: equal-mass
        bins whose inner edges are weighted quantiles of the confidences
        (the adaptive ECE, see :func:`adaptive_calibration_error`).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; they replace the counts everywhere.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob`` (for example an estimator's
        ``classes_``), as in scikit-learn. When None: integer labels whose
        smallest value is 0 and that lie in ``range(n_classes)`` are the
        column indices; otherwise exactly ``n_classes`` distinct labels are
        sorted, as scikit-learn orders ``classes_``. Anything else (for
        example 1-based labels ``1..4`` of which 4 is absent) is ambiguous
        and raises a ``ValueError`` asking for ``labels=``. The other metrics
        follow the same rule.

    Returns
    -------
    ece : float
        Between 0 and 1; lower is better.

    See Also
    --------
    adaptive_calibration_error : The same sum over equal-mass bins.
    maximum_calibration_error : The largest bin gap.
    smooth_calibration_error : A kernel-smoothed, binning-free variant.
    calibration_curve : The per-bin accuracies and confidences.

    References
    ----------
    .. [1] M. P. Naeini, G. Cooper and M. Hauskrecht, "Obtaining Well
       Calibrated Probabilities Using Bayesian Binning", AAAI 2015.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> from sklearn_calib.metrics import expected_calibration_error
    >>> expected_calibration_error([1, 0], [0.95, 1.0], n_bins=10)
    0.475
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="ece",
    )


@validate_params(
    {k: v for k, v in BINNED_CONSTRAINTS.items() if k != "strategy"},
    prefer_skip_nested_validation=True,
)
def adaptive_calibration_error(
    y_true, y_prob, *, n_bins=15, sample_weight=None, labels=None
):
    """Adaptive (equal-mass) expected calibration error of the top-label prediction.

    The ECE sum over ``n_bins`` bins whose inner edges are the weighted
    ``b / n_bins`` quantiles of the confidences (the smallest confidence
    whose cumulative weight reaches that fraction), so that each bin holds
    about ``N / n_bins`` samples. Bins are ``(lo, hi]`` as in the equal-width
    case; ties can leave bins empty, and empty bins are skipped. The same as
    ``expected_calibration_error(..., strategy="quantile")``.

    Not to be confused with an "average" calibration error that weighs the
    bins equally.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; they replace the counts, in the quantiles too.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    ace : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : Equal-width bins.

    References
    ----------
    .. [1] J. Nixon, M. Dusenberry, L. Zhang, G. Jerfel and D. Tran,
       "Measuring Calibration in Deep Learning", CVPR Workshops 2019.
    .. [2] J. Mukhoti, V. Kulharia, A. Sanyal, S. Golodetz, P. Torr and
       P. Dokania, "Calibrating Deep Neural Networks using Focal Loss",
       NeurIPS 2020.

    Examples
    --------
    >>> from sklearn_calib.metrics import adaptive_calibration_error
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.3, 0.7]]
    >>> round(adaptive_calibration_error([0, 1, 1, 0], y_prob, n_bins=2), 4)
    0.25
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy="quantile",
        reduction="ece",
    )


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def maximum_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    """Maximum calibration error (MCE): the largest gap over non-empty bins.

    ``max_b |acc_b - conf_b|`` over the top-label bins that hold samples
    (a positive total weight). Sensitive to sparsely filled bins; read it with
    the bin counts of :func:`calibration_curve`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins, as in
        :func:`expected_calibration_error`.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    mce : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : The weighted mean of the same gaps.

    References
    ----------
    .. [1] M. P. Naeini, G. Cooper and M. Hauskrecht, "Obtaining Well
       Calibrated Probabilities Using Bayesian Binning", AAAI 2015.

    Examples
    --------
    >>> from sklearn_calib.metrics import maximum_calibration_error
    >>> # confidences 0.95 (right) and 1.0 (wrong) share a bin, 0.7 (wrong) is alone
    >>> round(maximum_calibration_error([1, 0, 1], [0.95, 1.0, 0.3], n_bins=10), 4)
    0.7
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="mce",
    )


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def rms_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Root-mean-square (L2) calibration error of the top-label prediction.

    .. math::

        \mathrm{RMSCE} = \sqrt{\sum_b \frac{W_b}{W}
        \big(\mathrm{acc}_b - \mathrm{conf}_b\big)^2}

    over the non-empty bins. Never smaller than the ECE on the same bins.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    rmsce : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : The L1 version.

    References
    ----------
    .. [1] A. Kumar, P. Liang and T. Ma, "Verified Uncertainty Calibration",
       NeurIPS 2019.

    Examples
    --------
    >>> from sklearn_calib.metrics import rms_calibration_error
    >>> round(rms_calibration_error([1, 0], [0.95, 1.0], n_bins=10), 4)
    0.475
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="rms",
    )


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def classwise_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Class-wise expected calibration error: the mean of the per-class ECEs.

    .. math::

        \mathrm{cwECE} = \frac{1}{K} \sum_k \sum_b \frac{W_{kb}}{W}
        \big|\bar{o}_{kb} - \bar{q}_{kb}\big|,

    where class ``k``'s bins hold the probabilities ``q_ik`` of **all**
    samples, ``\bar{q}_{kb}`` is their mean in bin ``b`` and ``\bar{o}_{kb}``
    the fraction of those samples whose label is ``k``. Unlike the top-label
    ECE it sees every class, not only the predicted one.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities,
        giving the two classes ``(1 - p, p)``).
    n_bins : int, default=15
        Number of bins per class.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width bins, or equal-mass bins per class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    cwece : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : Top-label version.
    calibration_curve : ``multiclass="classwise"`` gives the per-class bins.

    References
    ----------
    .. [1] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song
       and P. Flach, "Beyond temperature scaling: Obtaining well-calibrated
       multiclass probabilities with Dirichlet calibration", NeurIPS 2019.

    Examples
    --------
    >>> from sklearn_calib.metrics import classwise_calibration_error
    >>> y_prob = [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]]
    >>> round(classwise_calibration_error([0, 1, 1], y_prob, n_bins=5), 4)
    0.2667
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        multiclass="classwise",
        reduction="ece",
    )


class CalibrationCurveInterval(NamedTuple):
    """A :class:`CalibrationCurve` with a binomial interval of each bin's accuracy.

    Returned by :func:`calibration_curve` when ``interval`` is given.

    Attributes
    ----------
    accuracy, confidence, count, bin_edges : ndarray
        As in :class:`CalibrationCurve`.
    accuracy_low, accuracy_high : ndarray of the shape of ``accuracy``
        Ends of the interval of each bin's accuracy; NaN in empty bins.
    """

    accuracy: np.ndarray
    confidence: np.ndarray
    count: np.ndarray
    bin_edges: np.ndarray
    accuracy_low: np.ndarray
    accuracy_high: np.ndarray


@validate_params(
    {
        **BINNED_CONSTRAINTS,
        "multiclass": [StrOptions({"top-label", "classwise"})],
        "interval": [StrOptions({"clopper-pearson", "wilson", "jeffreys"}), None],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
    },
    prefer_skip_nested_validation=True,
)
def calibration_curve(
    y_true,
    y_prob,
    *,
    n_bins=15,
    strategy="uniform",
    multiclass="top-label",
    sample_weight=None,
    labels=None,
    interval=None,
    confidence_level=0.95,
):
    """Per-bin accuracy, mean confidence and count: the data of a reliability diagram.

    Uses the same bins as every binned metric, so
    ``sum(count * abs(accuracy - confidence)) / sum(count)`` over the
    non-empty bins is :func:`expected_calibration_error`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins.
    multiclass : {"top-label", "classwise"}, default="top-label"
        ``"top-label"``: bin the confidence ``max_k q_ik`` against
        correctness. ``"classwise"``: for each class ``k``, bin ``q_ik``
        against ``1[y_i = k]`` (for a binary problem, row 1 is scikit-learn's
        positive-class calibration curve).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; ``count`` is then the total weight per bin.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.
    interval : {"clopper-pearson", "wilson", "jeffreys"} or None, default=None
        Also return a binomial confidence interval of each bin's accuracy
        (see :func:`~sklearn_calib.metrics.binomial_interval`; weighted bins
        use the effective count ``(sum w)^2 / sum w^2``).
    confidence_level : float, default=0.95
        Nominal coverage of ``interval``.

    Returns
    -------
    curve : CalibrationCurve or CalibrationCurveInterval
        A named tuple ``(accuracy, confidence, count, bin_edges)``, with
        ``accuracy_low`` and ``accuracy_high`` after them when ``interval``
        is given. For
        top-label, ``accuracy``, ``confidence`` and ``count`` have shape
        (n_bins,) and ``bin_edges`` (n_bins + 1,); class-wise, one row per
        class. ``accuracy`` is the fraction of correct samples (class-wise:
        of samples of that class) and ``confidence`` the mean score of the
        bin; both are NaN in empty bins, where ``count`` is 0.

    See Also
    --------
    sklearn_calib.display.ReliabilityDisplay : Plots these values.
    sklearn.calibration.calibration_curve : Binary, positive-class version.

    Examples
    --------
    >>> from sklearn_calib.metrics import calibration_curve
    >>> # top-label confidences 0.95, 1.0 and 0.7; only the first is correct
    >>> curve = calibration_curve([1, 0, 1], [0.95, 1.0, 0.3], n_bins=2)
    >>> curve.count
    array([0., 3.])
    >>> curve.accuracy
    array([       nan, 0.33333333])
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    # The bins are filled with the weights divided by a power of two (exact),
    # so that their sums cannot overflow; the counts are given in the
    # caller's scale (inf where their sum exceeds float64's range).
    unit = 1.0 if sample_weight is None else weight_scale(sample_weight)
    scaled = scale_free_weights(sample_weight)
    state = binned_state(
        y_codes,
        y_prob,
        scaled,
        n_bins=n_bins,
        strategy=strategy,
        multiclass=multiclass,
    )
    curve = state.calibration_curve()
    with np.errstate(over="ignore"):
        count = curve.count * unit
    if interval is None:
        return curve._replace(count=count)
    from ._binomial import bin_accuracy_interval

    low, high = bin_accuracy_interval(
        curve,
        y_codes,
        y_prob,
        scaled,
        multiclass=multiclass,
        strategy=strategy,
        method=interval,
        confidence_level=confidence_level,
    )
    return CalibrationCurveInterval(*curve._replace(count=count), low, high)
