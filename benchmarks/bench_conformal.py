"""Conformal prediction sets on the public CIFAR-100 sets, and speed against MAPIE.

Two parts:

- **Sets.** On each public CIFAR-100 set, the raw logits, exact
  :class:`TemperatureScaling` and :class:`SMART` (``random_state=0``) are
  fitted on the val part; the test probabilities of each then go through
  :func:`sklearn_calib.conformal.conformal_report`: 20 random halvings of the
  test part, each score function calibrated on one half and measured on the
  other. The table gives the mean coverage and mean set size of every score
  (deterministic, and randomised APS) at confidence 0.9 and 0.95, and the
  AURC of each model. The calibrators never see the conformal splits, so the
  guarantee is exact.
- **Speed.** ``fit`` (conformalize) and ``predict_set`` on 50,000 x 1000
  random logits (float32, scale 3; labels drawn from their softmax) for LAC,
  APS, RAPS and top-k, this library against MAPIE 1.x's
  ``SplitConformalClassifier(prefit=True)`` over the same probabilities (a
  pass-through prefit classifier; MAPIE gets the softmax, this library the
  logits, so its times include the softmax). One run each (best of 2 with
  ``--repeat 2``).

Run ``python benchmarks/bench_conformal.py [--quick] [--out DIR]``; ``--quick``
uses one set, 5 splits and 20,000 x 1000 logits.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    best_time,
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)

C100_SETS = [
    "c100_wrn16-4_netcal",
    "c100_densenetbc100_netcal",
    "c100_resnet56_chenyaofo",
    "c100_resnet20_chenyaofo",
]
QUICK_SETS = ["c100_resnet56_chenyaofo"]
SCORES = ["lac", "aps", "raps", "saps", "top_k"]
LEVELS = [0.9, 0.95]
SPEED_SCORES = ["lac", "aps", "raps", "top_k"]


def _softmax(logits):
    from sklearn_calib.utils._math import softmax

    return softmax(np.asarray(logits, dtype=np.float64))


def set_rows(names, n_splits):
    from sklearn_calib import SMART, TemperatureScaling
    from sklearn_calib.conformal import conformal_report

    records, tables = [], {level: [] for level in LEVELS}
    for name in names:
        data = load_set(name)
        models = {"raw": _softmax(data["logits_test"])}
        for label, model in [
            ("TS", TemperatureScaling(device="cpu")),
            ("SMART", SMART(device="cpu", random_state=0)),
        ]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                model.fit(data["logits_val"], data["y_val"])
            models[label] = model.predict_proba(data["logits_test"].astype(np.float64))
        common = dict(confidence_levels=LEVELS, n_splits=n_splits, random_state=0)
        fixed = conformal_report(
            data["y_test"], models, conformity_scores=SCORES, **common
        )
        drawn = conformal_report(
            data["y_test"], models, conformity_scores=["aps"], randomized=True, **common
        )
        drawn["conformity_score"] = "aps (rand.)"
        import pandas as pd

        report = pd.concat([fixed, drawn], ignore_index=True)
        report.insert(0, "set", name)
        records.extend(report.to_dict(orient="records"))
        for level in LEVELS:
            for model in models:
                part = report[
                    (report["model"] == model) & (report["confidence_level"] == level)
                ]
                cells = [
                    f"{100 * r.coverage:.1f} / {r.mean_set_size:.2f}"
                    for r in part.itertuples()
                ]
                tables[level].append(
                    [name, model, *cells, f"{part['aurc'].iloc[0]:.4f}"]
                )
        print(f"{name}: done", flush=True)
    header = ["set", "probabilities", *SCORES, "aps (rand.)", "AURC"]
    return header, tables, records


class PassThrough(ClassifierMixin, BaseEstimator):
    """A prefit classifier for MAPIE whose predict_proba returns its input."""

    def __init__(self, n_classes=1000):
        self.n_classes = n_classes

    def fit(self, X, y):
        return self

    def __sklearn_is_fitted__(self):
        return True

    @property
    def classes_(self):
        return np.arange(self.n_classes)

    def predict_proba(self, X):
        return np.asarray(X)

    def predict(self, X):
        return np.asarray(X).argmax(axis=1)


def speed_rows(n_samples, n_classes, repeat):
    from sklearn_calib.conformal import ConformalClassifier

    rng = np.random.default_rng(0)
    cal_logits = (3 * rng.standard_normal((n_samples, n_classes))).astype(np.float32)
    test_logits = (3 * rng.standard_normal((n_samples, n_classes))).astype(np.float32)
    # Labels drawn from the softmax of the logits: a calibrated model, so the
    # sets have sizes a user would see rather than nearly every class.
    cal_proba = _softmax(cal_logits)
    y_cal = (rng.random((n_samples, 1)) > cal_proba.cumsum(axis=1)).sum(axis=1)
    y_cal = np.minimum(y_cal, n_classes - 1)
    del cal_proba
    try:
        import mapie
        from mapie.classification import SplitConformalClassifier
    except ImportError:
        mapie = None
    rows, records = [], []
    for score in SPEED_SCORES:
        ours = ConformalClassifier(conformity_score=score)
        fit_s, ours = best_time(
            lambda ours=ours: ours.fit(cal_logits, y_cal), repeat=repeat
        )
        predict_s, sets = best_time(
            lambda ours=ours: ours.predict_set(test_logits), repeat=repeat
        )
        record = {
            "score": score,
            "ours_fit_s": fit_s,
            "ours_predict_s": predict_s,
            "ours_mean_size": float(sets.sum(axis=1).mean()),
        }
        del sets
        if mapie is not None:
            cal_proba, test_proba = _softmax(cal_logits), _softmax(test_logits)

            def conformalize(score=score, cal_proba=cal_proba):
                return SplitConformalClassifier(
                    PassThrough(n_classes),
                    confidence_level=0.9,
                    conformity_score=score,
                    prefit=True,
                    random_state=0,
                ).conformalize(cal_proba, y_cal)

            mapie_fit_s, fitted = best_time(conformalize, repeat=repeat)
            mapie_predict_s, (_, mapie_sets) = best_time(
                lambda fitted=fitted, test_proba=test_proba: fitted.predict_set(
                    test_proba
                ),
                repeat=repeat,
            )
            record.update(
                mapie_fit_s=mapie_fit_s,
                mapie_predict_s=mapie_predict_s,
                mapie_mean_size=float(mapie_sets[:, :, 0].sum(axis=1).mean()),
                mapie=mapie.__version__,
            )
            del fitted, mapie_sets, cal_proba, test_proba
        records.append(record)
        row = [score, f"{fit_s:.2f}", f"{predict_s:.2f}"]
        if mapie is not None:
            theirs = record["mapie_fit_s"] + record["mapie_predict_s"]
            row += [
                f"{record['mapie_fit_s']:.2f}",
                f"{record['mapie_predict_s']:.2f}",
                f"{theirs / (fit_s + predict_s):.1f}",
                f"{record['ours_mean_size']:.1f} / {record['mapie_mean_size']:.1f}",
            ]
        else:
            row += ["MAPIE not installed", "", "", ""]
        rows.append(row)
        print(" | ".join(row), flush=True)
    header = [
        "score",
        "ours fit s",
        "ours predict_set s",
        "MAPIE conformalize s",
        "MAPIE predict_set s",
        "x faster (total)",
        "mean size ours / MAPIE",
    ]
    return header, rows, records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)

    available = set(public_sets())
    names = [n for n in (QUICK_SETS if args.quick else C100_SETS) if n in available]
    n_splits = 5 if args.quick else 20
    n_speed = 20_000 if args.quick else 50_000

    header, tables, set_records = set_rows(names, n_splits)
    speed_header, speed, speed_records = speed_rows(n_speed, 1000, args.repeat)

    info = machine_info()
    md = [
        "# Conformal prediction sets\n",
        "Command: `python benchmarks/bench_conformal.py"
        f"{' --quick' if args.quick else ''}`. Machine: "
        f"{info['cpu_count']} cores, torch {info['torch']} "
        f"({info['torch_threads']} threads), Python {info['python']}.\n",
        "Each calibrator is fitted on the val part; its test probabilities are "
        f"split at random into halves {n_splits} times, each score function is "
        "calibrated on one half and measured on the other "
        "(`sklearn_calib.conformal.conformal_report`). Cells: mean coverage in % "
        "/ mean set size. Deterministic scores (`randomized=False`, the default) "
        "keep the label that crosses the threshold, so they cover at least the "
        "target; randomised APS covers the target exactly on average. RAPS uses "
        "`raps_penalty=0.01, raps_k_reg=1`, SAPS `saps_weight=0.1`. AURC: area "
        "under the risk-coverage curve of the top-label probability (lower is "
        "better).\n",
    ]
    for level in LEVELS:
        md.append(f"## Confidence level {level}\n")
        md.append(markdown_table(header, tables[level]))
    md += [
        f"## Speed against MAPIE ({n_speed:,} x 1000 logits)\n",
        f"`fit` on {n_speed:,} x 1000 calibration logits and `predict_set` on "
        f"{n_speed:,} x 1000 test logits (float32, N(0, 9) random; calibration "
        "labels drawn from their softmax), confidence "
        "0.9; MAPIE's `SplitConformalClassifier(prefit=True)` is given the float64 "
        "softmax of the same logits (its conformalize includes RAPS's choice of "
        "penalty on 10% of the rows). Mean set sizes differ where the conventions "
        "do (see the user guide): MAPIE's deterministic APS randomises its "
        "calibration scores, its RAPS penalises one rank later, and its 1e-8 "
        "tolerance adds tied tail labels.\n",
        markdown_table(speed_header, speed),
    ]
    write_results(
        "bench_conformal",
        {"machine": info, "sets": set_records, "speed": speed_records},
        "\n".join(md),
        args.out,
    )


if __name__ == "__main__":
    main()
