"""Conformal risk control for prediction sets (Angelopoulos et al., ICLR 2024).

The sets are those of :class:`~sklearn_calib.conformal.ConformalClassifier`:
a label enters the set of a sample when its conformity score is at most a
threshold ``lambda``, so the sets grow with ``lambda``. A loss ``L(C, y)`` in
``[0, B]`` that shrinks as the set ``C`` grows is controlled in expectation:

    lambda_hat = inf { lambda : n / (n + 1) * R_n(lambda) + B / (n + 1) <= alpha }

with ``R_n`` the mean loss of the ``n`` calibration samples; then ``E[L(C(X),
Y)] <= alpha`` for a new exchangeable sample (Theorem 1 of the paper).

The loss is a cost matrix: ``L(C, y) = min_{k in C} cost[y, k]``, the cost
of the best label the set offers, with ``cost[y, y] = 0`` (a set holding the
truth costs nothing) and the empty set costing the row's maximum. A
class-weighted miscoverage ``w_y 1{y not in C}`` is the matrix with ``w_y``
off the diagonal of row ``y``; plain miscoverage (all ones) gives back the
split-conformal quantile.
"""

import math
import warnings
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import get_tags

from ..conformal import CONFORMITY_SCORES, ConformalClassifier
from ..utils._compat import (
    HasMethods,
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
)
from ..utils._validation import to_numpy


def crc_threshold(scores, y_codes, cost, risk):
    """The conformal-risk-control threshold of a cost-matrix loss.

    Parameters
    ----------
    scores : ndarray of shape (n, n_classes)
        Conformity score of every (sample, label); ``inf`` never enters a set.
    y_codes : ndarray of shape (n,)
        Column of each true label.
    cost : ndarray of shape (n_classes, n_classes)
        ``cost[y, k]`` >= 0, zero on the diagonal.
    risk : float
        Target expected loss ``alpha``.

    Returns
    -------
    threshold : float
        ``lambda_hat``; ``inf`` when even full sets cannot certify ``risk``
        (fewer than ``B / risk - 1`` samples), ``-inf`` when empty sets do.
    calibration_risk : float
        The mean calibration loss at ``threshold``.
    """
    n, n_classes = scores.shape
    bound = float(cost.max())
    rows = cost[y_codes]  # (n, K): cost of each label for each sample
    order = np.argsort(scores, axis=1, kind="stable")
    ranked_scores = np.take_along_axis(scores, order, axis=1)
    ranked_cost = np.take_along_axis(rows, order, axis=1)
    start = rows.max(axis=1)
    running = np.minimum.accumulate(ranked_cost, axis=1)
    previous = np.concatenate([start[:, None], running[:, :-1]], axis=1)
    drops = (previous - running).ravel()
    points = ranked_scores.ravel()
    finite = np.isfinite(points)
    points, drops = points[finite], drops[finite]
    by_score = np.argsort(points, kind="stable")
    points, drops = points[by_score], np.cumsum(drops[by_score])
    # the total loss once every entry up to each distinct score is in
    ends = np.searchsorted(points, points, side="right") - 1
    total = start.sum() - drops[ends]
    budget = (n + 1) * risk - bound
    if start.sum() <= budget:
        return -math.inf, float(start.mean())
    ok = np.flatnonzero(total <= budget * (1 + 1e-12) + 1e-12)
    if not ok.size:
        return math.inf, float((total[-1] if total.size else start.sum()) / n)
    return float(points[ok[0]]), float(total[ok[0]] / n)


class ConformalRiskClassifier(ClassifierMixin, BaseEstimator):
    """Prediction sets that control the expected value of a set loss.

    Conformal risk control [1]_ on the sets of :class:`ConformalClassifier`:
    fitted on a calibration split of ``n`` samples, the sets satisfy
    ``E[L(C(X), Y)] <= risk`` for a new exchangeable sample, for a loss ``L``
    in ``[0, B]`` that shrinks as the set grows: a miscoverage weighted by
    class (missing a rare disease costs more than missing a cold) or a cost
    matrix (the cost of the best label the set offers).

    Parameters
    ----------
    calibrator : estimator with ``fit`` and ``predict_proba``, default=None
        As in :class:`ConformalClassifier`.
    risk : float > 0, default=0.1
        Target expected loss ``alpha`` (in the loss's units).
    miss_cost : array-like of shape (n_classes,) or dict, default=None
        Loss ``miss_cost[y]`` when the set misses the true class ``y``;
        None with ``cost_matrix=None`` is plain miscoverage (all ones). A dict
        maps class labels to weights (missing classes weigh 1).
    cost_matrix : array-like of shape (n_classes, n_classes), default=None
        ``cost_matrix[y, k]``: the cost of answering ``k`` when the truth is
        ``y`` (non-negative, zero on the diagonal; rows and columns follow
        ``classes_``). The loss of a set is its cheapest label's cost; the
        empty set costs the row's maximum. Exclusive with ``miss_cost``.
    conformity_score : {"lac", "aps", "raps", "saps", "top_k"}, default="lac"
        The score that orders the labels into sets (deterministic, so that
        the sets grow with the threshold).
    classes : array-like of shape (n_classes,), default=None
        With ``calibrator=None``, the class of each logit column.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels, the columns of :meth:`predict_set`.
    conformal_ : ConformalClassifier
        The fitted classifier whose scores make the sets.
    cost_ : ndarray of shape (n_classes, n_classes)
        The loss as a cost matrix.
    loss_bound_ : float
        ``B``, the largest loss.
    threshold_ : float
        ``lambda_hat``; ``inf`` (full sets) when too few samples.
    calibration_risk_ : float
        Mean calibration loss at ``threshold_``.
    n_features_in_ : int
        Number of columns of ``X``.

    See Also
    --------
    ConformalClassifier : Sets with a coverage guarantee.

    Notes
    -----
    The guarantee needs exchangeable calibration and test samples and
    probabilities that do not depend on the calibration labels (see
    :class:`ConformalClassifier`). It bounds the expected loss over the
    calibration draw and the new sample together, unlike the high-probability
    guarantees of :class:`~sklearn_calib.selective.SelectiveClassifier`. At
    least ``B / risk - 1`` samples are needed for a finite threshold.
    ``fit`` takes no ``sample_weight``.

    References
    ----------
    .. [1] A. N. Angelopoulos, S. Bates, A. Fisch, L. Lei and T. Schuster,
       "Conformal Risk Control", ICLR 2024.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.conformal import ConformalRiskClassifier
    >>> from sklearn_calib.datasets import load_logits
    >>> data = load_logits("c10_densenet40_guo")
    >>> weight = np.ones(10)
    >>> weight[3] = 5.0  # missing a cat costs five times as much
    >>> clf = ConformalRiskClassifier(risk=0.1, miss_cost=weight)
    >>> clf = clf.fit(data.logits_val, data.y_val)
    >>> sets = clf.predict_set(data.logits_test)
    >>> missed = ~sets[np.arange(len(sets)), data.y_test]
    >>> bool((weight[data.y_test] * missed).mean() <= 0.11)
    True
    """

    _parameter_constraints: dict = {
        "calibrator": [HasMethods(["fit", "predict_proba"]), None],
        "risk": [Interval(Real, 0, None, closed="neither")],
        "miss_cost": ["array-like", dict, None],
        "cost_matrix": ["array-like", None],
        "conformity_score": [StrOptions(set(CONFORMITY_SCORES))],
        "classes": ["array-like", None],
    }

    def __init__(
        self,
        calibrator=None,
        *,
        risk=0.1,
        miss_cost=None,
        cost_matrix=None,
        conformity_score="lac",
        classes=None,
    ):
        self.calibrator = calibrator
        self.risk = risk
        self.miss_cost = miss_cost
        self.cost_matrix = cost_matrix
        self.conformity_score = conformity_score
        self.classes = classes

    def _cost(self, n_classes):
        if self.miss_cost is not None and self.cost_matrix is not None:
            raise ValueError("Set miss_cost or cost_matrix, not both.")
        if self.cost_matrix is not None:
            cost = np.asarray(self.cost_matrix, dtype=np.float64)
            if cost.shape != (n_classes, n_classes):
                raise ValueError(
                    f"cost_matrix must have shape ({n_classes}, {n_classes}), one "
                    f"row and column per class; got {cost.shape}."
                )
            if not np.all(np.isfinite(cost)) or np.any(cost < 0):
                raise ValueError("cost_matrix must hold finite non-negative costs.")
            if np.any(np.diag(cost) != 0):
                raise ValueError(
                    "cost_matrix must be zero on the diagonal: a set holding the "
                    "true class costs nothing."
                )
        else:
            weight = np.ones(n_classes)
            if isinstance(self.miss_cost, dict):
                for label, value in self.miss_cost.items():
                    where = np.flatnonzero(self.classes_ == label)
                    if not where.size:
                        raise ValueError(
                            f"miss_cost names {label!r}, which is not a class "
                            f"({self.classes_.tolist()[:10]})."
                        )
                    weight[where] = value
            elif self.miss_cost is not None:
                weight = np.asarray(self.miss_cost, dtype=np.float64)
                if weight.shape != (n_classes,):
                    raise ValueError(
                        f"miss_cost must hold one cost per class ({n_classes}); "
                        f"got shape {weight.shape}."
                    )
            if not np.all(np.isfinite(weight)) or np.any(weight < 0):
                raise ValueError("miss_cost must hold finite non-negative costs.")
            cost = np.repeat(weight[:, None], n_classes, axis=1)
            np.fill_diagonal(cost, 0.0)
        if not cost.max() > 0:
            raise ValueError("The loss is zero everywhere; nothing to control.")
        return cost

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Fit the conformal scores (and the calibrator) and the threshold.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits of the calibration split (what the calibrator takes).
        y : array-like of shape (n_samples,)
            True labels.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        conformal = ConformalClassifier(
            self.calibrator,
            conformity_score=self.conformity_score,
            classes=self.classes,
        )
        with warnings.catch_warnings():
            # its quantile at its default level is not used; the count of
            # samples this loss needs is checked below
            warnings.filterwarnings("ignore", "Too few calibration samples")
            conformal.fit(X, y)
        self.conformal_ = conformal
        self.classes_ = conformal.classes_
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(conformal, name):
                setattr(self, name, getattr(conformal, name))
        self.cost_ = self._cost(len(self.classes_))
        self.loss_bound_ = float(self.cost_.max())
        y = np.asarray(to_numpy(y))
        y_codes = conformal._encode(y.ravel())
        scores = self._set_scores(X)
        self.threshold_, self.calibration_risk_ = crc_threshold(
            scores, y_codes, self.cost_, float(self.risk)
        )
        if self.threshold_ == math.inf:
            needed = math.ceil(self.loss_bound_ / self.risk - 1)
            warnings.warn(
                f"Too few calibration samples for risk={self.risk:g} with a loss "
                f"bounded by {self.loss_bound_:g}: {len(y_codes)} samples cannot "
                f"certify it (at least {needed} are needed), so every set holds "
                "every class.",
                UserWarning,
                stacklevel=2,
            )
        return self

    def _set_scores(self, X):
        proba, masked = self.conformal_._probabilities(X)
        scores = self.conformal_._scores(proba, None)
        if masked is not None:
            scores[masked] = np.inf
        return scores

    def predict_set(self, X):
        """Prediction sets: which labels each sample's set holds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        sets : ndarray of shape (n_samples, n_classes) of bool
        """
        check_is_fitted(self)
        scores = self._set_scores(X)
        if self.threshold_ == math.inf:
            return np.isfinite(scores)
        return scores <= self.threshold_

    def predict_proba(self, X):
        """Class probabilities: the calibrator's, or the softmax of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self.conformal_.predict_proba(X)

    def predict(self, X):
        """Most probable class (the point prediction beside the set).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        return self.conformal_.predict(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.calibrator is None:
            tags.input_tags.allow_nan = False
        else:
            inner = get_tags(self.calibrator)
            tags.input_tags.sparse = inner.input_tags.sparse
            tags.input_tags.allow_nan = inner.input_tags.allow_nan
            tags.classifier_tags.multi_class = inner.classifier_tags.multi_class
        return tags
