"""R's ``lowess`` (Cleveland 1979, the C routine ``clowess``), for ``val.prob``.

R ``rms::val.prob`` computes its Emax, E90 and Eavg from
``lowess(p, y, iter = 0)``: locally linear fits with tricube weights over
the ``floor(f n)`` nearest points (``f = 2/3``), evaluated at the sorted
predictions but skipping points within ``delta = 0.01 * range(p)`` of the
last fitted one (filled in by linear interpolation). This is a line-by-line
port of that routine with ``iter = 0``; the fits are vectorised, and the
loops run once per fitted point (about 100 of them, whatever the sample
size), so it is fast on millions of rows.
"""

import numpy as np


def _lowest(x, y, w, x0, nleft, nright, data_range):
    """clowess's ``lowest``: the weighted local linear fit at ``x0``."""
    h = max(x0 - x[nleft], x[nright] - x0)
    h9, h1 = 0.999 * h, 0.001 * h
    # Points beyond the window but within h9 of x0 (ties) are used too.
    stop = int(np.searchsorted(x, x0 + h9, side="right"))
    xs = x[nleft:stop]
    r = np.abs(xs - x0)
    if h > 0:
        cube = r * (1.0 / h)
        cube = 1.0 - cube * cube * cube
        weights = cube * cube * cube
    else:
        weights = np.ones_like(r)
    weights[r > h9] = 0.0
    weights[r <= h1] = 1.0
    if w is not None:
        weights *= w[nleft:stop]
    total = weights.sum()
    if total <= 0:
        return None
    ys = y[nleft:stop]
    fitted = np.dot(weights, ys)
    if h > 0:
        centre = np.dot(weights, xs) / total
        offset = xs - centre
        weighted_offset = weights * offset
        spread = np.dot(weighted_offset, offset) / total
        if np.sqrt(spread) > 0.001 * data_range:
            slope = (x0 - centre) / spread
            fitted += slope * np.dot(weighted_offset, ys)
    return float(fitted / total)


def r_lowess(x, y, *, f=2 / 3, delta=None, weights=None):
    """Fitted values of R's ``lowess(x, y, f, iter = 0, delta)`` at every ``x``.

    Parameters
    ----------
    x, y : ndarray of shape (n_samples,)
    f : float, default=2/3
        Span: the fraction of points in each local fit.
    delta : float, default=None
        Points closer than ``delta`` to the last fitted point are
        interpolated; None is R's default ``0.01 * (max(x) - min(x))``.
    weights : ndarray of shape (n_samples,), default=None
        Prior weights multiplying the tricube weights (clowess's robustness
        weights slot); None gives R's unweighted ``lowess``.

    Returns
    -------
    fitted : ndarray of shape (n_samples,)
        The smoothed value at each ``x``, in the input order.
    """
    order = np.argsort(x, kind="stable")
    xs = np.asarray(x, dtype=np.float64)[order]
    ys = np.asarray(y, dtype=np.float64)[order]
    w = None if weights is None else np.asarray(weights, float)[order]
    n = xs.shape[0]
    fitted_sorted = np.empty(n)
    if n < 2:
        fitted_sorted[:] = ys
        return fitted_sorted
    if delta is None:
        delta = 0.01 * (xs[-1] - xs[0])
    ns = max(2, min(n, int(f * n + 1e-7)))
    data_range = xs[-1] - xs[0]
    nleft, nright = 0, ns - 1
    last, i = -1, 0
    for _ in range(n):
        # Slide the window of ns points to the nearest ones of xs[i]: the
        # smallest nleft (from the current one) at which it may not move.
        if nright < n - 1:
            lo, hi = nleft, n - ns
            while lo < hi:
                mid = (lo + hi) // 2
                if xs[i] - xs[mid] > xs[mid + ns] - xs[i]:
                    lo = mid + 1
                else:
                    hi = mid
            nleft, nright = lo, lo + ns - 1
        value = _lowest(xs, ys, w, xs[i], nleft, nright, data_range)
        fitted_sorted[i] = ys[i] if value is None else value
        if last < i - 1:
            between = slice(last + 1, i)
            alpha = (xs[between] - xs[last]) / (xs[i] - xs[last])
            fitted_sorted[between] = (
                alpha * fitted_sorted[i] + (1.0 - alpha) * fitted_sorted[last]
            )
        last = i
        # Ties of xs[last] take its fitted value; then skip to delta beyond.
        tie_end = int(np.searchsorted(xs, xs[last], side="right")) - 1
        fitted_sorted[last + 1 : tie_end + 1] = fitted_sorted[last]
        last = tie_end
        beyond = int(np.searchsorted(xs, xs[last] + delta, side="right"))
        i = max(last + 1, beyond - 1)
        if last >= n - 1:
            break
    fitted = np.empty(n)
    fitted[order] = fitted_sorted
    return fitted
