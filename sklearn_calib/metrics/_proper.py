"""Proper scoring rules: log loss (NLL), Brier score and its decomposition.

The per-sample losses live in :mod:`sklearn_calib.metrics._sample_losses`
and the bin statistics of the decomposition in
:mod:`sklearn_calib.metrics._bin_statistics`; these functions validate their
inputs and read the score off one update of an accumulator.
"""

from ..utils._compat import validate_params
from ..utils._validation import check_metric_inputs, scale_free_weights
from ._accumulators import ProperScoreAccumulator
from ._calibration import BINNED_CONSTRAINTS, COMMON_CONSTRAINTS, binned_state


def _proper_state(y_codes, y_prob, sample_weight, score):
    """One update of a :class:`~sklearn_calib.metrics.ProperScoreAccumulator`."""
    state = ProperScoreAccumulator(scores=(score,))
    return state._update_validated(y_codes, y_prob, sample_weight)


@validate_params(COMMON_CONSTRAINTS, prefer_skip_nested_validation=True)
def log_loss(y_true, y_prob, *, sample_weight=None, labels=None):
    r"""Negative log-likelihood (NLL, cross-entropy) of the true classes.

    .. math::

        \mathrm{NLL} = -\frac{1}{W} \sum_i w_i \log q_{i, y_i},

    computed in float64 with ``q`` clipped to ``[eps, 1 - eps]``, ``eps`` the
    float64 machine precision (``2.2e-16``, so a probability of 0 costs
    ``36.04``) whatever the dtype of ``y_prob``: float32 and float64 copies of
    the same predictions score the same. On float64 input this is
    :func:`sklearn.metrics.log_loss`; scikit-learn clips float32 input at the
    float32 precision (``1.2e-7``) instead, so on float32 predictions with
    true-class probabilities below that the two differ. Only the true-class
    column is read, so no one-hot matrix of the labels is built.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities, rows summing to 1 (a 1-D array: the
        positive-class probabilities of a binary problem).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``; see
        :func:`expected_calibration_error`.

    Returns
    -------
    nll : float
        Non-negative; lower is better. A proper scoring rule.

    See Also
    --------
    sklearn.metrics.log_loss : The same value on float64 probabilities.
    brier_score : The other common proper scoring rule.

    Examples
    --------
    >>> from sklearn_calib.metrics import log_loss
    >>> round(log_loss(["spam", "ham", "ham", "spam"],
    ...                [[.1, .9], [.9, .1], [.8, .2], [.35, .65]]), 5)
    0.21616
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    return _proper_state(
        y_codes, y_prob, scale_free_weights(sample_weight), "log_loss"
    ).log_loss()


@validate_params(COMMON_CONSTRAINTS, prefer_skip_nested_validation=True)
def brier_score(y_true, y_prob, *, sample_weight=None, labels=None):
    r"""Multiclass Brier score: the mean squared distance to the one-hot label.

    .. math::

        \mathrm{BS} = \frac{1}{W} \sum_i w_i \sum_k \big(q_{ik} - 1[y_i = k]\big)^2,

    between 0 and 2. For a binary problem (two columns, or one column ``p``
    read as ``(1 - p, p)``) this is twice scikit-learn's
    :func:`~sklearn.metrics.brier_score_loss`, which halves the binary case;
    ``brier_score_loss(..., scale_by_half=False)`` gives the same value.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    brier : float
        Between 0 and 2; lower is better. A proper scoring rule.

    See Also
    --------
    brier_score_decomposition : Reliability, resolution and uncertainty.
    log_loss : The other common proper scoring rule.

    References
    ----------
    .. [1] G. W. Brier, "Verification of forecasts expressed in terms of
       probability", Monthly Weather Review 78(1), 1950.

    Examples
    --------
    >>> from sklearn_calib.metrics import brier_score
    >>> round(brier_score([0, 1, 2], [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1],
    ...                               [0.1, 0.2, 0.7]]), 4)
    0.1133
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    return _proper_state(
        y_codes, y_prob, scale_free_weights(sample_weight), "brier_score"
    ).brier_score()


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def brier_score_decomposition(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Murphy's decomposition of the multiclass Brier score, on class-wise bins.

    For every class ``k``, the probabilities ``q_ik`` are binned (the bins
    of :func:`calibration_curve` with ``multiclass="classwise"``); bin ``b``
    holds the weight ``W_kb``, mean forecast ``\bar{q}_{kb}`` and observed
    frequency ``\bar{o}_{kb}`` of class ``k``, and ``\bar{o}_k`` is the
    overall frequency of class ``k``. Then

    .. math::

        \mathrm{REL} &= \sum_k \sum_b \tfrac{W_{kb}}{W}
                        (\bar{q}_{kb} - \bar{o}_{kb})^2,\\
        \mathrm{RES} &= \sum_k \sum_b \tfrac{W_{kb}}{W}(\bar{o}_{kb} - \bar{o}_k)^2,\\
        \mathrm{UNC} &= \sum_k \bar{o}_k (1 - \bar{o}_k),

    and :func:`brier_score` ``= REL - RES + UNC`` exactly when the forecasts
    are constant within each bin. Otherwise the identity holds up to the
    within-bin variance and covariance terms of Stephenson et al. (2008),
    which shrink as the bins get finer.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins per class.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    decomposition : BrierDecomposition
        Named tuple of floats ``(reliability, resolution, uncertainty)``:
        reliability is the calibration term (lower is better), resolution
        the discrimination term (higher is better), uncertainty depends on
        the labels only.

    See Also
    --------
    brier_score : The score being decomposed.

    References
    ----------
    .. [1] A. H. Murphy, "A new vector partition of the probability score",
       Journal of Applied Meteorology 12(4), 1973.
    .. [2] D. B. Stephenson, C. A. S. Coelho and I. T. Jolliffe, "Two extra
       components in the Brier score decomposition", Weather and Forecasting
       23(4), 2008.

    Examples
    --------
    >>> from sklearn_calib.metrics import brier_score_decomposition
    >>> rel, res, unc = brier_score_decomposition([0, 1, 1, 1], [0.25] * 4, n_bins=4)
    >>> float(rel), float(res), float(unc)
    (0.5, 0.0, 0.375)
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    state = binned_state(
        y_codes,
        y_prob,
        scale_free_weights(sample_weight),
        n_bins=n_bins,
        strategy=strategy,
        multiclass="classwise",
    )
    return state.brier_score_decomposition()
