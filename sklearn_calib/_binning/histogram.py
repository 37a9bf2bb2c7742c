"""Histogram binning: one-vs-rest or top-label bins of the probabilities.

The conventions (modes, masked classes, the probability floor) are those of
:mod:`sklearn_calib._binning.one_vs_rest`. The chunked fit finds the same bins
from sums over chunks (exact equal-mass edges by radix selection).
"""

import functools
from numbers import Integral

import numpy as np

from .._chunks.quantiles import EqualMassSelection, digit_bits_for
from ..base import BaseCalibrator
from ..metrics._accumulators import BinnedCalibrationAccumulator
from ..metrics._bin_statistics import (
    BLOCK_ELEMENTS,
    block_top_label,
    uniform_bin_index,
)
from ..utils._compat import Interval, StrOptions
from ..utils._fitted_state import (
    check_state_array,
    fail_state,
)
from ..utils._math import row_blocks, softmax
from ..utils._validation import mask_of
from .one_vs_rest import (
    apply_top_label,
    binary_problems,
    canonical_at,
    canonical_bin_index,
    canonical_near_uniform_edges,
    canonical_probabilities,
    finish_one_vs_rest,
    masked_classes,
    near_others,
    probabilities,
    sum_slack,
    top_label_targets,
    top_ties,
)


def _weighted_quantile_rows(scores, weights, n_bins, order):
    """Rows of the inner edges splitting the weighted scores into equal masses.

    Edge ``b`` is the smallest score whose cumulative weight reaches
    ``b / n_bins`` of the total (the inverted CDF), so integer weights give
    the same edges as repeated samples. ``order`` sorts ``scores`` (stable).
    """
    cumulative = np.cumsum(weights[order])
    targets = cumulative[-1] * np.arange(1, n_bins) / n_bins
    positions = np.searchsorted(cumulative, targets * (1 - 1e-12), side="left")
    return order[np.minimum(positions, scores.shape[0] - 1)]


def _quantile_edges(scores, weights, n_bins, logits, columns):
    """Equal-mass edges and the scores, the same in any order of the columns.

    ``scores[i]`` is column ``columns`` (an int, or None for the top label)
    of the softmax of ``logits[i]``, whose sum over the classes is taken in
    column order: rows holding the same logits in another order (or the
    classes permuted) fall an ulp apart, and an edge (a score) would split
    them. Scores within the sums' rounding
    of another row's are recomputed from sorted entries
    (:func:`~sklearn_calib._binning.one_vs_rest.canonical_probabilities`),
    and so are the edges: every row then falls on the side of an edge that its
    canonical score does (the others lie further from it than their rounding),
    as :func:`~sklearn_calib._binning.one_vs_rest.canonical_bin_index` bins
    the scores to predict.
    """
    order = np.argsort(scores, kind="stable")
    near = near_others(scores, sum_slack(logits.shape[1]), order)
    scores = scores.copy()
    if near.any():
        scores[near] = canonical_at(logits, np.flatnonzero(near), columns)
        order = np.argsort(scores, kind="stable")
    rows = _weighted_quantile_rows(scores, weights, n_bins, order)
    alone = ~near[rows]
    scores[rows[alone]] = canonical_at(logits, rows[alone], columns)
    edges = np.concatenate([[0.0], scores[rows], [1.0]])
    return edges, scores


class HistogramBinning(BaseCalibrator):
    """Histogram binning of the softmax probabilities (Zadrozny & Elkan 2001).

    ``[0, 1]`` is split into ``n_bins`` bins (equal width, or equal mass from
    the calibration set's quantiles); a probability falling in a bin is
    replaced by the bin's (weighted) frequency of positives on the
    calibration set. Bins are ``(lo, hi]``, with 0 in the first bin, as in
    :mod:`sklearn_calib.metrics`. **An empty bin keeps its mid-point**
    ``(lo + hi) / 2`` as calibrated value: with no calibration sample to
    estimate a frequency, the bin's centre is the value closest to the scores
    it will receive.

    Binning may change the argmax (ties between bins, renormalisation), so
    report accuracy beside the calibration metrics. Masked classes (``-inf``
    logits) keep probability exactly 0 and are not counted in their class's
    bins.
    Calibrated probabilities are floored at ``1e-12`` so that log-probabilities
    stay finite.

    Parameters
    ----------
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width bins, or bins holding equal calibration mass (edges at
        weighted quantiles of the calibration scores, end bins stretched to
        0 and 1).
    mode : {"ovr", "top_label"}, default="ovr"
        ``"ovr"``: one histogram per class, rows renormalised (a row whose
        calibrated values are all zero keeps its uncalibrated probabilities).
        ``"top_label"``: one histogram of the confidence of the predicted
        class; the other classes are rescaled proportionally.

    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).

    Attributes
    ----------
    bin_edges_ : ndarray of shape (n_maps, n_bins + 1)
        Edges of each map's bins (one map per class for ``"ovr"``).
    bin_values_ : ndarray of shape (n_maps, n_bins)
        Calibrated value of each bin.
    bin_counts_ : ndarray of shape (n_maps, n_bins)
        Calibration weight that fell in each bin (the number of samples for
        unit weights), in the units of ``sample_weight`` (``inf`` where that
        sum exceeds float64's range); masked
        entries of a class are not counted in its bins.
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.

    See Also
    --------
    IsotonicCalibration : A monotone map with data-driven steps.

    References
    ----------
    .. [1] B. Zadrozny and C. Elkan, "Obtaining calibrated probability
       estimates from decision trees and naive Bayesian classifiers",
       ICML 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import HistogramBinning
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=1000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(1000, 3))
    >>> hb = HistogramBinning(n_bins=10).fit(logits, y)
    >>> hb.bin_values_.shape
    (3, 10)
    >>> accuracy = (hb.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.854 -> 0.858
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        "strategy": [StrOptions({"uniform", "quantile"})],
        "mode": [StrOptions({"ovr", "top_label"})],
    }

    def __init__(self, *, n_bins=15, strategy="uniform", mode="ovr", classes=None):
        self.n_bins = n_bins
        self.strategy = strategy
        self.mode = mode
        self.classes = classes

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_maps = 1 if self.mode == "top_label" else len(self.classes_)
        edges = check_state_array(
            self,
            "bin_edges_",
            shape=(n_maps, self.n_bins + 1),
            low=0.0,
            high=1.0,
        )
        if np.any(np.diff(edges, axis=1) < 0):
            fail_state(self, "bin_edges_", "must be non-decreasing in every row")
        if np.any(edges[:, 0] != 0.0) or np.any(edges[:, -1] != 1.0):
            fail_state(self, "bin_edges_", "must start at 0 and end at 1 in every row")
        check_state_array(
            self, "bin_values_", shape=(n_maps, self.n_bins), low=0.0, high=1.0
        )
        # +inf is a count beyond float64 in the caller's units (see _fit).
        check_state_array(self, "bin_counts_", shape=(n_maps, self.n_bins), low=0.0)

    def _edges(self, scores, weights, logits, columns):
        """The bin edges of one map and its scores, binned as they will be."""
        if self.strategy == "uniform" or not np.any(weights > 0):
            scores = canonical_near_uniform_edges(scores, self.n_bins, logits, columns)
            return np.linspace(0.0, 1.0, self.n_bins + 1), scores
        return _quantile_edges(scores, weights, self.n_bins, logits, columns)

    def _bin_index(self, map_index, scores):
        if self.strategy == "uniform":
            return uniform_bin_index(scores, self.n_bins)
        inner = self.bin_edges_[map_index, 1:-1]
        # (lo, hi] bins: a score equal to an edge belongs to the bin below it.
        return np.searchsorted(inner, scores, side="left")

    def _predicted_bin_index(self, map_index, scores, logits, columns):
        """The bins of scores to predict (see :func:`_quantile_edges`)."""
        if self.strategy == "uniform":
            scores = canonical_near_uniform_edges(scores, self.n_bins, logits, columns)
            return uniform_bin_index(scores, self.n_bins)
        inner = self.bin_edges_[map_index, 1:-1]
        return canonical_bin_index(scores, inner, logits, columns)

    def _weight_scale_matters(self):
        # The fit does not depend on the scale (the weights are divided by
        # their maximum below), but bin_counts_ reports the caller's units.
        return True

    def _fit(self, logits, y, sample_weight):
        proba = probabilities(logits)
        masked = masked_classes(logits)
        problems = binary_problems(proba, y, self.mode, sample_weight, masked)
        n_maps = len(problems)
        self.bin_edges_ = np.empty((n_maps, self.n_bins + 1))
        self.bin_values_ = np.empty((n_maps, self.n_bins))
        self.bin_counts_ = np.empty((n_maps, self.n_bins))
        for m, (scores, targets, weights) in enumerate(problems):
            # The logits of the map's rows and the column of each score.
            if self.mode == "top_label":
                rows_logits, columns = logits, None
            elif masked is not None and masked[:, m].any():
                rows_logits, columns = logits[~masked[:, m]], m
            else:
                rows_logits, columns = logits, m
            self.bin_edges_[m], scores = self._edges(
                scores, weights, rows_logits, columns
            )
            index = self._bin_index(m, scores)
            mass = np.bincount(index, weights=weights, minlength=self.n_bins)
            hits = np.bincount(index, weights=weights * targets, minlength=self.n_bins)
            midpoints = 0.5 * (self.bin_edges_[m, :-1] + self.bin_edges_[m, 1:])
            with np.errstate(divide="ignore", invalid="ignore"):
                self.bin_values_[m] = np.where(mass > 0, hits / mass, midpoints)
            # The weights were divided by their maximum (for precision): the
            # counts are reported in the caller's units, where a bin's weight
            # beyond float64's range (weights near 1e306) is +inf; the fit
            # itself does not use them.
            with np.errstate(over="ignore"):
                self.bin_counts_[m] = mass * sample_weight.max()

    def _fit_chunked(self, data):
        """The exact fit from chunks: bin sums, equal-mass edges by selection."""
        n_bins = self.n_bins
        multiclass = "top-label" if self.mode == "top_label" else "classwise"
        n_maps = 1 if self.mode == "top_label" else data.n_classes
        bin_edges = None
        if self.strategy == "quantile":
            # The in-memory edges: smallest score whose cumulative weight reaches
            # W * b / M * (1 - 1e-12) (HistogramBinning._edges); W is the weight
            # of the rows where the class is open (masked entries are left out).
            if self.mode == "top_label":
                mass = np.array([data.total_weight])
            else:
                mass = data.open_weight
            fractions = np.arange(1, n_bins) / n_bins * (1 - 1e-12)
            targets = mass[:, None] * fractions
            if n_bins == 1:
                bin_edges = np.tile([0.0, 1.0], (n_maps, 1))
            else:
                selection = EqualMassSelection(
                    targets, np.uint64, digit_bits_for(targets.size)
                )
                while not selection.done:
                    _, bits = selection.digit_range()
                    hist = data.reduce(
                        functools.partial(
                            _selection_histograms,
                            selection=selection,
                            mode=self.mode,
                        )
                    )
                    selection.advance(hist.reshape(n_maps, n_bins - 1, 1 << bits))
                bin_edges = selection.edges()
                # A class masked in every row has no data: equal-width edges, as
                # in memory.
                bin_edges[~(mass > 0)] = np.linspace(0.0, 1.0, n_bins + 1)
        template = BinnedCalibrationAccumulator(
            n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
        )
        vector = data.reduce(
            functools.partial(
                _histogram_sums, mode=self.mode, n_bins=n_bins, bin_edges=bin_edges
            )
        )
        state = template.from_vector(vector, data.n_classes)
        edges = np.array(state._group_edges())
        mass, hits = state.count, state.hit
        midpoints = 0.5 * (edges[:, :-1] + edges[:, 1:])
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.where(mass > 0, hits / mass, midpoints)
        self.bin_edges_ = edges
        self.bin_values_ = values
        # The chunks' weights were divided by data.weight_unit (a power of
        # two): the counts are reported in the caller's units, as in memory
        # (+inf beyond float64's range).
        with np.errstate(over="ignore"):
            self.bin_counts_ = mass * data.weight_unit

    def _calibrated_logits(self, logits):
        proba = probabilities(logits)
        masked = masked_classes(logits)
        if self.mode == "top_label":
            _, confidence, _ = top_label_targets(proba, np.zeros(proba.shape[0]))
            index = self._predicted_bin_index(0, confidence, logits, None)
            new = self.bin_values_[0][index]
            calibrated = apply_top_label(
                proba, new, masked, tied=top_ties(proba, confidence)
            )
        elif self.strategy == "uniform":
            # Every class shares the edges: one pass bins the whole block.
            index = uniform_bin_index(
                canonical_near_uniform_edges(proba, self.n_bins, logits),
                self.n_bins,
            )
            calibrated = self.bin_values_[np.arange(proba.shape[1]), index]
        else:
            calibrated = np.column_stack(
                [
                    self.bin_values_[k][
                        self._predicted_bin_index(k, proba[:, k], logits, k)
                    ]
                    for k in range(proba.shape[1])
                ]
            )
        return finish_one_vs_rest(calibrated, proba, masked)


# --- the chunked fit of HistogramBinning: bin sums over chunks --------------------


def _histogram_groups(logits, codes, mode):
    """The binned scores of the quantile strategy: top label or columns.

    The softmax sums each row over its sorted entries, so that rows holding
    the same logits in any order get equal scores: in memory, only the rows
    that another row's score or an edge lies within rounding of are
    recomputed so (:func:`_quantile_edges`), which bins every row as its
    canonical score.
    """
    proba = canonical_probabilities(logits)
    if mode == "top_label":
        confidence = np.empty(proba.shape[0])
        for rows in row_blocks(*proba.shape, max_elements=BLOCK_ELEMENTS):
            confidence[rows] = block_top_label(proba, rows, codes[rows])[0]
        return proba, [confidence]
    return proba, [proba[:, k] for k in range(proba.shape[1])]


def _histogram_sums(logits, codes, weights, *, mode, n_bins, bin_edges):
    multiclass = "top-label" if mode == "top_label" else "classwise"
    state = BinnedCalibrationAccumulator(
        n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
    )
    if not logits.shape[0]:
        proba = logits
    elif bin_edges is None:  # uniform bins: as in HistogramBinning._edges
        proba = canonical_near_uniform_edges(
            softmax(logits.astype(np.float64)), n_bins, logits
        )
    else:  # quantile edges: as in _histogram_groups
        proba = canonical_probabilities(logits)
    mask = mask_of(logits) if mode != "top_label" else None
    if mask is None:
        state._update_validated(codes, proba.astype(np.float64), weights)
        if mode == "top_label" and proba.shape[0]:
            _count_tied_tops(state, codes, proba, weights)
    else:
        state._update_validated(codes, proba[:0], weights[:0])
        _add_open_classwise_sums(state, codes, proba, weights, mask)
    return state.to_vector()


def _count_tied_tops(state, codes, proba, weights):
    """Tied top classes count as in memory (:func:`top_label_targets`).

    The accumulator counts a row correct when its first maximal column is
    the label; a row whose maximum ``t > 1`` columns attain counts ``1 / t``
    in memory when the label is among them. The difference is added to the
    hits of the rows' bins (the counts and scores are unchanged).
    """
    confidence = proba.max(axis=1)
    tied = top_ties(proba, confidence)
    if tied is None:
        return
    is_top, n_top = tied
    rows = np.flatnonzero(n_top > 1)
    predicted = proba[rows].argmax(axis=1)
    fraction = is_top[rows, codes[rows]] / n_top[rows]
    delta = weights[rows] * (fraction - (predicted == codes[rows]))
    # Every one of these rows is correct for the accumulator (labelled with
    # its prediction), weighted by the change of its hit.
    correction = BinnedCalibrationAccumulator(
        n_bins=state.n_bins, multiclass="top-label", bin_edges=state.bin_edges
    )
    correction._update_validated(predicted, proba[rows], delta)
    state.hit += correction.hit


def _add_open_classwise_sums(state, codes, proba, weights, mask):
    """Class-wise bin counts and hits over the rows where each class is open.

    In memory, class k's histogram is fitted on the rows where k is not
    masked: a masked entry enters here with weight 0 (adding 0.0 changes no
    sum), and so does a row's hit when its own class is masked.
    """
    n_rows, n_classes = proba.shape
    n_bins = state.n_bins
    edges = state._group_edges()[:, 1:-1]
    offsets = n_bins * np.arange(n_classes)
    # Flat views: class k's bin b is entry k * n_bins + b.
    count, hit = state.count.reshape(-1), state.hit.reshape(-1)
    for rows in row_blocks(n_rows, n_classes, max_elements=BLOCK_ELEMENTS):
        block = proba[rows]
        if state.bin_edges is None:
            index = uniform_bin_index(block, n_bins)
        else:
            index = np.column_stack(
                [
                    np.searchsorted(edges[k], block[:, k], side="left")
                    for k in range(n_classes)
                ]
            )
        index += offsets
        open_weight = np.where(mask[rows], 0.0, weights[rows, None])
        count += np.bincount(index.ravel(), open_weight.ravel(), count.shape[0])
        rows_index = np.arange(block.shape[0])
        truth = codes[rows]
        hit += np.bincount(
            index[rows_index, truth], open_weight[rows_index, truth], hit.shape[0]
        )
    state.n_samples = n_rows


def _selection_histograms(logits, codes, weights, *, selection, mode):
    _, groups = _histogram_groups(logits, codes, mode)
    mask = mask_of(logits) if mode != "top_label" else None
    if mask is not None:
        # Class k's edges are those of the rows where k is open.
        weights = [np.where(mask[:, k], 0.0, weights) for k in range(len(groups))]
    return selection.pass_histograms(groups, weights).ravel()
