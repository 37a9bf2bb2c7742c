"""Label-shift adaptation: the protocol of Alexandari, Kundaje and Shrikumar (2020).

On each public set, the calibrators are fitted on the validation logits (the
source). Each target set is drawn from the test logits: class proportions from
a symmetric Dirichlet(alpha), alpha in {0.1, 1, 10}, then ``n`` rows drawn with
replacement within the classes (n in {500, 2000, 10000}). Estimators of the
target priors:

- EM on BCTS, TS, VS and on the uncalibrated softmax (Saerens et al. 2002);
- BBSE with hard and soft predictions and RLLS, on BCTS probabilities.

Reported per setting (mean over draws): the MSE of the estimated importance
weights against the true ratios (the drawn target frequencies over the source
frequencies), and accuracy, NLL and 15-bin ECE of the adapted probabilities,
with the change against the unadapted BCTS model. The ranking of the paper
(EM + BCTS at least as good as BBSE and RLLS, and better than EM on
uncalibrated probabilities) is checked by the share of draws where EM + BCTS
has the lower weight MSE and a one-sided Wilcoxon signed-rank test.

The estimators run through the library's code (``LabelShiftAdapter``'s EM and
its ``_estimate`` on the calibrated test probabilities, computed once per
set), so a draw costs no calibration. EM stops at ``tol=1e-6`` or 1000
iterations.

Run ``python benchmarks/bench_label_shift.py [--quick] [--draws N] [--out DIR]``.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import wilcoxon
from sklearn.exceptions import ConvergenceWarning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_set, machine_info, markdown_table, write_results  # noqa: E402

from sklearn_calib import (  # noqa: E402
    BiasCorrectedTemperatureScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.label_shift import LabelShiftAdapter, _em_priors  # noqa: E402
from sklearn_calib.metrics import expected_calibration_error, log_loss  # noqa: E402
from sklearn_calib.utils._math import softmax  # noqa: E402

SETS = [
    "c10_densenet40_guo",
    "c10_resnet56_chenyaofo",
    "mnist_cnn_labelerrors",
    "c100_resnet56_chenyaofo",
]
ALPHAS = [0.1, 1.0, 10.0]
SIZES = [500, 2000, 10_000]
EM_TOL = 1e-6
EM_MAX_ITER = 1000
METHODS = ["EM-BCTS", "EM-TS", "EM-VS", "EM-none", "BBSE-hard", "BBSE-soft", "RLLS"]


def _blocks(proba):
    def blocks():
        yield proba, np.ones(len(proba))

    return blocks


def _adapted(proba, weights):
    out = proba * weights
    return out / out.sum(axis=1, keepdims=True)


def _scores(y, proba):
    return (
        float(np.mean(proba.argmax(axis=1) == y)),
        log_loss(y, proba, labels=np.arange(proba.shape[1])),
        expected_calibration_error(y, proba, labels=np.arange(proba.shape[1])),
    )


def run_set(name, draws, sizes, seed=0):
    data = load_set(name)
    X_s, y_s = data["logits_val"].astype(np.float64), data["y_val"]
    X_t, y_t = data["logits_test"].astype(np.float64), data["y_test"]
    k = X_s.shape[1]
    adapters = {}
    test_proba = {}
    for label, calibrator in [
        ("BCTS", BiasCorrectedTemperatureScaling(device="cpu")),
        ("TS", TemperatureScaling(device="cpu")),
        ("VS", VectorScaling(device="cpu")),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            methods = ["em"] if label != "BCTS" else ["em", "bbse-hard", "bbse-soft"]
            adapters[label] = {
                m: LabelShiftAdapter(calibrator, method=m).fit(X_s, y_s)
                for m in methods + (["rlls"] if label == "BCTS" else [])
            }
        test_proba[label] = adapters[label]["em"].calibrator_.predict_proba(X_t)
    test_proba["none"] = softmax(X_t.copy())
    source_priors = np.bincount(y_s, minlength=k) / len(y_s)
    by_class = [np.flatnonzero(y_t == c) for c in range(k)]
    present = np.array([len(rows) > 0 for rows in by_class])
    rng = np.random.default_rng(seed)
    rows_out = []
    for alpha in ALPHAS:
        for n in sizes:
            for _ in range(draws):
                proportions = rng.dirichlet(np.full(k, alpha))
                proportions = proportions * present
                proportions /= proportions.sum()
                counts = rng.multinomial(n, proportions)
                rows = np.concatenate(
                    [rng.choice(by_class[c], counts[c]) for c in range(k) if counts[c]]
                )
                y = y_t[rows]
                true_weights = (counts / n) / source_priors
                record = {"set": name, "alpha": alpha, "n": n}
                base = test_proba["BCTS"][rows]
                record["unadapted"] = _scores(y, base)
                record["unadapted-none"] = _scores(y, test_proba["none"][rows])
                for method in METHODS:
                    family, _, calib = method.partition("-")
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ConvergenceWarning)
                        if family == "EM":
                            proba = test_proba[calib][rows]
                            priors, *_ = _em_priors(
                                _blocks(proba),
                                source_priors,
                                max_iter=EM_MAX_ITER,
                                tol=EM_TOL,
                            )
                        else:
                            proba = base
                            adapter = adapters["BCTS"][method.lower()]
                            try:
                                priors, _ = adapter._estimate(_blocks(proba))
                            except ValueError:
                                priors = source_priors
                    weights = priors / source_priors
                    record[method] = (
                        float(np.mean((weights - true_weights) ** 2)),
                        *_scores(y, _adapted(proba, weights)),
                    )
                rows_out.append(record)
    return rows_out


def summarise(records):
    settings = sorted({(r["set"], r["alpha"], r["n"]) for r in records})
    table = []
    ranking = []
    for setting in settings:
        group = [r for r in records if (r["set"], r["alpha"], r["n"]) == setting]
        base = np.array([r["unadapted"] for r in group])
        mse = {m: np.array([r[m][0] for r in group]) for m in METHODS}
        for method in METHODS:
            values = np.array([r[method] for r in group])
            table.append(
                [
                    *setting,
                    method,
                    f"{values[:, 0].mean():.4g}",
                    f"{100 * (values[:, 1] - base[:, 0]).mean():+.2f}",
                    f"{(values[:, 2] - base[:, 1]).mean():+.4f}",
                    f"{100 * (values[:, 3] - base[:, 2]).mean():+.2f}",
                ]
            )
        row = list(setting)
        for other in ["BBSE-hard", "BBSE-soft", "RLLS", "EM-none", "EM-TS"]:
            wins = np.mean(mse["EM-BCTS"] <= mse[other])
            diff = mse[other] - mse["EM-BCTS"]
            p = (
                wilcoxon(diff, alternative="greater").pvalue
                if np.any(diff != 0)
                else 1.0
            )
            row.append(f"{100 * wins:.0f}% (p={p:.2g})")
        ranking.append(row)
    return table, ranking


def overall(records):
    """Mean weight MSE per method over every draw, and EM-BCTS's win shares."""
    out = {}
    for method in METHODS:
        out[method] = float(np.mean([r[method][0] for r in records]))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--sets", nargs="*", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    draws = args.draws or (5 if args.quick else 30)
    sets = args.sets or (SETS[:2] if args.quick else SETS)
    sizes = SIZES[:2] if args.quick else SIZES
    records = []
    for name in sets:
        print(f"{name} ...", flush=True)
        records += run_set(name, draws, sizes)
        # Written after every set, so that a long run keeps what it measured.
        report(records, draws, sizes, args.out)


def report(records, draws, sizes, out):
    table, ranking = summarise(records)
    means = overall(records)
    md = [
        f"Alexandari et al. protocol, {draws} draws per setting "
        f"(`python benchmarks/bench_label_shift.py --draws {draws}`), "
        f"target sizes {sizes}.\n",
        "Mean weight MSE over every draw: "
        + ", ".join(f"{m} {v:.4g}" for m, v in means.items())
        + "\n",
        "### EM + BCTS against the others (share of draws with a weight MSE at "
        "most the other's; one-sided Wilcoxon p-value that the other's MSE is "
        "larger)\n",
        markdown_table(
            [
                "set",
                "alpha",
                "n",
                "vs BBSE-hard",
                "vs BBSE-soft",
                "vs RLLS",
                "vs EM-none",
                "vs EM-TS",
            ],
            ranking,
        ),
        "### Per method (change against the unadapted BCTS model)\n",
        markdown_table(
            [
                "set",
                "alpha",
                "n",
                "method",
                "weight MSE",
                "d accuracy (pp)",
                "d NLL",
                "d ECE (pp)",
            ],
            table,
        ),
    ]
    payload = {"machine": machine_info(), "draws": draws, "records": records}
    write_results("bench_label_shift", payload, "\n".join(md), out)


if __name__ == "__main__":
    main()
