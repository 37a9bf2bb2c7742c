"""``fit`` and ``apply``, the parser, and the exit-status contract."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from sklearn_calib import CalibratorSelector, TemperatureScaling, cli
from sklearn_calib.cli import _methods
from sklearn_calib.utils._testing import make_logits

from .conftest import assert_usage_error, call, reference_proba, run_cli


def test_subprocess_fit_apply_round_trip(tmp_path, logits_y):
    pytest.importorskip("skops")
    logits, y = logits_y
    np.save(tmp_path / "val.npy", logits[:200])
    np.save(tmp_path / "y.npy", y[:200])
    np.save(tmp_path / "new.npy", logits[200:])
    fitted = run_cli(
        "fit",
        "--method",
        "temperature_scaling",
        "--logits",
        "val.npy",
        "--labels",
        "y.npy",
        "-o",
        "ts.skops",
        cwd=tmp_path,
    )
    assert fitted.returncode == 0, fitted.stderr
    assert "TemperatureScaling" in fitted.stdout
    applied = run_cli(
        "apply", "ts.skops", "--logits", "new.npy", "-o", "probs.npy", cwd=tmp_path
    )
    assert applied.returncode == 0, applied.stderr
    proba = np.load(tmp_path / "probs.npy", allow_pickle=False)
    np.testing.assert_allclose(
        proba, reference_proba(logits[:200], y[:200], logits[200:]), rtol=1e-10
    )


def test_subprocess_error_exits_2_with_one_line(tmp_path):
    missing = run_cli("report", "nothing_here.npz", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == (
        "sklearn-calib report: error: nothing_here.npz: no such file\n"
    )
    assert missing.stdout == ""


@pytest.mark.parametrize(
    "case, message",
    [
        ("wrong_keys", "keys.npz: no logits found"),
        ("mismatched_lengths", "300 rows of logits but 299 labels"),
        ("nan", "logits contain NaN"),
        ("object_array", "object array"),
        ("truncated_npy", "truncated or damaged: its header declares shape (300, 4)"),
        ("ambiguous_labels", "ambiguous label column: the columns 'y', 'label'"),
    ],
)
def test_subprocess_bad_files_exit_2_with_one_line(tmp_path, logits_y, case, message):
    """The documented error cases, as the shell sees them: status 2, one line."""
    logits, y = logits_y
    if case == "wrong_keys":
        np.savez(tmp_path / "keys.npz", scores=logits, targets=y)
        args = ["report", "keys.npz"]
    elif case == "mismatched_lengths":
        np.savez(tmp_path / "short.npz", logits_val=logits, y_val=y[:-1])
        args = ["report", "short.npz"]
    elif case == "nan":
        bad = logits.copy()
        bad[5, 1] = np.nan
        np.save(tmp_path / "nan.npy", bad)
        np.save(tmp_path / "y.npy", y)
        args = [
            "fit",
            "--method",
            "temperature",
            "--logits",
            "nan.npy",
            "--labels",
            "y.npy",
            "-o",
            "c.skops",
        ]
    elif case == "object_array":
        np.save(
            tmp_path / "o.npy", np.array([[1.0, None]], dtype=object), allow_pickle=True
        )
        args = ["report", "o.npy"]
    elif case == "truncated_npy":
        np.save(tmp_path / "t.npy", logits)
        np.save(tmp_path / "y.npy", y)
        data = (tmp_path / "t.npy").read_bytes()
        (tmp_path / "t.npy").write_bytes(data[: len(data) // 2])
        args = ["report", "t.npy", "--labels", "y.npy"]
    else:
        (tmp_path / "a.csv").write_text("z0,z1,y,label\n0.5,1.0,0,1\n1.5,0.1,1,0\n")
        args = ["report", "a.csv"]
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"sklearn-calib {args[0]}: error:")
    assert message in lines[0]
    assert not (tmp_path / "c.skops").exists()


def test_usage_errors_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", "--format", "xml"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "invalid choice: 'xml'" in err and "Traceback" not in err


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("sklearn-calib") == "sklearn_calib.cli:main"


def test_help_lists_methods_formats_and_sets(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "TemperatureScaling" in out and "c100_densenetbc100_netcal" in out
    assert "weights_only=True" in out and "logits_val, y_val" in out


def test_fit_param_sets_constructor_parameters(capsys, tmp_path, logits_y):
    pytest.importorskip("skops")
    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)
    args = ["fit", "--method", "TemperatureScaling", "--logits", tmp_path / "l.npz"]
    status, _, err = call(
        capsys, *args, "-o", tmp_path / "c.skops", "--param", "max_iter=7"
    )
    assert status == 0, err
    assert cli.load_calibrator(tmp_path / "c.skops").max_iter == 7
    assert_usage_error(
        capsys,
        [*args, "-o", tmp_path / "d.skops", "--param", "colour=blue"],
        "Invalid parameter 'colour'",
    )
    assert_usage_error(
        capsys,
        [*args, "-o", tmp_path / "d.skops", "--param", "max_iter"],
        "expected KEY=VALUE",
    )


def test_fit_refuses_to_save_what_apply_would_refuse(capsys, tmp_path, logits_y):
    # A selector fitted with a scikit-learn scorer name holds scikit-learn's
    # scorer and metric, which apply does not trust: fit saved the file
    # (exit 0) and apply then refused it. fit now says so and writes nothing.
    pytest.importorskip("skops")
    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)
    args = ["fit", "--method", "CalibratorSelector", "--logits", tmp_path / "l.npz"]
    args += ["--param", "cv=2"]  # fast
    line = assert_usage_error(
        capsys,
        [*args, "-o", tmp_path / "s.skops", "--param", "scoring=accuracy"],
        "'apply' would refuse",
        "sklearn.metrics._scorer._Scorer",
    )
    assert "nothing was written" in line
    assert not (tmp_path / "s.skops").exists()
    assert not list(tmp_path.glob(".s.skops.*"))
    # With one of the library's scorers the file round-trips through apply.
    scoring = "neg_multiclass_brier_score"
    status, _, err = call(
        capsys, *args, "-o", tmp_path / "s.skops", "--param", f"scoring={scoring}"
    )
    assert status == 0, err
    np.save(tmp_path / "new.npy", logits[:50])
    status, _, err = call(
        capsys,
        "apply",
        tmp_path / "s.skops",
        "--logits",
        tmp_path / "new.npy",
        "-o",
        tmp_path / "p.npy",
    )
    assert status == 0, err
    reference = CalibratorSelector(scoring=scoring, cv=2).fit(logits, y)
    np.testing.assert_array_equal(
        np.load(tmp_path / "p.npy"), reference.predict_proba(logits[:50])
    )


def test_fit_without_skops_is_a_clear_error(capsys, monkeypatch, tmp_path, logits_y):
    monkeypatch.setitem(sys.modules, "skops", None)
    monkeypatch.setitem(sys.modules, "skops.io", None)
    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)
    assert_usage_error(
        capsys,
        [
            "fit",
            "--method",
            "TemperatureScaling",
            "--logits",
            tmp_path / "l.npz",
            "-o",
            tmp_path / "c.skops",
        ],
        "needs skops",
        "sklearn-calib[cli]",
    )


def test_method_names_any_case_snake_case_or_prefix(monkeypatch):
    for name in (
        "TemperatureScaling",
        "temperaturescaling",
        "temperature_scaling",
        "Temperature-Scaling",
        "temp",
    ):
        assert cli.resolve_method(name) is TemperatureScaling

    class TemperatureSampling(TemperatureScaling):
        pass

    monkeypatch.setattr(
        _methods,
        "calibrator_classes",
        lambda: {
            "TemperatureScaling": TemperatureScaling,
            "TemperatureSampling": TemperatureSampling,
        },
    )
    assert cli.resolve_method("temperaturescaling") is TemperatureScaling
    with pytest.raises(
        cli.CommandError, match="ambiguous: TemperatureSampling, TemperatureScaling"
    ):
        cli.resolve_method("temp")


def test_unknown_method(capsys, npz_two_splits):
    line = assert_usage_error(
        capsys,
        ["report", npz_two_splits, "--methods", "magic"],
        "unknown method 'magic'",
        "TemperatureScaling",
    )
    assert line.startswith("sklearn-calib report: error:")


def test_apply_refuses_untrusted_types(capsys, tmp_path):
    skops_io = pytest.importorskip("skops.io")
    from sklearn.preprocessing import FunctionTransformer

    # A function reference is exactly what an attacker would smuggle in.
    skops_io.dump(FunctionTransformer(func=os.system), tmp_path / "evil.skops")
    np.save(tmp_path / "l.npy", np.zeros((2, 2)))
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "evil.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.npy",
        ],
        "refused",
    )
    assert not (tmp_path / "p.npy").exists()


def test_apply_refuses_a_non_calibrator(capsys, tmp_path):
    skops_io = pytest.importorskip("skops.io")
    from sklearn.linear_model import LogisticRegression

    skops_io.dump(LogisticRegression(), tmp_path / "lr.skops")
    np.save(tmp_path / "l.npy", np.zeros((2, 2)))
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "lr.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.npy",
        ],
        "LogisticRegression, not a calibrator",
    )


@pytest.mark.parametrize("name", sorted(cli.calibrator_classes()))
def test_apply_refuses_an_unfitted_calibrator(capsys, tmp_path, logits_y, name):
    # skops.io.dump(TemperatureScaling()) loaded, and apply ended with
    # Python's AttributeError (no classes_) and a traceback.
    skops_io = pytest.importorskip("skops.io")
    skops_io.dump(cli.calibrator_classes()[name](), tmp_path / "c.skops")
    (tmp_path / "chunks").mkdir()
    np.save(tmp_path / "chunks" / "logits.npy", logits_y[0][:5])
    # A file, and a folder of chunks.
    for logits in (tmp_path / "chunks" / "logits.npy", tmp_path / "chunks"):
        assert_usage_error(
            capsys,
            ["apply", tmp_path / "c.skops", "--logits", logits]
            + ["-o", tmp_path / "p.npy"],
            f"holds an unfitted {name}",
        )
    assert not (tmp_path / "p.npy").exists()


def test_apply_on_junk_file(capsys, tmp_path):
    pytest.importorskip("skops")
    (tmp_path / "junk.skops").write_bytes(b"not a zip file")
    np.save(tmp_path / "l.npy", np.zeros((2, 2)))
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "junk.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.npy",
        ],
        "not a calibrator saved by 'sklearn-calib fit'",
    )


def test_apply_with_the_wrong_width(capsys, tmp_path, logits_y):
    skops_io = pytest.importorskip("skops.io")
    logits, y = logits_y
    skops_io.dump(
        TemperatureScaling(device="cpu").fit(logits, y), tmp_path / "ts.skops"
    )
    np.save(tmp_path / "l.npy", logits[:, :3])
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "ts.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.npy",
        ],
        "3 features",
        "expecting 4",
    )


def test_apply_output_suffix_checked_first(capsys, tmp_path):
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "ts.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.txt",
        ],
        "unsupported output type '.txt'",
    )


@pytest.mark.parametrize("name", sorted(cli.calibrator_classes()))
def test_apply_loads_every_calibrator(tmp_path, name):
    """Each calibrator saved with skops loads under the trusted types of apply."""
    skops_io = pytest.importorskip("skops.io")
    from sklearn.utils import get_tags

    from sklearn_calib.utils._testing import make_fast

    calibrator = make_fast(cli.calibrator_classes()[name])
    n_classes = 4 if get_tags(calibrator).classifier_tags.multi_class else 2
    logits, y = make_logits(n_samples=1200, n_classes=n_classes, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # small-set warnings
        calibrator.fit(logits, y)
    skops_io.dump(calibrator, tmp_path / "c.skops")
    loaded = cli.load_calibrator(tmp_path / "c.skops")
    assert type(loaded) is type(calibrator)
    np.testing.assert_array_equal(
        loaded.predict_proba(logits), calibrator.predict_proba(logits)
    )


def test_fit_reports_a_numeric_failure_in_one_line(
    capsys, tmp_path, logits_y, monkeypatch
):
    pytest.importorskip("skops")
    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)

    def overflow(self, *args, **kwargs):
        raise FloatingPointError("overflow encountered in exp")

    monkeypatch.setattr(TemperatureScaling, "_fit", overflow)
    args = ["fit", "--method", "temp", "--logits", tmp_path / "l.npz"]
    assert_usage_error(
        capsys,
        [*args, "-o", tmp_path / "c.skops"],
        "TemperatureScaling failed to fit",
        "FloatingPointError: overflow encountered in exp",
    )
    assert not (tmp_path / "c.skops").exists()


def test_apply_reports_a_numeric_failure_in_one_line(
    capsys, tmp_path, logits_y, monkeypatch
):
    skops_io = pytest.importorskip("skops.io")
    logits, y = logits_y
    skops_io.dump(
        TemperatureScaling(device="cpu").fit(logits, y), tmp_path / "ts.skops"
    )
    np.save(tmp_path / "l.npy", logits)

    def singular(self, *args, **kwargs):
        raise RuntimeError("linalg.solve: The solver failed")

    monkeypatch.setattr(TemperatureScaling, "predict_proba", singular)
    assert_usage_error(
        capsys,
        [
            "apply",
            tmp_path / "ts.skops",
            "--logits",
            tmp_path / "l.npy",
            "-o",
            tmp_path / "p.npy",
        ],
        "TemperatureScaling failed to calibrate",
        "RuntimeError: linalg.solve",
    )
    assert not (tmp_path / "p.npy").exists()


def test_importing_the_command_line_is_cheap(tmp_path):
    """Neither torch, matplotlib nor skops load with the package."""
    code = (
        "import sys, sklearn_calib.cli, sklearn_calib.__main__\n"
        "heavy = ('torch', 'matplotlib', 'skops')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_running_out_of_memory_is_one_line(capsys, tmp_path, logits_y, monkeypatch):
    from sklearn_calib.cli import _commands

    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)

    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 7.28 TiB")

    monkeypatch.setattr(_commands, "read_splits", too_big)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npz"],
        "out of memory (Unable to allocate 7.28 TiB)",
    )
