"""IsotonicCalibration and HistogramBinning against independent references."""

import pickle
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp, softmax
from sklearn.base import clone
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression

from sklearn_calib import HistogramBinning, IsotonicCalibration
from sklearn_calib._binning.one_vs_rest import apply_top_label, softmax_log_odds
from sklearn_calib.metrics import expected_calibration_error
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared


def test_isotonic_ovr_matches_sklearn_isotonic_regression():
    X, y = make_logits(n_samples=800, n_classes=4, seed=3)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    iso = IsotonicCalibration().fit(X, y, sample_weight=weights)
    X_new, _ = make_logits(n_samples=300, n_classes=4, seed=4)
    # The maps regress on the log-odds of the probabilities (scipy's here).
    expected = np.column_stack(
        [
            IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")
            .fit(log_odds(X)[:, k], y == k, sample_weight=weights)
            .predict(log_odds(X_new)[:, k])
            for k in range(4)
        ]
    )
    expected = np.maximum(expected, 1e-12)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(
        iso.predict_proba(X_new), expected, rtol=1e-10, atol=1e-12
    )


def log_odds(X):
    """``log(p_k / (1 - p_k))`` of softmax(X) by scipy: z_k - logsumexp(others)."""
    return np.column_stack(
        [
            X[:, k] - logsumexp(np.delete(X, k, axis=1), axis=1)
            for k in range(X.shape[1])
        ]
    )


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4, 1e150])
def test_log_odds_match_scipy(scale):
    X, _ = make_logits(n_samples=500, n_classes=5, seed=8)
    X = X * scale
    reference = log_odds(X)
    got = softmax_log_odds(X)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, reference, rtol=1e-12, atol=1e-12)
    # The binary score column s: the log-odds of the logits (0, s) are (-s, s).
    s = X[:, :1]
    np.testing.assert_allclose(
        softmax_log_odds(np.hstack([np.zeros_like(s), s])),
        np.hstack([-s, s]),
        rtol=1e-15,
    )


def test_isotonic_ovr_tied_columns_in_either_order():
    # Two exactly tied top columns holding nearly all the mass have log-odds
    # near 0; the argmax's came from the runner-up formula, the other tied
    # column's from the general one, an ulp apart: enough to reorder the
    # rows in each class's isotonic map, so swapping the two columns (and
    # their labels) changed the probabilities by 0.034.
    rng = np.random.default_rng(0)
    a = rng.normal(size=400)
    X = np.column_stack([a, a, a - rng.uniform(20, 34, size=400)])
    y = rng.integers(0, 2, size=400)
    lo = softmax_log_odds(X)
    np.testing.assert_array_equal(lo[:, 0], lo[:, 1])
    swap = np.array([1, 0, 2])
    proba = IsotonicCalibration().fit(X, y).predict_proba(X)
    swapped = IsotonicCalibration().fit(X[:, swap], swap[y]).predict_proba(X[:, swap])
    np.testing.assert_allclose(swapped[:, swap], proba, rtol=0, atol=1e-15)


def test_isotonic_keeps_the_ranking_of_saturated_scores():
    # Above a score of ~36.7, float64 probabilities are all 1.0: a fit on them
    # pools these samples into one value (0.5 each here).
    s = np.array([38.0, 39.0, 40.0, 41.0])
    y = np.array([0, 0, 1, 1])
    assert len(np.unique(1 / (1 + np.exp(-s)))) == 1
    reference = IsotonicRegression(out_of_bounds="clip").fit(s, y)
    fitted = IsotonicCalibration().fit(s[:, None], y)
    np.testing.assert_allclose(
        fitted.predict_proba(s[:, None])[:, 1], [0, 0, 1, 1], atol=1e-11
    )
    s_new = np.array([37.0, 38.5, 39.25, 40.5, 45.0])
    np.testing.assert_allclose(
        fitted.predict_proba(s_new[:, None])[:, 1],
        reference.predict(s_new),
        atol=1e-11,
    )
    top = IsotonicCalibration(mode="top_label").fit(s[:, None], y)
    # Top label: all predict class 1, correct for the two largest scores.
    np.testing.assert_allclose(
        top.predict_proba(s[:, None])[:, 1], [0, 0, 1, 1], atol=1e-11
    )


def test_calibrated_perceptron_matches_sklearn_isotonic():
    # The example of issue 11: a Perceptron on features scaled by 10 has
    # decision values in the thousands, far beyond saturation; scikit-learn's
    # isotonic calibration regresses on them directly, and so does this one.
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.datasets import make_classification
    from sklearn.linear_model import Perceptron
    from sklearn.model_selection import StratifiedKFold

    from sklearn_calib import CalibratedClassifier

    X, y = make_classification(n_samples=1200, n_features=20, random_state=0)
    X = 10 * X
    X_train, y_train, X_test = X[:600], y[:600], X[600:]
    splits = list(
        StratifiedKFold(5, shuffle=True, random_state=0).split(X_train, y_train)
    )
    ours = CalibratedClassifier(
        Perceptron(random_state=0), IsotonicCalibration(), cv=splits
    ).fit(X_train, y_train)
    reference = CalibratedClassifierCV(
        Perceptron(random_state=0), method="isotonic", cv=splits
    ).fit(X_train, y_train)
    scores = np.abs(ours.estimators_[0].decision_function(X_test))
    assert np.median(scores) > 100  # saturated as probabilities
    proba = ours.predict_proba(X_test)
    np.testing.assert_allclose(proba, reference.predict_proba(X_test), atol=1e-11)
    assert len(np.unique(proba[:, 1].round(9))) > 50


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
    for model in (
        IsotonicCalibration(),
        HistogramBinning(),
        HistogramBinning(mode="top_label"),
    ):
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


# --- more oracles: ties, clipping, empty rows and bins, top-label by hand ---


def split_logits(n=4000, k=4, seed=0):
    logits, y = make_logits(n_samples=n, n_classes=k, seed=seed)
    half = n // 2
    return logits[:half], y[:half], logits[half:], y[half:]


def renormalise(calibrated, uncalibrated):
    """The documented finish: clip to [0, 1], empty rows fall back, floor, normalise."""
    calibrated = np.clip(calibrated, 0, 1)
    empty = calibrated.sum(axis=1) == 0
    calibrated[empty] = uncalibrated[empty]
    calibrated = np.maximum(calibrated, 1e-12)
    return calibrated / calibrated.sum(axis=1, keepdims=True)


def sklearn_isotonic(scores, targets, weights=None):
    return IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(
        scores, targets, sample_weight=weights
    )


def test_isotonic_ties_pool_their_targets():
    # Rounded logits give many calibration samples the same score: scikit-learn
    # pools tied scores (weighted mean of their targets) before PAV.
    X, y, X_test, _ = split_logits(seed=2)
    X, X_test = np.round(X / 3) * 3, np.round(X_test / 3) * 3
    p, p_test = softmax(X, axis=1), softmax(X_test, axis=1)
    assert len(np.unique(p[:, 0])) < len(p) / 4
    lo, lo_test = log_odds(X), log_odds(X_test)
    fitted = IsotonicCalibration().fit(X, y)
    for k in range(p.shape[1]):
        reference = sklearn_isotonic(lo[:, k], y == k)
        np.testing.assert_allclose(fitted.X_thresholds_[k], reference.X_thresholds_)
        np.testing.assert_allclose(fitted.y_thresholds_[k], reference.y_thresholds_)
    expected = np.column_stack(
        [sklearn_isotonic(lo[:, k], y == k).predict(lo_test[:, k]) for k in range(4)]
    )
    np.testing.assert_allclose(
        fitted.predict_proba(X_test), renormalise(expected, p_test), atol=1e-12
    )


def test_isotonic_clips_scores_outside_the_calibration_range():
    # Calibration scores span a middle range only; test scores beyond it take
    # the value at the nearest end of the fitted map.
    rng = np.random.default_rng(3)
    s = rng.uniform(-1, 1, 500)
    y = (rng.random(500) < 1 / (1 + np.exp(-2 * s))).astype(int)
    fitted = IsotonicCalibration().fit(s[:, None], y)
    ends = fitted.y_thresholds_[1][[0, -1]]
    far = np.array([[-50.0], [50.0]])
    np.testing.assert_allclose(fitted.predict_proba(far)[:, 1], ends, atol=1e-12)


def test_isotonic_row_with_all_zero_maps_keeps_its_uncalibrated_probabilities():
    # Every calibration label has probability 0.55 and every other class 0.45
    # or less, so each one-vs-rest map is 0 up to 0.45: a uniform test row gets
    # 0 from every map and falls back to its own softmax.
    rows, labels = [], []
    for k in range(3):
        for j in range(3):
            if j != k:
                p = np.full(3, 1e-3)
                p[k], p[j] = 0.55, 0.45 - 1e-3
                rows.append(np.log(p))
                labels.append(k)
    fitted = IsotonicCalibration().fit(np.array(rows * 5), np.array(labels * 5))
    uniform = np.zeros((1, 3))
    assert (
        max(
            np.interp(np.log(0.5), x, v)  # the log-odds of 1/3
            for x, v in zip(fitted.X_thresholds_, fitted.y_thresholds_, strict=True)
        )
        == 0
    )
    np.testing.assert_allclose(fitted.predict_proba(uniform), [[1 / 3] * 3])


def test_isotonic_top_label_matches_a_hand_computation():
    X, y, X_test, _ = split_logits(seed=4)
    p, p_test = softmax(X, axis=1), softmax(X_test, axis=1)
    correct = p.argmax(axis=1) == y
    iso = sklearn_isotonic(log_odds(X).max(axis=1), correct)
    top = p_test.argmax(axis=1)
    old = p_test.max(axis=1)
    new = iso.predict(log_odds(X_test).max(axis=1))
    expected = p_test * ((1 - new) / (1 - old))[:, None]
    expected[np.arange(len(top)), top] = new
    fitted = IsotonicCalibration(mode="top_label").fit(X, y)
    np.testing.assert_allclose(
        fitted.predict_proba(X_test), renormalise(expected, p_test), atol=1e-12
    )


@pytest.mark.parametrize("n_bins", [5, 15])
def test_histogram_uniform_bins_match_sklearn_calibration_curve(n_bins):
    X, y, _, _ = split_logits(seed=5)
    p = softmax(X, axis=1)
    fitted = HistogramBinning(n_bins=n_bins).fit(X, y)
    for k in range(p.shape[1]):
        prob_true, _ = calibration_curve(y == k, p[:, k], n_bins=n_bins)
        occupied = fitted.bin_counts_[k] > 0
        np.testing.assert_allclose(fitted.bin_values_[k][occupied], prob_true)


def test_histogram_matches_a_hand_loop_with_empty_bins_at_their_midpoints():
    X, y, X_test, _ = split_logits(n=200, k=3, seed=6)
    n_bins = 20
    p, p_test = softmax(X, axis=1), softmax(X_test, axis=1)
    expected = np.empty_like(p_test)
    empty_bins = 0
    for k in range(3):
        for b in range(n_bins):
            lo, hi = b / n_bins, (b + 1) / n_bins
            # bins are (lo, hi], with a score of exactly 0 in the first one
            inside = (p[:, k] > lo) & (p[:, k] <= hi) | ((b == 0) & (p[:, k] == 0))
            value = np.mean(y[inside] == k) if inside.any() else (lo + hi) / 2
            empty_bins += not inside.any()
            test_inside = (p_test[:, k] > lo) & (p_test[:, k] <= hi)
            test_inside |= (b == 0) & (p_test[:, k] == 0)
            expected[test_inside, k] = value
    assert empty_bins > 0  # the case documented for empty bins is exercised
    fitted = HistogramBinning(n_bins=n_bins).fit(X, y)
    np.testing.assert_allclose(
        fitted.predict_proba(X_test), renormalise(expected, p_test), atol=1e-12
    )


def test_histogram_top_label_matches_a_hand_computation():
    X, y, X_test, _ = split_logits(seed=8)
    n_bins = 10
    p, p_test = softmax(X, axis=1), softmax(X_test, axis=1)
    correct = p.argmax(axis=1) == y
    conf, conf_test = p.max(axis=1), p_test.max(axis=1)
    edges = np.linspace(0, 1, n_bins + 1)
    index = np.clip(np.searchsorted(edges[1:-1], conf, side="left"), 0, n_bins - 1)
    values = np.array(
        [
            correct[index == b].mean()
            if np.any(index == b)
            else edges[b : b + 2].mean()
            for b in range(n_bins)
        ]
    )
    test_index = np.searchsorted(edges[1:-1], conf_test, side="left")
    new = values[test_index]
    # the other classes' total, summed (1 - conf_test cancels near 1)
    rest = np.where(p_test == conf_test[:, None], 0.0, p_test).sum(axis=1)
    expected = p_test * ((1 - new) / rest)[:, None]
    expected[np.arange(len(new)), p_test.argmax(axis=1)] = new
    fitted = HistogramBinning(n_bins=n_bins, mode="top_label").fit(X, y)
    np.testing.assert_allclose(
        fitted.predict_proba(X_test), renormalise(expected, p_test), atol=1e-12
    )


def test_top_label_tied_rows_count_one_over_t_by_hand():
    # One bin: its value is the mean correctness. A row whose top ties
    # between t columns counts 1 / t when the label is among them (0 when
    # not), whatever the columns' order; every tied column then gets the
    # value (at most 1 / t), the other classes the rest.
    X = np.array([[0, 0, -1], [0, 0, -1], [1, 0, 0], [1, 0, 0]], dtype=float)
    y = np.array([1, 2, 0, 1])
    value = (0.5 + 0 + 1 + 0) / 4
    for calibrator in [
        HistogramBinning(n_bins=1, mode="top_label"),
        IsotonicCalibration(mode="top_label"),
    ]:
        fitted = calibrator.fit(X, y)
        proba = fitted.predict_proba(X[:1])[0]
        if isinstance(calibrator, HistogramBinning):
            np.testing.assert_allclose(fitted.bin_values_, [[value]], rtol=1e-15)
            np.testing.assert_allclose(proba, [value, value, 1 - 2 * value], rtol=1e-15)
        assert proba[0] == proba[1] <= 0.5
    # capped at 1 / t: the other class keeps the floor
    capped = HistogramBinning(n_bins=1, mode="top_label").fit(X, y)
    capped.bin_values_[:] = 0.9
    np.testing.assert_allclose(
        capped.predict_proba(X[:1])[0], [0.5, 0.5, 1e-12], rtol=1e-10
    )


def _tied_at_the_top(seed=12):
    """Logits whose top ties between 2 or 3 columns on a quarter of the rows."""
    X, y = make_logits(n_samples=800, n_classes=4, seed=seed)
    rng = np.random.default_rng(seed)
    rows = np.arange(len(y))
    top = X.argmax(axis=1)
    for k in (1, 2):
        tied = rng.random(len(y)) < 0.15 * k
        X[tied, (top[tied] + k) % 4] = X[rows[tied], top[tied]]
    return X, y


TIED_TOP_LABEL = [
    HistogramBinning(mode="top_label"),
    HistogramBinning(strategy="quantile", mode="top_label"),
    IsotonicCalibration(mode="top_label"),
]


@pytest.mark.parametrize(
    "calibrator", TIED_TOP_LABEL, ids=["histogram", "quantile", "isotonic"]
)
def test_top_label_tied_columns_in_any_order(calibrator):
    # A quarter of the rows tie at the top, between two or three columns.
    # The first tied column was "the prediction", at fit and at predict, so
    # permuting the columns (and the labels) moved those rows by up to 0.26
    # on llmub_llama2_13b_emotion and changed the fit of the other rows.
    X, y = _tied_at_the_top()
    ties = (X == X.max(axis=1, keepdims=True)).sum(axis=1) > 1
    assert 100 < ties.sum() < 400
    order = np.array([2, 0, 3, 1])
    proba = clone(calibrator).fit(X, y).predict_proba(X)
    permuted = clone(calibrator).fit(X[:, order], np.argsort(order)[y])
    # rtol: rows of confidence 1 - 2e-5 rescale the others by 1 - p, whose
    # rounding the column order changes (6e-12)
    np.testing.assert_allclose(
        permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-9, atol=1e-15
    )
    # every tied column gets the same probability
    is_top = X == X.max(axis=1, keepdims=True)
    top = np.where(is_top, proba, np.nan)
    np.testing.assert_array_equal(np.nanmax(top, axis=1), np.nanmin(top, axis=1))


@pytest.mark.parametrize(
    "calibrator",
    [
        IsotonicCalibration(),
        IsotonicCalibration(mode="top_label"),
        HistogramBinning(),
        HistogramBinning(strategy="quantile", mode="top_label"),
    ],
    ids=["isotonic", "isotonic_top", "histogram", "histogram_quantile_top"],
)
def test_extreme_logits_give_finite_log_probabilities(calibrator):
    X, y, _, _ = split_logits(seed=9)
    calibrator.fit(X, y)
    extreme = np.array([[1e4, -1e4, 0.0, 5.0], [-1e4, -1e4, -1e4, 1e4], [0, 0, 0, 0]])
    log_proba = calibrator.transform(extreme)
    assert np.all(np.isfinite(log_proba))
    proba = calibrator.predict_proba(extreme)
    assert not np.any(np.isnan(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


# --- masked classes (-inf logits) ---------------------------------------------------


def partially_masked(seed, n_samples=1500, n_classes=4):
    """Logits with a fifth of the entries masked, never the label's."""
    X, y = make_logits(n_samples=n_samples, n_classes=n_classes, seed=seed)
    rng = np.random.default_rng(seed)
    masked = rng.random(X.shape) < 0.2
    masked[np.arange(n_samples), y] = False
    X[masked] = -np.inf
    return X, y, masked


def reference_log_odds(X):
    """``z_k - logsumexp_{j != k} z_j`` column by column with scipy; a row with
    a single open class gives ``+inf``, clipped to the largest float64 as the
    calibrator does."""
    columns = [
        X[:, k] - logsumexp(np.delete(X, k, axis=1), axis=1) for k in range(X.shape[1])
    ]
    big = np.finfo(np.float64).max
    return np.clip(np.column_stack(columns), -big, big)


def test_isotonic_class_maps_are_fitted_on_the_rows_where_the_class_is_open():
    X, y, masked = partially_masked(seed=31)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    iso = IsotonicCalibration().fit(X, y, sample_weight=weights)
    lo = reference_log_odds(X)
    references = []
    for k in range(4):
        rows = ~masked[:, k]
        reference = sklearn_isotonic(lo[rows, k], y[rows] == k, weights[rows])
        references.append(reference)
        np.testing.assert_allclose(iso.X_thresholds_[k], reference.X_thresholds_)
        np.testing.assert_allclose(iso.y_thresholds_[k], reference.y_thresholds_)
    X_new, _, masked_new = partially_masked(seed=32, n_samples=300)
    lo_new = reference_log_odds(X_new)
    expected = np.column_stack([references[k].predict(lo_new[:, k]) for k in range(4)])
    expected = np.where(masked_new, 0.0, np.maximum(expected, 1e-12))
    expected /= expected.sum(axis=1, keepdims=True)
    proba = iso.predict_proba(X_new)
    np.testing.assert_allclose(proba, expected, rtol=1e-10, atol=1e-12)
    assert np.all(proba[masked_new] == 0)


def test_histogram_counts_only_the_open_entries_of_each_class():
    X, y, masked = partially_masked(seed=33)
    hb = HistogramBinning(n_bins=10).fit(X, y)
    p = softmax(X, axis=1)
    for k in range(4):
        rows = ~masked[:, k]
        index = np.clip(np.ceil(p[rows, k] * 10).astype(int) - 1, 0, 9)
        counts = np.bincount(index, minlength=10)
        hits = np.bincount(index, weights=(y[rows] == k), minlength=10)
        np.testing.assert_array_equal(hb.bin_counts_[k], counts)
        occupied = counts > 0
        np.testing.assert_allclose(
            hb.bin_values_[k][occupied], hits[occupied] / counts[occupied]
        )


@pytest.mark.parametrize(
    "calibrator", [IsotonicCalibration(), HistogramBinning(n_bins=5)], ids=repr
)
def test_a_class_masked_in_every_calibration_row_is_left_uncalibrated(calibrator):
    # No calibration data for the class: the identity on the probability as
    # a function of the log-odds (isotonic), bin mid-points (histogram).
    # Where it is open at prediction, it competes.
    X, y = make_logits(n_samples=600, n_classes=3, seed=34)
    y = np.where(y == 2, 0, y)
    X[:, 2] = -np.inf
    calibrator.fit(X, y)
    if isinstance(calibrator, IsotonicCalibration):
        grid = calibrator.X_thresholds_[2]
        assert grid[0] <= -36 and grid[-1] >= 36
        assert np.all(np.diff(grid) <= 0.1 + 1e-12)
        np.testing.assert_allclose(
            calibrator.y_thresholds_[2], 1 / (1 + np.exp(-grid)), rtol=1e-15
        )
    else:
        np.testing.assert_array_equal(calibrator.bin_counts_[2], 0.0)
        np.testing.assert_allclose(calibrator.bin_values_[2], [0.1, 0.3, 0.5, 0.7, 0.9])
    assert np.all(calibrator.predict_proba(X)[:, 2] == 0)
    open_row = np.array([[0.0, 0.0, 0.0]])
    assert calibrator.predict_proba(open_row)[0, 2] > 0


@pytest.mark.parametrize(
    "calibrator",
    [IsotonicCalibration(mode="top_label"), HistogramBinning(mode="top_label")],
    ids=repr,
)
def test_top_label_rows_without_mass_elsewhere_share_it_among_open_classes(calibrator):
    X, y = make_logits(n_samples=800, n_classes=4, seed=35)
    # Noisy labels: even the most confident predictions are wrong at times,
    # so the calibrated confidence of a one-hot row stays well below 1.
    noisy = np.random.default_rng(0).random(800) < 0.2
    noisy[np.argsort(softmax(X, axis=1).max(axis=1))[::-4][:10]] = True
    y = np.where(noisy, (X.argmax(axis=1) + 1) % 4, y)
    calibrator.fit(X, y)
    # Row 0: the other classes' probabilities underflow to 0 but are open;
    # row 1: class 3 is masked; row 2: every other class is masked.
    rows = np.array(
        [
            [0.0, -800.0, -900.0, -1000.0],
            [0.0, -800.0, -900.0, -np.inf],
            [0.0, -np.inf, -np.inf, -np.inf],
        ]
    )
    proba = calibrator.predict_proba(rows)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    confidence = proba[0, 0]
    assert confidence < 0.99
    np.testing.assert_allclose(proba[0, 1:], (1 - confidence) / 3)
    np.testing.assert_allclose(proba[1], [confidence, *[(1 - confidence) / 2] * 2, 0])
    np.testing.assert_array_equal(proba[2], [1.0, 0.0, 0.0, 0.0])


# --- classes absent from the calibration labels -----------------------------------


def test_absent_classes_match_a_regression_per_class():
    # 200 columns, labels from 12 of them: the other 188 maps (constant 0 in
    # scikit-learn's fit) are set in closed form, not regressed one by one.
    # Some entries are masked and some weights are zero (a class whose only
    # samples have weight zero is absent too); every map's thresholds and the
    # probabilities must be those of an IsotonicRegression per class.
    rng = np.random.default_rng(5)
    n_samples, n_classes = 120, 200
    X = rng.normal(scale=3.0, size=(n_samples, n_classes))
    y = rng.choice([0, 3, 7, 11, 40, 41, 42, 99, 150, 151, 198, 199], size=n_samples)
    X[np.arange(n_samples), y] += 4.0
    masked = rng.random(X.shape) < 0.05
    masked[np.arange(n_samples), y] = False
    X[masked] = -np.inf
    weights = rng.uniform(0.5, 2.0, size=n_samples)
    weights[y == 41] = 0.0  # present in the labels, absent from the fit
    weights[rng.random(n_samples) < 0.1] = 0.0
    iso = IsotonicCalibration(classes=np.arange(n_classes))
    iso.fit(X, y, sample_weight=weights)
    # The library's log-odds (checked against scipy's above), so that the
    # thresholds can be compared exactly.
    lo = softmax_log_odds(X)
    X_new = rng.normal(scale=3.0, size=(50, n_classes))
    lo_new = softmax_log_odds(X_new)
    expected = np.empty_like(X_new)
    n_constant = 0
    for k in range(n_classes):
        rows = ~masked[:, k]
        reference = sklearn_isotonic(lo[rows, k], y[rows] == k, weights[rows])
        np.testing.assert_array_equal(iso.X_thresholds_[k], reference.X_thresholds_)
        if np.all(reference.y_thresholds_ == 0):  # absent: the closed form
            n_constant += 1
            np.testing.assert_array_equal(iso.y_thresholds_[k], 0.0)
            assert iso.y_thresholds_[k].dtype == reference.y_thresholds_.dtype
        else:  # weights divided by their maximum: the last digit may move
            np.testing.assert_allclose(
                iso.y_thresholds_[k], reference.y_thresholds_, rtol=1e-13
            )
        expected[:, k] = reference.predict(lo_new[:, k])
    assert n_constant >= n_classes - 11
    expected = np.maximum(expected, 1e-12)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(
        iso.predict_proba(X_new), expected, rtol=1e-10, atol=1e-12
    )


def test_top_label_always_right_is_the_constant_fit_of_scikit_learn():
    # Every calibration prediction correct: the top-label targets are all 1
    # (the closed form's other constant), with one tie to a single threshold.
    X, y = make_logits(n_samples=200, n_classes=3, seed=8)
    y = X.argmax(axis=1)
    for rows in (slice(None), [0, 0]):
        iso = IsotonicCalibration(mode="top_label", classes=[0, 1, 2])
        iso.fit(X[rows], y[rows])
        confidence = softmax_log_odds(X[rows]).max(axis=1)
        reference = sklearn_isotonic(confidence, np.ones(len(confidence)))
        np.testing.assert_array_equal(iso.X_thresholds_[0], reference.X_thresholds_)
        np.testing.assert_array_equal(iso.y_thresholds_[0], reference.y_thresholds_)


# --- what the maps are between thresholds (issue 25, item 17b) ---------------------


def test_isotonic_is_scikit_learns_at_the_thresholds_and_linear_in_log_odds_between():
    # The maps regress on the log-odds of the probabilities: with no two
    # samples' probabilities rounding together (no saturation here), the
    # pooled blocks and fitted values are scikit-learn's isotonic regression
    # of the probabilities, the thresholds are the log-odds of its
    # thresholds, and between two thresholds the map interpolates linearly in
    # the log-odds, not in the probability as IsotonicRegression does.
    X, y = make_logits(n_samples=1000, n_classes=3, overconfidence=1.5, seed=12)
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=len(y))
    iso = IsotonicCalibration().fit(X, y, sample_weight=weights)
    P = softmax(X, axis=1)
    assert P.max() < 1 - 1e-9
    X_new, _ = make_logits(n_samples=2000, n_classes=3, overconfidence=1.5, seed=13)
    P_new = softmax(X_new, axis=1)
    in_log_odds, in_probability = [], []
    for k in range(3):
        reference = sklearn_isotonic(P[:, k], y == k, weights)
        np.testing.assert_allclose(
            iso.y_thresholds_[k], reference.y_thresholds_, rtol=1e-12, atol=1e-15
        )
        np.testing.assert_allclose(
            iso.X_thresholds_[k], logit(reference.X_thresholds_), rtol=1e-9
        )
        # At the thresholds the two maps agree.
        np.testing.assert_allclose(
            np.interp(logit(reference.X_thresholds_), *_thresholds(iso, k)),
            reference.predict(reference.X_thresholds_),
            rtol=1e-9,
            atol=1e-12,
        )
        # Between them: scikit-learn's values, joined by straight lines in
        # the log-odds.
        in_log_odds.append(
            np.interp(
                logit(P_new[:, k]),
                logit(reference.X_thresholds_),
                reference.y_thresholds_,
            )
        )
        in_probability.append(reference.predict(P_new[:, k]))

    def renormalised(columns):
        q = np.maximum(np.column_stack(columns), 1e-12)
        return q / q.sum(axis=1, keepdims=True)

    proba = iso.predict_proba(X_new)
    np.testing.assert_allclose(proba, renormalised(in_log_odds), rtol=1e-9, atol=1e-12)
    # ... which is not IsotonicRegression's linear interpolation in p.
    gap = np.abs(proba - renormalised(in_probability)).max()
    assert 1e-4 < gap < 0.05


def _thresholds(iso, k):
    return iso.X_thresholds_[k], iso.y_thresholds_[k]


def logit(p):
    return np.log(p) - np.log1p(-p)


def test_histogram_counts_beyond_float64_are_inf_and_the_fit_persists():
    # Weights near 1e306 (accepted: the fit divides them by their maximum):
    # a bin's weight in the caller's units exceeds float64 and is reported as
    # inf, without numpy's overflow warning; the fit equals the unit-weight
    # fit and survives a pickle round trip (the state check allows +inf).
    X, y = make_logits(n_samples=2000, n_classes=3, seed=17)
    weights = np.random.default_rng(4).uniform(0.5, 1.5, size=y.shape[0])
    expected = HistogramBinning().fit(X, y, sample_weight=weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = HistogramBinning().fit(X, y, sample_weight=weights * 1e306)
    assert np.isinf(huge.bin_counts_).any()
    np.testing.assert_allclose(
        huge.bin_counts_[np.isfinite(huge.bin_counts_)] / 1e306,
        expected.bin_counts_[np.isfinite(huge.bin_counts_)],
        rtol=1e-12,
    )
    restored = pickle.loads(pickle.dumps(huge))
    np.testing.assert_array_equal(restored.bin_counts_, huge.bin_counts_)
    np.testing.assert_allclose(
        restored.predict_proba(X), expected.predict_proba(X), rtol=1e-12
    )


@pytest.mark.parametrize("mode", ["top_label", "ovr"])
def test_quantile_edges_in_any_column_order(mode):
    # Integer logits: many rows hold the same logits in another order, hence
    # the same probabilities, but the softmax sums each row in column order,
    # so they fell an ulp apart and a quantile edge (one of them) split them;
    # permuting the classes moved the predictions by up to 0.19.
    rng = np.random.default_rng(3)
    X = rng.integers(-3, 4, size=(3000, 5)) * 0.37
    y = rng.integers(0, 5, size=3000)
    order = np.array([2, 0, 4, 3, 1])
    for n_bins in (7, 15, 40):
        calibrator = HistogramBinning(n_bins=n_bins, strategy="quantile", mode=mode)
        proba = clone(calibrator).fit(X, y).predict_proba(X)
        permuted = clone(calibrator).fit(X[:, order], np.argsort(order)[y])
        np.testing.assert_allclose(
            permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-12, atol=0
        )


def _vote_logits():
    """log(votes / 15) of a 15-neighbour vote among 4 classes (1e-13 for none).

    Probabilities lie exactly on the edges b / 15 of the default bins, and
    rows hold the same logits in other orders.
    """
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, size=2000)
    noise = rng.integers(0, 4, size=(2000, 15))
    votes = np.where(rng.random((2000, 15)) < 0.5, y[:, None], noise)
    counts = (votes[:, :, None] == np.arange(4)).sum(axis=1)
    return np.log(np.maximum(counts, 1e-13) / 15), y


@pytest.mark.parametrize("mode", ["top_label", "ovr"])
def test_uniform_edges_in_any_column_order(mode):
    # The logits of a 15-neighbour vote, log(votes / 15): a third of the
    # probabilities lie exactly on an edge b / 15 of the default bins, and
    # the softmax, summed in column order, put them an ulp either side, so
    # permuting the classes moved rows to the next bin (0.30 in ovr, 0.095
    # top-label), in memory and from chunks.
    X, y = _vote_logits()
    order = np.array([2, 0, 3, 1])
    calibrator = HistogramBinning(mode=mode)
    proba = clone(calibrator).fit(X, y).predict_proba(X)
    permuted = clone(calibrator).fit(X[:, order], np.argsort(order)[y])
    np.testing.assert_allclose(
        permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-12, atol=0
    )
    chunks = [(X[i : i + 300], y[i : i + 300]) for i in range(0, 2000, 300)]
    chunked = clone(calibrator).fit_chunks(chunks)
    np.testing.assert_allclose(chunked.predict_proba(X), proba, rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", ["ovr", "top_label"])
def test_isotonic_pools_equal_log_odds_in_any_column_order(mode):
    # log(votes / 15) with a floor for no vote: rows holding the same logits
    # in another order got log-odds an ulp apart (summed in column order),
    # which the isotonic regression ordered instead of pooling, and a score
    # to predict an ulp either side of a steep step read a value far along
    # it: permuting the classes moved predict_proba by 0.043 (ovr), 7e-4
    # (top_label).
    X, y = _vote_logits()
    proba = IsotonicCalibration(mode=mode).fit(X, y).predict_proba(X)
    for order in ([2, 0, 3, 1], [3, 2, 1, 0], [1, 3, 0, 2]):
        order = np.array(order)
        permuted = IsotonicCalibration(mode=mode).fit(X[:, order], np.argsort(order)[y])
        np.testing.assert_allclose(
            permuted.predict_proba(X[:, order]), proba[:, order], rtol=1e-12, atol=0
        )


def test_top_label_rescales_the_others_without_cancellation():
    # The other classes were rescaled by (1 - new) / (1 - p), whose 1 - p
    # cancels near p = 1: relative errors of 5e-6 at a gap of 20, 0.19 at
    # 30, and beyond ~36.7 (p rounds to 1) the others shared 1 - new equally
    # whatever their logits. They are (1 - new) times the softmax of the
    # other logits.
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(200, 3))
    Z[:, 0] += np.linspace(5.0, 45.0, 200)
    assert np.all(Z.argmax(axis=1) == 0)
    new = rng.uniform(0.5, 0.999, size=200)
    out = apply_top_label(softmax(Z, axis=1), new)
    expected = (1.0 - new[:, None]) * softmax(Z[:, 1:], axis=1)
    np.testing.assert_allclose(out[:, 1:], expected, rtol=1e-13)
    # through predict_proba (top-label isotonic regression uses it too)
    X, y = make_logits(n_samples=1000, n_classes=3, seed=2)
    proba = HistogramBinning(mode="top_label").fit(X, y).predict_proba(Z)
    expected = (1.0 - proba[:, :1]) * softmax(Z[:, 1:], axis=1)
    assert np.all(expected > 1e-10)  # above the probability floor
    np.testing.assert_allclose(proba[:, 1:], expected, rtol=1e-12)
