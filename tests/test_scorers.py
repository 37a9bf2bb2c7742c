"""Scorers by name, in scikit-learn's model selection tools."""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import get_scorer as sklearn_get_scorer
from sklearn.metrics import get_scorer_names as sklearn_scorer_names
from sklearn.model_selection import (
    GridSearchCV,
    StratifiedKFold,
    cross_val_score,
    cross_validate,
)
from sklearn.utils._param_validation import InvalidParameterError

from sklearn_calib import TemperatureScaling
from sklearn_calib.metrics import (
    brier_score,
    expected_calibration_error,
    get_scorer,
    get_scorer_names,
    get_scorers,
    log_loss,
    smooth_calibration_error,
)
from sklearn_calib.utils._compat import _Scorer
from sklearn_calib.utils._testing import make_logits
from sklearn_calib.utils.discovery import all_metrics

# Scorers are named neg_<metric>, except where that is a scikit-learn scorer
# with another definition (scikit-learn halves the binary Brier score).
RENAMED = {"brier_score": "neg_multiclass_brier_score"}
SCORER_OF = {name: RENAMED.get(name, f"neg_{name}") for name, _ in all_metrics()}
OUR_NAMES = sorted(SCORER_OF.values())


@pytest.fixture(scope="module")
def logits_y():
    return make_logits(n_samples=600, n_classes=4, seed=0)


@pytest.fixture(scope="module")
def fitted(logits_y):
    X, y = logits_y
    return TemperatureScaling(device="cpu").fit(X, y)


def test_every_metric_has_a_scorer():
    names = get_scorer_names()
    assert set(OUR_NAMES) <= set(names)
    assert set(sklearn_scorer_names()) <= set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", OUR_NAMES)
def test_scorer_is_the_negated_metric(name, fitted, logits_y):
    X, y = logits_y
    scorer = get_scorer(name)
    metric_name = {v: k for k, v in SCORER_OF.items()}[name]
    metric = dict(all_metrics())[metric_name]
    # a scikit-learn scorer object, so multi-metric search caches predict_proba
    assert isinstance(scorer, _Scorer)
    assert repr(scorer) == (
        f"make_scorer({metric.__name__}, greater_is_better=False, "
        "response_method='predict_proba')"
    )
    assert scorer(fitted, X, y) == pytest.approx(-metric(y, fitted.predict_proba(X)))
    weights = np.random.default_rng(0).uniform(0, 2, size=len(y))
    assert scorer(fitted, X, y, sample_weight=weights) == pytest.approx(
        -metric(y, fitted.predict_proba(X), sample_weight=weights)
    )


def test_get_scorer_returns_fresh_copies_and_falls_back_to_sklearn(fitted, logits_y):
    X, y = logits_y
    assert get_scorer("neg_log_loss") is not get_scorer("neg_log_loss")
    accuracy = get_scorer("accuracy")
    assert accuracy(fitted, X, y) == pytest.approx(np.mean(fitted.predict(X) == y))
    assert get_scorer(None) is None
    assert get_scorer(expected_calibration_error) is expected_calibration_error
    with pytest.raises(ValueError, match="get_scorer_names"):
        get_scorer("neg_expected_calibration_eror")


@pytest.mark.parametrize("n_classes", [2, 3])
def test_no_scorer_shares_a_name_with_sklearn_and_disagrees(n_classes):
    X, y = make_logits(n_samples=500, n_classes=n_classes, seed=6)
    labels = np.array(["ant", "bee", "cat"])[:n_classes]
    model = TemperatureScaling(device="cpu").fit(X, labels[y])
    shared = set(get_scorers()) & set(sklearn_scorer_names())
    assert "neg_log_loss" in shared
    for name in sorted(shared):
        assert get_scorer(name)(model, X, labels[y]) == pytest.approx(
            sklearn_get_scorer(name)(model, X, labels[y]), rel=1e-12
        ), name
    # scikit-learn's neg_brier_score is returned as is: for two classes it is
    # half the multiclass Brier score, the library's neg_multiclass_brier_score.
    # (integer labels: scikit-learn's binary Brier score needs a pos_label
    # for strings)
    model = TemperatureScaling(device="cpu").fit(X, y)
    proba = model.predict_proba(X)
    sklearn_value = sklearn_get_scorer("neg_brier_score")(model, X, y)
    assert get_scorer("neg_brier_score")(model, X, y) == sklearn_value
    factor = 0.5 if n_classes == 2 else 1.0
    assert sklearn_value == pytest.approx(-factor * brier_score(y, proba), rel=1e-12)
    assert get_scorer("neg_multiclass_brier_score")(model, X, y) == pytest.approx(
        -brier_score(y, proba), rel=1e-12
    )


def test_string_names_fail_in_sklearn_and_get_scorers_is_the_answer(logits_y):
    # The pitfall the docstrings describe: scikit-learn does not know the names.
    X, y = logits_y
    search = GridSearchCV(
        TemperatureScaling(device="cpu"),
        {"max_iter": [50]},
        scoring="neg_expected_calibration_error",
    )
    with pytest.raises(InvalidParameterError, match="scoring"):
        search.fit(X, y)
    scorers = get_scorers()
    # Every probability scorer: the metrics' and the selective-risk ones.
    assert sorted(scorers) == sorted([*OUR_NAMES, "neg_aurc", "neg_excess_aurc"])
    results = cross_validate(
        TemperatureScaling(device="cpu"), X, y, cv=3, scoring=scorers
    )
    folds = list(StratifiedKFold(3).split(X, y))
    for name in OUR_NAMES:
        metric = dict(all_metrics())[{v: k for k, v in SCORER_OF.items()}[name]]
        for i, (train, test) in enumerate(folds):
            model = TemperatureScaling(device="cpu").fit(X[train], y[train])
            assert results[f"test_{name}"][i] == pytest.approx(
                -metric(y[test], model.predict_proba(X[test])), rel=1e-9
            )
    search = GridSearchCV(
        TemperatureScaling(device="cpu"),
        {"max_iter": [50, 100]},
        scoring=get_scorers(["neg_expected_calibration_error", "accuracy"]),
        refit="neg_expected_calibration_error",
        cv=3,
    ).fit(X, y)
    assert {"mean_test_neg_expected_calibration_error", "mean_test_accuracy"} <= set(
        search.cv_results_
    )


def test_get_scorers_names():
    chosen = get_scorers(["neg_log_loss", "roc_auc_ovr", "neg_brier_score"])
    assert list(chosen) == ["neg_log_loss", "roc_auc_ovr", "neg_brier_score"]
    assert repr(chosen["neg_brier_score"]) == repr(
        sklearn_get_scorer("neg_brier_score")
    )
    assert get_scorers()["neg_log_loss"] is not get_scorers()["neg_log_loss"]
    with pytest.raises(TypeError, match="list of scorer names"):
        get_scorers("neg_log_loss")
    with pytest.raises(ValueError, match="get_scorer_names"):
        get_scorers(["neg_log_los"])


def test_grid_search_with_two_calibration_scorers(logits_y):
    X, y = logits_y
    search = GridSearchCV(
        TemperatureScaling(device="cpu"),
        {"max_iter": [50, 100]},
        scoring={
            "ece": get_scorer("neg_expected_calibration_error"),
            "nll": get_scorer("neg_log_loss"),
        },
        refit="ece",
        cv=3,
    ).fit(X, y)
    results = search.cv_results_
    assert set(results) >= {"mean_test_ece", "mean_test_nll", "rank_test_ece"}
    assert np.all(results["mean_test_ece"] <= 0)
    assert np.all(results["mean_test_nll"] < 0)
    # The refit model is scored by the same scorer on the training data.
    best = search.best_estimator_
    assert search.score(X, y) == pytest.approx(
        -expected_calibration_error(y, best.predict_proba(X))
    )
    # Each fold score is the metric on that fold's held-out part.
    folds = list(StratifiedKFold(3).split(X, y))
    _, test = folds[0]
    train = folds[0][0]
    fold_model = TemperatureScaling(device="cpu", max_iter=50).fit(X[train], y[train])
    assert results["split0_test_nll"][0] == pytest.approx(
        -log_loss(y[test], fold_model.predict_proba(X[test]))
    )


def test_cross_val_score_on_logits(logits_y):
    X, y = logits_y
    scores = cross_val_score(
        TemperatureScaling(device="cpu"),
        X,
        y,
        scoring=get_scorer("neg_expected_calibration_error"),
        cv=4,
    )
    assert scores.shape == (4,)
    assert np.all(scores <= 0) and np.all(scores > -0.2)
    raw = cross_val_score(
        TemperatureScaling(device="cpu"),
        X,
        y,
        scoring="neg_log_loss",
        cv=4,
    )
    assert np.all(raw < 0)


def test_string_labels_and_a_missing_class_take_the_estimator_classes(logits_y):
    X, y = logits_y
    names = np.array(["ant", "bee", "cat", "dog"])
    model = TemperatureScaling(device="cpu").fit(X, names[y])
    scorer = get_scorer("neg_expected_calibration_error")
    assert scorer(model, X, names[y]) == pytest.approx(
        -expected_calibration_error(y, model.predict_proba(X))
    )
    # A test set without "bee": the metric alone cannot place the columns,
    # the scorer passes classes_.
    keep = y != 1
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error(names[y][keep], model.predict_proba(X[keep]))
    assert scorer(model, X[keep], names[y][keep]) == pytest.approx(
        -expected_calibration_error(
            y[keep], model.predict_proba(X[keep]), labels=range(4)
        )
    )


def test_binary_scorer_reads_the_positive_column():
    X, y = make_logits(n_samples=400, n_classes=2, seed=3)
    labels = np.array(["no", "yes"])
    model = TemperatureScaling(device="cpu").fit(X, labels[y])
    proba = model.predict_proba(X)
    for name, metric in [
        ("neg_expected_calibration_error", expected_calibration_error),
        ("neg_smooth_calibration_error", smooth_calibration_error),
        ("neg_multiclass_brier_score", brier_score),
    ]:
        assert get_scorer(name)(model, X, labels[y]) == pytest.approx(
            -metric(y, proba), rel=1e-9
        )


def test_scorer_on_a_plain_sklearn_classifier():
    rng = np.random.default_rng(4)
    features = rng.normal(size=(300, 5))
    target = np.where(features[:, 0] + rng.normal(size=300) > 0, "up", "down")
    model = LogisticRegression().fit(features, target)
    ece = get_scorer("neg_expected_calibration_error")(model, features, target)
    assert ece == pytest.approx(
        -expected_calibration_error(
            target, model.predict_proba(features), labels=model.classes_
        )
    )


def test_neg_log_loss_is_scikit_learns_number_on_float32_probabilities():
    # Issue 25, item 16: histogram binning on the bundled CIFAR-100 set gives
    # float32 probabilities of 1e-12 (its floor) for some true classes, which
    # scikit-learn clips at the float32 precision and the library's log_loss
    # at the float64 one: the scorer that shares scikit-learn's name gives
    # scikit-learn's number; the function keeps its own (documented) clip.
    from sklearn.metrics import log_loss as sklearn_log_loss

    from sklearn_calib import HistogramBinning
    from sklearn_calib.datasets import load_logits

    data = load_logits("c100_densenetbc100_netcal")
    model = HistogramBinning().fit(data.logits_val, data.y_val)
    X, y = data.logits_test, data.y_test
    proba = model.predict_proba(X)
    assert proba.dtype == np.float32
    true_class = proba[np.arange(len(y)), y]
    assert np.any(true_class < np.finfo(np.float32).eps)
    ours = get_scorer("neg_log_loss")(model, X, y)
    assert ours == sklearn_get_scorer("neg_log_loss")(model, X, y)
    assert ours == -sklearn_log_loss(y, proba)
    clipped = np.clip(true_class.astype(np.float64), np.finfo(np.float32).eps, None)
    assert ours == pytest.approx(np.mean(np.log(clipped)), rel=1e-6)
    # The library's function clips at 2.2e-16: a larger loss on these data.
    assert log_loss(y, proba) > -ours + 0.5
    # float32 rows cast to float64 sum to 1 only within float32 rounding,
    # which scikit-learn's float64 check reports ("do not sum to one").
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The y_prob values do not sum to one")
        expected = sklearn_log_loss(y, proba.astype(np.float64))
    assert log_loss(y, proba.astype(np.float64)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_neg_log_loss_with_classes_out_of_sorted_order(n_classes):
    # classes_ in column order need not be sorted (classes=); scikit-learn's
    # log_loss sorts labels and reads the columns in sorted order, so the
    # scorer scored the wrong columns (-9.33 for an NLL of 0.088 at 3 classes).
    X, y = make_logits(n_samples=600, n_classes=n_classes, seed=7)
    names = np.array(["c", "a", "b"][:n_classes])
    if n_classes == 2:
        names = np.array(["yes", "no"])
    model = TemperatureScaling(device="cpu", classes=names).fit(X, names[y])
    by_code = TemperatureScaling(device="cpu").fit(X, y)
    expected = get_scorer("neg_log_loss")(by_code, X, y)
    scored = get_scorer("neg_log_loss")(model, X, names[y])
    assert scored == pytest.approx(expected, rel=1e-12)
    proba = model.predict_proba(X)
    assert scored == pytest.approx(-log_loss(names[y], proba, labels=names), rel=1e-9)
