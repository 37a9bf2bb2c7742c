"""Bin statistics: the one implementation of the binning convention.

The convention (``docs/user_guide/binning.rst``): ``M`` bins ``(b/M, (b+1)/M]``
closed on the right, a score of exactly 0 in the first bin and exactly 1 in
the last, empty bins skipped. ``strategy="quantile"`` places the inner edges
at weighted quantiles of the scores instead, with the same ``(lo, hi]`` rule.

This module holds kernels only (it imports nothing from the rest of
:mod:`sklearn_calib.metrics`, only from :mod:`sklearn_calib.utils`): the
top-label confidence and correctness, the bin index of a score, the per-bin
sums of weights, scores and outcomes (:class:`BinStatistics`, for one weight
vector or for a whole matrix of bootstrap weights at once, see
:class:`Binning`; for given edges, see :func:`add_edge_statistics`) and the
reductions of those sums into the metrics (ECE, MCE, RMS, the reliability
curve, Murphy's Brier terms). The accumulators of
:mod:`sklearn_calib.metrics._accumulators` add chunks with the same kernels;
the public functions, the bootstrap and
:class:`~sklearn_calib.display.ReliabilityDisplay` sit above both.
"""

from typing import NamedTuple

import numpy as np

from ..utils._math import row_blocks, summation_slack
from ..utils._validation import GRID_BLOCK_ENTRIES, check_grid_entries

# Row blocks of about this many probabilities stay in the L2 cache.
BLOCK_ELEMENTS = 2**17
# Up to this many classes, blocks are transposed into class-major copies.
_TRANSPOSE_MAX_CLASSES = 48
# Bootstrap weight matrices are processed in slabs of about this many entries.
_SLAB_ELEMENTS = 2**22


def _class_major_block(y_prob, rows):
    """Rows of ``y_prob`` as a (n_classes, n_rows) block, classes first.

    A reduction over a short last axis runs row by row in numpy; over the
    first axis of a transposed copy it is an elementwise operation on
    n_classes contiguous rows, several times faster, and the block stays in
    the cache for everything computed from it. From about 50 classes on, the
    row-wise operations are the faster ones and the block is a transposed view.
    """
    block = y_prob[rows].T
    return block.copy() if y_prob.shape[1] <= _TRANSPOSE_MAX_CLASSES else block


def block_top_label(y_prob, rows, truth):
    """Confidence and correctness of a block of rows (see :func:`top_label`)."""
    if y_prob.shape[1] > _TRANSPOSE_MAX_CLASSES:
        # Long rows: numpy's row-wise argmax is vectorised.
        block = y_prob[rows]
        predicted = block.argmax(axis=1)
        return block[np.arange(block.shape[0]), predicted], predicted == truth
    block = _class_major_block(y_prob, rows)
    confidence = block.max(axis=0)
    is_top = block == confidence
    size = block.shape[1]
    if np.count_nonzero(is_top) == size:
        # A unique maximum per row: correct iff the true class attains it.
        correct = is_top[truth, np.arange(size)]
    else:
        correct = block.argmax(axis=0) == truth
    return confidence, correct


def top_label(y_prob, y_codes):
    """Confidence ``max_k q_ik`` and correctness ``argmax_k q_ik == y_i``.

    The argmax takes the first maximal column on ties, as ``np.argmax`` and
    the calibrators' ``predict`` do.

    Parameters
    ----------
    y_prob : ndarray of shape (n_samples, n_classes)
        Validated probabilities, float32 or float64.
    y_codes : ndarray of shape (n_samples,) of int
        Column index of each sample's true class.

    Returns
    -------
    confidence : ndarray of shape (n_samples,), dtype of ``y_prob``
    correct : ndarray of shape (n_samples,) of bool
    """
    n_samples, n_classes = y_prob.shape
    confidence = np.empty(n_samples, dtype=y_prob.dtype)
    correct = np.empty(n_samples, dtype=bool)
    for rows in row_blocks(n_samples, n_classes, max_elements=BLOCK_ELEMENTS):
        confidence[rows], correct[rows] = block_top_label(y_prob, rows, y_codes[rows])
    return confidence, correct


def uniform_bin_index(scores, n_bins):
    """Bin of each score among ``n_bins`` equal-width bins ``(b/M, (b+1)/M]``.

    The ``b`` with ``e_b < s <= e_{b+1}``, ``e_b`` the number ``b / M`` reads
    as in the dtype of ``scores`` (``b / M`` correctly rounded), so a score
    on an edge falls in the bin below it; 0 falls in the first bin and 1 in
    the last. ``ceil(M * s) - 1`` alone rounds the product: ``0.28 * 25`` is
    ``7.000000000000001``, which put the edge ``7 / 25`` in the bin above it
    (362 of the 9900 inner edges of ``M <= 100`` in float64 and float32). It
    is off by at most one, which one comparison with each edge corrects.
    """
    m = scores.dtype.type(n_bins)
    index = np.ceil(scores * m)
    np.clip(index, 1, n_bins, out=index)
    # index is the candidate b + 1: step down from on or below its lower
    # edge, up from above its upper edge.
    index -= scores <= (index - 1) / m
    index += scores > index / m
    index -= 1
    np.clip(index, 0, n_bins - 1, out=index)
    return index.astype(np.intp)


def slabs(n_rows, n_cols):
    """Row slices of a (n_rows, n_cols) weight matrix of bounded size."""
    return row_blocks(n_rows, n_cols, max_elements=_SLAB_ELEMENTS)


def _rowwise_searchsorted(rows, values):
    """``searchsorted(rows[r], values[r], side="left")`` for every row.

    One search per row: flattening the rows into one sorted array by adding
    an offset per row rounded the sums, so weights far below 1 (cumulative
    weights lost under an offset of 1) or weights whose offsets overflowed
    moved the edges of bootstrap resamples.
    """
    found = np.empty(values.shape, dtype=np.intp)
    for r in range(rows.shape[0]):
        found[r] = np.searchsorted(rows[r], values[r])
    return found


class BinStatistics(NamedTuple):
    """Per-bin sums of one or several weight vectors.

    Every array has shape (n_weightings, n_groups, n_bins) (``edges``: one
    more bin edge); a group is the top-label prediction or one class.
    """

    count: np.ndarray
    score: np.ndarray
    hit: np.ndarray
    edges: np.ndarray


class Binning:
    """The weight-independent part of a binned metric.

    Holds the scores and outcomes of every group: the top-label confidence
    and correctness, or, class-wise, each column ``q_.k`` against
    ``1[y = k]``. :meth:`statistics` then bins them under any weights.
    """

    def __init__(self, y_codes, y_prob, *, n_bins, strategy, multiclass="top-label"):
        self.n_bins = n_bins
        self.strategy = strategy
        self.multiclass = multiclass
        self.n_samples = y_prob.shape[0]
        self._y_codes = y_codes
        self._y_prob = y_prob
        self.n_groups = 1 if multiclass == "top-label" else y_prob.shape[1]
        check_grid_entries("n_bins", n_bins, self.n_groups * (n_bins + 1))
        # The top-label confidences, and the bin indices or sort orders of the
        # top-label group: computed on first use, reused by every slab of
        # bootstrap weights.
        self._top = None
        self._layout_cache = {}

    @property
    def block_rows(self):
        """Rows of weights (resamples) to bin at once: their bin arrays hold
        at most GRID_BLOCK_ENTRIES each (1,000 resamples of 10**6 bins asked
        for 8 GiB per array at once)."""
        return max(1, GRID_BLOCK_ENTRIES // (self.n_groups * (self.n_bins + 1)))

    def group(self, g):
        """Scores and boolean outcomes of group ``g``."""
        if self.multiclass == "top-label":
            if self._top is None:
                self._top = top_label(self._y_prob, self._y_codes)
            return self._top
        return self._y_prob[:, g], self._y_codes == g

    def _layout(self, g, scores):
        if g in self._layout_cache:
            return self._layout_cache[g]
        if self.strategy == "uniform":
            layout = uniform_bin_index(scores, self.n_bins)
        else:
            # Any order of tied scores gives the same edges and bin sums.
            order = np.argsort(scores)
            layout = (order, scores[order].astype(np.float64))
        if self.multiclass == "top-label":
            self._layout_cache[g] = layout
        return layout

    def statistics(self, weights=None):
        """Per-bin sums of weights, scores and outcomes.

        Parameters
        ----------
        weights : None, ndarray of shape (n_samples,) or (n_weightings, n_samples)
            One weight vector, or one per row (bootstrap resamples). None
            counts every sample once.

        Returns
        -------
        BinStatistics
            Arrays of shape (n_weightings, n_groups, n_bins); ``edges`` has
            shape (n_weightings, n_groups, n_bins + 1).
        """
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
        if self.strategy == "uniform" and (weights is None or weights.ndim == 1):
            return self._uniform_statistics_in_blocks(weights)
        if weights is not None and weights.ndim == 1:
            weights = weights[None, :]
        n_rows = 1 if weights is None else weights.shape[0]
        shape = (n_rows, self.n_groups, self.n_bins)
        count, score, hit = (np.zeros(shape) for _ in range(3))
        edges = np.empty(shape[:2] + (self.n_bins + 1,))
        for g in range(self.n_groups):
            scores, hits = self.group(g)
            if self.strategy == "quantile" and weights is None:
                # Unweighted equal-mass edges are order statistics: a
                # partition finds them without sorting the scores.
                inner = equal_mass_edges(scores, self.n_bins)
                index = np.searchsorted(inner, scores, side="left")
                sums = _uniform_sums(index, scores, hits, None, self.n_bins)
                edges[:, g] = np.concatenate([[0.0], inner, [1.0]])
                count[:, g], score[:, g], hit[:, g] = sums
                continue
            layout = self._layout(g, scores)
            if self.strategy == "uniform":
                sums = _uniform_sums(layout, scores, hits, weights, self.n_bins)
                edges[:, g] = np.linspace(0.0, 1.0, self.n_bins + 1)
            else:
                sums, edges[:, g] = _quantile_sums(*layout, hits, weights, self.n_bins)
            count[:, g], score[:, g], hit[:, g] = sums
        return BinStatistics(count, score, hit, edges)

    def _uniform_statistics_in_blocks(self, weights):
        """Equal-width statistics of one weighting, block by block of rows.

        Every quantity (confidences, bin indices, per-bin sums) is computed
        on a cache-sized block and added up, so no array of the size of the
        data is allocated: on 1M x 10 float32 probabilities this is most of
        the speed of the ECE. The same kernel adds the chunks of the
        streaming accumulators (:mod:`sklearn_calib.metrics._accumulators`).
        """
        n_bins, n_groups = self.n_bins, self.n_groups
        count, score, hit = (np.zeros(n_groups * n_bins) for _ in range(3))
        add_uniform_statistics(
            count,
            score,
            hit,
            self._y_codes,
            self._y_prob,
            weights,
            n_bins,
            self.multiclass,
        )
        shape = (1, n_groups, n_bins)
        edges = np.broadcast_to(
            np.linspace(0.0, 1.0, n_bins + 1), (1, n_groups, n_bins + 1)
        )
        return BinStatistics(
            count.reshape(shape), score.reshape(shape), hit.reshape(shape), edges.copy()
        )


def add_uniform_statistics(
    count, score, hit, y_codes, y_prob, weights, n_bins, multiclass
):
    """Add the equal-width bin sums of some rows into flat (n_groups * n_bins) arrays.

    The one binning kernel of the equal-width metrics: the in-memory functions
    run it once over all rows, the accumulators once per chunk. Group ``g``'s
    bin ``b`` is entry ``g * n_bins + b`` (one group for top-label, one per
    class for class-wise).
    """
    n_samples, n_classes = y_prob.shape
    offsets = n_bins * np.arange(n_classes)[:, None]
    for rows in row_blocks(n_samples, n_classes, max_elements=BLOCK_ELEMENTS):
        truth = y_codes[rows]
        w = None if weights is None else weights[rows]
        if multiclass == "top-label":
            confidence, correct = block_top_label(y_prob, rows, truth)
            index = uniform_bin_index(confidence, n_bins)
            if w is None:
                # One bincount of 2 b + correct gives counts and hits.
                pairs = np.bincount(2 * index + correct, minlength=2 * n_bins)
                count += pairs[0::2] + pairs[1::2]
                hit += pairs[1::2]
                score += np.bincount(index, weights=confidence, minlength=n_bins)
            else:
                _add_bin_sums(
                    count, score, hit, index, confidence, index, w, w * correct
                )
        else:
            # Class k's bins are numbered k * n_bins + b.
            block = _class_major_block(y_prob, rows)
            index = uniform_bin_index(block, n_bins) + offsets
            true_index = index[truth, np.arange(truth.shape[0])]
            tiled = None if w is None else np.broadcast_to(w, block.shape).ravel()
            _add_bin_sums(
                count,
                score,
                hit,
                index.ravel(),
                block.ravel(),
                true_index,
                tiled,
                w,
            )


def _add_bin_sums(count, score, hit, index, scores, hit_index, weights, hit_weights):
    """Add one block's per-bin weights, weighted scores and weighted hits."""
    n = count.shape[0]
    if weights is None:
        count += np.bincount(index, minlength=n)
        score += np.bincount(index, weights=scores, minlength=n)
        hit += np.bincount(hit_index, minlength=n)
    else:
        count += np.bincount(index, weights=weights, minlength=n)
        score += np.bincount(index, weights=weights * scores, minlength=n)
        hit += np.bincount(hit_index, weights=hit_weights, minlength=n)


def _uniform_sums(index, scores, hits, weights, n_bins):
    """Per-bin sums for fixed bin indices, by weighted ``np.bincount``."""
    if weights is None:
        # One integer bincount gives both the counts and the hits.
        pairs = np.bincount(2 * index + hits, minlength=2 * n_bins).reshape(n_bins, 2)
        count = pairs.sum(axis=1)
        score = np.bincount(index, weights=scores, minlength=n_bins)
        return count[None], score[None], pairs[None, :, 1]
    n_rows = weights.shape[0]
    out = np.zeros((3, n_rows, n_bins))
    scores = scores.astype(np.float64)
    for rows in slabs(*weights.shape):
        slab = weights[rows]
        size = slab.shape[0]
        # Bins of row r are numbered r * n_bins + b: one bincount per slab.
        keys = (index + n_bins * np.arange(size)[:, None]).ravel()
        for out_k, values in zip(out, (slab, slab * scores, slab * hits), strict=True):
            out_k[rows] = np.bincount(
                keys, weights=values.ravel(), minlength=size * n_bins
            ).reshape(size, n_bins)
    return out


def equal_mass_edges(scores, n_bins):
    """Inner edges of unweighted equal-mass bins: order statistics of the scores.

    Edge ``b`` is the smallest score whose count of scores at or below it
    reaches ``b N / M``: the sorted score at 0-based position
    ``ceil(b N / M) - 1`` (integer arithmetic, so no rounding).
    """
    n_samples = scores.shape[0]
    positions = (np.arange(1, n_bins) * n_samples + n_bins - 1) // n_bins - 1
    if positions.size == 0:
        return scores[:0]
    return np.partition(scores, np.unique(positions))[positions]


def _quantile_sums(order, sorted_scores, hits, weights, n_bins):
    """Per-bin sums and edges of equal-mass bins, by prefix sums in score order.

    Inner edge ``e_b`` (``b = 1 .. M-1``) is the weighted ``b/M`` quantile of
    the scores (``inverted_cdf``: the smallest score whose cumulative weight
    reaches ``b/M`` of the total), so integer weights act as repeated rows.
    Bin ``b`` holds the scores in ``(e_b, e_{b+1}]``; equal edges leave empty
    bins, which the metrics skip.
    """
    n_samples = sorted_scores.shape[0]
    if weights is None:
        weights = np.ones((1, n_samples))
    n_rows = weights.shape[0]
    fractions = np.arange(1, n_bins) / n_bins
    sums = np.zeros((3, n_rows, n_bins))
    edges = np.empty((n_rows, n_bins + 1))
    edges[:, 0], edges[:, -1] = 0.0, 1.0
    sorted_hits = hits[order].astype(np.float64)
    for rows in slabs(*weights.shape):
        slab = weights[rows][:, order]
        cumulative = np.cumsum(slab, axis=1)
        total = cumulative[:, -1:]
        # Targets the cumulative weights reach in exact arithmetic are reached
        # after rounding too: scaling every weight cannot move an edge.
        targets = fractions * total * summation_slack(n_samples)
        first = _rowwise_searchsorted(cumulative, targets)
        inner = sorted_scores[np.minimum(first, n_samples - 1)]
        edges[rows, 1:-1] = inner
        # Bin b ends after the last sample whose score is <= its upper edge.
        ends = np.searchsorted(sorted_scores, inner, side="right")
        ends = np.concatenate(
            [
                np.zeros((ends.shape[0], 1), np.intp),
                ends,
                np.full((ends.shape[0], 1), n_samples),
            ],
            axis=1,
        )
        for k, values in enumerate((slab, slab * sorted_scores, slab * sorted_hits)):
            prefix = np.zeros((values.shape[0], n_samples + 1))
            np.cumsum(values, axis=1, out=prefix[:, 1:])
            at_ends = np.take_along_axis(prefix, ends, axis=1)
            sums[k, rows] = np.diff(at_ends, axis=1)
    return sums, edges


# --- reductions of the bin statistics ------------------------------------------


def _calibration_gaps(stats):
    """``|hit - score|`` per bin and the total weight, per weighting and group."""
    return np.abs(stats.hit - stats.score), stats.count.sum(axis=-1)


def ece_values(stats):
    gaps, total = _calibration_gaps(stats)
    return gaps.sum(axis=-1) / total


def _mce_values(stats):
    gaps, _ = _calibration_gaps(stats)
    occupied = stats.count > 0
    per_bin = np.divide(gaps, stats.count, out=np.zeros_like(gaps), where=occupied)
    return per_bin.max(axis=-1)


def _rms_values(stats):
    gaps, total = _calibration_gaps(stats)
    occupied = stats.count > 0
    # gap * (gap / count), not gap**2 / count: the gaps are sums of weights,
    # whose squares overflow (or underflow) where the weights are huge (tiny).
    ratio = np.divide(gaps, stats.count, out=np.zeros_like(gaps), where=occupied)
    return np.sqrt((gaps * ratio).sum(axis=-1) / total)


REDUCTIONS = {"ece": ece_values, "mce": _mce_values, "rms": _rms_values}


class BinnedMetric:
    """A binned metric as a function of the weights: ``evaluate(W) -> (B,)``.

    The binning (confidences, bin indices or sort orders) is computed once; the
    bootstrap then evaluates whole matrices of resample weights.
    """

    def __init__(
        self,
        y_codes,
        y_prob,
        *,
        n_bins=15,
        strategy="uniform",
        multiclass="top-label",
        reduction="ece",
    ):
        self._binning = Binning(
            y_codes, y_prob, n_bins=n_bins, strategy=strategy, multiclass=multiclass
        )
        self._reduce = REDUCTIONS[reduction]

    def __call__(self, weights=None):
        binning = self._binning
        step = binning.block_rows
        if weights is not None and weights.ndim == 2 and weights.shape[0] > step:
            return np.concatenate(
                [self(weights[s : s + step]) for s in range(0, weights.shape[0], step)]
            )
        per_group = self._reduce(binning.statistics(weights))
        # Class-wise metrics average over the classes; top-label has one group.
        return per_group.mean(axis=-1)


def add_edge_statistics(count, score, hit, y_codes, y_prob, weights, inner, multiclass):
    """Add the bin sums of some rows for given bin edges (bins ``(lo, hi]``).

    ``inner`` (n_groups, n_bins - 1) holds the inner edges of each group; a
    score equal to an edge belongs to the bin below it, as in the equal-mass
    bins of the in-memory metrics. ``count`` etc. are (n_groups, n_bins).
    """
    n_samples, n_classes = y_prob.shape
    n_bins = count.shape[1]
    for rows in row_blocks(n_samples, n_classes, max_elements=BLOCK_ELEMENTS):
        truth = y_codes[rows]
        w = None if weights is None else weights[rows]
        if multiclass == "top-label":
            groups = [block_top_label(y_prob, rows, truth)]
        else:
            block = y_prob[rows]
            groups = [(block[:, k], truth == k) for k in range(n_classes)]
        for g, (scores, hits) in enumerate(groups):
            index = np.searchsorted(inner[g], scores, side="left")
            if w is None:
                count[g] += np.bincount(index, minlength=n_bins)
                score[g] += np.bincount(index, weights=scores, minlength=n_bins)
                hit[g] += np.bincount(index[hits], minlength=n_bins)
            else:
                count[g] += np.bincount(index, weights=w, minlength=n_bins)
                score[g] += np.bincount(index, weights=w * scores, minlength=n_bins)
                hit[g] += np.bincount(index, weights=w * hits, minlength=n_bins)


class CalibrationCurve(NamedTuple):
    """Per-bin values of a reliability diagram (see :func:`calibration_curve`).

    A named tuple: unpack it as ``accuracy, confidence, count, bin_edges``.

    Attributes
    ----------
    accuracy : ndarray of shape (n_bins,) or (n_classes, n_bins)
        Weighted fraction of correct samples per bin (class-wise: of samples
        of that class); NaN in empty bins.
    confidence : ndarray of the same shape
        Weighted mean score per bin; NaN in empty bins.
    count : ndarray of the same shape
        Total sample weight per bin (the number of samples without weights).
    bin_edges : ndarray of shape (n_bins + 1,) or (n_classes, n_bins + 1)
        Bin edges; bin ``b`` is ``(bin_edges[b], bin_edges[b + 1]]``, the
        first bin also holding 0.
    """

    accuracy: np.ndarray
    confidence: np.ndarray
    count: np.ndarray
    bin_edges: np.ndarray


def curve_from_statistics(stats, multiclass="top-label"):
    """A :class:`CalibrationCurve` from the first weighting of ``stats``."""
    count = stats.count[0].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(count > 0, stats.hit[0] / count, np.nan)
        confidence = np.where(count > 0, stats.score[0] / count, np.nan)
    edges = stats.edges[0]
    if multiclass == "top-label":
        return CalibrationCurve(accuracy[0], confidence[0], count[0], edges[0])
    return CalibrationCurve(accuracy, confidence, count, edges)


class BrierDecomposition(NamedTuple):
    """Murphy's terms of the Brier score (see :func:`brier_score_decomposition`).

    Attributes
    ----------
    reliability : float
        Calibration term; 0 for forecasts that match the observed
        frequencies of their bins. Lower is better.
    resolution : float
        How far the bins' observed frequencies are from the base rates.
        Higher is better.
    uncertainty : float
        The Brier score of forecasting the base rates; depends on the labels
        only.
    """

    reliability: float
    resolution: float
    uncertainty: float


def brier_decomposition_from_statistics(stats):
    """Murphy's :class:`BrierDecomposition` from class-wise bin statistics.

    Reads the first weighting of ``stats`` (groups are the classes).
    """
    count, forecast, observed = stats.count[0], stats.score[0], stats.hit[0]
    total = count.sum(axis=-1, keepdims=True)
    base_rate = observed.sum(axis=-1, keepdims=True) / total
    occupied = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_forecast = np.where(occupied, forecast / count, 0.0)
        frequency = np.where(occupied, observed / count, 0.0)
    reliability = np.sum(count * (mean_forecast - frequency) ** 2 / total)
    resolution = np.sum(count * (frequency - base_rate) ** 2 / total)
    uncertainty = np.sum(base_rate * (1 - base_rate))
    return BrierDecomposition(float(reliability), float(resolution), float(uncertainty))
