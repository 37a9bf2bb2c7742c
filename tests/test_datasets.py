"""The bundled real logits: contents, licences, packaging and reference figures."""

import fnmatch
from pathlib import Path

import numpy as np
import pytest
import tomllib

import sklearn_calib
from sklearn_calib.datasets import list_logits, load_logits

DATA_DIR = Path(sklearn_calib.__file__).parent / "datasets" / "data"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

# Figures from shared/data/PROVENANCE.md (and the papers it cites): test
# accuracy, top-label ECE in % with 15 equal-width bins before and after
# temperature scaling, and the temperature fitted on the val part.
REFERENCE = {
    "c10_resnet50_cross_entropy_smart": (10, 5000, 10000, 0.9505, 4.35, 2.4975),
    "c10_densenet40_guo": (10, 5000, 10000, 0.9242, 5.50, 2.8826),
    "c100_densenetbc100_netcal": (100, 5000, 5000, 0.7580, 13.99, 2.1178),
}


def top_label_ece_loop(y, proba, n_bins=15):
    """Plain loop over (lo, hi] bins; a confidence of 0 joins the first bin."""
    confidence = proba.max(axis=1)
    correct = proba.argmax(axis=1) == y
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [
            i
            for i, c in enumerate(confidence)
            if (lo < c <= hi) or (b == 0 and c == 0.0)
        ]
        if members:
            gap = correct[members].mean() - confidence[members].mean()
            total += len(members) / len(y) * abs(gap)
    return total


def softmax64(logits):
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def test_list_logits_matches_the_shipped_files():
    shipped = sorted(p.stem for p in DATA_DIR.glob("*.npz"))
    assert list_logits() == shipped
    assert set(shipped) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_arrays_shapes_and_types(name):
    n_classes, n_val, n_test, *_ = REFERENCE[name]
    data = load_logits(name)
    assert data.logits_val.shape == (n_val, n_classes)
    assert data.logits_test.shape == (n_test, n_classes)
    assert data.y_val.shape == (n_val,) and data.y_test.shape == (n_test,)
    assert data.logits_val.dtype == np.float32 and data.logits_test.dtype == np.float32
    assert data.y_val.dtype == np.int64 and data.y_test.dtype == np.int64
    assert np.all(np.isfinite(data.logits_val)) and np.all(
        np.isfinite(data.logits_test)
    )
    for y in (data.y_val, data.y_test):
        assert y.min() == 0 and y.max() == n_classes - 1
    assert data.name == name


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_accuracy_and_ece(name):
    _, _, _, accuracy, ece_percent, _ = REFERENCE[name]
    data = load_logits(name)
    measured = np.mean(data.logits_test.argmax(axis=1) == data.y_test)
    assert measured == pytest.approx(accuracy, abs=5e-5)
    ece = top_label_ece_loop(data.y_test, softmax64(data.logits_test))
    assert 100 * ece == pytest.approx(ece_percent, abs=0.006)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_temperature(name):
    from sklearn_calib import TemperatureScaling

    data = load_logits(name)
    ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
    assert ts.temperature_ == pytest.approx(REFERENCE[name][-1], abs=1e-3)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_same_arrays_as_the_shared_copy(name, shared_data):
    reference = shared_data(name)
    data = load_logits(name)
    for key in ("logits_val", "y_val", "logits_test", "y_test"):
        np.testing.assert_array_equal(data[key], reference[key])


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_licence_and_description(name):
    data = load_logits(name)
    assert data.license in {"MIT", "Apache-2.0"}
    if data.license == "MIT":
        assert data.license_text.startswith("MIT License")
        assert "Copyright (c)" in data.license_text
        assert "Permission is hereby granted, free of charge" in data.license_text
    else:
        assert "Apache License" in data.license_text
        assert "Version 2.0, January 2004" in data.license_text
        assert "END OF TERMS AND CONDITIONS" in data.license_text
    assert name in data.DESCR and data.license in data.DESCR
    accuracy = REFERENCE[name][3]
    assert f"{100 * accuracy:.2f}%" in data.DESCR
    assert data.source


def test_attribution_readme_names_every_file_and_licence():
    readme = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    for name in list_logits():
        assert f"{name}.npz" in readme
        assert load_logits(name).license in readme
    for licence_file in DATA_DIR.glob("LICENSE*.txt"):
        assert licence_file.name in readme


def test_package_data_ships_every_data_file():
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["sklearn_calib.datasets"]
    for path in DATA_DIR.iterdir():
        relative = f"data/{path.name}"
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


def test_files_hold_no_pickled_objects():
    for path in DATA_DIR.glob("*.npz"):
        with np.load(path, allow_pickle=False) as archive:
            assert sorted(archive.files) == [
                "logits_test",
                "logits_val",
                "y_test",
                "y_val",
            ]
            for key in archive.files:
                assert archive[key].dtype != object


def test_loads_are_independent_copies():
    first = load_logits("c10_resnet50_cross_entropy_smart")
    first.logits_val[:] = 0.0
    second = load_logits("c10_resnet50_cross_entropy_smart")
    assert np.any(second.logits_val != 0.0)


def test_unknown_name_lists_the_available_sets():
    with pytest.raises(ValueError, match="c10_resnet50_cross_entropy_smart"):
        load_logits("imagenet")


def test_default_is_cifar100():
    assert load_logits().name == "c100_densenetbc100_netcal"


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_description_figures_are_reproduced_by_the_library(name):
    from sklearn_calib import TemperatureScaling
    from sklearn_calib.metrics import expected_calibration_error, log_loss

    data = load_logits(name)
    ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
    raw = softmax64(data.logits_test)
    calibrated = ts.predict_proba(data.logits_test.astype(np.float64))
    shown = (
        f"- test NLL: {log_loss(data.y_test, raw):.4f} raw, "
        f"{log_loss(data.y_test, calibrated):.4f} after temperature scaling"
    )
    assert shown in data.DESCR
    ece = (
        f"{100 * expected_calibration_error(data.y_test, raw):.2f}% raw, "
        f"{100 * expected_calibration_error(data.y_test, calibrated):.2f}% after"
    )
    assert ece in data.DESCR
