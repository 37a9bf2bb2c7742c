"""Binomial confidence intervals for the accuracy of the bins of a reliability diagram.

A bin of ``n`` samples of which ``k`` are correct (or positive) estimates a
proportion; its exact (Clopper-Pearson), Wilson score and Jeffreys intervals
do not collapse to a point on bins that are all 0 or all 1, as bootstrap
percentile intervals do (scikit-learn#30664). Weighted bins use Kish's
effective count ``n_eff = (sum w)^2 / sum w^2`` and ``k_eff = acc * n_eff``,
so that multiplying every weight by a constant changes nothing and unit
weights give the unweighted interval.
"""

from numbers import Real

import numpy as np
from scipy import special, stats

from ..utils._compat import Interval, StrOptions, validate_params
from ..utils._validation import weight_scale
from ._bin_statistics import top_label, uniform_bin_index

BINOMIAL_METHODS = ("clopper-pearson", "wilson", "jeffreys")


@validate_params(
    {
        "successes": ["array-like", Real],
        "trials": ["array-like", Real],
        "method": [StrOptions(set(BINOMIAL_METHODS))],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
    },
    prefer_skip_nested_validation=True,
)
def binomial_interval(successes, trials, *, method="wilson", confidence_level=0.95):
    r"""Two-sided confidence interval of a binomial proportion ``k / n``.

    - ``"clopper-pearson"``: the exact interval, quantiles ``alpha/2`` of
      ``Beta(k, n - k + 1)`` and ``1 - alpha/2`` of ``Beta(k + 1, n - k)``
      (0 when ``k = 0``, 1 when ``k = n``). Never below its nominal coverage,
      usually above it.
    - ``"wilson"``: the score interval,
      :math:`\frac{k + z^2/2}{n + z^2} \pm \frac{z}{n + z^2}
      \sqrt{k (n - k) / n + z^2 / 4}`, close to nominal on average.
    - ``"jeffreys"``: the equal-tailed interval of the Beta(1/2, 1/2)
      posterior, quantiles of ``Beta(k + 1/2, n - k + 1/2)``, with the lower
      end 0 when ``k = 0`` and the upper end 1 when ``k = n`` (Brown, Cai and
      DasGupta's modification).

    Non-integer counts (effective counts of weighted bins) are accepted:
    every formula is a continuous function of ``k`` and ``n``.

    Parameters
    ----------
    successes : array-like or float
        Number of successes ``k``, ``0 <= k <= n``.
    trials : array-like or float
        Number of trials ``n``, broadcastable against ``successes``; where it
        is 0 the interval is NaN.
    method : {"clopper-pearson", "wilson", "jeffreys"}, default="wilson"
        The interval.
    confidence_level : float, default=0.95
        Nominal coverage, in (0, 1).

    Returns
    -------
    low, high : ndarray
        The ends of the interval, of the broadcast shape of the inputs.

    References
    ----------
    .. [1] L. D. Brown, T. T. Cai and A. DasGupta, "Interval estimation for a
       binomial proportion", Statistical Science 16(2), 2001.

    Examples
    --------
    >>> from sklearn_calib.metrics import binomial_interval
    >>> low, high = binomial_interval(0, 10, method="clopper-pearson")
    >>> float(low), round(float(high), 4)
    (0.0, 0.3085)
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    k, n = np.broadcast_arrays(k, n)
    if np.any(~np.isfinite(k)) or np.any(~np.isfinite(n)):
        raise ValueError("successes and trials must be finite.")
    if np.any(n < 0) or np.any(k < 0) or np.any(k > n * (1 + 1e-12)):
        raise ValueError("successes and trials must satisfy 0 <= successes <= trials.")
    k = np.minimum(k, n)
    alpha = 1.0 - confidence_level
    empty = n <= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "wilson":
            z = stats.norm.isf(alpha / 2)
            centre = (k + z**2 / 2) / (n + z**2)
            half = z / (n + z**2) * np.sqrt(k * (n - k) / n + z**2 / 4)
            low = np.clip(centre - half, 0.0, 1.0)
            high = np.clip(centre + half, 0.0, 1.0)
        else:
            shift = 0.0 if method == "clopper-pearson" else 0.5
            # betaincinv(a, b, q) is the q-quantile of Beta(a, b).
            low = np.where(
                k > 0,
                special.betaincinv(k + shift, n - k + 1 - shift, alpha / 2),
                0.0,
            )
            high = np.where(
                k < n,
                special.betaincinv(k + 1 - shift, n - k + shift, 1 - alpha / 2),
                1.0,
            )
    low = np.where(empty, np.nan, low)
    high = np.where(empty, np.nan, high)
    return low, high


def bin_squared_weights(
    y_codes, y_prob, sample_weight, bin_edges, *, multiclass, strategy
):
    """Per-bin sums of squared weights, on the bins of :func:`calibration_curve`.

    Parameters
    ----------
    y_codes, y_prob, sample_weight
        Validated inputs (``sample_weight`` not None).
    bin_edges : ndarray of shape (n_bins + 1,) or (n_classes, n_bins + 1)
        The edges the curve used (equal-width edges are recomputed with the
        binning kernel's own rule, so no score changes bin by rounding).
    multiclass : {"top-label", "classwise"}
    strategy : {"uniform", "quantile"}

    Returns
    -------
    ndarray of shape (n_bins,) or (n_classes, n_bins)
    """
    edges = np.atleast_2d(bin_edges)
    n_bins = edges.shape[1] - 1
    squared = sample_weight**2
    if multiclass == "top-label":
        groups = [top_label(y_prob, y_codes)[0]]
    else:
        groups = [y_prob[:, k] for k in range(y_prob.shape[1])]
    out = np.zeros((len(groups), n_bins))
    for g, scores in enumerate(groups):
        if strategy == "uniform":
            index = uniform_bin_index(scores, n_bins)
        else:
            inner = edges[min(g, edges.shape[0] - 1), 1:-1]
            index = np.searchsorted(inner, scores.astype(np.float64), side="left")
        out[g] = np.bincount(index, weights=squared, minlength=n_bins)
    return out[0] if multiclass == "top-label" else out


def bin_accuracy_interval(
    curve,
    y_codes,
    y_prob,
    sample_weight,
    *,
    multiclass,
    strategy,
    method,
    confidence_level,
):
    """Binomial interval of each bin's accuracy of a computed curve.

    Unweighted, ``k`` and ``n`` are the bin's counts of correct and all
    samples; weighted, Kish's effective count stands for ``n``.
    """
    count = np.asarray(curve.count, dtype=np.float64)
    accuracy = np.where(count > 0, curve.accuracy, 0.0)
    if sample_weight is None:
        n_eff = count
        successes = np.rint(accuracy * count)
    else:
        # On the weights divided by a power of two (exact), so that their
        # squares neither overflow nor underflow, whatever their scale.
        unit = weight_scale(sample_weight)
        squared = bin_squared_weights(
            y_codes,
            y_prob,
            sample_weight / unit,
            curve.bin_edges,
            multiclass=multiclass,
            strategy=strategy,
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            n_eff = np.where(squared > 0, (count / unit) ** 2 / squared, 0.0)
        successes = accuracy * n_eff
    return binomial_interval(
        successes,
        n_eff,
        method=method,
        confidence_level=confidence_level,
    )
