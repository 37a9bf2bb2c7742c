"""The decision section of ``report``: the Python API's certified rule."""

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from sklearn_calib.selective import SelectiveClassifier
from sklearn_calib.utils._testing import make_logits

from .conftest import call, reference_proba, report_json, save_two_splits


def test_report_decisions_equal_the_python_api(capsys, tmp_path):
    # 1,000 scored samples: 500 certify, enough for a 5 % risk at 90 %
    logits, y = make_logits(n_samples=1200, n_classes=3, seed=7, overconfidence=1.5)
    path = save_two_splits(tmp_path / "big.npz", logits, y, 200)
    report = report_json(capsys, path, "--methods", "TemperatureScaling", "--seed", "3")
    entries = {e["model"]: e for e in report["decisions"]}
    assert set(entries) == {"Uncalibrated", "TemperatureScaling"}
    proba = reference_proba(logits[:200], y[:200], logits[200:])
    y_eval = y[200:]
    certify, held_out = train_test_split(
        np.arange(len(y_eval)), train_size=0.5, random_state=3
    )
    clf = SelectiveClassifier(risk=0.05, confidence_level=0.9).fit(
        np.log(proba[certify]), y_eval[certify]
    )
    got = entries["TemperatureScaling"]
    assert got["certified"] and clf.certified_
    if clf.certified_:
        assert got["threshold"] == pytest.approx(clf.threshold_, rel=1e-6)
        assert got["risk_upper_bound"] == pytest.approx(clf.risk_upper_bound_)
        assert got["risk_upper_bound"] <= 0.05
    assert got["coverage"] == pytest.approx(clf.coverage_)
    accepted = clf.accept(np.log(proba[held_out]))
    assert got["held_out_coverage"] == pytest.approx(accepted.mean())
    assert "5 %" in report["decisions_protocol"]


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_report_shows_a_decision_section(capsys, npz_two_splits, fmt):
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
    assert "Decisions (selective classification at risk 5 % with 90 % confidence" in out
    assert "Certified risk <=" in out
