"""Fits from memmaps read the file chunk by chunk, never as a whole (issue 21).

dask 2026.8's ``from_array`` copies any array with a ``copy`` method, memmaps
included, which read the whole file into anonymous memory. A memmap that
records its copies and the rows of every read shows that no fit copies the
array or reads more than a chunk at a time, with dask and without it.
"""

import numpy as np
import pytest

from sklearn_calib import (
    SMART,
    HistogramBinning,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib._chunks.sources import as_chunk_source, default_chunk_rows
from sklearn_calib.utils._row_reader import RowReader


class RecordingMemmap(np.memmap):
    """A memmap that records its copies and the rows of each read."""

    log = None

    def copy(self, *args, **kwargs):
        self.log["copies"] += 1
        return super().copy(*args, **kwargs)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(out, np.ndarray) and out.ndim >= 1:
            self.log["max_rows"] = max(self.log["max_rows"], out.shape[0])
        return out


def _recording(path, dtype, shape, log):
    array = np.memmap(path, dtype=dtype, mode="r", shape=shape).view(RecordingMemmap)
    array.log = log
    return array


# Two chunks of 10 float32 columns (one of 2 columns, for Platt scaling).
N_ROWS = 600_000
N_CLASSES = 10


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("memmaps")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(N_ROWS, N_CLASSES)).astype(np.float32)
    labels = rng.integers(0, N_CLASSES, N_ROWS)
    logits[np.arange(N_ROWS), labels] += 2.0
    labels[::7] = rng.integers(0, N_CLASSES, labels[::7].shape[0])
    paths = directory / "logits.bin", directory / "labels.bin", directory / "bin.bin"
    logits.tofile(paths[0])
    labels.astype(np.int64).tofile(paths[1])
    (labels == 0).astype(np.int64).tofile(paths[2])
    return paths


METHODS = {
    "temperature": lambda: TemperatureScaling(device="cpu"),
    "vector": lambda: VectorScaling(device="cpu"),
    "platt": lambda: PlattScaling(device="cpu"),
    "histogram": lambda: HistogramBinning(),
    "smart": lambda: SMART(device="cpu", max_iter=2, random_state=0),
}


# The sequential path (without dask) slices by itself; one method checks it.
@pytest.mark.parametrize(
    "method, dask",
    [(method, True) for method in sorted(METHODS)] + [("temperature", False)],
)
def test_fit_from_memmap_never_copies_or_reads_it_whole(
    files, method, dask, monkeypatch
):
    if dask:
        pytest.importorskip("dask.array")
    else:
        monkeypatch.setattr("sklearn_calib._chunks.sources._has_dask", lambda: False)
    log = {"copies": 0, "max_rows": 0}
    X = _recording(files[0], np.float32, (N_ROWS, N_CLASSES), log)
    if method == "platt":
        X = X[:, :2]
        X.log = log
        y = _recording(files[2], np.int64, (N_ROWS,), log)
    else:
        y = _recording(files[1], np.int64, (N_ROWS,), log)
    log["max_rows"] = 0
    estimator = METHODS[method]().fit(X, y)
    assert log["copies"] == 0
    # Every read is at most a chunk (the whole file, for the 10 columns).
    chunk_rows = default_chunk_rows(X.shape[1], 4)
    assert 0 < log["max_rows"] <= min(chunk_rows, N_ROWS)
    if X.shape[1] == N_CLASSES:
        assert chunk_rows < N_ROWS
    # The fit used the data: the same map as from the arrays in memory.
    if method == "temperature":
        in_memory = TemperatureScaling(device="cpu").fit(np.asarray(X), np.asarray(y))
        np.testing.assert_allclose(
            estimator.temperature_, in_memory.temperature_, rtol=1e-6
        )


def test_dask_reads_numpy_labels_by_slices():
    # In-memory labels and weights go to dask as RowReaders: no copy of them.
    da = pytest.importorskip("dask.array")
    X = da.zeros((100, 3), chunks=(30, 3), dtype=np.float32)
    y = np.arange(100) % 3
    source = as_chunk_source(X, y, np.ones(100))
    assert source.n_chunks == 4

    reader = RowReader(y)
    assert not hasattr(reader, "copy") and not hasattr(reader, "__array__")
    np.testing.assert_array_equal(reader[10:20], y[10:20])
    assert reader.shape == (100,) and reader.dtype == y.dtype and len(reader) == 100
