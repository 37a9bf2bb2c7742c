"""Small calibration sets: each method against temperature scaling, paired.

For every public real-logit set and every size in ``--sizes`` (100, 300 and
1,000 rows by default) smaller than its val split, ``--draws`` random subsets
of the val rows (without replacement, seeded by size and draw) calibrate each
method; all are scored on the whole test split (ECE-15 in %, NLL). Each
method's difference to temperature scaling fitted on the same rows is paired
by draw; a set counts as worse (better) beyond noise where the mean
difference over the draws exceeds (falls below) twice its standard error,
``std(d, ddof=1) / sqrt(draws)``. The table gives, per size, the mean over
the sets of each method's metric and of its paired difference, and the
number of sets worse or better beyond noise.

Run ``python benchmarks/bench_small_n.py [--sizes 100,300,1000] [--draws 5]
[--sets FRAGMENTS] [--out DIR]``.
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
    random_subsets,
    write_results,
)
from bench_quality import _selected  # noqa: E402

REFERENCE = "TemperatureScaling"


def methods():
    """name -> factory(classes) of the calibrators compared (CPU, seeded)."""
    from sklearn_calib import (
        CalibratorSelector,
        MarginTemperatureScaling,
        MatrixScaling,
        TemperatureScaling,
    )

    def former_margin(classes):
        base = CalibratorSelector([TemperatureScaling(), MatrixScaling()])
        return MarginTemperatureScaling(base, alpha=1e-2, device="cpu", classes=classes)

    return {
        REFERENCE: lambda classes: TemperatureScaling(device="cpu", classes=classes),
        "MarginTemperatureScaling": lambda classes: MarginTemperatureScaling(
            device="cpu", classes=classes
        ),
        # the former default (before issue 26); slow on 100 classes (its
        # MatrixScaling on every fold): select it with --only former
        "former default: Selector([TS, MS]), alpha=1e-2": former_margin,
        # the default without the smooth-ECE term (its NLL alone): select it
        # with --only ece_weight
        "margin temperature, ece_weight=0": lambda classes: MarginTemperatureScaling(
            ece_weight=0.0, device="cpu", classes=classes
        ),
    }


def score(y, proba):
    from sklearn_calib.metrics import expected_calibration_error, log_loss

    return {
        "ECE %": 100 * expected_calibration_error(y, proba, n_bins=15),
        "NLL": log_loss(y, proba, labels=np.arange(proba.shape[1])),
    }


def evaluate_set(name, sizes, draws, factories):
    data = load_set(name)
    X_val, y_val = data["logits_val"], data["y_val"]
    X_test = data["logits_test"].astype(np.float64)
    y_test = data["y_test"]
    classes = np.arange(X_val.shape[1])
    rows = []
    for size, draw, subset in random_subsets(X_val.shape[0], sizes, draws):
        for method, factory in factories.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                # few rows per class: fewer folds, solvers on a bound
                warnings.simplefilter("ignore")
                model = factory(classes).fit(X_val[subset], y_val[subset])
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "set": name,
                    "size": size,
                    "draw": draw,
                    "method": method,
                    "fit_seconds": seconds,
                    **score(y_test, model.predict_proba(X_test)),
                }
            )
    return rows


def paired(rows, method, size, metric):
    """Per set: (mean of method, mean difference to the reference, its SE)."""
    out = {}
    by_key = {(r["set"], r["draw"], r["method"]): r for r in rows if r["size"] == size}
    for name in sorted({r["set"] for r in rows if r["size"] == size}):
        mine, diff = [], []
        for draw in sorted({k[1] for k in by_key if k[0] == name}):
            a = by_key.get((name, draw, method))
            b = by_key.get((name, draw, REFERENCE))
            if a is None or b is None:
                continue
            mine.append(a[metric])
            diff.append(a[metric] - b[metric])
        if len(diff) >= 2:
            se = float(np.std(diff, ddof=1) / np.sqrt(len(diff)))
            out[name] = (float(np.mean(mine)), float(np.mean(diff)), se)
    return out


def summary_rows(rows, sizes, method_names):
    table = []
    for size in sizes:
        for method in method_names:
            cells = [str(size), method]
            for metric in ("ECE %", "NLL"):
                per_set = paired(rows, method, size, metric)
                if not per_set:
                    cells += ["", "", ""]
                    continue
                values = np.array(list(per_set.values()))
                worse = int(np.sum(values[:, 1] > 2 * values[:, 2]))
                better = int(np.sum(values[:, 1] < -2 * values[:, 2]))
                digits = 2 if metric == "ECE %" else 4
                cells += [
                    f"{values[:, 0].mean():.{digits}f}",
                    f"{values[:, 1].mean():+.{digits}f}",
                    f"{worse} / {better} of {len(per_set)}"
                    if method != REFERENCE
                    else "",
                ]
            table.append(cells)
    return table


def to_markdown(rows, sizes, draws, method_names, info):
    header = [
        "rows",
        "method",
        "ECE %",
        "ECE - TS",
        "ECE worse / better",
        "NLL",
        "NLL - TS",
        "NLL worse / better",
    ]
    lines = [
        "# Small calibration sets against temperature scaling\n",
        f"Random subsets of each val split ({draws} draws per size), scored on "
        "the whole test split; means over the sets where the size is below the "
        "val size. Worse / better: sets where the mean paired difference to "
        "temperature scaling (same rows) exceeds twice its standard error over "
        f"the draws. Machine: {info['cpu_count']} cores, torch {info['torch']}.\n",
        markdown_table(header, summary_rows(rows, sizes, method_names)),
    ]
    for size in sizes:
        for method in method_names:
            if method == REFERENCE:
                continue
            ece = paired(rows, method, size, "ECE %")
            nll = paired(rows, method, size, "NLL")
            if not ece:
                continue
            lines.append(f"## {method}, {size} rows: per set\n")
            table = [
                [
                    name,
                    f"{ece[name][1]:+.2f} ± {ece[name][2]:.2f}",
                    f"{nll[name][1]:+.4f} ± {nll[name][2]:.4f}",
                ]
                for name in ece
            ]
            lines.append(
                markdown_table(["set", "ECE - TS (± SE)", "NLL - TS (± SE)"], table)
            )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--sets", default=None, help="comma-separated fragments")
    parser.add_argument(
        "--only",
        default="MarginTemperatureScaling",
        help="method name fragments (temperature scaling always runs)",
    )
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument("--name", default="bench_small_n", help="result file stem")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = _selected(public_sets(), args.sets)
    if not names:
        print("no public sets found in ../shared/data: nothing to benchmark")
        return
    factories = methods()
    keep = set(_selected(factories, args.only)) | {REFERENCE}
    factories = {k: v for k, v in factories.items() if k in keep}
    rows = []
    for name in names:
        start = time.perf_counter()
        rows += evaluate_set(name, sizes, args.draws, factories)
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    info = machine_info()
    payload = {"machine": info, "sizes": sizes, "draws": args.draws, "rows": rows}
    write_results(
        args.name,
        payload,
        to_markdown(rows, sizes, args.draws, list(factories), info),
        args.out,
    )


if __name__ == "__main__":
    main()
