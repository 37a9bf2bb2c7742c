"""CalibratedClassifier: scikit-learn's checks over every calibrator, and oracles.

The references are scikit-learn's CalibratedClassifierCV (temperature method)
and ensembles rebuilt by hand from public pieces: a LogisticRegression fitted
on each training fold and a calibrator fitted on its held-out decision function.
"""

import warnings

import numpy as np
import pytest
import sklearn
from scipy import sparse
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import UnsetMetadataPassedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, KFold, ShuffleSplit, StratifiedKFold
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_calib import CalibratedClassifier, TemperatureScaling
from sklearn_calib.utils._testing import (
    _EFFECTIVE_SIZE_REASON,
    N_FROM_WEIGHTS,
    make_fast,
)
from sklearn_calib.utils.discovery import all_calibrators

# scikit-learn's estimator checks fit on random features with a few
# samples: no ranking information, classes without samples, separable data.
# On such data these warnings are the documented behaviour (each is asserted
# with pytest.warns in the calibrator's own tests); here they say nothing.
# The selector's folds of such data may hold one class or no weight (a
# candidate then fails there, FitFailedWarning), and rare classes get fewer
# samples than folds (scikit-learn's splitter warns).
_IGNORED = [
    "ignore:The NLL keeps decreasing as T:UserWarning",
    "ignore:SMART was fitted on:UserWarning",
    "ignore:.*determine no finite scale:UserWarning",
    "ignore:.*logits separate the calibration:UserWarning",
    "ignore:.* stopped after:sklearn.exceptions.ConvergenceWarning",
    "ignore:Candidate .* failed:sklearn.exceptions.FitFailedWarning",
    "ignore:The least populated class in y:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


CALIBRATORS = [cls for _, cls in all_calibrators()]


# cv=3 only keeps these checks fast (5 folds cost 1.8 times as much). With the
# default 5 folds, check_fit2d_1feature's 10 samples (3 of one class) leave
# single-class calibration folds, which fit since every calibrator is told the
# class set of all of y: tests/test_common.py runs the whole suite on the
# default CalibratedClassifier() with no expected failure.
def _expected_failed_checks(estimator):
    # The structured maps read n from the weights as Kish's effective sample
    # size (scale-free), so weights are not repeated rows there.
    if type(estimator.calibrator).__name__ in N_FROM_WEIGHTS:
        return {
            "check_sample_weight_equivalence_on_dense_data": _EFFECTIVE_SIZE_REASON,
            "check_sample_weight_equivalence_on_sparse_data": _EFFECTIVE_SIZE_REASON,
        }
    return {}


@parametrize_with_checks(
    [
        CalibratedClassifier(LogisticRegression(), make_fast(cls), cv=3)
        for cls in CALIBRATORS
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        # Tiny, separable check data push some calibrators to their bounds;
        # those warnings are expected and tested elsewhere.
        warnings.simplefilter("ignore", UserWarning)
        check(estimator)


def _data(n_classes, n_samples=400, seed=0):
    return make_classification(
        n_samples=n_samples,
        n_features=8,
        n_informative=5,
        n_classes=n_classes,
        flip_y=0.1,
        random_state=seed,
    )


def _splits(X, y, n_splits=4):
    return list(StratifiedKFold(n_splits, shuffle=True, random_state=0).split(X, y))


def _ts():
    return TemperatureScaling(device="cpu")


def _manual_ensemble(X, y, splits, estimator, sample_weight=None, weigh_estimator=True):
    """Mean calibrated probabilities of per-fold (estimator, TS) pairs, by hand."""
    classes = np.unique(y)
    codes = np.searchsorted(classes, y)
    proba = np.zeros((X.shape[0], classes.shape[0]))
    for train, test in splits:
        fit_params = {}
        if sample_weight is not None and weigh_estimator:
            fit_params["sample_weight"] = sample_weight[train]
        est = clone(estimator).fit(X[train], y[train], **fit_params)
        scores = est.decision_function(X[test])
        scores = scores[:, None] if scores.ndim == 1 else scores
        sw = None if sample_weight is None else sample_weight[test]
        ts = _ts().fit(scores, codes[test], sample_weight=sw)
        full = est.decision_function(X)
        proba += ts.predict_proba(full[:, None] if full.ndim == 1 else full)
    return proba / len(splits)


# --- against scikit-learn's CalibratedClassifierCV(method="temperature") ---


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("ensemble", [True, False])
def test_matches_sklearn_temperature(n_classes, ensemble):
    X, y = _data(n_classes)
    splits = _splits(X, y)
    estimator = LogisticRegression(C=100)
    ours = CalibratedClassifier(estimator, _ts(), cv=splits, ensemble=ensemble)
    ref = CalibratedClassifierCV(
        estimator, method="temperature", cv=splits, ensemble=ensemble
    )
    ours.fit(X, y)
    ref.fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    ours_t = np.array([c.temperature_ for c in ours.calibrators_])
    ref_beta = [c.calibrators[0].beta_ for c in ref.calibrated_classifiers_]
    ref_t = 1.0 / np.array(ref_beta)
    # scikit-learn reads a binary decision function x as the logits (-x, x),
    # this library as (0, x): the same probabilities at twice the temperature.
    factor = 2.0 if n_classes == 2 else 1.0
    np.testing.assert_allclose(ref_t, factor * ours_t, rtol=1e-5)
    assert len(ours.calibrators_) == (len(splits) if ensemble else 1)


def test_matches_sklearn_on_predict_proba_estimator():
    # GaussianNB has no decision_function: both use the log of predict_proba.
    X, y = _data(2)
    splits = _splits(X, y)
    ours = CalibratedClassifier(GaussianNB(), _ts(), cv=splits).fit(X, y)
    ref = CalibratedClassifierCV(GaussianNB(), method="temperature", cv=splits)
    ref.fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)


# --- the three fitting schemes, rebuilt by hand ---


def test_ensemble_is_mean_of_fold_pairs():
    X, y = _data(3)
    splits = _splits(X, y)
    clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits).fit(X, y)
    expected = _manual_ensemble(X, y, splits, LogisticRegression())
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=1e-9, atol=1e-12)
    assert len(clf.estimators_) == len(clf.calibrators_) == len(splits)


def test_ensemble_false_refits_on_all_data():
    X, y = _data(3)
    splits = _splits(X, y)
    clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits, ensemble=False)
    clf.fit(X, y)
    out_of_fold = np.empty((X.shape[0], 3))
    for train, test in splits:
        lr = LogisticRegression().fit(X[train], y[train])
        out_of_fold[test] = lr.decision_function(X[test])
    full = LogisticRegression().fit(X, y)
    ts = _ts().fit(out_of_fold, y)
    np.testing.assert_allclose(clf.estimators_[0].coef_, full.coef_)
    assert clf.calibrators_[0].temperature_ == pytest.approx(ts.temperature_, rel=1e-12)
    np.testing.assert_allclose(
        clf.predict_proba(X), ts.predict_proba(full.decision_function(X)), rtol=1e-12
    )


def test_frozen_estimator_is_calibrated_on_all_data_and_not_refitted():
    X, y = _data(3, n_samples=600)
    prefit = LogisticRegression(C=100).fit(X[:300], y[:300])
    coef = prefit.coef_.copy()
    clf = CalibratedClassifier(FrozenEstimator(prefit), _ts()).fit(X[300:], y[300:])
    np.testing.assert_array_equal(prefit.coef_, coef)
    assert len(clf.calibrators_) == 1
    ts = _ts().fit(prefit.decision_function(X[300:]), y[300:])
    assert clf.calibrators_[0].temperature_ == pytest.approx(ts.temperature_, rel=1e-12)
    np.testing.assert_allclose(
        clf.predict_proba(X), ts.predict_proba(prefit.decision_function(X)), rtol=1e-12
    )


def test_frozen_estimator_with_ensemble_calibrates_each_fold():
    X, y = _data(3, n_samples=600)
    prefit = LogisticRegression(C=100).fit(X[:300], y[:300])
    X_cal, y_cal = X[300:], y[300:]
    splits = _splits(X_cal, y_cal, n_splits=3)
    clf = CalibratedClassifier(FrozenEstimator(prefit), _ts(), cv=splits, ensemble=True)
    clf.fit(X_cal, y_cal)
    scores = prefit.decision_function(X_cal)
    fold_proba = [
        _ts().fit(scores[test], y_cal[test]).predict_proba(scores) for _, test in splits
    ]
    expected = np.mean(fold_proba, axis=0)
    np.testing.assert_allclose(clf.predict_proba(X_cal), expected, rtol=1e-12)


@pytest.mark.parametrize("cls", CALIBRATORS, ids=[c.__name__ for c in CALIBRATORS])
def test_every_calibrator_sees_the_decision_function(cls):
    # Binary for a binary-only calibrator: a 1-D decision function, one score
    # column; otherwise the (n, 3) decision function.
    n_classes = 3 if get_tags(make_fast(cls)).classifier_tags.multi_class else 2
    X, y = _data(n_classes, n_samples=1500)
    prefit = LogisticRegression().fit(X[:500], y[:500])
    clf = CalibratedClassifier(FrozenEstimator(prefit), make_fast(cls))
    clf.fit(X[500:], y[500:])
    scores = prefit.decision_function(X)
    scores = scores[:, None] if scores.ndim == 1 else scores
    direct = make_fast(cls).fit(scores[500:], y[500:])
    np.testing.assert_allclose(
        clf.predict_proba(X), direct.predict_proba(scores), rtol=1e-12, atol=1e-15
    )


def test_predict_proba_logits_are_clipped_log_probabilities():
    X, y = _data(3)
    prefit = GaussianNB().fit(X[:200], y[:200])
    clf = CalibratedClassifier(FrozenEstimator(prefit), _ts()).fit(X[200:], y[200:])
    logits = np.log(np.clip(prefit.predict_proba(X), 1e-12, None))
    ts = _ts().fit(logits[200:], y[200:])
    expected = ts.predict_proba(logits)
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=1e-12)


def test_defaults_are_logistic_regression_and_temperature_scaling():
    X, y = _data(3)
    clf = CalibratedClassifier().fit(X, y)
    assert all(isinstance(e, LogisticRegression) for e in clf.estimators_)
    assert all(isinstance(c, TemperatureScaling) for c in clf.calibrators_)
    assert len(clf.calibrators_) == 5


# --- classes ---


def test_string_labels_and_classes_from_estimator():
    X, y = _data(3)
    names = np.array(["cat", "ant", "bee"])
    clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=3).fit(X, names[y])
    np.testing.assert_array_equal(clf.classes_, ["ant", "bee", "cat"])
    for est in clf.estimators_:
        np.testing.assert_array_equal(est.classes_, clf.classes_)
    reference = CalibratedClassifier(LogisticRegression(), _ts(), cv=3).fit(X, y)
    # "ant" is code 1 of the integer labels: the same columns, permuted.
    np.testing.assert_allclose(
        clf.predict_proba(X), reference.predict_proba(X)[:, [1, 2, 0]], rtol=1e-10
    )
    assert set(clf.predict(X)) <= set(names)


def test_frozen_estimator_keeps_classes_missing_from_calibration_data():
    X, y = _data(3, n_samples=600)
    prefit = LogisticRegression().fit(X[:300], y[:300])
    keep = y[300:] != 2
    clf = CalibratedClassifier(FrozenEstimator(prefit), _ts())
    clf.fit(X[300:][keep], y[300:][keep])
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
    proba = clf.predict_proba(X)
    assert proba.shape == (600, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_label_unknown_to_frozen_estimator_raises():
    X, y = _data(3, n_samples=600)
    keep = y[:300] != 2
    prefit = LogisticRegression().fit(X[:300][keep], y[:300][keep])
    with pytest.raises(ValueError, match=r"classes \[2\].*did not see"):
        CalibratedClassifier(FrozenEstimator(prefit), _ts()).fit(X[300:], y[300:])


def test_training_fold_missing_a_class_raises():
    X, y = _data(3)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    # Unshuffled KFold puts all of class 0 in the first test fold.
    with pytest.raises(ValueError, match="every class needs samples"):
        CalibratedClassifier(LogisticRegression(), _ts(), cv=KFold(3)).fit(X, y)


def test_single_class_calibration_fold_fits_with_the_classes_of_y():
    X, y = _data(2)
    order = np.argsort(y, kind="stable")
    # Each test fold holds a single class (the training folds hold both).
    splits = [(order[:300], order[300:]), (order[100:], order[:100])]
    assert all(np.unique(y[test]).shape[0] == 1 for _, test in splits)
    with warnings.catch_warnings():
        # all-correct folds push the temperature to its bound, with a warning
        warnings.simplefilter("ignore", UserWarning)
        clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits).fit(X, y)
        # By hand: each fold's calibrator told the class set [0, 1].
        proba = np.zeros((len(y), 2))
        for train, test in splits:
            est = LogisticRegression().fit(X[train], y[train])
            ts = _ts().set_params(classes=[0, 1])
            ts.fit(est.decision_function(X[test])[:, None], y[test])
            proba += ts.predict_proba(est.decision_function(X)[:, None])
    for calibrator in clf.calibrators_:
        np.testing.assert_array_equal(calibrator.classes_, [0, 1])
    np.testing.assert_allclose(clf.predict_proba(X), proba / 2, rtol=1e-10)
    # A classifier used as calibrator has no classes parameter: it cannot fit.
    with pytest.raises(ValueError, match="single class"):
        CalibratedClassifier(LogisticRegression(), LogisticRegression(), cv=splits).fit(
            X, y
        )


def test_default_cv_with_a_rare_class_fits():
    # scikit-learn's check_fit2d_1feature: 10 samples, 3 of one class, so some
    # of the 5 stratified calibration folds hold a single class.
    rng = np.random.RandomState(0)
    X = 3 * rng.uniform(size=(10, 1))
    y = np.array([0, 1, 0, 0, 1, 0, 0, 1, 0, 0])
    folds = StratifiedKFold(5).split(X, y)
    assert sum(np.unique(y[test]).shape[0] == 1 for _, test in folds) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        clf = CalibratedClassifier().fit(X, y)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert len(clf.calibrators_) == 5


# --- classes= of CalibratedClassifier ---


def test_classes_gives_a_column_to_a_class_absent_from_training():
    X, y = _data(3)
    labels = np.array([1, 2, 3])[y]  # 1-based
    keep = labels != 3
    stated = CalibratedClassifier(LogisticRegression(), _ts(), cv=3, classes=[1, 2, 3])
    stated.fit(X[keep], labels[keep])
    reference = CalibratedClassifier(LogisticRegression(), _ts(), cv=3)
    reference.fit(X[keep], labels[keep])
    np.testing.assert_array_equal(stated.classes_, [1, 2, 3])
    np.testing.assert_array_equal(reference.classes_, [1, 2])
    proba = stated.predict_proba(X)
    np.testing.assert_array_equal(proba[:, 2], 0.0)
    np.testing.assert_allclose(proba[:, :2], reference.predict_proba(X), rtol=1e-12)
    np.testing.assert_array_equal(stated.predict(X), reference.predict(X))


def test_classes_sets_the_column_order():
    X, y = _data(3)
    names = np.array(["ant", "bee", "cat"])
    order = ["cat", "ant", "bee"]
    stated = CalibratedClassifier(LogisticRegression(), _ts(), cv=3, classes=order)
    stated.fit(X, names[y])
    reference = CalibratedClassifier(LogisticRegression(), _ts(), cv=3).fit(X, y)
    np.testing.assert_array_equal(stated.classes_, order)
    np.testing.assert_allclose(
        stated.predict_proba(X), reference.predict_proba(X)[:, [2, 0, 1]], rtol=1e-10
    )
    np.testing.assert_array_equal(stated.predict(X), names[reference.predict(X)])


@pytest.mark.parametrize(
    "classes, message",
    [
        ([0, 1], r"not in classes: \[2\]"),
        ([0, 1, 1, 2], "duplicates"),
        ([0], "at least 2 classes"),
        ([[0, 1, 2]], "at least 2 classes"),
    ],
)
def test_bad_classes_raise(classes, message):
    X, y = _data(3)
    with pytest.raises(ValueError, match=message):
        CalibratedClassifier(LogisticRegression(), _ts(), classes=classes).fit(X, y)


def test_classes_must_hold_the_frozen_estimators_classes():
    X, y = _data(3, n_samples=600)
    prefit = LogisticRegression().fit(X[:300], y[:300])
    keep = y[300:] != 2
    clf = CalibratedClassifier(FrozenEstimator(prefit), _ts(), classes=[0, 1])
    with pytest.raises(ValueError, match=r"estimator's classes \[2\] are not in"):
        clf.fit(X[300:][keep], y[300:][keep])


def test_calibrator_missing_classes_fill_their_columns_with_zero():
    # A scikit-learn classifier as calibrator only knows the class codes of
    # its calibration fold; the missing class gets probability 0 there.
    X, y = _data(3)
    rng = np.random.default_rng(0)
    not_two = np.flatnonzero(y != 2)
    test = rng.choice(not_two, size=80, replace=False)
    train = np.setdiff1d(np.arange(len(y)), test)
    clf = CalibratedClassifier(GaussianNB(), LogisticRegression(), cv=[(train, test)])
    clf.fit(X, y)
    np.testing.assert_array_equal(clf.calibrators_[0].classes_, [0, 1])
    proba = clf.predict_proba(X)
    assert proba.shape == (400, 3)
    np.testing.assert_array_equal(proba[:, 2], 0.0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_ensemble_false_needs_a_partition():
    X, y = _data(2)
    cv = ShuffleSplit(n_splits=2, test_size=0.3, random_state=0)
    with pytest.raises(ValueError, match="partition"):
        CalibratedClassifier(LogisticRegression(), _ts(), cv=cv, ensemble=False).fit(
            X, y
        )


def test_binary_only_calibrator_refusal_names_where_the_classes_come_from():
    from sklearn_calib import PlattScaling

    X, y = _data(3)
    with pytest.raises(ValueError, match="handles two classes, but y has 3"):
        CalibratedClassifier(LogisticRegression(), PlattScaling(), cv=3).fit(X, y)
    # two classes in y, three in classes=: the message said 'y has 3'
    y = (y > 0).astype(int)
    calibrated = CalibratedClassifier(
        LogisticRegression(), PlattScaling(), cv=3, classes=[0, 1, 2]
    )
    with pytest.raises(ValueError, match="handles two classes, but classes lists 3"):
        calibrated.fit(X, y)


def test_cv_without_splits_raises():
    # An empty iterable of splits reached estimators_[0]: IndexError.
    X, y = _data(3)
    with pytest.raises(ValueError, match=r"cv=\[\] gives no \(train, test\) split"):
        CalibratedClassifier(LogisticRegression(), _ts(), cv=[]).fit(X, y)


@pytest.mark.parametrize(
    "params, error",
    [
        ({"estimator": "lr"}, "estimator"),
        ({"calibrator": StandardScaler()}, "calibrator"),
        ({"cv": "five"}, "cv"),
        ({"ensemble": "yes"}, "ensemble"),
    ],
)
def test_bad_parameters_raise(params, error):
    X, y = _data(2)
    with pytest.raises(ValueError, match=f"'{error}' parameter"):
        CalibratedClassifier(**params).fit(X, y)


# --- sample weights and metadata routing ---


def test_sample_weight_reaches_estimator_and_calibrator():
    X, y = _data(3)
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    splits = _splits(X, y)
    clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits)
    clf.fit(X, y, sample_weight=weights)
    expected = _manual_ensemble(X, y, splits, LogisticRegression(), weights)
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=1e-9, atol=1e-12)
    unweighted = _manual_ensemble(X, y, splits, LogisticRegression())
    assert np.abs(clf.predict_proba(X) - unweighted).max() > 1e-3


def test_estimator_without_sample_weight_warns_and_calibrator_still_weighs():
    X, y = _data(2)
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    splits = _splits(X, y)
    with pytest.warns(UserWarning, match="does not accept sample_weight"):
        clf = CalibratedClassifier(KNeighborsClassifier(), _ts(), cv=splits)
        clf.fit(X, y, sample_weight=weights)
    expected = np.zeros((len(y), 2))
    for train, test in splits:
        knn = KNeighborsClassifier().fit(X[train], y[train])
        logits = np.log(np.clip(knn.predict_proba(X[test]), 1e-12, None))
        ts = _ts().fit(logits, y[test], sample_weight=weights[test])
        expected += ts.predict_proba(np.log(np.clip(knn.predict_proba(X), 1e-12, None)))
    np.testing.assert_allclose(clf.predict_proba(X), expected / len(splits), rtol=1e-9)


def test_fit_params_go_to_the_estimator_without_routing():
    X, y = _data(3)
    weights = np.random.default_rng(1).uniform(0.2, 3.0, size=len(y))
    splits = _splits(X, y)
    pipe = make_pipeline(LogisticRegression())
    clf = CalibratedClassifier(pipe, _ts(), cv=splits)
    clf.fit(X, y, logisticregression__sample_weight=weights)
    # Only the pipeline got the weights; the calibrators are unweighted.
    manual = np.zeros((len(y), 3))
    for train, test in splits:
        lr = LogisticRegression().fit(X[train], y[train], sample_weight=weights[train])
        ts = _ts().fit(lr.decision_function(X[test]), y[test])
        manual += ts.predict_proba(lr.decision_function(X))
    np.testing.assert_allclose(clf.predict_proba(X), manual / len(splits), rtol=1e-9)


@pytest.mark.parametrize("requested", [True, False])
def test_metadata_routing_of_sample_weight(requested):
    X, y = _data(3)
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    splits = _splits(X, y)
    with sklearn.config_context(enable_metadata_routing=True):
        lr = LogisticRegression().set_fit_request(sample_weight=requested)
        clf = CalibratedClassifier(lr, _ts(), cv=splits)
        proba = clf.fit(X, y, sample_weight=weights).predict_proba(X)
    expected = _manual_ensemble(
        X, y, splits, LogisticRegression(), weights, weigh_estimator=requested
    )
    np.testing.assert_allclose(proba, expected, rtol=1e-9, atol=1e-12)


def test_metadata_routing_unrequested_sample_weight_raises():
    X, y = _data(2)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=3)
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            clf.fit(X, y, sample_weight=np.ones(len(y)))


def test_metadata_routing_groups_reach_the_splitter():
    X, y = _data(2)
    groups = np.arange(len(y)) % 7
    with sklearn.config_context(enable_metadata_routing=True):
        clf = CalibratedClassifier(LogisticRegression(), _ts(), cv=GroupKFold(3))
        clf.fit(X, y, groups=groups)
        routing = clf.get_metadata_routing()
    splits = list(GroupKFold(3).split(X, y, groups))
    expected = _manual_ensemble(X, y, splits, LogisticRegression())
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=1e-9, atol=1e-12)
    assert "estimator" in str(routing) and "splitter" in str(routing)


def test_default_estimator_requests_sample_weight_under_routing():
    X, y = _data(2)
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    splits = _splits(X, y)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = CalibratedClassifier(calibrator=_ts(), cv=splits)
        proba = clf.fit(X, y, sample_weight=weights).predict_proba(X)
    expected = _manual_ensemble(X, y, splits, LogisticRegression(), weights)
    np.testing.assert_allclose(proba, expected, rtol=1e-9, atol=1e-12)


# --- input tags delegated to the estimator ---


def test_sparse_input_tag_and_data_follow_the_estimator():
    assert get_tags(CalibratedClassifier(LogisticRegression())).input_tags.sparse
    assert not get_tags(CalibratedClassifier(GaussianNB())).input_tags.sparse
    X, y = _data(3)
    splits = _splits(X, y)
    dense = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits).fit(X, y)
    sparse_fit = CalibratedClassifier(LogisticRegression(), _ts(), cv=splits)
    sparse_fit.fit(sparse.csr_matrix(X), y)
    proba = sparse_fit.predict_proba(sparse.csr_matrix(X))
    np.testing.assert_allclose(proba, dense.predict_proba(X), atol=1e-6)


def test_missing_values_follow_the_estimator():
    hgb = HistGradientBoostingClassifier(max_iter=10, random_state=0)
    assert get_tags(CalibratedClassifier(hgb)).input_tags.allow_nan
    assert not get_tags(CalibratedClassifier(LogisticRegression())).input_tags.allow_nan
    X, y = _data(3)
    X[::7, 0] = np.nan
    clf = CalibratedClassifier(hgb, _ts(), cv=3).fit(X, y)
    proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
