"""Certified coverage of selective classification on the public sets.

Does better calibration buy coverage at the same guarantee? On each public
set the pooled val + test logits are split at random (10 splits, seeded) into
three equal parts: A fits a calibrator, B certifies the threshold, C measures
it. For each risk (2 %, 5 %, 10 %; confidence 90 %, binomial bound) the
table gives the mean accepted fraction of C and the error rate among C's
accepted samples, for:

- ``raw B``: the softmax of the logits, certified on B (fixed sequence;
  ``raw B Holm`` and ``raw B SGR``: Bonferroni-Holm over the same grid and
  Geifman and El-Yaniv's binary search);
- ``raw A+B``: the same certified on A and B (the data a calibrator would
  have used also certifies);
- ``TS``, ``VS``: :class:`TemperatureScaling` / :class:`VectorScaling` fitted
  on A, frozen, certified on B.

``viol`` is the fraction of splits where C's error rate among accepted
samples exceeds the risk (C's own sampling noise included).

Run ``python benchmarks/bench_decisions.py [--quick] [--out DIR]``.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.frozen import FrozenEstimator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)

from sklearn_calib import TemperatureScaling, VectorScaling  # noqa: E402
from sklearn_calib.selective import SelectiveClassifier  # noqa: E402

SETS = [
    "c10_densenet40_guo",
    "c10_resnet56_chenyaofo",
    "c100_densenetbc100_netcal",
    "c100_resnet56_chenyaofo",
    "beans_mlp_trained_here",
    "llmub_llama2_13b_emotion",
]
QUICK_SETS = ["c10_densenet40_guo", "c100_densenetbc100_netcal"]
RISKS = (0.02, 0.05, 0.1)
MODELS = ("raw B", "raw B Holm", "raw B SGR", "raw A+B", "TS", "VS")


def _certified(calibrator, X, y, risk, n_classes, error_control="fixed_sequence"):
    kwargs = {} if calibrator is not None else {"classes": np.arange(n_classes)}
    clf = SelectiveClassifier(
        calibrator,
        risk=risk,
        confidence_level=0.9,
        error_control=error_control,
        **kwargs,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # none certified: coverage 0
        return clf.fit(X, y)


def run(names, n_splits):
    rows, records = [], []
    for name in names:
        data = load_set(name)
        X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(np.float64)
        y = np.concatenate([data["y_val"], data["y_test"]])
        n_classes = X.shape[1]
        rng = np.random.default_rng(0)
        results = {(m, r): [] for m in MODELS for r in RISKS}
        for _ in range(n_splits):
            a, b, c = np.array_split(rng.permutation(len(y)), 3)
            with warnings.catch_warnings():
                # vector scaling warns about classes without a finite optimum
                warnings.simplefilter("ignore", UserWarning)
                calibrators = {
                    "TS": TemperatureScaling(device="cpu").fit(X[a], y[a]),
                    "VS": VectorScaling(device="cpu").fit(X[a], y[a]),
                }
            for risk in RISKS:
                fitted = {
                    "raw B": _certified(None, X[b], y[b], risk, n_classes),
                    "raw B Holm": _certified(
                        None, X[b], y[b], risk, n_classes, "bonferroni_holm"
                    ),
                    "raw B SGR": _certified(None, X[b], y[b], risk, n_classes, "sgr"),
                    "raw A+B": _certified(
                        None, X[np.r_[a, b]], y[np.r_[a, b]], risk, n_classes
                    ),
                }
                for key, cal in calibrators.items():
                    fitted[key] = _certified(
                        FrozenEstimator(cal), X[b], y[b], risk, n_classes
                    )
                for model, clf in fitted.items():
                    accepted = clf.accept(X[c])
                    wrong = clf.predict(X[c])[accepted] != y[c][accepted]
                    results[(model, risk)].append(
                        (accepted.mean(), wrong.mean() if accepted.any() else 0.0)
                    )
        for risk in RISKS:
            row = [name, f"{100 * risk:g}"]
            for model in MODELS:
                values = np.array(results[(model, risk)])
                coverage, errors = values[:, 0], values[:, 1]
                row.append(
                    f"{100 * coverage.mean():.1f} / {100 * errors.mean():.2f} / "
                    f"{np.mean(errors > risk):.1f}"
                )
                records.append(
                    {
                        "set": name,
                        "risk": risk,
                        "model": model,
                        "coverage": float(coverage.mean()),
                        "risk_on_c": float(errors.mean()),
                        "violations": float(np.mean(errors > risk)),
                    }
                )
            rows.append(row)
            print(" | ".join(row), flush=True)
    header = ["set", "risk %"] + [f"{m}: cov % / err % / viol" for m in MODELS]
    return header, rows, records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    available = set(public_sets())
    names = [n for n in (QUICK_SETS if args.quick else SETS) if n in available]
    n_splits = 3 if args.quick else 10
    header, rows, records = run(names, n_splits)
    command = "python benchmarks/bench_decisions.py" + (
        " --quick" if args.quick else ""
    )
    markdown = (
        f"Certified selective classification, {n_splits} random A/B/C splits "
        "(confidence 90 %, binomial bound); each cell: mean "
        "accepted % of C / mean error % among accepted / fraction of splits "
        f"over the risk. `{command}`\n\n" + markdown_table(header, rows)
    )
    write_results(
        "bench_decisions",
        {"machine": machine_info(), "n_splits": n_splits, "results": records},
        markdown,
        args.out,
    )


if __name__ == "__main__":
    main()
