"""Smooth ECE (Blasiok and Nakkiran, ICLR 2024), computed on a fine grid by FFT.

The definition and its discretisation follow the reference implementation,
PyPI ``relplot`` (``relplot.smECE``), so that the values agree to ~1e-12:

- the residuals ``r_i = p_i - a_i`` (confidence minus correctness) and the
  weights are deposited on ``G`` evenly spaced grid points of ``[0, 1]`` by
  linear interpolation, ``G = max(2000, round(20 / sigma)) // 2 + 1``;
- both grids are smoothed by a Gaussian kernel of bandwidth ``sigma``, sampled
  at the grid points and truncated to half the unit interval, with the grid
  mirrored at 0 and 1 (reflection without repeating the end point);
- the smoothed residual and density are read at ``E = max(round(10 / sigma),
  200)`` evenly spaced points ``t``, and
  ``smECE_sigma = sum_t |r(t)| / sum_t (d(t) + 1e-4)``;
- the bandwidth is the fixed point ``sigma = smECE_sigma``, bracketed in
  ``[0, 1]`` by 10 bisection steps; the value is read at the upper end of the
  final bracket (where ``sigma >= smECE_sigma``), and a bandwidth below 1e-3
  counts as too small.

What differs is the cost: the deposit, the only pass over the samples, is
done once per grid size by ``np.bincount`` (every bandwidth above 0.01 shares
one grid), and each bandwidth then costs one FFT convolution on the grid. The
same code evaluates many weight vectors (bootstrap resamples) at once.
"""

from numbers import Real

import numpy as np
from scipy import fft

from ..utils._compat import Interval, validate_params
from ..utils._validation import (
    GRID_BLOCK_ENTRIES,
    check_grid_entries,
    check_metric_inputs,
    weight_scale,
)
from ._bin_statistics import slabs, top_label
from ._calibration import COMMON_CONSTRAINTS

_DENSITY_EPS = 1e-4
_MIN_BANDWIDTH = 1e-3
_BISECTION_STEPS = 10
# Weight rows smoothed together: bounds the cached spectra on fine grids.
_ROWS_PER_BATCH = 64


def _grid_size(sigma):
    return np.maximum(2000, np.round(20.0 / sigma)).astype(np.intp) // 2 + 1


def _eval_size(sigma):
    return np.maximum(np.round(10.0 / sigma), 200).astype(np.intp)


class _SmoothECE:
    """Smooth ECE of fixed confidences and outcomes as a function of the weights."""

    def __init__(self, confidence, correct):
        self._confidence = np.asarray(confidence, dtype=np.float64)
        self._residual = self._confidence - correct

    def __call__(self, weights=None, bandwidth=None):
        """Smooth ECE per weight row, and the bandwidth used.

        Parameters
        ----------
        weights : None, ndarray of shape (n_samples,) or (n_rows, n_samples)
        bandwidth : float or None
            None finds the fixed-point bandwidth of each row.

        Returns
        -------
        values, bandwidths : ndarrays of shape (n_rows,)
        """
        if weights is not None:
            weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
            # Divided first by a power of two (exact), so that the mean
            # cannot overflow (400 weights of 1e307: a smooth ECE of 0).
            weights = weights / weight_scale(weights)
            # The density floor (1e-4) is in units of one unweighted sample:
            # weights rescaled to mean 1 keep it there, so that scaling every
            # weight by a constant changes nothing, and unit weights (or
            # bootstrap counts, whose mean is 1) stay as they are.
            mean = weights.mean(axis=1, keepdims=True)
            weights = weights / np.where(mean > 0, mean, 1.0)
        n_rows = 1 if weights is None else weights.shape[0]
        # The bisection asks for bandwidths of at least _MIN_BANDWIDTH only
        # (grids of at most 10,001 points); a given one sizes the grid.
        sigma = _MIN_BANDWIDTH if bandwidth is None else float(bandwidth)
        # _grid_size in floating point (20 / 1e-300 overflows an integer).
        with np.errstate(over="ignore"):
            grid = np.floor(np.maximum(2000.0, np.round(20.0 / sigma)) / 2) + 1
        check_grid_entries(
            "bandwidth", bandwidth, grid, what="grid points", hint="larger"
        )
        # Fewer rows at once on fine grids: their spectra stay within a few
        # times the cap (64 rows of a 10,001-point grid are far below it).
        per_batch = int(min(_ROWS_PER_BATCH, max(1, GRID_BLOCK_ENTRIES // grid)))
        values = np.empty(n_rows)
        bandwidths = np.empty(n_rows)
        for start in range(0, n_rows, per_batch):
            rows = slice(start, min(start + per_batch, n_rows))
            batch = _Batch(self, None if weights is None else weights[rows])
            values[rows], bandwidths[rows] = batch.solve(bandwidth)
        return values, bandwidths


class _Batch:
    """A few weight rows sharing cached grid deposits."""

    def __init__(self, engine, weights):
        self._engine = engine
        self._weights = weights
        self.n_rows = 1 if weights is None else weights.shape[0]
        self._spectra = {}

    def _deposit(self, grid):
        """Residual and weight mass on ``grid`` points, shape (n_rows, 2, grid)."""
        position = self._engine._confidence * (grid - 1)
        lower = np.clip(position.astype(np.intp), 0, grid - 2)
        upper_share = position - lower
        residual = self._engine._residual
        out = np.zeros((self.n_rows, 2, grid))
        shares = (1 - upper_share, upper_share)
        if self._weights is None:
            for shift, share in enumerate(shares):
                for channel, values in enumerate((share * residual, share)):
                    out[0, channel, shift : grid - 1 + shift] += np.bincount(
                        lower, weights=values, minlength=grid - 1
                    )
            return out
        for rows in slabs(*self._weights.shape):
            slab = self._weights[rows]
            size = slab.shape[0]
            keys = (lower + (grid - 1) * np.arange(size)[:, None]).ravel()
            for shift, share in enumerate(shares):
                for channel, values in enumerate((share * residual, share)):
                    sums = np.bincount(
                        keys,
                        weights=(slab * values).ravel(),
                        minlength=size * (grid - 1),
                    )
                    out[rows, channel, shift : grid - 1 + shift] += sums.reshape(
                        size, grid - 1
                    )
        return out

    def _spectrum(self, grid):
        """FFT of the deposits mirrored at both ends (no repeated end point)."""
        if grid not in self._spectra:
            deposit = self._deposit(grid)
            mirrored = np.concatenate(
                [deposit[..., :0:-1], deposit, deposit[..., -2::-1]], axis=-1
            )
            n_fft = fft.next_fast_len(3 * grid, real=True)
            self._spectra[grid] = (fft.rfft(mirrored, n_fft, axis=-1), n_fft)
        return self._spectra[grid]

    def values(self, sigma, rows):
        """smECE at bandwidth ``sigma[i]`` for weight row ``rows[i]``."""
        out = np.empty(sigma.shape[0])
        grids = _grid_size(sigma)
        for grid in np.unique(grids):
            grid = int(grid)
            pick = np.flatnonzero(grids == grid)
            spectrum, n_fft = self._spectrum(grid)
            s = sigma[pick][:, None]
            offset = np.linspace(0.0, 1.0, grid) - 0.5
            kernel = np.exp(-offset * offset / (2 * s * s)) / (np.sqrt(2 * np.pi) * s)
            smooth = fft.irfft(
                spectrum[rows[pick]] * fft.rfft(kernel, n_fft, axis=-1)[:, None, :],
                n_fft,
                axis=-1,
            )
            # Output j is the mirrored signal around j convolved with the
            # kernel centred at its middle sample (index grid // 2).
            start = grid - 1 + grid // 2
            smooth = smooth[..., start : start + grid]
            out[pick] = self._read(smooth, sigma[pick], grid)
        return out

    @staticmethod
    def _read(smooth, sigma, grid):
        """sum_t |r(t)| / sum_t (d(t) + eps) on each row's evaluation points."""
        sizes = _eval_size(sigma)
        points = np.arange(sizes.max())
        valid = points < sizes[:, None]
        t = points * (1.0 / (sizes[:, None] - 1))
        t = np.where(points == sizes[:, None] - 1, 1.0, t)
        left = np.clip((t * (grid - 1)).astype(np.intp), 0, grid - 2)
        frac = (t - left * (1.0 / (grid - 1))) / (1.0 / (grid - 1))
        left = np.where(valid, left, 0)
        residual, density = smooth[:, 0], smooth[:, 1]

        def at_points(curve):
            lo = np.take_along_axis(curve, left, axis=1)
            hi = np.take_along_axis(curve, left + 1, axis=1)
            return lo * (1 - frac) + hi * frac

        numerator = np.where(valid, np.abs(at_points(residual)), 0.0).sum(axis=1)
        denominator = np.where(valid, at_points(density) + _DENSITY_EPS, 0.0).sum(
            axis=1
        )
        return numerator / denominator

    def solve(self, bandwidth=None):
        every = np.arange(self.n_rows)
        if bandwidth is not None:
            sigma = np.full(self.n_rows, float(bandwidth))
            return self.values(sigma, every), sigma
        # Bisection for the fixed point: "too small" means sigma < smECE_sigma.
        high = np.ones(self.n_rows)
        value_high = self.values(high, every)
        low = np.zeros(self.n_rows)
        done = high < value_high
        for _ in range(_BISECTION_STEPS):
            mid = (low + high) / 2
            value_mid = np.full(self.n_rows, np.inf)
            ask = np.flatnonzero(~done & (mid >= _MIN_BANDWIDTH))
            if ask.size:
                value_mid[ask] = self.values(mid[ask], ask)
            too_small = (mid < _MIN_BANDWIDTH) | (mid < value_mid)
            low = np.where(~done & too_small, mid, low)
            moved = ~done & ~too_small
            high = np.where(moved, mid, high)
            value_high = np.where(moved, value_mid, value_high)
        return value_high, high


@validate_params(
    {
        **COMMON_CONSTRAINTS,
        "bandwidth": [Interval(Real, 0, None, closed="neither"), None],
        "return_bandwidth": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def smooth_calibration_error(
    y_true,
    y_prob,
    *,
    bandwidth=None,
    sample_weight=None,
    labels=None,
    return_bandwidth=False,
):
    r"""Smooth ECE of the top-label prediction: kernel smoothing instead of bins.

    The residuals ``r_i = a_i - p_i`` (correctness minus confidence) are
    smoothed over the confidence axis by a Gaussian kernel of bandwidth
    ``sigma`` reflected at 0 and 1, and

    .. math::

        \mathrm{smECE}_\sigma = \int_0^1 |\hat{r}_\sigma(t)|\,
        \hat{\delta}_\sigma(t)\, dt,

    with :math:`\hat{r}_\sigma` the kernel regression of the residuals and
    :math:`\hat{\delta}_\sigma` the kernel density of the confidences. The
    bandwidth is the fixed point :math:`\sigma^* = \mathrm{smECE}_{\sigma^*}`,
    which makes the measure free of tuning parameters, continuous in the
    predictions and a consistent estimate of the distance to calibration.
    The discretisation follows the reference implementation (PyPI
    ``relplot``): the values agree with ``relplot.smECE`` (see the module
    docstring for the grid, the bisection and the density floor).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities,
        read as the two columns ``(1 - p, p)``; the confidence is then
        ``max(p, 1 - p)``).
    bandwidth : float, default=None
        A fixed kernel bandwidth ``sigma``; None finds the fixed point. One
        below about 6e-7 (a grid of more than 2**24 points) is refused.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; rescaled to mean 1, they replace the counts in
        the deposits (only their ratios matter).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.
    return_bandwidth : bool, default=False
        Also return the bandwidth used.

    Returns
    -------
    smece : float
        Between 0 and 1; lower is better.
    bandwidth : float
        Only when ``return_bandwidth=True``.

    See Also
    --------
    expected_calibration_error : The binned version.

    References
    ----------
    .. [1] J. Błasiok and P. Nakkiran, "Smooth ECE: Principled Reliability
       Diagrams via Kernel Smoothing", ICLR 2024.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import smooth_calibration_error
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.5, 1.0, size=2000)
    >>> y = (rng.uniform(size=2000) < p).astype(int)   # calibrated by design
    >>> smooth_calibration_error(y, p) < 0.05
    True
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    engine = _SmoothECE(*top_label(y_prob, y_codes))
    values, bandwidths = engine(sample_weight, bandwidth)
    if return_bandwidth:
        return float(values[0]), float(bandwidths[0])
    return float(values[0])


class SmoothMetric:
    """Adapter giving the smooth ECE the bootstrap's ``evaluate(W)`` shape."""

    def __init__(self, y_codes, y_prob, *, bandwidth=None):
        self._engine = _SmoothECE(*top_label(y_prob, y_codes))
        self._bandwidth = bandwidth

    def __call__(self, weights=None):
        return self._engine(weights, self._bandwidth)[0]
