"""Temperature scaling: fit time and NLL excess over the exact optimum, against peers.

Peers: scikit-learn's ``CalibratedClassifierCV(method="temperature")``,
probmetrics, netcal, and the usual torch recipe (LBFGS on T, lr=0.01,
max_iter=50, T initialised at 1.5). Peers are optional: a missing one is
reported, not fatal. The exact optimum is an independent float64 solve (scipy's
``brentq`` on the derivative in numpy), and one ``torch.logsumexp(dim=1)`` over
the same float32 logits gives the pass cost the fit is compared with.

Run ``python benchmarks/bench_temperature.py [--quick] [--out DIR]``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import brentq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    best_time,
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)

SYNTHETIC_SIZES = [(10_000, 10), (10_000, 100), (50_000, 1000)]


def synthetic(n, k, seed=0):
    """Over-confident float32 logits with labels drawn from a softened model."""
    rng = np.random.default_rng(seed)
    true_logits = rng.normal(scale=1.0, size=(n, k)).astype(np.float32)
    true_logits[np.arange(n), rng.integers(0, k, n)] += 3.0
    gumbel = -np.log(-np.log(rng.random((n, k))))
    y = np.argmax(true_logits + gumbel, axis=1)
    return (2.5 * true_logits).astype(np.float32), y


def _moments64(X, y, beta, block=2048):
    """Exact float64 NLL derivative and NLL at beta, in numpy, block by block."""
    grad = 0.0
    nll = 0.0
    for start in range(0, X.shape[0], block):
        d = X[start : start + block].astype(np.float64)
        d -= d.max(axis=1, keepdims=True)
        yy = y[start : start + block]
        true = d[np.arange(d.shape[0]), yy]
        e = np.exp(beta * d)
        s0 = e.sum(axis=1)
        grad += np.sum((e * d).sum(axis=1) / s0 - true)
        nll += np.sum(np.log(s0) - beta * true)
    return grad / X.shape[0], nll / X.shape[0]


def exact_beta(X, y):
    """Independent float64 solve of L'(beta) = 0 (brentq to 1e-15 relative)."""
    lo, hi = 1e-3, 1e3
    return brentq(lambda b: _moments64(X, y, b)[0], lo, hi, xtol=1e-15, rtol=1e-15)


def nll_at(X, y, beta):
    return _moments64(X, y, beta)[1]


# --- the contenders: each returns (fit_seconds, beta or None, proba or None) ---


def fit_ours(X, y, repeat):
    from sklearn_calib import TemperatureScaling

    seconds, ts = best_time(
        lambda: TemperatureScaling(device="cpu").fit(X, y), repeat=repeat
    )
    return seconds, 1.0 / ts.temperature_, {"n_iter": ts.n_iter_}


def fit_sklearn(X, y, repeat):
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Passthrough(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.arange(X.shape[1])
            return self

        def decision_function(self, X):
            # a binary problem takes one score; scikit-learn reads it as (-s, s)
            return X if X.shape[1] > 2 else X[:, 1] - X[:, 0]

        def predict(self, X):
            return self.classes_[np.argmax(X, axis=1)]

    frozen = FrozenEstimator(Passthrough().fit(X, y))
    seconds, model = best_time(
        lambda: CalibratedClassifierCV(frozen, method="temperature").fit(X, y),
        repeat=repeat,
    )
    beta = float(model.calibrated_classifiers_[0].calibrators[0].beta_)
    # (-s, s) is (0, 2 s) shifted: the beta of our logits is twice scikit-learn's
    return seconds, beta * (2.0 if X.shape[1] == 2 else 1.0), {}


def fit_probmetrics(X, y, repeat):
    import torch
    from probmetrics.calibrators import TemperatureScalingCalibrator
    from probmetrics.distributions import CategoricalLogits

    logits = torch.from_numpy(X)
    labels = torch.from_numpy(y)
    seconds, cal = best_time(
        lambda: TemperatureScalingCalibrator().fit_torch(
            CategoricalLogits(logits), labels
        ),
        repeat=repeat,
    )
    return seconds, float(cal.invtemp_), {}


def fit_netcal(X, y, repeat):
    import warnings

    from netcal.scaling import TemperatureScaling as NetcalTS

    from sklearn_calib.utils._math import softmax

    proba = softmax(X.astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seconds, model = best_time(lambda: NetcalTS().fit(proba, y), repeat=1)
    # netcal's `temperature` property holds the fitted weight on the logits,
    # that is beta = 1 / T (checked against ours on the bundled sets).
    beta = float(np.ravel(model.temperature)[0])
    return seconds, beta, {}


def fit_torch_recipe(X, y, repeat):
    import torch

    logits = torch.from_numpy(X)
    labels = torch.from_numpy(y)

    def run():
        temperature = torch.nn.Parameter(torch.ones(1) * 1.5)
        optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)
        criterion = torch.nn.CrossEntropyLoss()

        def closure():
            optimizer.zero_grad()
            loss = criterion(logits / temperature, labels)
            loss.backward()
            return loss

        optimizer.step(closure)
        return float(temperature)

    seconds, temperature = best_time(run, repeat=repeat)
    return seconds, 1.0 / temperature, {}


CONTENDERS = {
    "sklearn-calib": fit_ours,
    "scikit-learn": fit_sklearn,
    "probmetrics": fit_probmetrics,
    "netcal": fit_netcal,
    "torch LBFGS recipe": fit_torch_recipe,
}


def logsumexp_seconds(X):
    import torch

    logits = torch.from_numpy(X)
    seconds, _ = best_time(lambda: torch.logsumexp(logits, dim=1), repeat=5)
    return seconds


def run_case(label, X, y, *, repeat, skip_slow_peers):
    beta_star = exact_beta(X, y)
    nll_star = nll_at(X, y, beta_star)
    lse = logsumexp_seconds(X)
    rows = []
    for name, fit in CONTENDERS.items():
        if name == "netcal" and (skip_slow_peers or X.size > 10**7):
            # netcal trains T by gradient descent over epochs: minutes at this size
            rows.append({"case": label, "method": name, "status": "skipped (slow)"})
            continue
        try:
            seconds, beta, extra = fit(X, y, repeat if name == "sklearn-calib" else 1)
        except ImportError as exc:
            status = f"missing ({exc.name})"
            rows.append({"case": label, "method": name, "status": status})
            continue
        except Exception as exc:  # a peer failing on a case is a result too
            rows.append(
                {
                    "case": label,
                    "method": name,
                    "status": f"failed ({type(exc).__name__})",
                }
            )
            continue
        if not (np.isfinite(beta) and beta > 0):
            status = "failed (T not finite)"
            rows.append({"case": label, "method": name, "status": status})
            continue
        rows.append(
            {
                "case": label,
                "method": name,
                "status": "ok",
                "fit_seconds": seconds,
                "temperature": 1.0 / beta,
                "T_rel_error": abs(beta_star / beta - 1.0),
                "nll_excess": nll_at(X, y, beta) - nll_star,
                "passes_of_logsumexp": seconds / lse,
                **extra,
            }
        )
    ours = rows[0]["fit_seconds"]
    for row in rows:
        if row.get("status") == "ok":
            row["speedup_vs_ours"] = row["fit_seconds"] / ours
    return {
        "case": label,
        "shape": list(X.shape),
        "exact_T": 1.0 / beta_star,
        "exact_nll": nll_star,
        "logsumexp_seconds": lse,
        "rows": rows,
    }


def to_markdown(cases, info):
    header = [
        "case (N x K)",
        "method",
        "fit time",
        "x slower than ours",
        "T",
        "rel. error of T",
        "NLL excess",
        "fit / logsumexp",
    ]
    rows = []
    for case in cases:
        n, k = case["shape"]
        for row in case["rows"]:
            if row["status"] != "ok":
                rows.append(
                    [
                        f"{case['case']} ({n}x{k})",
                        row["method"],
                        row["status"],
                        "",
                        "",
                        "",
                        "",
                        "",
                    ]
                )
                continue
            rows.append(
                [
                    f"{case['case']} ({n}x{k})",
                    row["method"],
                    f"{row['fit_seconds'] * 1e3:.1f} ms",
                    f"{row['speedup_vs_ours']:.1f}",
                    f"{row['temperature']:.6f}",
                    f"{row['T_rel_error']:.1e}",
                    f"{row['nll_excess']:.2e}",
                    f"{row['passes_of_logsumexp']:.1f}",
                ]
            )
    intro = (
        "# Temperature scaling benchmark\n\n"
        f"Machine: {info['cpu_count']} cores, torch {info['torch']} "
        f"({info['torch_threads']} threads), Python {info['python']}. Fit time is "
        "the best of 3 runs for sklearn-calib, one run for peers. 'NLL excess' is "
        "the validation NLL at the method's T minus the NLL at the exact optimum "
        "(independent float64 solve); 'fit / logsumexp' divides the fit time by one "
        "`torch.logsumexp(dim=1)` over the same float32 logits.\n\n"
    )
    return intro + markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no netcal")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)

    cases = []
    sizes = SYNTHETIC_SIZES[:2] if args.quick else SYNTHETIC_SIZES
    for n, k in sizes:
        X, y = synthetic(n, k)
        cases.append(run_case("synthetic", X, y, repeat=3, skip_slow_peers=args.quick))
    for name in [] if args.quick else public_sets():
        data = load_set(name)
        X, y = data["logits_val"].astype(np.float32), data["y_val"]
        cases.append(run_case(name, X, y, repeat=3, skip_slow_peers=False))
    info = machine_info()
    write_results(
        "bench_temperature",
        {"machine": info, "cases": cases},
        to_markdown(cases, info),
        args.out,
    )


if __name__ == "__main__":
    main()
