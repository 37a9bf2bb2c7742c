"""The clinical validation section of ``report`` on binary data (issue 24)."""

import json

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling
from sklearn_calib.metrics import validation_report
from sklearn_calib.utils._testing import make_logits

from .conftest import call, report_json, save_two_splits


@pytest.fixture
def binary_npz(tmp_path):
    logits, y = make_logits(n_samples=500, n_classes=2, seed=21)
    return save_two_splits(tmp_path / "binary.npz", logits, y, 250), logits, y


def test_binary_report_has_the_validation_statistics(capsys, binary_npz):
    path, logits, y = binary_npz
    report = report_json(capsys, path, "--methods", "TemperatureScaling")
    validation = report["validation"]
    assert set(validation) == {"Uncalibrated", "TemperatureScaling"}
    # The rows equal the Python API on the same probabilities.
    proba = (
        TemperatureScaling(device="cpu")
        .fit(logits[:250], y[:250])
        .predict_proba(logits[250:])
    )
    expected = validation_report(y[250:], proba).to_frame()
    rows = {r["statistic"]: r for r in validation["TemperatureScaling"]}
    for name in ("calibration slope", "calibration intercept (slope fixed at 1)"):
        for key in ("value", "low", "high"):
            assert rows[name][key] == pytest.approx(
                expected.loc[name, key], rel=1e-6, abs=1e-9
            )
    status, out, err = call(capsys, "report", path, "--methods", "TemperatureScaling")
    assert status == 0, err
    assert "Clinical validation" in out and "Slope [95% CI]" in out


def test_multiclass_report_has_no_validation_section(capsys, npz_two_splits):
    report = report_json(capsys, npz_two_splits, "--methods", "TemperatureScaling")
    assert "validation" not in report


def test_binary_html_page_has_the_section(capsys, tmp_path, binary_npz):
    pytest.importorskip("matplotlib")
    path, _, _ = binary_npz
    out_dir = tmp_path / "out"
    status, _, err = call(
        capsys, "report", path, "--methods", "TemperatureScaling", "--out", out_dir
    )
    assert status == 0, err
    page = (out_dir / "report.html").read_text(encoding="utf-8")
    assert "<h2>Clinical validation</h2>" in page
    saved = json.loads((out_dir / "results.json").read_text())
    assert np.isfinite(saved["validation"]["Uncalibrated"][1]["value"])


def test_degenerate_probabilities_warn_in_one_line_per_kind(capsys, tmp_path):
    # Constant binary logits: every method predicts one probability, so each
    # method's calibration slope is NaN (an empty cell) and the library warns.
    # Those warnings went to stderr as Python prints them, two lines (path
    # and source line) per warning for every method; they are now
    # "warning:" lines, one per kind, as those of fit.
    y = np.random.default_rng(0).integers(0, 2, 300)
    save_two_splits(tmp_path / "flat.npz", np.zeros(300), y, 200)
    status, out, err = call(
        capsys,
        "report",
        tmp_path / "flat.npz",
        "--methods",
        "TemperatureScaling,PlattScaling",
        "--format",
        "json",
    )
    assert status == 0, err
    report = json.loads(out)
    slopes = [rows[1] for rows in report["validation"].values()]
    assert all(r["statistic"] == "calibration slope" for r in slopes)
    assert all(r["value"] is None for r in slopes)
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("warning: ") for line in lines), err
    slope_lines = [line for line in lines if "not identifiable" in line]
    assert len(slope_lines) == 1 and "(and 2 more like it)" in slope_lines[0], err
