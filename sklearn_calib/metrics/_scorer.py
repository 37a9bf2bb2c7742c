"""Scorers of the calibration metrics, by name, beside scikit-learn's own.

Each scorer is built by :func:`sklearn.metrics.make_scorer` with
``response_method="predict_proba"`` and ``greater_is_better=False`` and named
``neg_<metric>``. It also hands the fitted estimator's ``classes_`` to the
metric as ``labels``, so string labels and test folds that miss a class are
scored against the right columns. Nothing is written into scikit-learn's
scorer table: :func:`get_scorer` looks names up here first, then in
scikit-learn.

Beside them: ``neg_aurc`` and ``neg_excess_aurc`` (selective prediction, on
``predict_proba``), and the prediction-set scorers ``set_coverage``,
``worst_class_coverage`` (greater is better), ``neg_mean_set_size`` and
``neg_median_set_size``, which call the estimator's ``predict_set``.
"""

import copy

from sklearn.metrics import get_scorer as _sklearn_get_scorer
from sklearn.metrics import get_scorer_names as _sklearn_get_scorer_names
from sklearn.metrics import make_scorer

from ..utils._compat import _Scorer
from ._calibration import (
    adaptive_calibration_error,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    rms_calibration_error,
)
from ._proper import brier_score, log_loss
from ._selective import aurc, excess_aurc
from ._sets import (
    mean_set_size,
    median_set_size,
    set_coverage,
    worst_class_coverage,
)
from ._smooth import smooth_calibration_error


class _ClassesScorer(_Scorer):
    """A ``make_scorer`` scorer that passes ``estimator.classes_`` as ``labels``.

    ``predict_proba`` columns follow ``classes_``; without them a metric can
    only guess the column order from the labels present in ``y_true``.
    """

    @classmethod
    def from_scorer(cls, scorer):
        new = cls.__new__(cls)
        new.__dict__.update(vars(scorer))
        return new

    def _score(self, method_caller, estimator, X, y_true, **kwargs):
        classes = getattr(estimator, "classes_", None)
        if (
            classes is not None
            and "labels" not in self._kwargs
            and "labels" not in kwargs
        ):
            kwargs["labels"] = classes
        return super()._score(method_caller, estimator, X, y_true, **kwargs)


def _calibration_scorer(metric):
    return _ClassesScorer.from_scorer(
        make_scorer(metric, response_method="predict_proba", greater_is_better=False)
    )


neg_expected_calibration_error = _calibration_scorer(expected_calibration_error)
neg_adaptive_calibration_error = _calibration_scorer(adaptive_calibration_error)
neg_maximum_calibration_error = _calibration_scorer(maximum_calibration_error)
neg_rms_calibration_error = _calibration_scorer(rms_calibration_error)
neg_classwise_calibration_error = _calibration_scorer(classwise_calibration_error)
neg_smooth_calibration_error = _calibration_scorer(smooth_calibration_error)
neg_brier_score = _calibration_scorer(brier_score)
neg_log_loss = _calibration_scorer(log_loss)

# Selective prediction: the area under the risk-coverage curve of predict_proba.
neg_aurc = _calibration_scorer(aurc)
neg_excess_aurc = _calibration_scorer(excess_aurc)


# Prediction sets: scored on ``predict_set`` (a response method scikit-learn
# does not know, given as a one-element list, which make_scorer accepts), so
# they apply to sklearn_calib.conformal.ConformalClassifier and its kin.
def _set_scorer(metric, *, greater_is_better):
    return _ClassesScorer.from_scorer(
        make_scorer(
            metric,
            response_method=["predict_set"],
            greater_is_better=greater_is_better,
        )
    )


def _of_sets(size_metric):
    """``size_metric(y_set)`` as a metric of ``(y_true, y_set)`` for a scorer."""

    def metric(y_true, y_set, *, sample_weight=None, labels=None):
        return size_metric(y_set, sample_weight=sample_weight)

    metric.__name__ = metric.__qualname__ = size_metric.__name__
    metric.__doc__ = size_metric.__doc__
    return metric


set_coverage_scorer = _set_scorer(set_coverage, greater_is_better=True)
worst_class_coverage_scorer = _set_scorer(worst_class_coverage, greater_is_better=True)
neg_mean_set_size = _set_scorer(_of_sets(mean_set_size), greater_is_better=False)
neg_median_set_size = _set_scorer(_of_sets(median_set_size), greater_is_better=False)

_SCORERS = {
    "neg_expected_calibration_error": neg_expected_calibration_error,
    "neg_adaptive_calibration_error": neg_adaptive_calibration_error,
    "neg_maximum_calibration_error": neg_maximum_calibration_error,
    "neg_rms_calibration_error": neg_rms_calibration_error,
    "neg_classwise_calibration_error": neg_classwise_calibration_error,
    "neg_smooth_calibration_error": neg_smooth_calibration_error,
    "neg_brier_score": neg_brier_score,
    "neg_log_loss": neg_log_loss,
    "neg_aurc": neg_aurc,
    "neg_excess_aurc": neg_excess_aurc,
    "set_coverage": set_coverage_scorer,
    "worst_class_coverage": worst_class_coverage_scorer,
    "neg_mean_set_size": neg_mean_set_size,
    "neg_median_set_size": neg_median_set_size,
}


def get_scorer(scoring):
    """A scorer by name: the calibration scorers first, then scikit-learn's.

    Parameters
    ----------
    scoring : str, callable or None
        A name from :func:`get_scorer_names` (``"neg_expected_calibration_error"``,
        ``"accuracy"``, ...). A callable or None is returned as
        :func:`sklearn.metrics.get_scorer` returns it.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y, sample_weight=None)``; a fresh copy for a
        name, so it may be modified freely.

    See Also
    --------
    get_scorer_names : Every valid name.
    sklearn.metrics.get_scorer : scikit-learn's names only.

    Notes
    -----
    ``"neg_log_loss"`` and ``"neg_brier_score"`` are also scikit-learn names;
    here they are this library's :func:`log_loss` (the same value) and
    :func:`brier_score` (the multiclass sum over classes, which for a binary
    problem is twice scikit-learn's ``brier_score_loss``).

    Examples
    --------
    >>> from sklearn_calib.metrics import get_scorer
    >>> get_scorer("neg_brier_score")
    make_scorer(brier_score, greater_is_better=False, response_method='predict_proba')
    >>> get_scorer("accuracy")
    make_scorer(accuracy_score, response_method='predict')
    """
    if isinstance(scoring, str):
        if scoring in _SCORERS:
            return copy.deepcopy(_SCORERS[scoring])
        if scoring not in _sklearn_get_scorer_names():
            raise ValueError(
                f"{scoring!r} is not a valid scoring value. Use "
                "sklearn_calib.metrics.get_scorer_names() to get valid options."
            )
    return _sklearn_get_scorer(scoring)


def get_scorer_names():
    """Names of every scorer :func:`get_scorer` accepts: ours and scikit-learn's.

    Returns
    -------
    names : list of str
        Sorted.

    Examples
    --------
    >>> from sklearn_calib.metrics import get_scorer_names
    >>> "neg_smooth_calibration_error" in get_scorer_names()
    True
    >>> "roc_auc" in get_scorer_names()
    True
    """
    return sorted(set(_SCORERS) | set(_sklearn_get_scorer_names()))
