"""Agreement of the newer calibrators with their reference implementations.

On the public real-logit sets: BetaCalibration against betacal (as shipped,
and with its LogisticRegression solved to tol 1e-12), QuadraticScaling against
scipy's L-BFGS-B on the same NLL and probmetrics' ``quadratic-scaling``,
EnsembleTemperatureScaling against probmetrics' ``ETSCalibrator(loss="ce")``,
VennAbersCalibration against the venn-abers package, SplineCalibration against
probmetrics' ``CDFSplineCalibrator``. A missing peer is reported, not fatal.

Run ``python benchmarks/bench_references.py [--out DIR]``.
"""

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, softmax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_set, machine_info, markdown_table, public_sets  # noqa: E402


def _binary(name):
    data = load_set(name)
    score = {
        p: (data[f"logits_{p}"][:, 1] - data[f"logits_{p}"][:, 0]).astype(float)
        for p in ("val", "test")
    }
    return score["val"], data["y_val"], score["test"]


def _two_columns(s):
    return np.column_stack([1 - expit(s), expit(s)])


def beta_vs_betacal(name):
    import betacal
    import betacal.beta_calibration as module
    from sklearn.linear_model import LogisticRegression

    from sklearn_calib import BetaCalibration

    s, y, s_test = _binary(name)
    ours = BetaCalibration().fit(s[:, None], y)
    rows = []
    for label, tight in (("betacal as shipped", False), ("betacal, tol 1e-12", True)):
        original = module.LogisticRegression
        if tight:
            module.LogisticRegression = partial(
                LogisticRegression, tol=1e-12, max_iter=100_000
            )
        try:
            with warnings.catch_warnings():
                reference = betacal.BetaCalibration().fit(expit(s), y)
        finally:
            module.LogisticRegression = original
        coef = np.array(reference.calibrator_.map_[:2])
        dp = np.abs(
            ours.predict_proba(s_test[:, None])[:, 1] - reference.predict(expit(s_test))
        ).max()
        rel = np.max(np.abs(ours.coef_ - coef) / np.abs(coef))
        rows.append(["BetaCalibration", name, label, f"{rel:.1e}", f"{dp:.1e}"])
    return rows


def quadratic(name):
    from sklearn_calib import QuadraticScaling

    s, y, s_test = _binary(name)
    ours = QuadraticScaling().fit(s[:, None], y)
    X = np.column_stack([s, s * s, np.ones_like(s)])

    def nll(theta):
        eta = X @ theta
        return np.mean(np.logaddexp(0, eta) - y * eta), X.T @ (expit(eta) - y) / len(y)

    scipy_fit = minimize(
        nll,
        np.zeros(3),
        jac=True,
        method="L-BFGS-B",
        options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 10_000},
    )
    theta = np.append(ours.coef_, ours.intercept_)
    rel = np.max(np.abs(theta - scipy_fit.x) / np.abs(scipy_fit.x))
    rows = [
        [
            "QuadraticScaling",
            name,
            "scipy L-BFGS-B, same NLL",
            f"{rel:.1e}",
            f"NLL diff {nll(theta)[0] - scipy_fit.fun:.1e}",
        ]
    ]
    from probmetrics.calibrators import get_calibrator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # probmetrics' penalty=None
        reference = get_calibrator("quadratic-scaling")
        reference.fit(_two_columns(s), y)
        expected = reference.predict_proba(_two_columns(s_test))[:, 1]
    dp = np.abs(ours.predict_proba(s_test[:, None])[:, 1] - expected).max()
    rows.append(
        ["QuadraticScaling", name, "probmetrics quadratic-scaling", "", f"{dp:.1e}"]
    )
    return rows


def ets(name):
    from probmetrics.calibrators import ETSCalibrator

    from sklearn_calib import EnsembleTemperatureScaling

    data = load_set(name)
    logits, y = data["logits_val"].astype(float), data["y_val"]
    ours = EnsembleTemperatureScaling(device="cpu").fit(logits, y)
    reference = ETSCalibrator(loss="ce")
    reference.fit(softmax(logits, axis=1), y)

    def nll(temperature, w):
        parts = [
            softmax(logits / temperature, axis=1),
            softmax(logits, axis=1),
            np.full(logits.shape, 1 / logits.shape[1]),
        ]
        mix = sum(wj * p for wj, p in zip(w, parts, strict=True))
        return -np.mean(np.log(mix[np.arange(len(y)), y]))

    gap = nll(ours.temperature_, ours.weights_) - nll(reference.t_, reference.w_)
    return [
        [
            "EnsembleTemperatureScaling",
            name,
            "probmetrics ETSCalibrator(ce)",
            f"T {abs(ours.temperature_ - reference.t_) / reference.t_:.1e}, "
            f"w {np.abs(ours.weights_ - reference.w_).max():.1e}",
            f"NLL diff {gap:.1e}",
        ]
    ]


def venn_abers(name, multiclass):
    state = np.geterr()
    import venn_abers as package

    np.seterr(**state)  # the package silences numpy's warnings on import
    from sklearn_calib import VennAbersCalibration

    data = load_set(name)
    logits, y = data["logits_val"].astype(float), data["y_val"]
    test = data["logits_test"].astype(float)
    ours = VennAbersCalibration(multiclass=multiclass).fit(logits, y)
    kind = "one_vs_one" if multiclass == "ovo" or logits.shape[1] == 2 else "one_vs_all"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if logits.shape[1] == 2:
            reference = package.VennAbers().fit(softmax(logits, axis=1), y)
            expected, bounds = reference.predict_proba(softmax(test, axis=1))
            bounds = [bounds]
        else:
            expected, bounds = package.venn_abers.predict_proba_prefitted_va(
                softmax(logits, axis=1), y, softmax(test, axis=1), va_tpe=kind
            )
    p0, p1 = ours.predict_interval(test)
    close = np.ones(test.shape[0], dtype=bool)
    for m, b in enumerate(bounds):
        close &= np.isclose(p0[:, m], b[:, 0], atol=1e-12)
        close &= np.isclose(p1[:, m], b[:, 1], atol=1e-12)
    dp = np.abs(ours.predict_proba(test)[close] - expected[close]).max()
    return [
        [
            "VennAbersCalibration",
            name,
            f"venn-abers {kind}",
            f"{close.mean():.4f} of rows equal (1e-12)",
            f"{dp:.1e} on those rows",
        ]
    ]


def spline(name):
    from probmetrics.calibrators import CDFSplineCalibrator

    from sklearn_calib import SplineCalibration

    data = load_set(name)
    proba = softmax(data["logits_val"].astype(float), axis=1)
    confidence = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == data["y_val"]).astype(int)
    test = softmax(data["logits_test"].astype(float), axis=1).max(axis=1)
    reference = CDFSplineCalibrator()
    reference.fit(confidence, correct)
    ours = SplineCalibration(monotonic=False).fit(data["logits_val"], data["y_val"])
    mine = np.interp(test, ours.confidences_, ours.calibrated_)
    diff = np.abs(mine - np.clip(reference.predict_proba(test)[:, 1], 0, 1)).max()
    ties = confidence.shape[0] - np.unique(confidence).shape[0]
    return [
        [
            "SplineCalibration",
            name,
            "probmetrics CDFSplineCalibrator",
            f"{ties} tied val confidences",
            f"{diff:.1e}",
        ]
    ]


CASES = [
    (beta_vs_betacal, "imdb_fasttext_labelerrors"),
    (quadratic, "imdb_fasttext_labelerrors"),
    (ets, "c10_densenet40_guo"),
    (ets, "c100_densenetbc100_netcal"),
    (partial(venn_abers, multiclass="ovr"), "imdb_fasttext_labelerrors"),
    (partial(venn_abers, multiclass="ovo"), "digits_mlp_trained_here"),
    (partial(venn_abers, multiclass="ovr"), "digits_mlp_trained_here"),
    (spline, "c10_resnet56_chenyaofo"),
    (spline, "c100_resnet56_chenyaofo"),
    (spline, "c10_densenet40_guo"),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    available = set(public_sets())
    rows = []
    for case, name in CASES:
        if name not in available:
            continue
        try:
            rows += case(name)
        except ImportError as exc:
            rows.append(
                [
                    getattr(case, "__name__", "case"),
                    name,
                    f"missing ({exc.name})",
                    "",
                    "",
                ]
            )
    header = ["calibrator", "set", "reference", "parameters", "max |diff| of output"]
    markdown = "# Agreement with reference implementations\n\n" + markdown_table(
        header, rows
    )
    from _common import write_results

    write_results(
        "bench_references",
        {"machine": machine_info(), "rows": rows},
        markdown,
        args.out,
    )


if __name__ == "__main__":
    main()
