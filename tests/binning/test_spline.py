"""SplineCalibration: its defining properties, a dense-grid solve and probmetrics.

References: the continuous least-squares fit recomputed on a dense grid of
the fractile axis with numpy's lstsq and scipy's CubicSpline, and
probmetrics' ``CDFSplineCalibrator`` (a port of the authors' code).
"""

import numpy as np
import pytest
from scipy.interpolate import CubicSpline
from scipy.special import logsumexp, softmax
from sklearn.isotonic import isotonic_regression

from sklearn_calib import SplineCalibration, TemperatureScaling
from sklearn_calib._binning.spline import fit_spline_table
from sklearn_calib.metrics import expected_calibration_error, log_loss
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared
from .test_binning import _tied_at_the_top


def _top_label(logits, y):
    proba = softmax(np.asarray(logits, dtype=np.float64), axis=1)
    return proba.max(axis=1), (proba.argmax(axis=1) == y).astype(float)


def _log_complement(logits):
    """log(1 - p) of the top label, from the logits: the log of the other
    classes' total, by scipy's logsumexp (exact where p rounds to 1)."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.argmax(axis=1)
    others = z.copy()
    others[np.arange(len(z)), top] = -np.inf
    return logsumexp(others, axis=1) - logsumexp(z, axis=1)


def _table(spline, log_complement):
    """The fitted table, linear in p between its points, read at log(1 - p).

    The segment is located by log(1 - p) and the weight (p - p0) / (p1 - p0)
    computed in extended precision: no float64 p, whose rounding near 1
    would pick a neighbouring segment.
    """
    u = spline.log_complements_[::-1]
    v = spline.calibrated_[::-1]
    i = np.clip(np.searchsorted(u, log_complement, side="right"), 1, len(u) - 1)
    complement = np.exp(np.asarray(log_complement, dtype=np.longdouble))
    c0 = np.exp(u[i - 1].astype(np.longdouble))
    c1 = np.exp(u[i].astype(np.longdouble))
    weight = np.clip((c0 - complement) / (c0 - c1), 0, 1)
    return (v[i - 1] + weight * (v[i] - v[i - 1])).astype(np.float64)


def test_fit_equals_dense_grid_least_squares():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.3, 1.0, size=300)
    correct = (rng.random(300) < confidence**2).astype(float)
    weights = rng.integers(1, 4, size=300).astype(float)
    u, x, values, knot_values, _ = fit_spline_table(
        np.log1p(-confidence), correct, weights, 6
    )
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
    assert x.shape == values.shape and np.all(np.diff(u) < 0)
    np.testing.assert_allclose(x, np.sort(confidence), rtol=1e-14)


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
    # The recalibrated confidence is the monotone map g of the raw one, read
    # at log(1 - p), except where g would drop the top class below the
    # rescaled runner-up (then it is floored at that tie): max(g, tie).
    # log(1 - p) from the logits keeps apart the confidences near 1 that
    # float64 rounds together (c10_densenet40_guo: 4198 distinct confidences
    # among 5000, 406 of them 1), so any softmax reads the same segment.
    raw = softmax(test, axis=1)
    top2 = np.sort(raw, axis=1)[:, -2:]
    log_complement = _log_complement(test)
    mapped = _table(spline, log_complement)
    tie = top2[:, 0] / (1 - top2[:, 1] + top2[:, 0])
    np.testing.assert_allclose(
        proba.max(axis=1), np.maximum(mapped, tie), rtol=1e-8, atol=1e-12
    )
    order = np.argsort(-log_complement, kind="stable")
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
    ours = _table(spline, _log_complement(data["logits_test"]))
    # Same spline; the paper's points t = i / (N - 1) against the continuous
    # fractiles here differ by O(1 / N): measured 2.1e-4 and 1.5e-4.
    np.testing.assert_allclose(ours, np.clip(expected, 0, 1), atol=5e-4)


def test_other_classes_rescaled_proportionally():
    logits, y = make_logits(n_samples=2000, n_classes=4, overconfidence=3.0, seed=0)
    spline = SplineCalibration().fit(logits, y)
    proba = spline.predict_proba(logits[:100])
    raw = softmax(logits[:100], axis=1)
    top = raw.argmax(axis=1)
    rows = np.arange(100)
    new_conf = _table(spline, _log_complement(logits[:100]))
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


def test_tied_top_columns_in_any_order():
    # A quarter of the rows tie at the top, between two or three columns.
    # The first tied column was "the prediction", at fit and at predict, so
    # permuting the columns (and the labels) moved those rows by up to 0.15
    # on llmub_llama2_13b_emotion. A tied row now counts 1 / t correct when
    # the label is among its t top columns, and each gets the new confidence.
    torch = pytest.importorskip("torch")
    X, y = _tied_at_the_top()
    is_top = X == X.max(axis=1, keepdims=True)
    n_top = is_top.sum(axis=1)
    assert 100 < (n_top > 1).sum() < 400
    order = np.array([2, 0, 3, 1])
    spline = SplineCalibration().fit(X, y)
    proba = spline.predict_proba(X)
    permuted = SplineCalibration().fit(X[:, order], np.argsort(order)[y])
    np.testing.assert_allclose(
        permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-12, atol=1e-15
    )
    top = np.where(is_top, proba, np.nan)
    np.testing.assert_array_equal(np.nanmax(top, axis=1), np.nanmin(top, axis=1))
    # still above every other class, and at most 1 / t
    assert np.all(np.nanmin(top, axis=1) > np.where(is_top, 0, proba).max(axis=1))
    assert np.all(np.nanmax(top, axis=1) <= 1 / n_top)
    np.testing.assert_array_equal(spline.predict(X), X.argmax(axis=1))
    # the fit: the same table as from hits of 1 / t
    hits = np.where(n_top > 1, is_top[np.arange(len(y)), y] / n_top, X.argmax(1) == y)
    u, _, values, _, mass = fit_spline_table(
        _log_complement(X), hits.astype(float), np.ones(len(y)), spline.n_knots
    )
    np.testing.assert_allclose(spline.log_complements_, u, rtol=1e-13)
    expected = np.clip(isotonic_regression(values, sample_weight=mass), 0, 1)
    np.testing.assert_allclose(spline.calibrated_, expected, rtol=1e-12)
    with torch.no_grad():
        exported = spline.to_torch()(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(exported, spline.transform(X), rtol=1e-12, atol=1e-14)


def test_equal_confidences_group_in_any_column_order():
    # Integer logits (no tie at the top): many rows hold the same logits in
    # another order, hence the same confidence, which the table pools. Their
    # log(1 - p) was summed in column order, an ulp apart between such rows
    # and changed by a permutation of the classes, which split or joined the
    # groups: probabilities 1.5e-3 apart.
    X, y = make_logits(n_samples=2000, n_classes=4, seed=12)
    X = np.round(X)
    single = (X == X.max(axis=1, keepdims=True)).sum(axis=1) == 1
    X, y = X[single], y[single]
    order = np.array([2, 0, 3, 1])
    proba = SplineCalibration().fit(X, y).predict_proba(X)
    permuted = SplineCalibration().fit(X[:, order], np.argsort(order)[y])
    np.testing.assert_allclose(
        permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-9, atol=1e-15
    )


def test_confidences_an_ulp_apart_near_one_stay_distinct_points():
    # Two rows whose top-label confidences float64 rounds to the same value
    # (1 - p of 1e-17 and 2e-17) but whose log(1 - p) differ: two table
    # points, and each row reads its own.
    logits, y = make_logits(n_samples=400, n_classes=3, seed=8)
    extreme = np.array([[39.1439465808988, 0.0, 0.0], [38.4507994003388, 0.0, 0.0]])
    assert np.all(softmax(extreme, axis=1)[:, 0] == 1.0)
    X = np.vstack([logits, extreme])
    spline = SplineCalibration(monotonic=False).fit(X, np.r_[y, 0, 1])
    u = _log_complement(extreme)
    assert u[0] != u[1]
    assert set(u) <= set(spline.log_complements_)
    i = [np.flatnonzero(spline.log_complements_ == v)[0] for v in u]
    expected = np.minimum(spline.calibrated_[i], 1 - 1e-12)
    np.testing.assert_allclose(
        spline.predict_proba(extreme)[:, 0], expected, rtol=1e-15
    )


def test_state_of_an_earlier_version_loads():
    # Files written before the table was kept in log(1 - p) hold only the
    # strictly increasing confidences_: the table is rebuilt from them.
    import pickle

    logits, y = make_logits(n_samples=1000, n_classes=4, seed=9)
    spline = SplineCalibration().fit(logits, y)
    old = pickle.loads(pickle.dumps(spline))
    state = old.__getstate__()
    del state["log_complements_"]
    restored = SplineCalibration.__new__(SplineCalibration)
    restored.__setstate__(state)
    # 1 - p as well as a float64 p holds it (absolutely, to ~1e-16).
    np.testing.assert_allclose(
        np.exp(restored.log_complements_),
        np.exp(spline.log_complements_),
        rtol=0,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        restored.predict_proba(logits), spline.predict_proba(logits), rtol=1e-9
    )


@pytest.mark.parametrize("tiny", [1e-13, 1e-20])
def test_a_tiny_weight_takes_the_spline_slope_at_its_point(tiny):
    # A row of weight w occupies w / W of the fractile axis: its value is
    # p + (g(t1) - g(t0)) / (t1 - t0), which cancelled for w = 1e-13 among
    # 300 unit weights (1e-3 off) and was 0 / 0 below eps (a ValueError
    # "Input y contains NaN", or NaN probabilities without the projection).
    # The limit is the slope of the fitted spline at the row's fractile.
    logits, y = make_logits(n_samples=300, n_classes=3, seed=4)
    confidence, correct = _top_label(logits, y)
    light = np.argsort(confidence)[[40, 150, 290]]
    weights = np.ones(300)
    weights[light] = tiny
    spline = SplineCalibration(monotonic=False).fit(logits, y, sample_weight=weights)
    g = CubicSpline(np.linspace(0, 1, 6), spline.knot_values_, bc_type="natural")
    heavier = weights[None, :] * (confidence[None, :] < confidence[light, None])
    t = heavier.sum(axis=1) / weights.sum()
    u = _log_complement(logits[light])
    points = np.abs(spline.log_complements_[None, :] - u[:, None]).argmin(axis=1)
    np.testing.assert_allclose(spline.log_complements_[points], u, rtol=1e-12)
    np.testing.assert_allclose(
        spline.calibrated_[points],
        np.clip(confidence[light] + g(t, 1), 0, 1),
        rtol=0,
        atol=1e-9,
    )
    assert np.all(np.isfinite(spline.predict_proba(logits)))
    # The projection on the monotone maps fits as well.
    SplineCalibration().fit(logits, y, sample_weight=weights)
