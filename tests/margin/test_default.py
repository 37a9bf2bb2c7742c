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


def test_default_base_keeps_the_best_mean_held_out_nll():
    # No one-standard-error rule: with plain folds it lowered the mean test
    # NLL of neither the val/test splits nor the small subsets (user guide).
    X, y = make_logits(n_samples=300, n_classes=3, overconfidence=2.0, seed=43)
    mts = _fit_quietly(MarginTemperatureScaling(device="cpu"), X, y)
    selector = mts.base_
    splits = np.array(
        [
            selector.cv_results_[f"split{s}_test_score"]
            for s in range(selector.n_splits_)
        ]
    ).T
    best = int(np.argmax(splits.mean(axis=1)))
    # on these rows the best mean is not the simplest candidate, and the
    # simplest is within one standard error of it (the former rule's choice)
    gap = splits[best] - splits[0]
    assert best == 1
    assert gap.mean() <= gap.std(ddof=1) / np.sqrt(splits.shape[1])
    assert selector.best_index_ == best
    assert selector.best_score_ == pytest.approx(splits[best].mean(), rel=1e-12)
