"""The first pass of a chunked fit: validation, labels, weights, encoding.

Every chunked fit starts with one pass over the chunks that checks each chunk
with the in-memory rules (:func:`sklearn_calib.utils._validation.check_chunk`)
and collects what the fits need before their own passes: the labels, the
number of rows, the width and dtype of the logits, the class weights and the
weights of the rows where each class is open (not masked). The result, a
:class:`ScannedChunks`, then feeds each calibrator's own chunked fit encoded
chunks ``(logits, codes, weights)``: float logits of shape (n, n_classes) (a
binary score column expanded), column indices of the labels and float64
weights.

Nothing here sets an attribute of an estimator: the calibrator reads the
classes from the scan and stores its own fitted state.
"""

import functools
import operator

import numpy as np
from sklearn.utils.multiclass import type_of_target

from .._torch._threads import limit_torch_threads, task_thread_limit
from ..utils._fitted_state import excerpt
from ..utils._validation import (
    check_chunk,
    check_label_types,
    mask_of,
    resolve_classes,
    weight_scale,
)


def _scan_chunk(X, y, w):
    X, y, w = check_chunk(X, y, w)
    # The sums are kept in a unit (a power of two near the chunk's largest
    # weight, exact) so that huge weights cannot overflow them; merged
    # scans are brought to the larger unit.
    unit = 1.0
    if w is not None:
        unit = weight_scale(w)
        w = w / unit
    labels, inverse = _distinct_labels(y)
    label_weight = np.bincount(
        inverse.ravel(), weights=w, minlength=labels.shape[0]
    ).astype(np.float64)
    square = float(X.shape[0]) if w is None else float(w @ w)
    # Masked (-inf) entries: the weight of the rows where each class is open
    # (the binning methods fit a class on those rows), and per label the
    # weight of the rows without any masked entry (Platt's counts).
    weights = np.ones(X.shape[0]) if w is None else w
    n_classes = 2 if X.shape[1] == 1 else X.shape[1]
    mask = mask_of(X)
    if mask is None:
        open_weight = np.full(n_classes, weights.sum())
        open_label_weight = label_weight.copy()
    else:
        if X.shape[1] == 1:
            # One score column s stands for (0, s): s = -inf masks class 1.
            mask = np.hstack([np.zeros_like(mask), mask])
        open_weight = weights @ ~mask
        open_rows = ~mask.any(axis=1)
        open_label_weight = np.bincount(
            inverse.ravel()[open_rows],
            weights=weights[open_rows],
            minlength=labels.shape[0],
        ).astype(np.float64)
    return {
        "unit": unit,
        "n_chunks": 1,
        "n_samples": X.shape[0],
        "n_cols": X.shape[1],
        "dtypes": {X.dtype.str},
        "labels": labels,
        "label_weight": label_weight,
        "open_label_weight": open_label_weight,
        "open_weight": open_weight,
        "weight_squares": square,
    }


def _merge_scans(a, b):
    if a["n_cols"] != b["n_cols"] and a["n_samples"] and b["n_samples"]:
        raise ValueError(
            f"The chunks have different numbers of logit columns: {a['n_cols']} "
            f"and {b['n_cols']}."
        )
    labels = _merged_labels(a["labels"], b["labels"])
    unit = max(a["unit"], b["unit"])
    # Powers of two at most 1: rescaling to the larger unit is exact.
    fa, fb = a["unit"] / unit, b["unit"] / unit
    weight = np.zeros(labels.shape[0])
    open_label_weight = np.zeros(labels.shape[0])
    for part, factor in ((a, fa), (b, fb)):
        where = np.searchsorted(labels, part["labels"])
        weight[where] += factor * part["label_weight"]
        open_label_weight[where] += factor * part["open_label_weight"]
    # An empty chunk may have any width: its (zero) open weights are dropped.
    if not b["n_samples"]:
        open_weight = fa * a["open_weight"]
    elif not a["n_samples"]:
        open_weight = fb * b["open_weight"]
    else:
        open_weight = fa * a["open_weight"] + fb * b["open_weight"]
    return {
        "unit": unit,
        "n_chunks": a["n_chunks"] + b["n_chunks"],
        "n_samples": a["n_samples"] + b["n_samples"],
        "n_cols": a["n_cols"] if a["n_samples"] else b["n_cols"],
        "dtypes": a["dtypes"] | b["dtypes"],
        "labels": labels,
        "label_weight": weight,
        "open_label_weight": open_label_weight,
        "open_weight": open_weight,
        "weight_squares": fa**2 * a["weight_squares"] + fb**2 * b["weight_squares"],
    }


def _distinct_labels(y):
    """``np.unique(y, return_inverse=True)``, refusing labels of mixed types."""
    check_label_types(y)
    return np.unique(y, return_inverse=True)


def _merged_labels(a, b):
    """The sorted union of two chunks' labels, which must be of one kind."""
    kinds = {_label_kind(a), _label_kind(b)} - {None}
    if len(kinds) > 1:
        raise ValueError(
            "The chunks' labels mix numbers and strings (for example "
            f"{excerpt(a, 3)} and {excerpt(b, 3)}): the same class written as 1 "
            "and '1' would be two classes. Give every chunk labels of one type."
        )
    return np.union1d(a, b)


def _label_kind(labels):
    if labels.size == 0:
        return None
    if labels.dtype.kind in "US" or (
        labels.dtype == object and isinstance(labels[0], str)
    ):
        return "str"
    return "number"


class ScannedChunks:
    """A validated chunk source and what the first pass learnt about it.

    Parameters
    ----------
    source : DaskSource or SequentialSource
        From :func:`sklearn_calib._chunks.sources.as_chunk_source`.
    classes : array-like or None, default=None
        The estimator's ``classes`` parameter: the label of each logit column
        where the labels cannot say it.
    sample_rows : callable or None, default=None
        ``sample_rows(n_samples)``: sorted rows to gather as :attr:`sample`,
        read in the first pass when the number of rows is known before
        reading (dask arrays, files), else in a pass of their own.

    Attributes
    ----------
    classes : ndarray
        The label of each logit column (what the fit stores as ``classes_``).
    n_cols : int
        The width of the logits (what the fit stores as ``n_features_in_``).
    """

    def __init__(self, source, *, classes=None, sample_rows=None):
        self.sample = None
        raw = None
        if sample_rows is not None and source.n_samples is not None:
            scan, raw = source.reduce(
                _scan_chunk, _merge_scans, gather=sample_rows(source.n_samples)
            )
        else:
            scan = source.reduce(_scan_chunk, _merge_scans)
        if scan["n_samples"] == 0:
            raise ValueError(
                "Found array with 0 sample(s) while a minimum of 1 is required."
            )
        target_type = type_of_target(scan["labels"])
        if target_type not in ("binary", "multiclass"):
            raise ValueError(
                f"Unknown label type: {target_type}. Calibrators need class labels."
            )
        self.source = source
        self.n_chunks = int(scan["n_chunks"])
        self.n_samples = int(scan["n_samples"])
        self.n_cols = int(scan["n_cols"])
        # Mixed dtypes across chunks compute in float64, as np.concatenate would.
        dtypes = {np.dtype(d) for d in scan["dtypes"]}
        self.dtype = (
            np.dtype(np.float32)
            if dtypes == {np.dtype(np.float32)}
            else (np.dtype(np.float64))
        )
        # classes= states the label of each column (in column order, not
        # necessarily sorted) where the labels cannot say it.
        self.classes, _ = resolve_classes(scan["labels"], self.n_cols, classes)
        self.label_codes = LabelCodes(self.classes)
        self.n_classes = 2 if self.n_cols == 1 else self.n_cols
        # Every weight sum below is in this unit (see _scan_chunk), and the
        # encoded chunks' weights are divided by it too.
        self.weight_unit = float(scan["unit"])
        self.total_weight = float(scan["label_weight"].sum())
        if not self.total_weight > 0:
            raise ValueError("sample_weight is zero for every sample; nothing to fit.")
        # Weight of each class, in the order of classes.
        class_weight = np.zeros(self.classes.shape[0])
        where = self.label_codes(scan["labels"])
        class_weight[where] = scan["label_weight"]
        self.class_weight = class_weight
        # Weight of each class over the rows without a masked entry, and of
        # the rows where each class is open (see _scan_chunk).
        open_class_weight = np.zeros(self.classes.shape[0])
        open_class_weight[where] = scan["open_label_weight"]
        self.open_class_weight = open_class_weight
        self.open_weight = np.asarray(scan["open_weight"], dtype=np.float64)
        self.weight_squares = float(scan["weight_squares"])
        self.weighted = source.weighted
        if sample_rows is not None:
            if raw is None:
                raw = source.gather(sample_rows(self.n_samples))
            self.sample = self.encode(*raw)

    def reduce(self, func, combine=None):
        """Reduce ``func(logits, codes, weights)`` over validated, encoded chunks.

        Each pass also counts its rows and weights: data that changed since
        the first pass (a chunk dropped, rows or weights edited) is refused
        instead of fitted.
        """
        task = functools.partial(
            _counted_call,
            func=func,
            label_codes=self.label_codes,
            dtype=self.dtype,
            unit=self.weight_unit,
        )
        combine = functools.partial(
            _counted_combine, combine=operator.add if combine is None else combine
        )
        value, n_samples, total = self.source.reduce(task, combine)
        self.check_pass(n_samples, total)
        return value

    def check_pass(self, n_samples, total_weight):
        """Refuse a pass whose rows or total weight differ from the first pass."""
        if n_samples != self.n_samples or not np.isclose(
            total_weight, self.total_weight, rtol=1e-9, atol=0.0
        ):
            raise ValueError(
                f"The chunks changed between two passes over the data: the first "
                f"pass read {self.n_samples:,} rows of total weight "
                f"{self.total_weight * self.weight_unit:.17g}, a later one "
                f"{n_samples:,} rows of total weight "
                f"{total_weight * self.weight_unit:.17g}. A chunked fit reads the "
                "data several times; give a re-iterable that yields the same "
                "chunks each time."
            )

    def encode(self, X, y, w):
        """``(logits, codes, weights)`` of one raw chunk."""
        return encode_chunk(X, y, w, self.label_codes, self.dtype, self.weight_unit)

    def gather(self, rows):
        """The encoded rows of the sorted global indices ``rows``."""
        return self.encode(*self.source.gather(rows))

    def chunks(self):
        """Every encoded chunk once, in order, read in this process."""
        source = self.source
        if _has_dask_blocks(source):
            for index in range(source.n_chunks):
                yield self._dask_block(index)
        else:
            yield from self._checked_pass()

    @property
    def shuffles_chunks(self):
        """Whether :meth:`shuffled_chunks` draws a new order each epoch (dask)."""
        return _has_dask_blocks(self.source)

    def shuffled_chunks(self, rng):
        """Encoded chunks without end, shuffled each epoch where the source allows.

        A dask source is read block by block in the order of
        ``rng.permutation`` (a ``numpy.random.Generator``); an iterable in its
        own order.
        """
        source = self.source
        while True:
            if _has_dask_blocks(source):
                for index in rng.permutation(source.n_chunks):
                    yield self._dask_block(index)
            else:
                yield from self._checked_pass()

    def _checked_pass(self):
        """Every encoded chunk of the source's own iteration, once, in its order.

        The rows and total weight read are checked against the first pass
        (:meth:`check_pass`) once the iteration ends.
        """
        n_samples, total = 0, 0.0
        for chunk in self.source.chunks():
            encoded = self.encode(*chunk)
            n_samples += encoded[0].shape[0]
            total += float(encoded[2].sum())
            yield encoded
        self.check_pass(n_samples, total)

    def _dask_block(self, index):
        import dask

        source = self.source
        parts = [source.X.blocks[index], source.y.blocks[index]]
        if source.sample_weight is not None:
            parts.append(source.sample_weight.blocks[index])
        values = dask.compute(*parts)
        return self.encode(*values, *([None] * (3 - len(values))))


def _has_dask_blocks(source):
    return hasattr(source, "X") and hasattr(source.X, "blocks")


class LabelCodes:
    """Labels to column indices, for classes in column order (sorted or not)."""

    def __init__(self, classes):
        self.order = np.argsort(classes, kind="stable")
        self.sorted = np.asarray(classes)[self.order]

    def __call__(self, labels):
        labels = np.asarray(labels)
        try:
            where = np.searchsorted(self.sorted, labels)
            where = np.minimum(where, self.sorted.shape[0] - 1)
            known = np.asarray(self.sorted[where] == labels, dtype=bool)
        except (TypeError, ValueError):
            known = np.zeros(labels.shape, dtype=bool)
            where = None
        if known.shape != labels.shape or not known.all():
            unknown = labels if where is None else labels[~known]
            raise ValueError(
                f"A chunk holds labels that are not among the classes of the first "
                f"pass over the data ({excerpt(np.unique(unknown.astype(object)))}; "
                f"classes: {excerpt(self.sorted)}): the chunks changed between "
                "two passes. A chunked fit reads the data several times; give a "
                "re-iterable that yields the same chunks each time."
            )
        return self.order[where].astype(np.intp)


def encode_chunk(X, y, w, label_codes, dtype, unit=1.0):
    """``(logits, codes, weights)`` of a raw chunk (its values checked already).

    The weights are divided by ``unit``, the first pass's power of two near
    the largest weight, in which every weight sum of the scan is kept.
    """
    X, y, w = check_chunk(X, y, w, check_values=False)
    logits = X.astype(dtype, copy=False)
    if logits.shape[1] == 1:
        logits = np.hstack([np.zeros_like(logits), logits])
    codes = label_codes(y)
    weights = np.ones(X.shape[0]) / unit if w is None else w / unit
    return logits, codes, weights


def _counted_call(X, y, w, *, func, label_codes, dtype, unit):
    logits, codes, weights = encode_chunk(X, y, w, label_codes, dtype, unit)
    with limit_torch_threads(task_thread_limit()):
        value = func(logits, codes, weights)
    return value, logits.shape[0], float(weights.sum())


def _counted_combine(a, b, *, combine):
    return combine(a[0], b[0]), a[1] + b[1], a[2] + b[2]
