"""Split noise: each method over random re-splits of every public set (issue 26).

The quality table (``bench_quality.py``) fits on the val split and scores on
the test split: one split, whose noise it cannot show. Here the val and test
rows of a set are pooled and split again at random, ``--splits`` times
(half to calibrate, half to score, stratified by label where every class has
two rows; split ``r`` seeded by ``r``), and every method is fitted and
scored on each: the spread over the splits is the split noise of its test
ECE-15 and NLL (the calibration sample and the test sample both vary), and
the paired differences between two methods on the same splits say whether
one is better beyond that noise (the mean difference beyond twice its
standard error over the splits). SMART is seeded with the split number, so
its seed noise is part of its spread. Each split's ECE comes with its
sampling floor (``bench_quality.ece_floor``): the ECE that a perfectly
calibrated predictor with the same test probabilities would get.

The label-shift set is left out: its val and test rows come from different
label distributions by design, which pooling would erase.

Run ``python benchmarks/bench_resplit.py [--splits 5] [--sets FRAGMENTS]
[--only FRAGMENTS] [--out DIR] [--name NAME]``; results go to
``benchmarks/results/bench_resplit.{json,md}`` (or ``--out``, ``--name``).
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
from bench_quality import _selected, ece_floor, kind_of  # noqa: E402

REFERENCE = "TemperatureScaling"
METHOD = "MarginTemperatureScaling"


def methods():
    """name -> factory(split) of the calibrators compared (CPU)."""
    from sklearn_calib import (
        SMART,
        CalibratorSelector,
        MarginTemperatureScaling,
        StructuredMatrixScaling,
        TemperatureScaling,
    )

    return {
        REFERENCE: lambda split: TemperatureScaling(device="cpu"),
        "StructuredMatrixScaling": lambda split: StructuredMatrixScaling(device="cpu"),
        "CalibratorSelector": lambda split: CalibratorSelector(),
        "SMART": lambda split: SMART(device="cpu", random_state=split),
        METHOD: lambda split: MarginTemperatureScaling(device="cpu"),
        # A cheaper inner cross-validation (issue 26): 3 folds of 2/3 of the
        # rows instead of 5 of 4/5, about 60 % of the default's fit time.
        f"{METHOD} cv=3": lambda split: MarginTemperatureScaling(device="cpu", cv=3),
    }


def resplit(y, split):
    """(calibration rows, test rows) of one random half-half split."""
    from sklearn.model_selection import train_test_split

    counts = np.bincount(y)
    stratify = y if counts[counts > 0].min() >= 2 else None
    return train_test_split(
        np.arange(y.shape[0]), test_size=0.5, random_state=split, stratify=stratify
    )


def evaluate_set(name, n_splits, factories):
    from sklearn_calib.metrics import expected_calibration_error, log_loss

    data = load_set(name)
    logits = np.concatenate([data["logits_val"], data["logits_test"]])
    y = np.concatenate([data["y_val"], data["y_test"]])
    labels = np.arange(logits.shape[1])
    rows = {m: [] for m in factories}
    for split in range(n_splits):
        fit_rows, test_rows = resplit(y, split)
        for method, factory in factories.items():
            model = factory(split)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(logits[fit_rows], y[fit_rows])
            seconds = time.perf_counter() - start
            proba = model.predict_proba(logits[test_rows].astype(np.float64))
            floor = ece_floor(proba)
            rows[method].append(
                {
                    "ECE %": 100
                    * expected_calibration_error(y[test_rows], proba, n_bins=15),
                    "NLL": log_loss(y[test_rows], proba, labels=labels),
                    "floor %": floor["ECE floor %"],
                    "floor sd": floor["floor sd"],
                    "fit_seconds": seconds,
                }
            )
        print(f"{name}: split {split + 1}/{n_splits}", flush=True)
    return {"set": name, "n_rows": int(y.shape[0]), "splits": rows}


def _values(result, method, key):
    return np.array([row[key] for row in result["splits"][method]])


def paired(results, method, other, key):
    """Per set: mean and standard error over the splits of ``method - other``."""
    out = {}
    for result in results:
        d = _values(result, method, key) - _values(result, other, key)
        se = d.std(ddof=1) / np.sqrt(d.shape[0]) if d.shape[0] > 1 else np.nan
        out[result["set"]] = (float(d.mean()), float(se))
    return out


def to_markdown(results, n_splits, info):
    names = list(results[0]["splits"])
    lines = [
        "# Split noise: the methods over random re-splits of each set\n",
        f"Val and test rows pooled, {n_splits} random half-half splits per set "
        "(stratified; split r seeded by r), every method fitted on one half and "
        "scored on the other; SMART seeded by the split. ECE-15 in %; floor: "
        "the mean ECE of the method's own test probabilities against labels "
        "drawn from them. Machine: "
        f"{info['cpu_count']} cores, torch {info['torch']}.\n",
    ]
    kinds = sorted({kind_of(r["set"]) for r in results})
    table = []
    for m in names:
        cells = [m]
        for kind in [*kinds, "all"]:
            chosen = [r for r in results if kind == "all" or kind_of(r["set"]) == kind]
            ece = np.mean([_values(r, m, "ECE %").mean() for r in chosen])
            nll = np.mean([_values(r, m, "NLL").mean() for r in chosen])
            cells.append(f"{ece:.2f} / {nll:.4f} ({len(chosen)})")
        floor = np.mean([_values(r, m, "floor %").mean() for r in results])
        seconds = np.mean([_values(r, m, "fit_seconds").mean() for r in results])
        table.append([*cells, f"{floor:.2f}", f"{seconds:.2f}"])
    lines.append(
        "## Means over the sets and splits\n\nMean test ECE % / NLL (sets) by "
        "kind of model, the mean ECE floor, and the mean fit time.\n\n"
        + markdown_table(
            ["method", *kinds, "all", "ECE floor %", "fit s"], table
        )
    )
    table = []
    for other in names:
        if other == METHOD:
            continue
        cells = [other]
        for key in ("ECE %", "NLL"):
            diffs = paired(results, METHOD, other, key)
            lower = sum(d + 2 * se < 0 for d, se in diffs.values())
            higher = sum(d - 2 * se > 0 for d, se in diffs.values())
            cells.append(f"{lower} / {higher}")
        table.append(cells)
    lines.append(
        f"## {METHOD} against each method, paired by split\n\nSets where "
        f"{METHOD}'s mean over the splits is lower / higher than the other's "
        "beyond twice the standard error of the paired difference.\n\n"
        + markdown_table(
            ["against", "ECE lower / higher", "NLL lower / higher"], table
        )
    )
    table = []
    for result in results:
        cells = [result["set"]]
        for m in names:
            ece, nll = _values(result, m, "ECE %"), _values(result, m, "NLL")
            floor = _values(result, m, "floor %")
            cells.append(
                f"{ece.mean():.2f} ± {ece.std(ddof=1):.2f} (floor {floor.mean():.2f})"
                f" / {nll.mean():.4f} ± {nll.std(ddof=1):.4f}"
            )
        d, se = paired([result], METHOD, REFERENCE, "NLL")[result["set"]]
        cells.append(f"{d:+.4f} ± {se:.4f}")
        table.append(cells)
    lines.append(
        "## Per set\n\nMean ± standard deviation over the splits of the test "
        f"ECE % (its floor) / NLL; last column: {METHOD}'s NLL minus "
        f"{REFERENCE}'s, mean ± standard error over the splits.\n\n"
        + markdown_table(
            ["set", *names, f"{METHOD} - {REFERENCE} NLL"], table
        )
    )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--sets", default=None, help="name fragments of the sets")
    parser.add_argument(
        "--only",
        default=None,
        help="name fragments of the methods (temperature scaling and "
        f"{METHOD} always run)",
    )
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument(
        "--name", default="bench_resplit", help="results file name (no suffix)"
    )
    args = parser.parse_args(argv)
    if args.splits < 2:
        parser.error("--splits must be at least 2 (the spread needs two)")
    names = [n for n in public_sets() if kind_of(n) != "label shift"]
    names = _selected(names, args.sets)
    if not names:
        print("no public sets found in ../shared/data: nothing to benchmark")
        return
    factories = methods()
    keep = set(_selected(factories, args.only)) | {REFERENCE, METHOD}
    factories = {m: f for m, f in factories.items() if m in keep}
    # The first torch fit of a process pays for torch's start-up: not a fit time.
    factories[REFERENCE](0).fit(np.eye(3), np.arange(3))
    results = [evaluate_set(name, args.splits, factories) for name in names]
    info = machine_info()
    write_results(
        args.name,
        {"machine": info, "splits": args.splits, "results": results},
        to_markdown(results, args.splits, info),
        args.out,
    )


if __name__ == "__main__":
    main()
