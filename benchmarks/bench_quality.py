"""Quality table: every calibrator (ours and installed peers) on every public real set.

Each method is fitted on the val part and scored on the test part: top-label
ECE-15, adaptive ECE-15, class-wise ECE-15 (in %), NLL, Brier, accuracy and fit
time. The best value per metric and set is marked in bold. The table also
checks two published figures: Guo et al. 2017 (DenseNet-40 on CIFAR-10: 5.50%
-> 0.95% ECE with temperature scaling) and the SMART authors' CIFAR-10
ResNet-50 row (4.35% raw, 1.38% TS, 0.76-0.82% SMART).

Run ``python benchmarks/bench_quality.py [--quick] [--out DIR]``.
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

QUICK_SETS = [
    "c10_densenet40_guo",
    "c10_resnet50_cross_entropy_smart",
    "c100_densenetbc100_netcal",
]
METRICS = ["ECE %", "AdaECE %", "cwECE %", "NLL", "Brier", "acc %"]
# Label draws behind each ECE floor (its standard error is about a tenth of
# the draws' spread, below 0.05 points on every public set).
FLOOR_DRAWS = 100


def sample_nll(y, proba):
    """Per-sample ``-log q_{i, y_i}``, clipped as the library's log_loss."""
    eps = np.finfo(np.float64).eps
    true = np.asarray(proba, dtype=np.float64)[np.arange(len(y)), y]
    return -np.log(np.clip(true, eps, 1 - eps))


def score(y, proba):
    from sklearn_calib.metrics import (
        adaptive_calibration_error,
        brier_score,
        classwise_calibration_error,
        expected_calibration_error,
        log_loss,
    )

    labels = np.arange(proba.shape[1])
    return {
        "ECE %": 100 * expected_calibration_error(y, proba, n_bins=15),
        "AdaECE %": 100 * adaptive_calibration_error(y, proba, n_bins=15),
        "cwECE %": 100 * classwise_calibration_error(y, proba, n_bins=15),
        "NLL": log_loss(y, proba, labels=labels),
        "Brier": brier_score(y, proba),
        "acc %": 100 * np.mean(proba.argmax(axis=1) == y),
        **ece_floor(proba),
    }


def ece_floor(proba, draws=FLOOR_DRAWS):
    """The test ECE-15 a perfectly calibrated predictor with ``proba`` would get.

    The binned ECE of a finite test set is not 0 even for a calibrated map:
    each bin's accuracy is a mean of Bernoulli outcomes. Draw every row's
    label from its own probabilities (the top class is right with
    probability equal to the confidence, the only thing the top-label ECE
    sees), ``draws`` times, and return the mean and the standard deviation
    of the ECE-15 (%) over the draws. A method's test ECE within about two
    standard deviations of its floor cannot be told from perfect
    calibration on these rows; one below its floor is luck, or confidences
    pooled in few bins (whose floor is then low too). Seeded: the same
    probabilities give the same floor.
    """
    from sklearn_calib.metrics import expected_calibration_error

    proba = np.asarray(proba, dtype=np.float64)
    top = proba.argmax(axis=1)
    confidence = proba[np.arange(proba.shape[0]), top] / proba.sum(axis=1)
    other = (top + 1) % proba.shape[1]
    rng = np.random.default_rng(0)
    values = []
    for _ in range(draws):
        right = rng.random(proba.shape[0]) < confidence
        drawn = np.where(right, top, other)
        values.append(100 * expected_calibration_error(drawn, proba, n_bins=15))
    return {"ECE floor %": float(np.mean(values)), "floor sd": float(np.std(values))}


# --- our calibrators -------------------------------------------------------


def ours():
    from sklearn_calib.utils.discovery import all_calibrators

    methods = {}
    for name, cls in all_calibrators():
        defaults = cls().get_params()
        params = {"device": "cpu"} if "device" in defaults else {}
        if "random_state" in defaults:
            params["random_state"] = 0  # reproducible tables
        methods[name] = lambda cls=cls, params=params: cls(**params)
    return methods


def fit_ours(factory, data):
    model = factory()
    start = time.perf_counter()
    model.fit(data["logits_val"], data["y_val"])
    seconds = time.perf_counter() - start
    # float64 probabilities: float32 ones cap each sample's NLL at -log(eps32) ~ 15.9
    return seconds, model.predict_proba(data["logits_test"].astype(np.float64))


# --- peers (optional) -------------------------------------------------------


def _softmax(z):
    from sklearn_calib.utils._math import softmax

    return softmax(np.asarray(z, dtype=np.float64))


def _sklearn(method):
    def fit(data):
        from sklearn.base import BaseEstimator, ClassifierMixin
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.frozen import FrozenEstimator

        class Passthrough(ClassifierMixin, BaseEstimator):
            def fit(self, X, y):
                self.classes_ = np.arange(X.shape[1])
                return self

            def decision_function(self, X):
                return X if X.shape[1] > 2 else X[:, 1] - X[:, 0]

            def predict(self, X):
                return np.argmax(X, axis=1)

        X, y = data["logits_val"], data["y_val"]
        frozen = FrozenEstimator(Passthrough().fit(X, y))
        start = time.perf_counter()
        model = CalibratedClassifierCV(frozen, method=method).fit(X, y)
        seconds = time.perf_counter() - start
        return seconds, model.predict_proba(data["logits_test"])

    return fit


def _netcal(class_name, **kwargs):
    def fit(data):
        import netcal.binning
        import netcal.scaling

        scaling = hasattr(netcal.scaling, class_name)
        module = netcal.scaling if scaling else netcal.binning
        proba_val = _softmax(data["logits_val"])
        proba_test = _softmax(data["logits_test"])
        if proba_val.shape[1] == 2:
            proba_val, proba_test = proba_val[:, 1], proba_test[:, 1]
        model = getattr(module, class_name)(**kwargs)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(proba_val, data["y_val"])
        seconds = time.perf_counter() - start
        out = np.asarray(model.transform(proba_test), dtype=np.float64)
        if out.ndim == 1:
            out = np.column_stack([1 - out, out])
        out = np.clip(out, 0, None)
        return seconds, out / out.sum(axis=1, keepdims=True)

    return fit


def _probmetrics(class_name, **kwargs):
    """A probmetrics calibrator by class name, or by factory name ("ts-mix")."""

    def fit(data):
        import torch
        from probmetrics import calibrators
        from probmetrics.distributions import CategoricalLogits

        # A class of the package, or a factory name ("logistic" is also the
        # name of a submodule, so test for a class).
        if isinstance(getattr(calibrators, class_name, None), type):
            model = getattr(calibrators, class_name)(**kwargs)
        else:
            model = calibrators.get_calibrator(class_name, **kwargs)
        val = CategoricalLogits(torch.from_numpy(data["logits_val"].astype(np.float32)))
        test = CategoricalLogits(
            torch.from_numpy(data["logits_test"].astype(np.float32))
        )
        start = time.perf_counter()
        model.fit_torch(val, torch.from_numpy(data["y_val"]))
        seconds = time.perf_counter() - start
        out = model.predict_proba_torch(test).get_probs().double().numpy()
        return seconds, out

    return fit


def _torch_uncertainty(class_name):
    def fit(data):
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch_uncertainty import post_processing

        k = data["logits_val"].shape[1]
        scaler_cls = getattr(post_processing, class_name)
        if class_name == "TemperatureScaler":
            scaler = scaler_cls()
        else:
            scaler = scaler_cls(num_classes=k)
        loader = DataLoader(
            TensorDataset(
                torch.from_numpy(data["logits_val"].astype(np.float32)),
                torch.from_numpy(data["y_val"]),
            ),
            batch_size=len(data["y_val"]),
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaler.fit(dataloader=loader)
        seconds = time.perf_counter() - start
        with torch.no_grad():
            logits = scaler(torch.from_numpy(data["logits_test"].astype(np.float32)))
        return seconds, torch.softmax(logits.double(), dim=1).numpy()

    return fit


PEERS = {
    "scikit-learn temperature": _sklearn("temperature"),
    "scikit-learn sigmoid": _sklearn("sigmoid"),
    "scikit-learn isotonic": _sklearn("isotonic"),
    "netcal TemperatureScaling": _netcal("TemperatureScaling"),
    "netcal HistogramBinning": _netcal("HistogramBinning", bins=15),
    "netcal IsotonicRegression": _netcal("IsotonicRegression"),
    "probmetrics TemperatureScaling": _probmetrics("TemperatureScalingCalibrator"),
    "probmetrics VectorScaling": _probmetrics("VectorScalingCalibrator"),
    "probmetrics MatrixScaling": _probmetrics("MatrixScalingCalibrator"),
    "probmetrics Dirichlet": _probmetrics("DirichletCalibrator"),
    # TS, then a fixed mix with the uniform distribution of weight 1 / (n + 1).
    "probmetrics ts-mix": _probmetrics("ts-mix"),
    # Zhang et al.'s ensemble temperature scaling, both fits on the NLL.
    "probmetrics ETS (ce)": _probmetrics("ETSCalibrator", loss="ce"),
    "probmetrics beta": _probmetrics("beta"),  # betacal's abm, binary
    "probmetrics quadratic-scaling": _probmetrics("quadratic-scaling"),  # binary
    "probmetrics ivap": _probmetrics("ivap"),  # venn-abers package
    # Structured matrix / vector scaling (ridge, their defaults), and
    # "logistic": sms on multiclass sets, affine (Platt on logits) on binary.
    "probmetrics sms": _probmetrics("sms"),
    "probmetrics svs": _probmetrics("svs"),
    "probmetrics logistic": _probmetrics("logistic"),
    "torch-uncertainty TemperatureScaler": _torch_uncertainty("TemperatureScaler"),
    "torch-uncertainty VectorScaler": _torch_uncertainty("VectorScaler"),
    "torch-uncertainty MatrixScaler": _torch_uncertainty("MatrixScaler"),
}
QUICK_PEERS = ["scikit-learn temperature", "scikit-learn isotonic"]


def _selected(names, only):
    """The names that contain one of the comma-separated ``only`` patterns."""
    if not only:
        return list(names)
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    return [n for n in names if any(p in n for p in patterns)]


def evaluate_set(name, *, quick, only=None):
    data = load_set(name)
    y_test = data["y_test"]
    rows = [
        {
            "method": "raw logits",
            "status": "ok",
            "fit_seconds": 0.0,
            **score(y_test, _softmax(data["logits_test"])),
            "_nll": sample_nll(y_test, _softmax(data["logits_test"])),
        }
    ]
    our_methods = ours()
    our_methods = {m: our_methods[m] for m in _selected(our_methods, only)}
    for method, factory in our_methods.items():
        try:
            seconds, proba = fit_ours(factory, data)
        except ValueError as exc:  # e.g. Platt scaling on a multiclass set
            reason = str(exc).split(".")[0]  # the first sentence says why
            rows.append({"method": method, "status": f"n/a ({reason})"})
            continue
        rows.append(
            {
                "method": method,
                "status": "ok",
                "fit_seconds": seconds,
                **score(y_test, proba),
                "_nll": sample_nll(y_test, proba),
            }
        )
    peers = {k: PEERS[k] for k in QUICK_PEERS} if quick else PEERS
    peers = {k: peers[k] for k in _selected(peers, only)}
    for method, fit in peers.items():
        try:
            seconds, proba = fit(data)
        except ImportError as exc:
            # A peer's own wrapper may raise without naming the module.
            missing = exc.name or str(exc).split("'")[1 if "'" in str(exc) else 0]
            rows.append({"method": method, "status": f"missing ({missing})"})
            continue
        except Exception as exc:  # a peer failing on a set is a result too
            rows.append({"method": method, "status": f"failed ({type(exc).__name__})"})
            continue
        if not np.all(np.isfinite(proba)):
            rows.append({"method": method, "status": "non-finite output"})
            continue
        rows.append(
            {
                "method": method,
                "status": "ok",
                "fit_seconds": seconds,
                **score(y_test, proba),
                "_nll": sample_nll(y_test, proba),
            }
        )
    return {"set": name, "shape_val": list(data["logits_val"].shape), "rows": rows}


def published_checks(results):
    by_set = {r["set"]: {row["method"]: row for row in r["rows"]} for r in results}
    checks = []
    guo = by_set.get("c10_densenet40_guo")
    if guo and "TemperatureScaling" in guo:
        checks.append(
            "Guo et al. 2017, DenseNet-40 on CIFAR-10: published ECE 5.50% raw -> "
            "0.95% "
            f"with temperature scaling; measured {guo['raw logits']['ECE %']:.2f}% -> "
            f"{guo['TemperatureScaling']['ECE %']:.2f}%."
        )
    smart = by_set.get("c10_resnet50_cross_entropy_smart")
    if (
        smart
        and "TemperatureScaling" in smart
        and "SMART" in smart
        and smart["SMART"]["status"] == "ok"
    ):
        checks.append(
            "SMART authors, ResNet-50 on CIFAR-10 (cross-entropy): published ECE 4.35% "
            "raw, 1.38% TS, 0.76-0.82% SMART; measured "
            f"{smart['raw logits']['ECE %']:.2f}%, "
            f"{smart['TemperatureScaling']['ECE %']:.2f}%, "
            f"{smart['SMART']['ECE %']:.2f}%."
        )
    return checks


def summary(results, reference="TemperatureScaling"):
    """Mean test metrics of each method over the sets where it ran, and its
    wins (lower value) against ``reference`` on the sets both ran."""
    by_method = {}
    for result in results:
        rows = {r["method"]: r for r in result["rows"] if r["status"] == "ok"}
        for method, row in rows.items():
            by_method.setdefault(method, []).append((row, rows.get(reference)))
    metrics = ["ECE %", "NLL", "Brier"]
    table = []
    for method, pairs in by_method.items():
        cells = [method, str(len(pairs))]
        for m in metrics:
            cells.append(f"{np.mean([row[m] for row, _ in pairs]):.4f}")
        for m in ("ECE %", "NLL"):
            against = [(row[m], ref[m]) for row, ref in pairs if ref is not None]
            wins = sum(mine < theirs for mine, theirs in against)
            cells.append(f"{wins}/{len(against)}" if method != reference else "")
        table.append(cells)
    header = [
        "method",
        "sets",
        *[f"mean {m}" for m in metrics],
        f"ECE wins vs {reference}",
        f"NLL wins vs {reference}",
    ]
    return [
        "## Mean over the sets\n",
        "Each method's mean over the sets it ran on (binary-only methods run on "
        "binary sets only, so compare them within the same set count).\n",
        markdown_table(header, table),
    ]


# Kinds of model of the public sets (PROVENANCE.md), for the per-kind means.
KINDS = {
    "agnews_gpt2_0shot": "LLM answers / zero-shot",
    "llmub_": "LLM answers / zero-shot",
    "pneumoniamnist": "small medical",
    "kundajelab": "label shift",
    "c10_": "vision",
    "c100_": "vision",
    "mnist_": "vision",
    "imdb_": "text and tabular",
    "beans_": "text and tabular",
    "digits_": "text and tabular",
}


def kind_of(name):
    return next((k for prefix, k in KINDS.items() if name.startswith(prefix)), "other")


def paired_noise(results, references=("TemperatureScaling", "raw logits")):
    """Add to each row its test NLL minus each reference's and the standard
    error of that paired difference over the test rows (the test split's
    sampling noise); drop the per-sample losses."""
    for result in results:
        rows = {r["method"]: r for r in result["rows"] if r["status"] == "ok"}
        for row in rows.values():
            for ref in references:
                if ref in rows:
                    d = row["_nll"] - rows[ref]["_nll"]
                    row[f"NLL - {ref}"] = float(d.mean())
                    row[f"SE vs {ref}"] = float(d.std(ddof=1) / np.sqrt(len(d)))
        for row in result["rows"]:
            row.pop("_nll", None)


def versus(results, method):
    """``method`` head to head: means by kind, wins on both metrics at once
    against every other method, and its worst sets against TS and raw."""
    by_set = {
        r["set"]: {row["method"]: row for row in r["rows"] if row["status"] == "ok"}
        for r in results
    }
    methods = sorted({m for rows in by_set.values() for m in rows})
    lines = [f"## {method} head to head\n"]
    kinds = sorted({kind_of(name) for name in by_set})
    table = []
    for m in methods:
        cells = [m]
        for kind in [*kinds, "all"]:
            vals = [
                rows[m]
                for name, rows in by_set.items()
                if m in rows and (kind == "all" or kind_of(name) == kind)
            ]
            cells.append(
                f"{np.mean([v['ECE %'] for v in vals]):.2f} / "
                f"{np.mean([v['NLL'] for v in vals]):.4f} ({len(vals)})"
                if vals
                else ""
            )
        table.append(cells)
    lines.append(
        "Mean test ECE % / NLL (number of sets) by kind of model.\n\n"
        + markdown_table(["method", *kinds, "all"], table)
    )
    table = []
    for other in methods:
        if other == method:
            continue
        pairs = [
            (rows[method], rows[other])
            for rows in by_set.values()
            if method in rows and other in rows
        ]
        both_lower = sum(
            a["ECE %"] < b["ECE %"] and a["NLL"] < b["NLL"] for a, b in pairs
        )
        both_higher = sum(
            a["ECE %"] > b["ECE %"] and a["NLL"] > b["NLL"] for a, b in pairs
        )
        ece = sum(a["ECE %"] < b["ECE %"] for a, b in pairs)
        nll = sum(a["NLL"] < b["NLL"] for a, b in pairs)
        table.append([other, len(pairs), ece, nll, both_lower, both_higher])
    lines.append(
        f"Sets where {method} is lower than each method (ECE, NLL, both at "
        "once), and where it is higher on both.\n\n"
        + markdown_table(
            ["against", "sets", "ECE lower", "NLL lower", "both lower", "both higher"],
            table,
        )
    )
    table = []
    for m in methods:
        rows = [r[m] for r in by_set.values() if m in r]
        ece = np.array([r["ECE %"] for r in rows])
        floor = np.array([r["ECE floor %"] for r in rows])
        beyond = ece > floor + 2 * np.array([r["floor sd"] for r in rows])
        table.append(
            [
                m,
                len(rows),
                f"{ece.mean():.2f}",
                f"{floor.mean():.2f}",
                f"{(ece - floor).mean():+.2f}",
                int(beyond.sum()),
                int((ece < floor).sum()),
            ]
        )
    lines.append(
        "Test ECE against its sampling floor: the mean ECE-15 of the method's "
        "own test probabilities scored against labels drawn from them "
        f"({FLOOR_DRAWS} draws, `ece_floor`), what a perfectly calibrated "
        "predictor with these probabilities would get on these rows; the "
        "sets where the ECE exceeds the floor by more than two standard "
        "deviations of the draws (miscalibration that the test rows can "
        "detect), and those where it is below the floor.\n\n"
        + markdown_table(
            [
                "method",
                "sets",
                "mean ECE %",
                "mean floor %",
                "ECE - floor",
                "beyond floor + 2 sd",
                "below floor",
            ],
            table,
        )
    )
    table = []
    for ref in ("TemperatureScaling", "raw logits"):
        excess = [
            (rows[method][f"NLL - {ref}"], rows[method][f"SE vs {ref}"], name)
            for name, rows in by_set.items()
            if method in rows and f"NLL - {ref}" in rows[method]
        ]
        if not excess:
            continue
        worst = max(excess)
        beyond = [name for d, se, name in excess if d > 2 * se]
        table.append(
            [
                ref,
                f"{worst[0]:+.4f} ± {worst[1]:.4f} ({worst[2]})",
                f"{len(beyond)} of {len(excess)}"
                + (f": {', '.join(beyond)}" if beyond else ""),
            ]
        )
    lines.append(
        f"{method}'s worst test NLL against temperature scaling and the raw "
        "model (± the standard error of the paired difference over the test "
        "rows), and the sets where it is higher by more than twice that.\n\n"
        + markdown_table(["against", "worst NLL excess", "beyond 2 SE"], table)
    )
    return lines


def to_markdown(results, checks, info, quick, versus_method=None):
    lines = [
        "# Calibration quality on real logits\n",
        f"Fit on val, scored on test. ECE variants use 15 bins, in %. NLL is the "
        "library's log_loss (clipped at float64 eps whatever the dtype, so a sample "
        "costs at most 36 nats; an unclipped log-softmax NLL can be slightly higher "
        "on sets with extreme logits). Bold: best per "
        f"column within the set. Machine: {info['cpu_count']} cores, torch "
        f"{info['torch']}."
        f"{' Quick mode: a subset of sets and peers.' if quick else ''}\n",
        "## Published figures reproduced\n",
        *[f"- {c}" for c in checks],
        "",
    ]
    lines += summary(results)
    if versus_method:
        lines += versus(results, versus_method)
    for result in results:
        ok = [r for r in result["rows"] if r["status"] == "ok"]
        best = {m: (max if m == "acc %" else min)(r[m] for r in ok) for m in METRICS}
        rows = []
        for r in result["rows"]:
            if r["status"] != "ok":
                rows.append([r["method"], *["" for _ in METRICS], "", r["status"]])
                continue
            cells = []
            for m in METRICS:
                text = f"{r[m]:.2f}" if m.endswith("%") else f"{r[m]:.4f}"
                cells.append(f"**{text}**" if np.isclose(r[m], best[m]) else text)
            floor = f"{r['ECE floor %']:.2f} ± {r['floor sd']:.2f}"
            rows.append(
                [r["method"], *cells, floor, f"{r['fit_seconds'] * 1e3:.0f} ms"]
            )
        n, k = result["shape_val"]
        lines.append(f"## {result['set']} (val {n} x {k})\n")
        lines.append(
            markdown_table(["method", *METRICS, "ECE floor %", "fit time"], rows)
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three sets, two peers")
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated name fragments: run only the matching methods "
        "(ours and peers; raw logits always)",
    )
    parser.add_argument(
        "--sets", default=None, help="comma-separated name fragments of the sets"
    )
    parser.add_argument(
        "--versus",
        default=None,
        help="a method to compare head to head: means by kind of model, wins "
        "on both metrics at once, worst NLL against TS and raw with its noise",
    )
    parser.add_argument(
        "--name", default="bench_quality", help="stem of the result files"
    )
    args = parser.parse_args(argv)
    names = [n for n in public_sets() if not args.quick or n in QUICK_SETS]
    names = _selected(names, args.sets)
    if not names:
        print("no public sets found in ../shared/data: nothing to benchmark")
        return
    results = [evaluate_set(name, quick=args.quick, only=args.only) for name in names]
    paired_noise(results)
    checks = published_checks(results)
    info = machine_info()
    payload = {"machine": info, "results": results, "checks": checks}
    write_results(
        args.name,
        payload,
        to_markdown(results, checks, info, args.quick, args.versus),
        args.out,
    )


if __name__ == "__main__":
    main()
