"""Speed of the margin methods, the selector and the small many-class fits (issue 21).

Parts (``--part``, default all):

- ``smart``: SMART against ``smart_recipe.fit_smart_recipe`` (the authors'
  recipe, lean: autograd, ``torch.optim.Adam``, float32, 2,000 epochs, early
  stop after 200 epochs without a 1e-4 improvement) on the 5,000 x 100
  CIFAR-100 sets, seeds 0-4: fit seconds (wall and process CPU), steps, test
  ECE-15 (%) and NLL. SMART is run with its defaults (``lr=4e-2``, 300
  steps), with the paper's schedule (``lr=5e-3``, 2,000 steps) and with that
  schedule and ``early_stopping=True`` (the recipe itself). Every fit runs
  torch on one thread, the recipe included (its fastest setting on 2 shared
  cores).
- ``margin``: MarginTemperatureScaling (default base: a cross-validated choice
  of temperature, structured vector and structured matrix scaling),
  MatrixScaling and DirichletCalibration
  on 5,000 x 100 and on the first 200 val rows (100 classes).
- ``selector``: CalibratorSelector (5 folds; the default candidates, and
  MarginTemperatureScaling's three) against the sum of one full fit of each
  candidate, with ``n_jobs`` 1 and 2, each fitted twice in a row (with
  ``n_jobs`` 2 the folds run in threads, the selector's default since the
  session of 2026-12-08; then twice more in joblib's loky worker processes,
  the default before, whose first call starts the workers), then with
  ``n_jobs`` 1
  and ``fold_tol=None`` (every fold fit to its candidate's own ``tol``), and
  with ``n_jobs`` 1 on the paths of main before the fourth session of
  2026-12-06 (``fold_tol=None``, each candidate fitting its own temperature
  on every split, matrix and Dirichlet folds building their own class
  blocks; restored by monkeypatching), and
  ``cross_validate(MatrixScaling(), n_jobs=...)``.
- ``smart-stop``: SMART with the paper's schedule (2,000 steps) against
  that schedule with ``early_stopping=True`` (the recipe) on every public
  set, seeds 0-2: mean test ECE-15 (%) ± sd over the seeds, NLL and process
  CPU seconds per fit (one torch thread, as SMART trains).
- ``smart-schedule``: SMART with the paper's schedule (Adam at ``lr=5e-3``
  for 2,000 steps, the default before 2026-12-07) against its default
  (``lr=4e-2``, 300 steps) on every public set, seeds 0-4, paired by seed:
  mean test ECE-15 (%) ± sd, the mean paired difference ± twice its standard
  error, NLL and process CPU seconds per fit (one torch thread).
- ``margin-repeat``: ``MarginTemperatureScaling()`` (defaults) fitted
  ``--repeat`` times (default 11) on 5,000 x 100 and on the first 200 val
  rows, alternating with the same fit on the paths of main before the
  session of 2026-12-06 (the margin objective's gradient through autograd,
  each fold of the base's selector scored by the ``neg_log_loss``
  scorer object with a second pass for its out-of-fold predictions, each
  of its candidates fitting its own temperature on every split, and every
  fold fit to its candidate's own ``tol``, all restored by monkeypatching)
  and with today's paths but every fold fit to its own ``tol`` (the
  selector's ``fold_tol=None``): median and range of wall seconds, median
  process CPU seconds, and the largest difference of the fitted knot values
  from today's.
- ``threads``: small fits (200 and 5,000 rows x 100 classes) with torch on
  the default threads (the one-thread rule of ``_torch/_threads.py`` turned
  off) and on one thread, alternately, wall and CPU seconds.

Run ``python benchmarks/bench_margin_speed.py [--part smart|margin|selector|...]
[--sets a,b] [--seeds 0,1,2,3,4] [--out DIR]``; it prints markdown tables and,
with ``--out``, writes each part's table as ``bench_margin_speed_<part>.json``
and ``.md`` there (``benchmarks/results`` is not written otherwise).
"""

import argparse
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext
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
from smart_recipe import PAPER_SCHEDULE, RECIPE, fit_smart_recipe  # noqa: E402

SETS = ["c100_resnet56_chenyaofo", "c100_wrn16-4_netcal", "c100_densenetbc100_netcal"]


def quality(y, proba):
    from sklearn_calib.metrics import expected_calibration_error, log_loss

    return (
        100 * expected_calibration_error(y, proba, n_bins=15),
        log_loss(y, proba, labels=np.arange(proba.shape[1])),
    )


def timed(func, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    result = func(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def part_smart(names, seeds):
    import torch

    from sklearn_calib import SMART

    torch.set_num_threads(1)
    header = [
        "set",
        "method",
        "fit wall s (mean)",
        "fit CPU s (mean)",
        "steps (mean)",
        "test ECE % mean ± sd over seeds",
        "test NLL mean",
        "recipe CPU / this CPU",
    ]
    rows = []
    for name in names:
        d = load_set(name)
        X, y, Xt, yt = d["logits_val"], d["y_val"], d["logits_test"], d["y_test"]
        Xt64 = Xt.astype(np.float64)
        smart_runs = {
            "SMART default (lr=4e-2, 300 steps)": {},
            "SMART paper schedule (lr=5e-3, 2,000 steps)": PAPER_SCHEDULE,
            "SMART recipe (paper schedule, early stop)": RECIPE,
        }
        runs = {"recipe (early stop)": [], **{label: [] for label in smart_runs}}
        for seed in seeds:
            wall, cpu, pp = timed(fit_smart_recipe, X, y, seed=seed)
            ece, nll = quality(yt, pp(Xt))
            runs["recipe (early stop)"].append((wall, cpu, pp.n_epochs, ece, nll))
            for label, params in smart_runs.items():
                model = SMART(device="cpu", random_state=seed, **params)
                wall, cpu, _ = timed(model.fit, X, y)
                ece, nll = quality(yt, model.predict_proba(Xt64))
                runs[label].append((wall, cpu, model.n_iter_, ece, nll))
            print(name, seed, {k: v[-1] for k, v in runs.items()}, flush=True)
        recipe_cpu = np.mean([r[1] for r in runs["recipe (early stop)"]])
        for label, values in runs.items():
            v = np.asarray(values)
            rows.append(
                [
                    name,
                    label,
                    f"{v[:, 0].mean():.2f}",
                    f"{v[:, 1].mean():.2f}",
                    f"{v[:, 2].mean():.0f}",
                    f"{v[:, 3].mean():.2f} ± {v[:, 3].std(ddof=1):.2f}"
                    if len(v) > 1
                    else f"{v[0, 3]:.2f}",
                    f"{v[:, 4].mean():.4f}",
                    f"{recipe_cpu / v[:, 1].mean():.1f}",
                ]
            )
    return markdown_table(header, rows)


def part_smart_schedule(names, seeds):
    """SMART's default against the paper's schedule, every set, paired by seed."""
    import torch

    from sklearn_calib import SMART

    torch.set_num_threads(1)
    header = ["set", "paper ECE % (± sd)", "default ECE % (± sd)",
              "ECE default - paper (± 2 SE)", "paper NLL", "default NLL",
              "paper CPU s", "default CPU s"]  # fmt: skip
    rows, means, verdicts = [], [], {"worse": [], "better": []}
    for name in names:
        d = load_set(name)
        X, y = d["logits_val"], d["y_val"]
        yt, Xt = d["y_test"], d["logits_test"]
        cells = []
        for params in (PAPER_SCHEDULE, {}):
            runs = []
            for seed in seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = SMART(device="cpu", random_state=seed, **params)
                    _, cpu, _ = timed(model.fit, X, y)
                runs.append((*quality(yt, model.predict_proba(Xt)), cpu))
            cells.append(np.asarray(runs))
        paper, default = cells
        # Different schedules from the same initialisations: the seeds pair
        # the runs, and the difference is judged against its own spread.
        diff = default[:, 0] - paper[:, 0]
        two_se = 2 * diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
        if diff.mean() > two_se:
            verdicts["worse"].append(name)
        elif diff.mean() < -two_se:
            verdicts["better"].append(name)
        means.append([paper[:, 0].mean(), default[:, 0].mean(), diff.mean(),
                      paper[:, 1].mean(), default[:, 1].mean(),
                      paper[:, 2].mean(), default[:, 2].mean()])  # fmt: skip
        rows.append([name,
                     f"{paper[:, 0].mean():.2f} ± {paper[:, 0].std(ddof=1):.2f}",
                     f"{default[:, 0].mean():.2f} ± {default[:, 0].std(ddof=1):.2f}",
                     f"{diff.mean():+.2f} ± {two_se:.2f}",
                     f"{paper[:, 1].mean():.4f}", f"{default[:, 1].mean():.4f}",
                     f"{paper[:, 2].mean():.2f}",
                     f"{default[:, 2].mean():.2f}"])  # fmt: skip
        print(rows[-1], flush=True)
    m = np.mean(means, axis=0)
    rows.append([f"mean ({len(names)} sets)", f"{m[0]:.3f}", f"{m[1]:.3f}",
                 f"{m[2]:+.3f}", f"{m[3]:.4f}", f"{m[4]:.4f}", f"{m[5]:.2f}",
                 f"{m[6]:.2f}"])  # fmt: skip
    summary = (
        f"\nDefault's ECE higher than the paper schedule's beyond 2 SE on: "
        f"{', '.join(verdicts['worse']) or 'no set'}; lower on: "
        f"{', '.join(verdicts['better']) or 'no set'}.\n"
    )
    return markdown_table(header, rows) + summary


def part_margin(names):
    from sklearn.exceptions import ConvergenceWarning

    from sklearn_calib import (
        DirichletCalibration,
        MarginTemperatureScaling,
        MatrixScaling,
    )

    header = ["set", "rows", "method", "fit wall s", "fit CPU s", "n_iter_",
              "test ECE %", "test NLL"]  # fmt: skip
    rows = []
    for name in names:
        d = load_set(name)
        yt, Xt = d["y_test"], d["logits_test"].astype(np.float64)
        for n in [200, 5000]:
            X, y = d["logits_val"][:n], d["y_val"][:n]
            for model in [
                MatrixScaling(device="cpu"),
                DirichletCalibration(device="cpu"),
                MarginTemperatureScaling(device="cpu"),
            ]:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    wall, cpu, _ = timed(model.fit, X, y)
                ece, nll = quality(yt, model.predict_proba(Xt))
                short = any(w.category is ConvergenceWarning for w in caught)
                n_iter = f"{getattr(model, 'n_iter_', '')}"
                if short:
                    n_iter += " (stopped short)"
                timing = [f"{wall:.2f}", f"{cpu:.2f}", n_iter]
                rows.append(
                    [name, n, type(model).__name__, *timing, f"{ece:.2f}", f"{nll:.4f}"]
                )
                print(rows[-1], flush=True)
    return markdown_table(header, rows)


def part_margin_repeat(names, repeat):
    import sklearn_calib._meta.selector as selector_module
    import sklearn_calib._torch._margin as margin_module
    from sklearn_calib import MarginTemperatureScaling

    fit_and_score = selector_module._fit_and_score
    hand_written = margin_module._Objective.__call__
    shared_temperatures = selector_module._shared_temperatures
    fold_candidate = selector_module._fold_candidate

    def scorer_path(*args, log_loss_scorer=False, **kwargs):
        return fit_and_score(*args, log_loss_scorer=False, **kwargs)

    def own_temperatures(estimators, logits, y, sample_weight, splits, n_jobs):
        # every candidate fits its own temperature on every split
        return [[({}, None)] * len(splits) for _ in estimators]

    def own_tol(estimator, fold_tol, warm_start):
        # every fold fit to the candidate's own tol (fold_tol=None)
        return estimator

    paths = {
        "before (autograd gradient, scorer object, own temperatures, own tol)": (
            scorer_path,
            margin_module._Objective.autograd_value_and_gradient,
            own_temperatures,
            own_tol,
        ),
        "now with fold_tol=None": (
            fit_and_score,
            hand_written,
            shared_temperatures,
            own_tol,
        ),
        "now": (fit_and_score, hand_written, shared_temperatures, fold_candidate),
    }
    header = ["set", "rows", "paths", "fits", "median wall s", "wall range s",
              "median CPU s", "max |knot value difference|"]  # fmt: skip
    rows = []
    try:
        for name in names:
            d = load_set(name)
            for n in [5000, 200]:
                X, y = d["logits_val"][:n], d["y_val"][:n]
                MarginTemperatureScaling(device="cpu").fit(X, y)  # warm-up
                times = {label: [] for label in paths}
                values = {}
                for _ in range(repeat):
                    for label, (scoring, gradient, shared, fold) in paths.items():
                        selector_module._fit_and_score = scoring
                        margin_module._Objective.__call__ = gradient
                        selector_module._shared_temperatures = shared
                        selector_module._fold_candidate = fold
                        model = MarginTemperatureScaling(device="cpu")
                        wall, cpu, _ = timed(model.fit, X, y)
                        times[label].append((wall, cpu))
                        values[label] = model.log_inverse_temperature_
                reference = values["now"]
                for label, pairs in times.items():
                    pairs = np.array(pairs)
                    gap = np.max(np.abs(values[label] - reference))
                    rows.append([
                        name, n, label, repeat,
                        f"{np.median(pairs[:, 0]):.3f}",
                        f"{pairs[:, 0].min():.3f}-{pairs[:, 0].max():.3f}",
                        f"{np.median(pairs[:, 1]):.3f}", f"{gap:.1e}",
                    ])  # fmt: skip
                    print(rows[-1], flush=True)
    finally:
        selector_module._fit_and_score = fit_and_score
        margin_module._Objective.__call__ = hand_written
        selector_module._shared_temperatures = shared_temperatures
        selector_module._fold_candidate = fold_candidate
    return markdown_table(header, rows)


@contextmanager
def previous_selector_paths():
    """The selector as before the fourth session of 2026-12-06."""
    import sklearn_calib._meta.selector as selector_module

    shared_temperatures = selector_module._shared_temperatures
    warm_start_of = selector_module._warm_start_of

    def own_temperatures(estimators, logits, y, sample_weight, splits, n_jobs):
        return [[({}, None)] * len(splits) for _ in estimators]

    def without_blocks(fitted, blocks, *data):
        warm = warm_start_of(fitted, None, *data)
        return None if warm is None else warm[:2]

    selector_module._shared_temperatures = own_temperatures
    selector_module._warm_start_of = without_blocks
    try:
        yield
    finally:
        selector_module._shared_temperatures = shared_temperatures
        selector_module._warm_start_of = warm_start_of


def part_selector(names, n_jobs_list):
    from joblib import parallel_config
    from sklearn.base import clone
    from sklearn.model_selection import cross_validate

    from sklearn_calib import CalibratorSelector, MatrixScaling
    from sklearn_calib._margin.margin_temperature import _default_base
    from sklearn_calib._meta.selector import _default_calibrators

    header = ["set", "candidates", "candidates' one fit each, s", "n_jobs", "call",
              "selector wall s", "ratio", "chosen", "test ECE %", "test NLL"]  # fmt: skip
    candidate_lists = {
        "default (6)": _default_calibrators(),
        "MarginTS base (3)": _default_base().calibrators,
    }
    rows = []
    for name in names:
        d = load_set(name)
        X, y = d["logits_val"], d["y_val"]
        yt, Xt = d["y_test"], d["logits_test"].astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for label, candidates in candidate_lists.items():
                total = 0.0
                for candidate in candidates:
                    wall, _, _ = timed(clone(candidate).fit, X, y)
                    total += wall
                for n_jobs in n_jobs_list:
                    kwargs = {} if n_jobs is None else {"n_jobs": n_jobs}
                    # With n_jobs > 1 the folds run in threads; the first
                    # call in loky's worker processes starts them (each
                    # imports torch), the second reuses them.
                    calls = ["first", "second"]
                    if n_jobs in (None, 1):
                        calls += ["fold_tol=None", "previous paths"]
                    else:
                        calls += ["loky, first", "loky, second"]
                    for call in calls:
                        if call in ("fold_tol=None", "previous paths"):
                            kwargs["fold_tol"] = None
                        model = CalibratorSelector(candidates, **kwargs)
                        if call == "previous paths":
                            paths = previous_selector_paths()
                        elif call.startswith("loky"):
                            paths = parallel_config(backend="loky")
                        else:
                            paths = nullcontext()
                        with paths:
                            wall, _, _ = timed(model.fit, X, y)
                        ece, nll = quality(yt, model.predict_proba(Xt))
                        rows.append([name, label, f"{total:.2f}", n_jobs, call,
                                     f"{wall:.2f}", f"{wall / total:.1f}",
                                     type(model.best_estimator_).__name__,
                                     f"{ece:.2f}", f"{nll:.4f}"])  # fmt: skip
                        print(rows[-1], flush=True)
            for n_jobs in n_jobs_list:
                wall, _, _ = timed(
                    cross_validate, MatrixScaling(device="cpu"), X, y, n_jobs=n_jobs
                )
                rows.append([name, "cross_validate(MatrixScaling)", "", n_jobs,
                             "", f"{wall:.2f}", "", "", "", ""])  # fmt: skip
                print(rows[-1], flush=True)
    return markdown_table(header, rows)


def part_smart_stop(names, seeds):
    from sklearn_calib import SMART

    header = ["set", "default ECE % (± sd)", "early stop ECE % (± sd)",
              "default NLL", "early stop NLL", "default CPU s", "early stop CPU s"]  # fmt: skip
    rows, means = [], []
    for name in names:
        d = load_set(name)
        X, y = d["logits_val"], d["y_val"]
        yt, Xt = d["y_test"], d["logits_test"]
        cells = {}
        for label, params in (("default", PAPER_SCHEDULE), ("early", RECIPE)):
            eces, nlls, cpus = [], [], []
            for seed in seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = SMART(device="cpu", random_state=seed, **params)
                    _, cpu, _ = timed(model.fit, X, y)
                ece, nll = quality(yt, model.predict_proba(Xt))
                eces.append(ece)
                nlls.append(nll)
                cpus.append(cpu)
            cells[label] = (np.mean(eces), np.std(eces), np.mean(nlls), np.mean(cpus))
        (de, ds, dn, dc), (ee, es, en, ec) = cells["default"], cells["early"]
        means.append([de, ee, dn, en, dc, ec])
        rows.append([name, f"{de:.2f} ± {ds:.2f}", f"{ee:.2f} ± {es:.2f}",
                     f"{dn:.4f}", f"{en:.4f}", f"{dc:.2f}", f"{ec:.2f}"])  # fmt: skip
        print(rows[-1], flush=True)
    m = np.mean(means, axis=0)
    rows.append([f"mean ({len(names)} sets)", f"{m[0]:.2f}", f"{m[1]:.2f}",
                 f"{m[2]:.4f}", f"{m[3]:.4f}", f"{m[4]:.2f}", f"{m[5]:.2f}"])  # fmt: skip
    return markdown_table(header, rows)


def part_threads(names):
    import torch

    from sklearn_calib import MatrixScaling, TemperatureScaling, VectorScaling
    from sklearn_calib._torch import _threads

    header = ["set", "rows", "method", "torch threads", "fit wall s", "fit CPU s"]
    rows = []
    default = _threads.SMALL_FIT_ELEMENTS
    for name in names:
        d = load_set(name)
        for n in [200, 5000]:
            X, y = d["logits_val"][:n], d["y_val"][:n]
            for model in [
                TemperatureScaling(device="cpu"),
                VectorScaling(device="cpu"),
                MatrixScaling(device="cpu"),
            ]:
                for small in [0, default, 0, default]:
                    _threads.SMALL_FIT_ELEMENTS = small
                    threads = torch.get_num_threads() if small == 0 else 1
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        wall, cpu, _ = timed(model.fit, X, y)
                    rows.append([name, n, type(model).__name__, threads,
                                 f"{wall:.3f}", f"{cpu:.3f}"])  # fmt: skip
                    print(rows[-1], flush=True)
    _threads.SMALL_FIT_ELEMENTS = default
    return markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="all")
    parser.add_argument("--sets", default=None, help="default: the CIFAR-100 sets")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--n-jobs", default="1,2")
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--out", default=None, help="results folder (optional)")
    args = parser.parse_args(argv)
    names = SETS if args.sets is None else args.sets.split(",")
    print(machine_info())
    tables = {}
    if args.part in ("all", "smart"):
        seeds = [int(s) for s in args.seeds.split(",")]
        tables["smart"] = part_smart(names, seeds)
    if args.part in ("all", "margin"):
        tables["margin"] = part_margin(names)
    if args.part in ("all", "margin-repeat"):
        tables["margin-repeat"] = part_margin_repeat(names, args.repeat)
    if args.part in ("all", "threads"):
        tables["threads"] = part_threads(names)
    if args.part in ("all", "smart-stop"):
        seeds = [int(s) for s in args.seeds.split(",")]
        every_set = public_sets() if args.sets is None else names
        tables["smart-stop"] = part_smart_stop(every_set, seeds)
    if args.part in ("all", "smart-schedule"):
        seeds = [int(s) for s in args.seeds.split(",")]
        every_set = public_sets() if args.sets is None else names
        tables["smart-schedule"] = part_smart_schedule(every_set, seeds)
    if args.part in ("all", "selector"):
        n_jobs = [None if j == "none" else int(j) for j in args.n_jobs.split(",")]
        tables["selector"] = part_selector(names, n_jobs)
    for part, table in tables.items():
        if args.out:
            payload = {"machine": machine_info(), "sets": names, "table": table}
            write_results(f"bench_margin_speed_{part}", payload, table, args.out)
        else:
            print(table)


if __name__ == "__main__":
    main()
