"""SplineCalibration: its defining properties, a dense-grid solve and probmetrics.

References: the continuous least-squares fit recomputed on a dense grid of
the fractile axis with numpy's lstsq and scipy's CubicSpline, and
probmetrics' ``CDFSplineCalibrator`` (a port of the authors' code).
"""

import numpy as np
import pytest
from scipy.interpolate import CubicSpline
from scipy.special import softmax

from sklearn_calib import SplineCalibration, TemperatureScaling
from sklearn_calib._spline import fit_spline_table
from sklearn_calib.metrics import expected_calibration_error, log_loss
from sklearn_calib.utils._math import log_softmax
from sklearn_calib.utils._testing import make_logits

from .conftest import load_shared


def _top_label(logits, y):
    proba = softmax(np.asarray(logits, dtype=np.float64), axis=1)
    return proba.max(axis=1), (proba.argmax(axis=1) == y).astype(float)


def test_fit_equals_dense_grid_least_squares():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.3, 1.0, size=300)
    correct = (rng.random(300) < confidence**2).astype(float)
    weights = rng.integers(1, 4, size=300).astype(float)
    x, values, knot_values, _ = fit_spline_table(confidence, correct, weights, 6)
    # D(t) on a fine grid, from the sorted (weighted) samples.
    order = np.argsort(confidence)
    mass = weights[order] / weights.sum()
    t = np.concatenate([[0.0], np.cumsum(mass)])
    d = np.concatenate([[0.0], np.cumsum(mass * (correct[order] - confidence[order]))])
    grid = (np.arange(400_000) + 0.5) / 400_000
    target = np.interp(grid, t, d)
    knots = np.linspace(0, 1, 6)
    design = CubicSpline(knots, np.eye(6), bc_type="natural")(grid)
    reference = np.linalg.lstsq(design, target, rcond=None)[0]
    np.testing.assert_allclose(knot_values, reference, atol=1e-7)
    assert x.shape == values.shape and np.all(np.diff(x) > 0)


@pytest.mark.parametrize(
    "name", ["c10_densenet40_guo", "c100_densenetbc100_netcal", "c10_lenet5_netcal"]
)
def test_keeps_argmax_monotone_and_reduces_ece(name):
    data = load_shared(name)
    spline = SplineCalibration().fit(data["logits_val"], data["y_val"])
    test = data["logits_test"].astype(np.float64)
    proba = spline.predict_proba(test)
    np.testing.assert_array_equal(proba.argmax(axis=1), test.argmax(axis=1))
    assert np.all(np.diff(spline.calibrated_) >= 0)
    # The recalibrated confidence is the monotone map g of the raw one, except
    # where g would drop the top class below the rescaled runner-up (then it
    # is floored at that tie): max(g(p), tie).
    # The confidence as the calibrator computes it, exp(log_softmax): near 1
    # the table's points are distinct calibration confidences an ulp apart,
    # so a softmax rounded differently (scipy's, at the numpy 1.24 floor)
    # lands on a neighbouring segment and moves g(p) by up to 6e-8.
    raw = np.exp(log_softmax(test.copy()))
    top2 = np.sort(raw, axis=1)[:, -2:]
    mapped = np.interp(top2[:, 1], spline.confidences_, spline.calibrated_)
    tie = top2[:, 0] / (1 - top2[:, 1] + top2[:, 0])
    np.testing.assert_allclose(
        proba.max(axis=1), np.maximum(mapped, tie), rtol=1e-8, atol=1e-12
    )
    order = np.argsort(top2[:, 1], kind="stable")
    assert np.all(np.diff(mapped[order]) >= 0)
    y = data["y_test"]
    raw_ece = expected_calibration_error(y, softmax(test, axis=1))
    assert expected_calibration_error(y, proba) < 0.5 * raw_ece


def test_close_to_temperature_scaling_on_real_logits():
    data = load_shared("c10_resnet50_cross_entropy_smart")
    y = data["y_test"]
    test = data["logits_test"].astype(np.float64)
    spline = SplineCalibration().fit(data["logits_val"], data["y_val"])
    ts = TemperatureScaling(device="cpu").fit(data["logits_val"], data["y_val"])
    ece_spline = expected_calibration_error(y, spline.predict_proba(test))
    ece_ts = expected_calibration_error(y, ts.predict_proba(test))
    assert ece_spline < ece_ts + 0.005
    assert log_loss(y, spline.predict_proba(test)) < 1.1 * log_loss(
        y, ts.predict_proba(test)
    )


# Sets without tied calibration confidences: where float64 confidences tie
# (c10_densenet40_guo: 800 of 5000 round to 1 - 2e-12 or above), the authors'
# code orders tied samples arbitrarily on the fractile axis, and here a tie
# is one group.
@pytest.mark.parametrize("name", ["c10_resnet56_chenyaofo", "c100_resnet56_chenyaofo"])
def test_matches_probmetrics_cdf_spline(name):
    pytest.importorskip("probmetrics")
    from probmetrics.calibrators import CDFSplineCalibrator

    data = load_shared(name)
    conf_val, correct_val = _top_label(data["logits_val"], data["y_val"])
    assert np.unique(conf_val).shape[0] == conf_val.shape[0]
    conf_test, _ = _top_label(data["logits_test"], data["y_test"])
    reference = CDFSplineCalibrator()
    reference.fit(conf_val, correct_val.astype(int))
    expected = reference.predict_proba(conf_test)[:, 1]
    spline = SplineCalibration(monotonic=False).fit(data["logits_val"], data["y_val"])
    ours = np.interp(conf_test, spline.confidences_, spline.calibrated_)
    # Same spline; the paper's points t = i / (N - 1) against the continuous
    # fractiles here differ by O(1 / N): measured 1.5e-4 and 2.1e-4.
    np.testing.assert_allclose(ours, np.clip(expected, 0, 1), atol=5e-4)


def test_other_classes_rescaled_proportionally():
    logits, y = make_logits(n_samples=2000, n_classes=4, overconfidence=3.0, seed=0)
    spline = SplineCalibration().fit(logits, y)
    proba = spline.predict_proba(logits[:100])
    raw = softmax(logits[:100], axis=1)
    top = raw.argmax(axis=1)
    rows = np.arange(100)
    new_conf = np.interp(raw[rows, top], spline.confidences_, spline.calibrated_)
    second = np.sort(raw, axis=1)[:, -2]
    # Floored just above the rescaled runner-up's tie, so the argmax stays.
    tie = second / (1 - raw[rows, top] + second)
    new_conf = np.maximum(new_conf, tie * (1 + 1e-9))
    np.testing.assert_allclose(proba[rows, top], new_conf, rtol=1e-10)
    others = raw.copy()
    others[rows, top] = 0
    expected = others * ((1 - new_conf) / (1 - raw[rows, top]))[:, None]
    mask = np.ones_like(raw, dtype=bool)
    mask[rows, top] = False
    np.testing.assert_allclose(proba[mask], expected[mask], rtol=1e-8)


def test_monotonic_projection_only_changes_a_decreasing_map():
    logits, y = make_logits(n_samples=3000, n_classes=3, overconfidence=2.0, seed=4)
    free = SplineCalibration(monotonic=False).fit(logits, y)
    projected = SplineCalibration().fit(logits, y)
    if np.all(np.diff(free.calibrated_) >= 0):
        np.testing.assert_array_equal(free.calibrated_, projected.calibrated_)
    assert np.all(np.diff(projected.calibrated_) >= 0)
    # With many knots on few samples the raw spline map does decrease somewhere.
    small = SplineCalibration(monotonic=False, n_knots=30).fit(logits[:150], y[:150])
    assert np.any(np.diff(small.calibrated_) < 0)
    fixed = SplineCalibration(n_knots=30).fit(logits[:150], y[:150])
    assert np.all(np.diff(fixed.calibrated_) >= 0)


def test_masked_logits_keep_probability_zero():
    logits, y = make_logits(n_samples=1000, n_classes=4, seed=5)
    spline = SplineCalibration().fit(logits, y)
    rows = np.array([[2.0, -np.inf, 0.5, -1.0], [-np.inf, 3.0, -np.inf, -np.inf]])
    out = spline._calibrated_logits(rows)
    assert out[0, 1] == -np.inf
    assert np.all(np.isfinite(out[0, [0, 2, 3]]))
    np.testing.assert_array_equal(np.exp(out[1]), [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(np.exp(out[0]).sum(), 1.0)


def test_extreme_confidence_keeps_finite_log_probabilities():
    logits, y = make_logits(n_samples=1000, n_classes=4, seed=6)
    spline = SplineCalibration().fit(logits, y)
    extreme = np.array([[500.0, -500.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    out = spline.transform(extreme)
    assert np.all(np.isfinite(out))
    assert out[0].argmax() == 0


def test_to_torch_keeps_masked_logits_at_zero():
    torch = pytest.importorskip("torch")
    logits, y = make_logits(n_samples=1000, n_classes=4, seed=7)
    spline = SplineCalibration().fit(logits, y)
    rows = np.array([[2.0, -np.inf, 0.5, -1.0], [-np.inf, 3.0, -np.inf, -np.inf]])
    expected = spline._calibrated_logits(rows)
    with torch.no_grad():
        out = spline.to_torch()(torch.from_numpy(rows)).numpy()
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(out[finite], expected[finite], rtol=1e-12, atol=1e-15)
