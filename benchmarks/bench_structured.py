"""Structured matrix and vector scaling against probmetrics' sms and svs.

Both libraries minimise the same objective on every public set (the val part):
temperature scaling, the mixture with the uniform distribution of weight
1 / (n + 1), then the ridge-penalised affine map of its log. The table gives
each solution's objective, evaluated by one numpy function on the same float64
features (ours), and each fit's time (best of five, from the logits, or from
their softmax for probmetrics, whose calibrators take probabilities).

Run ``python benchmarks/bench_structured.py [--out DIR]``.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.special import logsumexp, softmax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    best_time,
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)

from sklearn_calib import (  # noqa: E402
    StructuredMatrixScaling,
    StructuredVectorScaling,
)
from sklearn_calib._scaling.structured import structured_features  # noqa: E402

QUICK_SETS = [
    "c10_densenet40_guo",
    "c100_densenetbc100_netcal",
    "imdb_fasttext_labelerrors",
]
OURS = {"sms": StructuredMatrixScaling, "svs": StructuredVectorScaling}


def objective(features, y, coef, intercept, strengths):
    """Mean NLL of softmax(A f + b) plus the ridge penalties (numpy, float64)."""
    vector = coef.ndim == 1
    z = features * coef + intercept if vector else features @ coef.T + intercept
    nll = np.mean(logsumexp(z, axis=1) - z[np.arange(len(y)), y])
    diagonal = coef if vector else np.diag(coef)
    value = nll + strengths["intercept"] * intercept @ intercept
    value += strengths["diagonal"] * np.sum((diagonal - 1.0) ** 2)
    if not vector:
        value += strengths["off_diagonal"] * (np.sum(coef**2) - np.sum(diagonal**2))
    return float(value)


def probmetrics_fit(kind, proba, y):
    from probmetrics.calibrators import get_calibrator

    cal = get_calibrator(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.fit(proba, y)
    if kind == "svs":
        return np.asarray(cal.v_, float), np.asarray(cal.b_, float)
    return np.asarray(cal.W_[:, :-1], float), np.asarray(cal.W_[:, -1], float)


def evaluate_set(name):
    data = load_set(name)
    X, y = data["logits_val"], data["y_val"]
    proba = softmax(X.astype(np.float64), axis=1)
    rows = []
    for kind, cls in OURS.items():
        seconds, ours = best_time(lambda cls=cls: cls(device="cpu").fit(X, y), repeat=5)
        features = structured_features(X, ours.temperature_, ours.mix_weight_)
        strengths = ours.penalty_strengths_
        row = {
            "set": name,
            "method": kind,
            "n": int(X.shape[0]),
            "K": int(X.shape[1]),
            "ours_objective": objective(
                features, y, ours.coef_, ours.intercept_, strengths
            ),
            "ours_seconds": seconds,
        }
        try:
            seconds, (coef, intercept) = best_time(
                lambda kind=kind: probmetrics_fit(kind, proba, y), repeat=5
            )
        except ImportError as exc:
            row["probmetrics"] = f"missing ({exc.name})"
        else:
            row["probmetrics_objective"] = objective(
                features, y, coef, intercept, strengths
            )
            row["probmetrics_seconds"] = seconds
        rows.append(row)
    return rows


def to_markdown(rows, info):
    lines = [
        "# Structured scaling: our solver against probmetrics' sms and svs\n",
        "Same objective (mean NLL on the val part plus the ridge penalties), "
        "each solution evaluated on the same float64 features. Fit time: best "
        f"of 5. Machine: {info['cpu_count']} cores, torch {info['torch']}.\n",
    ]
    header = [
        "set",
        "n x K",
        "method",
        "objective (ours)",
        "probmetrics - ours",
        "fit ours",
        "fit probmetrics",
        "speed-up",
    ]
    table = []
    for r in rows:
        if "probmetrics_objective" not in r:
            continue
        table.append(
            [
                r["set"],
                f"{r['n']} x {r['K']}",
                r["method"],
                f"{r['ours_objective']:.8f}",
                f"{r['probmetrics_objective'] - r['ours_objective']:.2e}",
                f"{1000 * r['ours_seconds']:.0f} ms",
                f"{1000 * r['probmetrics_seconds']:.0f} ms",
                f"{r['probmetrics_seconds'] / r['ours_seconds']:.1f}x",
            ]
        )
    lines.append(markdown_table(header, table))
    for kind in OURS:
        done = [r for r in rows if r["method"] == kind and "probmetrics_objective" in r]
        if not done:
            continue
        lower = sum(r["ours_objective"] <= r["probmetrics_objective"] for r in done)
        ratio = [r["probmetrics_seconds"] / r["ours_seconds"] for r in done]
        lines.append(
            f"- {kind}: objective at most probmetrics' on {lower}/{len(done)} sets; "
            f"total fit time {sum(r['ours_seconds'] for r in done):.2f} s (ours) vs "
            f"{sum(r['probmetrics_seconds'] for r in done):.2f} s; speed-up per set "
            f"{min(ratio):.1f}x to {max(ratio):.1f}x.\n"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument("--quick", action="store_true", help="three sets")
    args = parser.parse_args(argv)
    names = public_sets()
    if args.quick:
        names = [n for n in names if n in QUICK_SETS]
    if not names:
        print("no public sets found (../shared/data is absent)")
        return
    rows = []
    for name in names:
        print(name, flush=True)
        rows.extend(evaluate_set(name))
    info = machine_info()
    write_results(
        "bench_structured",
        {"machine": info, "rows": rows},
        to_markdown(rows, info),
        args.out,
    )


if __name__ == "__main__":
    main()
