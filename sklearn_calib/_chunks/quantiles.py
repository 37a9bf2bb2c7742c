"""Exact weighted quantiles of scores given in chunks, by radix selection.

The equal-mass bin edges of the chunked metrics and of histogram binning's
chunked fit: each pass over the chunks histograms the next digits of the
scores' bit patterns, so after a few passes every edge is the exact quantile
the in-memory code computes from the sorted scores.
"""

import math

import numpy as np

from ..utils._math import summation_slack


def _sortable_keys(scores, key_dtype):
    """Unsigned integers that sort as the (non-negative) scores do.

    For floats >= 0 the IEEE bit pattern is monotone in the value; adding 0.0
    turns a -0.0 into +0.0 first.
    """
    float_dtype = np.float32 if key_dtype == np.uint32 else np.float64
    values = np.asarray(scores, dtype=float_dtype) + float_dtype(0.0)
    return values.view(key_dtype)


def _keys_to_values(keys, key_dtype):
    float_dtype = np.float32 if key_dtype == np.uint32 else np.float64
    return np.asarray(keys, dtype=key_dtype).view(float_dtype).astype(np.float64)


class EqualMassSelection:
    """Exact weighted quantiles of chunked scores, ``digit_bits`` bits per pass.

    Target ``t`` of group ``g`` asks for the smallest score ``v`` whose
    cumulative weight ``W(<= v)`` reaches ``target[g, t]`` (the inverted CDF,
    as the in-memory equal-mass bins define their edges). A pass histograms,
    for every target, the next ``digit_bits`` bits of the keys that share the
    bits fixed so far; the first digit whose cumulative weight reaches the
    remaining target is fixed, and the weight below it is subtracted. After
    ``key_bits / digit_bits`` passes every bit is fixed: the edge is exact.
    Histograms are sums, so a pass merges over chunks like the accumulators.
    Unit weights are counted in integers; other weights are float64 sums, so
    a target that a cumulative weight equals to within rounding can land on
    the neighbouring score (never for integer weights below 2**53).
    """

    def __init__(self, targets, key_dtype, digit_bits):
        self.targets = np.asarray(targets, dtype=np.float64)  # (n_groups, n_targets)
        self.key_dtype = key_dtype
        self.key_bits = 32 if key_dtype == np.uint32 else 64
        self.digit_bits = digit_bits
        self.n_passes = math.ceil(self.key_bits / digit_bits)
        self.prefix = np.zeros(self.targets.shape, dtype=np.uint64)
        self.remaining = self.targets.copy()
        self.fixed_bits = 0

    def digit_range(self):
        """(shift, bits) of the digit the next pass histograms."""
        bits = min(self.digit_bits, self.key_bits - self.fixed_bits)
        return self.key_bits - self.fixed_bits - bits, bits

    def pass_histograms(self, group_scores, weights):
        """Histograms (n_groups, n_targets, 2**bits) of one chunk for this pass.

        ``group_scores`` is a list of score arrays, one per group;
        ``weights`` is None, one array for every group, or a list of one
        array per group.
        """
        shift, bits = self.digit_range()
        n_groups, n_targets = self.targets.shape
        hist = np.zeros((n_groups, n_targets, 1 << bits))
        high_shift = shift + bits
        for g, scores in enumerate(group_scores):
            keys = _sortable_keys(scores, self.key_dtype).astype(np.uint64)
            if self.fixed_bits:
                high = keys >> np.uint64(high_shift)
            else:
                high = np.zeros_like(keys)
            digit = (keys >> np.uint64(shift)) & np.uint64((1 << bits) - 1)
            prefixes = np.unique(self.prefix[g])
            # Which distinct prefix each key shares (if any).
            where = np.searchsorted(prefixes, high)
            where = np.minimum(where, prefixes.shape[0] - 1)
            match = prefixes[where] == high
            slot = where[match] * (1 << bits) + digit[match].astype(np.intp)
            group_weights = weights[g] if isinstance(weights, list) else weights
            w = None if group_weights is None else group_weights[match]
            counts = np.bincount(
                slot, weights=w, minlength=prefixes.shape[0] << bits
            ).reshape(prefixes.shape[0], 1 << bits)
            # Targets with the same prefix share its histogram.
            hist[g] = counts[np.searchsorted(prefixes, self.prefix[g])]
        return hist

    def advance(self, hist):
        """Fix the next digit of every target from the merged histograms."""
        _, bits = self.digit_range()
        cumulative = np.cumsum(hist, axis=-1)
        # First digit whose cumulative weight reaches the remaining target.
        reached = cumulative >= self.remaining[..., None]
        digit = np.argmax(reached, axis=-1)
        # A remaining target above every cumulative weight (rounding) takes the
        # last non-empty digit.
        never = ~reached.any(axis=-1)
        if never.any():
            nonempty = hist > 0
            last = (hist.shape[-1] - 1) - np.argmax(nonempty[..., ::-1], axis=-1)
            digit = np.where(never, last, digit)
        below = np.take_along_axis(
            np.concatenate([np.zeros(hist.shape[:-1] + (1,)), cumulative], axis=-1),
            digit[..., None],
            axis=-1,
        )[..., 0]
        self.remaining = self.remaining - below
        self.prefix = (self.prefix << np.uint64(bits)) | digit.astype(np.uint64)
        self.fixed_bits += bits

    @property
    def done(self):
        return self.fixed_bits >= self.key_bits

    def edges(self):
        """Bin edges (n_groups, n_targets + 2): 0, the selected scores, 1."""
        values = _keys_to_values(self.prefix, self.key_dtype)
        n_groups = values.shape[0]
        return np.concatenate(
            [np.zeros((n_groups, 1)), values, np.ones((n_groups, 1))], axis=1
        )


def equal_mass_targets(total, n_bins, *, weighted, n_samples=None, shrink=0.0):
    """Cumulative weights that the equal-mass edges must reach.

    Unweighted: the ``ceil(b N / M)``-th smallest score, in integers, as
    ``_equal_mass_edges`` of the in-memory metrics; weighted: ``b / M`` of
    the total weight, as their weighted quantiles (``shrink`` scales the
    targets by ``1 - shrink``, as histogram binning's edges do), lowered by
    the rounding bound of a running sum of ``n_samples`` weights, as the
    in-memory edges are: a cumulative weight equal to a target in exact
    arithmetic reaches it.
    """
    fractions = np.arange(1, n_bins) / n_bins
    if not weighted:
        b = np.arange(1, n_bins)
        return ((b * n_samples + n_bins - 1) // n_bins).astype(np.float64)
    return fractions * total * (1.0 - shrink) * summation_slack(n_samples or 0)


def digit_bits_for(n_targets):
    """Bits per pass so that one chunk's histograms stay around 8 MB."""
    for bits in (16, 11, 8, 6, 4):
        if n_targets << bits <= 2**20:
            return bits
    return 4
