"""Peak memory and time of predict_proba on 1,000,000 x 1000 float32 logits.

Issue #7 asks that ``predict_proba`` on 1M x 1000 float32 logits use no more
than about three times the size of its output. For every multiclass
calibrator of the registry: fit on 5000 x 1000 synthetic logits (few solver
iterations: only the prediction is measured), then call ``predict_proba`` on
the large array and record the peak of the memory allocated during the call
(``tracemalloc``: prediction runs in numpy, which reports its buffers to it),
as a multiple of the output's size, and the wall time.

Run ``python benchmarks/bench_memory.py [--quick] [--out DIR]``; ``--quick``
uses 100,000 rows.
"""

import argparse
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, markdown_table, write_results  # noqa: E402

from sklearn_calib.utils._testing import make_logits  # noqa: E402
from sklearn_calib.utils.discovery import all_calibrators  # noqa: E402

N_CLASSES = 1000
# Enough solver steps for a fitted state of the right shape; the fit's quality
# does not change how much memory prediction needs.
FIT_PARAMS = {
    "MatrixScaling": {"max_iter": 10},
    "DirichletCalibration": {"max_iter": 10},
    "VectorScaling": {"max_iter": 20},
    "SMART": {"max_iter": 50, "random_state": 0},
}


def measure(cls, fit_data, big):
    from sklearn.utils import get_tags

    calibrator = cls(**FIT_PARAMS.get(cls.__name__, {}))
    if not get_tags(calibrator).classifier_tags.multi_class:
        return None
    if "device" in calibrator.get_params():
        calibrator.set_params(device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # capped iterations warn by design
        calibrator.fit(*fit_data)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = time.perf_counter()
        proba = calibrator.predict_proba(big)
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    record = {
        "calibrator": cls.__name__,
        "seconds": seconds,
        "peak_bytes": peak,
        "output_bytes": proba.nbytes,
        "ratio": peak / proba.nbytes,
        "finite": bool(np.isfinite(proba).all()),
        "max_row_sum_error": float(
            np.abs(proba.sum(axis=1, dtype=np.float64) - 1).max()
        ),
    }
    del proba
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows")
    parser.add_argument("--out", default=None, help="results folder")
    args = parser.parse_args(argv)

    n_rows = 100_000 if args.quick else 1_000_000
    logits, y = make_logits(
        n_samples=5000, n_classes=N_CLASSES, seed=0, dtype=np.float32
    )
    rng = np.random.default_rng(1)
    big = rng.standard_normal((n_rows, N_CLASSES), dtype=np.float32)
    big *= 3.0
    records = []
    for name, cls in all_calibrators():
        print(f"{name} ...", flush=True)
        record = measure(cls, (logits, y), big)
        if record is not None:
            records.append(record)
    info = machine_info()
    rows = [
        [
            r["calibrator"],
            f"{r['peak_bytes'] / 2**30:.2f}",
            f"{r['ratio']:.2f}",
            f"{r['seconds']:.1f}",
            "yes" if r["finite"] else "NO",
            f"{r['max_row_sum_error']:.1e}",
        ]
        for r in records
    ]
    output_gib = n_rows * N_CLASSES * 4 / 2**30
    markdown = (
        "# predict_proba memory\n\n"
        f"`python benchmarks/bench_memory.py{' --quick' if args.quick else ''}`: "
        f"{n_rows:,} x {N_CLASSES} float32 logits, output {output_gib:.2f} GiB "
        f"(float32). Peak = the most memory allocated during the call, measured "
        f"with tracemalloc, input excluded. Target: at most ~3x the output. "
        f"Machine: {info['cpu_count']} cores, torch {info['torch']}.\n\n"
        + markdown_table(
            [
                "calibrator",
                "peak GiB",
                "peak / output",
                "seconds",
                "all finite",
                "max |row sum - 1|",
            ],
            rows,
        )
    )
    write_results(
        "bench_memory",
        {"machine": info, "n_rows": n_rows, "n_classes": N_CLASSES, "records": records},
        markdown,
        args.out,
    )


if __name__ == "__main__":
    main()
