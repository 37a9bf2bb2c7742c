"""MarginTemperatureScaling's defaults: the prior-strength alpha and its base.

References: the objective written again in numpy with alpha = 50 / n_eff
(Kish's effective size computed here), temperature scaling on the same rows,
and the raw model on the public real-logit sets (skipped without them).
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from sklearn_calib import MarginTemperatureScaling, TemperatureScaling
from sklearn_calib.metrics import log_loss
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared
from .test_composite import _log_softmax, _skewed_logits, reference_objective


def _fit_quietly(estimator, X, y, **kwargs):
    with warnings.catch_warnings():
        # few rows per class: the selector's folds and solvers may warn
        warnings.simplefilter("ignore")
        return estimator.fit(X, y, **kwargs)


@pytest.mark.parametrize("weighted", [False, True])
def test_auto_alpha_is_a_fixed_prior_over_the_effective_rows(weighted):
    X, y = _skewed_logits(n_samples=1200, seed=21)
    rng = np.random.default_rng(3)
    weights = rng.uniform(0.2, 3.0, size=y.shape[0]) if weighted else None
    mts = MarginTemperatureScaling(
        TemperatureScaling(device="cpu"), cv=None, n_knots=5, tol=1e-9, device="cpu"
    ).fit(X, y, sample_weight=weights)
    w = np.ones(y.shape[0]) if weights is None else weights
    n_eff = w.sum() ** 2 / np.sum(w**2)
    assert mts.alpha_ == pytest.approx(50.0 / n_eff, rel=1e-12)
    # the fit minimises the numpy objective with that penalty (unit weights:
    # the reference objective is unweighted)
    if not weighted:
        log_proba = _log_softmax(mts.base_.transform(X))
        args = (log_proba, y, mts.knots_, 1.0, 50.0 / y.shape[0])
        u = mts.log_inverse_temperature_
        assert mts.loss_ == pytest.approx(reference_objective(u, *args), rel=1e-10)
        grad = approx_fprime(u, reference_objective, 1e-6, *args)
        assert np.max(np.abs(grad)) < 1e-5


def test_auto_alpha_pulls_harder_toward_the_base_on_fewer_rows():
    X, y = _skewed_logits(n_samples=3000, seed=22)

    def spread(rows, alpha):
        mts = MarginTemperatureScaling(
            TemperatureScaling(device="cpu"), cv=None, alpha=alpha, device="cpu"
        ).fit(X[rows], y[rows])
        return mts, np.ptp(mts.log_inverse_temperature_)

    small = np.arange(150)
    auto, auto_spread = spread(small, "auto")
    fixed, fixed_spread = spread(small, 1e-2)
    assert auto.alpha_ == pytest.approx(50.0 / 150)
    # the margin temperature is flatter (closer to one temperature) under
    # the stronger prior of a small set, and the same as the fixed 1e-2 on
    # 5,000 rows' worth of data
    assert auto_spread < 0.5 * fixed_spread
    big = np.tile(np.arange(3000), 2)[:5000]
    assert spread(big, "auto")[0].alpha_ == pytest.approx(1e-2)


def test_small_calibration_sets_no_worse_than_temperature_scaling():
    # digits MLP, 100 random val rows (3 draws), scored on the 360 test rows:
    # measured NLL TS 0.1574, 0.1595, 0.1839; default 0.1426, 0.1598, 0.1834
    data = load_shared("digits_mlp_trained_here")
    X, y = data["logits_val"], data["y_val"]
    X_test, y_test = data["logits_test"].astype(np.float64), data["y_test"]
    classes = np.arange(X.shape[1])
    differences = []
    for draw in range(3):
        rows = np.random.default_rng(draw).choice(y.shape[0], 100, replace=False)
        ts = TemperatureScaling(device="cpu", classes=classes).fit(X[rows], y[rows])
        mts = _fit_quietly(
            MarginTemperatureScaling(device="cpu", classes=classes), X[rows], y[rows]
        )
        assert mts.alpha_ == pytest.approx(0.5)
        differences.append(
            log_loss(y_test, mts.predict_proba(X_test), labels=classes)
            - log_loss(y_test, ts.predict_proba(X_test), labels=classes)
        )
    differences = np.array(differences)
    noise = differences.std(ddof=1) / np.sqrt(len(differences))
    assert differences.mean() <= 2 * noise


def test_a_class_never_the_label_keeps_its_test_rows():
    # Class 0 of the digits MLP left out of the calibration rows, present at
    # test time: the structured maps' penalised intercept keeps its
    # probability (measured NLL on its 36 test rows: 0.013; temperature
    # scaling 0.0025), far inside the cost of an add-half prior on a class
    # never seen in n rows, log(2n + K) = 6.5.
    data = load_shared("digits_mlp_trained_here")
    X, y = data["logits_val"], data["y_val"]
    X_test, y_test = data["logits_test"].astype(np.float64), data["y_test"]
    classes = np.arange(X.shape[1])
    seen = y != 0
    mts = _fit_quietly(
        MarginTemperatureScaling(device="cpu", classes=classes), X[seen], y[seen]
    )
    rows = y_test == 0
    proba = mts.predict_proba(X_test[rows])
    assert np.all(np.isfinite(np.log(proba[:, 0])))
    assert -np.mean(np.log(proba[:, 0])) < np.log(2 * seen.sum() + len(classes))
    raw_correct = X_test[rows].argmax(axis=1) == 0
    assert np.mean(proba.argmax(axis=1) == 0) >= raw_correct.mean() - 0.05


def test_default_is_deterministic():
    X, y = make_logits(n_samples=400, n_classes=4, overconfidence=2.0, seed=23)
    first = _fit_quietly(MarginTemperatureScaling(device="cpu"), X, y)
    second = _fit_quietly(MarginTemperatureScaling(device="cpu"), X, y)
    np.testing.assert_array_equal(
        first.log_inverse_temperature_, second.log_inverse_temperature_
    )
    np.testing.assert_array_equal(first.predict_proba(X), second.predict_proba(X))


def test_one_standard_error_rule_keeps_the_simplest_close_candidate():
    from sklearn_calib._meta.selector import _one_standard_error_choice

    # rows: candidates from the least to the most flexible; columns: splits
    scores = np.array(
        [
            [-1.00, -1.10, -0.90, -1.00],  # gap to best: mean 0.025, SE 0.025
            [-0.99, -1.09, -0.89, -0.99],
            [-0.98, -1.05, -0.88, -0.99],  # the best mean
        ]
    )
    # by hand: gap = scores[2] - scores[0] = [.02, .05, .02, .01], mean 0.025,
    # SE = std(ddof=1) / 2 = 0.00866: 0.025 > SE, so candidate 0 is not kept;
    # gap to candidate 1 = [.01, .04, .01, 0], mean 0.015, SE 0.00866: not kept
    assert _one_standard_error_choice(scores, 2) == 2
    noisy = scores.copy()
    noisy[2] = [-0.90, -1.20, -0.80, -1.08]  # mean -0.995, best; gaps noisy
    gap = noisy[2] - noisy[0]
    assert gap.mean() <= gap.std(ddof=1) / 2
    assert _one_standard_error_choice(noisy, 2) == 0
    # one split: no standard error, the best is kept
    assert _one_standard_error_choice(scores[:, :1], 2) == 2


def test_default_base_falls_back_to_the_simplest_within_one_standard_error():
    X, y = make_logits(n_samples=300, n_classes=3, overconfidence=2.0, seed=43)
    mts = _fit_quietly(MarginTemperatureScaling(device="cpu"), X, y)
    selector = mts.base_
    assert not hasattr(selector, "_one_standard_error")
    splits = np.array(
        [
            selector.cv_results_[f"split{s}_test_score"]
            for s in range(selector.n_splits_)
        ]
    ).T
    best = int(np.argmax(splits.mean(axis=1)))
    # the chosen candidate by the rule, computed here from cv_results_
    chosen = best
    for c in range(best):
        gap = splits[best] - splits[c]
        if gap.mean() <= gap.std(ddof=1) / np.sqrt(splits.shape[1]):
            chosen = c
            break
    # on these rows the rule matters: structured vector scaling has the best
    # mean, temperature scaling is within one standard error of it
    assert (best, chosen) == (1, 0)
    assert selector.best_index_ == chosen
    assert selector.best_score_ == pytest.approx(splits[chosen].mean(), rel=1e-12)
