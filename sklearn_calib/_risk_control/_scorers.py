"""Metrics and scorers of abstaining classifiers: error rate and acceptance.

Predictions equal to the abstention label are abstentions; the others are
accepted. The scorers call ``predict`` and read the label from the fitted
estimator's ``abstain_label_`` (or its last pipeline step's), so they score a
:class:`~sklearn_calib.selective.SelectiveClassifier` in ``GridSearchCV`` or
``cross_validate``.
"""

import numpy as np
from sklearn.metrics import make_scorer

from ..utils._compat import ScorerSubclass
from ..utils._validation import check_sample_weight, to_numpy


def _accepted(y_true, y_pred, abstain_label, sample_weight):
    y_true = np.asarray(to_numpy(y_true)).ravel()
    y_pred = np.asarray(to_numpy(y_pred)).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(
            "y_true and y_pred have inconsistent numbers of samples: "
            f"{y_true.shape[0]} and {y_pred.shape[0]}."
        )
    # The library's one weight check (finite, non-negative, not all zero),
    # scaled by an exact power of two so that the sums cannot overflow.
    weight = check_sample_weight(
        None if sample_weight is None else to_numpy(sample_weight),
        y_true,
        normalize=True,
    )
    return y_true, y_pred, ~_is_abstention(y_pred, abstain_label), weight


def _is_abstention(y_pred, abstain_label):
    """Where ``y_pred`` is ``abstain_label``, compared as values.

    The label is not cast to the dtype of ``y_pred``: a cast truncates it
    (``'abstain'`` to ``'a'`` in a ``'<U1'`` array, ``0.5`` to ``0`` in an
    integer one) and so turns a class into the abstention. A NaN label
    matches NaN predictions.
    """
    if isinstance(abstain_label, (float, np.floating)) and np.isnan(abstain_label):
        if y_pred.dtype.kind in "fc":
            return np.isnan(y_pred)
        return np.array(
            [isinstance(v, (float, np.floating)) and v != v for v in y_pred],
            dtype=bool,
        )
    return np.asarray(y_pred == np.asarray(abstain_label, dtype=object), dtype=bool)


def accepted_error_rate(y_true, y_pred, *, abstain_label=-1, sample_weight=None):
    """Error rate among the accepted samples (the selective risk).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_pred : array-like of shape (n_samples,)
        Predictions, ``abstain_label`` where the classifier abstains.
    abstain_label : object, default=-1
        The label of abstentions.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.

    Returns
    -------
    rate : float
        Weighted errors over the weight of the accepted samples; 0.0 when none
        is accepted (no answer, no error).

    Examples
    --------
    >>> from sklearn_calib.selective import accepted_error_rate
    >>> accepted_error_rate([0, 1, 1, 0], [0, 0, -1, -1])
    0.5
    """
    y_true, y_pred, accepted, weight = _accepted(
        y_true, y_pred, abstain_label, sample_weight
    )
    mass = weight[accepted].sum()
    if mass == 0:
        return 0.0
    wrong = (y_pred != y_true) & accepted
    return float(weight[wrong].sum() / mass)


def acceptance_rate(y_true, y_pred, *, abstain_label=-1, sample_weight=None):
    """Fraction of samples accepted (the coverage).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels (only their number is used).
    y_pred : array-like of shape (n_samples,)
        Predictions, ``abstain_label`` where the classifier abstains.
    abstain_label : object, default=-1
        The label of abstentions.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.

    Returns
    -------
    rate : float

    Examples
    --------
    >>> from sklearn_calib.selective import acceptance_rate
    >>> acceptance_rate([0, 1, 1, 0], [0, 0, -1, -1])
    0.5
    """
    _, _, accepted, weight = _accepted(y_true, y_pred, abstain_label, sample_weight)
    return float(weight[accepted].sum() / weight.sum())


class _AbstentionScorer(ScorerSubclass):
    """A ``make_scorer`` scorer that passes the estimator's abstention label."""

    def _score(self, method_caller, estimator, X, y_true, **kwargs):
        final = estimator
        if hasattr(estimator, "steps"):  # a Pipeline: its last step decides
            final = estimator.steps[-1][1]
        label = getattr(final, "abstain_label_", None)
        if label is not None and "abstain_label" not in self._kwargs:
            kwargs["abstain_label"] = label
        return super()._score(method_caller, estimator, X, y_true, **kwargs)


neg_accepted_error_rate = _AbstentionScorer.from_scorer(
    make_scorer(accepted_error_rate, greater_is_better=False)
)
"""Scorer of :func:`accepted_error_rate`, negated (greater is better)."""

acceptance_rate_scorer = _AbstentionScorer.from_scorer(
    make_scorer(acceptance_rate, greater_is_better=True)
)
"""Scorer of :func:`acceptance_rate` (greater is better)."""
