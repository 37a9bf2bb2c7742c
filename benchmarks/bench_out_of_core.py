"""Fits from arrays on disk: anonymous memory, time, and passes over the file.

Writes float32 logits (10 or more classes, over-confident by 2.5) and int64
labels as ``.npy`` files, opens them with ``np.load(..., mmap_mode="r")``
and fits each calibrator from the memmaps. Reported per fit: the growth of
the process's anonymous memory (``RssAnon`` from ``/proc/self/status``,
sampled every 5 ms during the fit; the file-backed pages of a memmap are the
page cache's, not the library's), the fit time, the passes it made over the
data (full reductions over every chunk, counted on the chunk source) and, for
scale, the time of one plain pass over the same files (the sum of every
chunk, numpy) measured in the same run. The files are deleted at the end.

Run ``python benchmarks/bench_out_of_core.py --rows 20000000 --classes 10
[--methods temperature,vector,platt,histogram,smart] [--dir /tmp]``.
"""

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def rss_anon_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


class PeakAnon:
    """Peak RssAnon growth (MB) over a block, sampled in a thread."""

    def __enter__(self):
        self.base = rss_anon_mb()
        self.peak = self.base
        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, rss_anon_mb())
                time.sleep(0.005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon_mb())
        self.growth = self.peak - self.base


def write_data(directory, n_rows, n_classes, seed=0, block=1_000_000):
    """Over-confident float32 logits and int64 labels, written block by block."""
    rng = np.random.default_rng(seed)
    x_path, y_path = directory / "logits.npy", directory / "labels.npy"
    X = np.lib.format.open_memmap(
        x_path, mode="w+", dtype=np.float32, shape=(n_rows, n_classes)
    )
    y = np.lib.format.open_memmap(y_path, mode="w+", dtype=np.int64, shape=(n_rows,))
    block = max(1, min(block, 50_000_000 // n_classes))
    for start in range(0, n_rows, block):
        stop = min(start + block, n_rows)
        true = rng.standard_normal((stop - start, n_classes), dtype=np.float32)
        label = rng.integers(0, n_classes, stop - start)
        true[np.arange(stop - start), label] += 3.0
        # the favoured class 70 % of the time, else a class at random
        keep = rng.random(stop - start) < 0.7
        y[start:stop] = np.where(keep, label, rng.integers(0, n_classes, stop - start))
        X[start:stop] = 2.5 * true
    X.flush()
    y.flush()
    del X, y
    return x_path, y_path


def binary_labels(directory, y, block=10_000_000):
    """``y == 0`` as an int64 memmap (written once, block by block)."""
    path = directory / "binary_labels.npy"
    if not path.exists():
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=y.shape)
        for start in range(0, y.shape[0], block):
            out[start : start + block] = y[start : start + block] == 0
        out.flush()
        del out
    return np.load(path, mmap_mode="r")


def plain_pass_seconds(X, y, chunk_rows):
    """One numpy pass over the files: the sum of every chunk."""
    start = time.perf_counter()
    total = 0.0
    for row in range(0, X.shape[0], chunk_rows):
        total += float(np.add.reduce(X[row : row + chunk_rows], axis=None))
        total += float(y[row : row + chunk_rows].sum())
    return time.perf_counter() - start


def count_passes():
    """Wrap the chunk sources' full reductions with a counter."""
    from sklearn_calib._chunks import sources as _chunks

    counter = {"passes": 0}
    for cls in (_chunks.DaskSource, _chunks.SequentialSource):
        original = cls.reduce

        def reduce(self, *args, _original=original, **kwargs):
            counter["passes"] += 1
            return _original(self, *args, **kwargs)

        cls.reduce = reduce
    return counter


def make(method):
    from sklearn_calib import (
        SMART,
        HistogramBinning,
        PlattScaling,
        TemperatureScaling,
        VectorScaling,
    )

    return {
        "temperature": lambda: TemperatureScaling(device="cpu"),
        "vector": lambda: VectorScaling(device="cpu"),
        "platt": lambda: PlattScaling(device="cpu"),
        "histogram": lambda: HistogramBinning(),
        "smart": lambda: SMART(device="cpu", random_state=0),
    }[method]()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--methods", default="temperature,vector,platt,histogram,smart")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--keep", action="store_true", help="keep the files")
    args = parser.parse_args()

    import sklearn_calib
    from sklearn_calib._chunks.sources import _has_dask, default_chunk_rows

    directory = Path(tempfile.mkdtemp(prefix="bench-ooc-", dir=args.dir))
    try:
        start = time.perf_counter()
        x_path, y_path = write_data(directory, args.rows, args.classes)
        size_gb = (os.path.getsize(x_path) + os.path.getsize(y_path)) / 1e9
        print(
            f"data: {args.rows:,} x {args.classes} float32 + int64 labels, "
            f"{size_gb:.2f} GB, written in {time.perf_counter() - start:.1f} s "
            f"(sklearn_calib {sklearn_calib.__version__}, "
            f"dask {'yes' if _has_dask() else 'no'})"
        )
        X = np.load(x_path, mmap_mode="r")
        y = np.load(y_path, mmap_mode="r")
        chunk_rows = default_chunk_rows(args.classes, 4)
        one_pass = plain_pass_seconds(X, y, chunk_rows)
        print(f"one numpy pass over the files: {one_pass:.2f} s")
        counter = count_passes()
        print("| method | RssAnon growth (MB) | fit (s) | passes | fit / numpy pass |")
        print("|---|---|---|---|---|")
        for method in args.methods.split(","):
            estimator = make(method)
            if method == "platt":
                # binary: the first two logit columns, class 0 against the rest
                Xm, ym = X[:, :2], binary_labels(directory, y)
            else:
                Xm, ym = X, y
            counter["passes"] = 0
            with PeakAnon() as peak:
                start = time.perf_counter()
                estimator.fit(Xm, ym)
                seconds = time.perf_counter() - start
            print(
                f"| {method} | {peak.growth:,.0f} | {seconds:.1f} | "
                f"{counter['passes']} | {seconds / one_pass:.1f} |",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
