"""IsotonicCalibration and HistogramBinning against independent references."""

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.isotonic import IsotonicRegression

from sklearn_calib import HistogramBinning, IsotonicCalibration
from sklearn_calib.metrics import expected_calibration_error
from sklearn_calib.utils._testing import make_logits

from .conftest import load_shared


def test_isotonic_ovr_matches_sklearn_isotonic_regression():
    X, y = make_logits(n_samples=800, n_classes=4, seed=3)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    iso = IsotonicCalibration().fit(X, y, sample_weight=weights)
    X_new, _ = make_logits(n_samples=300, n_classes=4, seed=4)
    proba_new = softmax(X_new, axis=1)
    expected = np.column_stack(
        [
            IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")
            .fit(softmax(X, axis=1)[:, k], y == k, sample_weight=weights)
            .predict(proba_new[:, k])
            for k in range(4)
        ]
    )
    expected = np.maximum(expected, 1e-12)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(iso.predict_proba(X_new), expected, rtol=1e-10, atol=1e-12)


def test_isotonic_top_label_maps_confidence():
    X, y = make_logits(n_samples=1000, n_classes=5, seed=5)
    iso = IsotonicCalibration(mode="top_label").fit(X, y)
    proba = softmax(X, axis=1)
    predicted = proba.argmax(1)
    confidence = proba.max(axis=1)
    reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(
        confidence, predicted == y
    )
    calibrated = iso.predict_proba(X)
    rows = np.arange(len(y))
    np.testing.assert_allclose(
        calibrated[rows, predicted], reference.predict(confidence), atol=1e-9
    )
    # The other classes keep their ratios (rows with room left below the top).
    keep = (1 - confidence > 1e-6) & (reference.predict(confidence) < 1 - 1e-6)
    others, ref_others = calibrated.copy(), proba.copy()
    others[rows, predicted] = ref_others[rows, predicted] = 0
    np.testing.assert_allclose(
        (others / others.sum(1, keepdims=True))[keep],
        (ref_others / ref_others.sum(1, keepdims=True))[keep],
        rtol=1e-6,
        atol=1e-9,
    )


def _histogram_reference(scores, targets, n_bins):
    """Slow loop: (lo, hi] bins, 0 in the first bin, empty bins at their mid-point."""
    edges = np.linspace(0, 1, n_bins + 1)
    values = []
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        inside = (scores > lo) & (scores <= hi) if b > 0 else (scores <= hi)
        values.append(targets[inside].mean() if inside.any() else 0.5 * (lo + hi))
    return edges, np.array(values)


def test_histogram_binning_uniform_matches_reference_loop():
    X, y = make_logits(n_samples=600, n_classes=3, seed=7)
    hb = HistogramBinning(n_bins=10).fit(X, y)
    proba = softmax(X, axis=1)
    for k in range(3):
        edges, values = _histogram_reference(proba[:, k], (y == k).astype(float), 10)
        np.testing.assert_allclose(hb.bin_edges_[k], edges)
        np.testing.assert_allclose(hb.bin_values_[k], values, rtol=1e-12)


def test_histogram_binning_hand_computed_binary():
    # scores of the positive class (logits (0, s)): p = sigmoid(s)
    p = np.array([0.05, 0.15, 0.3, 0.35, 0.8, 0.9, 1.0])
    s = np.log(p / np.clip(1 - p, 1e-300, None))
    s[-1] = 50.0
    y = np.array([0, 0, 1, 0, 1, 1, 1])
    hb = HistogramBinning(n_bins=2).fit(s[:, None], y)
    # class 1 bins: (0, .5] holds .05 .15 .3 .35 -> 1/4 positive; (.5, 1] -> 3/3
    np.testing.assert_allclose(hb.bin_values_[1], [0.25, 1.0])


def test_histogram_quantile_bins_hold_equal_mass():
    X, y = make_logits(n_samples=1500, n_classes=3, seed=8)
    hb = HistogramBinning(n_bins=5, strategy="quantile").fit(X, y)
    for k in range(3):
        assert np.allclose(hb.bin_counts_[k], 300, atol=2)


def test_calibrated_logs_are_finite_with_empty_classes():
    X, y = make_logits(n_samples=300, n_classes=4, seed=1)
    for model in (IsotonicCalibration(), HistogramBinning(), HistogramBinning(mode="top_label")):
        model.fit(X, y)
        assert np.all(np.isfinite(model.transform(X * 100)))


@pytest.mark.parametrize("model", [IsotonicCalibration(), HistogramBinning(n_bins=15)])
def test_improves_ece_on_real_logits(model):
    data = load_shared("c10_densenet40_guo")
    proba_raw = softmax(data["logits_test"].astype(np.float64), axis=1)
    model.fit(data["logits_val"], data["y_val"])
    raw = expected_calibration_error(data["y_test"], proba_raw)
    calibrated = expected_calibration_error(
        data["y_test"], model.predict_proba(data["logits_test"].astype(np.float64))
    )
    assert calibrated < raw
