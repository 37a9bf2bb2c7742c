"""Vector and matrix scaling: fit time and training NLL against peers.

Each case fits the calibrator on synthetic logits and reports the fit time and
the training NLL (float64, scikit-learn's ``log_loss`` on the fitted map's
probabilities). The logits are those of ``bench_temperature.synthetic``, shifted
to log-probabilities (``log_softmax``) so that every contender sees the same
features: some peers take probabilities and take their log again.

Contenders, all on the same (unregularised) objective:

- sklearn-calib: :class:`VectorScaling`, and :class:`MatrixScaling` with
  ``reg_lambda=0, reg_mu=0``. The regularised defaults (ODIR) of
  :class:`MatrixScaling` and :class:`DirichletCalibration` are timed as well,
  marked as a different objective.
- probmetrics ``VectorScalingCalibrator`` / ``MatrixScalingCalibrator``
  (pytorch-minimize BFGS or L-BFGS on the logits).
- netcal ``LogisticCalibration`` (its multiclass "logistic calibration" is
  vector scaling; scipy ``minimize`` with finite-difference gradients, so only
  run up to 10 classes).
- torch-uncertainty ``VectorScaler`` (per-class scales, no bias) /
  ``MatrixScaler`` (torch LBFGS, lr 0.1, no line search) and dirichletcal
  (``FullDirichletCalibrator``): optional; reported as missing when they cannot
  be imported (torch-uncertainty needs ``lightning`` and ``torchvision``;
  dirichletcal needs Python >= 3.12).
- the usual torch recipe: ``torch.optim.LBFGS(lr=0.01, max_iter=50)`` on
  ``(w, b)`` or ``(W, b)`` from the identity, one ``step``.
- scipy's L-BFGS-B in float64 numpy with the analytic gradient (gtol 1e-9), an
  independent reference for the optimum (skipped where one pass costs more
  than 10^7 multiply-adds unless ``--reference``: at matrix 10k x 100 it took
  637 s and matched sklearn-calib's training NLL to 1.4e-11).

Large vocabularies (``--vocabulary``, also part of the full run): vector
scaling on 200 rows of K = 50,000 and K = 128,000 (a Llama vocabulary) logits,
and 1,000 x 50,000, against 50,000 x 1,000. With about one sample per class,
most classes have no finite optimum; the table gives the fit time, the time
per 10^7 logits (linear scaling in N x K keeps it constant), the iterations
and the classes kept at the temperature map. Only sklearn-calib runs there:
the peers take minutes per fit at these sizes.

Fit time is the best of 3 runs for sklearn-calib and one run for the others
(best of 2 for the large vocabularies).
Run ``python benchmarks/bench_scaling.py [--quick] [--vocabulary] [--out DIR]
[--threads N] [--reference]``. On a shared, loaded machine use ``--threads 1``: torch's
intra-op threads then compete with other processes for the same cores, which
can slow each pass down several times.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import softmax as scipy_softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import log_loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, machine_info, markdown_table, write_results  # noqa: E402
from bench_temperature import synthetic  # noqa: E402

VECTOR_SIZES = [(10_000, 10), (10_000, 100), (50_000, 1000)]
# Vector scaling on language-model vocabularies (N x K), and the 5 x 10^7
# logits of 50,000 x 1,000 to compare the time per logit with.
VOCABULARY_SIZES = [(200, 50_000), (1000, 50_000), (200, 128_000), (50_000, 1000)]
MATRIX_SIZES = [(10_000, 10), (10_000, 100)]
QUICK_SIZES = [(10_000, 10), (10_000, 100)]
# Targets of the issue (seconds, on the reference machine).
TARGETS = {("vector", 50_000, 1000): 3.0, ("matrix", 10_000, 100): 1.0}
# Peers that would take minutes or hours beyond these sizes are skipped there.
NETCAL_MAX_CLASSES = 10
# scipy's float64 reference costs minutes beyond 10^7 multiply-adds per pass
# (matrix scaling at 10k x 100 took 637 s, 2172 iterations, and matched
# sklearn-calib's training NLL to 1.4e-11); run it there with --reference.
REFERENCE_MAX_WORK = 10**7


def features(n, k, seed=0):
    logits, y = synthetic(n, k, seed=seed)
    return scipy_log_softmax(logits.astype(np.float64), axis=1).astype(np.float32), y


def affine_proba(X, coef, bias):
    X = X.astype(np.float64)
    logits = X * coef + bias if np.ndim(coef) == 1 else X @ np.asarray(coef).T + bias
    return scipy_softmax(logits, axis=1)


# --- contenders: each returns (seconds, training probabilities, note) ------------


def ours(kind, dirichlet=False, **params):
    def fit(X, y, repeat):
        from sklearn_calib import DirichletCalibration, MatrixScaling, VectorScaling

        cls = {"vector": VectorScaling, "matrix": MatrixScaling}[kind]
        if dirichlet:
            cls = DirichletCalibration
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a convergence warning is a failure
            seconds, model = best_time(
                lambda: cls(device="cpu", **params).fit(X, y), repeat=repeat
            )
        proba = model.predict_proba(X.astype(np.float64))
        return seconds, proba, f"{model.n_iter_} iterations"

    return fit


def probmetrics(kind):
    def fit(X, y, repeat):
        import torch
        from probmetrics.calibrators import (
            MatrixScalingCalibrator,
            VectorScalingCalibrator,
        )
        from probmetrics.distributions import CategoricalLogits

        cls = {"vector": VectorScalingCalibrator, "matrix": MatrixScalingCalibrator}
        logits = torch.from_numpy(X)
        labels = torch.from_numpy(y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seconds, model = best_time(
                lambda: cls[kind]().fit_torch(CategoricalLogits(logits), labels),
                repeat=repeat,
            )
        note = "; ".join(sorted({str(w.message)[:80] for w in caught}))
        # Its fitted parameters, applied in float64 (its maps: z / t + b and
        # z @ W + b).
        bias = model.bias_.detach().double().numpy()
        if kind == "vector":
            coef = 1.0 / model.temp_.detach().double().numpy()
        else:
            coef = model.itemp_.detach().double().numpy().T
        return seconds, affine_proba(X, coef, bias), note

    return fit


def netcal(kind):
    def fit(X, y, repeat):
        from netcal.scaling import LogisticCalibration

        if X.shape[1] > NETCAL_MAX_CLASSES:
            return (
                None,
                None,
                (
                    f"skipped: finite-difference gradients cost 2K+1 passes per "
                    f"iteration (K={X.shape[1]})"
                ),
            )
        proba_in = scipy_softmax(X.astype(np.float64), axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds, model = best_time(
                lambda: LogisticCalibration().fit(proba_in, y), repeat=repeat
            )
            proba = model.transform(proba_in)
        return seconds, np.asarray(proba, dtype=np.float64), ""

    return fit


def torch_uncertainty(kind):
    def fit(X, y, repeat):
        import torch
        from torch_uncertainty.post_processing import MatrixScaler, VectorScaler

        cls = {"vector": VectorScaler, "matrix": MatrixScaler}[kind]
        logits = torch.from_numpy(X)
        labels = torch.from_numpy(y)
        dataset = torch.utils.data.TensorDataset(logits, labels)
        loader = torch.utils.data.DataLoader(dataset, batch_size=len(y))

        def run():
            scaler = cls(num_classes=X.shape[1])
            scaler.fit(loader, progress=False)
            return scaler

        seconds, scaler = best_time(run, repeat=repeat)
        with torch.no_grad():
            proba = torch.softmax(scaler(torch.from_numpy(X)).double(), dim=1)
        return seconds, proba.numpy(), ""

    return fit


def dirichletcal(kind):
    def fit(X, y, repeat):
        if sys.version_info < (3, 12):
            return None, None, "skipped: dirichletcal needs Python >= 3.12"
        from dirichletcal import FullDirichletCalibrator

        proba_in = scipy_softmax(X.astype(np.float64), axis=1)
        seconds, model = best_time(
            lambda: FullDirichletCalibrator(reg_lambda=0.0, reg_mu=None).fit(
                proba_in, y
            ),
            repeat=repeat,
        )
        return seconds, np.asarray(model.predict_proba(proba_in), np.float64), ""

    return fit


def torch_recipe(kind):
    def fit(X, y, repeat):
        import torch

        logits = torch.from_numpy(X)
        labels = torch.from_numpy(y)
        k = X.shape[1]

        def run():
            if kind == "vector":
                coef = torch.nn.Parameter(torch.ones(k))
            else:
                coef = torch.nn.Parameter(torch.eye(k))
            bias = torch.nn.Parameter(torch.zeros(k))
            optimizer = torch.optim.LBFGS([coef, bias], lr=0.01, max_iter=50)

            def closure():
                optimizer.zero_grad()
                out = (
                    logits * coef + bias if kind == "vector" else logits @ coef.T + bias
                )
                loss = torch.nn.functional.cross_entropy(out, labels)
                loss.backward()
                return loss

            optimizer.step(closure)
            return coef.detach().double().numpy(), bias.detach().double().numpy()

        seconds, (coef, bias) = best_time(run, repeat=repeat)
        return seconds, affine_proba(X, coef, bias), "lr=0.01, max_iter=50"

    return fit


def scipy_reference(kind, always=False):
    def fit(X, y, repeat):
        n, k = X.shape
        work = n * k * (k if kind == "matrix" else 1)
        if work > REFERENCE_MAX_WORK and not always:
            return None, None, "skipped: minutes in numpy at this size (--reference)"
        Z = X.astype(np.float64)
        onehot = np.eye(k)[y]

        def objective(params):
            coef, bias = params[:-k], params[-k:]
            coef = coef if kind == "vector" else coef.reshape(k, k)
            out = Z * coef + bias if kind == "vector" else Z @ coef.T + bias
            log_q = scipy_log_softmax(out, axis=1)
            residual = (np.exp(log_q) - onehot) / n
            grad = (residual * Z).sum(0) if kind == "vector" else residual.T @ Z
            value = -log_q[np.arange(n), y].mean()
            return value, np.concatenate([grad.ravel(), residual.sum(0)])

        start = np.concatenate(
            [np.ones(k) if kind == "vector" else np.eye(k).ravel(), np.zeros(k)]
        )
        began = time.perf_counter()
        result = minimize(
            objective,
            start,
            jac=True,
            method="L-BFGS-B",
            options={"gtol": 1e-9, "ftol": 1e-15, "maxiter": 20000, "maxcor": 20},
        )
        seconds = time.perf_counter() - began
        coef = result.x[:-k] if kind == "vector" else result.x[:-k].reshape(k, k)
        return seconds, affine_proba(X, coef, result.x[-k:]), f"{result.nit} iterations"

    return fit


def contenders(kind, reference=False):
    same = {
        "sklearn-calib": ours(kind)
        if kind == "vector"
        else ours(kind, reg_lambda=0.0, reg_mu=0.0),
        "probmetrics": probmetrics(kind),
        "torch-uncertainty": torch_uncertainty(kind),
        "torch LBFGS recipe": torch_recipe(kind),
        "scipy L-BFGS-B (float64 reference)": scipy_reference(kind, reference),
    }
    if kind == "vector":
        same["netcal"] = netcal(kind)
    else:
        same["dirichletcal"] = dirichletcal(kind)
    other = {}
    if kind == "matrix":
        other = {
            "sklearn-calib, ODIR defaults": ours(kind),
            "sklearn-calib Dirichlet, ODIR defaults": ours(kind, dirichlet=True),
        }
    return same, other


def run_case(kind, n, k, *, repeat, reference=False):
    X, y = features(n, k)
    same, other = contenders(kind, reference)
    rows = []
    for group, table in (("same objective", same), ("ODIR (regularised)", other)):
        for name, fit in table.items():
            row = {"kind": kind, "n": n, "k": k, "method": name, "objective": group}
            try:
                seconds, proba, note = fit(X, y, repeat if "sklearn" in name else 1)
            except ImportError as exc:
                row["status"] = f"missing ({exc.name})"
                rows.append(row)
                continue
            except Exception as exc:  # a peer failing is a result, not a crash
                row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
                rows.append(row)
                continue
            if seconds is None:
                row["status"] = note
                rows.append(row)
                continue
            nll = log_loss(y, np.clip(proba, 1e-300, None), labels=np.arange(k))
            row.update(status="ok", fit_seconds=seconds, train_nll=nll, note=note)
            rows.append(row)
    finished = [
        r["train_nll"]
        for r in rows
        if r.get("status") == "ok" and r["objective"] == "same objective"
    ]
    best = min(finished) if finished else float("nan")
    for row in rows:
        if row.get("status") == "ok" and row["objective"] == "same objective":
            row["nll_excess"] = row["train_nll"] - best
    target = TARGETS.get((kind, n, k))
    return {"kind": kind, "n": n, "k": k, "target_seconds": target, "rows": rows}


def run_vocabulary_case(n, k, *, repeat=2):
    """Vector scaling on N x K: time, time per 10^7 logits, iterations."""
    import re

    from sklearn_calib import VectorScaling

    X, y = features(n, k)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seconds, model = best_time(
            lambda: VectorScaling(device="cpu", classes=np.arange(k)).fit(X, y),
            repeat=repeat,
        )
    frozen = ""
    for warning in caught:
        match = re.search(r"for ([\d,]+) of the", str(warning.message))
        if match:
            frozen = match[1]
    convergence = [
        str(w.message)[:60]
        for w in caught
        if issubclass(w.category, ConvergenceWarning)
    ]
    log_proba = model.transform(X)
    nll = float(-np.mean(log_proba[np.arange(n), y], dtype=np.float64))
    return {
        "n": n,
        "k": k,
        "fit_seconds": seconds,
        "seconds_per_1e7_logits": seconds / (n * k) * 1e7,
        "n_iter": model.n_iter_,
        "kept_at_temperature": frozen,
        "train_nll": nll,
        "convergence_warning": "; ".join(convergence),
    }


def vocabulary_markdown(rows):
    header = [
        "N x K",
        "fit time",
        "per 10^7 logits",
        "iterations",
        "classes kept at the temperature map",
        "training NLL",
        "convergence warning",
    ]
    body = [
        [
            f"{r['n']:,} x {r['k']:,}",
            f"{r['fit_seconds']:.2f} s",
            f"{r['seconds_per_1e7_logits']:.2f} s",
            str(r["n_iter"]),
            r["kept_at_temperature"] or "0",
            f"{r['train_nll']:.4f}",
            r["convergence_warning"] or "none",
        ]
        for r in rows
    ]
    return (
        "\n\n## Large vocabularies: vector scaling\n\n"
        "VectorScaling (defaults) on the same synthetic log-probabilities. "
        "Linear scaling in N x K keeps the time per 10^7 logits constant.\n\n"
        + markdown_table(header, body)
    )


def to_markdown(cases, info, command):
    header = [
        "case",
        "method",
        "objective",
        "fit time",
        "training NLL",
        "NLL - best same-objective",
        "note",
    ]
    rows = []
    for case in cases:
        label = f"{case['kind']} {case['n']} x {case['k']}"
        if case["target_seconds"]:
            label += f" (target <= {case['target_seconds']:g} s)"
        for row in case["rows"]:
            if row["status"] != "ok":
                rows.append(
                    [label, row["method"], row["objective"], row["status"], "", "", ""]
                )
                continue
            excess = row.get("nll_excess")
            rows.append(
                [
                    label,
                    row["method"],
                    row["objective"],
                    f"{row['fit_seconds']:.3f} s",
                    f"{row['train_nll']:.6f}",
                    "" if excess is None else f"{excess:.1e}",
                    row.get("note", ""),
                ]
            )
    intro = (
        "# Vector and matrix scaling benchmark\n\n"
        f"Command: `{command}`. Machine: {info['cpu_count']} cores, torch "
        f"{info['torch']} ({info['torch_threads']} threads), Python "
        f"{info['python']}; load average at the start {info['load']}. Timings on a "
        "shared, loaded machine are pessimistic. Fit time is the best of 3 runs "
        "for sklearn-calib, one run for the peers. Training NLL in float64; 'NLL "
        "- best' compares methods fitting the same unregularised objective (the "
        "ODIR rows minimise a penalised one, so their training NLL is higher by "
        "design).\n\n"
    )
    return intro + markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="10k x 10 and 10k x 100 only"
    )
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's)"
    )
    parser.add_argument(
        "--vocabulary",
        action="store_true",
        help="only the large-vocabulary vector scaling cases (K = 50,000, 128,000)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="run scipy's float64 reference at every size (minutes at 10k x 100)",
    )
    args = parser.parse_args(argv)

    import os

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine_info()
    info["load"] = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    cases = []
    groups = (
        () if args.vocabulary else (("vector", VECTOR_SIZES), ("matrix", MATRIX_SIZES))
    )
    for kind, sizes in groups:
        for n, k in QUICK_SIZES if args.quick else sizes:
            print(f"{kind} {n} x {k} ...", flush=True)
            cases.append(run_case(kind, n, k, repeat=3, reference=args.reference))
    vocabulary = []
    if not args.quick:
        for n, k in VOCABULARY_SIZES:
            print(f"vocabulary {n} x {k} ...", flush=True)
            vocabulary.append(run_vocabulary_case(n, k))
    # The output folder is where the results went, not how they were made.
    options = list(argv if argv is not None else sys.argv[1:])
    if "--out" in options:
        at = options.index("--out")
        del options[at : at + 2]
    command = " ".join(["python benchmarks/bench_scaling.py", *options])
    payload = {
        "machine": info,
        "command": command,
        "cases": cases,
        "vocabulary": vocabulary,
    }
    if cases:
        markdown = to_markdown(cases, info, command)
    else:
        markdown = (
            "# Vector scaling on large vocabularies\n\n"
            f"Command: `{command}`. Machine: {info['cpu_count']} cores, torch "
            f"{info['torch']} ({info['torch_threads']} threads), Python "
            f"{info['python']}; load average at the start {info['load']}."
        )
    if vocabulary:
        markdown += vocabulary_markdown(vocabulary)
    write_results("bench_scaling", payload, markdown, args.out)


if __name__ == "__main__":
    main()
