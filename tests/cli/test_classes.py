"""``--classes``: the labels of the logit columns where the labels cannot say it.

A large vocabulary's calibration split lacks most classes, label 0 among them,
so 0-based column indices and 1-based labels cannot be told apart: the
library refuses to guess, and the command line takes ``--classes``.
"""

import json

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling, VectorScaling, metrics

from .conftest import assert_usage_error, call, save_two_splits
from .test_chunked_cli import write_npz_chunks

# Vector scaling on 300 classes with few samples each: most classes have
# no finite optimum (asserted in test_affine_robustness.py); the CLI tests
# check the columns and labels.
_IGNORED = [
    "ignore:.*determine no finite scale:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


N_COLUMNS = 300


@pytest.fixture(scope="module")
def vocabulary():
    """Logits over 300 columns whose labels (0-based) never include 0."""
    rng = np.random.default_rng(12)
    y = rng.integers(1, N_COLUMNS, size=400)
    logits = rng.normal(size=(400, N_COLUMNS))
    logits[np.arange(400), y] += 4.0
    return logits, y


@pytest.fixture
def vocabulary_npz(tmp_path, vocabulary):
    return save_two_splits(tmp_path / "vocab.npz", *vocabulary, 200)


def _fit_args(logits_file, output, *options, method="VectorScaling"):
    return ["fit", "--method", method, "--logits", logits_file, "-o", output, *options]


def _report(capsys, *args):
    status, out, err = call(capsys, "report", *args, "--format", "json")
    assert status == 0, err
    return json.loads(out)


def test_ambiguous_labels_name_the_option(capsys, vocabulary_npz, tmp_path):
    assert_usage_error(
        capsys,
        ["report", vocabulary_npz, "--methods", "TemperatureScaling"],
        "ambiguous",
        "--classes index",
    )
    single = tmp_path / "one.npz"
    data = np.load(vocabulary_npz)
    np.savez(single, logits=data["logits_val"], y=data["y_val"])
    assert_usage_error(
        capsys,
        _fit_args(single, "t.skops", method="TemperatureScaling"),
        "ambiguous",
        "--classes index",
    )


def test_labels_of_one_class_name_the_option(capsys, tmp_path):
    # The library's "Pass classes=" (capitalised) did not get the command
    # line's hint: fit and report told a command-line user to pass a Python
    # argument, not --classes.
    logits = np.random.default_rng(0).normal(size=(20, 3))
    np.savez(tmp_path / "one.npz", logits=logits, y=np.zeros(20, dtype=int))
    for args in (
        _fit_args(tmp_path / "one.npz", tmp_path / "t.skops", method="temp"),
        ["report", tmp_path / "one.npz", "--methods", "temp", "--cv", "2"],
    ):
        assert_usage_error(capsys, args, "only 1 class", "--classes index")
    status, _, err = call(
        capsys,
        *_fit_args(tmp_path / "one.npz", tmp_path / "t.skops", method="temp"),
        "--classes",
        "index",
    )
    assert status == 0, err


def test_report_with_classes_equals_the_python_api(capsys, vocabulary_npz, vocabulary):
    logits, y = vocabulary
    report = _report(
        capsys, vocabulary_npz, "--methods", "TemperatureScaling", "--classes", "index"
    )
    columns = np.arange(N_COLUMNS)
    ts = TemperatureScaling(device="cpu", classes=columns).fit(logits[:200], y[:200])
    proba = ts.predict_proba(logits[200:])
    row = report["results"][1]
    assert row["note"] == ""
    assert row["nll"] == pytest.approx(
        metrics.log_loss(y[200:], proba, labels=columns), rel=1e-6
    )
    assert row["ece"] == pytest.approx(
        metrics.expected_calibration_error(y[200:], proba, labels=columns), rel=1e-6
    )
    # 1-based: the same columns read as labels 1..300, so every label moves.
    shifted = _report(
        capsys,
        vocabulary_npz,
        "--methods",
        "TemperatureScaling",
        "--classes",
        "1-based",
    )
    assert shifted["results"][1]["accuracy"] < row["accuracy"]


def test_report_val_split_lacking_a_test_class_still_fits(capsys, tmp_path):
    # The labels of both splits resolve the classes; the val split alone may
    # lack one (here class 0): each method still fits on it.
    rng = np.random.default_rng(2)
    y = rng.integers(0, 4, size=500)
    logits = rng.normal(size=(500, 4)) + 2.0 * np.eye(4)[y]
    val = y[:250] != 0
    keep = np.r_[val, np.ones(250, bool)]
    path = save_two_splits(tmp_path / "lack.npz", logits[keep], y[keep], val.sum())
    report = _report(capsys, path, "--methods", "TemperatureScaling,VectorScaling")
    for row in report["results"][1:]:
        assert row["nll"] is not None, row["note"]
    # Cross-validated: folds of one split may lack a class as well.
    single = tmp_path / "single.npz"
    np.savez(single, logits=logits[:40], y=np.r_[np.zeros(4, int), y[4:40] % 3 + 1])
    report = _report(capsys, single, "--methods", "TemperatureScaling", "--cv", "5")
    assert report["results"][1]["nll"] is not None, report["results"][1]["note"]


def test_fit_with_classes(capsys, tmp_path, vocabulary):
    skops = pytest.importorskip("skops.io")
    from sklearn_calib.utils.persistence import skops_trusted_types

    logits, y = vocabulary
    data = tmp_path / "val.npz"
    np.savez(data, logits=logits[:200], y=y[:200])
    out = tmp_path / "vs.skops"
    status, _, err = call(capsys, *_fit_args(data, out, "--classes", "index"))
    assert status == 0, err
    fitted = skops.load(out, trusted=skops_trusted_types())
    np.testing.assert_array_equal(fitted.classes_, np.arange(N_COLUMNS))
    expected = VectorScaling(classes=np.arange(N_COLUMNS)).fit(logits[:200], y[:200])
    np.testing.assert_allclose(
        fitted.predict_proba(logits[200:]), expected.predict_proba(logits[200:])
    )
    assert_usage_error(
        capsys,
        _fit_args(data, tmp_path / "a.skops", "--classes", "1,2,3"),
        "--classes",
        f"{N_COLUMNS} comma-separated labels",
    )
    both = ("--classes", "index", "--param", "classes=[0, 1]")
    assert_usage_error(
        capsys,
        _fit_args(data, tmp_path / "b.skops", *both),
        "--classes or --param, not both",
    )


def test_named_classes_in_column_order(capsys, tmp_path):
    # String labels in column order, not sorted; the split lacks "ant".
    rng = np.random.default_rng(5)
    codes = rng.integers(1, 3, size=300)
    logits = rng.normal(size=(300, 3)) + 2.0 * np.eye(3)[codes]
    names = np.array(["cow", "bee", "ant"])
    path = tmp_path / "named.npz"
    save_two_splits(path, logits, names[codes], 150)
    report = _report(
        capsys, path, "--methods", "TemperatureScaling", "--classes", "cow,bee,ant"
    )
    proba = (
        TemperatureScaling(device="cpu", classes=names)
        .fit(logits[:150], names[codes[:150]])
        .predict_proba(logits[150:])
    )
    expected = metrics.log_loss(names[codes[150:]], proba, labels=names)
    assert report["results"][1]["nll"] == pytest.approx(expected, rel=1e-6)


def test_chunked_report_and_fit_with_classes(capsys, tmp_path, vocabulary):
    logits, y = vocabulary
    folder = tmp_path / "chunks"
    write_npz_chunks(folder / "val", logits[:200], y[:200])
    write_npz_chunks(folder / "test", logits[200:], y[200:])
    in_memory = save_two_splits(tmp_path / "vocab.npz", logits, y, 200)
    args = ("--methods", "TemperatureScaling", "--classes", "index")
    chunked = _report(capsys, folder, *args)["results"][1]
    memory = _report(capsys, in_memory, *args)["results"][1]
    for key in ("ece", "adaptive_ece", "nll", "brier", "accuracy"):
        assert chunked[key] == pytest.approx(memory[key], rel=1e-6), key
    fit = _fit_args(folder / "val", tmp_path / "ts.skops", "--classes", "index")
    status, _, err = call(capsys, *fit)
    assert status == 0, err
