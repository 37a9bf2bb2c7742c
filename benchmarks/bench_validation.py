"""Clinical validation statistics: the full report on 10^6 binary rows.

1. ``validation_report`` on 1,000,000 binary predictions drawn from a known
   calibration curve (true ``logit P = -0.3 + 0.8 logit p``), with profile
   and Wald intervals, and the time of each part: the logistic
   recalibration with its intervals, the loess curve with its band and
   distances, R's lowess of ``val.prob``, and the tests. statsmodels' GLM
   (when installed) fits the same slope, for time and agreement.
2. The report on a real binary medical model (ResNet-50 on PneumoniaMNIST,
   ``../shared/data/pneumoniamnist_resnet50.npz``), raw and after
   temperature scaling fitted on its validation split.

Run ``python benchmarks/bench_validation.py [--quick] [--out DIR]``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    SHARED_DATA,
    best_time,
    load_set,
    machine_info,
    markdown_table,
    write_results,
)

from sklearn_calib.metrics import (  # noqa: E402
    flexible_calibration_curve,
    hosmer_lemeshow_test,
    logistic_calibration,
    spiegelhalter_test,
    validation_report,
)
from sklearn_calib.metrics._lowess import r_lowess  # noqa: E402


def synthetic(n, seed=0, a=-0.3, b=0.8):
    rng = np.random.default_rng(seed)
    p = special.expit(rng.normal(-1.0, 1.5, size=n))
    y = rng.uniform(size=n) < special.expit(a + b * special.logit(p))
    return p, y


def timings(n, repeat):
    p, y = synthetic(n)
    rows, values = [], {}
    parts = [
        ("validation_report (profile CIs)", lambda: validation_report(y, p)),
        (
            "validation_report (Wald CIs)",
            lambda: validation_report(y, p, interval="wald"),
        ),
        ("logistic_calibration (profile)", lambda: logistic_calibration(y, p)),
        (
            "logistic_calibration (Wald)",
            lambda: logistic_calibration(y, p, interval="wald"),
        ),
        ("flexible_calibration_curve", lambda: flexible_calibration_curve(y, p)),
        ("R lowess of val.prob (Eavg, E90, Emax)", lambda: r_lowess(p, y)),
        ("spiegelhalter_test", lambda: spiegelhalter_test(y, p)),
        ("hosmer_lemeshow_test", lambda: hosmer_lemeshow_test(y, p)),
    ]
    for name, func in parts:
        seconds, result = best_time(func, repeat=repeat)
        values[name] = result
        rows.append([name, f"{seconds:.2f}"])
    try:
        import statsmodels.api as sm

        lp = special.logit(p)

        def glm():
            return sm.GLM(
                y.astype(float), sm.add_constant(lp), family=sm.families.Binomial()
            ).fit(tol=1e-12)

        seconds, fit = best_time(glm, repeat=repeat)
        ours = values["logistic_calibration (Wald)"]
        diff = abs(fit.params[1] - ours.slope)
        rows.append(
            [
                f"statsmodels GLM, slope only (|diff| of slope {diff:.1e})",
                f"{seconds:.2f}",
            ]
        )
    except ImportError:
        rows.append(["statsmodels GLM", "not installed"])
    report = values["validation_report (profile CIs)"]
    return rows, report


def real_set():
    if not (SHARED_DATA / "pneumoniamnist_resnet50.npz").is_file():
        return None
    from sklearn_calib import TemperatureScaling

    data = load_set("pneumoniamnist_resnet50")
    logits_val = data["logits_val"].astype(np.float64)
    logits_test = data["logits_test"].astype(np.float64)
    raw = special.softmax(logits_test, axis=1)
    ts = TemperatureScaling(device="cpu").fit(logits_val, data["y_val"])
    scaled = ts.predict_proba(logits_test)
    frames = {}
    for name, proba in (("raw", raw), ("temperature scaled", scaled)):
        frames[name] = validation_report(data["y_test"], proba).to_frame()
    return frames


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^5 rows, one call")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else 1_000_000
    repeat = 1
    rows, report = timings(n, repeat)
    md = [f"### Full validation report, {n:,} binary rows\n"]
    md.append(markdown_table(["part", f"seconds (best of {repeat})"], rows))
    frame = report.to_frame()
    md.append("\nValues (true calibration intercept is not 0, true slope 0.8):\n")
    shown = [
        "calibration intercept (slope fixed at 1)",
        "calibration slope",
        "ICI",
        "E90",
        "Emax",
        "C (ROC)",
    ]
    md.append(
        markdown_table(
            ["statistic", "value", "95% CI"],
            [
                [
                    s,
                    f"{frame.loc[s, 'value']:.4f}",
                    ""
                    if np.isnan(frame.loc[s, "low"])
                    else f"[{frame.loc[s, 'low']:.4f}, {frame.loc[s, 'high']:.4f}]",
                ]
                for s in shown
            ],
        )
    )
    payload = {"machine": machine_info(), "n": n, "timings": rows}
    frames = real_set()
    if frames is not None:
        md.append("\n### PneumoniaMNIST ResNet-50, test split (312 rows)\n")
        header = ["statistic"] + [f"{name}" for name in frames]
        table = []
        for s in shown[:2] + ["Spiegelhalter z", "ICI", "E90", "Emax", "C (ROC)"]:
            cells = [s]
            for frame in frames.values():
                value, low, high = (frame.loc[s, k] for k in ("value", "low", "high"))
                text = f"{value:.3f}"
                if not np.isnan(low):
                    text += f" [{low:.3f}, {high:.3f}]"
                elif not np.isnan(frame.loc[s, "pvalue"]):
                    text += f" (p = {frame.loc[s, 'pvalue']:.3f})"
                cells.append(text)
            table.append(cells)
        md.append(markdown_table(header, table))
        payload["pneumonia"] = {
            k: v.reset_index().to_dict("records") for k, v in frames.items()
        }
    write_results("bench_validation", payload, "\n".join(md), args.out)


if __name__ == "__main__":
    main()
