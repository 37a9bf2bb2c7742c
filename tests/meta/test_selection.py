"""CalibratorSelector: the choice against cross_val_score run by hand.

scikit-learn's and our common checks cover it through discovery
(tests/test_common.py, tests/meta/test_meta.py); here the cross-validated scores,
the winner and its refit are compared with an independent computation:
scikit-learn's ``cross_val_score`` on each candidate, and the winner fitted
on all the data.
"""

import pickle
import warnings
from contextlib import nullcontext

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, FitFailedWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss as sklearn_log_loss
from sklearn.model_selection import (
    KFold,
    LeaveOneGroupOut,
    PredefinedSplit,
    StratifiedKFold,
    cross_val_score,
)

from sklearn_calib import (
    CalibratorSelector,
    IsotonicCalibration,
    MarginTemperatureScaling,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.metrics import expected_calibration_error, get_scorer
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared

# The selector's candidates on small folds of real logits: vector scaling's
# classes without a finite optimum and temperature scaling at its bound
# are expected (asserted in their own tests); these tests compare scores.
_IGNORED = [
    "ignore:The NLL keeps decreasing as T:UserWarning",
    "ignore:.*determine no finite scale:UserWarning",
    "ignore:.*logits separate the calibration:UserWarning",
    "ignore:No candidate could be scored:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


def _candidates():
    return [
        MatrixScaling(device="cpu"),
        VectorScaling(device="cpu"),
        TemperatureScaling(device="cpu"),
        IsotonicCalibration(),
    ]


def _biased_logits(n_samples=900, seed=0):
    """Logits with a class bias that only a per-class map can undo."""
    X, y = make_logits(n_samples=n_samples, n_classes=3, overconfidence=2.0, seed=seed)
    X[:, 2] += 1.5
    return X, y


def _as_on_folds(candidate, fold_tol=1e-6):
    """The candidate as the selector fits it on the training parts.

    Vector scaling starts cold there and stops at a gradient of ``fold_tol``
    (the selector's default); matrix scaling starts from its fit on all the
    rows and keeps its own ``tol``; the others have no such tolerance.
    """
    if isinstance(candidate, VectorScaling) and fold_tol is not None:
        return clone(candidate).set_params(tol=max(candidate.tol, fold_tol))
    return clone(candidate)


def _by_hand(candidates, X, y, cv, scoring, fold_tol=1e-6):
    """Per-split scores of every candidate from cross_val_score."""
    return np.array(
        [
            cross_val_score(
                _as_on_folds(c, fold_tol), X, y, cv=cv, scoring=get_scorer(scoring)
            )
            for c in candidates
        ]
    )


@pytest.mark.parametrize(
    "scoring, n_candidates",
    [
        ("neg_log_loss", 4),
        ("neg_brier_score", 2),
        ("neg_expected_calibration_error", 2),
    ],
)
@pytest.mark.parametrize("fold_tol", [1e-6, 1e-4, None])
def test_scores_and_winner_match_cross_val_score_on_real_logits(
    scoring, n_candidates, fold_tol
):
    data = load_shared("digits_mlp_trained_here")
    X, y = data["logits_val"], data["y_val"]
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    candidates = _candidates()[-n_candidates:]
    selector = CalibratorSelector(
        candidates, scoring=scoring, cv=cv, fold_tol=fold_tol
    ).fit(X, y)

    expected = _by_hand(candidates, X, y, cv, scoring, fold_tol)
    results = selector.cv_results_
    # MatrixScaling's fold fits start from its fit on all the rows (the same
    # convex optimum, reached by another path): equal to the solver's
    # tolerance (5e-8 relative measured); the other candidates to rounding.
    warm = [isinstance(c, MatrixScaling) for c in candidates]
    for s in range(3):
        for c, rtol in enumerate(1e-6 if w else 1e-10 for w in warm):
            np.testing.assert_allclose(
                results[f"split{s}_test_score"][c], expected[c, s], rtol=rtol
            )
    # The means to the loosest per-split tolerance: scikit-learn's log loss
    # (the number of "neg_log_loss") sums float32 probabilities in float32.
    rtol = 1e-6 if any(warm) else 1e-7
    np.testing.assert_allclose(
        results["mean_test_score"], expected.mean(axis=1), rtol=rtol
    )
    np.testing.assert_allclose(
        results["std_test_score"], expected.std(axis=1), rtol=rtol
    )
    winner = int(np.argmax(expected.mean(axis=1)))
    assert selector.best_index_ == winner
    assert results["rank_test_score"][winner] == 1
    assert selector.best_score_ == pytest.approx(expected.mean(axis=1).max())
    assert selector.n_splits_ == 3

    # the winner refitted on all the data is what predicts
    refit = clone(candidates[winner]).fit(X, y)
    X_test = data["logits_test"].astype(np.float64)
    np.testing.assert_allclose(
        selector.predict_proba(X_test), refit.predict_proba(X_test), atol=1e-12
    )
    np.testing.assert_array_equal(selector.predict(X_test), refit.predict(X_test))


@pytest.mark.parametrize("n_classes", [2, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_scoring_computes_the_scorers_number_in_one_pass(n_classes, dtype):
    # With scoring="neg_log_loss" a calibrator's fold is scored from the same
    # pass of its map that gives its out-of-fold log-probabilities: the same
    # numbers, to the bit, as the scorer object (passed as a callable, which
    # takes the scorer's path: a binary problem's positive column), with
    # histogram-binned probabilities that scikit-learn clips, and weights.
    from sklearn_calib import HistogramBinning

    X, y = make_logits(n_samples=900, n_classes=n_classes, seed=4)
    X = (6.0 * X).astype(dtype)
    weight = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    candidates = [TemperatureScaling(device="cpu"), HistogramBinning(n_bins=30)]
    if n_classes == 2:
        candidates.append(PlattScaling())
    cv = StratifiedKFold(3, shuffle=True, random_state=1)
    fast = CalibratorSelector(candidates, cv=cv).fit(X, y, sample_weight=weight)
    scorer = CalibratorSelector(
        candidates, cv=cv, scoring=get_scorer("neg_log_loss")
    ).fit(X, y, sample_weight=weight)
    for key in ["split0_test_score", "split1_test_score", "split2_test_score"]:
        np.testing.assert_array_equal(fast.cv_results_[key], scorer.cv_results_[key])
    by_hand = []
    for train, test in cv.split(X, y):
        fitted = clone(candidates[1])
        fitted.fit(X[train], y[train], sample_weight=weight[train])
        proba = fitted.predict_proba(X[test])
        if n_classes == 2:
            proba = proba[:, 1]
        loss = sklearn_log_loss(
            y[test], proba, sample_weight=weight[test], labels=range(n_classes)
        )
        by_hand.append(-loss)
    np.testing.assert_array_equal(
        [fast.cv_results_[f"split{s}_test_score"][1] for s in range(3)], by_hand
    )


def test_default_nll_picks_the_map_the_data_need():
    # A class bias: vector scaling fits it, a single temperature cannot, and
    # a held-out NLL computed here by hand says so too.
    X, y = _biased_logits()
    selector = CalibratorSelector(
        [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")], cv=5
    ).fit(X, y)
    assert selector.scorer_._score_func.__name__ == "log_loss"
    assert type(selector.best_estimator_) is VectorScaling
    assert selector.cv_results_["rank_test_score"].tolist() == [2, 1]

    folds = KFold(5, shuffle=True, random_state=0).split(X)
    nll = np.zeros(2)
    for train, test in folds:
        for i, cls in enumerate([TemperatureScaling, VectorScaling]):
            fitted = _as_on_folds(cls(device="cpu")).fit(X[train], y[train])
            proba = fitted.predict_proba(X[test])
            nll[i] += sklearn_log_loss(y[test], proba, labels=[0, 1, 2]) / 5
    np.testing.assert_allclose(-selector.cv_results_["mean_test_score"], nll)


def test_default_candidates_are_the_affine_family():
    X, y = _biased_logits(n_samples=300)
    selector = CalibratorSelector(cv=3).fit(X, y)
    assert selector.cv_results_["calibrator"].tolist() == [
        "TemperatureScaling()",
        "VectorScaling()",
        "MatrixScaling()",
        "DirichletCalibration()",
        "StructuredVectorScaling()",
        "StructuredMatrixScaling()",
    ]


def test_callable_scoring_and_named_candidates():
    X, y = _biased_logits(n_samples=600)

    def neg_ece(estimator, X, y):
        return -expected_calibration_error(y, estimator.predict_proba(X))

    candidates = [
        ("ts", TemperatureScaling(device="cpu")),
        ("iso", IsotonicCalibration()),
    ]
    cv = KFold(3, shuffle=True, random_state=1)
    selector = CalibratorSelector(candidates, scoring=neg_ece, cv=cv).fit(X, y)
    assert selector.cv_results_["calibrator"].tolist() == ["ts", "iso"]
    expected = [
        cross_val_score(clone(c), X, y, cv=cv, scoring=neg_ece) for _, c in candidates
    ]
    np.testing.assert_allclose(
        selector.cv_results_["mean_test_score"], np.mean(expected, axis=1)
    )
    assert selector.scorer_ is neg_ece


def test_ties_go_to_the_earlier_candidate_and_share_a_rank():
    X, y = _biased_logits(n_samples=300)
    twins = [
        ("first", TemperatureScaling(device="cpu")),
        ("second", TemperatureScaling(device="cpu")),
    ]
    selector = CalibratorSelector(twins, cv=3).fit(X, y)
    assert selector.best_index_ == 0
    assert selector.cv_results_["rank_test_score"].tolist() == [1, 1]


def test_sample_weights_equal_repeated_rows():
    # As scikit-learn checks meta-estimators with an inner cv: the weighted
    # rows and their repetitions form one group, so every split sees either
    # all of them (as weights or repeats) or none.
    X, y = _biased_logits(n_samples=240, seed=2)
    weights = np.random.default_rng(0).integers(0, 4, size=80)
    core, rest = slice(0, 80), slice(80, 240)
    X_w, y_w = X, y
    sw = np.concatenate([weights, np.ones(160)])
    groups_w = np.repeat([0, 1, 2], 80)
    X_r = np.vstack([np.repeat(X[core], weights, axis=0), X[rest]])
    y_r = np.concatenate([np.repeat(y[core], weights), y[rest]])
    groups_r = np.concatenate([np.zeros(weights.sum(), int), np.repeat([1, 2], 80)])

    def fit(X, y, groups, **kwargs):
        splits = list(LeaveOneGroupOut().split(X, y, groups))
        candidates = [TemperatureScaling(device="cpu"), IsotonicCalibration()]
        return CalibratorSelector(candidates, cv=splits).fit(X, y, **kwargs)

    weighted = fit(X_w, y_w, groups_w, sample_weight=sw)
    repeated = fit(X_r, y_r, groups_r)
    np.testing.assert_allclose(
        weighted.cv_results_["mean_test_score"],
        repeated.cv_results_["mean_test_score"],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-6
    )


def test_string_labels_and_binary_score_column():
    X, y = make_logits(n_samples=400, n_classes=2, seed=5)
    score = (X[:, 1] - X[:, 0])[:, None]
    names = np.array(["neg", "pos"])
    candidates = [TemperatureScaling(device="cpu"), PlattScaling(device="cpu")]
    selector = CalibratorSelector(candidates, cv=4).fit(score, names[y])
    np.testing.assert_array_equal(selector.classes_, names)
    assert selector.n_features_in_ == 1
    assert set(selector.predict(score)) <= set(names)
    reference = CalibratorSelector(candidates, cv=4).fit(score, y)
    np.testing.assert_allclose(
        selector.predict_proba(score), reference.predict_proba(score)
    )
    # the refit saw the score column as the two logits (0, s)
    assert selector.best_estimator_.n_features_in_ == 2


def test_failing_candidate_scores_error_score_and_is_not_chosen():
    X, y = _biased_logits(n_samples=300)
    candidates = [PlattScaling(device="cpu"), TemperatureScaling(device="cpu")]
    with pytest.warns(FitFailedWarning, match="PlattScaling.*binary"):
        selector = CalibratorSelector(candidates, cv=3).fit(X, y)
    assert np.isnan(selector.cv_results_["mean_test_score"][0])
    assert selector.cv_results_["rank_test_score"].tolist() == [2, 1]
    assert selector.best_index_ == 1

    with pytest.raises(ValueError, match="binary"):
        CalibratorSelector(candidates, cv=3, error_score="raise").fit(X, y)

    with pytest.warns(FitFailedWarning):
        selector = CalibratorSelector(candidates, cv=3, error_score=-1e9).fit(X, y)
    assert selector.cv_results_["split0_test_score"][0] == -1e9


def _minus_infinity_scorer(estimator, X, y, sample_weight=None):
    """-inf, or an error for isotonic calibration (module level: it pickles)."""
    if isinstance(estimator, IsotonicCalibration):
        raise RuntimeError("cannot score")
    return -np.inf


def test_a_failed_candidate_ranks_after_a_score_of_minus_infinity():
    # NaN means were ranked as -inf: a candidate that failed on every split
    # tied with one scored -inf, and the earlier (failed) one was chosen,
    # with best_score_ NaN.
    X, y = _biased_logits(n_samples=120)
    candidates = [IsotonicCalibration(), TemperatureScaling(device="cpu")]
    selector = CalibratorSelector(candidates, scoring=_minus_infinity_scorer, cv=3)
    with pytest.warns(FitFailedWarning, match="cannot score"):
        selector.fit(X, y)
    assert selector.cv_results_["rank_test_score"].tolist() == [2, 1]
    assert selector.best_index_ == 1
    assert selector.best_score_ == -np.inf
    assert pickle.loads(pickle.dumps(selector)).best_score_ == -np.inf


def test_no_candidate_scored_falls_back_to_the_first_with_warning():
    X, y = make_logits(n_samples=6, n_classes=3, seed=0)
    y = np.array([0, 0, 1, 1, 2, 2])
    candidates = [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]
    with pytest.warns(UserWarning, match="cv=5 folds need 5 samples.*4: cv=4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            selector = CalibratorSelector(candidates).fit(X[:4], y[:4])
    assert selector.n_splits_ == 4

    selector = CalibratorSelector(candidates, classes=[0, 1, 2])
    with pytest.warns(UserWarning, match="no cross-validation"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            selector.fit(X[:1], y[:1])
    assert selector.n_splits_ == 0
    assert selector.best_index_ == 0
    assert isinstance(selector.best_estimator_, TemperatureScaling)
    assert np.isnan(selector.best_score_)


def test_a_selector_that_scored_no_candidate_loads_from_a_pickle():
    # best_score_ is NaN there (the documented fallback to the first
    # candidate); the state check required a finite number, so loading the
    # file fit wrote raised 'this state was not produced by fit'.
    X, y = make_logits(n_samples=6, n_classes=3, seed=0)
    candidates = [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]
    selector = CalibratorSelector(candidates, classes=[0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selector.fit(X[:1], y[:1])
    assert np.isnan(selector.best_score_)
    loaded = pickle.loads(pickle.dumps(selector))
    assert np.isnan(loaded.best_score_)
    np.testing.assert_array_equal(loaded.predict_proba(X), selector.predict_proba(X))

    # a number where the mean score is NaN is still refused
    state = selector.__getstate__()
    state["best_score_"] = -0.5
    with pytest.raises(ValueError, match="best_score_.*mean test score"):
        CalibratorSelector().__setstate__(state)


@pytest.mark.parametrize(
    "calibrators, error, message",
    [
        ([], ValueError, "empty"),
        ([LogisticRegression, TemperatureScaling()], TypeError, "calibrators\\[0\\]"),
        ([("a", 1)], TypeError, "fit and predict_proba"),
        ([("a", TemperatureScaling(), 3)], ValueError, "pair"),
        ([TemperatureScaling(), TemperatureScaling()], ValueError, "named"),
    ],
    ids=["empty", "class_not_instance", "not_estimator", "triple", "duplicate"],
)
def test_bad_candidates_raise(calibrators, error, message):
    X, y = _biased_logits(n_samples=60)
    with pytest.raises(error, match=message):
        CalibratorSelector(calibrators, cv=3).fit(X, y)


def test_split_indices_outside_the_samples_raise():
    # Every candidate failed on such a split (IndexError as FitFailedWarning)
    # and the selector fell back to its first candidate.
    X, y = _biased_logits(n_samples=60)
    for bad in [np.arange(30, 70), np.r_[-1, 31:60]]:
        splits = [(np.arange(30), bad), (np.arange(30, 60), np.arange(30))]
        with pytest.raises(ValueError, match=r"split 0 test indices outside range"):
            CalibratorSelector([TemperatureScaling(device="cpu")], cv=splits).fit(X, y)


def test_a_given_cv_without_splits_raises():
    # The selector fell back to its first candidate with a warning about
    # too few samples (GridSearchCV raises).
    X, y = _biased_logits(n_samples=60)
    empty = PredefinedSplit(np.full(len(y), -1))
    for cv in ([], iter([]), empty):
        with pytest.raises(ValueError, match="gives no .train, test. split"):
            CalibratorSelector([TemperatureScaling(device="cpu")], cv=cv).fit(X, y)
    # MarginTemperatureScaling hands its selector no split on a single row.
    base = CalibratorSelector([TemperatureScaling(device="cpu")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mts = MarginTemperatureScaling(base, classes=[0, 1, 2], device="cpu")
        mts.fit(X[:1], y[:1])
    assert mts.base_.n_splits_ == 0 and mts.base_.best_index_ == 0


def test_unknown_scoring_name_raises():
    X, y = _biased_logits(n_samples=60)
    with pytest.raises(ValueError, match="not a valid scoring"):
        CalibratorSelector(scoring="neg_nothing", cv=3).fit(X, y)


def test_cv_results_make_a_dataframe():
    pd = pytest.importorskip("pandas")
    X, y = _biased_logits(n_samples=300)
    selector = CalibratorSelector(_candidates()[1:3], cv=3).fit(X, y)
    frame = pd.DataFrame(selector.cv_results_)
    assert frame.shape == (2, 1 + 3 + 7)
    assert frame.loc[selector.best_index_, "rank_test_score"] == 1


def test_to_torch_delegates_to_the_winner():
    torch = pytest.importorskip("torch")
    X, y = _biased_logits(n_samples=300)
    selector = CalibratorSelector(_candidates()[1:3], cv=3).fit(X, y)
    with torch.no_grad():
        log_proba = selector.to_torch()(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(log_proba, selector.transform(X), atol=1e-10)

    iso = CalibratorSelector([IsotonicCalibration()], cv=3).fit(X, y)
    with pytest.raises(AttributeError, match="no to_torch"):
        iso.to_torch()


@pytest.mark.parametrize("n_classes", [2, 3])
def test_a_chosen_classifier_predicts_its_own_probabilities(n_classes):
    # A classifier over logits is a documented candidate; the selector's map
    # read its transform as log-probabilities: linear discriminant analysis
    # (a projection on n_classes - 1 axes) gave binary rows of [1, 1], and
    # logistic regression (no transform) raised AttributeError.
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    X, y = make_logits(n_samples=150, n_classes=n_classes, seed=7)
    for candidate in [LinearDiscriminantAnalysis(), LogisticRegression()]:
        selector = CalibratorSelector([candidate], cv=3).fit(X, y)
        expected = selector.best_estimator_.predict_proba(X)
        np.testing.assert_allclose(selector.predict_proba(X), expected, atol=1e-12)
        np.testing.assert_allclose(selector.transform(X), np.log(expected), atol=1e-12)
        loaded = pickle.loads(pickle.dumps(selector))
        np.testing.assert_allclose(loaded.predict_proba(X), expected, atol=1e-12)

    # a class the classifier never saw (y lacks it) keeps probability 0
    X, y = make_logits(n_samples=150, n_classes=4, seed=7)
    seen = y != 3
    selector = CalibratorSelector([LogisticRegression()], cv=3, classes=range(4))
    proba = selector.fit(X[seen], y[seen]).predict_proba(X)
    assert np.all(proba[:, 3] == 0)
    np.testing.assert_allclose(
        proba[:, :3], selector.best_estimator_.predict_proba(X), atol=1e-12
    )


def test_masked_logits_keep_zero_probability():
    X, y = _biased_logits(n_samples=300)
    selector = CalibratorSelector(_candidates()[1:3], cv=3).fit(X, y)
    masked = X.copy()
    masked[:10, 1] = -np.inf
    proba = selector.predict_proba(masked)
    assert np.all(proba[:10, 1] == 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


# loky reports a process worker that its idle timeout stopped while jobs were
# queued (seen once in CI on a loaded machine); it restarts the worker and the
# folds' results are checked below either way.
@pytest.mark.filterwarnings("ignore:A worker stopped while some jobs:UserWarning")
@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_parallel_folds_give_the_sequential_choice(backend):
    # n_jobs runs the (candidate, split) fits in joblib workers (torch on
    # fewer threads there: equal up to the solvers' tolerance): the scores,
    # the choice, the refit and the out-of-fold predictions handed to
    # MarginTemperatureScaling are those of the sequential run, and a failing
    # candidate is still warned about in the caller's process.
    from joblib import parallel_config

    X, y = _biased_logits(n_samples=300)
    candidates = [
        PlattScaling(device="cpu"),
        TemperatureScaling(device="cpu"),
        VectorScaling(device="cpu"),
    ]
    sequential = CalibratorSelector(candidates, cv=3)
    with pytest.warns(FitFailedWarning, match="PlattScaling.*binary"):
        oof_sequential = sequential._fit_with_oof(X, y)
    parallel = CalibratorSelector(candidates, cv=3, n_jobs=2)
    with parallel_config(backend=backend):
        with pytest.warns(FitFailedWarning, match="PlattScaling.*binary"):
            oof_parallel = parallel._fit_with_oof(X, y)
    for key in ["mean_test_score", "split0_test_score", "split2_test_score"]:
        np.testing.assert_allclose(
            parallel.cv_results_[key], sequential.cv_results_[key], rtol=1e-6
        )
    assert parallel.best_index_ == sequential.best_index_ == 2
    np.testing.assert_allclose(oof_parallel, oof_sequential, rtol=1e-6)
    np.testing.assert_allclose(
        parallel.predict_proba(X), sequential.predict_proba(X), rtol=1e-6
    )


def _separating_logits():
    # vector scaling on a training part where a class's own logit separates
    # it: its scale has no finite optimum, and each fold fit warns so
    X, y = make_logits(n_samples=240, n_classes=3, seed=5)
    X[y == 2, 2] += 40.0
    return X, y


@pytest.mark.filterwarnings("ignore:A worker stopped while some jobs:UserWarning")
@pytest.mark.parametrize("backend", [None, "threading", "loky"])
def test_fold_fit_warnings_reach_the_caller_from_workers(backend):
    # A fold fit's warning reaches the caller's filters with n_jobs=2 as with
    # n_jobs=1, from the same place in the library's code (filters by module
    # see it alike), in task order: from loky's worker processes it went to
    # their stderr, and from worker threads (the default, None) it reached
    # the caller in whatever order the threads ran.
    from joblib import parallel_config

    X, y = _separating_logits()
    candidates = [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]

    def fold_warnings(n_jobs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            CalibratorSelector(candidates, cv=3, n_jobs=n_jobs).fit(X, y)
        return [
            (str(w.message), w.category.__name__, w.filename, w.lineno)
            for w in caught
            if "no finite scale" in str(w.message)
        ]

    sequential = fold_warnings(1)
    with nullcontext() if backend is None else parallel_config(backend=backend):
        parallel = fold_warnings(2)
    # three folds, and the refit if vector scaling is chosen
    assert len(sequential) >= 3
    assert all("sklearn_calib" in filename for _, _, filename, _ in sequential)
    assert parallel == sequential


def test_parallel_folds_run_in_threads_and_restore_the_warning_state():
    # n_jobs runs the fold fits in threads of the caller's process (no
    # worker process to start), and the warning filters and display hook
    # the selector swaps around them are the caller's again afterwards.
    import os
    import threading

    X, y = _separating_logits()
    seen = []

    class Recording(TemperatureScaling):
        def fit(self, X, y, sample_weight=None):
            seen.append((os.getpid(), threading.current_thread().name))
            return super().fit(X, y, sample_weight=sample_weight)

    candidates = [Recording(device="cpu"), VectorScaling(device="cpu")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        filters, show = list(warnings.filters), warnings.showwarning
        with pytest.warns(UserWarning, match="no finite scale"):
            CalibratorSelector(candidates, cv=3, n_jobs=2).fit(X, y)
        assert warnings.filters == filters
        assert warnings.showwarning is show
    assert {pid for pid, _ in seen} == {os.getpid()}
    main = threading.main_thread().name
    assert any(name != main for _, name in seen)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_fold_fit_warning_turned_error_fails_the_fit_as_with_one_job(n_jobs):
    # Where the caller turns a fold fit's warning into an error, the
    # selector's fit raises it with n_jobs=2 as with n_jobs=1 (in a worker
    # thread it would otherwise fail that fold, which then scored NaN).
    X, y = _separating_logits()
    candidates = [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*no finite scale")
        with pytest.raises(UserWarning, match="no finite scale"):
            CalibratorSelector(candidates, cv=3, n_jobs=n_jobs).fit(X, y)


@pytest.mark.parametrize("weighted", [False, True])
def test_shared_fold_temperature_changes_no_number(monkeypatch, weighted):
    # Temperature scaling and the structured maps start with the same
    # temperature fit on each training part: the selector fits it once per
    # split and hands it over. Every score and out-of-fold prediction is the
    # one each candidate gives when fitted alone, to the bit; a temperature
    # scaling with other parameters fits its own.
    from sklearn_calib import StructuredMatrixScaling, StructuredVectorScaling
    from sklearn_calib._scaling.temperature import TemperatureScaling as TS

    X, y = make_logits(n_samples=400, n_classes=4, seed=3)
    X = 3.0 * X
    X[:7, 1] = -np.inf  # masked entries, never the label
    y[:7] = np.where(y[:7] == 1, 0, y[:7])
    weight = np.random.default_rng(1).uniform(0.2, 3.0, size=len(y))
    kwargs = {"sample_weight": weight} if weighted else {}
    candidates = [
        TemperatureScaling(device="cpu"),
        StructuredVectorScaling(device="cpu"),
        StructuredMatrixScaling(device="cpu"),
        TemperatureScaling(device="cpu", max_iter=50),
    ]
    calls = []
    fit = TS._fit
    monkeypatch.setattr(
        TS, "_fit", lambda self, *a: calls.append(self.max_iter) or fit(self, *a)
    )
    # fold_tol=None: the structured maps' fold fits keep their own tol, so
    # that each candidate fitted alone reproduces them
    selector = CalibratorSelector(candidates, cv=3, fold_tol=None)
    oof = selector._fit_with_oof(X, y, **kwargs)
    # one shared fit and one of the other temperature per split, one refit
    assert calls.count(100) == 3 + 1 and calls.count(50) == 3
    monkeypatch.setattr(TS, "_fit", fit)

    splits = list(KFold(3, shuffle=True, random_state=0).split(X))
    for c, candidate in enumerate(candidates):
        by_hand = np.empty(X.shape)
        for s, (train, test) in enumerate(splits):
            alone = clone(candidate).set_params(classes=np.arange(4))
            part = {"sample_weight": weight[train]} if weighted else {}
            alone.fit(X[train], y[train], **part)
            by_hand[test] = alone.transform(X[test])
            loss = sklearn_log_loss(
                y[test],
                alone.predict_proba(X[test]),
                sample_weight=weight[test] if weighted else None,
                labels=range(4),
            )
            assert selector.cv_results_[f"split{s}_test_score"][c] == -loss
        if c == selector.best_index_:
            np.testing.assert_array_equal(oof, by_hand)


def test_fold_tol_loosens_only_the_cold_affine_fold_fits(monkeypatch):
    # Vector and structured matrix scaling start cold on the training parts
    # and stop there at a gradient of fold_tol; matrix scaling's fold fits
    # start from its fit on all the rows and keep its own tol, as does a
    # candidate whose own tol is looser, and every refit.
    from sklearn_calib import StructuredMatrixScaling
    from sklearn_calib._meta import selector as selector_module

    seen = set()
    fit_and_score = selector_module._fit_and_score

    def spy(estimator, *args, **kwargs):
        seen.add((type(estimator).__name__, estimator.get_params().get("tol")))
        return fit_and_score(estimator, *args, **kwargs)

    monkeypatch.setattr(selector_module, "_fit_and_score", spy)
    X, y = _biased_logits()
    candidates = [
        MatrixScaling(device="cpu"),
        VectorScaling(device="cpu"),
        StructuredMatrixScaling(device="cpu"),
        ("loose", VectorScaling(device="cpu", tol=1e-3)),
    ]
    selector = CalibratorSelector(candidates, cv=3, fold_tol=1e-4).fit(X, y)
    assert seen == {
        ("MatrixScaling", 1e-7),
        ("VectorScaling", 1e-4),
        ("StructuredMatrixScaling", 1e-4),
        ("VectorScaling", 1e-3),
    }
    winner = selector.best_estimator_
    chosen = candidates[selector.best_index_]
    chosen = chosen[1] if isinstance(chosen, tuple) else chosen
    assert winner.tol == chosen.tol
    refit = clone(chosen).fit(X, y)
    np.testing.assert_allclose(
        selector.predict_proba(X), refit.predict_proba(X), rtol=1e-6, atol=1e-9
    )


def test_fold_tol_moves_the_scores_far_less_than_their_noise():
    # The default fold_tol against fold fits at the candidates' own tol, on
    # real logits: the same winner, mean scores within 2e-6 relative, a
    # thousandth of the spread of the scores over the splits and less.
    from sklearn_calib import StructuredMatrixScaling, StructuredVectorScaling

    data = load_shared("c10_lenet5_netcal")
    X, y = data["logits_val"][:2000], data["y_val"][:2000]
    candidates = [
        TemperatureScaling(device="cpu"),
        VectorScaling(device="cpu"),
        StructuredVectorScaling(device="cpu"),
        StructuredMatrixScaling(device="cpu"),
    ]
    loose = CalibratorSelector(candidates).fit(X, y).cv_results_
    tight = CalibratorSelector(candidates, fold_tol=None).fit(X, y).cv_results_
    assert np.argmin(loose["rank_test_score"]) == np.argmin(tight["rank_test_score"])
    np.testing.assert_allclose(
        loose["mean_test_score"], tight["mean_test_score"], rtol=2e-6
    )
    difference = np.abs(loose["mean_test_score"] - tight["mean_test_score"])
    assert np.all(difference <= 1e-3 * tight["std_test_score"])


def _record_warm_starts(monkeypatch):
    """The ``warm_start`` of every affine fit from now on, in call order."""
    from sklearn_calib._torch import _affine

    given = []
    fit_affine = _affine.fit_affine
    monkeypatch.setattr(
        _affine,
        "fit_affine",
        lambda *a, **k: given.append(k["warm_start"]) or fit_affine(*a, **k),
    )
    return given


def test_fold_fits_take_the_full_fits_blocks_and_the_refit_keeps_none(monkeypatch):
    # Matrix and Dirichlet calibration are fitted on every row first; their
    # fold fits start from that map and are preconditioned by its class
    # blocks, which stay out of the fitted state of the refit.
    from sklearn_calib import DirichletCalibration
    from sklearn_calib._torch import _affine

    monkeypatch.setattr(_affine, "_NEWTON_PARAMS", 0)
    X, y = make_logits(n_samples=600, n_classes=5, seed=7)
    given = _record_warm_starts(monkeypatch)
    candidates = [MatrixScaling(device="cpu"), DirichletCalibration(device="cpu")]
    selector = CalibratorSelector(candidates, cv=3).fit(X, y)
    starts = [g for g in given if g is not None]
    assert len(starts) == 6 and all(g[2].shape == (5, 6, 6) for g in starts)
    assert not {"_blocks", "_keep_blocks"} & set(vars(selector.best_estimator_))
    refit = clone(candidates[selector.best_index_]).fit(X, y)
    np.testing.assert_allclose(
        selector.predict_proba(X), refit.predict_proba(X), rtol=1e-12
    )


def test_folds_start_cold_where_the_full_fit_separates_a_class(monkeypatch):
    # On separable rows the full matrix fit runs out towards certainty and
    # stops on the gradient tolerance: started there, a fold fit would keep
    # the map its held-out rows pushed out (it scored -1e-9, in-sample, and
    # was chosen over temperature scaling). Its folds start cold instead, and
    # score as the same candidate fitted on the training parts alone.

    rng = np.random.default_rng(8)
    y = rng.integers(0, 3, 60)
    X = 2.0 * np.eye(3)[y] + rng.normal(scale=0.7, size=(60, 3))
    given = _record_warm_starts(monkeypatch)
    candidates = [TemperatureScaling(device="cpu"), MatrixScaling(device="cpu")]
    selector = CalibratorSelector(candidates).fit(X, y)
    assert all(g is None for g in given)
    splits = list(KFold(5, shuffle=True, random_state=0).split(X))
    by_hand = []
    for train, test in splits:
        fold = MatrixScaling(device="cpu", tol=1e-6, classes=np.arange(3))
        fold.fit(X[train], y[train])
        by_hand.append(-sklearn_log_loss(y[test], fold.predict_proba(X[test])))
    scores = [selector.cv_results_[f"split{s}_test_score"][1] for s in range(5)]
    np.testing.assert_allclose(scores, by_hand, rtol=1e-9, atol=1e-12)
    assert min(scores) < -1.0  # held-out rows the training parts misplace
    assert isinstance(selector.best_estimator_, TemperatureScaling)


def test_a_candidate_failing_on_a_split_hands_no_out_of_fold_predictions():
    # With a numeric error_score a candidate that failed on one split can
    # still be chosen; it has no predictions for that split's rows, so the
    # selector hands none (MarginTemperatureScaling then warns and fits on
    # its base's own rows, as documented) instead of rows of NaN.
    from sklearn.exceptions import FitFailedWarning

    from sklearn_calib import MarginTemperatureScaling

    class Flaky(TemperatureScaling):
        def fit(self, X, y, sample_weight=None):
            if len(X) == 48:  # one training part of KFold(5) on 61 rows
                raise RuntimeError("flaky fold")
            return super().fit(X, y, sample_weight)

    X, y = make_logits(n_samples=61, n_classes=3, seed=3)

    def selector():
        return CalibratorSelector(
            [Flaky(device="cpu"), VectorScaling(device="cpu")], error_score=0.0
        )

    chosen = selector()
    with pytest.warns(FitFailedWarning, match="flaky fold"):
        assert chosen._fit_with_oof(X, y) is None
    assert chosen.best_index_ == 0
    # One record for both warnings: a nested pytest.warns swallows the
    # other's warning before pytest 8.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MarginTemperatureScaling(selector(), device="cpu").fit(X, y)
    messages = [(w.category, str(w.message)) for w in caught]
    assert any(c is FitFailedWarning and "flaky fold" in m for c, m in messages), (
        messages
    )
    assert any(
        issubclass(c, UserWarning) and "No out-of-fold predictions" in m
        for c, m in messages
    ), messages
