"""Binned calibration metrics and the one binning implementation they share.

The convention (``docs/user_guide/binning.rst``): ``M`` bins ``(b/M, (b+1)/M]``
closed on the right, a score of exactly 0 in the first bin and exactly 1 in
the last, empty bins skipped. ``strategy="quantile"`` places the inner edges
at weighted quantiles of the scores instead, with the same ``(lo, hi]`` rule.

Every binned metric, :func:`calibration_curve`, the Brier decomposition, the
bootstrap and :class:`~sklearn_calib.display.ReliabilityDisplay` go through
:class:`_Binning`, whose :meth:`_Binning.statistics` returns per-bin sums of
weights, scores and outcomes for one weight vector or for a whole matrix of
bootstrap weights at once.
"""

from numbers import Integral
from typing import NamedTuple

import numpy as np

from ..utils._compat import Interval, StrOptions, validate_params
from ..utils._math import row_blocks
from ..utils._validation import check_metric_inputs

# Row blocks of about this many probabilities stay in the L2 cache.
BLOCK_ELEMENTS = 2**17
# Up to this many classes, blocks are transposed into class-major copies.
_TRANSPOSE_MAX_CLASSES = 48
# Bootstrap weight matrices are processed in slabs of about this many entries.
_SLAB_ELEMENTS = 2**22

_COMMON_CONSTRAINTS = {
    "y_true": ["array-like"],
    "y_prob": ["array-like"],
    "sample_weight": ["array-like", None],
    "labels": ["array-like", None],
}
_BINNED_CONSTRAINTS = {
    **_COMMON_CONSTRAINTS,
    "n_bins": [Interval(Integral, 1, None, closed="left")],
    "strategy": [StrOptions({"uniform", "quantile"})],
}


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


def _block_top_label(y_prob, rows, truth):
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
        confidence[rows], correct[rows] = _block_top_label(y_prob, rows, y_codes[rows])
    return confidence, correct


def uniform_bin_index(scores, n_bins):
    """Bin of each score among ``n_bins`` equal-width bins ``(b/M, (b+1)/M]``.

    ``b = ceil(M * s) - 1``, computed in the dtype of ``scores`` and clipped,
    so 0 falls in the first bin and 1 in the last.
    """
    index = np.ceil(scores * scores.dtype.type(n_bins))
    index -= 1
    np.clip(index, 0, n_bins - 1, out=index)
    return index.astype(np.intp)


def _slabs(n_rows, n_cols):
    """Row slices of a (n_rows, n_cols) weight matrix of bounded size."""
    step = max(1, _SLAB_ELEMENTS // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _rowwise_searchsorted(rows, values):
    """``searchsorted(rows[r], values[r], side="left")`` for every row at once.

    ``rows`` (non-decreasing along axis 1) and ``values`` are non-negative; an
    offset per row larger than any entry makes the flattened rows one sorted
    array. Row 0 gets no offset, so a single row is searched exactly.
    """
    n_rows, n_cols = rows.shape
    span = max(float(rows.max(initial=0.0)), float(values.max(initial=0.0))) + 1.0
    offset = span * np.arange(n_rows)[:, None]
    found = np.searchsorted((rows + offset).ravel(), (values + offset).ravel())
    return found.reshape(values.shape) - n_cols * np.arange(n_rows)[:, None]


class BinStatistics(NamedTuple):
    """Per-bin sums of one or several weight vectors.

    Every array has shape (n_weightings, n_groups, n_bins) (``edges``: one
    more bin edge); a group is the top-label prediction or one class.
    """

    count: np.ndarray
    score: np.ndarray
    hit: np.ndarray
    edges: np.ndarray


class _Binning:
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
        # The top-label confidences, and the bin indices or sort orders of the
        # top-label group: computed on first use, reused by every slab of
        # bootstrap weights.
        self._top = None
        self._layout_cache = {}

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
                inner = _equal_mass_edges(scores, self.n_bins)
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
            confidence, correct = _block_top_label(y_prob, rows, truth)
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
    for rows in _slabs(*weights.shape):
        slab = weights[rows]
        size = slab.shape[0]
        # Bins of row r are numbered r * n_bins + b: one bincount per slab.
        keys = (index + n_bins * np.arange(size)[:, None]).ravel()
        for out_k, values in zip(out, (slab, slab * scores, slab * hits), strict=True):
            out_k[rows] = np.bincount(
                keys, weights=values.ravel(), minlength=size * n_bins
            ).reshape(size, n_bins)
    return out


def _equal_mass_edges(scores, n_bins):
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
    for rows in _slabs(*weights.shape):
        slab = weights[rows][:, order]
        cumulative = np.cumsum(slab, axis=1)
        total = cumulative[:, -1:]
        first = _rowwise_searchsorted(cumulative, fractions * total)
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


def _ece_values(stats):
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
    per_bin = np.divide(gaps**2, stats.count, out=np.zeros_like(gaps), where=occupied)
    return np.sqrt(per_bin.sum(axis=-1) / total)


_REDUCTIONS = {"ece": _ece_values, "mce": _mce_values, "rms": _rms_values}


class _BinnedMetric:
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
        self._binning = _Binning(
            y_codes, y_prob, n_bins=n_bins, strategy=strategy, multiclass=multiclass
        )
        self._reduce = _REDUCTIONS[reduction]

    def __call__(self, weights=None):
        per_group = self._reduce(self._binning.statistics(weights))
        # Class-wise metrics average over the classes; top-label has one group.
        return per_group.mean(axis=-1)


def binned_state(
    y_codes, y_prob, sample_weight, *, n_bins, strategy, multiclass="top-label"
):
    """The accumulator state of validated in-memory data.

    Equal-width bins: one update of a
    :class:`~sklearn_calib.metrics.BinnedCalibrationAccumulator`, the state
    that takes chunks. Equal-mass bins: the edges are quantiles of all the
    scores, so the in-memory binning finds them and the sums together, and
    the state holds those edges as fixed ``bin_edges``.
    """
    from ._accumulators import BinnedCalibrationAccumulator

    if strategy == "uniform":
        state = BinnedCalibrationAccumulator(n_bins=n_bins, multiclass=multiclass)
        return state._update_validated(y_codes, y_prob, sample_weight)
    binning = _Binning(
        y_codes, y_prob, n_bins=n_bins, strategy=strategy, multiclass=multiclass
    )
    return BinnedCalibrationAccumulator._from_statistics(
        binning.statistics(sample_weight),
        multiclass=multiclass,
        strategy=strategy,
        n_classes=y_prob.shape[1],
        n_samples=y_prob.shape[0],
    )


def _binned_metric(
    y_true,
    y_prob,
    sample_weight,
    labels,
    *,
    reduction,
    multiclass="top-label",
    **params,
):
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    state = binned_state(
        y_codes, y_prob, sample_weight, multiclass=multiclass, **params
    )
    return state._value(reduction)


# --- public metrics ---------------------------------------------------------------


@validate_params(_BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def expected_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Expected calibration error (ECE) of the top-label prediction.

    Each sample's confidence is its largest predicted probability
    ``p_i = max_k q_ik``; it is correct when that class is the true label.
    Samples are binned by confidence and

    .. math::

        \mathrm{ECE} = \sum_b \frac{W_b}{W} \big|\mathrm{acc}_b - \mathrm{conf}_b\big|,

    where ``W_b`` is the (weighted) number of samples in bin ``b``,
    ``acc_b`` the fraction of them that is correct and ``conf_b`` their mean
    confidence. Empty bins are skipped.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities, rows summing to 1. A 1-D array holds the
        positive-class probabilities ``p`` of a binary problem (the columns
        ``(1 - p, p)``). torch tensors and pandas objects are accepted.
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: equal-width bins ``(b/M, (b+1)/M]``, a confidence of 0
        in the first bin and of 1 in the last. ``"quantile"``: equal-mass
        bins whose inner edges are weighted quantiles of the confidences
        (the adaptive ECE, see :func:`adaptive_calibration_error`).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; they replace the counts everywhere.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob`` (for example an estimator's
        ``classes_``), as in scikit-learn. When None: integer labels whose
        smallest value is 0 and that lie in ``range(n_classes)`` are the
        column indices; otherwise exactly ``n_classes`` distinct labels are
        sorted, as scikit-learn orders ``classes_``. Anything else (for
        example 1-based labels ``1..4`` of which 4 is absent) is ambiguous
        and raises a ``ValueError`` asking for ``labels=``. The other metrics
        follow the same rule.

    Returns
    -------
    ece : float
        Between 0 and 1; lower is better.

    See Also
    --------
    adaptive_calibration_error : The same sum over equal-mass bins.
    maximum_calibration_error : The largest bin gap.
    smooth_calibration_error : A kernel-smoothed, binning-free variant.
    calibration_curve : The per-bin accuracies and confidences.

    References
    ----------
    .. [1] M. P. Naeini, G. Cooper and M. Hauskrecht, "Obtaining Well
       Calibrated Probabilities Using Bayesian Binning", AAAI 2015.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> from sklearn_calib.metrics import expected_calibration_error
    >>> expected_calibration_error([1, 0], [0.95, 1.0], n_bins=10)
    0.475
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="ece",
    )


@validate_params(
    {k: v for k, v in _BINNED_CONSTRAINTS.items() if k != "strategy"},
    prefer_skip_nested_validation=True,
)
def adaptive_calibration_error(
    y_true, y_prob, *, n_bins=15, sample_weight=None, labels=None
):
    """Adaptive (equal-mass) expected calibration error of the top-label prediction.

    The ECE sum over ``n_bins`` bins whose inner edges are the weighted
    ``b / n_bins`` quantiles of the confidences (the smallest confidence
    whose cumulative weight reaches that fraction), so that each bin holds
    about ``N / n_bins`` samples. Bins are ``(lo, hi]`` as in the equal-width
    case; ties can leave bins empty, and empty bins are skipped. The same as
    ``expected_calibration_error(..., strategy="quantile")``.

    Not to be confused with an "average" calibration error that weighs the
    bins equally.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; they replace the counts, in the quantiles too.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    ace : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : Equal-width bins.

    References
    ----------
    .. [1] J. Nixon, M. Dusenberry, L. Zhang, G. Jerfel and D. Tran,
       "Measuring Calibration in Deep Learning", CVPR Workshops 2019.
    .. [2] J. Mukhoti, V. Kulharia, A. Sanyal, S. Golodetz, P. Torr and
       P. Dokania, "Calibrating Deep Neural Networks using Focal Loss",
       NeurIPS 2020.

    Examples
    --------
    >>> from sklearn_calib.metrics import adaptive_calibration_error
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.3, 0.7]]
    >>> round(adaptive_calibration_error([0, 1, 1, 0], y_prob, n_bins=2), 4)
    0.25
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy="quantile",
        reduction="ece",
    )


@validate_params(_BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def maximum_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    """Maximum calibration error (MCE): the largest gap over non-empty bins.

    ``max_b |acc_b - conf_b|`` over the top-label bins that hold samples
    (a positive total weight). Sensitive to sparsely filled bins; read it with
    the bin counts of :func:`calibration_curve`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins, as in
        :func:`expected_calibration_error`.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    mce : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : The weighted mean of the same gaps.

    References
    ----------
    .. [1] M. P. Naeini, G. Cooper and M. Hauskrecht, "Obtaining Well
       Calibrated Probabilities Using Bayesian Binning", AAAI 2015.

    Examples
    --------
    >>> from sklearn_calib.metrics import maximum_calibration_error
    >>> # confidences 0.95 (right) and 1.0 (wrong) share a bin, 0.7 (wrong) is alone
    >>> round(maximum_calibration_error([1, 0, 1], [0.95, 1.0, 0.3], n_bins=10), 4)
    0.7
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="mce",
    )


@validate_params(_BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def rms_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Root-mean-square (L2) calibration error of the top-label prediction.

    .. math::

        \mathrm{RMSCE} = \sqrt{\sum_b \frac{W_b}{W}
        \big(\mathrm{acc}_b - \mathrm{conf}_b\big)^2}

    over the non-empty bins. Never smaller than the ECE on the same bins.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    rmsce : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : The L1 version.

    References
    ----------
    .. [1] A. Kumar, P. Liang and T. Ma, "Verified Uncertainty Calibration",
       NeurIPS 2019.

    Examples
    --------
    >>> from sklearn_calib.metrics import rms_calibration_error
    >>> round(rms_calibration_error([1, 0], [0.95, 1.0], n_bins=10), 4)
    0.475
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        reduction="rms",
    )


@validate_params(_BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def classwise_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Class-wise expected calibration error: the mean of the per-class ECEs.

    .. math::

        \mathrm{cwECE} = \frac{1}{K} \sum_k \sum_b \frac{W_{kb}}{W}
        \big|\bar{o}_{kb} - \bar{q}_{kb}\big|,

    where class ``k``'s bins hold the probabilities ``q_ik`` of **all**
    samples, ``\bar{q}_{kb}`` is their mean in bin ``b`` and ``\bar{o}_{kb}``
    the fraction of those samples whose label is ``k``. Unlike the top-label
    ECE it sees every class, not only the predicted one.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities,
        giving the two classes ``(1 - p, p)``).
    n_bins : int, default=15
        Number of bins per class.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width bins, or equal-mass bins per class.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    cwece : float
        Between 0 and 1; lower is better.

    See Also
    --------
    expected_calibration_error : Top-label version.
    calibration_curve : ``multiclass="classwise"`` gives the per-class bins.

    References
    ----------
    .. [1] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song
       and P. Flach, "Beyond temperature scaling: Obtaining well-calibrated
       multiclass probabilities with Dirichlet calibration", NeurIPS 2019.

    Examples
    --------
    >>> from sklearn_calib.metrics import classwise_calibration_error
    >>> y_prob = [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]]
    >>> round(classwise_calibration_error([0, 1, 1], y_prob, n_bins=5), 4)
    0.2667
    """
    return _binned_metric(
        y_true,
        y_prob,
        sample_weight,
        labels,
        n_bins=n_bins,
        strategy=strategy,
        multiclass="classwise",
        reduction="ece",
    )


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


@validate_params(
    {**_BINNED_CONSTRAINTS, "multiclass": [StrOptions({"top-label", "classwise"})]},
    prefer_skip_nested_validation=True,
)
def calibration_curve(
    y_true,
    y_prob,
    *,
    n_bins=15,
    strategy="uniform",
    multiclass="top-label",
    sample_weight=None,
    labels=None,
):
    """Per-bin accuracy, mean confidence and count: the data of a reliability diagram.

    Uses the same bins as every binned metric, so
    ``sum(count * abs(accuracy - confidence)) / sum(count)`` over the
    non-empty bins is :func:`expected_calibration_error`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins.
    multiclass : {"top-label", "classwise"}, default="top-label"
        ``"top-label"``: bin the confidence ``max_k q_ik`` against
        correctness. ``"classwise"``: for each class ``k``, bin ``q_ik``
        against ``1[y_i = k]`` (for a binary problem, row 1 is scikit-learn's
        positive-class calibration curve).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights; ``count`` is then the total weight per bin.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    curve : CalibrationCurve
        A named tuple ``(accuracy, confidence, count, bin_edges)``. For
        top-label, ``accuracy``, ``confidence`` and ``count`` have shape
        (n_bins,) and ``bin_edges`` (n_bins + 1,); class-wise, one row per
        class. ``accuracy`` is the fraction of correct samples (class-wise:
        of samples of that class) and ``confidence`` the mean score of the
        bin; both are NaN in empty bins, where ``count`` is 0.

    See Also
    --------
    sklearn_calib.display.ReliabilityDisplay : Plots these values.
    sklearn.calibration.calibration_curve : Binary, positive-class version.

    Examples
    --------
    >>> from sklearn_calib.metrics import calibration_curve
    >>> # top-label confidences 0.95, 1.0 and 0.7; only the first is correct
    >>> curve = calibration_curve([1, 0, 1], [0.95, 1.0, 0.3], n_bins=2)
    >>> curve.count
    array([0., 3.])
    >>> curve.accuracy
    array([       nan, 0.33333333])
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    state = binned_state(
        y_codes,
        y_prob,
        sample_weight,
        n_bins=n_bins,
        strategy=strategy,
        multiclass=multiclass,
    )
    return state.calibration_curve()


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
