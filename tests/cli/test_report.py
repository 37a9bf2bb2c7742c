"""``report``: its numbers, formats, files and the rows of failed methods."""

import io
import json
import sys

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling, cli
from sklearn_calib.cli import _methods
from sklearn_calib.utils._testing import make_logits

from .conftest import (
    assert_usage_error,
    call,
    reference_proba,
    report_json,
    run_cli,
)


def test_subprocess_report_on_a_small_file_piped(tmp_path, npz_two_splits):
    result = run_cli(
        "report", npz_two_splits.name, "--methods", "TemperatureScaling", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    # Piped: plain text, no box drawing, no colour, no progress bar.
    assert "\033[" not in result.stdout and "┌" not in result.stdout
    assert "\r" not in result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("Method"))
    assert header.split() == [
        "Method",
        "ECE",
        "%",
        "AdaECE",
        "%",
        "cw-ECE",
        "%",
        "NLL",
        "Brier",
        "Acc",
        "%",
        "Fit",
        "s",
    ]
    names = [line.split()[0] for line in lines[lines.index(header) + 2 :] if line]
    assert names[:2] == ["Uncalibrated", "TemperatureScaling"]


def test_report_matches_published_figures_on_bundled_cifar10(capsys):
    # shared/data/PROVENANCE.md: 15-bin ECE 4.35% raw -> 1.37% after
    # temperature scaling, NLL 0.4121 -> 0.2038, accuracy 95.05%.
    report = report_json(
        capsys,
        "--dataset",
        "c10_resnet50_cross_entropy_smart",
        "--methods",
        "temperaturescaling",
    )
    raw, ts = report["results"]
    assert (raw["method"], ts["method"]) == ("Uncalibrated", "TemperatureScaling")
    assert raw["ece"] == pytest.approx(0.0435, abs=6e-5)
    assert ts["ece"] == pytest.approx(0.0137, abs=6e-5)
    assert raw["nll"] == pytest.approx(0.4121, abs=6e-5)
    assert ts["nll"] == pytest.approx(0.2038, abs=6e-5)
    assert raw["accuracy"] == ts["accuracy"] == pytest.approx(0.9505)
    assert report["n_samples_val"] == 5000 and report["n_samples_test"] == 10000
    assert report["evaluation"] == "fit on val, scored on test"


def test_report_values_equal_the_python_api(capsys, npz_two_splits, logits_y):
    from sklearn_calib import metrics

    logits, y = logits_y
    report = report_json(
        capsys, npz_two_splits, "--methods", "TemperatureScaling", "--n-bins", "10"
    )
    proba = reference_proba(logits[:200], y[:200], logits[200:])
    ts = report["results"][1]
    assert ts["ece"] == pytest.approx(
        metrics.expected_calibration_error(y[200:], proba, n_bins=10), rel=1e-6
    )
    assert ts["adaptive_ece"] == pytest.approx(
        metrics.adaptive_calibration_error(y[200:], proba, n_bins=10), rel=1e-6
    )
    assert ts["classwise_ece"] == pytest.approx(
        metrics.classwise_calibration_error(y[200:], proba, n_bins=10), rel=1e-6
    )
    assert ts["brier"] == pytest.approx(metrics.brier_score(y[200:], proba), rel=1e-6)
    assert ts["nll"] == pytest.approx(metrics.log_loss(y[200:], proba), rel=1e-6)
    assert ts["accuracy"] == np.mean(logits[200:].argmax(axis=1) == y[200:])
    assert report["n_bins"] == 10


def test_report_cross_validates_a_single_split(capsys, tmp_path, logits_y):
    from sklearn.model_selection import StratifiedKFold

    from sklearn_calib.metrics import log_loss

    logits, y = logits_y
    np.savez(tmp_path / "one.npz", logits=logits, y=y)
    report = report_json(
        capsys,
        tmp_path / "one.npz",
        "--methods",
        "TemperatureScaling",
        "--cv",
        "3",
        "--seed",
        "1",
    )
    assert report["evaluation"].startswith("3-fold cross-validation")
    assert report["n_samples_test"] == 0
    # The documented protocol: stratified shuffled folds, pooled out-of-fold
    # probabilities.
    proba = np.empty_like(logits)
    for train, held_out in StratifiedKFold(3, shuffle=True, random_state=1).split(y, y):
        proba[held_out] = reference_proba(logits[train], y[train], logits[held_out])
    ts = report["results"][1]
    assert ts["nll"] == pytest.approx(log_loss(y, proba), rel=1e-6)
    assert ts["accuracy"] == np.mean(logits.argmax(axis=1) == y)


@pytest.mark.parametrize("fmt", ["markdown", "csv", "table"])
def test_report_formats(capsys, npz_two_splits, fmt):
    status, out, err = call(
        capsys,
        "report",
        npz_two_splits,
        "--methods",
        "TemperatureScaling",
        "--format",
        fmt,
    )
    assert status == 0, err
    if fmt == "markdown":
        assert out.splitlines()[3].startswith("| Method | ECE % |")
        assert "|---|---:|" in out
    elif fmt == "csv":
        rows = out.strip().splitlines()
        assert rows[0] == (
            "method,ece,adaptive_ece,classwise_ece,nll,brier,accuracy,fit_time_s,note"
        )
        assert [r.split(",")[0] for r in rows[1:]] == [
            "Uncalibrated",
            "TemperatureScaling",
        ]
    else:
        assert "Uncalibrated" in out and "TemperatureScaling" in out


def test_pretty_table_only_on_a_terminal():
    report = {
        "data": "x",
        "evaluation": "e",
        "n_samples_val": 1,
        "n_samples_test": 1,
        "n_classes": 2,
        "n_bins": 15,
        "results": [
            {
                "method": "Uncalibrated",
                "ece": 0.1,
                "adaptive_ece": 0.1,
                "classwise_ece": 0.1,
                "nll": 0.5,
                "brier": 0.2,
                "accuracy": 0.9,
                "fit_time_s": 0.0,
                "note": "",
            },
            {
                "method": "TemperatureScaling",
                "ece": 0.01,
                "adaptive_ece": 0.02,
                "classwise_ece": 0.05,
                "nll": 0.3,
                "brier": 0.1,
                "accuracy": 0.9,
                "fit_time_s": 0.01,
                "note": "",
            },
        ],
    }

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    pretty = cli.format_report(report, "table", stream=Terminal())
    plain = cli.format_report(report, "table", stream=io.StringIO())
    assert "┌" in pretty and "\033[1;32m 1.00\033[0m" in pretty
    assert "┌" not in plain and "\033[" not in plain
    row = next(line for line in plain.splitlines() if line.startswith("Temperature"))
    assert row.split() == [
        "TemperatureScaling",
        "1.00",
        "2.00",
        "5.00",
        "0.3000",
        "0.1000",
        "90.00",
        "0.01",
    ]


def test_progress_bar_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = cli.Progress(4, stream=stream, width=8)
        bar.update(1, "TemperatureScaling")
        bar.close()
    assert tty.getvalue().startswith("\r[##------] 1/4 TemperatureScaling")
    assert pipe.getvalue() == ""


def test_report_out_writes_figures_and_self_contained_html(
    capsys, tmp_path, npz_two_splits
):
    pytest.importorskip("matplotlib")
    out_dir = tmp_path / "report"
    status, _, err = call(
        capsys,
        "report",
        npz_two_splits,
        "--methods",
        "TemperatureScaling",
        "--out",
        out_dir,
    )
    assert status == 0, err
    for name in ("reliability_uncalibrated.png", "reliability_temperaturescaling.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out_dir / "report.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 2
    assert "http://" not in page and "https://" not in page
    assert json.loads((out_dir / "results.json").read_text())["results"][1][
        "method"
    ] == ("TemperatureScaling")


def test_report_out_without_matplotlib_is_a_clear_error(
    capsys, monkeypatch, npz_two_splits, tmp_path
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert_usage_error(
        capsys,
        ["report", npz_two_splits, "--out", tmp_path / "r"],
        "needs matplotlib",
        "sklearn-calib[plot]",
    )


def test_failing_method_gets_a_row_not_a_crash(capsys, npz_two_splits, monkeypatch):
    class Broken(TemperatureScaling):
        def _fit(self, logits, y, sample_weight):
            raise ValueError("cannot fit this")

    monkeypatch.setattr(
        _methods,
        "calibrator_classes",
        lambda: {"Broken": Broken, "TemperatureScaling": TemperatureScaling},
    )
    report = report_json(capsys, npz_two_splits)
    broken = next(r for r in report["results"] if r["method"] == "Broken")
    assert broken["ece"] is None and broken["note"] == "failed: cannot fit this"
    assert [r["method"] for r in report["results"]] == [
        "Uncalibrated",
        "Broken",
        "TemperatureScaling",
    ]


def test_report_fast_settings_name_real_parameters():
    classes = cli.calibrator_classes()
    for name, params in cli.REPORT_PARAMS.items():
        assert name in classes, f"REPORT_PARAMS names no calibrator {name!r}"
        estimator = classes[name]().set_params(**params)
        assert all(estimator.get_params()[k] == v for k, v in params.items())


def test_report_is_reproducible(capsys, npz_two_splits, monkeypatch):
    from sklearn_calib.utils._testing import FAST_PARAMS

    # The test-suite settings (a few SMART steps, ...) keep this fast; seeds
    # set by FAST_PARAMS are dropped so that --seed is what is tested.
    fast = {
        name: {k: v for k, v in params.items() if k != "random_state"}
        for name, params in FAST_PARAMS.items()
    }
    monkeypatch.setattr(_methods, "REPORT_PARAMS", fast)
    classes = cli.calibrator_classes()
    stochastic = [n for n, c in classes.items() if "random_state" in c().get_params()]
    if not stochastic:
        pytest.skip("no stochastic calibrator")
    args = (npz_two_splits, "--methods", stochastic[0], "--seed", "3")
    first, second = report_json(capsys, *args), report_json(capsys, *args)
    for a, b in zip(first["results"], second["results"], strict=True):
        assert {k: v for k, v in a.items() if k != "fit_time_s"} == {
            k: v for k, v in b.items() if k != "fit_time_s"
        }


def test_report_fast_settings_are_applied_and_noted(
    capsys, npz_two_splits, monkeypatch
):
    fast = {"TemperatureScaling": {"max_iter": 1}}
    monkeypatch.setattr(_methods, "REPORT_PARAMS", fast)
    report = report_json(capsys, npz_two_splits, "--methods", "TemperatureScaling")
    note = report["results"][1]["note"]
    assert note.startswith("fast settings {'max_iter': 1}")
    # One Newton step does not converge: the warning is reported, not raised.
    assert "ConvergenceWarning" in note


def test_binary_only_methods_are_skipped_on_multiclass_data(
    capsys, npz_two_splits, tmp_path
):
    report = report_json(capsys, npz_two_splits, "--methods", "PlattScaling")
    platt = report["results"][1]
    assert platt["note"] == "skipped: binary problems only" and platt["ece"] is None
    logits, y = make_logits(n_samples=400, n_classes=2, seed=2)
    np.savez(tmp_path / "b.npz", logits=logits[:, 1] - logits[:, 0], y=y)
    report = report_json(capsys, tmp_path / "b.npz", "--methods", "PlattScaling")
    assert report["n_classes"] == 2 and report["results"][1]["ece"] is not None


def test_file_and_dataset_are_exclusive(capsys, npz_two_splits):
    assert_usage_error(
        capsys,
        ["report", npz_two_splits, "--dataset", "c10_densenet40_guo"],
        "either FILE or --dataset",
    )


def test_logits_option_is_the_file_argument(capsys, npz_two_splits):
    # fit and apply take --logits FILE; report takes it too, as FILE.
    args = ["--methods", "TemperatureScaling", "--seed", "1"]
    by_option = report_json(capsys, "--logits", npz_two_splits, *args)
    by_position = report_json(capsys, npz_two_splits, *args)
    for row in (by_option, by_position):
        for result in row["results"]:
            result.pop("fit_time_s", None)
    assert by_option["results"] == by_position["results"]
    assert_usage_error(
        capsys,
        ["report", npz_two_splits, "--logits", npz_two_splits],
        "FILE or as --logits, not both",
    )


def test_repeated_warnings_are_counted_not_listed():
    # A cross-validated selector repeats a candidate's warning once per split
    # with other numbers: one line, with the count of its repeats.
    from warnings import WarningMessage

    from sklearn_calib.cli._common import warning_lines

    caught = [
        WarningMessage(f"T was clamped to {t} after 12 steps", UserWarning, "f", 1)
        for t in (0.5, 0.25, 1e-3)
    ]
    caught += [
        WarningMessage("another kind", RuntimeWarning, "f", 1),
        WarningMessage("T was clamped to 2", RuntimeWarning, "f", 1),
    ]
    assert warning_lines(caught) == [
        "UserWarning: T was clamped to 0.5 after 12 steps (and 2 more like it)",
        "RuntimeWarning: another kind",
        "RuntimeWarning: T was clamped to 2",
    ]


def test_unknown_bundled_set(capsys):
    assert_usage_error(
        capsys,
        ["report", "--dataset", "imagenet"],
        "unknown bundled set 'imagenet'",
        "c10_densenet40_guo",
    )


def _torch_linalg_error():
    torch = pytest.importorskip("torch")
    return torch.linalg.LinAlgError("linalg.solve: The solver failed")


@pytest.mark.parametrize(
    "make_error, reason",
    [
        (lambda: ValueError("cannot fit this"), "cannot fit this"),
        (
            lambda: FloatingPointError("the loss is not finite"),
            "FloatingPointError: the loss is not finite",
        ),
        (
            lambda: OverflowError("cannot convert float infinity to integer"),
            "OverflowError: cannot convert float infinity to integer",
        ),
        (
            lambda: np.linalg.LinAlgError("Singular matrix"),
            "LinAlgError: Singular matrix",
        ),
        (_torch_linalg_error, "LinAlgError: linalg.solve: The solver failed"),
        (lambda: ZeroDivisionError(), "ZeroDivisionError"),
        (lambda: IndexError("index 20 is out of bounds"), "IndexError: index 20"),
    ],
    ids=[
        "value",
        "floating",
        "overflow",
        "numpy_linalg",
        "torch_linalg",
        "zero",
        "bug",
    ],
)
@pytest.mark.parametrize("stage", ["fit", "predict_proba"])
@pytest.mark.parametrize("protocol", ["two_splits", "cross_validation"])
def test_any_failure_of_a_method_gives_its_row_a_reason(
    capsys,
    tmp_path,
    logits_y,
    npz_two_splits,
    monkeypatch,
    make_error,
    reason,
    stage,
    protocol,
):
    error = make_error()

    def fail(self, *args, **kwargs):
        raise error

    broken = type("Broken", (TemperatureScaling,), {})
    setattr(broken, "_fit" if stage == "fit" else "predict_proba", fail)
    monkeypatch.setattr(
        _methods,
        "calibrator_classes",
        lambda: {"Broken": broken, "TemperatureScaling": TemperatureScaling},
    )
    if protocol == "two_splits":
        path = npz_two_splits
    else:
        logits, y = logits_y
        path = tmp_path / "one.npz"
        np.savez(path, logits=logits, y=y)
    report = report_json(capsys, path, "--cv", "2")
    assert [r["method"] for r in report["results"]] == [
        "Uncalibrated",
        "Broken",
        "TemperatureScaling",
    ]
    _, failed, fitted = report["results"]
    assert failed["note"].startswith(f"failed: {reason}")
    assert all(failed[key] is None for key in ("ece", "nll", "brier", "accuracy"))
    assert fitted["note"] == "" and fitted["nll"] > 0
    # The table lists the reason under it, on one line.
    status, out, _ = call(capsys, "report", path, "--cv", "2")
    assert status == 0
    assert f"Broken: failed: {reason}" in out


def test_extreme_logits_give_rows_not_an_abort(capsys, tmp_path, logits_y, monkeypatch):
    """Finite float64 logits near the top of the range (issue 11, section 3).

    Each method either fits and scores, or gets a row with its reason; the
    report itself completes.
    """
    from sklearn_calib.utils._testing import FAST_PARAMS

    monkeypatch.setattr(_methods, "REPORT_PARAMS", {"SMART": FAST_PARAMS["SMART"]})
    logits, y = logits_y
    big = logits / np.abs(logits).max() * 1e308
    assert np.isfinite(big).all()
    np.savez(
        tmp_path / "big.npz",
        logits_val=big[:200],
        y_val=y[:200],
        logits_test=big[200:],
        y_test=y[200:],
    )
    methods = "TemperatureScaling,SMART,HistogramBinning,IsotonicCalibration"
    report = report_json(capsys, tmp_path / "big.npz", "--methods", methods)
    rows = {r["method"]: r for r in report["results"]}
    assert set(rows) == {"Uncalibrated", *methods.split(",")}
    for name, row in rows.items():
        values = [row[key] for key in ("ece", "adaptive_ece", "nll", "brier")]
        if row["note"].startswith("failed: "):
            assert len(row["note"]) > len("failed: ") and "\n" not in row["note"]
            assert values == [None] * 4, name
        else:
            assert all(np.isfinite(v) for v in values), name
    # The non-parametric methods only rank the top-label scores: they fit.
    assert rows["HistogramBinning"]["nll"] is not None
    assert rows["IsotonicCalibration"]["nll"] is not None


def test_report_prediction_sets_equal_the_python_api(capsys, npz_two_splits, logits_y):
    from sklearn_calib.conformal import conformal_report
    from sklearn_calib.selective import aurc

    logits, y = logits_y
    report = report_json(
        capsys, npz_two_splits, "--methods", "TemperatureScaling", "--seed", "3"
    )
    proba = reference_proba(logits[:200], y[:200], logits[200:])
    expected = conformal_report(
        y[200:],
        {"TemperatureScaling": proba},
        conformity_scores=("lac", "aps", "raps"),
        confidence_levels=(0.9, 0.95),
        n_splits=20,
        random_state=3,
        as_frame=False,
    )
    entries = [
        e for e in report["prediction_sets"] if e["model"] == "TemperatureScaling"
    ]
    assert len(entries) == len(expected) == 6
    for got, want in zip(entries, expected, strict=True):
        assert got["conformity_score"] == want["conformity_score"]
        assert got["confidence_level"] == want["confidence_level"]
        assert got["coverage"] == pytest.approx(want["coverage"], rel=1e-6)
        assert got["mean_set_size"] == pytest.approx(want["mean_set_size"], rel=1e-6)
    # The AURC is the selective-prediction area of the same probabilities.
    assert entries[0]["aurc"] == pytest.approx(aurc(y[200:], proba), rel=1e-6)
    assert {e["model"] for e in report["prediction_sets"]} == {
        "Uncalibrated",
        "TemperatureScaling",
    }


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_report_shows_a_prediction_set_section(capsys, npz_two_splits, fmt):
    status, out, err = call(
        capsys,
        "report",
        npz_two_splits,
        "--methods",
        "TemperatureScaling",
        "--format",
        fmt,
    )
    assert status == 0, err
    assert "Prediction sets (split conformal" in out
    for header in ("AURC", "LAC 90%", "APS 90%", "RAPS 90%", "LAC 95%", "RAPS 95%"):
        assert header in out
    section = out[out.index("Prediction sets") :]
    assert "TemperatureScaling" in section and "Uncalibrated" in section
