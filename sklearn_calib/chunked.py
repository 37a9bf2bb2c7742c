"""Reading logits that do not fit in memory: a folder of chunks or a zarr store.

:func:`open_chunks` opens, without reading them, a folder of ``.npz`` chunks,
a folder of ``.npy`` arrays (one large file per array, or numbered chunk
files), or a zarr store. The result, a :class:`ChunkedDataset`, is what the
chunked fits and metrics take: iterating over it reads one chunk at a time,
and :meth:`ChunkedDataset.to_dask` gives the same data as dask arrays whose
blocks are read by dask tasks (on threads, or on the workers of a cluster).

Nothing is unpickled: ``.npy`` files and ``.npz`` members are read by
:mod:`sklearn_calib.utils._npy_files`, which checks every header (no object
arrays, sizes that match the data) before reading. Large ``.npy`` files are read by row
ranges with ordinary file reads, not memory-mapped, so the memory of a pass
is that of a chunk.
"""

import os
import re
import threading
import uuid
from pathlib import Path

import numpy as np

from ._chunks.sources import default_chunk_rows, import_dask_array, reiterable
from .utils._npy_files import (
    npy_file_header,
    npz_keys,
    npz_member_header,
    read_npz_member,
)
from .utils._validation import computed_dtype, to_numpy

__all__ = ["ChunkedDataset", "apply_chunks", "fits_from_chunks", "open_chunks"]


class _NpyRows:
    """Rows ``start:stop`` of a C-ordered .npy file, read on demand."""

    def __init__(self, path):
        self.path = str(path)
        header = npy_file_header(path)
        self.shape, self.dtype, self.offset = header.shape, header.dtype, header.offset
        if header.fortran_order and len(self.shape) > 1:
            raise ValueError(
                f"{path}: is stored in Fortran (column-major) order, so rows cannot "
                "be read one range at a time; save it with np.save(path, "
                "np.ascontiguousarray(array))."
            )
        if not self.shape:
            raise ValueError(f"{path}: holds a scalar, not an array of rows.")
        self.row_items = int(np.prod(self.shape[1:], dtype=np.int64))

    def read(self, start, stop):
        count = (stop - start) * self.row_items
        offset = self.offset + start * self.row_items * self.dtype.itemsize
        with open(self.path, "rb") as f:
            values = np.fromfile(f, dtype=self.dtype, count=count, offset=offset)
        if values.shape[0] != count:
            raise ValueError(f"{self.path}: the file is shorter than its header says.")
        return values.reshape((stop - start,) + self.shape[1:])


class _NpzArray:
    """One array of a .npz chunk, loaded whole when asked."""

    def __init__(self, path, key):
        self.path = str(path)
        self.key = key
        header = npz_member_header(path, key)
        self.shape, self.dtype = header.shape, header.dtype

    def read(self, start, stop):
        return read_npz_member(self.path, self.key)[start:stop]


class _ZarrRows:
    def __init__(self, array):
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)

    def read(self, start, stop):
        return np.asarray(self.array[start:stop])


class _Progress:
    """Counts chunk reads (thread-safe) and reports them to a callback."""

    def __init__(self, callback, n_chunks):
        self.callback = callback
        self.n_chunks = n_chunks
        self.done = 0
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            self.done += 1
            done = self.done
        self.callback(done, self.n_chunks)

    def __getstate__(self):
        # A lock does not pickle: dask ships the dataset to worker processes.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _read_piece(piece, progress=None):
    """The (X, y, w) arrays of one chunk: ``piece`` = (readers, start, stop)."""
    readers, start, stop = piece
    values = tuple(None if r is None else r.read(start, stop) for r in readers)
    if progress is not None:
        progress()
    return values


def _read_block(reader, start, stop, progress, dtype):
    values = reader.read(start, stop).astype(dtype, copy=False)
    if progress is not None:
        progress()
    return values


class ChunkedDataset:
    """Logits, labels and optional weights stored in chunks, read on demand.

    Returned by :func:`open_chunks`. Iterating yields ``(X, y)`` (or
    ``(X, y, sample_weight)``) numpy chunks, reading one at a time, so a
    dataset can be passed to
    :meth:`~sklearn_calib.TemperatureScaling.fit_chunks` or
    :func:`~sklearn_calib.metrics.chunked_calibration_report`, which read it
    as many times as they need.

    Attributes
    ----------
    n_samples : int
        Total number of rows.
    n_cols : int
        Number of logit columns.
    dtype : numpy.dtype
        dtype of the logits.
    n_chunks : int
        Number of chunks.
    weighted : bool
        Whether the data holds sample weights.
    """

    def __init__(self, pieces, *, n_cols, dtype, description, progress=None):
        self._pieces = pieces
        self._progress = None
        if progress is not None:
            self._progress = _Progress(progress, len(pieces))
        self.n_samples = int(sum(stop - start for _, start, stop in pieces))
        self.n_cols = int(n_cols)
        # Files of different dtypes (a float32 chunk beside a float64 one) are
        # promoted to one dtype, as numpy.concatenate and to_dask do: every
        # chunk read is of this dtype, and so is what is written from them.
        self.dtype = np.result_type(
            np.dtype(dtype), *{piece[0][0].dtype for piece in pieces}
        )
        self.n_chunks = len(pieces)
        self.weighted = bool(pieces) and pieces[0][0][2] is not None
        self._description = description

    def __len__(self):
        return self.n_chunks

    def __iter__(self):
        for piece in self._pieces:
            X, y, w = _read_piece(piece, self._progress)
            X = X.astype(self.dtype, copy=False)
            if y is None:  # opened with y_key=None: logits only
                yield X
            else:
                yield (X, y) if w is None else (X, y, w)

    def __repr__(self):
        return (
            f"ChunkedDataset({self._description}: {self.n_samples:,} rows x "
            f"{self.n_cols} columns of {self.dtype}, {self.n_chunks} chunks)"
        )

    def to_dask(self):
        """The data as dask arrays, one block per chunk, read by dask tasks.

        Returns
        -------
        X : dask.array.Array of shape (n_samples, n_cols)
        y : dask.array.Array of shape (n_samples,)
        sample_weight : dask.array.Array of shape (n_samples,) or None
        """
        da = import_dask_array()
        from dask.highlevelgraph import HighLevelGraph

        arrays = []
        for index, what in enumerate(("logits", "y", "sample_weight")):
            readers = [piece[0][index] for piece in self._pieces]
            if not readers or readers[0] is None:
                arrays.append(None)
                continue
            if len({len(r.shape) for r in readers}) > 1:
                raise ValueError(
                    f"The chunks' {what} arrays have different numbers of "
                    "dimensions; save them all 1-D or all 2-D."
                )
            # Mixed dtypes are promoted, as numpy.concatenate would.
            dtype = np.result_type(*{r.dtype for r in readers})
            # One graph layer with a read task per chunk (a dask.array built
            # by concatenating a from_delayed array per chunk has a layer per
            # chunk, and every graph derived from it copies that table).
            name = f"read-{what}-{uuid.uuid4().hex}"
            tail = (0,) * (len(readers[0].shape) - 1)
            # Progress counts the reads of the logits, one per chunk.
            progress = self._progress if index == 0 else None
            layer = {
                (name, i, *tail): (_read_block, reader, start, stop, progress, dtype)
                for i, (reader, (_, start, stop)) in enumerate(
                    zip(readers, self._pieces, strict=True)
                )
            }
            chunks = (tuple(stop - start for _, start, stop in self._pieces),) + tuple(
                (n,) for n in readers[0].shape[1:]
            )
            graph = HighLevelGraph.from_collections(name, layer, dependencies=())
            arrays.append(da.Array(graph, name, chunks, dtype=dtype))
        return arrays[0], arrays[1], arrays[2]


def _is_zarr_store(path):
    return path.is_dir() and any(
        (path / name).exists() for name in ("zarr.json", ".zgroup", ".zarray")
    )


def _row_ranges(n_rows, chunk_rows):
    return [(s, min(s + chunk_rows, n_rows)) for s in range(0, n_rows, chunk_rows)]


def _check_lengths(readers, where):
    n = readers[0].shape[0]
    for reader, name in zip(readers[1:], ("y", "sample_weight"), strict=False):
        if reader is not None and reader.shape[0] != n:
            raise ValueError(
                f"{where}: {name} has {reader.shape[0]} rows but the logits have {n}."
            )
    if len(readers[0].shape) not in (1, 2):
        raise ValueError(
            f"{where}: the logits must be 1-D or 2-D; got shape {readers[0].shape}."
        )
    for reader, name in zip(readers[1:], ("y", "sample_weight"), strict=False):
        if reader is not None and len(reader.shape) != 1:
            raise ValueError(f"{where}: {name} must be 1-D; got shape {reader.shape}.")


def _width(shape):
    return 1 if len(shape) == 1 else shape[1]


def open_chunks(
    path,
    *,
    logits_key="logits",
    y_key="y",
    weight_key="sample_weight",
    chunk_rows=None,
    progress=None,
):
    """Open logits and labels stored in chunks, without reading them.

    Three layouts are recognised:

    - a **zarr store** (a folder with ``zarr.json``, ``.zgroup`` or
      ``.zarray``): a group holding the arrays ``logits_key``, ``y_key`` and
      optionally ``weight_key``, read by the store's own row chunks (or by
      ``chunk_rows``);
    - a **folder of .npz files**, each one chunk holding the same keys, read
      in the order of the file names;
    - a **folder of .npy files** named ``<logits_key>*.npy`` and
      ``<y_key>*.npy`` (and ``<weight_key>*.npy``), paired by the rest of
      their names: one large file each (``logits.npy``, ``y.npy``), read by
      ranges of ``chunk_rows`` rows, or numbered chunk files
      (``logits_000.npy``, ``y_000.npy``, ...).

    A single ``.npz`` file is one chunk. Arrays are read with
    ``allow_pickle=False``; object arrays are refused.

    Parameters
    ----------
    path : str or path-like
        The folder, zarr store or ``.npz`` file.
    logits_key : str, default="logits"
        Name of the logits array (``(n_samples, n_classes)``, or one score
        column of a binary problem).
    y_key : str or None, default="y"
        Name of the labels array. None reads the logits alone (unlabelled
        data to calibrate with :func:`apply_chunks`): iterating then yields
        the logits arrays, and no weights are read.
    weight_key : str, default="sample_weight"
        Name of the optional sample-weight array.
    chunk_rows : int, default=None
        Rows per chunk when one large array is split: by default about 16 MiB
        of logits per chunk (zarr: its own chunks).
    progress : callable, default=None
        Called as ``progress(done, n_chunks)`` after every chunk read, where
        ``done`` counts the chunks read since opening, over all passes (a fit
        reads the data a few times). With dask, it is called by the task that
        read the chunk (a thread of this process with the default scheduler).

    Returns
    -------
    dataset : ChunkedDataset
        A re-iterable of ``(X, y)`` or ``(X, y, sample_weight)`` chunks, with
        :meth:`ChunkedDataset.to_dask`.

    See Also
    --------
    sklearn_calib.metrics.chunked_calibration_report : Metrics of the chunks.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.chunked import open_chunks
    >>> rng = np.random.default_rng(0)
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for i in range(3):
    ...     y = rng.integers(0, 3, size=400)
    ...     logits = 4 * np.eye(3)[y] + rng.normal(scale=2, size=(400, 3))
    ...     np.savez(folder / f"part{i}.npz", logits=logits, y=y)
    >>> data = open_chunks(folder)
    >>> data.n_samples, data.n_chunks
    (1200, 3)
    >>> ts = TemperatureScaling(device="cpu").fit_chunks(data)
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist.")
    if chunk_rows is not None and (
        isinstance(chunk_rows, bool)
        or not isinstance(chunk_rows, int)
        or chunk_rows < 1
    ):
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
    if _is_zarr_store(path):
        dataset = _open_zarr(path, logits_key, y_key, weight_key, chunk_rows)
    else:
        if path.is_file():
            if path.suffix.lower() != ".npz":
                raise ValueError(
                    f"{path}: a single file must be a .npz chunk; pass the folder "
                    "of .npy files instead."
                )
            files = [path]
        else:
            files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".npz")
        if files:
            dataset = _open_npz(files, logits_key, y_key, weight_key, path)
        else:
            dataset = _open_npy(path, logits_key, y_key, weight_key, chunk_rows)
    if progress is not None:
        dataset._progress = _Progress(progress, dataset.n_chunks)
    return dataset


def _open_zarr(path, logits_key, y_key, weight_key, chunk_rows):
    try:
        import zarr
    except ImportError as exc:
        raise ImportError(
            f"{path} is a zarr store; reading it needs zarr (python -m pip install "
            "zarr)."
        ) from exc
    group = zarr.open_group(str(path), mode="r")
    names = set(group.array_keys())
    for key in (logits_key,) if y_key is None else (logits_key, y_key):
        if key not in names:
            raise KeyError(
                f"{path}: the zarr store has no array {key!r}; it holds "
                f"{sorted(names)}."
            )
    readers = [
        _ZarrRows(group[logits_key]),
        None if y_key is None else _ZarrRows(group[y_key]),
        _ZarrRows(group[weight_key])
        if y_key is not None and weight_key in names
        else None,
    ]
    for reader in readers:
        if reader is not None and reader.dtype.hasobject:
            raise ValueError(f"{path}: object arrays are never loaded.")
    _check_lengths(readers, path)
    rows = chunk_rows or int(group[logits_key].chunks[0])
    pieces = [(readers, a, b) for a, b in _row_ranges(readers[0].shape[0], rows)]
    return ChunkedDataset(
        pieces,
        n_cols=_width(readers[0].shape),
        dtype=readers[0].dtype,
        description=f"zarr store {path}",
    )


def _open_npz(files, logits_key, y_key, weight_key, path):
    pieces, width, dtype = [], None, None
    for file in files:
        try:
            readers = [
                _NpzArray(file, logits_key),
                None if y_key is None else _NpzArray(file, y_key),
            ]
        except KeyError as exc:
            keys = npz_keys(file)
            raise KeyError(
                f"{file}: no array {exc.args[0]!r}; it holds {keys}. Name the "
                "arrays with logits_key= and y_key=."
            ) from None
        try:
            readers.append(None if y_key is None else _NpzArray(file, weight_key))
        except KeyError:
            readers.append(None)
        _check_lengths(readers, file)
        if width is None:
            width, dtype = _width(readers[0].shape), readers[0].dtype
        elif _width(readers[0].shape) != width:
            raise ValueError(
                f"{file}: {_width(readers[0].shape)} logit columns, but the "
                f"previous chunks have {width}."
            )
        if pieces and (readers[2] is None) != (pieces[0][0][2] is None):
            raise ValueError(f"{file}: some chunks have sample weights and others not.")
        pieces.append((readers, 0, readers[0].shape[0]))
    return ChunkedDataset(
        pieces,
        n_cols=width,
        dtype=dtype,
        description=f"{len(files)} .npz files in {path}",
    )


def _npy_files(folder, key):
    pattern = re.compile(re.escape(key) + r"(.*)\.npy$", re.IGNORECASE)
    found = {}
    for file in sorted(folder.iterdir()):
        match = pattern.fullmatch(file.name)
        if match:
            found[match[1]] = file
    return found


def _open_npy(folder, logits_key, y_key, weight_key, chunk_rows):
    logits = _npy_files(folder, logits_key)
    if y_key is None:  # logits only
        if not logits:
            raise FileNotFoundError(
                f"{folder}: found no {logits_key}*.npy files, no .npz chunks and no "
                "zarr store."
            )
        labels, weights = dict.fromkeys(logits), {}
    else:
        labels = _npy_files(folder, y_key)
        weights = _npy_files(folder, weight_key)
    if not logits or not labels:
        raise FileNotFoundError(
            f"{folder}: found no {logits_key}*.npy and {y_key}*.npy files, no .npz "
            "chunks and no zarr store."
        )
    if set(logits) != set(labels):
        raise ValueError(
            f"{folder}: the {logits_key}*.npy and {y_key}*.npy files do not pair up "
            f"(suffixes {sorted(logits)} and {sorted(labels)})."
        )
    if weights and set(weights) != set(logits):
        raise ValueError(
            f"{folder}: the {weight_key}*.npy files do not pair up with the logits."
        )
    pieces, width, dtype = [], None, None
    for suffix in sorted(logits):
        readers = [
            _NpyRows(logits[suffix]),
            None if y_key is None else _NpyRows(labels[suffix]),
            _NpyRows(weights[suffix]) if weights else None,
        ]
        _check_lengths(readers, logits[suffix])
        shape = readers[0].shape
        if width is None:
            width, dtype = _width(shape), readers[0].dtype
        elif _width(shape) != width:
            raise ValueError(
                f"{logits[suffix]}: {_width(shape)} logit columns, but the previous "
                f"files have {width}."
            )
        rows = chunk_rows or default_chunk_rows(width, readers[0].dtype.itemsize)
        pieces += [(readers, a, b) for a, b in _row_ranges(shape[0], rows)]
    return ChunkedDataset(
        pieces, n_cols=width, dtype=dtype, description=f".npy files in {folder}"
    )


_APPLY_METHODS = ("predict_proba", "transform", "predict_log_proba", "predict")


def _chunk_logits(chunk):
    """The logits of a chunk given as an array or as an (X, y[, w]) tuple."""
    if isinstance(chunk, tuple | list):
        return chunk[0]
    return chunk


def _logits_dtype(X):
    """The dtype a calibrator computes a chunk of logits in (float32 or float64)."""
    return computed_dtype(getattr(to_numpy(X), "dtype", np.float64))


def _write_chunks(f, estimator, factory, method, dtype, n_samples):
    """Write ``method``'s output of every chunk to the open ``.npy`` file ``f``.

    Returns ``(rows written, whether the header was written)``.
    """
    written = 0
    header_written = False
    for chunk in factory():
        X = _chunk_logits(chunk)
        if np.shape(X)[0] == 0:
            continue
        if dtype is not None and _logits_dtype(X) != dtype:
            X = np.asarray(to_numpy(X)).astype(dtype)
        out = np.asarray(getattr(estimator, method)(X))
        if out.dtype.hasobject:
            raise TypeError(
                "The labels of this calibrator are Python objects, which an "
                ".npy file cannot hold without pickling; use predict_proba."
            )
        if not header_written:
            header = {
                "descr": np.lib.format.dtype_to_descr(out.dtype),
                "fortran_order": False,
                "shape": (n_samples,) + out.shape[1:],
            }
            np.lib.format.write_array_header_2_0(f, header)
            header_written = True
            out_dtype = out.dtype
        elif out.dtype != out_dtype:
            # The header fixed the dtype: a chunk of another one is written
            # in it only when that is exact, else the file is refused.
            if not np.can_cast(out.dtype, out_dtype, casting="safe"):
                raise TypeError(
                    f"A chunk gave {method} output of dtype {out.dtype} after "
                    f"chunks of dtype {out_dtype}, which cannot hold it "
                    "exactly; give chunks of one dtype (or one that promotes)."
                )
            out = out.astype(out_dtype)
        np.ascontiguousarray(out).tofile(f)
        written += out.shape[0]
    return written, header_written


def apply_chunks(estimator, chunks, path, *, method="predict_proba"):
    """Apply a fitted calibrator to logits in chunks, writing one ``.npy`` file.

    Each chunk is calibrated and appended to ``path`` as soon as it is read,
    so memory holds one chunk and its result, whatever the size of the data.

    Parameters
    ----------
    estimator : fitted calibrator
        Any fitted calibrator of this library.
    chunks : ChunkedDataset, re-iterable or callable
        Chunks of logits: arrays, or ``(X, y)`` / ``(X, y, sample_weight)``
        tuples (the labels are ignored), as given to
        :meth:`~sklearn_calib.TemperatureScaling.fit_chunks`. When the total
        number of rows is not known in advance (an iterable without
        ``n_samples``), the chunks are read twice: once to count them.
    path : str or path-like
        The ``.npy`` file to write (overwritten, once every chunk has been
        written: on an error an existing file is left as it was).
    method : {"predict_proba", "transform", "predict_log_proba", "predict"}, \
            default="predict_proba"
        The calibrator's method: probabilities, log-probabilities (the last
        two) or labels.

    Returns
    -------
    path : pathlib.Path
        The file written: an array of shape (n_samples, n_classes), or
        (n_samples,) for ``"predict"``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.chunked import apply_chunks
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=600)
    >>> logits = 4 * np.eye(3)[y] + rng.normal(scale=2, size=(600, 3))
    >>> chunks = [logits[:200], logits[200:]]
    >>> ts = TemperatureScaling(device="cpu").fit(logits, y)
    >>> out = apply_chunks(ts, chunks, pathlib.Path(tempfile.mkdtemp()) / "p.npy")
    >>> np.allclose(np.load(out), ts.predict_proba(logits))
    True
    """
    from .utils._compat import check_is_fitted

    if method not in _APPLY_METHODS:
        raise ValueError(f"method must be one of {_APPLY_METHODS}, got {method!r}.")
    check_is_fitted(estimator)
    factory = reiterable(chunks)
    n_samples = getattr(chunks, "n_samples", None)
    dtype = getattr(chunks, "dtype", None)
    if n_samples is None:
        # One pass for the number of rows and the dtype all chunks promote
        # to: the file's header declares both before the first row.
        n_samples, dtypes = 0, set()
        for chunk in factory():
            X = _chunk_logits(chunk)
            n_samples += np.shape(X)[0]
            if np.shape(X)[0]:
                dtypes.add(_logits_dtype(X))
        dtype = np.result_type(*dtypes) if dtypes else None
    path = Path(path)
    # Written next to ``path`` and moved over it only when complete: a chunk
    # that fails (bad logits, a calibrator error, an interruption) leaves any
    # previous file as it was and no partial one.
    # (open "x" with a unique name: the file gets the usual permissions,
    # which a mkstemp file, readable by its owner only, would not)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with open(partial, "xb") as f:
            written, header_written = _write_chunks(
                f, estimator, factory, method, dtype, n_samples
            )
        if not header_written or written != n_samples:
            raise ValueError(
                f"The chunks held {written} rows, but {n_samples} were announced; "
                "the data changed between two reads."
            )
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def fits_from_chunks(estimator):
    """Whether ``estimator`` fits from chunks in bounded memory.

    A calibrator that can is fitted by
    :meth:`~sklearn_calib.BaseCalibrator.fit_chunks` (an iterable of chunks,
    or a :class:`ChunkedDataset`) and reads a dask, zarr or memmap ``X`` given
    to ``fit`` chunk by chunk; the others raise a ``TypeError`` from
    ``fit_chunks`` and read such an ``X`` into memory in ``fit``. Today:
    TemperatureScaling, VectorScaling and PlattScaling, which reach the same
    solution as ``fit`` on the concatenated data (to the same tolerance),
    HistogramBinning, which finds the same bins, and SMART, which trains by
    mini-batches (one Adam step per chunk; with one chunk, the full-batch
    fit).

    Parameters
    ----------
    estimator : object
        A calibrator (fitted or not), or any estimator.

    Returns
    -------
    bool
        True when the estimator's class has its own chunked fit.

    Examples
    --------
    >>> from sklearn_calib import MatrixScaling, TemperatureScaling
    >>> from sklearn_calib.chunked import fits_from_chunks
    >>> fits_from_chunks(TemperatureScaling()), fits_from_chunks(MatrixScaling())
    (True, False)
    """
    return callable(getattr(estimator, "_fit_chunked", None))
