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

import numpy as np
from sklearn.utils.multiclass import type_of_target

from ..utils._validation import check_chunk, mask_of, resolve_classes


def _scan_chunk(X, y, w):
    X, y, w = check_chunk(X, y, w)
    labels, inverse = np.unique(y, return_inverse=True)
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
    labels = np.union1d(a["labels"], b["labels"])
    weight = np.zeros(labels.shape[0])
    open_label_weight = np.zeros(labels.shape[0])
    for part in (a, b):
        where = np.searchsorted(labels, part["labels"])
        weight[where] += part["label_weight"]
        open_label_weight[where] += part["open_label_weight"]
    # An empty chunk may have any width: its (zero) open weights are dropped.
    if not b["n_samples"]:
        open_weight = a["open_weight"]
    elif not a["n_samples"]:
        open_weight = b["open_weight"]
    else:
        open_weight = a["open_weight"] + b["open_weight"]
    return {
        "n_chunks": a["n_chunks"] + b["n_chunks"],
        "n_samples": a["n_samples"] + b["n_samples"],
        "n_cols": a["n_cols"] if a["n_samples"] else b["n_cols"],
        "dtypes": a["dtypes"] | b["dtypes"],
        "labels": labels,
        "label_weight": weight,
        "open_label_weight": open_label_weight,
        "open_weight": open_weight,
        "weight_squares": a["weight_squares"] + b["weight_squares"],
    }


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
        """Reduce ``func(logits, codes, weights)`` over validated, encoded chunks."""
        task = functools.partial(
            _encoded_call, func=func, label_codes=self.label_codes, dtype=self.dtype
        )
        if combine is None:
            return self.source.reduce(task)
        return self.source.reduce(task, combine)

    def encode(self, X, y, w):
        """``(logits, codes, weights)`` of one raw chunk."""
        return encode_chunk(X, y, w, self.label_codes, self.dtype)

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
            for chunk in source.chunks():
                yield self.encode(*chunk)

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
                for chunk in source.chunks():
                    yield self.encode(*chunk)

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
        return self.order[np.searchsorted(self.sorted, labels)].astype(np.intp)


def encode_chunk(X, y, w, label_codes, dtype):
    """``(logits, codes, weights)`` of a raw chunk (its values checked already)."""
    X, y, w = check_chunk(X, y, w, check_values=False)
    logits = X.astype(dtype, copy=False)
    if logits.shape[1] == 1:
        logits = np.hstack([np.zeros_like(logits), logits])
    codes = label_codes(y)
    weights = np.ones(X.shape[0]) if w is None else w
    return logits, codes, weights


def _encoded_call(X, y, w, *, func, label_codes, dtype):
    return func(*encode_chunk(X, y, w, label_codes, dtype))
