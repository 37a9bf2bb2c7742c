"""Calibration metrics against hand-computed values, slow reference loops and peers."""

import warnings

import numpy as np
import pytest
from sklearn.calibration import calibration_curve as sklearn_calibration_curve
from sklearn.metrics import brier_score_loss
from sklearn.metrics import log_loss as sklearn_log_loss

from sklearn_calib.metrics import (
    adaptive_calibration_error,
    bootstrap_interval,
    brier_score,
    brier_score_decomposition,
    calibration_curve,
    calibration_report,
    classwise_calibration_error,
    expected_calibration_error,
    flexible_calibration_curve,
    log_loss,
    maximum_calibration_error,
    rms_calibration_error,
    smooth_calibration_error,
)
from sklearn_calib.metrics._bin_statistics import top_label, uniform_bin_index
from sklearn_calib.metrics._bootstrap import counts_of, resample_indices
from sklearn_calib.metrics._report import REPORT_METRICS
from sklearn_calib.metrics._smooth_curve import weighted_quantile
from sklearn_calib.utils.discovery import all_metrics


def make_probabilities(n_samples=500, n_classes=4, *, scale=3.0, seed=0):
    """Over-confident softmax probabilities: labels drawn from a softened softmax."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n_samples, n_classes)) * scale
    proba = np.exp(z)
    proba /= proba.sum(axis=1, keepdims=True)
    softer = np.exp(z / 2)
    softer /= softer.sum(axis=1, keepdims=True)
    y = (rng.random((n_samples, 1)) > softer.cumsum(axis=1)).sum(axis=1)
    return proba, np.minimum(y, n_classes - 1)


# --- slow, pure-Python references -------------------------------------------------


def _first_argmax(row):
    best = 0
    for k in range(1, len(row)):
        if row[k] > row[best]:
            best = k
    return best


def _top_label_pairs(y, proba):
    pairs = []
    for i in range(len(y)):
        k = _first_argmax(list(proba[i]))
        pairs.append((float(proba[i][k]), 1.0 if k == y[i] else 0.0))
    return pairs


def _uniform_bin(score, n_bins):
    """The bin b with b/M < score <= (b+1)/M, by explicit comparisons."""
    if score <= 1 / n_bins:
        return 0
    for b in range(1, n_bins):
        if b / n_bins < score <= (b + 1) / n_bins:
            return b
    return n_bins - 1


def _quantile_bins(scores, weights, n_bins):
    """Weighted inverted-cdf quantile edges, then (lo, hi] bins, by loops."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    total = sum(weights)
    edges = []
    for b in range(1, n_bins):
        cumulative = 0.0
        for i in order:
            cumulative += weights[i]
            if cumulative >= b / n_bins * total:
                edges.append(scores[i])
                break
    bins = []
    for s in scores:
        bins.append(sum(1 for e in edges if e < s))
    return bins


def _reference(pairs, weights, n_bins, strategy, kind):
    scores = [p for p, _ in pairs]
    if strategy == "uniform":
        bins = [_uniform_bin(s, n_bins) for s in scores]
    else:
        bins = _quantile_bins(scores, weights, n_bins)
    total = sum(weights)
    mass = [0.0] * n_bins
    conf = [0.0] * n_bins
    acc = [0.0] * n_bins
    for (p, a), b, w in zip(pairs, bins, weights, strict=True):
        mass[b] += w
        conf[b] += w * p
        acc[b] += w * a
    gaps = [
        (mass[b], abs(acc[b] / mass[b] - conf[b] / mass[b]))
        for b in range(n_bins)
        if mass[b] > 0
    ]
    if kind == "ece":
        return sum(m * g for m, g in gaps) / total
    if kind == "mce":
        return max(g for _, g in gaps)
    return (sum(m * g * g for m, g in gaps) / total) ** 0.5


def reference_metric(
    y,
    proba,
    *,
    n_bins=15,
    strategy="uniform",
    kind="ece",
    weights=None,
    classwise=False,
):
    weights = [1.0] * len(y) if weights is None else [float(w) for w in weights]
    if not classwise:
        return _reference(_top_label_pairs(y, proba), weights, n_bins, strategy, kind)
    per_class = []
    for k in range(proba.shape[1]):
        pairs = [(float(proba[i][k]), 1.0 if y[i] == k else 0.0) for i in range(len(y))]
        per_class.append(_reference(pairs, weights, n_bins, strategy, kind))
    return sum(per_class) / len(per_class)


# --- hand-computed cases ----------------------------------------------------------


@pytest.mark.parametrize(
    "y_prob",
    [[0.95, 1.0], [[0.05, 0.95], [0.0, 1.0]], [[0.95, 0.05, 0.0], [1.0, 0.0, 0.0]]],
    ids=["binary_column", "two_columns", "three_classes"],
)
def test_confidence_one_goes_into_last_bin(y_prob):
    # Confidences 0.95 (correct) and 1.0 (wrong) share the bin (0.9, 1.0]:
    # |0.5 - 0.975| = 0.475. A phantom bin for 1.0 would give 0.525.
    y = [1, 0] if np.ndim(y_prob) == 1 or np.shape(y_prob)[1] == 2 else [0, 1]
    assert expected_calibration_error(y, y_prob, n_bins=10) == pytest.approx(0.475)
    curve = calibration_curve(y, y_prob, n_bins=10)
    np.testing.assert_array_equal(curve.count, [0] * 9 + [2])


def test_zero_goes_into_first_bin_classwise():
    y_prob = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    curve = calibration_curve([1, 0, 1], y_prob, n_bins=4, multiclass="classwise")
    # Each class sees 0, 1 and 0.5: 0 -> bin 0, 0.5 -> (0.25, 0.5], 1 -> last.
    np.testing.assert_array_equal(curve.count, [[1, 1, 0, 1], [1, 1, 0, 1]])
    np.testing.assert_array_equal(curve.bin_edges[0], [0, 0.25, 0.5, 0.75, 1])


def test_edge_values_go_into_the_lower_bin():
    # 0.5 is the edge between the two bins of (0, .5] and (.5, 1].
    curve = calibration_curve([0, 0, 1], [[0.5, 0.5], [0.6, 0.4], [0.2, 0.8]], n_bins=2)
    np.testing.assert_array_equal(curve.count, [1, 2])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_edge_b_over_m_goes_into_the_lower_bin(dtype):
    # ceil(M * s) - 1 rounds the product: 0.56 * 25 is 14.000000000000002,
    # so the edge 14 / 25 went into (0.56, 0.6] (362 of the 9900 inner edges
    # of M <= 100 in float64 and float32); an ulp above an edge goes above.
    for m in range(1, 101):
        b = np.arange(m + 1)
        edges = b.astype(dtype) / dtype(m)
        np.testing.assert_array_equal(
            uniform_bin_index(edges, m), np.clip(b - 1, 0, m - 1)
        )
        above = np.nextafter(edges[:-1], dtype(2))
        np.testing.assert_array_equal(uniform_bin_index(above, m), b[:-1])
    curve = calibration_curve([1, 1], [0.56, 0.57], n_bins=25, labels=[0, 1])
    assert curve.count[13] == curve.count[14] == 1


def test_hand_computed_three_bins():
    # Top-label confidences 0.9 (right), 0.8 (wrong), 0.6 (right), 0.55 (right);
    # 4 bins: (0.5, 0.75] holds 0.6, 0.55 -> acc 1, conf 0.575; (0.75, 1] holds
    # 0.9, 0.8 -> acc 0.5, conf 0.85.
    y_prob = [[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.55, 0.45]]
    y = [0, 1, 1, 0]
    assert expected_calibration_error(y, y_prob, n_bins=4) == pytest.approx(
        0.5 * 0.425 + 0.5 * 0.35
    )
    assert maximum_calibration_error(y, y_prob, n_bins=4) == pytest.approx(0.425)
    assert rms_calibration_error(y, y_prob, n_bins=4) == pytest.approx(
        np.sqrt(0.5 * 0.425**2 + 0.5 * 0.35**2)
    )
    # Two equal-mass bins: {0.55, 0.6} and {0.8, 0.9}: the same bins here.
    assert adaptive_calibration_error(y, y_prob, n_bins=2) == pytest.approx(0.3875)


def test_perfectly_calibrated_bin_has_zero_error():
    y_prob = np.tile([[0.8, 0.2]], (10, 1))
    y = np.array([0] * 8 + [1] * 2)
    assert expected_calibration_error(y, y_prob) == pytest.approx(0.0, abs=1e-15)
    assert smooth_calibration_error(y, y_prob) < 0.01


def test_ties_use_the_first_maximal_column():
    y_prob = np.full((4, 2), 0.5)
    y = np.array([0, 1, 0, 1])
    # Every row predicts class 0 (first maximum): accuracy 0.5 at confidence 0.5.
    assert expected_calibration_error(y, y_prob) == pytest.approx(0.0)
    # A single label 1 could be column 1 (0-based) or column 0 (1-based labels).
    ones = np.ones(4, int)
    assert expected_calibration_error(ones, y_prob, labels=[0, 1]) == pytest.approx(0.5)
    rows = np.array([[0.2, 0.4, 0.4], [0.4, 0.4, 0.2], [0.1, 0.1, 0.8]])
    confidence, correct = top_label(rows, np.array([2, 1, 2]))
    np.testing.assert_array_equal(correct, [False, False, True])
    np.testing.assert_array_equal(confidence, [0.4, 0.4, 0.8])


def test_methods_cross_check_figures():
    # METHODS.md: on these 5000 x 10 probabilities with 15 bins, netcal,
    # torchmetrics, torch-uncertainty, probmetrics and a numpy loop all give ECE
    # 0.21452 and MCE 0.31527, and relplot gives smECE 0.21440.
    proba, y = make_probabilities(5000, 10, scale=3.0, seed=0)
    assert expected_calibration_error(y, proba) == pytest.approx(0.21452, abs=5e-6)
    assert maximum_calibration_error(y, proba) == pytest.approx(0.31527, abs=5e-6)
    assert smooth_calibration_error(y, proba) == pytest.approx(0.21440, abs=5e-6)


# --- against the slow loops -------------------------------------------------------


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(
    "metric, kind, classwise",
    [
        (expected_calibration_error, "ece", False),
        (maximum_calibration_error, "mce", False),
        (rms_calibration_error, "rms", False),
        (classwise_calibration_error, "ece", True),
    ],
    ids=["ece", "mce", "rms", "classwise"],
)
def test_binned_metrics_match_reference_loop(
    metric, kind, classwise, strategy, weighted
):
    proba, y = make_probabilities(300, 4, seed=1)
    weights = np.random.default_rng(2).uniform(0, 3, size=300) if weighted else None
    expected = reference_metric(
        y,
        proba,
        n_bins=7,
        strategy=strategy,
        kind=kind,
        weights=weights,
        classwise=classwise,
    )
    got = metric(y, proba, n_bins=7, strategy=strategy, sample_weight=weights)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("n_bins", [1, 3, 15, 40])
def test_adaptive_matches_reference_loop(n_bins):
    proba, y = make_probabilities(400, 3, seed=3)
    expected = reference_metric(y, proba, n_bins=n_bins, strategy="quantile")
    assert adaptive_calibration_error(y, proba, n_bins=n_bins) == pytest.approx(
        expected, rel=1e-12
    )


@pytest.mark.parametrize("n_samples, n_classes", [(100_000, 3), (20_000, 60)])
def test_inputs_spanning_many_row_blocks(n_samples, n_classes):
    # Both span several cache-sized blocks (60 classes take the row-major
    # path); compare with whole-array numpy (argmax, searchsorted on the edges).
    proba, y = make_probabilities(n_samples, n_classes, seed=23)
    proba[:50, :2] = proba[:50, :2].mean(axis=1, keepdims=True)  # some ties
    proba[:50, :2] = np.maximum(proba[:50, :2], proba[:50].max(axis=1, keepdims=True))
    proba /= proba.sum(axis=1, keepdims=True)
    weights = np.random.default_rng(24).uniform(0, 2, size=n_samples)
    edges = np.linspace(0, 1, 16)
    for w in (None, weights):
        ww = np.ones(len(y)) if w is None else w
        confidence = proba.max(axis=1)
        correct = proba.argmax(axis=1) == y
        bins = np.searchsorted(edges[1:-1], confidence, side="left")
        gap = np.bincount(bins, weights=ww * (correct - confidence), minlength=15)
        assert expected_calibration_error(y, proba, sample_weight=w) == pytest.approx(
            np.abs(gap).sum() / ww.sum(), rel=1e-10
        )
        per_class = []
        for k in range(n_classes):
            bins = np.searchsorted(edges[1:-1], proba[:, k], side="left")
            gap = np.bincount(bins, weights=ww * ((y == k) - proba[:, k]), minlength=15)
            per_class.append(np.abs(gap).sum() / ww.sum())
        assert classwise_calibration_error(y, proba, sample_weight=w) == pytest.approx(
            np.mean(per_class), rel=1e-10
        )
    confidence, correct = top_label(proba.astype(np.float32), y)
    np.testing.assert_array_equal(confidence, proba.astype(np.float32).max(axis=1))
    np.testing.assert_array_equal(correct, proba.astype(np.float32).argmax(axis=1) == y)


def test_adaptive_bins_hold_equal_mass():
    proba, y = make_probabilities(1000, 5, seed=4)
    curve = calibration_curve(y, proba, n_bins=10, strategy="quantile")
    np.testing.assert_array_equal(curve.count, np.full(10, 100))
    assert adaptive_calibration_error(y, proba, n_bins=10) == pytest.approx(
        expected_calibration_error(y, proba, n_bins=10, strategy="quantile")
    )


def test_quantile_ties_leave_empty_bins():
    y_prob = np.repeat([[0.9, 0.1], [0.6, 0.4]], [8, 2], axis=0)
    y = np.zeros(10, int)
    curve = calibration_curve(y, y_prob, n_bins=5, strategy="quantile")
    assert curve.count.sum() == 10
    assert np.count_nonzero(curve.count) == 2
    assert adaptive_calibration_error(y, y_prob, n_bins=5) == pytest.approx(
        0.8 * 0.1 + 0.2 * 0.4
    )


def test_calibration_curve_is_consistent_with_ece():
    proba, y = make_probabilities(800, 6, seed=5)
    curve = calibration_curve(y, proba, n_bins=12)
    full = curve.count > 0
    ece = (
        np.sum(
            curve.count[full] * np.abs(curve.accuracy[full] - curve.confidence[full])
        )
        / curve.count.sum()
    )
    assert ece == pytest.approx(expected_calibration_error(y, proba, n_bins=12))
    assert np.all(np.isnan(curve.accuracy[~full]))


def test_classwise_positive_row_is_sklearn_calibration_curve():
    rng = np.random.default_rng(6)
    p = rng.uniform(size=500)
    y = (rng.uniform(size=500) < p**1.5).astype(int)
    curve = calibration_curve(y, p, n_bins=8, multiclass="classwise")
    prob_true, prob_pred = sklearn_calibration_curve(y, p, n_bins=8)
    full = curve.count[1] > 0
    np.testing.assert_allclose(curve.accuracy[1][full], prob_true, rtol=1e-12)
    np.testing.assert_allclose(curve.confidence[1][full], prob_pred, rtol=1e-12)


def test_agrees_with_netcal():
    netcal_metrics = pytest.importorskip("netcal.metrics")
    proba, y = make_probabilities(2000, 10, seed=7)
    assert expected_calibration_error(y, proba) == pytest.approx(
        netcal_metrics.ECE(bins=15).measure(proba, y), rel=1e-9
    )
    assert maximum_calibration_error(y, proba) == pytest.approx(
        netcal_metrics.MCE(bins=15).measure(proba, y), rel=1e-9
    )


# --- smooth ECE -----------------------------------------------------------------


@pytest.mark.parametrize(
    "n_samples, n_classes, scale, seed",
    [(5000, 10, 3.0, 0), (2000, 3, 1.0, 1), (300, 4, 2.0, 2), (20000, 2, 0.3, 3)],
)
def test_smooth_ece_matches_relplot(n_samples, n_classes, scale, seed):
    relplot = pytest.importorskip("relplot")
    proba, y = make_probabilities(n_samples, n_classes, scale=scale, seed=seed)
    confidence, correct = top_label(proba, y)
    expected, width = relplot.smECE(
        confidence.astype(float), correct.astype(float), return_width=True
    )
    got, bandwidth = smooth_calibration_error(y, proba, return_bandwidth=True)
    assert got == pytest.approx(expected, abs=1e-9)
    assert bandwidth == width


def test_smooth_ece_fixed_bandwidth_matches_relplot():
    relplot = pytest.importorskip("relplot")
    proba, y = make_probabilities(3000, 5, seed=8)
    confidence, correct = top_label(proba, y)
    for sigma in (0.3, 0.05, 0.004):
        expected = relplot.smECE_sigma(
            confidence.astype(float), correct.astype(float), sigma
        )
        got = smooth_calibration_error(y, proba, bandwidth=sigma)
        assert got == pytest.approx(expected, abs=1e-9)


def test_smooth_ece_bandwidth_is_the_fixed_point():
    proba, y = make_probabilities(4000, 10, seed=9)
    value, sigma = smooth_calibration_error(y, proba, return_bandwidth=True)
    # The bracket's upper end: sigma >= smECE(sigma), one bisection step below
    # the inequality flips.
    assert sigma >= value
    below = sigma - 2.0**-10
    assert below < smooth_calibration_error(y, proba, bandwidth=below)
    assert abs(value - sigma) < 2e-3


def test_smooth_ece_weights_are_relative():
    # The density floor is in units of one unweighted sample: scaling every
    # weight by a constant (weights summing to 1, or tiny ones) changes
    # nothing, unit weights are no weights, and integer weights act as
    # repeated rows up to that floor's share.
    proba, y = make_probabilities(300, 3, seed=12)
    w = np.random.default_rng(13).integers(1, 4, size=300).astype(float)
    plain = smooth_calibration_error(y, proba)
    assert smooth_calibration_error(y, proba, sample_weight=np.ones(300)) == plain
    weighted = smooth_calibration_error(y, proba, sample_weight=w)
    for scale in (1e-6, 1 / w.sum(), 7.0, 1e6):
        assert smooth_calibration_error(
            y, proba, sample_weight=scale * w
        ) == pytest.approx(weighted, rel=1e-12)
    repeated = smooth_calibration_error(
        np.repeat(y, w.astype(int)), np.repeat(proba, w.astype(int), axis=0)
    )
    assert weighted == pytest.approx(repeated, rel=1e-5)


def test_smooth_ece_is_small_when_calibrated():
    rng = np.random.default_rng(10)
    p = rng.uniform(0.5, 1.0, size=20000)
    y = (rng.uniform(size=20000) < p).astype(int)
    assert smooth_calibration_error(y, p) < 0.02
    assert smooth_calibration_error(1 - y, p) > 0.5


# --- proper scores ----------------------------------------------------------------


def test_log_loss_equals_sklearn():
    proba, y = make_probabilities(400, 5, seed=11)
    w = np.random.default_rng(0).uniform(0, 2, 400)
    assert log_loss(y, proba) == pytest.approx(sklearn_log_loss(y, proba), rel=1e-12)
    assert log_loss(y, proba, sample_weight=w) == pytest.approx(
        sklearn_log_loss(y, proba, sample_weight=w), rel=1e-12
    )
    names = np.array(["ant", "bee", "cat", "dog", "eel"])
    assert log_loss(names[y], proba) == pytest.approx(sklearn_log_loss(names[y], proba))
    # Zero probabilities are clipped at float64's eps whatever the dtype: as
    # scikit-learn does for float64 (it clips float32 at float32's eps).
    hard = np.eye(3)[[0, 1, 2]]
    for dtype in (np.float64, np.float32):
        assert log_loss(
            [1, 1, 2], hard.astype(dtype), labels=[0, 1, 2]
        ) == pytest.approx(
            sklearn_log_loss([1, 1, 2], hard, labels=[0, 1, 2]), rel=1e-12
        )
    p = np.random.default_rng(1).uniform(size=100)
    y2 = (p > 0.4).astype(int)
    assert log_loss(y2, p) == pytest.approx(sklearn_log_loss(y2, p), rel=1e-12)


def test_brier_score_equals_sklearn():
    proba, y = make_probabilities(400, 5, seed=12)
    assert brier_score(y, proba) == pytest.approx(
        brier_score_loss(y, proba, scale_by_half=False), rel=1e-12
    )
    p = np.random.default_rng(2).uniform(size=200)
    y2 = (np.random.default_rng(3).uniform(size=200) < p).astype(int)
    # Binary: the sum over both columns is twice scikit-learn's halved score.
    assert brier_score(y2, p) == pytest.approx(2 * brier_score_loss(y2, p), rel=1e-12)


def test_brier_decomposition_is_exact_for_binned_forecasts():
    rng = np.random.default_rng(13)
    centres = (np.arange(10) + 0.5) / 10
    p = rng.choice(centres, size=3000)
    y = (rng.uniform(size=3000) < p**1.3).astype(int)
    w = rng.uniform(0.5, 2, size=3000)
    for weights in (None, w):
        rel, res, unc = brier_score_decomposition(
            y, p, n_bins=10, sample_weight=weights
        )
        assert rel - res + unc == pytest.approx(
            brier_score(y, p, sample_weight=weights), rel=1e-12
        )
    # Uncertainty: the Brier score of always forecasting the base rates.
    proba, y3 = make_probabilities(500, 4, seed=14)
    base = np.bincount(y3, minlength=4) / 500
    _, _, unc = brier_score_decomposition(y3, proba)
    assert unc == pytest.approx(brier_score(y3, np.tile(base, (500, 1))))


def test_brier_decomposition_of_a_calibrated_forecast():
    # Forecast 0.25 for class 1 where class 1 has frequency 0.25: perfectly
    # reliable and without resolution.
    y = np.array([1, 0, 0, 0] * 5)
    rel, res, unc = brier_score_decomposition(y, np.full(20, 0.25), n_bins=4)
    assert rel == pytest.approx(0.0, abs=1e-15)
    assert res == pytest.approx(0.0, abs=1e-15)
    assert unc == pytest.approx(2 * 0.25 * 0.75)


# --- labels and input types -------------------------------------------------------


def test_string_labels_and_column_order():
    proba, y = make_probabilities(300, 3, seed=15)
    names = np.array(["cat", "dog", "eel"])
    reference = expected_calibration_error(y, proba)
    assert expected_calibration_error(names[y], proba) == reference
    # labels says which class each column holds, in any order.
    permutation = [2, 0, 1]
    assert expected_calibration_error(
        names[y], proba[:, permutation], labels=names[permutation]
    ) == pytest.approx(reference)
    # A class absent from y_true: integer labels keep their columns, strings
    # need labels.
    keep = y != 1
    expected = expected_calibration_error(y[keep], proba[keep], labels=[0, 1, 2])
    assert expected_calibration_error(y[keep], proba[keep]) == expected
    with pytest.raises(ValueError, match="pass labels="):
        expected_calibration_error(names[y][keep], proba[keep])
    assert expected_calibration_error(
        names[y][keep], proba[keep], labels=names
    ) == pytest.approx(expected)


def test_binary_labels_beyond_range_are_sorted():
    p = np.array([0.9, 0.2, 0.7, 0.4])
    y = np.array([1, -1, 1, 1])
    assert expected_calibration_error(y, p) == expected_calibration_error(
        (y > 0).astype(int), p
    )


def test_input_types_agree():
    torch = pytest.importorskip("torch")
    pd = pytest.importorskip("pandas")
    proba, y = make_probabilities(500, 4, seed=16)
    reference = expected_calibration_error(y, proba)
    assert expected_calibration_error(torch.from_numpy(y), torch.from_numpy(proba)) == (
        pytest.approx(reference)
    )
    frame = pd.DataFrame(proba, columns=list("abcd"))
    assert expected_calibration_error(pd.Series(y), frame) == pytest.approx(reference)
    assert expected_calibration_error(y, proba.astype(np.float32)) == pytest.approx(
        reference, abs=1e-6
    )
    assert expected_calibration_error(y, np.asfortranarray(proba)) == reference


@pytest.mark.parametrize(
    "y_prob, y_true, message",
    [
        ([[0.5, 0.6], [0.5, 0.5]], [0, 1], "sum to 1"),
        ([[1.2, -0.2], [0.5, 0.5]], [0, 1], "negative"),
        ([[np.nan, 1.0], [0.5, 0.5]], [0, 1], "NaN"),
        ([[np.inf, 0.0], [0.5, 0.5]], [0, 1], "NaN or infinity"),
        ([1.5, 0.5], [0, 1], "above 1"),
        ([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]], ["a", "b"], "2 distinct labels"),
        ([[0.2, 0.8], [0.5, 0.5]], [0, 1, 1], "inconsistent numbers of samples"),
        (np.ones((2, 2, 1)) / 2, [0, 1], "dimensions"),
        ([["a", "b"], ["c", "d"]], [0, 1], "numbers"),
        (np.array([[0.5, 0.5], [0.5, 0.5]]) + 0.5j, [0, 1], "complex"),
    ],
    ids=[
        "not_summing",
        "negative",
        "nan",
        "inf",
        "binary_above_one",
        "wrong_width",
        "length",
        "3d",
        "strings",
        "complex",
    ],
)
def test_bad_probabilities_raise(y_prob, y_true, message):
    for metric in (expected_calibration_error, log_loss, smooth_calibration_error):
        with pytest.raises((ValueError, TypeError), match=message):
            metric(y_true, y_prob)


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, "15"])
def test_bad_n_bins_raises(n_bins):
    with pytest.raises((ValueError, TypeError), match="n_bins"):
        expected_calibration_error([0, 1], [[0.6, 0.4], [0.3, 0.7]], n_bins=n_bins)


def _grid_cases():
    from sklearn_calib import metrics

    big = 10**9
    return {
        "ece": (expected_calibration_error, dict(n_bins=big), "n_bins"),
        "ace": (adaptive_calibration_error, dict(n_bins=big), "n_bins"),
        "classwise": (classwise_calibration_error, dict(n_bins=2**23), "n_bins"),
        "curve": (calibration_curve, dict(n_bins=big), "n_bins"),
        "debiased": (metrics.debiased_calibration_error, dict(n_bins=big), "n_bins"),
        "report": (calibration_report, dict(n_bins=big), "n_bins"),
        "hosmer": (metrics.hosmer_lemeshow_test, dict(n_groups=big), "n_groups"),
        "smooth": (smooth_calibration_error, dict(bandwidth=1e-9), "bandwidth"),
        "smooth_tiny": (smooth_calibration_error, dict(bandwidth=5e-324), "bandwidth"),
    }


@pytest.mark.parametrize("case", list(_grid_cases()))
def test_bins_or_grids_too_large_to_allocate_raise(case):
    # n_bins=10**9 on 50 rows asked numpy for 7.5 GiB per array, a bandwidth
    # of 1e-9 for a 149 GiB grid: MemoryError (or a machine swapping).
    metric, params, name = _grid_cases()[case]
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), 50)
    y = rng.integers(0, 3, 50)
    if name == "n_groups":
        proba = proba[:, 0]
        y = y == 0
    with pytest.raises(ValueError, match=f"{name}=.* more than the 16,777,216"):
        metric(y, proba, **params)


def test_the_largest_grids_allowed_give_the_values_of_coarser_ones():
    # Refusing sizes that cannot be allocated leaves every sensible one.
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), 50)
    y = rng.integers(0, 3, 50)
    # A bin per distinct confidence: the ECE of any finer binning.
    fine = expected_calibration_error(y, proba, n_bins=2**22 - 1)
    assert fine == pytest.approx(expected_calibration_error(y, proba, n_bins=10**6))
    assert np.isfinite(smooth_calibration_error(y, proba, bandwidth=3e-6))


def spy_on_binned_blocks(monkeypatch, block_entries):
    """Cap the resamples binned at once; record the weights' shapes binned."""
    from sklearn_calib.metrics import _bin_statistics

    shapes = []
    statistics = _bin_statistics.Binning.statistics

    def spy(self, weights=None):
        shapes.append(np.shape(weights))
        return statistics(self, weights)

    monkeypatch.setattr(_bin_statistics, "GRID_BLOCK_ENTRIES", block_entries)
    monkeypatch.setattr(_bin_statistics.Binning, "statistics", spy)
    return shapes


def test_bootstrap_bins_resamples_in_blocks_of_bounded_size(monkeypatch):
    # 1,000 resamples of 10**6 bins asked for 8 GiB per array at once; the
    # blocks give the same resamples.
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), 60)
    y = rng.integers(0, 3, 60)
    kwargs = dict(n_resamples=50, random_state=0, n_bins=40)
    whole = bootstrap_interval(expected_calibration_error, y, proba, **kwargs)
    shapes = spy_on_binned_blocks(monkeypatch, 41 * 8)
    blocks = bootstrap_interval(expected_calibration_error, y, proba, **kwargs)
    np.testing.assert_array_equal(blocks.resamples, whole.resamples)
    assert max(shape[0] for shape in shapes if len(shape) == 2) <= 8


def test_bad_labels_raise():
    y_prob = [[0.6, 0.4], [0.3, 0.7]]
    with pytest.raises(ValueError, match="not in labels"):
        expected_calibration_error(["a", "c"], y_prob, labels=["a", "b"])
    with pytest.raises(ValueError, match="one class per column"):
        expected_calibration_error(["a", "b"], y_prob, labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="duplicates"):
        expected_calibration_error(["a", "a"], y_prob, labels=["a", "a"])
    with pytest.raises(ValueError, match="strategy"):
        expected_calibration_error([0, 1], y_prob, strategy="kmeans")
    with pytest.raises(ValueError, match="sample_weight"):
        expected_calibration_error([0, 1], y_prob, sample_weight=[1.0, -1.0])


# --- the registry: invariances every metric must satisfy --------------------------

METRICS = all_metrics()


def test_registry_lists_every_metric():
    names = {name for name, _ in METRICS}
    assert names == {
        "adaptive_calibration_error",
        "brier_score",
        "classwise_calibration_error",
        "debiased_calibration_error",
        "expected_calibration_error",
        "log_loss",
        "maximum_calibration_error",
        "rms_calibration_error",
        "smooth_calibration_error",
    }


@pytest.fixture(scope="module")
def registry_data():
    proba, y = make_probabilities(240, 4, seed=17)
    weights = np.random.default_rng(18).integers(0, 4, size=240)
    return proba, y, weights


@pytest.mark.parametrize("name, metric", METRICS, ids=[name for name, _ in METRICS])
def test_metric_invariances(name, metric, registry_data):
    proba, y, weights = registry_data
    value = metric(y, proba)
    assert type(value) is float
    # unit weights == no weights
    assert metric(y, proba, sample_weight=np.ones(len(y))) == pytest.approx(
        value, rel=1e-12, abs=1e-15
    )
    # integer weights == repeated rows; the smooth ECE's density floor is in
    # units of a mean weight (scaling every weight changes nothing), which
    # repeated rows change by about 1e-7 here
    repeated = metric(np.repeat(y, weights), np.repeat(proba, weights, axis=0))
    rel = 1e-6 if name == "smooth_calibration_error" else 1e-10
    assert metric(y, proba, sample_weight=weights) == pytest.approx(
        repeated, rel=rel, abs=1e-13
    )
    # scaling every weight changes nothing, but for the debiased error, whose
    # frequency weights set its variance correction (documented)
    if name != "debiased_calibration_error":
        assert metric(y, proba, sample_weight=weights * 1e-6) == pytest.approx(
            metric(y, proba, sample_weight=weights), rel=1e-9, abs=1e-13
        )
        # to the ends of the float64 range (the RMS error squared its
        # weighted gaps: inf at 2**560, silently off by 0.07 at 2**-560; at
        # 2**1020 the sums of the weights overflowed: NaN, or a smooth ECE of 0)
        for scale in (2.0**560, 2.0**-560, 2.0**1020):
            assert metric(y, proba, sample_weight=weights * scale) == pytest.approx(
                metric(y, proba, sample_weight=weights), rel=1e-9, abs=1e-13
            )
    # lists == arrays
    assert metric(y.tolist(), proba.tolist()) == pytest.approx(value, rel=1e-12)
    # row order does not matter
    order = np.random.default_rng(19).permutation(len(y))
    assert metric(y[order], proba[order]) == pytest.approx(value, rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("multiclass", ["top-label", "classwise"])
def test_calibration_curve_weights_near_the_float64_maximum(registry_data, multiclass):
    # The bins' sums of weights overflowed: NaN accuracies and confidences,
    # and interval= raised binomial_interval's 'must be finite'. The counts
    # stay in the caller's scale (inf where the sum exceeds float64's range).
    proba, y, weights = registry_data
    kwargs = dict(multiclass=multiclass, interval="wilson")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = calibration_curve(
            y, proba, sample_weight=weights * 2.0**1020, **kwargs
        )
    curve = calibration_curve(y, proba, sample_weight=weights, **kwargs)
    for name in ("accuracy", "confidence", "accuracy_low", "accuracy_high"):
        np.testing.assert_array_equal(getattr(scaled, name), getattr(curve, name))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(scaled.count, curve.count * 2.0**1020)
    assert np.isinf(scaled.count).any()


def test_brier_decomposition_weights_near_the_float64_maximum(registry_data):
    # Its sums of weights overflowed: NaN terms with numpy's RuntimeWarnings.
    proba, y, weights = registry_data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = brier_score_decomposition(y, proba, sample_weight=weights * 2.0**1020)
    np.testing.assert_allclose(
        scaled, brier_score_decomposition(y, proba, sample_weight=weights), rtol=1e-12
    )


@pytest.mark.parametrize("name, metric", METRICS, ids=[name for name, _ in METRICS])
def test_metric_labels_follow_sklearn_convention(name, metric, registry_data):
    proba, y, _ = registry_data
    # 1-based labels 1..4 of a set that happens to lack label 4: three labels
    # for four columns are ambiguous (0-based labels lacking 0 look the same),
    # so the metric asks for labels= instead of scoring the wrong columns.
    keep = y != 3
    one_based = y[keep] + 1
    with pytest.raises(ValueError, match="ambiguous.*pass labels="):
        metric(one_based, proba[keep])
    # labels= states the class of each column; 0-based labels that include 0
    # are the column indices themselves. Both score the same columns.
    stated = metric(one_based, proba[keep], labels=[1, 2, 3, 4])
    assert stated == pytest.approx(metric(y[keep], proba[keep]), rel=1e-12)
    # The columns in another order, with labels saying which is which.
    order = [2, 0, 3, 1]
    names = np.array(["ant", "bee", "cat", "dog"])
    permuted = metric(names[y], proba[:, order], labels=names[order])
    assert permuted == pytest.approx(metric(y, proba), rel=1e-10, abs=1e-13)


def test_log_loss_one_based_labels_missing_a_class():
    # The case of issue 11: labels 1..4 whose validation set lacks label 4.
    # Reading label j as column j scores each sample on the wrong column (a
    # large, silent error); labels= gives scikit-learn's value.
    proba, y = make_probabilities(300, 4, seed=5)
    keep = y != 3
    y1, p = y[keep] + 1, proba[keep]
    reference = sklearn_log_loss(y1, p, labels=[1, 2, 3, 4])
    eps = np.finfo(np.float64).eps
    shifted = -np.mean(np.log(np.clip(p[np.arange(len(y1)), y1], eps, 1 - eps)))
    assert shifted > reference + 1.0  # what guessing "label j is column j" gives
    assert log_loss(y1, p, labels=[1, 2, 3, 4]) == pytest.approx(reference, rel=1e-12)
    with pytest.raises(ValueError, match="lack 0.*pass labels="):
        log_loss(y1, p)
    # The same labels when the set holds all four: sorted labels, no ambiguity.
    assert log_loss(y + 1, proba) == pytest.approx(
        sklearn_log_loss(y + 1, proba), rel=1e-12
    )


@pytest.mark.parametrize(
    "y_true, labels, message",
    [
        ([1, 2], None, "ambiguous"),  # 2 labels in range(3) lacking 0
        ([0, 5], None, "outside"),  # include 0 but not column indices
        (["a", "b"], None, "ambiguous"),  # strings, one class absent
        ([0, 1, 2, 3], None, "4 distinct labels but there are only 3"),
        ([1, 2], [1, 2, 2], "duplicates"),
        ([1, 2], [1, 2], "one class per column"),
        ([1, 4], [1, 2, 3], "not in labels"),
        ([1.0, 2.0], [1.0, 2.0, np.nan], "NaN"),
    ],
)
def test_labels_that_cannot_be_matched_raise(y_true, labels, message):
    y_prob = np.full((len(y_true), 3), 1 / 3)
    with pytest.raises(ValueError, match=message):
        log_loss(y_true, y_prob, labels=labels)


def test_boolean_and_zero_based_labels_are_column_indices():
    y_prob = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.3, 0.3, 0.4]])
    # 0 and 1 only, for 3 columns: the indices, so column 2 is class 2.
    by_index = log_loss([0, 1, 1], y_prob)
    assert by_index == pytest.approx(
        sklearn_log_loss([0, 1, 1], y_prob, labels=[0, 1, 2])
    )
    p = np.array([0.8, 0.3, 0.6])
    assert log_loss(np.array([True, True, True]), p) == pytest.approx(
        sklearn_log_loss([1, 1, 1], p, labels=[0, 1])
    )


# --- bootstrap --------------------------------------------------------------------

BATCHED = [
    (expected_calibration_error, {"n_bins": 10}),
    (adaptive_calibration_error, {"n_bins": 8}),
    (maximum_calibration_error, {}),
    (rms_calibration_error, {"strategy": "quantile"}),
    (classwise_calibration_error, {}),
    (smooth_calibration_error, {}),
    (log_loss, {}),
    (brier_score, {}),
]


@pytest.mark.parametrize(
    "metric, params", BATCHED, ids=[m.__name__ for m, _ in BATCHED]
)
def test_bootstrap_batches_equal_resampled_rows(metric, params):
    proba, y = make_probabilities(150, 3, seed=20)
    weights = np.random.default_rng(21).uniform(0.5, 2.0, size=150)

    def plain(y_true, y_prob, **kwargs):
        # Not a registered metric: the bootstrap calls it on the drawn rows.
        return metric(y_true, y_prob, **kwargs)

    for sample_weight in (None, weights):
        batched = bootstrap_interval(
            metric,
            y,
            proba,
            n_resamples=40,
            random_state=0,
            sample_weight=sample_weight,
            **params,
        )
        looped = bootstrap_interval(
            plain,
            y,
            proba,
            n_resamples=40,
            random_state=0,
            sample_weight=sample_weight,
            **params,
        )
        np.testing.assert_allclose(batched.resamples, looped.resamples, rtol=1e-9)
        assert (
            batched.value
            == looped.value
            == metric(y, proba, sample_weight=sample_weight, **params)
        )


@pytest.mark.parametrize(
    "metric, params", BATCHED, ids=[m.__name__ for m, _ in BATCHED]
)
def test_bootstrap_resamples_without_weight_are_nan(metric, params):
    # One row of five weighs anything: a resample that misses it has no
    # metric. The batched MCE and smooth ECE read 0 off its empty sums (an
    # interval reaching down to 0 for a value of 0.4), the others NaN with a
    # numpy warning, and the row-by-row path raised 'zero for every sample'.
    y = np.array([0, 1, 1, 0, 1])
    proba = np.array([0.2, 0.7, 0.9, 0.4, 0.6])
    weights = np.array([0.0, 0.0, 0.0, 0.0, 1.0])

    def plain(y_true, y_prob, **kwargs):
        return metric(y_true, y_prob, **kwargs)

    common = dict(n_resamples=60, random_state=0, sample_weight=weights, labels=[0, 1])
    batched = bootstrap_interval(metric, y, proba, **common, **params)
    looped = bootstrap_interval(plain, y, proba, **common, **params)
    empty = np.isnan(batched.resamples)
    assert 0 < empty.sum() < 60
    np.testing.assert_allclose(batched.resamples, looped.resamples, rtol=1e-9)
    # Every resample that drew the row scores that row alone.
    np.testing.assert_allclose(batched.resamples[~empty], batched.value, rtol=1e-9)
    assert batched.low == pytest.approx(batched.value, rel=1e-9)
    assert batched.high == pytest.approx(batched.value, rel=1e-9)


def test_bootstrap_row_by_row_keeps_the_columns_of_the_full_data():
    # The debiased error (not batched) is called on the drawn rows; a
    # resample without the rare class 0 has labels 1..2 for three columns,
    # which the metrics call ambiguous: the interval raised on data whose
    # value computes (CIFAR-100, 500 rows: every resample lacks a class).
    from sklearn_calib.metrics import debiased_calibration_error

    proba, y = make_probabilities(60, 3, seed=23)
    y[y == 0] = 1
    y[0] = 0
    names = np.array(["ant", "bee", "cat"])
    for labels, y_true in ((None, y), ([0, 1, 2], y), (None, names[y])):
        interval = bootstrap_interval(
            debiased_calibration_error,
            y_true,
            proba,
            n_resamples=30,
            random_state=0,
            labels=labels,
        )
        stated = bootstrap_interval(
            debiased_calibration_error,
            names[y],
            proba,
            n_resamples=30,
            random_state=0,
            labels=names,
        )
        np.testing.assert_array_equal(interval.resamples, stated.resamples)
    # scikit-learn's log loss takes labels= too (a binary column; a resample
    # of one label raised scikit-learn's 'contains only one label').
    y_binary = np.where(np.arange(40) < 2, 5, 6)
    positive = np.linspace(0.1, 0.9, 40)
    binary = bootstrap_interval(
        sklearn_log_loss, y_binary, positive, n_resamples=30, random_state=0
    )
    assert np.all(np.isfinite(binary.resamples))


@pytest.mark.parametrize("scale", [2.0**-1000, 2.0**-60, 2.0**1012])
def test_bootstrap_equal_mass_edges_ignore_the_weights_scale(scale):
    # The equal-mass edges of a slab of resamples were searched on rows
    # flattened with an offset of (largest cumulative weight + 1) per row:
    # cumulative weights far below 1 vanished under it (resampled adaptive
    # ECEs 0.23 off at 2**-1000) and huge ones overflowed it to inf, so the
    # batched resamples no longer equalled the row-by-row ones or those of
    # unscaled weights.
    proba, y = make_probabilities(120, 3, seed=24)
    weights = np.random.default_rng(25).integers(1, 4, size=120).astype(float)

    def plain(y_true, y_prob, **kwargs):
        return adaptive_calibration_error(y_true, y_prob, **kwargs)

    common = dict(n_resamples=50, random_state=0, n_bins=8)
    unscaled = bootstrap_interval(
        adaptive_calibration_error, y, proba, sample_weight=weights, **common
    )
    scaled = bootstrap_interval(
        adaptive_calibration_error, y, proba, sample_weight=weights * scale, **common
    )
    looped = bootstrap_interval(
        plain, y, proba, sample_weight=weights * scale, **common
    )
    np.testing.assert_allclose(scaled.resamples, looped.resamples, rtol=1e-9)
    np.testing.assert_allclose(scaled.resamples, unscaled.resamples, rtol=1e-9)


@pytest.mark.parametrize(
    "metric, params", BATCHED, ids=[m.__name__ for m, _ in BATCHED]
)
def test_bootstrap_batches_ignore_the_weights_scale(metric, params):
    # counts * weights overflowed for weights near the float64 maximum: the
    # value was right, every resample NaN (an interval [nan, nan]) with
    # numpy's overflow warnings.
    proba, y = make_probabilities(120, 3, seed=26)
    weights = np.random.default_rng(27).integers(0, 4, size=120).astype(float)
    common = dict(n_resamples=30, random_state=0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = bootstrap_interval(
            metric, y, proba, sample_weight=weights * 2.0**1020, **common
        )
    unscaled = bootstrap_interval(metric, y, proba, sample_weight=weights, **common)
    np.testing.assert_array_equal(scaled.resamples, unscaled.resamples)


def test_bootstrap_interval_properties():
    proba, y = make_probabilities(400, 4, seed=22)
    first = bootstrap_interval(expected_calibration_error, y, proba, random_state=3)
    again = bootstrap_interval(expected_calibration_error, y, proba, random_state=3)
    other = bootstrap_interval(expected_calibration_error, y, proba, random_state=4)
    np.testing.assert_array_equal(first.resamples, again.resamples)
    assert not np.array_equal(first.resamples, other.resamples)
    assert first.resamples.shape == (1000,)
    assert first.low < first.value < first.high
    np.testing.assert_allclose(
        [first.low, first.high], np.quantile(first.resamples, [0.025, 0.975])
    )
    narrow = bootstrap_interval(
        expected_calibration_error, y, proba, random_state=3, confidence_level=0.5
    )
    assert first.low < narrow.low < narrow.high < first.high


def test_resample_counts_are_row_draws():
    indices = np.concatenate(list(resample_indices(50, 30, 0)))
    counts = counts_of(indices, 50)
    assert counts.shape == (30, 50)
    np.testing.assert_array_equal(counts.sum(axis=1), 50)
    np.testing.assert_array_equal(counts[7], np.bincount(indices[7], minlength=50))


def test_bootstrap_rejects_bad_parameters():
    with pytest.raises(ValueError, match="confidence_level"):
        bootstrap_interval(
            expected_calibration_error, [0, 1], [0.2, 0.7], confidence_level=1.5
        )
    with pytest.raises(ValueError, match="n_bins"):
        bootstrap_interval(expected_calibration_error, [0, 1], [0.2, 0.7], n_bins=0)


# --- calibration_report --------------------------------------------------------------


def test_calibration_report_hand_computed():
    y = [0, 1, 1, 0]
    sharp = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.7, 0.3]])
    flat = np.full((4, 2), 0.5)
    report = calibration_report(
        y, {"sharp": sharp, "flat": flat}, metrics=["ece", "accuracy"], n_bins=5
    )
    assert list(report.index) == ["sharp", "flat"]
    assert list(report.columns) == ["ece", "accuracy"]
    # sharp: bins (0.4, 0.6] {0.6 wrong}, (0.6, 0.8] {0.7, 0.8 right},
    # (0.8, 1] {0.9 right}
    expected_ece = 0.25 * 0.6 + 0.5 * (1 - 0.75) + 0.25 * (1 - 0.9)
    assert report.loc["sharp", "ece"] == pytest.approx(expected_ece, abs=1e-12)
    assert report.loc["sharp", "accuracy"] == 0.75
    assert report.loc["flat", "ece"] == pytest.approx(0.0, abs=1e-12)
    # argmax of a tie is the first column: class 0, right for two of four
    assert report.loc["flat", "accuracy"] == 0.5


def test_calibration_report_against_references():
    from sklearn.metrics import accuracy_score

    proba, y = make_probabilities(n_samples=400, n_classes=4, seed=3)
    labels = np.array(["ant", "bee", "cat", "dog"])
    y_str = labels[y]
    weights = np.random.default_rng(0).uniform(0.1, 2.0, size=y.shape[0])
    report = calibration_report(
        y_str,
        proba,
        metrics=list(REPORT_METRICS),
        n_bins=10,
        sample_weight=weights,
        labels=labels,
    )
    row = report.loc["model"]
    assert row["nll"] == pytest.approx(
        sklearn_log_loss(y, proba, sample_weight=weights, labels=range(4)), rel=1e-10
    )
    one_hot = np.eye(4)[y]
    brier = np.average(((proba - one_hot) ** 2).sum(axis=1), weights=weights)
    assert row["brier"] == pytest.approx(brier, rel=1e-10)
    assert row["accuracy"] == pytest.approx(
        accuracy_score(y, proba.argmax(axis=1), sample_weight=weights), rel=1e-12
    )
    assert row["ece"] == pytest.approx(
        reference_metric(y, proba, n_bins=10, weights=weights), rel=1e-10
    )
    assert row["classwise_ece"] == pytest.approx(
        reference_metric(y, proba, n_bins=10, weights=weights, classwise=True),
        rel=1e-10,
    )
    for name, (metric, binned) in REPORT_METRICS.items():
        options = {"n_bins": 10} if binned else {}
        direct = metric(y_str, proba, sample_weight=weights, labels=labels, **options)
        assert row[name] == pytest.approx(direct, rel=1e-12, abs=1e-15), name


def test_calibration_report_covers_every_metric():
    in_report = {metric for metric, _ in REPORT_METRICS.values()}
    missing = [name for name, f in all_metrics() if f not in in_report]
    assert not missing, f"metrics without a calibration_report column: {missing}"


@pytest.mark.parametrize("labels", [[1, 2, 3, 4], ["a", "b", "c", "d"]])
def test_calibration_report_with_labels_of_a_sample_that_lacks_some(labels):
    # 1-based labels (or names) of which the sample lacks the first: stated
    # by labels=, every metric of the report equals the metric called alone.
    rng = np.random.default_rng(3)
    proba = rng.dirichlet(np.ones(4), size=300)
    y = np.asarray(labels)[rng.integers(1, 4, size=300)]
    report = calibration_report(
        y, proba, labels=labels, metrics=list(REPORT_METRICS), as_frame=False
    )["model"]
    for name, (metric, _) in REPORT_METRICS.items():
        assert report[name] == pytest.approx(metric(y, proba, labels=labels), rel=1e-12)


def test_calibration_report_dict_and_defaults():
    proba, y = make_probabilities(n_samples=200, n_classes=3, seed=1)
    report = calibration_report(y, {"a": proba, "b": proba[:, ::-1]}, as_frame=False)
    assert list(report) == ["a", "b"]
    assert list(report["a"]) == [
        "ece",
        "adaptive_ece",
        "classwise_ece",
        "nll",
        "brier",
        "accuracy",
    ]
    assert all(isinstance(v, float) for v in report["a"].values())
    assert report["a"]["ece"] == expected_calibration_error(y, proba)
    assert report["a"]["nll"] < report["b"]["nll"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"metrics": ["ece", "f1"]}, "Unknown metric 'f1'"),
        ({"metrics": []}, "metrics is empty"),
        ({"n_bins": 0}, "n_bins must be a positive integer"),
        ({"y_prob": {}}, "empty mapping"),
        ({"y_prob": {"bad": np.full((4, 2), np.nan)}}, "y_prob\\['bad'\\]"),
    ],
)
def test_calibration_report_errors(kwargs, message):
    arguments = {"y_true": [0, 1, 1, 0], "y_prob": np.full((4, 2), 0.5), **kwargs}
    with pytest.raises(ValueError, match=message):
        calibration_report(**arguments)


@pytest.mark.parametrize("metric", [brier_score, lambda y, p: float(np.mean(p))])
def test_bootstrap_refuses_more_resamples_than_an_array_holds(metric):
    # 10**12 resamples ran for hours on the way to a MemoryError (the
    # resampled values are one array of n_resamples floats).
    y = np.array([0, 1, 1, 0, 1])
    p = np.array([0.2, 0.7, 0.6, 0.4, 0.9])
    with pytest.raises(ValueError, match="n_resamples=1000000000000 needs"):
        bootstrap_interval(metric, y, p, n_resamples=10**12, random_state=0)
    result = bootstrap_interval(metric, y, p, n_resamples=20, random_state=0)
    assert result.resamples.shape == (20,)


def test_flexible_curve_distances_weighted_quantile_is_type_7_extended():
    # E50/E90 are R's type 7 quantiles; a single weight unlike the others
    # switched them to the inverted-CDF rule, so a zero-weight row moved E50
    # against the row dropped and weights of 1 + 1e-12 moved it by 5e-4.
    # Positions A_k / (A_k + B_k): 0, 1/2, 1 and 0, 1/3, 1 (hand values).
    assert weighted_quantile([0.0, 1.0, 2.0], 0.25, [1.0, 2.0, 1.0]) == 0.5
    assert weighted_quantile([2.0, 0.0, 1.0], 0.5, [2.0, 1.0, 1.0]) == 1.25
    rng = np.random.default_rng(3)
    p = rng.uniform(size=300)
    y = rng.uniform(size=300) < p**1.3
    w = np.ones(300)
    w[7] = 0.0
    zero = flexible_calibration_curve(y, p, sample_weight=w)
    dropped = flexible_calibration_curve(y[w > 0], p[w > 0])
    assert (zero.e50, zero.e90, zero.emax) == (
        dropped.e50,
        dropped.e90,
        dropped.emax,
    )
    assert zero.ici == pytest.approx(dropped.ici, rel=1e-12)
    w = np.ones(300)
    w[7] = 1 + 1e-12
    near = flexible_calibration_curve(y, p, sample_weight=w)
    bare = flexible_calibration_curve(y, p)
    assert near.e50 == pytest.approx(bare.e50, abs=1e-10)
    assert near.e90 == pytest.approx(bare.e90, abs=1e-10)


def test_complex_sample_weight_is_refused():
    # numpy's float64 of complex weights keeps the real part (a
    # ComplexWarning at most): [1j, 1, 1] gave an ECE of 0.45, the first row
    # weighing 0.
    y = np.array([0, 1, 1])
    proba = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    for metric in (expected_calibration_error, log_loss, brier_score):
        with pytest.raises(TypeError, match="real numbers"):
            metric(y, proba, sample_weight=np.array([1j, 1, 1]))
