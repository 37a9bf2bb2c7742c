"""Bootstrap confidence intervals for any metric, evaluated in batches of resamples.

A bootstrap resample is a vector of counts (how often each row was drawn),
so a metric that accepts sample weights evaluates it as the weights
``counts * sample_weight``. The resamples are drawn as rows of indices, turned
into a count matrix slab by slab, and every metric of this library evaluates
a whole slab at once (its binning, confidences and per-sample losses are
computed once). Any other metric is called once per resample on the drawn rows.
"""

import inspect
from functools import partial
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from ..utils._compat import Interval, validate_params
from ..utils._validation import (
    check_grid_entries,
    check_metric_inputs,
    scale_free_weights,
)
from . import _calibration as _cal
from . import _proper, _smooth
from ._bin_statistics import BinnedMetric, slabs
from ._sample_losses import MeanLoss


def _binned(**fixed):
    def factory(y_codes, y_prob, **params):
        return BinnedMetric(y_codes, y_prob, **fixed, **params)

    return factory


# The metrics evaluated in batches: public function -> factory of an evaluator
# ``evaluate(weights (n_rows, n_samples)) -> values (n_rows,)``.
_BATCHED = {
    _cal.expected_calibration_error: _binned(reduction="ece"),
    _cal.adaptive_calibration_error: _binned(reduction="ece", strategy="quantile"),
    _cal.maximum_calibration_error: _binned(reduction="mce"),
    _cal.rms_calibration_error: _binned(reduction="rms"),
    _cal.classwise_calibration_error: _binned(reduction="ece", multiclass="classwise"),
    _smooth.smooth_calibration_error: _smooth.SmoothMetric,
    _proper.log_loss: partial(MeanLoss, "log_loss"),
    _proper.brier_score: partial(MeanLoss, "brier_score"),
}


def resample_indices(n_samples, n_resamples, random_state):
    """Yield slabs of bootstrap row indices, shape (slab_size, n_samples).

    The slab size depends on ``n_samples`` only, so a seed gives the same
    resamples on every machine.
    """
    rng = check_random_state(random_state)
    for rows in slabs(n_resamples, n_samples):
        yield rng.randint(0, n_samples, size=(rows.stop - rows.start, n_samples))


def counts_of(indices, n_samples):
    """How often each row appears in each resample: shape (n_rows, n_samples)."""
    n_rows = indices.shape[0]
    keys = (indices + n_samples * np.arange(n_rows)[:, None]).ravel()
    return np.bincount(keys, minlength=n_rows * n_samples).reshape(n_rows, n_samples)


def resample_weights(n_samples, n_resamples, random_state, sample_weight=None):
    """Yield slabs of bootstrap weight matrices ``counts * sample_weight``."""
    for indices in resample_indices(n_samples, n_resamples, random_state):
        weights = counts_of(indices, n_samples).astype(np.float64)
        if sample_weight is not None:
            weights *= sample_weight
        yield weights


class BootstrapInterval(NamedTuple):
    """A metric value with its bootstrap interval (see :func:`bootstrap_interval`).

    Attributes
    ----------
    value : float
        The metric on the full data.
    low, high : float
        The percentile interval of the resampled values.
    resamples : ndarray of shape (n_resamples,)
        The metric on each bootstrap resample; NaN for a resample that drew
        only rows of zero weight (left out of ``low`` and ``high``).
    """

    value: float
    low: float
    high: float
    resamples: np.ndarray


@validate_params(
    {
        "metric": [callable],
        "y_true": ["array-like"],
        "y_prob": ["array-like"],
        "n_resamples": [Interval(Integral, 1, None, closed="left")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "sample_weight": ["array-like", None],
        "labels": ["array-like", None],
        "random_state": ["random_state"],
    },
    # The metric's own parameters (n_bins, ...) are validated by the metric.
    prefer_skip_nested_validation=False,
)
def bootstrap_interval(
    metric,
    y_true,
    y_prob,
    *,
    n_resamples=1000,
    confidence_level=0.95,
    sample_weight=None,
    labels=None,
    random_state=None,
    **metric_params,
):
    """Percentile bootstrap confidence interval of a metric.

    Draws ``n_resamples`` resamples of the rows with replacement (each the
    size of the data), evaluates the metric on each and returns the
    ``(1 - confidence_level) / 2`` and ``(1 + confidence_level) / 2``
    quantiles of the resampled values. The metrics of this library are
    evaluated on whole slabs of resamples at once, as weight matrices
    (counts times ``sample_weight``), without recomputing their binning or
    confidences; any other ``metric(y_true, y_prob, **metric_params)`` is
    called on the drawn rows, once per resample.

    Parameters
    ----------
    metric : callable
        A metric of :mod:`sklearn_calib.metrics`, or any function
        ``metric(y_true, y_prob, **metric_params)`` returning a float.
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities.
    n_resamples : int, default=1000
        Number of bootstrap resamples.
    confidence_level : float, default=0.95
        Coverage of the interval, in (0, 1).
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the rows, passed to the metric (multiplied by the counts of
        each resample).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``, passed to the metric. When
        None, a metric that takes ``labels`` and is called on the drawn rows
        gets the classes read from the full data, so that a resample lacking
        a class scores the same columns.
    random_state : int, RandomState instance or None, default=None
        Seeds the resampling; an int gives the same interval on every run.
    **metric_params : dict
        Further keyword arguments of the metric (``n_bins``, ``strategy``...).

    Returns
    -------
    interval : BootstrapInterval
        Named tuple ``(value, low, high, resamples)``: the metric on the data,
        the interval bounds and the ``n_resamples`` resampled values.

    See Also
    --------
    scipy.stats.bootstrap : Bootstrap intervals of generic statistics.

    References
    ----------
    .. [1] B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap",
       Chapman & Hall, 1993.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import bootstrap_interval, expected_calibration_error
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.5, 1.0, size=1000)
    >>> y = (rng.uniform(size=1000) < p).astype(int)
    >>> ci = bootstrap_interval(expected_calibration_error, y, p, random_state=0)
    >>> bool(ci.low <= ci.value <= ci.high)
    True
    """
    # The resampled values are one array: refused at once, not after hours
    # of resampling (10**12 resamples ran on towards a MemoryError).
    check_grid_entries("n_resamples", n_resamples, n_resamples, what="resamples")
    common = {}
    if sample_weight is not None:
        common["sample_weight"] = sample_weight
    if labels is not None:
        common["labels"] = labels
    # The metric on the full data validates the inputs and its parameters.
    value = float(metric(y_true, y_prob, **common, **metric_params))
    factory = _BATCHED.get(metric)
    if factory is not None:
        y_codes, y_prob, sample_weight, _ = check_metric_inputs(
            y_true, y_prob, sample_weight=sample_weight, labels=labels
        )
        # The batched metrics depend on the weights' ratios only: divided by
        # a power of two (exact), counts * weights cannot overflow.
        sample_weight = scale_free_weights(sample_weight)
        evaluate = factory(y_codes, y_prob, **metric_params)
        n_samples = y_codes.shape[0]
        resampled = np.concatenate(
            [
                _evaluate_drawn(evaluate, weights)
                for weights in resample_weights(
                    n_samples, n_resamples, random_state, sample_weight
                )
            ]
        )
    else:
        if labels is None and _takes_labels(metric):
            # The classes of the full data: a resample that lacks a class
            # scores the same columns, instead of raising that its labels
            # are ambiguous (0-based labels without 0, too few strings).
            classes = _data_classes(y_true, y_prob)
            if classes is not None:
                common["labels"] = classes
        resampled = _resample_generic(
            metric, y_true, y_prob, common, metric_params, n_resamples, random_state
        )
    alpha = (1 - confidence_level) / 2
    low, high = np.nanquantile(resampled, [alpha, 1 - alpha])
    return BootstrapInterval(value, float(low), float(high), resampled)


def _takes_labels(metric):
    """Whether ``metric`` has a ``labels`` parameter."""
    try:
        return "labels" in inspect.signature(metric).parameters
    except (TypeError, ValueError):
        return False


def _data_classes(y_true, y_prob):
    """The class of each column as the metrics read the full data, or None.

    None where the data are not labels and probabilities in the metrics'
    sense (a custom metric's own inputs): nothing is passed then.
    """
    try:
        return check_metric_inputs(y_true, y_prob)[3]
    except (TypeError, ValueError):
        return None


def _evaluate_drawn(evaluate, weights):
    """The batched metric on each resample; NaN where it drew no weight.

    A resample whose drawn rows all weigh 0 has no metric (the metrics
    refuse weights that are all zero): its value is NaN, as in the generic
    path, instead of whatever the reduction makes of empty sums (0 for the
    MCE and the smooth ECE).
    """
    drawn = weights.sum(axis=1) > 0
    values = np.full(weights.shape[0], np.nan)
    if np.any(drawn):
        values[drawn] = evaluate(weights[drawn])
    return values


def _resample_generic(
    metric, y_true, y_prob, common, metric_params, n_resamples, random_state
):
    """Call ``metric`` on the drawn rows of each resample."""
    y_true = np.asarray(y_true)
    y_prob = np.asarray(y_prob)
    sample_weight = common.get("sample_weight")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight)
    values = []
    for indices in resample_indices(y_true.shape[0], n_resamples, random_state):
        for rows in indices:
            params = dict(common)
            if sample_weight is not None:
                params["sample_weight"] = sample_weight[rows]
                if not np.sum(params["sample_weight"]) > 0:
                    # No weight drawn: no metric (NaN, as in the batched path).
                    values.append(np.nan)
                    continue
            values.append(metric(y_true[rows], y_prob[rows], **params, **metric_params))
    return np.asarray(values, dtype=np.float64)
