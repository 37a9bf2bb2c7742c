"""How calibrated is a map on new rows of its own distribution, and on test?

For each public set and method, two ECE-15 figures, each beside its sampling
floor (``bench_quality.ece_floor``: the ECE that perfect calibration would
show on the same rows):

- ``val, held out``: the method refitted on 4/5 of the val split and scored
  on the fifth it did not see, over the 5 folds of ``cv_splits(5)`` (the
  library's shuffled folds), the held-out predictions pooled: calibration on
  new rows of the calibration set's own distribution;
- ``test``: the method fitted on the whole val split and scored on the test
  split, as ``bench_quality.py`` does.

A method whose held-out ECE sits at its floor cannot be told from perfectly
calibrated on the distribution it was fitted on; what its test ECE adds
beyond its test floor comes from the test split differing from the val split
(by design on the label-shift set), which no map fitted on the val split can
see. Issue 26 asks for a test ECE of at most 0.9 times the lower of SMART's
and MarginTemperatureScaling's. Run ``python benchmarks/bench_val_test_gap.py
[--sets FRAGMENTS] [--only NAMES] [--out DIR]``.
"""

import argparse
import sys
import time
import warnings
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
from bench_quality import _selected, ece_floor  # noqa: E402


def methods():
    from sklearn_calib import (
        SMART,
        CalibratorSelector,
        MarginTemperatureScaling,
        TemperatureScaling,
    )

    return {
        "TemperatureScaling": lambda: TemperatureScaling(),
        "CalibratorSelector": lambda: CalibratorSelector(),
        "SMART": lambda: SMART(random_state=0),
        "MarginTemperatureScaling": lambda: MarginTemperatureScaling(),
    }


def _ece(y, proba, classes):
    from sklearn_calib.metrics import expected_calibration_error

    return 100 * expected_calibration_error(y, proba, n_bins=15, labels=classes)


def evaluate_set(name, chosen):
    from sklearn_calib._meta.cross_validation import cv_splits

    data = load_set(name)
    X, y = data["logits_val"], data["y_val"]
    Xt, yt = data["logits_test"], data["y_test"]
    classes = np.arange(X.shape[1])
    rows = []
    for method, make in chosen.items():
        start = time.perf_counter()
        held_out = np.zeros(X.shape, dtype=np.float64)
        with warnings.catch_warnings():
            # the fits' documented warnings (small classes, bounds) say
            # nothing about this comparison
            warnings.simplefilter("ignore")
            for train, test in cv_splits(5, X, y):
                model = make().set_params(classes=classes).fit(X[train], y[train])
                held_out[test] = model.predict_proba(X[test])
            proba = make().set_params(classes=classes).fit(X, y).predict_proba(Xt)
        val_floor, test_floor = ece_floor(held_out), ece_floor(proba)
        rows.append(
            {
                "set": name,
                "method": method,
                "val held-out ECE %": _ece(y, held_out, classes),
                "val floor %": val_floor["ECE floor %"],
                "val floor sd": val_floor["floor sd"],
                "test ECE %": _ece(yt, proba, classes),
                "test floor %": test_floor["ECE floor %"],
                "test floor sd": test_floor["floor sd"],
                "seconds": time.perf_counter() - start,
            }
        )
    return rows


def _summary(rows):
    table = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]

        def mean(key, mine=mine):
            return float(np.mean([r[key] for r in mine]))

        val, val_floor = mean("val held-out ECE %"), mean("val floor %")
        test, test_floor = mean("test ECE %"), mean("test floor %")
        beyond = sum(
            r["val held-out ECE %"] > r["val floor %"] + 2 * r["val floor sd"]
            for r in mine
        )
        table.append(
            [
                method,
                len(mine),
                f"{val:.2f}",
                f"{val_floor:.2f}",
                f"{val - val_floor:+.2f}",
                f"{beyond}",
                f"{test:.2f}",
                f"{test_floor:.2f}",
                f"{test - test_floor:+.2f}",
                f"{test - val:+.2f}",
            ]
        )
    header = [
        "method",
        "sets",
        "val held-out ECE %",
        "its floor %",
        "ECE - floor",
        "sets beyond floor + 2 sd",
        "test ECE %",
        "its floor %",
        "ECE - floor",
        "test - val held-out",
    ]
    return markdown_table(header, table)


def to_markdown(rows, info):
    per_set = [
        [
            r["set"],
            r["method"],
            f"{r['val held-out ECE %']:.2f}",
            f"{r['val floor %']:.2f} ± {r['val floor sd']:.2f}",
            f"{r['test ECE %']:.2f}",
            f"{r['test floor %']:.2f} ± {r['test floor sd']:.2f}",
            f"{r['seconds']:.1f}",
        ]
        for r in rows
    ]
    header = [
        "set",
        "method",
        "val held-out ECE %",
        "floor % (mean ± sd)",
        "test ECE %",
        "floor % (mean ± sd)",
        "s (6 fits)",
    ]
    return (
        "# ECE-15 on held-out val rows and on test, each beside its sampling floor\n\n"
        f"Machine: {info['cpu_count']} cores, torch {info['torch']}. Means over the "
        "sets:\n\n" + _summary(rows) + "\n\nPer set:\n\n"
        + markdown_table(header, per_set)
        + "\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="", help="name fragments (all by default)")
    parser.add_argument("--only", default="", help="comma-separated method names")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    names = _selected(public_sets(), args.sets) if args.sets else public_sets()
    if not names:
        print("no public sets found in ../shared/data: nothing to benchmark")
        return
    chosen = methods()
    if args.only:
        wanted = args.only.split(",")
        chosen = {k: v for k, v in chosen.items() if k in wanted}
    rows = []
    for name in names:
        rows += evaluate_set(name, chosen)
        print(name, flush=True)
    info = machine_info()
    payload = {"machine": info, "rows": rows}
    write_results("bench_val_test_gap", payload, to_markdown(rows, info), args.out)


if __name__ == "__main__":
    main()
