"""SMART by mini-batches over chunks against the full-batch fit, on real logits.

``SMART.fit_chunks`` takes one Adam step per chunk (see the user guide,
"Data larger than memory"). This script fits SMART full batch and from the
validation set split into 2 and 5 equal chunks, with the default settings,
and reports the 15-bin test ECE (in %) of each, beside temperature scaling
and the uncalibrated logits, averaged over seeds.

Run ``python benchmarks/bench_smart_chunked.py [--quick] [--out DIR]``.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)

from sklearn_calib import SMART, TemperatureScaling  # noqa: E402
from sklearn_calib.metrics import expected_calibration_error  # noqa: E402
from sklearn_calib.utils._math import softmax  # noqa: E402

SETS = [
    "c10_resnet50_cross_entropy_smart",
    "c10_densenet40_guo",
    "c100_densenetbc100_netcal",
    "c100_resnet56_chenyaofo",
]


def chunks_of(X, y, n_chunks):
    bounds = np.linspace(0, X.shape[0], n_chunks + 1).astype(int)
    return [(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    names = [s for s in SETS if s in public_sets()]
    seeds = [0] if args.quick else [0, 1, 2]
    if args.quick:
        names = names[:1]
    records, rows = [], []
    for name in names:
        data = load_set(name)
        X, y = data["logits_val"], data["y_val"]
        X_test, y_test = data["logits_test"], data["y_test"]

        def ece(proba, y_test=y_test):
            return 100 * expected_calibration_error(y_test, proba)

        raw = ece(softmax(X_test.copy()))
        ts = ece(TemperatureScaling(device="cpu").fit(X, y).predict_proba(X_test))
        record = {"set": name, "raw": raw, "temperature": ts}
        for label, n_chunks in (("full batch", 1), ("2 chunks", 2), ("5 chunks", 5)):
            values, seconds = [], []
            for seed in seeds:
                smart = SMART(device="cpu", random_state=seed)
                start = time.perf_counter()
                smart.fit_chunks(chunks_of(X, y, n_chunks))
                seconds.append(time.perf_counter() - start)
                values.append(ece(smart.predict_proba(X_test)))
            record[label] = {
                "ece_mean": float(np.mean(values)),
                "ece_std": float(np.std(values)),
                "seconds": float(np.mean(seconds)),
            }
            print(name, label, record[label], flush=True)
        records.append(record)
        rows.append(
            [
                name,
                f"{raw:.2f}",
                f"{ts:.2f}",
                *(
                    f"{record[k]['ece_mean']:.2f} ± {record[k]['ece_std']:.2f}"
                    for k in ("full batch", "2 chunks", "5 chunks")
                ),
            ]
        )
    table = markdown_table(
        [
            "set (val 5000 rows)",
            "raw",
            "TS",
            "SMART full batch",
            "SMART 2 chunks",
            "SMART 5 chunks",
        ],
        rows,
    )
    payload = {"machine": machine_info(), "seeds": seeds, "results": records}
    write_results("bench_smart_chunked", payload, table, args.out)


if __name__ == "__main__":
    main()
