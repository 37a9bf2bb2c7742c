"""Numerically stable softmax helpers on numpy arrays (log-sum-exp shifted)."""

import numpy as np


def _row_max(logits):
    """Row maxima, refusing rows whose maximum is not a finite number.

    Validated logits are finite, but a fitted map can overflow on extreme
    ones (``W z`` with ``|z|`` near the float range); the softmax of such a
    row has no defined value, so it is an error rather than NaN output.
    """
    top = logits.max(axis=1, keepdims=True)
    if not np.isfinite(top).all():
        bad = int(np.count_nonzero(~np.isfinite(top)))
        raise ValueError(
            f"The calibrated logits of {bad} row(s) overflowed to inf or NaN: the "
            "input logits are too large for the fitted map in this floating-point "
            "type (use float64 logits, or rescale them before fitting)."
        )
    return top


def softmax(logits, *, out=None):
    """Row-wise softmax of a 2-D array, shifted by the row maximum.

    ``out`` may be ``logits`` itself to work in place.
    """
    # A gap beyond the float range overflows to -inf: probability 0, its limit.
    with np.errstate(over="ignore"):
        out = np.subtract(logits, _row_max(logits), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def order_free_row_sums(values):
    """Each row's sum over its sorted entries, as a column.

    Sums in column order differ by an ulp between rows holding the same
    values in another order (or the classes permuted): enough to move a
    score tied with an edge, a quantile or a threshold across it.
    """
    return np.sort(values, axis=1).sum(axis=1, keepdims=True)


def order_free_softmax(logits):
    """:func:`softmax` with :func:`order_free_row_sums`: the same
    probabilities for the same logits in any column order."""
    with np.errstate(over="ignore"):
        exp = np.exp(np.subtract(logits, _row_max(logits)))
    return exp / order_free_row_sums(exp)


def log_softmax(logits, *, out=None):
    """Row-wise log-softmax of a 2-D array, shifted by the row maximum."""
    with np.errstate(over="ignore"):  # -inf: the limit, as in softmax
        out = np.subtract(logits, _row_max(logits), out=out)
    out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
    return out


def scale_logits(logits, factor):
    """``(logits - row max) * factor``: logits divided by a temperature, safely.

    The shift changes no softmax and makes every entry at most 0, so a tiny
    temperature (a huge ``factor``) can send entries to ``-inf``, probability
    0, but never to ``+inf``; ``-inf`` entries (masked classes) stay ``-inf``.
    ``factor`` is a positive scalar or a column of per-row factors, applied in
    the logits' dtype. The shift comes first because it is exact near the row
    maximum, where the probabilities are decided: scaling first would round
    ``z * factor`` to the precision of ``|z|``, so that adding 1e15 to every
    logit would move probabilities by 1e-4. Only where a row's finite logits
    span more than the dtype's range (the shift overflows) do factors of at
    most 1 scale first, which cannot overflow. A factor beyond the dtype's
    range (float32 logits spread by less than ~1e-38, whose fitted T is below
    ~3e-39) is applied as a power of two and a remainder, both representable.
    """
    dtype = logits.dtype
    factor = np.asarray(factor, dtype=np.float64)
    if np.all(factor <= 1):
        try:
            with np.errstate(over="raise"):
                out = np.subtract(logits, logits.max(axis=1, keepdims=True))
        except FloatingPointError:
            return logits * factor.astype(dtype)
        out *= factor.astype(dtype)
        return out
    largest = np.finfo(dtype).max
    # -inf is the intended limit: a gap that overflows in the shift is
    # beyond the dtype's range already before being multiplied by factor > 1.
    with np.errstate(over="ignore"):
        out = np.subtract(logits, logits.max(axis=1, keepdims=True))
        if np.all(factor <= largest):
            out *= factor.astype(dtype)
        else:
            power = np.ldexp(1.0, np.frexp(factor)[1] // 2)
            out *= power.astype(dtype)
            out *= (factor / power).astype(dtype)
    return out


def top_label_correctness(scores, codes):
    """Each row's share of a correct top label: 1, 1/t or 0.

    1 where the label's score is the row's only largest, ``1 / t`` where it
    is one of ``t`` tied largest scores, 0 otherwise: the expected
    correctness of a prediction that breaks the tie at random. Counting the
    first tied column (``argmax``) instead would make a fit depend on the
    order of the columns, while the probabilities it calibrates give every
    tied class the same value.
    """
    at_top = scores == scores.max(axis=1, keepdims=True)
    n_top = np.count_nonzero(at_top, axis=1)
    return at_top[np.arange(scores.shape[0]), codes] / n_top


def summation_slack(n_terms):
    """``1 - n_terms * eps``: a factor that lowers a target on a running sum.

    A cumulative sum of ``n_terms`` float64 values that equals a target in
    exact arithmetic (integer weights at any common scale) can round below
    it by up to about ``n_terms * eps`` relative; a target multiplied by this
    factor is still reached, so scaling every weight by a constant cannot
    move a weighted quantile.
    """
    return 1.0 - n_terms * np.finfo(np.float64).eps


def weighted_quantiles(values, weights, levels):
    """Inverted-CDF weighted quantiles: integer weights act as repeated rows.

    The smallest value whose cumulative weight reaches each level of the
    total. The targets are lowered by the rounding a running sum can carry
    (``summation_slack``): integer weights at any common scale reach a level
    exactly where repeated rows do.
    """
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    targets = np.asarray(levels) * cumulative[-1] * summation_slack(values.shape[0])
    index = np.searchsorted(cumulative, targets, side="left")
    return values[order[np.clip(index, 0, values.shape[0] - 1)]]


def row_blocks(n_rows, n_cols, *, max_elements=2**18):
    """Yield slices of rows holding at most about ``max_elements`` values.

    The one row-block generator of the package: prediction, the metric
    kernels and the sums of the chunked fits work block by block so that the
    temporaries of a large ``(n_samples, n_classes)`` problem stay a small
    fraction of the data.
    """
    step = max(1, max_elements // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def armijo_step(trial, value, slope, *, slack, step=1.0, max_halvings=60):
    """Backtracking line search of the package's Newton solvers (minimising).

    Tries ``step``, ``step / 2``, ... until the objective at the trial is
    finite and at most ``value + 1e-4 * t * slope + slack`` (Armijo's
    sufficient decrease; ``slack`` leaves room for the rounding of ``value``
    near the optimum). ``trial(t)`` returns a tuple whose first entry is the
    objective at step ``t``. Returns ``(t, trial(t))`` of the accepted step,
    or None when ``max_halvings`` trials fail (the solver has stalled).
    """
    t = step
    for _ in range(max_halvings):
        result = trial(t)
        if np.isfinite(result[0]) and result[0] <= value + 1e-4 * t * slope + slack:
            return t, result
        t *= 0.5
    return None
