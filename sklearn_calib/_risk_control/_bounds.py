"""p-values and upper confidence bounds of a risk, and family-wise error control.

A risk is estimated by ``k`` losses among ``n`` exchangeable samples (a binary
loss: an error among accepted samples, a missed positive, ...). The null
hypothesis of a threshold is that its true risk exceeds the target ``alpha``;
a small p-value certifies the threshold.

- ``"binomial"``: the exact binomial tail ``P(Bin(n, alpha) <= k)``, the
  p-value that inverts the Clopper-Pearson upper bound; exact for a binary
  loss.
- ``"hoeffding_bentkus"``: ``min(exp(-n h(min(k/n, alpha), alpha)),
  e P(Bin(n, alpha) <= k))`` (Bates et al. 2021, Prop. 3), valid for any
  loss in [0, 1] and never smaller than the binomial tail for a binary loss.

Every function broadcasts over arrays, so many thresholds (and many random
splits in the tests) are tested at once. ``n = 0`` gives a p-value of 1 and an
upper bound of 1: nothing observed certifies nothing.
"""

import math

import numpy as np
from scipy import special, stats

from ..utils._validation import check_loss_counts

BOUNDS = ("binomial", "hoeffding_bentkus")
ERROR_CONTROLS = ("fixed_sequence", "bonferroni", "bonferroni_holm")

# Bisection steps of the Hoeffding-Bentkus upper bound: the bracket [0, 1]
# shrinks to 2**-60, below float64 resolution near 1.
_BISECTION_STEPS = 60


def _kl_bernoulli(a, b):
    """``h(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b))``, with ``0 log 0 = 0``."""
    return special.xlogy(a, a / b) + special.xlogy(1.0 - a, (1.0 - a) / (1.0 - b))


def binomial_tail_pvalue(k, n, alpha):
    """Exact binomial p-value of the hypothesis that a risk exceeds ``alpha``.

    Parameters
    ----------
    k : int or array-like of int
        Number of losses (errors) observed.
    n : int or array-like of int
        Number of samples they were observed on (``k <= n``).
    alpha : float or array-like
        Target risk, in (0, 1).

    Returns
    -------
    p_value : ndarray or float
        ``P(Bin(n, alpha) <= k)``; 1 where ``n = 0``.

    Examples
    --------
    >>> from sklearn_calib.selective import binomial_tail_pvalue
    >>> round(float(binomial_tail_pvalue(0, 45, 0.05)), 4)  # 0.95 ** 45
    0.0994
    """
    k, n, alpha = check_loss_counts(k, n, alpha)
    _check_whole(k=k, n=n)
    p = _binomial_cdf(k, n, alpha)
    return np.where(n > 0, np.minimum(p, 1.0), 1.0)


def _check_whole(**counts):
    """Refuse counts that are not whole numbers.

    A binomial counts samples: 2.5 losses among 10.5 samples was read as 2
    among 10 by the p-value and as 2.5 among 10.5 by the upper bound (a
    continuous beta quantile), so the two disagreed, silently. Beyond 2**53
    float64 does not hold every whole number (and the tail came out NaN).
    """
    for name, values in counts.items():
        if np.any(values > 2.0**53):
            raise ValueError(
                f"{name} must be at most 2**53 (counts exact in float64); got "
                f"{np.max(values):.4g}."
            )
        if np.any(values != np.floor(values)):
            raise ValueError(
                f"{name} must be whole numbers (counts of samples); got "
                f"{float(values[values != np.floor(values)].ravel()[0])!r}."
            )


def _binomial_cdf(k, n, alpha):
    """``P(Bin(n, alpha) <= k)`` of integer-valued ``k`` (``n = 0`` read as 1).

    scipy.stats.binom (Boost's incomplete beta), not scipy.special.bdtr
    (Cephes): from about ten million samples bdtr drifts, then fails, P(Bin(1e10,
    0.05) <= 499,934,616) = 0.00135 came out as 1.0 and P(Bin(1e9, 0.5) <=
    5e8) = 0.50001 as 0.84, so thresholds a large sample certifies were not.
    """
    return stats.binom.cdf(k, np.maximum(n, 1.0), alpha)


def hoeffding_bentkus_pvalue(k, n, alpha):
    """Hoeffding-Bentkus p-value of the hypothesis that a risk exceeds ``alpha``.

    Valid for the mean of any loss in [0, 1] (``k`` is then the sum of the
    losses), at the price of the factor ``e`` on the binomial term.

    Parameters
    ----------
    k : float or array-like
        Sum of the losses.
    n : int or array-like of int
        Number of samples.
    alpha : float or array-like
        Target risk, in (0, 1).

    Returns
    -------
    p_value : ndarray or float
        ``min(1, exp(-n h(min(k/n, alpha), alpha)), e P(Bin(n, alpha) <=
        ceil(k)))``; 1 where ``n = 0``.

    Examples
    --------
    >>> from sklearn_calib.selective import hoeffding_bentkus_pvalue
    >>> round(float(hoeffding_bentkus_pvalue(0, 45, 0.05)), 4)  # Hoeffding term
    0.0994
    """
    k, n, alpha = check_loss_counts(k, n, alpha)
    _check_whole(n=n)
    return _hoeffding_bentkus(k, n, alpha)


def _hoeffding_bentkus(k, n, alpha):
    """``hoeffding_bentkus_pvalue`` of checked, broadcast float64 arrays."""
    safe_n = np.maximum(n, 1.0)
    r_hat = np.minimum(k / safe_n, alpha)
    hoeffding = np.exp(-safe_n * _kl_bernoulli(r_hat, alpha))
    bentkus = math.e * _binomial_cdf(np.ceil(k), safe_n, alpha)
    p = np.minimum(np.minimum(hoeffding, bentkus), 1.0)
    return np.where(n > 0, p, 1.0)


def _check_bound(bound):
    if not (isinstance(bound, str) and bound in BOUNDS):
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}.")


def risk_pvalue(k, n, alpha, bound):
    """The p-value of ``bound`` (one of ``BOUNDS``).

    ``alpha`` may be 1 here: the estimators test ``1 - target``, which rounds
    to 1 for a target (coverage, precision, ...) below 2**-54. Both p-values
    tend to 0 there unless every sample is a loss, and a target that small is
    met by anything short of that; the public p-values refused the rounded
    alpha with a message about a parameter the user never set.
    """
    _check_bound(bound)
    if np.all(np.asarray(alpha) == 1.0):
        k, n = check_loss_counts(k, n)
        return np.where(k >= n, 1.0, 0.0)
    if bound == "binomial":
        return binomial_tail_pvalue(k, n, alpha)
    return hoeffding_bentkus_pvalue(k, n, alpha)


def risk_upper_bound(k, n, confidence_level, bound="binomial"):
    """Upper confidence bound of a risk from ``k`` losses among ``n`` samples.

    The smallest ``alpha`` whose p-value is at most ``1 - confidence_level``:
    for ``"binomial"`` the Clopper-Pearson bound ``Beta(1 - delta; k + 1, n -
    k)``, for ``"hoeffding_bentkus"`` the bisection of its p-value (which
    decreases in ``alpha``).

    Parameters
    ----------
    k, n : int or array-like
        Losses and samples.
    confidence_level : float in (0, 1)
        ``1 - delta``.
    bound : {"binomial", "hoeffding_bentkus"}, default="binomial"

    Returns
    -------
    upper : ndarray or float
        1 where ``n = 0`` or every sample is a loss.

    Examples
    --------
    >>> from sklearn_calib.selective import risk_upper_bound
    >>> round(float(risk_upper_bound(0, 45, 0.9)), 4)  # 1 - 0.1 ** (1 / 45)
    0.0499
    """
    _check_bound(bound)
    if not 0 < float(confidence_level) < 1:
        raise ValueError(
            f"confidence_level must lie in (0, 1), got {confidence_level!r}."
        )
    delta = 1.0 - float(confidence_level)
    k, n = check_loss_counts(k, n)
    _check_whole(n=n, **({"k": k} if bound == "binomial" else {}))
    if bound == "binomial":
        upper = stats.beta.ppf(1.0 - delta, k + 1.0, np.maximum(n - k, 1.0))
        return np.where((n > 0) & (k < n), upper, 1.0)
    # Nothing observed, or every sample a loss: the bound is 1. Those entries
    # are bisected as 0 losses of 1 sample, whose bracket stays below 1 (at
    # k = n it was [1, 1], and h(1, 1) is 0 / 0).
    full = (n <= 0) | (k >= n)
    k, n = np.where(full, 0.0, k), np.where(full, 1.0, n)
    low = k / n
    high = np.ones_like(low)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        # alpha < 1 for the binomial term; mid < 1 always holds here
        certified = _hoeffding_bentkus(k, n, mid) <= delta
        high = np.where(certified, mid, high)
        low = np.where(certified, low, mid)
    return np.where(full, 1.0, high)


# --- family-wise error control ----------------------------------------------------


def fixed_sequence(p_values, delta):
    """Hypotheses rejected by fixed-sequence testing, in the given order.

    Each hypothesis is tested at level ``delta`` in order and testing stops at
    the first that is not rejected. Broadcasts over leading axes (the last
    axis is the sequence).

    Returns
    -------
    rejected : ndarray of bool, the shape of ``p_values``
        A prefix of each sequence.
    """
    return np.logical_and.accumulate(np.asarray(p_values) <= delta, axis=-1)


def bonferroni(p_values, delta):
    """Hypotheses rejected at level ``delta / m`` (``m`` hypotheses)."""
    p_values = np.asarray(p_values)
    return p_values <= delta / p_values.shape[-1]


def bonferroni_holm(p_values, delta):
    """Hypotheses rejected by Holm's step-down procedure.

    The ``j``-th smallest p-value (from 0) is tested at level ``delta / (m -
    j)``; testing stops at the first that is not rejected. Broadcasts over
    leading axes.
    """
    p_values = np.asarray(p_values, dtype=np.float64)
    m = p_values.shape[-1]
    order = np.argsort(p_values, axis=-1, kind="stable")
    levels = delta / (m - np.arange(m))
    ranked = np.take_along_axis(p_values, order, axis=-1)
    passed = np.logical_and.accumulate(ranked <= levels, axis=-1)
    rejected = np.zeros(p_values.shape, dtype=bool)
    np.put_along_axis(rejected, order, passed, axis=-1)
    return rejected


def control_error(p_values, delta, error_control):
    """Rejected hypotheses under ``error_control`` (one of ``ERROR_CONTROLS``)."""
    if error_control == "fixed_sequence":
        return fixed_sequence(p_values, delta)
    if error_control == "bonferroni":
        return bonferroni(p_values, delta)
    return bonferroni_holm(p_values, delta)
