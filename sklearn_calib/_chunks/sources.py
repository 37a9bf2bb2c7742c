"""Data in chunks: dask arrays, memmaps, zarr arrays and iterables of chunks.

Fits and metrics over data larger than memory are sums over samples, so they
only need one operation from the data: apply a function to every chunk of
rows and combine the (small) results. :func:`as_chunk_source` wraps every
supported input in a source with that operation, :meth:`reduce`:

- a dask array (and a memmap or zarr array, wrapped with
  ``dask.array.from_array`` when dask is installed) becomes a dask graph: one
  task per chunk, then a tree of combine tasks (one graph layer, whose memory
  grows linearly with the number of chunks), computed by
  whatever scheduler is active (threads by default, a ``dask.distributed``
  cluster when a client exists). Nothing here schedules work itself.
- a re-iterable of ``(X, y)`` or ``(X, y, sample_weight)`` chunks (a list, a
  :class:`~sklearn_calib.chunked.ChunkedDataset`, or a callable returning a
  fresh iterator) is read chunk by chunk in this process.

dask is imported only when a dask array is given or built, so the library
imports and works without it.
"""

import functools
import operator
from collections.abc import Iterable

import numpy as np

from ..utils._compat import check_is_fitted
from ..utils._row_reader import RowReader
from ..utils._validation import check_labels_per_row, computed_dtype
from .graph import reduction_graph

# Rows per chunk when a memmap or .npy array is split: about this many bytes of
# float64 work per chunk (``default_chunk_rows``), so that the chunks in flight
# (one or two per thread) and their temporaries stay far below a gigabyte,
# while a pass over 4 GB is a few hundred tasks.
DEFAULT_CHUNK_BYTES = 2**24


def is_dask_array(obj):
    """True for a ``dask.array.Array``, without importing dask.

    Only arrays: a dask DataFrame or Series (also a dask collection) has no
    row chunks to map block by block; it is read as any array-like (numpy
    computes it), as by scikit-learn and the metrics.
    """
    return type(obj).__module__.startswith("dask.array") and hasattr(
        obj, "__dask_graph__"
    )


def is_zarr_array(obj):
    """True for a ``zarr.Array``, without importing zarr."""
    return type(obj).__module__.startswith("zarr") and hasattr(obj, "chunks")


def is_out_of_core(obj):
    """Inputs that ``fit`` reads chunk by chunk: dask, zarr and memmap arrays."""
    return is_dask_array(obj) or is_zarr_array(obj) or isinstance(obj, np.memmap)


def import_dask_array():
    """``dask.array``, or an ImportError that names the optional extra."""
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - exercised without dask
        raise ImportError(
            "This needs dask: python -m pip install 'sklearn-calib[dask]' (or "
            "'dask[array]')."
        ) from exc
    return da


def _has_dask():
    try:
        import dask.array  # noqa: F401
    except ImportError:
        return False
    return True


# Bytes that a fit's work on a chunk holds per row besides the row's logits:
# labels, weights, per-row sums, Platt's two target rows per sample. With two
# columns of float32 the logits alone would make 2-million-row chunks whose
# float64 work took 300 MB each (issue 21).
_ROW_OVERHEAD_BYTES = 64


def default_chunk_rows(n_cols, itemsize):
    """Rows per chunk: ``DEFAULT_CHUNK_BYTES`` of each row's float64 work.

    A row counts at the float64 width of its logits (the fits compute in
    float64, whatever the stored dtype) plus ``_ROW_OVERHEAD_BYTES``.
    """
    per_row = max(1, n_cols) * max(itemsize, 8) + _ROW_OVERHEAD_BYTES
    return max(1, DEFAULT_CHUNK_BYTES // per_row)


def _as_numpy_labels(y):
    if hasattr(y, "to_numpy") and not isinstance(y, np.ndarray):
        y = y.to_numpy()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    return y


class DaskSource:
    """Logits, labels and weights as dask arrays with the same row chunks."""

    def __init__(self, X, y, sample_weight=None):
        da = import_dask_array()
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError(
                f"X must be a 2-D array of logits; got {X.ndim} dimensions."
            )
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(
                "X has chunks of unknown size; call X.compute_chunk_sizes() first."
            )
        # Every row of a chunk in one block: the per-row softmax needs it.
        X = X.rechunk({1: -1})
        row_chunks = X.chunks[0]

        def align(values, name):
            if values is None:
                return None
            if not is_dask_array(values):
                if not (is_zarr_array(values) or isinstance(values, np.memmap)):
                    values = _as_numpy_labels(values)
                if not is_zarr_array(values):
                    # dask copies arrays with a copy method (memmaps too):
                    # read by slices instead (see utils/_row_reader.py).
                    values = RowReader(values)
                # name=False: no hashing of the data to name the graph; a zarr
                # or memmap array stays on disk.
                chunks = (row_chunks,) + (-1,) * (values.ndim - 1)
                values = da.from_array(values, chunks=chunks, name=False, asarray=True)
            values = check_labels_per_row(values, X.shape[0], name=name)
            return values.rechunk((row_chunks,))

        self.X = X
        self.y = align(y, "y")
        self.sample_weight = align(sample_weight, "sample_weight")
        self.n_samples = int(X.shape[0])
        self.n_cols = int(X.shape[1])
        self.dtype = np.dtype(X.dtype)
        self.n_chunks = len(row_chunks)
        self.row_chunks = row_chunks

    @property
    def weighted(self):
        return self.sample_weight is not None

    def _reduction(self, func, combine):
        from dask.core import flatten

        # The graph refers to the blocks of X, y and w by their keys, so that
        # a gather computed in the same graph reads each block once.
        arrays = [self.X, self.y]
        if self.sample_weight is not None:
            arrays.append(self.sample_weight)
        # Nested lists of keys, one per block (X has a single column block).
        columns = [list(flatten(a.__dask_keys__())) for a in arrays]
        if self.sample_weight is None:
            columns.append([None] * len(columns[0]))
        return reduction_graph(list(zip(*columns, strict=True)), func, combine, arrays)

    def reduce(self, func, combine=operator.add, *, gather=None):
        """``combine`` over ``func(X_chunk, y_chunk, w_chunk)`` of every chunk.

        One dask graph: a task per chunk and a tree of combine tasks, computed
        by the active scheduler. With ``gather`` (sorted global row indices),
        also returns those rows ``(X, y, w)``, read in the same pass.
        """
        import dask

        root = self._reduction(func, combine)
        if gather is None:
            return root.compute()
        parts = self._gather_parts(gather)
        result, *values = dask.compute(root, *parts, optimize_graph=False)
        return result, _gathered(values)

    def _gather_parts(self, rows):
        parts = [self.X[rows], self.y[rows]]
        if self.sample_weight is not None:
            parts.append(self.sample_weight[rows])
        return parts

    def gather(self, rows):
        """The rows of the sorted global indices ``rows``, as numpy arrays."""
        import dask

        return _gathered(dask.compute(*self._gather_parts(rows)))


def _gathered(values):
    return values[0], values[1], values[2] if len(values) > 2 else None


class SequentialSource:
    """Chunks read one after the other in this process.

    ``chunks_factory()`` returns a fresh iterable of ``(X, y, w)`` numpy
    chunks at every call, so the data can be read several times.
    """

    def __init__(
        self, chunks_factory, *, n_cols=None, dtype=None, n_samples=None, weighted=None
    ):
        self._factory = chunks_factory
        self.n_cols = n_cols
        self.dtype = dtype
        self.n_samples = n_samples
        self.n_chunks = None
        self._weighted = weighted

    def chunks(self):
        saw_weights = False
        for chunk in self._factory():
            X, y, w = _split_chunk(chunk)
            saw_weights = saw_weights or w is not None
            yield X, y, w
        if self._weighted is None:
            # Known after a first full pass, so asking costs no extra pass.
            self._weighted = saw_weights

    @property
    def weighted(self):
        """Whether any chunk carries weights (then all are weighted, others by 1)."""
        if self._weighted is None:
            for _ in self.chunks():
                pass
        return self._weighted

    def peek_width(self):
        """The number of logit columns, from the first chunk when not known."""
        if self.n_cols is None:
            for X, _, _ in self.chunks():
                X = np.asarray(X)
                self.n_cols = 1 if X.ndim == 1 else int(X.shape[1])
                self.dtype = X.dtype
                break
            else:
                raise ValueError("The chunks hold no data: the iterable is empty.")
        return self.n_cols

    def reduce(self, func, combine=operator.add, *, gather=None):
        result = None
        picked = _RowPicker(gather) if gather is not None else None
        for X, y, w in self.chunks():
            if picked is not None:
                picked.add(X, y, w)
            value = func(X, y, w)
            result = value if result is None else combine(result, value)
        if result is None:
            raise ValueError("The chunks hold no data: the iterable is empty.")
        return result if picked is None else (result, picked.rows())

    def gather(self, rows):
        picked = _RowPicker(rows)
        for X, y, w in self.chunks():
            picked.add(X, y, w)
        return picked.rows()


class _RowPicker:
    """Collects the rows of sorted global indices from consecutive chunks."""

    def __init__(self, rows):
        self._rows = np.asarray(rows)
        self._start = 0
        self._parts = ([], [], [])

    def add(self, X, y, w):
        n = np.shape(X)[0]
        lo, hi = np.searchsorted(self._rows, [self._start, self._start + n])
        local = self._rows[lo:hi] - self._start
        if local.size:
            self._parts[0].append(np.asarray(X)[local])
            self._parts[1].append(_as_numpy_labels(y)[local])
            self._parts[2].append(None if w is None else np.asarray(w)[local])
        self._start += n

    def rows(self):
        X, y, w = self._parts
        if not X:
            raise ValueError("None of the requested rows is in the chunks.")
        weights = None
        if any(v is not None for v in w):
            # A chunk without weights weighs its rows by 1.
            weights = np.concatenate(
                [np.ones(len(x)) if v is None else v for x, v in zip(X, w, strict=True)]
            )
        return np.concatenate(X), np.concatenate(y), weights


def _split_chunk(chunk):
    """``(X, y, sample_weight)`` of a chunk, ``sample_weight`` None if absent."""
    if isinstance(chunk, dict):
        raise TypeError(
            "A chunk must be a tuple (X, y) or (X, y, sample_weight), not a dict."
        )
    try:
        parts = tuple(chunk)
    except TypeError:
        parts = ()
    if len(parts) not in (2, 3):
        raise TypeError(
            "Each chunk must be a tuple (X, y) or (X, y, sample_weight) of arrays; "
            f"got {type(chunk).__name__}"
            + (f" of length {len(parts)}." if parts else ".")
        )
    X, y = parts[0], parts[1]
    w = parts[2] if len(parts) == 3 else None
    if is_dask_array(X):
        X, y, w = (None if v is None else np.asarray(v) for v in (X, y, w))
    return X, y, w


def reiterable(chunks):
    """A factory of fresh iterators over ``chunks``, or a TypeError."""
    if callable(chunks) and not isinstance(chunks, Iterable):
        return chunks
    if not isinstance(chunks, Iterable):
        raise TypeError(
            "chunks must be an iterable of (X, y) tuples or a callable returning "
            f"one; got {type(chunks).__name__}."
        )
    if iter(chunks) is chunks:
        raise TypeError(
            "chunks is a one-shot iterator (for example a generator), but the "
            "data is read several times (an exact fit makes a few passes). Pass a "
            "list, or a callable that returns a new iterator at each call (for "
            "example the generator function itself)."
        )
    return lambda: chunks


def _array_slices(X, y, w, chunk_rows):
    n = X.shape[0]

    def factory():
        for start in range(0, n, chunk_rows):
            stop = min(start + chunk_rows, n)
            yield (
                np.asarray(X[start:stop]),
                np.asarray(y[start:stop]),
                None if w is None else np.asarray(w[start:stop]),
            )

    return factory


def as_chunk_source(X, y=None, sample_weight=None, *, chunk_rows=None):
    """Wrap logits (and labels, weights) given in chunks into a source.

    Parameters
    ----------
    X : dask array, zarr array, numpy array or memmap, or iterable of chunks
        With ``y=None``: a re-iterable of ``(X, y)`` / ``(X, y, w)`` chunks
        (a :class:`~sklearn_calib.chunked.ChunkedDataset` reads in parallel
        through dask when dask is installed).
    y, sample_weight : array-like or dask array, default=None
    chunk_rows : int, default=None
        Rows per chunk when a numpy, memmap or zarr array is split (zarr:
        its own chunks by default).
    """
    if y is None:
        if sample_weight is not None:
            raise ValueError(
                "sample_weight is given but y is not: with chunks, pass weights "
                "inside each chunk as (X, y, sample_weight)."
            )
        if hasattr(X, "to_dask") and _has_dask():
            return DaskSource(*X.to_dask())
        source = SequentialSource(reiterable(X))
        # What a ChunkedDataset knows from its headers saves a pass.
        for attribute in ("n_cols", "dtype", "n_samples", "n_chunks"):
            if hasattr(X, attribute):
                setattr(source, attribute, getattr(X, attribute))
        if hasattr(X, "weighted"):
            source._weighted = bool(X.weighted)
        return source
    if is_dask_array(X):
        return DaskSource(X, y, sample_weight)
    if is_zarr_array(X) or isinstance(X, np.memmap) or isinstance(X, np.ndarray):
        n_cols = 1 if X.ndim == 1 else int(X.shape[1])
        if chunk_rows is None:
            if is_zarr_array(X):
                chunk_rows = int(X.chunks[0])
            else:
                chunk_rows = default_chunk_rows(n_cols, np.dtype(X.dtype).itemsize)
        if type(X) is not np.ndarray and _has_dask():
            # Arrays on disk are read by dask tasks, in parallel; an array
            # already in memory is simply sliced.
            da = import_dask_array()
            chunks = (chunk_rows,) if X.ndim == 1 else (chunk_rows, n_cols)
            # name=False: no hashing of the data to name the graph.
            # A memmap goes in as a RowReader: dask copies any array with a
            # copy method, which would read the whole file into memory.
            reader = X if is_zarr_array(X) else RowReader(X)
            dask_X = da.from_array(reader, chunks=chunks, asarray=True, name=False)
            return DaskSource(dask_X, y, sample_weight)
        y_array = y if is_zarr_array(y) else _as_numpy_labels(y)
        w_array = sample_weight
        if w_array is not None and not is_zarr_array(w_array):
            w_array = np.asarray(w_array)
        for values, name in ((y_array, "y"), (w_array, "sample_weight")):
            if values is not None and values.shape[0] != X.shape[0]:
                raise ValueError(
                    f"{name} has {values.shape[0]} entries but X has {X.shape[0]} rows."
                )
        return SequentialSource(
            _array_slices(X, y_array, w_array, chunk_rows),
            n_cols=n_cols,
            dtype=np.dtype(X.dtype),
            n_samples=int(X.shape[0]),
            weighted=sample_weight is not None,
        )
    raise TypeError(
        "X must be a dask array, a zarr array, a numpy array or memmap, or (with "
        f"y=None) an iterable of (X, y) chunks; got {type(X).__name__}."
    )


def _call_method(block, *, estimator, method):
    return getattr(estimator, method)(block)


def map_dask_method(estimator, X, method):
    """``estimator.<method>`` over the row blocks of a dask array, lazily.

    The fitted estimator travels with the graph (it is small); each block is
    an ordinary numpy call, so the result is a dask array with X's row chunks:
    probabilities or log-probabilities (n_samples, n_classes), or labels
    (n_samples,).
    """
    # Before the graph is built: an unfitted estimator has no classes_ to
    # shape it (scikit-learn's NotFittedError, as for a numpy X).
    check_is_fitted(estimator)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array of logits; got {X.ndim} dimensions.")
    n_cols = int(X.shape[1])
    expected = getattr(estimator, "n_features_in_", n_cols)
    if n_cols != expected:
        raise ValueError(
            f"X has {n_cols} features, but {type(estimator).__name__} is expecting "
            f"{expected} features as input."
        )
    X = X.rechunk({1: -1})
    func = functools.partial(_call_method, estimator=estimator, method=method)
    if method == "predict":
        classes = estimator.classes_
        return X.map_blocks(
            func,
            dtype=classes.dtype,
            chunks=(X.chunks[0],),
            drop_axis=1,
            meta=np.empty((0,), dtype=classes.dtype),
        )
    # The dtype the blocks are computed in (float16 in float32).
    dtype = computed_dtype(X.dtype)
    n_classes = len(estimator.classes_)
    return X.map_blocks(
        func,
        dtype=dtype,
        chunks=(X.chunks[0], (n_classes,)),
        meta=np.empty((0, 0), dtype=dtype),
    )
