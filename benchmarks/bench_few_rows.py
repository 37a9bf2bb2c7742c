"""Matrix and Dirichlet calibration on a few rows of many classes.

Issue 21 asks that DirichletCalibration converge on 200 x 100 (200 calibration
rows of a 100-class network). There most classes have 0 to 4 rows, and a class
whose own rows are near-certain has its optimum far out along the unpenalised
diagonal (W_kk in the hundreds or thousands): an ill-conditioned but finite
optimum. For each CIFAR-100 set and random draw of rows (seeded by the draw),
this fits ``DirichletCalibration`` and ``MatrixScaling`` with
``classes=np.arange(100)`` and their default parameters, and reports the
iterations, whether the fit stopped short (a ``ConvergenceWarning``), the wall
time, the largest diagonal entry and the test NLL. Run ``python
benchmarks/bench_few_rows.py [--rows 200] [--draws 4] [--sets FRAGMENTS]
[--out DIR]``.
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


def _fit(cls, X, y):
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        model = cls(classes=np.arange(X.shape[1])).fit(X, y)
        seconds = time.perf_counter() - start
    short = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return model, seconds, short


def _fit_all_once(X, y):
    from sklearn_calib import DirichletCalibration, MatrixScaling

    for cls in (DirichletCalibration, MatrixScaling):
        _fit(cls, X, y)


def evaluate_set(name, n_rows, draws):
    from sklearn_calib import DirichletCalibration, MatrixScaling
    from sklearn_calib.metrics import log_loss

    data = load_set(name)
    X, y = data["logits_val"], data["y_val"]
    rows = []
    for draw in range(draws):
        chosen = np.random.default_rng(draw).choice(len(y), n_rows, replace=False)
        for cls in (DirichletCalibration, MatrixScaling):
            model, seconds, short = _fit(cls, X[chosen], y[chosen])
            proba = model.predict_proba(data["logits_test"])
            rows.append(
                {
                    "set": name,
                    "draw": draw,
                    "method": cls.__name__,
                    "n_iter": int(model.n_iter_),
                    "stopped_short": short,
                    "seconds": seconds,
                    "largest_diagonal": float(np.diag(model.coef_).max()),
                    "test_nll": float(
                        log_loss(data["y_test"], proba, labels=model.classes_)
                    ),
                }
            )
            print(rows[-1], flush=True)
    return rows


def to_markdown(rows, n_rows, info):
    header = [
        "set",
        "draw",
        "method",
        "iterations",
        "stopped short",
        "wall s",
        "largest W_kk",
        "test NLL",
    ]
    table = [
        [
            r["set"],
            r["draw"],
            r["method"],
            r["n_iter"],
            "yes" if r["stopped_short"] else "no",
            f"{r['seconds']:.2f}",
            f"{r['largest_diagonal']:.0f}",
            f"{r['test_nll']:.4f}",
        ]
        for r in rows
    ]
    return (
        f"# Matrix and Dirichlet calibration on {n_rows} rows of 100 classes\n\n"
        f"torch {info['torch']}, {info['cpu_count']} CPUs, "
        f"{info['torch_threads']} torch threads.\n\n" + markdown_table(header, table)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--draws", type=int, default=4)
    parser.add_argument("--sets", default="c100_", help="name fragments")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    fragments = args.sets.split(",")
    names = [n for n in public_sets() if any(f in n for f in fragments)]
    if not names:
        print("no matching public sets in ../shared/data: nothing to benchmark")
        return
    # The first fits of a process pay torch's start-up: not the solver's.
    warm = load_set(names[0])
    _fit_all_once(warm["logits_val"][: args.rows], warm["y_val"][: args.rows])
    rows = []
    for name in names:
        rows += evaluate_set(name, args.rows, args.draws)
    info = machine_info()
    payload = {"machine": info, "n_rows": args.rows, "rows": rows}
    write_results(
        "bench_few_rows", payload, to_markdown(rows, args.rows, info), args.out
    )


if __name__ == "__main__":
    main()
