"""Selective prediction: risk-coverage curve, AURC, E-AURC and their display."""

import itertools
import subprocess
import sys

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling
from sklearn_calib.metrics import get_scorer
from sklearn_calib.selective import (
    aurc,
    coverage_at_risk,
    excess_aurc,
    risk_coverage_curve,
    selective_risk,
)
from sklearn_calib.utils._testing import make_logits

from .conftest import load_shared


def softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def risks_in_order(errors):
    """r_k, the error rate of the first k samples of the given order."""
    errors = np.asarray(errors, dtype=float)
    return np.cumsum(errors) / np.arange(1, len(errors) + 1)


def hand_aurc(confidence, errors):
    """Mean of r_k over k, most confident first (no ties)."""
    order = np.argsort(-np.asarray(confidence), kind="stable")
    return float(np.mean(risks_in_order(np.asarray(errors)[order])))


def tie_averaged(confidence, errors, statistic):
    """``statistic`` of the ordered errors averaged over every order that
    sorts the confidence decreasingly (every way to break its ties)."""
    confidence, errors = np.asarray(confidence), np.asarray(errors)
    values = []
    for perm in itertools.permutations(range(len(confidence))):
        perm = np.array(perm)
        if np.all(np.diff(confidence[perm]) <= 0):
            values.append(statistic(errors[perm]))
    return np.mean(values, axis=0)


@pytest.fixture(scope="module")
def proba_y():
    logits, y = make_logits(n_samples=500, n_classes=4, seed=3)
    return softmax(logits), y


def errors_of(proba, y):
    return (proba.argmax(axis=1) != y).astype(float)


# --- AURC against hand computations ---------------------------------------------------


def test_aurc_is_the_mean_selective_risk(proba_y):
    proba, y = proba_y
    expected = hand_aurc(proba.max(axis=1), errors_of(proba, y))
    assert aurc(y, proba) == pytest.approx(expected, rel=1e-12)


def test_small_hand_example():
    y_prob = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    # confidences 0.9 (right), 0.8 (right), 0.7 (wrong), 0.6 (wrong)
    assert aurc([0, 1, 0, 1], y_prob) == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)
    curve = risk_coverage_curve([0, 1, 0, 1], y_prob)
    np.testing.assert_allclose(curve.coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(curve.risk, [0, 0, 1 / 3, 1 / 2])
    np.testing.assert_allclose(curve.thresholds, [0.9, 0.8, 0.7, 0.6])


def test_ties_are_averaged_over_their_orderings():
    confidence = np.array([0.9, 0.7, 0.7, 0.7, 0.4, 0.4, 0.35])
    errors = np.array([0, 1, 0, 1, 0, 1, 1])
    rest = (1 - confidence) / 2
    y_prob = np.column_stack([confidence, rest, rest])
    y = errors.astype(int)  # class 0 is predicted: an error when y = 1
    expected = tie_averaged(confidence, errors, lambda e: np.mean(risks_in_order(e)))
    assert aurc(y, y_prob) == pytest.approx(expected, rel=1e-12)
    # And so the value ignores the row order.
    order = np.random.default_rng(0).permutation(7)
    assert aurc(y[order], y_prob[order]) == pytest.approx(expected, rel=1e-12)
    # The curve has one point per distinct confidence.
    curve = risk_coverage_curve(y, y_prob)
    np.testing.assert_allclose(curve.coverage, [1 / 7, 4 / 7, 6 / 7, 1])
    np.testing.assert_allclose(curve.risk, [0, 2 / 4, 3 / 6, 4 / 7])
    # Inside a tie, the selective risk is the expected one.
    by_k = tie_averaged(confidence, errors, risks_in_order)
    for k in range(1, 8):
        assert selective_risk(y, y_prob, coverage=k / 7) == pytest.approx(
            by_k[k - 1], rel=1e-12
        )


def test_integer_weights_equal_repeated_rows(proba_y):
    proba, y = proba_y
    weights = np.random.default_rng(1).integers(0, 4, size=len(y))
    rows = (np.repeat(y, weights), np.repeat(proba, weights, axis=0))
    for metric in (aurc, excess_aurc):
        assert metric(y, proba, sample_weight=weights) == pytest.approx(
            metric(*rows), rel=1e-10
        )
    assert selective_risk(
        y, proba, coverage=0.4, sample_weight=weights
    ) == pytest.approx(selective_risk(*rows, coverage=0.4), rel=1e-10)
    assert coverage_at_risk(y, proba, risk=0.1, sample_weight=weights) == pytest.approx(
        coverage_at_risk(*rows, risk=0.1), rel=1e-12
    )


def test_unit_weights_lists_and_row_order(proba_y):
    proba, y = proba_y
    value = aurc(y, proba)
    assert type(value) is float
    assert aurc(y, proba, sample_weight=np.ones(len(y))) == pytest.approx(
        value, rel=1e-12
    )
    assert aurc(y.tolist(), proba.tolist()) == pytest.approx(value, rel=1e-12)
    order = np.random.default_rng(2).permutation(len(y))
    assert aurc(y[order], proba[order]) == pytest.approx(value, rel=1e-12)


def test_excess_aurc_subtracts_the_ideal_ranking(proba_y):
    proba, y = proba_y
    errors = errors_of(proba, y)
    # The ideal confidence puts the correct predictions first.
    ideal = hand_aurc(1 - errors + 1e-9 * np.arange(len(y)), errors)
    assert excess_aurc(y, proba) == pytest.approx(aurc(y, proba) - ideal, rel=1e-10)
    assert excess_aurc(y, proba) > 0
    assert excess_aurc(y, proba, confidence=1 - errors) == pytest.approx(0, abs=1e-15)


def test_ideal_aurc_tends_to_the_closed_form():
    # Geifman et al.: AURC* = r + (1 - r) log(1 - r) in the limit of many samples.
    rng = np.random.default_rng(4)
    n, r = 200_000, 0.28
    y = (rng.random(n) < r).astype(int)  # class 0 predicted: y = 1 is an error
    y_prob = np.column_stack([np.full(n, 0.8), np.full(n, 0.2)])
    errors = y.astype(float)
    ideal = aurc(y, y_prob, confidence=1 - errors)
    rate = errors.mean()
    assert ideal == pytest.approx(rate + (1 - rate) * np.log(1 - rate), abs=1e-4)


def test_every_prediction_right_or_wrong():
    y_prob = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    assert aurc([0, 1, 0], y_prob) == 0.0
    assert excess_aurc([0, 1, 0], y_prob) == 0.0
    assert aurc([1, 0, 1], y_prob) == pytest.approx(1.0)
    assert excess_aurc([1, 0, 1], y_prob) == pytest.approx(0.0, abs=1e-15)


def test_confidence_argument_replaces_the_top_probability(proba_y):
    proba, y = proba_y
    top2 = np.sort(proba, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    expected = hand_aurc(margin, errors_of(proba, y))
    assert aurc(y, proba, confidence=margin) == pytest.approx(expected, rel=1e-12)


# --- selective risk and coverage ------------------------------------------------------


def test_selective_risk_at_k_over_n_is_r_k(proba_y):
    proba, y = proba_y
    order = np.argsort(-proba.max(axis=1), kind="stable")
    r = risks_in_order(errors_of(proba, y)[order])
    for k in (1, 17, 250, 499, 500):
        assert selective_risk(y, proba, coverage=k / 500) == pytest.approx(
            r[k - 1], rel=1e-10
        )


def test_coverage_at_risk_is_the_largest_threshold_meeting_it(proba_y):
    proba, y = proba_y
    curve = risk_coverage_curve(y, proba)
    for target in (0.0, 0.05, 0.1, 0.2, 1.0):
        good = curve.risk <= target
        expected = curve.coverage[good].max() if good.any() else 0.0
        assert coverage_at_risk(y, proba, risk=target) == expected
    assert coverage_at_risk(y, proba, risk=1.0) == 1.0
    # an exact rate of 3/10 against 0.1 * 3 (an ulp above 0.3) is accepted
    three_in_ten = np.r_[np.zeros(7), np.ones(3)].astype(int)
    scores = np.c_[np.linspace(0.9, 0.6, 10), np.linspace(0.1, 0.4, 10)]
    assert coverage_at_risk(three_in_ten, scores, risk=0.1 * 3) == 1.0
    assert coverage_at_risk(three_in_ten, scores, risk=0.3) == 1.0


def test_coverage_at_risk_zero_refuses_an_error_of_tiny_weight():
    # an absolute slack of 8 ulps of 1 let the rate 5e-18 pass as risk 0
    y_prob = [[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]]
    weights = [1.0, 1e-17, 1.0]
    assert coverage_at_risk([0, 1, 0], y_prob, risk=0.0, sample_weight=weights) == (
        1.0 / (2.0 + 1e-17)
    )
    assert coverage_at_risk([0, 1, 0], y_prob, risk=1e-17, sample_weight=weights) == 1.0


def test_curve_ends_at_the_error_rate(proba_y):
    proba, y = proba_y
    curve = risk_coverage_curve(y, proba)
    assert curve.coverage[-1] == 1.0
    assert curve.risk[-1] == pytest.approx(errors_of(proba, y).mean())
    assert np.all(np.diff(curve.coverage) > 0)
    assert np.all(np.diff(curve.thresholds) < 0)


def test_only_the_ranking_of_the_confidence_matters(proba_y):
    proba, y = proba_y
    confidence = proba.max(axis=1)
    for transformed in (confidence**3, np.log(confidence), 10 * confidence - 4):
        for metric in (aurc, excess_aurc):
            assert metric(y, proba, confidence=transformed) == pytest.approx(
                metric(y, proba), rel=1e-12
            )


def test_temperature_scaling_can_change_aurc():
    # A temperature keeps each sample's argmax but not the order of the top
    # probabilities across samples (it depends on the whole logit vector), so
    # calibration does change the ranking that AURC scores.
    data = load_shared("c100_resnet56_chenyaofo")
    logits, y = data["logits_test"].astype(float), data["y_test"]
    ts = TemperatureScaling(device="cpu").fit(data["logits_val"], data["y_val"])
    proba = ts.predict_proba(logits)
    np.testing.assert_array_equal(proba.argmax(axis=1), logits.argmax(axis=1))
    assert aurc(y, proba) != pytest.approx(aurc(y, softmax(logits)), rel=1e-3)
    assert aurc(y, proba) == pytest.approx(
        hand_aurc(proba.max(axis=1), errors_of(proba, y)), rel=1e-12
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda y, p: selective_risk(y, p, coverage=0.0), "coverage"),
        (lambda y, p: selective_risk(y, p, coverage=1.5), "coverage"),
        (lambda y, p: coverage_at_risk(y, p, risk=-0.1), "risk"),
        (lambda y, p: aurc(y, p, confidence=np.ones(3)), "one entry per row"),
        (
            lambda y, p: aurc(y, p, confidence=np.full(len(y), np.nan)),
            "NaN or infinity",
        ),
        (lambda y, p: aurc(y, p[:, :2]), "rows must sum to 1"),
    ],
)
def test_bad_input_raises(proba_y, call, message):
    proba, y = proba_y
    with pytest.raises((ValueError, TypeError), match=message):
        call(y, proba)


def test_aurc_scorers():
    logits, y = make_logits(n_samples=300, n_classes=3, seed=5)
    ts = TemperatureScaling(device="cpu").fit(logits, y)
    proba = ts.predict_proba(logits)
    assert get_scorer("neg_aurc")(ts, logits, y) == pytest.approx(-aurc(y, proba))
    assert get_scorer("neg_excess_aurc")(ts, logits, y) == pytest.approx(
        -excess_aurc(y, proba)
    )


# --- RiskCoverageDisplay --------------------------------------------------------------


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_display_draws_the_curve(plt, proba_y):
    from sklearn_calib.display import RiskCoverageDisplay

    proba, y = proba_y
    disp = RiskCoverageDisplay.from_predictions(y, proba, name="raw")
    curve = risk_coverage_curve(y, proba)
    np.testing.assert_allclose(disp.line_.get_xdata(), curve.coverage)
    np.testing.assert_allclose(disp.line_.get_ydata(), curve.risk)
    assert disp.aurc == pytest.approx(aurc(y, proba))
    labels = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert labels == [f"raw, AURC {disp.aurc:.4f}", "raw, ideal"]
    # The ideal curve: zero risk until every correct prediction is in, then
    # up to the error rate.
    rate = errors_of(proba, y).mean()
    ideal_x, ideal_y = disp.ideal_line_.get_xdata(), disp.ideal_line_.get_ydata()
    assert np.all(ideal_y[ideal_x <= 1 - rate + 1e-12] == 0)
    assert ideal_y[-1] == pytest.approx(rate) and ideal_x[-1] == pytest.approx(1)
    assert disp.figure_ is disp.ax_.figure
    assert disp.ax_.get_xlabel() == "Coverage"


def test_display_from_estimator_on_shared_axes(plt):
    from sklearn_calib.display import RiskCoverageDisplay

    logits, y = make_logits(n_samples=400, n_classes=4, seed=6)
    names = np.array(["a", "b", "c", "d"])
    ts = TemperatureScaling(device="cpu").fit(logits, names[y])
    first = RiskCoverageDisplay.from_predictions(names[y], softmax(logits), name="raw")
    second = RiskCoverageDisplay.from_estimator(
        ts, logits, names[y], ax=first.ax_, ideal=False
    )
    assert second.ax_ is first.ax_ and second.ideal_line_ is None
    assert len(first.ax_.get_lines()) == 3
    assert second.line_.get_label().startswith("TemperatureScaling, AURC")
    with pytest.raises(TypeError, match="predict_proba"):
        from sklearn.svm import LinearSVC

        svc = LinearSVC().fit(logits, y)
        RiskCoverageDisplay.from_estimator(svc, logits, y)


def test_display_renders_png(plt, proba_y, tmp_path):
    from sklearn_calib.display import RiskCoverageDisplay

    proba, y = proba_y
    disp = RiskCoverageDisplay.from_predictions(y, proba)
    path = tmp_path / "rc.png"
    disp.figure_.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_importing_selective_and_conformal_loads_neither_torch_nor_matplotlib():
    code = (
        "import sys, sklearn_calib.selective, sklearn_calib.conformal, "
        "sklearn_calib.display; "
        "print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
