"""Metrics of data in chunks: the accumulators reduced over a dask graph or a loop."""

import copy
from numbers import Integral

import numpy as np

from .._chunks.quantiles import (
    EqualMassSelection,
    digit_bits_for,
    equal_mass_targets,
)
from .._chunks.sources import as_chunk_source
from ..utils._validation import check_grid_entries
from ._accumulators import (
    BinnedCalibrationAccumulator,
    ProperScoreAccumulator,
)
from ._bin_statistics import top_label
from ._report import DEFAULT_REPORT_METRICS, REPORT_METRICS

# Report columns computed from chunks, and the accumulator each one reads.
CHUNKED_METRICS = {
    "ece": ("top", "expected_calibration_error"),
    "mce": ("top", "maximum_calibration_error"),
    "rms_ce": ("top", "rms_calibration_error"),
    "accuracy": ("top", "accuracy"),
    "adaptive_ece": ("adaptive", "expected_calibration_error"),
    "classwise_ece": ("classwise", "classwise_calibration_error"),
    "nll": ("proper", "log_loss"),
    "brier": ("proper", "brier_score"),
}


def _chunk_probabilities(state, X, y, w, from_logits):
    """Validate one chunk once; its codes, probabilities and weights."""
    if from_logits:
        return state._check_logits_chunk(y, X, w, input_name="X", y_name="y")
    return state._check_chunk(y, X, w)


class _ChunkScorer:
    """Updates copies of template accumulators with one chunk; returns their sums.

    A plain picklable callable, so that dask can ship it to other processes.
    """

    def __init__(self, templates, from_logits):
        self.templates = templates
        self.from_logits = from_logits

    def __call__(self, X, y, w):
        states = [copy.deepcopy(t) for t in self.templates]
        codes, proba, weights = _chunk_probabilities(
            states[0], X, y, w, self.from_logits
        )
        for state in states:
            state._update_validated(codes, proba, weights)
        return np.concatenate([state.to_vector() for state in states])


def reduce_accumulators(source, templates, n_classes, *, from_logits):
    """Run ``templates`` (unfitted accumulators) over every chunk; merged states."""
    vector = source.reduce(_ChunkScorer(templates, from_logits))
    states, start = [], 0
    for template in templates:
        size = template.vector_size(n_classes)
        states.append(template.from_vector(vector[start : start + size], n_classes))
        start += size
    return states


class _SelectionPass:
    """One radix-selection pass over a chunk: the digit histograms."""

    def __init__(self, selection, template, multiclass, from_logits):
        self.selection = selection
        self.template = template
        self.multiclass = multiclass
        self.from_logits = from_logits

    def __call__(self, X, y, w):
        state = copy.deepcopy(self.template)
        codes, proba, weights = _chunk_probabilities(state, X, y, w, self.from_logits)
        if self.multiclass == "top-label":
            groups = [top_label(proba, codes)[0]]
        else:
            groups = [proba[:, k] for k in range(proba.shape[1])]
        return self.selection.pass_histograms(groups, weights).ravel()


def _key_dtype(source, from_logits):
    """Bits of the scores: float32 data selects on 32-bit keys (fewer passes)."""
    dtype = getattr(source, "dtype", None)
    if dtype is not None and np.dtype(dtype) == np.float32:
        return np.uint32
    return np.uint64


def select_equal_mass_edges(
    source,
    n_bins,
    multiclass,
    n_classes,
    *,
    labels,
    from_logits,
    total,
    n_samples,
    shrink=0.0,
):
    """Exact equal-mass edges, (n_groups, n_bins + 1), by passes over ``source``."""
    n_groups = 1 if multiclass == "top-label" else n_classes
    check_grid_entries("n_bins", n_bins, n_groups * (n_bins + 1))
    targets = equal_mass_targets(
        total, n_bins, weighted=source.weighted, n_samples=n_samples, shrink=shrink
    )
    targets = np.broadcast_to(targets, (n_groups, n_bins - 1))
    if n_bins == 1:
        return np.tile([0.0, 1.0], (n_groups, 1))
    selection = EqualMassSelection(
        targets,
        _key_dtype(source, from_logits),
        digit_bits_for(targets.size),
    )
    template = BinnedCalibrationAccumulator(multiclass=multiclass, labels=labels)
    while not selection.done:
        _, bits = selection.digit_range()
        hist = source.reduce(
            _SelectionPass(copy.deepcopy(selection), template, multiclass, from_logits)
        )
        selection.advance(hist.reshape(n_groups, n_bins - 1, 1 << bits))
    return selection.edges()


def _n_columns(source):
    n_cols = source.n_cols if source.n_cols is not None else source.peek_width()
    return 2 if n_cols == 1 else int(n_cols)


def _check_n_bins(n_bins):
    if isinstance(n_bins, bool) or not isinstance(n_bins, Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}.")
    check_grid_entries("n_bins", n_bins, n_bins + 1)


def equal_mass_bin_edges(
    X,
    y=None,
    *,
    n_bins=15,
    multiclass="top-label",
    sample_weight=None,
    labels=None,
    from_logits=True,
):
    """Exact equal-mass bin edges of data in chunks, in a few passes.

    The edges of ``strategy="quantile"`` (the adaptive ECE): inner edge ``b``
    is the smallest score whose cumulative weight reaches ``b / n_bins`` of
    the total (without weights, the ``ceil(b N / n_bins)``-th smallest score),
    exactly as the in-memory metrics place them. Quantiles are not sums, so
    one pass cannot find them; a radix selection on the bits of the scores
    fixes 4 to 16 bits of every edge per pass (two to four passes for float32
    top-label scores, more for float64 or many classes), each pass a sum of
    small histograms over the chunks, after one pass for the total weight.
    With weights that are not integers, a cumulative weight that equals a
    quantile target to within float64 rounding can move an edge to the
    neighbouring score.

    Parameters
    ----------
    X : dask array, zarr array, memmap or array, or iterable of chunks
        Logits (or, with ``from_logits=False``, probabilities) of shape
        (n_samples, n_classes); with ``y=None``, a re-iterable of
        ``(X, y)`` or ``(X, y, sample_weight)`` chunks.
    y : array-like or dask array of shape (n_samples,), default=None
        True labels.
    n_bins : int, default=15
        Number of bins.
    multiclass : {"top-label", "classwise"}, default="top-label"
        Edges of the top-label confidence, or of each class's column.
    sample_weight : array-like or dask array of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column (needed unless the labels are the column
        indices).
    from_logits : bool, default=True
        Whether ``X`` holds logits (scored through a softmax) or
        probabilities.

    Returns
    -------
    bin_edges : ndarray of shape (n_bins + 1,) or (n_classes, n_bins + 1)
        From 0 to 1; pass them as ``bin_edges`` to
        :class:`BinnedCalibrationAccumulator`.

    See Also
    --------
    adaptive_calibration_error : The in-memory metric on these bins.
    chunked_calibration_report : Computes the adaptive ECE of chunks.
    """
    _check_n_bins(n_bins)
    if multiclass not in ("top-label", "classwise"):
        raise ValueError(
            f"multiclass must be 'top-label' or 'classwise', got {multiclass!r}."
        )
    source = as_chunk_source(X, y, sample_weight)
    n_classes = _n_columns(source)
    (counter,) = reduce_accumulators(
        source,
        [ProperScoreAccumulator(scores=("log_loss",), labels=labels)],
        n_classes,
        from_logits=from_logits,
    )
    edges = select_equal_mass_edges(
        source,
        n_bins,
        multiclass,
        n_classes,
        labels=labels,
        from_logits=from_logits,
        total=counter.weight,
        n_samples=counter.n_samples,
    )
    return edges[0] if multiclass == "top-label" else edges


def chunked_calibration_report(
    X,
    y=None,
    *,
    metrics=None,
    n_bins=15,
    sample_weight=None,
    labels=None,
    from_logits=True,
):
    """Calibration metrics of data in chunks, in bounded memory.

    The columns of :func:`calibration_report`, computed from mergeable
    accumulators reduced over the chunks: with a dask array, as one dask
    graph (threads, or a ``dask.distributed`` cluster when a client is
    active); with an iterable of chunks, one chunk after the other. Memory
    is bounded by the chunk size. Every value equals the in-memory metric on
    the concatenated data to float64 rounding, the adaptive ECE included (its
    equal-mass edges are selected exactly, in a few extra passes; see
    :func:`equal_mass_bin_edges`).

    Parameters
    ----------
    X : dask array, zarr array, memmap or array, or iterable of chunks
        Logits (or, with ``from_logits=False``, probabilities) of shape
        (n_samples, n_classes); with ``y=None``, a re-iterable of ``(X, y)``
        or ``(X, y, sample_weight)`` chunks (a list, a callable returning a
        new iterator, or :func:`sklearn_calib.chunked.open_chunks`).
    y : array-like or dask array of shape (n_samples,), default=None
        True labels.
    metrics : sequence of str, default=None
        Columns, from ``"ece"``, ``"adaptive_ece"``, ``"classwise_ece"``,
        ``"mce"``, ``"rms_ce"``, ``"nll"``, ``"brier"`` and ``"accuracy"``.
        None means the command line report's ``("ece", "adaptive_ece",
        "classwise_ece", "nll", "brier", "accuracy")``. The smooth ECE is not
        available: its kernel smoothing is not a sum over bins.
    n_bins : int, default=15
        Number of bins of the binned metrics.
    sample_weight : array-like or dask array of shape (n_samples,), default=None
        Non-negative weights (with chunks: the third entry of each chunk).
    labels : array-like of shape (n_classes,), default=None
        The class of each column. Needed unless the labels are the column
        indices ``0..n_classes-1``.
    from_logits : bool, default=True
        Whether ``X`` holds logits (scored through a softmax, chunk by chunk)
        or probabilities.

    Returns
    -------
    report : dict
        ``{metric: value}`` in the order of ``metrics``.

    See Also
    --------
    calibration_report : The in-memory table.
    BinnedCalibrationAccumulator, ProperScoreAccumulator : The states reduced.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import chunked_calibration_report
    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(size=(1000, 3)) * 3
    >>> y = rng.integers(0, 3, size=1000)
    >>> chunks = [(logits[i:i + 256], y[i:i + 256]) for i in range(0, 1000, 256)]
    >>> report = chunked_calibration_report(chunks, metrics=["ece", "nll"])
    >>> sorted(report)
    ['ece', 'nll']
    """
    if metrics is None:
        metrics = DEFAULT_REPORT_METRICS
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise ValueError("metrics is empty; name at least one metric.")
    for name in metrics:
        if name not in CHUNKED_METRICS:
            known = sorted(CHUNKED_METRICS)
            why = (
                " (its kernel smoothing is not a sum over bins, so chunks cannot "
                "give it)"
                if name in REPORT_METRICS
                else ""
            )
            raise ValueError(
                f"Metric {name!r} is not available on chunks{why}; choose from {known}."
            )
    _check_n_bins(n_bins)
    source = as_chunk_source(X, y, sample_weight)
    n_classes = _n_columns(source)
    families = {CHUNKED_METRICS[name][0] for name in metrics}
    templates = {
        "top": BinnedCalibrationAccumulator(n_bins=n_bins, labels=labels),
        "classwise": BinnedCalibrationAccumulator(
            n_bins=n_bins, multiclass="classwise", labels=labels
        ),
        "proper": ProperScoreAccumulator(labels=labels),
    }
    # The proper-score state also counts rows and weight, which the
    # equal-mass targets need.
    needed = [
        k
        for k in templates
        if k in families or (k == "proper" and "adaptive" in families)
    ]
    states = dict(
        zip(
            needed,
            reduce_accumulators(
                source,
                [templates[k] for k in needed],
                n_classes,
                from_logits=from_logits,
            ),
            strict=True,
        )
    )
    if "adaptive" in families:
        counter = states["proper"]
        edges = select_equal_mass_edges(
            source,
            n_bins,
            "top-label",
            n_classes,
            labels=labels,
            from_logits=from_logits,
            total=counter.weight,
            n_samples=counter.n_samples,
        )
        (states["adaptive"],) = reduce_accumulators(
            source,
            [BinnedCalibrationAccumulator(bin_edges=edges[0], labels=labels)],
            n_classes,
            from_logits=from_logits,
        )
    return {
        name: float(
            getattr(states[CHUNKED_METRICS[name][0]], CHUNKED_METRICS[name][1])()
        )
        for name in metrics
    }
