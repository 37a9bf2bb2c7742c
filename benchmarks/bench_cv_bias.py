"""Stratified against plain folds: which tells the truth about intercept maps.

On random subsets of each val split (``--sizes``, 5 draws seeded by size and
draw), structured matrix scaling (per-class intercepts) and temperature
scaling are compared three ways, as the mean NLL difference SMS - TS:

- ``stratified CV``: 5 ``StratifiedKFold`` folds of the subset (the
  selector's former default);
- ``plain CV``: 5 ``KFold(shuffle=True, random_state=0)`` folds (its
  default since the session of 2026-12-06);
- ``rows left out``: both fitted on the whole subset, scored on the val rows
  not in it (new data from the same distribution: the truth the folds
  estimate, up to the 4/5 training size).

A negative number favours the matrix map. Run ``python
benchmarks/bench_cv_bias.py [--sets FRAGMENTS] [--sizes 300,1000] [--draws 5]
[--out DIR]``.
"""

import argparse
import sys
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

DEFAULT_SETS = "c100_,c10_lenet5"


def _nll(y, proba, classes):
    from sklearn_calib.metrics import log_loss

    return log_loss(y, proba, labels=classes)


def _difference(X, y, splits, classes):
    """Mean over the splits of NLL(SMS) - NLL(TS) on the held-out parts."""
    from sklearn_calib import StructuredMatrixScaling, TemperatureScaling

    out = []
    for train, test in splits:
        scores = []
        for model in (StructuredMatrixScaling, TemperatureScaling):
            fitted = model(device="cpu", classes=classes).fit(X[train], y[train])
            scores.append(_nll(y[test], fitted.predict_proba(X[test]), classes))
        out.append(scores[0] - scores[1])
    return float(np.mean(out))


def evaluate_set(name, sizes, draws):
    from sklearn.model_selection import KFold, StratifiedKFold

    data = load_set(name)
    X, y = data["logits_val"], data["y_val"]
    classes = np.arange(X.shape[1])
    rows = []
    for size, draw, subset in random_subsets(X.shape[0], sizes, draws):
        rest = np.setdiff1d(np.arange(X.shape[0]), subset)
        Xs, ys = X[subset], y[subset]
        with warnings.catch_warnings():
            # rare classes: fewer members than folds
            warnings.simplefilter("ignore")
            stratified = list(StratifiedKFold(5).split(Xs, ys))
            plain = list(KFold(5, shuffle=True, random_state=0).split(Xs))
            truth = _difference(
                np.concatenate([Xs, X[rest]]),
                np.concatenate([ys, y[rest]]),
                [(np.arange(size), size + np.arange(rest.shape[0]))],
                classes,
            )
            rows.append(
                {
                    "set": name,
                    "size": size,
                    "draw": draw,
                    "stratified CV": _difference(Xs, ys, stratified, classes),
                    "plain CV": _difference(Xs, ys, plain, classes),
                    "rows left out": truth,
                }
            )
    return rows


def to_markdown(rows, info):
    columns = ["stratified CV", "plain CV", "rows left out"]
    table = []
    for name in sorted({r["set"] for r in rows}):
        for size in sorted({r["size"] for r in rows if r["set"] == name}):
            mine = [r for r in rows if r["set"] == name and r["size"] == size]
            cells = [name, size]
            for column in columns:
                values = np.array([r[column] for r in mine])
                se = values.std(ddof=1) / np.sqrt(len(values))
                cells.append(f"{values.mean():+.4f} ± {se:.4f}")
            table.append(cells)
    header = ["set", "rows"] + [f"NLL SMS - TS, {c}" for c in columns]
    return (
        "# Stratified against plain folds (NLL of structured matrix scaling minus "
        "temperature scaling)\n\n"
        f"Mean ± standard error over the draws. Machine: {info['cpu_count']} "
        f"cores, torch {info['torch']}.\n\n" + markdown_table(header, table) + "\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=DEFAULT_SETS, help="name fragments")
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    names = _selected(public_sets(), args.sets)
    if not names:
        print("no public sets found in ../shared/data: nothing to benchmark")
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name in names:
        rows += evaluate_set(name, sizes, args.draws)
        print(name, flush=True)
    info = machine_info()
    payload = {"machine": info, "rows": rows}
    write_results("bench_cv_bias", payload, to_markdown(rows, info), args.out)


if __name__ == "__main__":
    main()
