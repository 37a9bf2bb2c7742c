"""Scorers of the calibration metrics, by name, beside scikit-learn's own.

Each scorer is built by :func:`sklearn.metrics.make_scorer` with
``response_method="predict_proba"`` and ``greater_is_better=False`` and named
``neg_<metric>``, except where that name is a scikit-learn scorer with another
definition: the multiclass Brier score (twice scikit-learn's ``brier_score_loss``
for a binary problem) is ``neg_multiclass_brier_score``, and
``"neg_brier_score"`` stays scikit-learn's; and where the library's metric
of a scikit-learn name gives another number, the scorer computes
scikit-learn's: ``"neg_log_loss"`` scores with :func:`sklearn.metrics.log_loss`
(which clips float32 probabilities at ``1.2e-7``, where the library's
``log_loss`` clips at ``2.2e-16``). It also hands the fitted
estimator's ``classes_`` to the metric as ``labels``, so string labels and test
folds that miss a class are scored against the right columns.

Nothing is written into scikit-learn's scorer table, so scikit-learn does not
know these names: ``GridSearchCV(..., scoring="neg_expected_calibration_error")``
raises scikit-learn's ``InvalidParameterError``. Pass scorer objects instead:
``scoring=get_scorer("neg_expected_calibration_error")``, or
``scoring=get_scorers()`` for all of them at once. :func:`get_scorer` looks
names up here first, then in scikit-learn.

Beside them: ``neg_aurc`` and ``neg_excess_aurc`` (selective prediction, on
``predict_proba``), and the prediction-set scorers ``set_coverage``,
``worst_class_coverage`` (greater is better), ``neg_mean_set_size`` and
``neg_median_set_size``, which call the estimator's ``predict_set``.
"""

import copy

import numpy as np
from sklearn.metrics import get_scorer as _sklearn_get_scorer
from sklearn.metrics import get_scorer_names as _sklearn_get_scorer_names
from sklearn.metrics import log_loss as sklearn_log_loss
from sklearn.metrics import make_scorer

from ..utils._compat import ScorerSubclass
from ._calibration import (
    adaptive_calibration_error,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    rms_calibration_error,
)
from ._debiased import debiased_calibration_error
from ._proper import brier_score
from ._selective import aurc, excess_aurc
from ._sets import (
    mean_set_size,
    median_set_size,
    set_coverage,
    worst_class_coverage,
)
from ._smooth import smooth_calibration_error


class _ClassesScorer(ScorerSubclass):
    """A ``make_scorer`` scorer that passes ``estimator.classes_`` as ``labels``.

    ``predict_proba`` columns follow ``classes_``; without them a metric can
    only guess the column order from the labels present in ``y_true``.
    """

    def _score(self, method_caller, estimator, X, y_true, **kwargs):
        classes = getattr(estimator, "classes_", None)
        if (
            classes is not None
            and "labels" not in self._kwargs
            and "labels" not in kwargs
        ):
            classes = np.asarray(classes)
            order = np.argsort(classes, kind="stable")
            if self._score_func.__module__.startswith("sklearn.") and np.any(
                order != np.arange(order.size)
            ):
                # scikit-learn's metrics (the log loss of "neg_log_loss") sort
                # labels and read the columns in that order, while the
                # columns follow classes_, which a calibrator's classes= may
                # leave unsorted: hand them the columns in sorted order.
                method_caller = _sorted_columns(method_caller, order)
                classes = classes[order]
            kwargs["labels"] = classes
        return super()._score(method_caller, estimator, X, y_true, **kwargs)


def _sorted_columns(method_caller, order):
    """``method_caller`` with its probabilities' columns in sorted class order.

    A binary problem's single column is the probability of ``classes_[-1]``
    (scikit-learn's positive class); with unsorted classes that is the first
    sorted class, so it becomes the first of two columns.
    """

    def call(*args, **kwargs):
        y_pred = np.asarray(method_caller(*args, **kwargs))
        if y_pred.ndim == 1:
            return np.column_stack([y_pred, 1 - y_pred])
        return y_pred[:, order]

    return call


def _calibration_scorer(metric):
    return _ClassesScorer.from_scorer(
        make_scorer(metric, response_method="predict_proba", greater_is_better=False)
    )


# Each scorer's docstring (read by Sphinx) repeats the pitfall of names: they
# are objects to pass as scoring=, not strings scikit-learn knows.

neg_expected_calibration_error = _calibration_scorer(expected_calibration_error)
"""Scorer of :func:`expected_calibration_error`, negated (greater is better).

Pass the object, not its name: ``scoring=neg_expected_calibration_error`` or
``scoring=get_scorer("neg_expected_calibration_error")``. scikit-learn does
not know the string (its ``InvalidParameterError`` lists its own names); for
several metrics at once use ``scoring=get_scorers()``.
"""

neg_adaptive_calibration_error = _calibration_scorer(adaptive_calibration_error)
"""Scorer of :func:`adaptive_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_adaptive_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_maximum_calibration_error = _calibration_scorer(maximum_calibration_error)
"""Scorer of :func:`maximum_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_maximum_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_rms_calibration_error = _calibration_scorer(rms_calibration_error)
"""Scorer of :func:`rms_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_rms_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_classwise_calibration_error = _calibration_scorer(classwise_calibration_error)
"""Scorer of :func:`classwise_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_classwise_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_debiased_calibration_error = _calibration_scorer(debiased_calibration_error)
"""Scorer of :func:`debiased_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_debiased_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_smooth_calibration_error = _calibration_scorer(smooth_calibration_error)
"""Scorer of :func:`smooth_calibration_error`, negated (greater is better).

Pass the object (or ``get_scorer("neg_smooth_calibration_error")``) as
``scoring=``: scikit-learn does not know the name.
"""

neg_multiclass_brier_score = _calibration_scorer(brier_score)
"""Scorer of :func:`brier_score` (the multiclass sum), negated.

Not named ``neg_brier_score``: that is scikit-learn's scorer of
:func:`sklearn.metrics.brier_score_loss`, which halves the binary case, and
:func:`get_scorer` returns it unchanged. For more than two classes both give
the same value; for two, this one is twice scikit-learn's. Pass the object
(or ``get_scorer("neg_multiclass_brier_score")``) as ``scoring=``:
scikit-learn does not know the name.
"""

neg_log_loss = _calibration_scorer(sklearn_log_loss)
"""scikit-learn's log loss, negated: the number of scikit-learn's ``"neg_log_loss"``.

scikit-learn knows the name, so this scorer computes its number: it scores
with :func:`sklearn.metrics.log_loss`, which clips probabilities at the
precision of their dtype (``1.2e-7`` for float32, ``2.2e-16`` for float64)
and sums the losses in that dtype.
The library's :func:`log_loss` clips at ``2.2e-16`` whatever the dtype, so on
float32 probabilities with a true-class probability below ``1.2e-7`` (a
binning calibrator's floor, a confident mistake) the function gives the
larger, unclipped loss and this scorer scikit-learn's; on float64 they agree.
Unlike scikit-learn's scorer it passes the estimator's ``classes_`` as
``labels``, so a test fold that lacks a class is still scored.
"""

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


# The size metrics as metrics of (y_true, y_set), the scorer's signature.
# Module-level functions, so that skops finds them again by name when it
# loads a CalibratorSelector that holds one of these scorers.
def mean_set_size_of_sets(y_true, y_set, *, sample_weight=None, labels=None):
    """:func:`mean_set_size` of ``y_set``; ``y_true`` and ``labels`` unused."""
    return mean_set_size(y_set, sample_weight=sample_weight)


def median_set_size_of_sets(y_true, y_set, *, sample_weight=None, labels=None):
    """:func:`median_set_size` of ``y_set``; ``y_true`` and ``labels`` unused."""
    return median_set_size(y_set, sample_weight=sample_weight)


set_coverage_scorer = _set_scorer(set_coverage, greater_is_better=True)
worst_class_coverage_scorer = _set_scorer(worst_class_coverage, greater_is_better=True)
neg_mean_set_size = _set_scorer(mean_set_size_of_sets, greater_is_better=False)
neg_median_set_size = _set_scorer(median_set_size_of_sets, greater_is_better=False)

SCORERS = {
    "neg_expected_calibration_error": neg_expected_calibration_error,
    "neg_adaptive_calibration_error": neg_adaptive_calibration_error,
    "neg_maximum_calibration_error": neg_maximum_calibration_error,
    "neg_rms_calibration_error": neg_rms_calibration_error,
    "neg_classwise_calibration_error": neg_classwise_calibration_error,
    "neg_smooth_calibration_error": neg_smooth_calibration_error,
    "neg_debiased_calibration_error": neg_debiased_calibration_error,
    "neg_multiclass_brier_score": neg_multiclass_brier_score,
    "neg_log_loss": neg_log_loss,
    "neg_aurc": neg_aurc,
    "neg_excess_aurc": neg_excess_aurc,
    "set_coverage": set_coverage_scorer,
    "worst_class_coverage": worst_class_coverage_scorer,
    "neg_mean_set_size": neg_mean_set_size,
    "neg_median_set_size": neg_median_set_size,
}

_SET_SCORER_NAMES = {
    "set_coverage",
    "worst_class_coverage",
    "neg_mean_set_size",
    "neg_median_set_size",
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
    get_scorers : Several scorers at once, as a dict for ``scoring=``.
    get_scorer_names : Every valid name.
    sklearn.metrics.get_scorer : scikit-learn's names only.

    Notes
    -----
    scikit-learn does not know this library's names (nothing is written into
    its scorer table): ``GridSearchCV(..., scoring="neg_expected_calibration_error")``
    and ``cross_validate(..., scoring="neg_expected_calibration_error")`` raise
    scikit-learn's ``InvalidParameterError``. Pass the scorer object instead,
    ``scoring=get_scorer("neg_expected_calibration_error")``, or
    ``scoring=get_scorers()`` for all of them.

    No name here means something else than in scikit-learn: ``"neg_log_loss"``
    scores with scikit-learn's :func:`~sklearn.metrics.log_loss` (its values,
    with the estimator's ``classes_`` passed as ``labels``; the library's
    :func:`log_loss` clips float32 probabilities lower), ``"neg_brier_score"`` is
    scikit-learn's own scorer of ``brier_score_loss``, and this library's
    multiclass :func:`brier_score` (twice ``brier_score_loss`` for a binary
    problem) is ``"neg_multiclass_brier_score"``.

    Examples
    --------
    >>> from sklearn_calib.metrics import get_scorer
    >>> get_scorer("neg_expected_calibration_error")  # doctest: +NORMALIZE_WHITESPACE
    make_scorer(expected_calibration_error, greater_is_better=False,
                response_method='predict_proba')
    >>> get_scorer("accuracy")
    make_scorer(accuracy_score, response_method='predict')
    """
    if isinstance(scoring, str):
        if scoring in SCORERS:
            return copy.deepcopy(SCORERS[scoring])
        if scoring not in _sklearn_get_scorer_names():
            raise ValueError(
                f"{scoring!r} is not a valid scoring value. Use "
                "sklearn_calib.metrics.get_scorer_names() to get valid options."
            )
    return _sklearn_get_scorer(scoring)


def get_scorers(names=None):
    """Scorers by name, as a dict ready for ``scoring=``.

    scikit-learn does not know this library's scorer names, so
    ``scoring="neg_expected_calibration_error"`` fails inside
    :class:`~sklearn.model_selection.GridSearchCV` or
    :func:`~sklearn.model_selection.cross_validate` with scikit-learn's
    ``InvalidParameterError``. A dict of scorer objects works everywhere a
    multi-metric ``scoring`` is accepted; this builds it in one call.

    Parameters
    ----------
    names : list of str or None, default=None
        Names from :func:`get_scorer_names` (this library's and
        scikit-learn's). ``None`` gives every scorer of this library that
        reads ``predict_proba``, so that it applies to any calibrator; the
        prediction-set scorers (``set_coverage``, ``worst_class_coverage``,
        ``neg_mean_set_size``, ``neg_median_set_size``) need ``predict_set``
        and are given by name.

    Returns
    -------
    scorers : dict of str to callable
        ``{name: scorer}`` in the order of ``names`` (for ``None``, sorted);
        fresh copies, so they may be modified freely.

    See Also
    --------
    get_scorer : One scorer by name.

    Notes
    -----
    :class:`~sklearn.model_selection.GridSearchCV` with several scorers needs
    ``refit`` set to one of the names (or ``False``), as for any dict.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import cross_validate
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.metrics import get_scorers
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=600)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(600, 3))
    >>> "neg_multiclass_brier_score" in get_scorers()
    True
    >>> scores = cross_validate(
    ...     TemperatureScaling(device="cpu"), logits, y, cv=3,
    ...     scoring=get_scorers(["neg_expected_calibration_error", "neg_log_loss",
    ...                          "accuracy"]))
    >>> scores["test_neg_log_loss"].shape
    (3,)
    """
    if names is None:
        names = sorted(set(SCORERS) - _SET_SCORER_NAMES)
    elif isinstance(names, str):
        raise TypeError(
            f"names must be a list of scorer names, got the string {names!r}; "
            f"use get_scorers([{names!r}]) or get_scorer({names!r})."
        )
    scorers = {}
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"names must hold strings, got {name!r}.")
        scorers[name] = get_scorer(name)
    return scorers


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
    return sorted(set(SCORERS) | set(_sklearn_get_scorer_names()))
