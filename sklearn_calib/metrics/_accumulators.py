"""Mergeable accumulators: the metrics as sums over samples, chunk by chunk.

Every binned metric (ECE, MCE, RMS calibration error, class-wise ECE, the
reliability curve, the Brier decomposition) is a function of three sums per
bin: the total weight, the weighted sum of the scores and the weighted number
of hits. The proper scores (NLL, Brier) are weighted means of per-sample
losses. So a state that holds those sums can take the data chunk by chunk
(:meth:`~BinnedCalibrationAccumulator.update`), two states built on different
chunks add up (:meth:`~BinnedCalibrationAccumulator.merge`, ``+``), and the
metric is read off the sums at the end. The in-memory functions of
:mod:`sklearn_calib.metrics` are one update of the same state followed by the
same reduction, so the two agree to rounding (float64 sums added in another
order).

Equal-mass (adaptive) bins have edges at quantiles of all the scores, which
no single pass over chunks can know. Given the edges, the sums are again
mergeable (``bin_edges=``); :func:`equal_mass_bin_edges` finds the exact edges
in a few passes over the chunks (a radix selection on the bits of the
scores, see :mod:`sklearn_calib._chunks.quantiles`).
"""

import contextlib
import copy
from numbers import Integral

import numpy as np

from ..utils._math import softmax
from ..utils._validation import (
    as_float_2d,
    check_grid_entries,
    check_labels_per_row,
    check_masked_logits,
    check_probabilities,
    check_true_labels,
    encode_metric_labels,
    expand_binary_scores,
    to_numpy,
)
from ._bin_statistics import (
    REDUCTIONS,
    BinStatistics,
    add_edge_statistics,
    add_uniform_statistics,
    brier_decomposition_from_statistics,
    curve_from_statistics,
)
from ._sample_losses import brier_losses, log_losses

_MULTICLASS = ("top-label", "classwise")
PROPER_SCORES = ("log_loss", "brier_score")


# --- chunk validation ----------------------------------------------------------


def _as_array(values):
    values = to_numpy(values)
    if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
        values = values.to_numpy()
    return np.asarray(values)


def _chunk_codes(y_true, n_classes, labels):
    """Column index of each label of one chunk.

    With ``labels=None`` only integer labels in ``range(n_classes)`` are
    accepted: the in-memory metrics sort the distinct labels of all of
    ``y_true``, which one chunk cannot see.
    """
    if labels is not None:
        return encode_metric_labels(y_true, n_classes, labels)[0]
    if y_true.shape[0] == 0:
        return np.empty(0, dtype=np.intp)
    if y_true.dtype == bool or np.issubdtype(y_true.dtype, np.integer):
        if y_true.min() >= 0 and y_true.max() < n_classes:
            return y_true.astype(np.intp, copy=False)
    elif np.issubdtype(y_true.dtype, np.floating):
        if not np.all(np.isfinite(y_true)):
            raise ValueError("y_true contains NaN or infinity.")
        codes = y_true.astype(np.intp)
        if np.all(codes == y_true) and codes.min() >= 0 and codes.max() < n_classes:
            return codes
    raise ValueError(
        f"y_true holds labels that are not the column indices 0..{n_classes - 1} "
        "of y_prob. Accumulating chunks needs labels= (the class of each "
        "column, for example an estimator's classes_): a single chunk need not "
        "hold every class, so the classes cannot be inferred from it."
    )


def _chunk_weights(sample_weight, n_samples):
    """Finite, non-negative float64 weights of one chunk (all zero allowed)."""
    if sample_weight is None:
        return None
    weights = _as_array(sample_weight).astype(np.float64, copy=False)
    if weights.ndim == 0:
        weights = np.full(n_samples, float(weights))
    if weights.ndim != 1 or weights.shape[0] != n_samples:
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per "
            f"sample; got shape {weights.shape}."
        )
    if not np.all(np.isfinite(weights)):
        raise ValueError("sample_weight contains NaN or infinity.")
    if n_samples and weights.min() < 0:
        raise ValueError("sample_weight contains negative values.")
    return weights


def check_chunk_logits(logits, *, input_name="logits"):
    """Validate one chunk of logits: 2-D float, no NaN, no +inf, finite row maxima.

    ``-inf`` marks a masked class (probability exactly 0), as everywhere in
    the library. A single score column of a binary problem becomes ``(0, s)``.
    """
    logits = as_float_2d(logits, input_name=input_name)
    # The rules of the in-memory calibrators (NaN, +inf and rows without a
    # finite logit are errors naming the problem).
    check_masked_logits(logits, input_name=input_name)
    return expand_binary_scores(logits)


class _Accumulator:
    """Chunk validation, merging and the ``+`` operator shared by the states."""

    def __init__(self, labels=None):
        self.labels = labels
        self.n_classes = None
        self.n_samples = 0

    # subclasses: _allocate(n_classes), _add(y_codes, y_prob, weights),
    # _sums() -> list of arrays, _check_compatible(other)

    def _check_chunk(self, y_true, y_prob, sample_weight):
        y_prob = _as_array(y_prob)
        if y_prob.ndim in (1, 2) and y_prob.shape[0] == 0:
            # An empty chunk adds nothing; its width is checked when known.
            n_cols = 2 if y_prob.ndim == 1 or y_prob.shape[1] == 1 else y_prob.shape[1]
            y_prob = np.empty((0, n_cols))
        else:
            y_prob = check_probabilities(y_prob)
        y_true = check_true_labels(y_true, y_prob.shape[0])
        return self._encode(y_true, y_prob, sample_weight)

    def _check_logits_chunk(
        self, y_true, logits, sample_weight, *, input_name="logits", y_name="y_true"
    ):
        """Validate a chunk of logits once: label codes, softmax, weights."""
        logits = check_chunk_logits(logits, input_name=input_name)
        proba = softmax(logits) if logits.shape[0] else logits
        y_true = check_labels_per_row(
            _as_array(y_true), proba.shape[0], name=y_name, rows_of=input_name
        )
        return self._encode(y_true, proba, sample_weight)

    def _encode(self, y_true, y_prob, sample_weight):
        n_classes = y_prob.shape[1]
        if self.n_classes is None:
            if self.labels is not None and len(self.labels) != n_classes:
                raise ValueError(
                    f"labels must list one class per column of y_prob: y_prob has "
                    f"{n_classes} columns, labels has {len(self.labels)} entries."
                )
            self.n_classes = n_classes
            self._allocate(n_classes)
        elif n_classes != self.n_classes:
            raise ValueError(
                f"This chunk has {n_classes} probability columns but the "
                f"accumulator has seen {self.n_classes}."
            )
        y_codes = _chunk_codes(y_true, n_classes, self.labels)
        weights = _chunk_weights(sample_weight, y_prob.shape[0])
        return y_codes, y_prob, weights

    def update(self, y_true, y_prob, sample_weight=None):
        """Add one chunk of labels and predicted probabilities.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels: column indices ``0..n_classes-1``, or any labels when
            the accumulator was given ``labels``.
        y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
            Predicted probabilities, rows summing to 1 (a 1-D array: the
            positive-class probabilities of a binary problem). A chunk may be
            empty.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights (a chunk whose weights are all zero adds
            nothing).

        Returns
        -------
        self : object
            The updated accumulator.
        """
        if self._skip_empty_1d(y_true, y_prob, sample_weight):
            return self
        y_codes, y_prob, weights = self._check_chunk(y_true, y_prob, sample_weight)
        return self._update_validated(y_codes, y_prob, weights)

    def update_logits(self, y_true, logits, sample_weight=None):
        """Add one chunk of labels and logits (``softmax(logits)`` is scored).

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels, as in :meth:`update`.
        logits : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, one column per class (or one score column ``s`` of a
            binary problem, read as ``(0, s)``). ``-inf`` marks a masked
            class.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights.

        Returns
        -------
        self : object
            The updated accumulator.
        """
        if self._skip_empty_1d(y_true, logits, sample_weight, input_name="logits"):
            return self
        y_codes, proba, weights = self._check_logits_chunk(
            y_true, logits, sample_weight
        )
        return self._update_validated(y_codes, proba, weights)

    def _skip_empty_1d(self, y_true, values, sample_weight, *, input_name="y_prob"):
        """Whether the chunk is empty and 1-D: it adds nothing, fixes nothing.

        ``[]`` (or an empty 1-D array) says nothing about the number of
        classes: read as a binary column, it fixed 2 columns (the next chunk
        of 3 was refused) or was refused after chunks of 3. Its labels and
        weights must be empty too.
        """
        values = _as_array(values)
        if values.ndim != 1 or values.shape[0] != 0:
            return False
        check_labels_per_row(_as_array(y_true), 0, name="y_true", rows_of=input_name)
        _chunk_weights(sample_weight, 0)
        return True

    def _update_validated(self, y_codes, y_prob, weights):
        if self.n_classes is None:
            self.n_classes = y_prob.shape[1]
            self._allocate(self.n_classes)
        if y_prob.shape[0]:
            with self._refusing_overflow("chunk"):
                self._add(y_codes, y_prob, weights)
        self.n_samples += int(y_prob.shape[0])
        return self

    @contextlib.contextmanager
    def _refusing_overflow(self, what):
        """Undo an addition whose sums leave float64's range, and say so.

        The sums are kept in the caller's units (adding the vectors of
        :meth:`to_vector` merges states), so weights near 1e307 overflowed
        them: every metric was NaN, with numpy's RuntimeWarnings.
        """
        saved = [np.array(sums, copy=True) for sums in self._sums()]
        with np.errstate(over="ignore", invalid="ignore"):
            yield
        if all(np.all(np.isfinite(sums)) for sums in self._sums()):
            return
        for sums, before in zip(self._sums(), saved, strict=True):
            sums[...] = before
        raise ValueError(
            f"Adding this {what} makes the sums of the sample weights exceed "
            "float64's range; the accumulator is left as it was. The metrics "
            "depend on the weights' ratios only: divide every sample_weight "
            "by a common constant."
        )

    def merge(self, other):
        """Add the sums of another accumulator of the same kind into this one.

        Parameters
        ----------
        other : accumulator
            Built with the same parameters (and, once both have data, on the
            same number of classes).

        Returns
        -------
        self : object
            This accumulator, now holding the data of both.
        """
        if type(other) is not type(self):
            raise TypeError(
                f"Cannot merge a {type(other).__name__} into a {type(self).__name__}."
            )
        self._check_compatible(other)
        if other.n_classes is None:
            return self
        if self.n_classes is None:
            self.n_classes = other.n_classes
            self._allocate(other.n_classes)
        elif other.n_classes != self.n_classes:
            raise ValueError(
                f"Cannot merge accumulators over {self.n_classes} and "
                f"{other.n_classes} classes."
            )
        with self._refusing_overflow("accumulator"):
            for mine, theirs in zip(self._sums(), other._sums(), strict=True):
                mine += theirs
        self.n_samples += other.n_samples
        return self

    def __add__(self, other):
        if not isinstance(other, _Accumulator):
            return NotImplemented
        return copy.deepcopy(self).merge(other)

    def __radd__(self, other):
        # sum(accumulators) starts from 0
        if isinstance(other, Integral) and other == 0:
            return copy.deepcopy(self)
        return NotImplemented

    def __iadd__(self, other):
        if not isinstance(other, _Accumulator):
            return NotImplemented
        return self.merge(other)

    def _labels_equal(self, other):
        if self.labels is None or other.labels is None:
            return self.labels is None and other.labels is None
        return np.array_equal(np.asarray(self.labels), np.asarray(other.labels))

    # Flat float64 vectors, for reductions that add arrays (a dask graph):
    # the sums, then the number of rows (exact in float64 below 2**53).
    def vector_size(self, n_classes):
        """Length of :meth:`to_vector` once ``n_classes`` is known."""
        return sum(s.size for s in self._empty_sums(n_classes)) + 1

    def to_vector(self):
        """The sums and the row count as one flat float64 array."""
        if any(sums is None for sums in self._sums()):
            raise ValueError(
                "This accumulator has seen no chunk, so the length of its vector "
                "(which depends on the number of classes) is unknown; an empty "
                "state's vector is np.zeros(vector_size(n_classes))."
            )
        return np.concatenate(
            [np.ravel(s) for s in self._sums()] + [[float(self.n_samples)]]
        )

    def from_vector(self, vector, n_classes):
        """A fresh state like this one holding the sums of ``vector``.

        ``vector`` is a sum of :meth:`to_vector` outputs of states like this
        one, so adding vectors is merging states.
        """
        vector = np.asarray(vector, dtype=np.float64)
        if not np.all(np.isfinite(vector)):
            raise ValueError(
                "vector holds NaN or infinity: sums of sample weights beyond "
                "float64's range (divide every sample_weight by a common "
                "constant) or not a sum of to_vector outputs."
            )
        state = copy.deepcopy(self)
        state.n_classes = int(n_classes)
        state._allocate(state.n_classes)
        start = 0
        for target in state._sums():
            target[...] = np.reshape(vector[start : start + target.size], target.shape)
            start += target.size
        state.n_samples = int(round(float(vector[start])))
        return state


# --- binned metrics -------------------------------------------------------------


class BinnedCalibrationAccumulator(_Accumulator):
    """Mergeable per-bin sums of the binned calibration metrics.

    Holds, for every bin, the total sample weight, the weighted sum of the
    scores and the weighted number of hits: the top-label confidence
    ``max_k q_ik`` against correctness, or (``multiclass="classwise"``) each
    column ``q_ik`` against ``1[y_i = k]``. These sums are all the binned
    metrics need, so the data may arrive in chunks of any size (empty ones
    too), in any order, and accumulators built on different chunks (on
    different machines) merge by adding their sums. The metric values equal
    the in-memory functions' to float64 rounding.

    Parameters
    ----------
    n_bins : int, default=15
        Number of bins.
    multiclass : {"top-label", "classwise"}, default="top-label"
        ``"top-label"`` gives :meth:`expected_calibration_error`,
        :meth:`maximum_calibration_error`, :meth:`rms_calibration_error`,
        :meth:`accuracy` and the top-label :meth:`calibration_curve`;
        ``"classwise"`` gives :meth:`classwise_calibration_error`,
        :meth:`brier_score_decomposition` and the class-wise curve.
    bin_edges : array-like of shape (n_bins + 1,) or (n_groups, n_bins + 1), \
            default=None
        Fixed bin edges from 0 to 1 (per class for ``"classwise"`` when 2-D);
        bins are ``(lo, hi]`` with 0 in the first bin. None gives the
        equal-width bins of the metrics' ``strategy="uniform"``. Equal-mass
        bins (``strategy="quantile"``) need the quantiles of all the scores:
        compute them first with :func:`equal_mass_bin_edges`, then pass them
        here.
    labels : array-like of shape (n_classes,), default=None
        The class of each probability column. Without it, the labels must be
        the column indices ``0..n_classes-1``: a chunk need not hold every
        class, so string labels cannot be sorted into columns chunk by chunk.

    Attributes
    ----------
    count : ndarray of shape (n_groups, n_bins)
        Total weight per bin (one group for top-label, one per class).
    score : ndarray of shape (n_groups, n_bins)
        Weighted sum of the scores per bin.
    hit : ndarray of shape (n_groups, n_bins)
        Weighted number of hits per bin.
    n_classes : int or None
        Number of probability columns, known after the first update.
    n_samples : int
        Number of rows added (whatever their weights).

    See Also
    --------
    ProperScoreAccumulator : The NLL and the Brier score, chunk by chunk.
    expected_calibration_error : The in-memory function.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import (
    ...     BinnedCalibrationAccumulator, expected_calibration_error)
    >>> rng = np.random.default_rng(0)
    >>> proba = rng.dirichlet(np.ones(3), size=1000)
    >>> y = rng.integers(0, 3, size=1000)
    >>> first = BinnedCalibrationAccumulator().update(y[:300], proba[:300])
    >>> second = BinnedCalibrationAccumulator().update(y[300:], proba[300:])
    >>> merged = first + second
    >>> bool(np.isclose(merged.expected_calibration_error(),
    ...                 expected_calibration_error(y, proba), rtol=1e-12))
    True
    """

    def __init__(
        self, *, n_bins=15, multiclass="top-label", bin_edges=None, labels=None
    ):
        super().__init__(labels=labels)
        if multiclass not in _MULTICLASS:
            raise ValueError(
                f"multiclass must be 'top-label' or 'classwise', got {multiclass!r}."
            )
        self.multiclass = multiclass
        if bin_edges is not None:
            bin_edges = np.asarray(bin_edges, dtype=np.float64)
            if bin_edges.ndim not in (1, 2) or bin_edges.shape[-1] < 2:
                raise ValueError(
                    "bin_edges must have shape (n_bins + 1,) or "
                    f"(n_groups, n_bins + 1); got {bin_edges.shape}."
                )
            if np.any(np.diff(bin_edges, axis=-1) < 0) or not np.all(
                np.isfinite(bin_edges)
            ):
                raise ValueError("bin_edges must be finite and non-decreasing.")
            if np.any(bin_edges[..., 0] != 0.0) or np.any(bin_edges[..., -1] != 1.0):
                # Scores outside the edges were counted in the first or last
                # bin, whose reported edges then did not hold them.
                raise ValueError(
                    "bin_edges must start at 0 and end at 1 (in every row), so "
                    "that the bins hold every probability; got first edges "
                    f"{np.unique(bin_edges[..., 0]).tolist()} and last edges "
                    f"{np.unique(bin_edges[..., -1]).tolist()}."
                )
            n_bins = bin_edges.shape[-1] - 1
        if isinstance(n_bins, bool) or not isinstance(n_bins, Integral) or n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}.")
        check_grid_entries("n_bins", n_bins, int(n_bins) + 1)
        self.n_bins = int(n_bins)
        self.bin_edges = bin_edges
        self.count = self.score = self.hit = None

    def _n_groups(self, n_classes):
        return 1 if self.multiclass == "top-label" else n_classes

    def _empty_sums(self, n_classes):
        shape = (self._n_groups(n_classes), self.n_bins)
        check_grid_entries("n_bins", self.n_bins, shape[0] * (self.n_bins + 1))
        return [np.zeros(shape) for _ in range(3)]

    def _allocate(self, n_classes):
        self.count, self.score, self.hit = self._empty_sums(n_classes)
        edges = self.bin_edges
        if (
            edges is not None
            and edges.ndim == 2
            and edges.shape[0] != self._n_groups(n_classes)
        ):
            raise ValueError(
                f"bin_edges has {edges.shape[0]} rows but there are "
                f"{self._n_groups(n_classes)} groups of bins."
            )

    def _sums(self):
        return [self.count, self.score, self.hit]

    def _check_compatible(self, other):
        same_edges = (self.bin_edges is None and other.bin_edges is None) or (
            self.bin_edges is not None
            and other.bin_edges is not None
            and np.array_equal(self.bin_edges, other.bin_edges)
        )
        if not (
            self.n_bins == other.n_bins
            and self.multiclass == other.multiclass
            and same_edges
            and self._labels_equal(other)
        ):
            raise ValueError(
                "Cannot merge accumulators with different n_bins, multiclass, "
                "bin_edges or labels."
            )

    def _add(self, y_codes, y_prob, weights):
        if self.bin_edges is None:
            add_uniform_statistics(
                self.count.ravel(),
                self.score.ravel(),
                self.hit.ravel(),
                y_codes,
                y_prob,
                weights,
                self.n_bins,
                self.multiclass,
            )
        else:
            add_edge_statistics(
                self.count,
                self.score,
                self.hit,
                y_codes,
                y_prob,
                weights,
                self._group_edges()[:, 1:-1],
                self.multiclass,
            )

    def _group_edges(self):
        n_groups = self.count.shape[0]
        if self.bin_edges is None:
            edges = np.linspace(0.0, 1.0, self.n_bins + 1)
        else:
            edges = self.bin_edges
        return np.broadcast_to(edges, (n_groups, self.n_bins + 1))

    @classmethod
    def _from_statistics(cls, stats, *, multiclass, strategy, n_classes, n_samples):
        """The state of an in-memory binning (first weighting of ``stats``).

        Equal-mass edges, found from all the scores at once, become the
        state's fixed ``bin_edges``.
        """
        edges = None if strategy == "uniform" else stats.edges[0]
        state = cls(
            n_bins=stats.count.shape[-1], multiclass=multiclass, bin_edges=edges
        )
        state.n_classes, state.n_samples = n_classes, n_samples
        state.count = np.asarray(stats.count[0], dtype=np.float64)
        state.score = np.asarray(stats.score[0], dtype=np.float64)
        state.hit = np.asarray(stats.hit[0], dtype=np.float64)
        return state

    def statistics(self):
        """The sums as a ``BinStatistics`` (one weighting), with the bin edges."""
        if self.count is None or not self.count.sum(axis=-1).min() > 0:
            raise ValueError(
                "The accumulator holds no sample with a positive weight; add "
                "chunks with update() before reading a metric."
            )
        edges = np.array(self._group_edges())
        return BinStatistics(
            self.count[None], self.score[None], self.hit[None], edges[None]
        )

    def _require(self, multiclass, name):
        if self.multiclass != multiclass:
            raise ValueError(
                f"{name} needs an accumulator with multiclass={multiclass!r}; this "
                f"one is {self.multiclass!r}."
            )

    def _value(self, reduction):
        return float(REDUCTIONS[reduction](self.statistics()).mean(axis=-1)[0])

    def expected_calibration_error(self):
        """Top-label ECE of the accumulated samples.

        Returns
        -------
        ece : float
            As :func:`~sklearn_calib.metrics.expected_calibration_error`.
        """
        self._require("top-label", "expected_calibration_error")
        return self._value("ece")

    def maximum_calibration_error(self):
        """Top-label MCE: the largest gap over non-empty bins.

        Returns
        -------
        mce : float
            As :func:`~sklearn_calib.metrics.maximum_calibration_error`.
        """
        self._require("top-label", "maximum_calibration_error")
        return self._value("mce")

    def rms_calibration_error(self):
        """Top-label root-mean-square calibration error.

        Returns
        -------
        rmsce : float
            As :func:`~sklearn_calib.metrics.rms_calibration_error`.
        """
        self._require("top-label", "rms_calibration_error")
        return self._value("rms")

    def accuracy(self):
        """Weighted fraction of samples whose most probable class is the true one.

        Returns
        -------
        accuracy : float
            The hits over the total weight of the top-label bins.
        """
        self._require("top-label", "accuracy")
        stats = self.statistics()
        return float(stats.hit.sum() / stats.count.sum())

    def classwise_calibration_error(self):
        """Class-wise ECE: the mean of the per-class ECEs.

        Returns
        -------
        cwece : float
            As :func:`~sklearn_calib.metrics.classwise_calibration_error`.
        """
        self._require("classwise", "classwise_calibration_error")
        return self._value("ece")

    def brier_score_decomposition(self):
        """Murphy's decomposition of the Brier score on the class-wise bins.

        Returns
        -------
        decomposition : BrierDecomposition
            As :func:`~sklearn_calib.metrics.brier_score_decomposition`.
        """
        self._require("classwise", "brier_score_decomposition")
        return brier_decomposition_from_statistics(self.statistics())

    def calibration_curve(self):
        """Per-bin accuracy, mean score and weight: the reliability diagram.

        Returns
        -------
        curve : CalibrationCurve
            As :func:`~sklearn_calib.metrics.calibration_curve` with this
            accumulator's ``multiclass``.
        """
        return curve_from_statistics(self.statistics(), self.multiclass)

    def result(self):
        """Every metric of this family, by name.

        Returns
        -------
        values : dict
            Top-label: ``expected_calibration_error``,
            ``maximum_calibration_error``, ``rms_calibration_error``,
            ``accuracy`` and ``calibration_curve``. Class-wise:
            ``classwise_calibration_error``, ``brier_score_decomposition``
            and ``calibration_curve``.
        """
        if self.multiclass == "top-label":
            names = (
                "expected_calibration_error",
                "maximum_calibration_error",
                "rms_calibration_error",
                "accuracy",
            )
        else:
            names = ("classwise_calibration_error", "brier_score_decomposition")
        values = {name: getattr(self, name)() for name in names}
        values["calibration_curve"] = self.calibration_curve()
        return values

    def __repr__(self):
        return (
            f"{type(self).__name__}(n_bins={self.n_bins}, "
            f"multiclass={self.multiclass!r}, n_samples={self.n_samples})"
        )


# --- proper scores ----------------------------------------------------------------


class ProperScoreAccumulator(_Accumulator):
    """Mergeable sums of the proper scores: the NLL and the Brier score.

    Holds the total weight and the weighted sums of the per-sample losses
    ``-log q_{i,y_i}`` (clipped as :func:`~sklearn_calib.metrics.log_loss`
    clips) and ``sum_k (q_ik - 1[y_i = k])^2``, so chunks of any size add up
    and accumulators merge by adding their sums.

    Parameters
    ----------
    scores : tuple of {"log_loss", "brier_score"}, default=("log_loss", "brier_score")
        The scores to accumulate; leaving one out saves its per-sample pass.
    labels : array-like of shape (n_classes,), default=None
        The class of each probability column (see
        :class:`BinnedCalibrationAccumulator`).

    Attributes
    ----------
    weight : float
        Total sample weight.
    log_loss_sum : float
        Weighted sum of the per-sample negative log-likelihoods.
    brier_sum : float
        Weighted sum of the per-sample Brier losses.
    n_classes : int or None
        Number of probability columns, known after the first update.
    n_samples : int
        Number of rows added.

    See Also
    --------
    BinnedCalibrationAccumulator : The binned metrics, chunk by chunk.
    log_loss, brier_score : The in-memory functions.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import ProperScoreAccumulator, log_loss
    >>> rng = np.random.default_rng(0)
    >>> proba = rng.dirichlet(np.ones(3), size=1000)
    >>> y = rng.integers(0, 3, size=1000)
    >>> state = ProperScoreAccumulator()
    >>> for start in range(0, 1000, 128):
    ...     _ = state.update(y[start:start + 128], proba[start:start + 128])
    >>> bool(np.isclose(state.log_loss(), log_loss(y, proba), rtol=1e-12))
    True
    """

    def __init__(self, *, scores=PROPER_SCORES, labels=None):
        super().__init__(labels=labels)
        scores = (scores,) if isinstance(scores, str) else tuple(scores)
        unknown = [s for s in scores if s not in PROPER_SCORES]
        if unknown or not scores:
            raise ValueError(
                f"scores must name some of {PROPER_SCORES}; got {scores!r}."
            )
        self.scores = scores
        self._state = np.zeros(3)

    @property
    def weight(self):
        return float(self._state[0])

    @property
    def log_loss_sum(self):
        return float(self._state[1])

    @property
    def brier_sum(self):
        return float(self._state[2])

    def _empty_sums(self, n_classes):
        return [np.zeros(3)]

    def _allocate(self, n_classes):
        pass

    def _sums(self):
        return [self._state]

    def _check_compatible(self, other):
        if set(self.scores) != set(other.scores) or not self._labels_equal(other):
            raise ValueError(
                "Cannot merge accumulators with different scores or labels."
            )

    def _add(self, y_codes, y_prob, weights):
        # The same per-sample losses as the in-memory functions; a sum over
        # samples (numpy's pairwise sum, or a dot product with the weights).
        def total(losses):
            return losses.sum() if weights is None else weights @ losses

        self._state[0] += y_prob.shape[0] if weights is None else weights.sum()
        if "log_loss" in self.scores:
            self._state[1] += total(log_losses(y_codes, y_prob))
        if "brier_score" in self.scores:
            self._state[2] += total(brier_losses(y_codes, y_prob))

    def _mean(self, index, name):
        if name not in self.scores:
            raise ValueError(f"This accumulator was built without {name!r} in scores.")
        if not self._state[0] > 0:
            raise ValueError(
                "The accumulator holds no sample with a positive weight; add "
                "chunks with update() before reading a score."
            )
        return float(self._state[index] / self._state[0])

    def log_loss(self):
        """Weighted mean negative log-likelihood of the true classes.

        Returns
        -------
        nll : float
            As :func:`~sklearn_calib.metrics.log_loss`.
        """
        return self._mean(1, "log_loss")

    def brier_score(self):
        """Weighted mean multiclass Brier score.

        Returns
        -------
        brier : float
            As :func:`~sklearn_calib.metrics.brier_score`.
        """
        return self._mean(2, "brier_score")

    def result(self):
        """Every accumulated score, by name.

        Returns
        -------
        values : dict
            ``{"log_loss": ..., "brier_score": ...}`` for the chosen scores.
        """
        return {name: getattr(self, name)() for name in self.scores}

    def __repr__(self):
        return (
            f"{type(self).__name__}(scores={self.scores!r}, n_samples={self.n_samples})"
        )
