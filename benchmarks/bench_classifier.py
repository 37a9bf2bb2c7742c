"""CalibratedClassifier against scikit-learn's CalibratedClassifierCV on tabular data.

Every calibrator of the library wrapped in ``CalibratedClassifier`` (5-fold
ensembles) against ``CalibratedClassifierCV`` with its sigmoid, isotonic and
temperature methods (the same folds), over a few scikit-learn classifiers on
datasets bundled with scikit-learn (no download) and a synthetic one. Each is
fitted on a stratified 70% and scored on the other 30%: test NLL (scikit-learn's
``log_loss``), multiclass Brier score, top-label ECE-15 (when
``sklearn_calib.metrics`` is importable), accuracy and fit time. The column
"|p - sklearn TS|" is the largest difference between our temperature scaling
and scikit-learn's: they agree to solver tolerance on a decision function; on
``predict_proba`` (GaussianNB) the logits differ slightly, ``log(max(p, 1e-12))``
here against ``log(p + 1e-12)`` in scikit-learn; and a fold whose calibration
part is classified without error sends T to a bound, which the two libraries
place differently (LogisticRegression on breast_cancer).

Run ``python benchmarks/bench_classifier.py [--quick] [--out DIR]``.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, markdown_table, write_results  # noqa: E402


def datasets(quick):
    from sklearn.datasets import load_breast_cancer, load_digits, make_classification

    found = {
        "digits (10 classes)": load_digits(return_X_y=True),
        "breast_cancer (binary)": load_breast_cancer(return_X_y=True),
    }
    if not quick:
        found["synthetic (5 classes, 5k)"] = make_classification(
            n_samples=5_000,
            n_features=20,
            n_informative=10,
            n_classes=5,
            flip_y=0.05,
            random_state=0,
        )
    return found


def estimators(quick):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    found = {"GaussianNB": GaussianNB()}
    if not quick:
        found["LogisticRegression"] = make_pipeline(
            StandardScaler(), LogisticRegression(max_iter=1000)
        )
        found["HistGradientBoosting"] = HistGradientBoostingClassifier(
            max_iter=50, random_state=0
        )
    return found


def methods(quick):
    """(name, factory(estimator, cv)) for sklearn's methods and each calibrator.

    The quick run keeps the comparison of the two temperature scalings only.
    """
    from sklearn.calibration import CalibratedClassifierCV

    from sklearn_calib import CalibratedClassifier
    from sklearn_calib.utils.discovery import all_calibrators

    found = [("uncalibrated", None)]
    for method in ("temperature",) if quick else ("sigmoid", "isotonic", "temperature"):
        found.append(
            (
                f"sklearn {method}",
                lambda est, cv, m=method: CalibratedClassifierCV(est, method=m, cv=cv),
            )
        )
    for name, cls in all_calibrators():
        if quick and name != "TemperatureScaling":
            continue
        params = {"device": "cpu"} if "device" in cls().get_params() else {}
        found.append(
            (
                name,
                lambda est, cv, c=cls, p=params: CalibratedClassifier(
                    est, c(**p), cv=cv
                ),
            )
        )
    return found


def ece(y_codes, proba):
    try:
        from sklearn_calib.metrics import expected_calibration_error
    except ImportError:
        return None
    return 100 * expected_calibration_error(y_codes, proba)


def scores(y_codes, proba):
    from sklearn.metrics import log_loss

    n_classes = proba.shape[1]
    onehot = np.eye(n_classes)[y_codes]
    return {
        "nll": log_loss(y_codes, proba, labels=np.arange(n_classes)),
        "brier": float(np.mean(np.sum((proba - onehot) ** 2, axis=1))),
        "ece": ece(y_codes, proba),
        "accuracy": 100 * float(np.mean(proba.argmax(axis=1) == y_codes)),
    }


def evaluate(data_name, X, y, est_name, estimator, quick):
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold, train_test_split

    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, stratify=y, random_state=0
    )
    classes = np.unique(y)
    y_codes = np.searchsorted(classes, y_test)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    splits = list(cv.split(X_train, y_train))
    rows = []
    proba_by_method = {}
    for name, factory in methods(quick):
        model = clone(estimator)
        if factory is not None:
            model = factory(model, splits)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model.fit(X_train, y_train)
            except Exception as exc:  # a method failing is a result, not a crash
                rows.append(
                    {
                        "dataset": data_name,
                        "estimator": est_name,
                        "method": name,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                )
                continue
            fit_s = time.perf_counter() - start
            proba = model.predict_proba(X_test)
        proba_by_method[name] = proba
        rows.append(
            {
                "dataset": data_name,
                "estimator": est_name,
                "method": name,
                "fit_s": fit_s,
                **scores(y_codes, proba),
            }
        )
    ours = proba_by_method.get("TemperatureScaling")
    theirs = proba_by_method.get("sklearn temperature")
    if ours is not None and theirs is not None:
        gap = np.abs(ours - theirs).max()
        for row in rows:
            if row["method"] == "TemperatureScaling":
                row["max_abs_diff_vs_sklearn_ts"] = float(gap)
    return rows


def to_markdown(rows, info, quick):
    header = [
        "dataset",
        "estimator",
        "method",
        "NLL",
        "Brier",
        "ECE %",
        "acc %",
        "fit s",
        "|p - sklearn TS|",
    ]

    def fmt(value, spec):
        return "n/a" if value is None else format(value, spec)

    table = []
    for r in rows:
        if "error" in r:
            table.append(
                [
                    r["dataset"],
                    r["estimator"],
                    r["method"],
                    r["error"],
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
            continue
        table.append(
            [
                r["dataset"],
                r["estimator"],
                r["method"],
                fmt(r["nll"], ".4f"),
                fmt(r["brier"], ".4f"),
                fmt(r["ece"], ".2f"),
                fmt(r["accuracy"], ".2f"),
                fmt(r["fit_s"], ".2f"),
                fmt(r.get("max_abs_diff_vs_sklearn_ts"), ".1e")
                if "max_abs_diff_vs_sklearn_ts" in r
                else "",
            ]
        )
    return (
        "## CalibratedClassifier vs CalibratedClassifierCV"
        f"{' (quick)' if quick else ''}\n\n"
        "5-fold ensembles on a stratified 70/30 split; test metrics (lower is better "
        "except accuracy). Fit times are wall-clock on a shared machine "
        f"({info['cpu_count']} CPUs, torch {info['torch']}), pessimistic.\n\n"
        + markdown_table(header, table)
    )


def _warm_up():
    """Import torch and run one fit, so that no timing includes them."""
    from sklearn_calib import TemperatureScaling

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random logits: T at its bound
        logits, labels = rng.normal(size=(50, 3)), np.arange(50) % 3
        TemperatureScaling(device="cpu").fit(logits, labels)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="two small sets, GaussianNB, the two temperature scalings",
    )
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    _warm_up()
    rows = []
    for data_name, (X, y) in datasets(args.quick).items():
        for est_name, estimator in estimators(args.quick).items():
            rows += evaluate(data_name, X, y, est_name, estimator, args.quick)
    info = machine_info()
    write_results(
        "bench_classifier",
        {"machine": info, "results": rows},
        to_markdown(rows, info, args.quick),
        args.out,
    )


if __name__ == "__main__":
    main()
