"""A binary decision threshold that guarantees a metric at a confidence level.

Each candidate threshold ``lambda`` predicts the positive class when the
calibrated probability of the positive class (the second class) is at least
``lambda``. Its metric is a rate of one binary loss over a subset of the
samples:

============  ======================  =====================  ==============
metric        loss (an error)         counted among          target
============  ======================  =====================  ==============
precision     true negative class     predicted positives    ``>= target``
recall        predicted negative      true positives         ``>= target``
specificity   predicted positive      true negatives         ``>= target``
fpr           predicted positive      true negatives         ``<= target``
============  ======================  =====================  ==============

The hypothesis "the metric misses its target at ``lambda``" is tested with the
exact binomial tail of the errors among the samples counted (or
Hoeffding-Bentkus), and Bonferroni, Holm or fixed-sequence testing controls
the chance of certifying any wrong threshold at ``1 - confidence_level``
(Learn-then-Test). The procedure and the default grid are those of MAPIE's
``BinaryClassificationController``; fixed-sequence testing runs from the
threshold where the metric is easiest to meet (the highest for precision,
specificity and FPR, the lowest for recall), fixed by the metric rather than
read from the data.
"""

import math
import warnings
from numbers import Real

import numpy as np
from sklearn.utils.multiclass import type_of_target

from ..utils._compat import Interval, StrOptions, _fit_context, check_is_fitted
from ._bounds import (
    BOUNDS,
    ERROR_CONTROLS,
    control_error,
    risk_pvalue,
    risk_upper_bound,
)
from ._common import DecisionEstimator, check_labels

METRICS = ("precision", "recall", "specificity", "fpr")
# The metric of the secondary objective that picks one certified threshold
# (MAPIE's choice): the best recall for precision, specificity and FPR, the
# best precision for recall.
_SECONDARY = {
    "precision": "recall",
    "recall": "precision",
    "specificity": "recall",
    "fpr": "recall",
}


def rank_positive(proba_positive, y_positive):
    """Sorted probabilities of the positive class and the positives below each.

    Returns
    -------
    ranked : tuple
        ``(sorted_p, positives_below, n_positive)`` with ``positives_below[j]``
        the number of positive samples among the ``j`` smallest
        probabilities, for :func:`threshold_losses`.
    """
    # Samples tied at a probability are never split by a threshold (the
    # first index of a value is found), so their order does not matter.
    order = np.argsort(proba_positive)
    positives_below = np.r_[0, np.cumsum(y_positive[order], dtype=np.int64)]
    return proba_positive[order], positives_below, int(positives_below[-1])


def threshold_losses(ranked, thresholds, metric):
    """Errors and counted samples of ``metric`` at every threshold.

    ``ranked`` is :func:`rank_positive`'s: the counts come from the sorted
    probabilities (``p >= t`` holds from ``searchsorted(sorted_p, t)`` on,
    the same float comparison), where a matrix of the predictions at every
    threshold took 2 GB for ten million samples and the default grid.

    Returns
    -------
    losses, counts : ndarray of shape (n_thresholds,)
        The metric's rate of errors is ``losses / counts`` (the risk: ``1 -``
        the metric for precision, recall and specificity; the FPR itself).
    """
    sorted_p, positives_below, n_positive = ranked
    thresholds = np.asarray(thresholds, dtype=np.float64)
    below = np.searchsorted(sorted_p, thresholds, side="left")
    missed = positives_below[below]  # positives predicted negative
    n_predicted = len(sorted_p) - below
    false_positives = n_predicted - (n_positive - missed)
    if metric == "precision":
        return false_positives, n_predicted
    if metric == "recall":
        return missed, np.full(len(thresholds), n_positive)
    # specificity, fpr
    return false_positives, np.full(len(thresholds), len(sorted_p) - n_positive)


def certify_thresholds(
    losses,
    counts,
    thresholds,
    *,
    metric,
    target,
    confidence_level,
    error_control,
    bound,
):
    """Which thresholds are certified, and their p-values.

    ``losses`` and ``counts`` have shape (..., n_thresholds) (leading axes:
    many certification samples at once in the tests).
    """
    alpha = _risk_target(metric, target)
    p_values = risk_pvalue(losses, counts, alpha, bound)
    ascending = np.argsort(thresholds, kind="stable")
    # fixed sequence starts where the metric is easiest to meet
    order = ascending if metric == "recall" else ascending[::-1]
    rejected = np.zeros(np.shape(p_values), dtype=bool)
    rejected[..., order] = control_error(
        p_values[..., order], 1.0 - confidence_level, error_control
    )
    return rejected, p_values, order, ascending


def _risk_target(metric, target):
    return target if metric == "fpr" else 1.0 - target


class CertifiedThresholdClassifier(DecisionEstimator):
    """Binary decision threshold with a certified precision, recall, specificity or FPR.

    Fitted on certification data of a binary problem, the classifier picks a
    threshold on the calibrated probability of the positive class such that,
    with probability at least ``confidence_level`` over the certification
    sample, ``metric`` meets ``target`` (at least it for precision, recall
    and specificity, at most it for the false-positive rate). A screening
    rule "refer whoever scores above the threshold, with a sensitivity of at
    least 95 %" is ``metric="recall", target=0.95``.

    Parameters
    ----------
    calibrator : estimator with ``fit`` and ``predict_proba``, default=None
        As in :class:`SelectiveClassifier`: None reads ``X`` as logits (two
        columns, or one score column ``s`` standing for the logits
        ``(0, s)``); a calibrator is fitted on its own
        ``calibrator_fraction`` of the data; a
        :class:`~sklearn.frozen.FrozenEstimator` is used as it is.
    metric : {"precision", "recall", "specificity", "fpr"}, default="precision"
        The guaranteed metric of the positive class (``classes_[1]``).
    target : float in (0, 1), default=0.9
        Its guaranteed level: a minimum, or a maximum for ``"fpr"``.
    confidence_level : float in (0, 1), default=0.9
        Probability that the guarantee holds (``1 - delta``).
    error_control : {"bonferroni_holm", "bonferroni", "fixed_sequence"}, \
default="bonferroni_holm"
        Family-wise error control over the thresholds.
    bound : {"binomial", "hoeffding_bentkus"}, default="binomial"
        p-value of each threshold.
    thresholds : array-like of shape (n_thresholds,), default=None
        Candidate thresholds on the probability of the positive class, fixed
        before seeing the data; None is MAPIE's grid ``linspace(0, 0.99,
        100)``.
    calibrator_fraction : float in (0, 1), default=0.5
        Fraction of the data that fits a calibrator that is not frozen.
    random_state : int, RandomState instance or None, default=None
        Seeds the calibrator / certification split.
    classes : array-like of shape (2,), default=None
        With ``calibrator=None``, the negative and positive class.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        Negative and positive class.
    calibrator_ : estimator or None
        The fitted (or frozen) calibrator.
    threshold_ : float
        Positive when ``predict_proba(X)[:, 1] >= threshold_``. When no
        threshold is certified: ``inf`` (never positive: FPR 0, specificity
        1) or, for recall, ``-inf`` (always positive: recall 1), with a
        warning.
    certified_ : bool
        Whether a threshold of the grid was certified.
    valid_thresholds_ : ndarray
        Every certified threshold.
    thresholds_, p_values_ : ndarray of shape (n_thresholds,)
        The grid and the p-value of each threshold.
    metric_value_ : float
        The metric on the certification samples at ``threshold_``.
    metric_bound_ : float
        Its confidence bound at ``confidence_level`` at ``threshold_`` (lower
        for precision, recall and specificity, upper for FPR); it meets
        ``target`` by construction when ``certified_``.
    n_certification_samples_ : int
        Samples that certified the threshold.
    n_features_in_ : int
        Number of columns of ``X``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of ``X``, when it had string column names.

    See Also
    --------
    SelectiveClassifier : Abstain with a certified risk among accepted samples.
    sklearn.model_selection.FixedThresholdClassifier : A threshold, no guarantee.

    Notes
    -----
    The guarantee assumes certification and future samples exchangeable and
    probabilities fitted without the certification labels (see
    :class:`SelectiveClassifier`). Precision is a rate among predicted
    positives, whose number is random: its binomial test counts those
    samples, as Learn-then-Test and MAPIE do. ``fit`` takes no
    ``sample_weight``: the binomial tail counts samples. A threshold whose
    metric has no sample to count (no predicted positive for precision) gets
    the p-value 1 (MAPIE gives NaN there).

    References
    ----------
    .. [1] A. N. Angelopoulos, S. Bates, E. J. Candes, M. I. Jordan and L. Lei,
       "Learn then Test: Calibrating Predictive Algorithms to Achieve Risk
       Control", 2021.

    Examples
    --------
    Screen CIFAR-10 images for cats with a certified sensitivity of 95 %,
    the logits of "cat" against the other nine classes as two columns:

    >>> import numpy as np
    >>> from scipy.special import logsumexp
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.datasets import load_logits
    >>> from sklearn_calib.selective import CertifiedThresholdClassifier
    >>> data = load_logits("c10_densenet40_guo")
    >>> def cat_or_not(logits):
    ...     rest = logsumexp(np.delete(logits, 3, axis=1), axis=1)
    ...     return np.c_[rest, logits[:, 3]]
    >>> screen = CertifiedThresholdClassifier(
    ...     TemperatureScaling(device="cpu"), metric="recall", target=0.95,
    ...     random_state=0,
    ... ).fit(cat_or_not(data.logits_val), data.y_val == 3)
    >>> bool(screen.certified_), bool(screen.metric_bound_ >= 0.95)
    (True, True)
    >>> referred = screen.predict(cat_or_not(data.logits_test))
    >>> bool(referred[data.y_test == 3].mean() >= 0.93)
    True
    """

    _parameter_constraints: dict = {
        **DecisionEstimator._parameter_constraints,
        "metric": [StrOptions(set(METRICS))],
        "target": [Interval(Real, 0, 1, closed="neither")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "error_control": [StrOptions(set(ERROR_CONTROLS))],
        "bound": [StrOptions(set(BOUNDS))],
        "thresholds": ["array-like", None],
    }

    def __init__(
        self,
        calibrator=None,
        *,
        metric="precision",
        target=0.9,
        confidence_level=0.9,
        error_control="bonferroni_holm",
        bound="binomial",
        thresholds=None,
        calibrator_fraction=0.5,
        random_state=None,
        classes=None,
    ):
        self.calibrator = calibrator
        self.metric = metric
        self.target = target
        self.confidence_level = confidence_level
        self.error_control = error_control
        self.bound = bound
        self.thresholds = thresholds
        self.calibrator_fraction = calibrator_fraction
        self.random_state = random_state
        self.classes = classes

    def _grid(self):
        if self.thresholds is None:
            return np.linspace(0, 0.99, 100)
        try:
            grid = np.asarray(self.thresholds, dtype=np.float64)
        except (TypeError, ValueError):
            # numpy's own message ("could not convert string to float")
            # named neither the parameter nor what it expects
            grid = np.full((1, 1), np.nan)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)):
            raise ValueError(
                "thresholds must be a non-empty 1-D array of finite numbers."
            )
        return grid

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Fit the calibrator (if any) and certify a threshold.

        Parameters
        ----------
        X : array-like of shape (n_samples, 2) or (n_samples, 1)
            Logits of the certification data (what the calibrator takes).
        y : array-like of shape (n_samples,)
            True labels, two classes.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        grid = self._grid()
        if y is not None:
            y_type = type_of_target(check_labels(y), input_name="y")
            if y_type != "binary":
                raise ValueError(
                    "Only binary classification is supported. The type of the "
                    f"target is {y_type}."
                )
        proba, y_codes = self._fit_probabilities(X, y)
        if len(self.classes_) != 2:
            raise ValueError(
                "Only binary classification is supported: "
                f"{type(self).__name__} got {len(self.classes_)} classes."
            )
        positive = proba[:, 1]
        y_positive = y_codes == 1
        self.n_certification_samples_ = len(y_codes)
        ranked = rank_positive(positive, y_positive)
        losses, counts = threshold_losses(ranked, grid, self.metric)
        rejected, p_values, order, ascending = certify_thresholds(
            losses,
            counts,
            grid,
            metric=self.metric,
            target=self.target,
            confidence_level=self.confidence_level,
            error_control=self.error_control,
            bound=self.bound,
        )
        self.thresholds_ = grid
        self.p_values_ = np.asarray(p_values, dtype=np.float64)
        self.valid_thresholds_ = grid[rejected]
        self.certified_ = bool(rejected.any())
        if self.certified_:
            # candidates in testing order: among thresholds that tie on the
            # calibration samples, the first tested wins (as in MAPIE)
            tested = order if self.error_control == "fixed_sequence" else ascending
            valid = tested[rejected[tested]]
            self.threshold_ = float(self._best(grid[valid], ranked))
        else:
            self.threshold_ = -math.inf if self.metric == "recall" else math.inf
            warnings.warn(
                f"No threshold certifies {self.metric} "
                f"{'<=' if self.metric == 'fpr' else '>='} {self.target:g} with "
                f"confidence_level={self.confidence_level:g} from "
                f"{len(y_codes)} certification samples; threshold_ is "
                f"{self.threshold_} (predicts "
                f"{'every' if self.metric == 'recall' else 'no'} sample positive).",
                UserWarning,
                stacklevel=2,
            )
        (loss,), (count,) = threshold_losses(ranked, [self.threshold_], self.metric)
        rate = loss / count if count else math.nan
        upper = float(risk_upper_bound(loss, count, self.confidence_level, self.bound))
        if self.metric == "fpr":
            self.metric_value_, self.metric_bound_ = rate, upper
        else:
            self.metric_value_, self.metric_bound_ = 1.0 - rate, 1.0 - upper
        return self

    def _best(self, valid, ranked):
        """MAPIE's choice among the certified thresholds ``valid``."""
        secondary = _SECONDARY[self.metric]
        losses, counts = threshold_losses(ranked, valid, secondary)
        # a rate with nothing to count is the worst value (MAPIE's risk 1)
        second_risk = np.where(counts > 0, losses / np.maximum(counts, 1), 1.0)
        best = np.flatnonzero(second_risk == second_risk.min())
        losses, counts = threshold_losses(ranked, valid[best], self.metric)
        first_risk = np.where(counts > 0, losses / np.maximum(counts, 1), 1.0)
        # ties: the least conservative (largest risk) of the certified ones
        return valid[best[np.argmax(first_risk)]]

    def predict(self, X):
        """The positive class where its probability reaches ``threshold_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, 2) or (n_samples, 1)
            Logits (what the calibrator takes).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        positive = self._probabilities(X)[:, 1] >= self.threshold_
        return self.classes_[positive.astype(np.intp)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags
