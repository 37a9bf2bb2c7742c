"""Metrics of prediction sets (conformal prediction).

A prediction set is a boolean row over the classes: ``y_set[i, k]`` is True
when class ``k`` is in sample ``i``'s set, as returned by
:meth:`sklearn_calib.conformal.ConformalClassifier.predict_set`. These
functions are not calibration losses (their names end in neither
``_error`` nor ``_loss``): coverage should reach its target, sets should be
small.
"""

from typing import NamedTuple

import numpy as np

from ..utils._validation import (
    as_numpy_array,
    check_sample_weight,
    check_true_labels,
    encode_metric_labels,
    weight_scale,
)


def _check_sets(y_set):
    if hasattr(y_set, "tocsr") and hasattr(y_set, "toarray"):
        # scipy.sparse: np.asarray made a 0-d object array of it ("got an
        # array with 0 dimension(s)"); sets of many classes may come sparse.
        y_set = y_set.toarray()
    y_set = as_numpy_array(y_set)
    if y_set.dtype == object and y_set.size:
        # pandas' nullable "boolean" columns come as objects: True/False are
        # read as booleans; a missing value (pd.NA) is refused below.
        flat = y_set.ravel()
        if all(isinstance(v, (bool, np.bool_)) for v in flat):
            y_set = y_set.astype(bool)
    if y_set.ndim != 2:
        raise ValueError(
            f"y_set must be 2-D (n_samples, n_classes) of booleans; got an array "
            f"with {y_set.ndim} dimension(s)."
        )
    if y_set.shape[0] == 0:
        raise ValueError("y_set has 0 samples; at least 1 is required.")
    if y_set.dtype != bool:
        if not np.issubdtype(y_set.dtype, np.number) or not np.all(
            (y_set == 0) | (y_set == 1)
        ):
            raise ValueError(
                "y_set must hold booleans (or 0/1): which classes each set holds."
            )
        y_set = y_set.astype(bool)
    return y_set


def _check_weights(sample_weight, y_set):
    """Checked weights divided by :func:`weight_scale`, and that scale.

    Only the weights' ratios enter the coverages and sizes; dividing by a
    power of two (exact) keeps their sums finite: weights of 1e308 overflowed
    them to inf, giving NaN with numpy's RuntimeWarnings.
    """
    if sample_weight is None:
        return None, 1.0
    sample_weight = check_sample_weight(sample_weight, y_set)
    scale = weight_scale(sample_weight)
    return sample_weight / scale, scale


def _check_set_inputs(y_true, y_set, sample_weight, labels):
    y_set = _check_sets(y_set)
    y_true = check_true_labels(y_true, y_set.shape[0], rows_of="y_set")
    y_codes, classes = encode_metric_labels(y_true, y_set.shape[1], labels)
    sample_weight, scale = _check_weights(sample_weight, y_set)
    return y_codes, y_set, sample_weight, scale


def _covered(y_codes, y_set):
    return y_set[np.arange(y_set.shape[0]), y_codes]


def set_coverage(y_true, y_set, *, sample_weight=None, labels=None):
    """Fraction of samples whose prediction set holds the true label.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets, columns in the order of ``labels``.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_set`` (an estimator's ``classes_``);
        None: integer labels in ``range(n_classes)`` are column indices, other
        labels are sorted.

    Returns
    -------
    coverage : float
        In [0, 1]; a conformal classifier at ``confidence_level`` aims for at
        least that value.

    See Also
    --------
    mean_set_size : The price paid for coverage.
    classwise_coverage : Coverage of each true class.

    Examples
    --------
    >>> from sklearn_calib.metrics import set_coverage
    >>> sets = [[True, False, False], [True, True, False], [False, False, True]]
    >>> set_coverage([0, 2, 2], sets)
    0.6666666666666666
    """
    y_codes, y_set, sample_weight, _ = _check_set_inputs(
        y_true, y_set, sample_weight, labels
    )
    return float(np.average(_covered(y_codes, y_set), weights=sample_weight))


def mean_set_size(y_set, *, sample_weight=None):
    """Average number of labels in a prediction set.

    Parameters
    ----------
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.

    Returns
    -------
    size : float

    See Also
    --------
    median_set_size : Less sensitive to a few very large sets.
    set_coverage : What the size buys.

    Examples
    --------
    >>> from sklearn_calib.metrics import mean_set_size
    >>> mean_set_size([[True, False, False], [True, True, False], [True, True, True]])
    2.0
    """
    y_set = _check_sets(y_set)
    sample_weight, _ = _check_weights(sample_weight, y_set)
    return float(np.average(y_set.sum(axis=1), weights=sample_weight))


def median_set_size(y_set, *, sample_weight=None):
    """Median number of labels in a prediction set.

    With weights, the weighted median: the smallest size whose cumulative
    weight reaches half the total (the lower median for an even count of
    unit weights).

    Parameters
    ----------
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.

    Returns
    -------
    size : float

    Examples
    --------
    >>> from sklearn_calib.metrics import median_set_size
    >>> sets = [[True, False, False], [True, True, True], [True, False, False]]
    >>> median_set_size(sets)
    1.0
    """
    y_set = _check_sets(y_set)
    sample_weight, _ = _check_weights(sample_weight, y_set)
    sizes = y_set.sum(axis=1)
    weights = np.ones(sizes.shape[0]) if sample_weight is None else sample_weight
    order = np.argsort(sizes, kind="stable")
    cumulative = np.cumsum(weights[order])
    half = 0.5 * cumulative[-1]
    # A relative slack keeps an exact half (an even count of unit weights) on
    # the lower side despite rounding in the cumulative sum.
    index = int(np.searchsorted(cumulative, half * (1 - 1e-12), side="left"))
    return float(sizes[order][index])


class SetSizeCoverage(NamedTuple):
    """Coverage within each stratum of set sizes.

    Attributes
    ----------
    set_size : ndarray of shape (n_strata,)
        The size of each stratum (``bins=None``) or its lower edge.
    coverage : ndarray of shape (n_strata,)
        Coverage of the samples whose set size falls in the stratum; NaN for
        an empty stratum.
    weight : ndarray of shape (n_strata,)
        Total weight (count) of each stratum.
    """

    set_size: np.ndarray
    coverage: np.ndarray
    weight: np.ndarray


def size_stratified_coverage(
    y_true, y_set, *, bins=None, sample_weight=None, labels=None
):
    """Coverage of the samples grouped by the size of their set.

    A valid procedure can over-cover small sets and under-cover large ones
    (or the reverse) while its average looks right; the size-stratified
    coverage of Angelopoulos et al. [1]_ exposes it. Their SSCV metric is
    ``max |coverage - confidence_level|`` over the non-empty strata.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets.
    bins : array-like of int, default=None
        None: one stratum per set size that occurs. Otherwise increasing
        edges ``b_0 < b_1 < ... < b_m``: stratum ``j`` holds the sizes in
        ``[b_j, b_{j+1})``, the last one ``[b_{m-1}, b_m]``; sizes outside
        every stratum are left out.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_set``.

    Returns
    -------
    result : SetSizeCoverage
        ``(set_size, coverage, weight)``.

    References
    ----------
    .. [1] A. N. Angelopoulos, S. Bates, J. Malik and M. I. Jordan,
       "Uncertainty Sets for Image Classifiers using Conformal Prediction",
       ICLR 2021.

    Examples
    --------
    >>> from sklearn_calib.metrics import size_stratified_coverage
    >>> sets = [[True, False, False], [True, True, False], [False, True, True]]
    >>> result = size_stratified_coverage([0, 2, 2], sets)
    >>> result.set_size.tolist(), result.coverage.tolist()
    ([1, 2], [1.0, 0.5])
    """
    y_codes, y_set, sample_weight, scale = _check_set_inputs(
        y_true, y_set, sample_weight, labels
    )
    sizes = y_set.sum(axis=1)
    weights = np.ones(sizes.shape[0]) if sample_weight is None else sample_weight
    covered = _covered(y_codes, y_set)
    if bins is None:
        strata, index = np.unique(sizes, return_inverse=True)
        n_strata = strata.shape[0]
    else:
        edges = as_numpy_array(bins)
        if (
            edges.ndim != 1
            or edges.shape[0] < 2
            or not np.issubdtype(edges.dtype, np.number)
            or not np.all(np.diff(edges) > 0)
        ):
            raise ValueError(
                "bins must be at least two increasing set sizes (stratum edges); "
                f"got {edges.tolist()!r}."
            )
        strata = edges[:-1]
        n_strata = strata.shape[0]
        index = np.searchsorted(edges, sizes, side="right") - 1
        index[sizes == edges[-1]] = n_strata - 1
        inside = (index >= 0) & (index < n_strata)
        index, weights, covered = index[inside], weights[inside], covered[inside]
    total = np.bincount(index, weights=weights, minlength=n_strata)
    hits = np.bincount(index, weights=weights * covered, minlength=n_strata)
    with np.errstate(invalid="ignore", divide="ignore"):
        coverage = np.where(total > 0, hits / total, np.nan)
    # The weights were divided by scale: the totals in the caller's scale
    # (inf where they exceed float64's range, as their sum does).
    with np.errstate(over="ignore"):
        weight = total * scale
    return SetSizeCoverage(set_size=strata, coverage=coverage, weight=weight)


def classwise_coverage(y_true, y_set, *, sample_weight=None, labels=None):
    """Coverage of the samples of each true class.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_set``.

    Returns
    -------
    coverage : ndarray of shape (n_classes,)
        In the column order of ``y_set``; NaN for a class without samples
        (or of zero weight).

    See Also
    --------
    worst_class_coverage : The smallest of these.

    Examples
    --------
    >>> from sklearn_calib.metrics import classwise_coverage
    >>> sets = [[True, False, False], [True, True, False], [False, False, True]]
    >>> classwise_coverage([0, 2, 2], sets).tolist()
    [1.0, nan, 0.5]
    """
    y_codes, y_set, sample_weight, _ = _check_set_inputs(
        y_true, y_set, sample_weight, labels
    )
    n_classes = y_set.shape[1]
    weights = np.ones(y_codes.shape[0]) if sample_weight is None else sample_weight
    covered = _covered(y_codes, y_set)
    total = np.bincount(y_codes, weights=weights, minlength=n_classes)
    hits = np.bincount(y_codes, weights=weights * covered, minlength=n_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, hits / total, np.nan)


def worst_class_coverage(y_true, y_set, *, sample_weight=None, labels=None):
    """Smallest coverage over the true classes present.

    A marginal guarantee allows one class to be covered far less often than
    the others; class-conditional (Mondrian) calibration bounds this value.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_set : array-like of shape (n_samples, n_classes) of bool
        Prediction sets.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_set``.

    Returns
    -------
    coverage : float

    Examples
    --------
    >>> from sklearn_calib.metrics import worst_class_coverage
    >>> sets = [[True, False, False], [True, True, False], [False, False, True]]
    >>> worst_class_coverage([0, 2, 2], sets)
    0.5
    """
    return float(
        np.nanmin(
            classwise_coverage(
                y_true, y_set, sample_weight=sample_weight, labels=labels
            )
        )
    )
