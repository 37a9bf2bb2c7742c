"""ConformalClassifier: scores, quantile, validity on real logits, MAPIE, the API."""

import math
import pickle
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_calib import TemperatureScaling
from sklearn_calib.conformal import (
    ConformalClassifier,
    ConformalRiskClassifier,
    _masked_softmax,
    _row_draws,
    conformal_report,
)
from sklearn_calib.metrics import (
    get_scorer,
    mean_set_size,
    median_set_size,
    set_coverage,
    worst_class_coverage,
)
from sklearn_calib.utils._testing import expected_failed_checks, make_logits

from .conftest import load_shared

SCORES = ["lac", "aps", "raps", "saps", "top_k"]


def softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def order_statistic_rank(n, confidence_level):
    """ceil((n + 1) * level) in exact decimal arithmetic (the level as written)."""
    return math.ceil((n + 1) * Fraction(str(confidence_level)))


@pytest.fixture(scope="module")
def c100():
    data = load_shared("c100_resnet56_chenyaofo")
    X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(np.float64)
    y = np.concatenate([data["y_val"], data["y_test"]])
    return X, y


# --- scikit-learn's estimator checks --------------------------------------------------


# Bare, the classifier reads X as logits (one column per class) and fails the
# same checks as the calibrators, for the same reasons (utils/_testing.py).
# Over a real classifier it must pass every check. Some checks fit on 5
# samples, too few for a finite 0.9 quantile: the warning is right there.
TOO_FEW = "ignore:Too few calibration samples:UserWarning"


@pytest.mark.filterwarnings(TOO_FEW)
@parametrize_with_checks(
    [ConformalClassifier()], expected_failed_checks=expected_failed_checks
)
def test_sklearn_compatible_on_logits(estimator, check):
    check(estimator)


@pytest.mark.filterwarnings(TOO_FEW)
@parametrize_with_checks([ConformalClassifier(LogisticRegression())])
def test_sklearn_compatible_over_a_classifier(estimator, check):
    check(estimator)


# --- the score functions, by hand -----------------------------------------------------

PROBA = np.array([0.5, 0.3, 0.15, 0.05])


def fitted_scores(conformity_score, proba=PROBA, **params):
    """Score of each label of one row: calibrate on the row once per label."""
    logits = np.tile(np.log(proba), (len(proba), 1))
    labels = np.arange(len(proba))
    clf = ConformalClassifier(conformity_score=conformity_score, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # 4 samples: infinite quantile
        return clf.fit(logits, labels).conformity_scores_


@pytest.mark.parametrize(
    "conformity_score, params, expected",
    [
        ("lac", {}, [0.5, 0.7, 0.85, 0.95]),
        ("aps", {}, [0.0, 0.5, 0.8, 0.95]),
        (
            "raps",
            {"raps_penalty": 0.1, "raps_k_reg": 2},
            [0.0, 0.5, 0.8 + 0.1, 0.95 + 0.2],
        ),
        ("saps", {"saps_weight": 0.2}, [0.0, 0.5, 0.5 + 0.2, 0.5 + 0.4]),
        ("top_k", {}, [0.0, 1.0, 2.0, 3.0]),
    ],
)
def test_deterministic_scores_by_hand(conformity_score, params, expected):
    np.testing.assert_allclose(
        fitted_scores(conformity_score, **params), expected, atol=1e-12
    )


@pytest.mark.parametrize(
    "conformity_score, mass",
    [
        ("aps", PROBA),
        ("raps", PROBA),
        ("saps", [0.5, 0.1, 0.1, 0.1]),
        ("top_k", [1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_randomized_scores_add_a_uniform_share_of_the_label_mass(
    conformity_score, mass
):
    plain = fitted_scores(conformity_score)
    drawn = fitted_scores(conformity_score, randomized=True, random_state=5)
    share = (drawn - plain) / np.asarray(mass)
    # The draw is the hash of the seed (the random_state's first integer)
    # and the row's probabilities: one draw for the four copies of the row.
    seed = np.random.RandomState(5).randint(np.iinfo(np.int32).max)
    expected = _row_draws(_masked_softmax(np.log(np.tile(PROBA, (4, 1))))[0], seed)
    assert 0 < expected[0] < 1 and np.ptp(expected) == 0
    np.testing.assert_allclose(share, expected, atol=1e-12)


def test_randomized_draws_depend_on_the_row_not_its_position(c100):
    # The draws were a stream by position: every row predicted alone got the
    # stream's first draw, so a service answering one row at a time used one
    # U for all its sets (coverage 0.57 for a whole test set at one seed of
    # APS at 0.9 on these logits). A row now gets its set in any batch.
    X, y = c100
    clf = ConformalClassifier(
        conformity_score="aps", randomized=True, random_state=0
    ).fit(X[:2000], y[:2000])
    rows = X[2000:2300]
    sets = clf.predict_set(rows)
    alone = np.vstack([clf.predict_set(rows[i : i + 1]) for i in range(0, 300, 10)])
    np.testing.assert_array_equal(alone, sets[::10])
    np.testing.assert_array_equal(clf.predict_set(rows[::-1]), sets[::-1])
    # In any column order too (the hash reads the sorted probabilities), and
    # different rows get draws that look independent and uniform.
    proba = softmax(X)
    u = _row_draws(proba, 7)
    perm = np.random.default_rng(0).permutation(X.shape[1])
    np.testing.assert_array_equal(_row_draws(proba[:, perm], 7), u)
    signed = np.array([[0.5, -0.0, 0.5]])  # a calibrator's -0.0 is a 0
    assert _row_draws(signed, 7) == _row_draws(np.array([[0.5, 0.5, 0.0]]), 7)
    assert abs(u.mean() - 0.5) < 0.01 and abs(np.corrcoef(u, X.max(1))[0, 1]) < 0.03


def test_lac_ignores_randomized():
    np.testing.assert_array_equal(
        fitted_scores("lac"), fitted_scores("lac", randomized=True, random_state=0)
    )


def test_ties_rank_the_lower_column_first():
    scores = fitted_scores("aps", proba=np.array([0.4, 0.4, 0.2]))
    np.testing.assert_allclose(scores, [0.0, 0.4, 0.8])


def test_sets_are_the_labels_scoring_at_most_the_threshold(c100):
    X, y = c100
    for score in SCORES:
        for randomized in (False, True):
            clf = ConformalClassifier(
                conformity_score=score, randomized=randomized, random_state=1
            ).fit(X[:3000], y[:3000])
            sets = clf.predict_set(X[3000:4000])
            # Calibrating on the prediction rows with the same seed (the
            # same hash of the rows) gives the scores the sets were built from.
            twin = ConformalClassifier(
                conformity_score=score, randomized=randomized, random_state=1
            )
            scores = twin.fit(X[3000:4000], y[3000:4000]).conformity_scores_
            covered = sets[np.arange(1000), y[3000:4000]]
            np.testing.assert_array_equal(covered, scores <= clf.quantile_)


# --- the finite-sample quantile -------------------------------------------------------


@pytest.mark.parametrize("confidence_level", [0.8, 0.9, 0.95])
def test_quantile_is_the_ceil_order_statistic(confidence_level):
    for n in range(5, 80, 3):
        X, y = make_logits(n_samples=n, n_classes=3, seed=n)
        k = order_statistic_rank(n, confidence_level)
        clf = ConformalClassifier(confidence_level=confidence_level)
        if k > n:
            with pytest.warns(UserWarning, match="Too few calibration samples"):
                clf.fit(X, y)
            assert clf.quantile_ == np.inf
            assert clf.predict_set(X).all()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                clf.fit(X, y)
            assert clf.quantile_ == np.sort(clf.conformity_scores_)[k - 1]


def test_quantile_at_exact_integer_products():
    # (n + 1) * 0.9 is an integer for n = 9, 19, ..., 999: no rounding up.
    for n in (9, 19, 99, 999):
        X, y = make_logits(n_samples=n, n_classes=3, seed=1)
        clf = ConformalClassifier(confidence_level=0.9).fit(X, y)
        k = (n + 1) * 9 // 10
        assert clf.quantile_ == np.sort(clf.conformity_scores_)[k - 1]


def test_weighted_quantile_by_brute_force():
    X, y = make_logits(n_samples=60, n_classes=4, seed=2)
    weights = np.random.default_rng(3).uniform(0.1, 3.0, size=60)
    clf = ConformalClassifier(conformity_score="aps").fit(X, y, sample_weight=weights)
    scores = clf.conformity_scores_
    # Smallest calibration score whose weight at or below it reaches
    # 0.9 * (W + 1), the new sample counting as weight 1.
    target = 0.9 * (weights.sum() + 1)
    reached = [s for s in np.sort(scores) if weights[scores <= s].sum() >= target]
    assert clf.quantile_ == reached[0]


def test_integer_weights_equal_repeated_rows(c100):
    X, y = c100
    X, y, Xt = X[:400], y[:400], X[400:900]
    weights = np.random.default_rng(0).integers(0, 4, size=400)
    # Randomised too: a repeated row gets its row's draw.
    for score, randomized in [(s, False) for s in SCORES] + [("aps", True)]:
        params = dict(conformity_score=score, randomized=randomized, random_state=3)
        weighted = ConformalClassifier(**params).fit(X, y, sample_weight=weights)
        repeated = ConformalClassifier(**params).fit(
            np.repeat(X, weights, axis=0), np.repeat(y, weights)
        )
        assert weighted.quantile_ == repeated.quantile_
        np.testing.assert_array_equal(
            weighted.predict_set(Xt), repeated.predict_set(Xt)
        )


def test_tiny_weights_leave_the_new_sample_dominant():
    # Weights far below the new sample's weight 1 cannot bound any quantile:
    # the threshold is infinite, also where 1 / (their scale) overflows, and
    # the warning states their total weight in units of that 1.
    X, y = make_logits(n_samples=500, n_classes=4, seed=6)
    cases = [(1e-3, "0.5)"), (1e-300, "5e-298)"), (1e-308, "at most 8.38861e-299)")]
    for scale, total in cases:
        clf = ConformalClassifier()
        with pytest.warns(UserWarning, match=re.escape(f"total weight {total}")):
            clf.fit(X, y, sample_weight=np.full(500, scale))
        assert clf.quantile_ == np.inf
        assert clf.predict_set(X[:5]).all()


def test_unit_weights_equal_no_weights():
    X, y = make_logits(n_samples=200, n_classes=5, seed=4)
    plain = ConformalClassifier(conformity_score="raps").fit(X, y)
    weighted = ConformalClassifier(conformity_score="raps").fit(
        X, y, sample_weight=np.ones(200)
    )
    assert plain.quantile_ == weighted.quantile_


def test_confidence_level_per_call_equals_a_refit():
    X, y = make_logits(n_samples=500, n_classes=5, seed=5)
    at_90 = ConformalClassifier(conformity_score="aps").fit(X[:300], y[:300])
    at_80 = ConformalClassifier(conformity_score="aps", confidence_level=0.8).fit(
        X[:300], y[:300]
    )
    np.testing.assert_array_equal(
        at_90.predict_set(X[300:], confidence_level=0.8), at_80.predict_set(X[300:])
    )
    # Lower levels give nested, smaller sets.
    assert np.all(at_80.predict_set(X[300:]) <= at_90.predict_set(X[300:]))


# --- validity over random splits of real logits ---------------------------------------

N_CAL, N_TEST, N_SPLITS, ALPHA = 20, 100, 120, 0.1
# Four and a half standard errors: a correct implementation fails about once in
# 150 000 runs; an off-by-one order statistic moves the mean by 1/(n+1) = 0.048,
# more than 8 standard errors.
Z = 4.5

VALIDITY_CASES = [(score, False) for score in SCORES] + [
    (score, True) for score in ["aps", "raps", "saps", "top_k"]
]


@pytest.mark.parametrize(
    "conformity_score, randomized",
    VALIDITY_CASES,
    ids=[f"{s}-{'rand' if r else 'det'}" for s, r in VALIDITY_CASES],
)
def test_coverage_over_random_splits(c100, conformity_score, randomized):
    """Mean coverage over splits of a fixed pool is exactly k/(n+1) for a
    continuous score (ties only raise it): conditional on the pool, a random
    split makes calibration and test samples exchangeable.
    """
    X, y = c100
    rng = np.random.default_rng(11)
    coverage = []
    for split in range(N_SPLITS):
        rows = rng.choice(len(y), N_CAL + N_TEST, replace=False)
        cal, test = rows[:N_CAL], rows[N_CAL:]
        clf = ConformalClassifier(
            conformity_score=conformity_score,
            confidence_level=1 - ALPHA,
            randomized=randomized,
            random_state=split,
            classes=np.arange(X.shape[1]),
        ).fit(X[cal], y[cal])
        sets = clf.predict_set(X[test])
        coverage.append(sets[np.arange(N_TEST), y[test]].mean())
    mean = np.mean(coverage)
    tolerance = Z * np.std(coverage, ddof=1) / np.sqrt(N_SPLITS)
    exact = order_statistic_rank(N_CAL, 1 - ALPHA) / (N_CAL + 1)
    assert 1 - ALPHA <= exact <= 1 - ALPHA + 1 / (N_CAL + 1)
    assert mean >= 1 - ALPHA - tolerance
    continuous = conformity_score == "lac" or randomized
    if continuous:
        assert abs(mean - exact) <= tolerance


def test_exact_coverage_with_many_splits(c100):
    """The same property with 4000 splits, on the scores of the public
    estimator, for a sharper test of the order statistic (and of the score
    ties that make the deterministic cumulative scores conservative).
    """
    X, y = c100
    n_cal = 50
    rng = np.random.default_rng(12)
    splits = np.array(
        [rng.choice(len(y), n_cal + 500, replace=False) for _ in range(4000)]
    )
    k = order_statistic_rank(n_cal, 0.9)
    for score in SCORES:
        scores = ConformalClassifier(conformity_score=score).fit(X, y)
        scores = scores.conformity_scores_
        cal = np.sort(scores[splits[:, :n_cal]], axis=1)
        threshold = cal[:, k - 1]
        coverage = (scores[splits[:, n_cal:]] <= threshold[:, None]).mean(axis=1)
        tolerance = Z * coverage.std(ddof=1) / np.sqrt(len(coverage))
        assert coverage.mean() >= 0.9 - tolerance
        if score == "lac":
            assert abs(coverage.mean() - k / (n_cal + 1)) <= tolerance


def test_class_conditional_coverage_holds_for_every_class():
    data = load_shared("c10_resnet56_chenyaofo")
    X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(float)
    y = np.concatenate([data["y_val"], data["y_test"]])
    rng = np.random.default_rng(13)
    per_class = []
    for _ in range(100):
        rows = rng.choice(len(y), 600, replace=False)
        cal, test = rows[:300], rows[300:]
        clf = ConformalClassifier(conditional="class").fit(X[cal], y[cal])
        sets = clf.predict_set(X[test])
        covered = sets[np.arange(len(test)), y[test]]
        per_class.append([covered[y[test] == k].mean() for k in range(10)])
    per_class = np.array(per_class)
    tolerance = Z * per_class.std(axis=0, ddof=1) / np.sqrt(len(per_class))
    assert np.all(per_class.mean(axis=0) >= 0.9 - tolerance)


def test_class_conditional_thresholds_are_per_class_quantiles():
    X, y = make_logits(n_samples=400, n_classes=4, seed=6)
    clf = ConformalClassifier(conformity_score="aps", conditional="class").fit(X, y)
    for k in range(4):
        scores = np.sort(clf.conformity_scores_[y == k])
        rank = order_statistic_rank(len(scores), 0.9)
        assert clf.quantile_[k] == scores[rank - 1]
    sets = clf.predict_set(X)
    scores_all = ConformalClassifier(conformity_score="aps").fit(X, y)
    for k in range(4):
        # Label k of every sample is judged against class k's threshold.
        member = sets[:, k][y == k]
        np.testing.assert_array_equal(
            member, scores_all.conformity_scores_[y == k] <= clf.quantile_[k]
        )


def test_class_conditional_warns_about_rare_classes():
    X, y = make_logits(n_samples=200, n_classes=3, seed=7)
    y[:5] = 3  # 5 samples of a 4th class: too few at 0.9
    X = np.hstack([X, np.zeros((200, 1))])
    with pytest.warns(UserWarning, match=r"classes \[3\]"):
        clf = ConformalClassifier(conditional="class").fit(X, y)
    assert np.isinf(clf.quantile_[3]) and np.isfinite(clf.quantile_[:3]).all()
    assert clf.predict_set(X)[:, 3].all()


# --- MAPIE 1.x, on the same probabilities ---------------------------------------------

EPSILON = 1e-8  # MAPIE's absolute tolerance (mapie._machine_precision.EPSILON)


class _ProbabilityPassThrough(ClassifierMixin, BaseEstimator):
    """A prefit classifier whose predict_proba returns its input."""

    def __init__(self, n_classes=100):
        self.n_classes = n_classes

    def fit(self, X, y):
        return self

    def __sklearn_is_fitted__(self):
        return True

    @property
    def classes_(self):
        return np.arange(self.n_classes)

    def predict_proba(self, X):
        return np.asarray(X)

    def predict(self, X):
        return np.asarray(X).argmax(axis=1)


def _scripted_state(draws):
    """A RandomState whose ``uniform`` returns the given draws in turn.

    MAPIE's APS and RAPS draw their randomisation with
    ``check_random_state(random_state).uniform``; scripting it feeds them the
    draws of this library (its ``U`` is MAPIE's ``1 - U``), or ``U = 0``.
    """

    class Scripted(np.random.RandomState):
        def uniform(self, low=0.0, high=1.0, size=None):
            return np.asarray(draws.pop(0)(size)).reshape(size)

    return Scripted(0)


def _mapie_sets(score, confidence_level, P_cal, y_cal, P_test, **options):
    mapie = pytest.importorskip("mapie")
    assert mapie.__version__.startswith("1."), mapie.__version__
    from mapie.classification import SplitConformalClassifier

    params = options.pop("predict_params", None)
    clf = SplitConformalClassifier(
        _ProbabilityPassThrough(P_cal.shape[1]),
        confidence_level=confidence_level,
        conformity_score=score,
        prefit=True,
        **options,
    ).conformalize(P_cal, y_cal)
    sets = clf.predict_set(P_test, conformity_score_params=params)[1][:, :, 0]
    return sets, clf._mapie_classifier.conformity_score_function_


def _assert_equal_up_to_mapie_tolerance(ours, theirs, P_test, threshold, score):
    """MAPIE keeps labels within 1e-8 of its boundary: only those may differ."""
    assert np.all(ours <= theirs), "MAPIE's tolerance only adds labels"
    extra = theirs & ~ours
    for row in np.flatnonzero(extra.any(axis=1)):
        if score == "lac":
            assert np.all(1 - P_test[row, extra[row]] - threshold <= EPSILON)
        else:
            last = P_test[row, ours[row]].min()
            assert np.all(P_test[row, extra[row]] >= last - EPSILON)
    return int(extra.any(axis=1).sum())


@pytest.fixture(scope="module")
def c100_proba():
    data = load_shared("c100_resnet56_chenyaofo")
    return (
        softmax(data["logits_val"].astype(float)),
        data["y_val"],
        softmax(data["logits_test"].astype(float)),
        data["y_test"],
    )


@pytest.mark.parametrize("confidence_level", [0.9, 0.95])
@pytest.mark.parametrize("score", ["lac", "top_k", "aps"])
def test_equals_mapie_deterministic(c100_proba, score, confidence_level):
    P_cal, y_cal, P_test, _ = c100_proba
    options = {}
    if score == "aps":
        # MAPIE always randomises the calibration scores (p_y * U subtracted
        # from the cumulative mass); U = 1 gives this library's U = 0 scores,
        # and include_last_label=True its deterministic sets.
        options["random_state"] = _scripted_state([np.ones])
    theirs, fitted = _mapie_sets(
        score, confidence_level, P_cal, y_cal, P_test, **options
    )
    ours_clf = ConformalClassifier(
        conformity_score=score, confidence_level=confidence_level
    ).fit(np.log(P_cal), y_cal)
    assert ours_clf.quantile_ == pytest.approx(float(fitted.quantiles_[0]), abs=1e-12)
    ours = ours_clf.predict_set(np.log(P_test))
    differing = _assert_equal_up_to_mapie_tolerance(
        ours, theirs, P_test, ours_clf.quantile_, score
    )
    if score != "top_k":
        # top-k's tail probabilities of confident samples lie within 1e-8 of
        # each other, where MAPIE adds every tied label; elsewhere rare.
        assert differing <= 2


@pytest.mark.parametrize("confidence_level", [0.9, 0.95])
def test_equals_mapie_randomized_aps(c100_proba, confidence_level):
    P_cal, y_cal, P_test, _ = c100_proba
    seed = 3
    # This library's draws (documented in random_state), given to MAPIE as 1 - U.
    hash_seed = np.random.RandomState(seed).randint(np.iinfo(np.int32).max)
    u_cal = _row_draws(_masked_softmax(np.log(P_cal))[0], hash_seed)
    u_test = _row_draws(_masked_softmax(np.log(P_test))[0], hash_seed)
    theirs, fitted = _mapie_sets(
        "aps",
        confidence_level,
        P_cal,
        y_cal,
        P_test,
        random_state=_scripted_state([lambda s: 1 - u_cal, lambda s: 1 - u_test]),
        predict_params={"include_last_label": "randomized"},
    )
    ours_clf = ConformalClassifier(
        conformity_score="aps",
        confidence_level=confidence_level,
        randomized=True,
        random_state=seed,
    ).fit(np.log(P_cal), y_cal)
    assert ours_clf.quantile_ == pytest.approx(float(fitted.quantiles_[0]), abs=1e-12)
    ours = ours_clf.predict_set(np.log(P_test))
    assert (ours == 0).all(axis=1).any()  # randomised sets may be empty
    differing = _assert_equal_up_to_mapie_tolerance(
        ours, theirs, P_test, ours_clf.quantile_, "aps"
    )
    assert differing <= 2


def test_equals_mapie_raps(c100_proba):
    """MAPIE's RAPS picks (k_reg, lambda) on a held-out 10% of the calibration
    rows and calibrates on the rest; with the same choices and rows the
    thresholds agree. Its prediction step penalises each rank as this
    library penalises the next one (a label is kept while the penalised mass
    *before the previous label* is below the threshold), so its sets are
    this library's score function with ``raps_k_reg + 1``.
    """
    from sklearn_calib.conformal import _score_matrix

    P_cal, y_cal, P_test, _ = c100_proba
    theirs, fitted = _mapie_sets(
        "raps", 0.9, P_cal, y_cal, P_test, random_state=_scripted_state([np.ones])
    )
    k_reg, penalty = int(fitted.k_star[0]), float(fitted.lambda_star)
    held_out = [np.flatnonzero((P_cal == row).all(axis=1))[0] for row in fitted.X_raps]
    rest = np.setdiff1d(np.arange(len(y_cal)), held_out)
    ours_clf = ConformalClassifier(
        conformity_score="raps", raps_penalty=penalty, raps_k_reg=k_reg
    ).fit(np.log(P_cal[rest]), y_cal[rest])
    assert ours_clf.quantile_ == pytest.approx(float(fitted.quantiles_[0]), abs=1e-12)
    shifted = (
        _score_matrix(
            P_test,
            "raps",
            raps_penalty=penalty,
            raps_k_reg=k_reg + 1,
            saps_weight=0.1,
        )
        <= ours_clf.quantile_
    )
    differing = _assert_equal_up_to_mapie_tolerance(
        shifted, theirs, P_test, ours_clf.quantile_, "raps"
    )
    assert differing <= 10
    # The convention matters: this library's own sets are smaller.
    ours = ours_clf.predict_set(np.log(P_test))
    assert np.all(ours <= shifted) and ours.sum() < shifted.sum()


# --- crepes, on the same LAC scores --------------------------------------------------


def _crepes_sets(cal_scores, test_scores, confidence):
    crepes = pytest.importorskip("crepes")
    cc = crepes.ConformalClassifier().fit(cal_scores)
    return cc.predict_set(test_scores, confidence=confidence, smoothing=False) == 1


@pytest.mark.parametrize("confidence_level", [0.9, 0.95, 0.99])
def test_equals_crepes_lac(c100, confidence_level):
    # crepes keeps a label when its p-value (#{cal >= s} + 1) / (n + 1) is at
    # least 1 - confidence; with n = 5000 that level times n + 1 is never an
    # integer here, where the two rules coincide (see the next test). crepes
    # gets the same probabilities (this library's softmax) so that the scores
    # agree to the last bit; it loops in Python, hence 300 test rows.
    X, y = c100
    X_cal, y_cal, X_test = X[:5000], y[:5000], X[5000:5300]
    clf = ConformalClassifier(confidence_level=confidence_level).fit(X_cal, y_cal)
    P_cal, P_test = clf.predict_proba(X_cal), clf.predict_proba(X_test)
    cal_scores = 1 - P_cal[np.arange(len(y_cal)), y_cal]
    theirs = _crepes_sets(cal_scores, 1 - P_test, confidence_level)
    np.testing.assert_array_equal(clf.predict_set(X_test), theirs)


def test_crepes_keeps_the_boundary_p_value():
    """When alpha * (n + 1) is an integer, crepes's ``p >= alpha`` keeps the
    label whose p-value equals alpha (one more order statistic: here n = 99,
    alpha = 0.1); this library's threshold is the ceil((n + 1)(1 - alpha))-th
    score, which is ``p > alpha``, the same as crepes a hair below the level.
    """
    X, y = make_logits(n_samples=400, n_classes=5, seed=26)
    clf = ConformalClassifier().fit(X[:99], y[:99])
    ours, P = clf.predict_set(X[99:]), clf.predict_proba(X)
    cal_scores = 1 - P[np.arange(99), y[:99]]
    np.testing.assert_array_equal(
        ours, _crepes_sets(cal_scores, 1 - P[99:], 0.9 - 1e-9)
    )
    boundary = _crepes_sets(cal_scores, 1 - P[99:], 0.9)
    assert np.all(ours <= boundary) and boundary.sum() > ours.sum()


def test_equals_crepes_label_conditional():
    data = load_shared("c10_resnet56_chenyaofo")
    X_cal, y_cal = data["logits_val"].astype(float), data["y_val"]
    X_test = data["logits_test"][:2000].astype(float)
    clf = ConformalClassifier(conditional="class").fit(X_cal, y_cal)
    ours = clf.predict_set(X_test)
    P_cal, P_test = clf.predict_proba(X_cal), clf.predict_proba(X_test)
    crepes = pytest.importorskip("crepes")
    cc = crepes.ConformalClassifier().fit(
        1 - P_cal[np.arange(len(y_cal)), y_cal], bins=y_cal
    )
    # Label-conditional: label k of every sample is judged in the bin of class k.
    theirs = np.column_stack(
        [
            cc.predict_set(
                1 - P_test[:, [k]],
                bins=np.full(len(P_test), k),
                confidence=0.9,
                smoothing=False,
            )[:, 0]
            == 1
            for k in range(10)
        ]
    )
    np.testing.assert_array_equal(ours, theirs)


# --- composition with calibrators -----------------------------------------------------


def test_pipeline_after_a_calibrator(c100):
    X, y = c100
    cal, test = slice(0, 2000), slice(5000, 7000)
    pipe = make_pipeline(
        TemperatureScaling(device="cpu"), ConformalClassifier(conformity_score="raps")
    ).fit(X[cal], y[cal])
    ts = pipe[0]
    np.testing.assert_allclose(pipe.predict_proba(X[test]), ts.predict_proba(X[test]))
    sets = pipe[-1].predict_set(pipe[:-1].transform(X[test]))
    # The same as the calibrator given as a parameter (refitted on the same
    # rows) and as a frozen prefit calibrator.
    inner = ConformalClassifier(
        TemperatureScaling(device="cpu"), conformity_score="raps"
    ).fit(X[cal], y[cal])
    frozen = ConformalClassifier(FrozenEstimator(ts), conformity_score="raps").fit(
        X[cal], y[cal]
    )
    for other in (inner, frozen):
        np.testing.assert_array_equal(other.predict_set(X[test]), sets)
        np.testing.assert_allclose(
            other.predict_proba(X[test]), ts.predict_proba(X[test])
        )
        np.testing.assert_array_equal(other.predict(X[test]), ts.predict(X[test]))
    assert frozen.calibrator_.estimator is ts  # used as it is


def test_over_a_frozen_feature_classifier():
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=900, n_classes=3, n_informative=5, random_state=0
    )
    model = LogisticRegression().fit(X[:300], y[:300])
    clf = ConformalClassifier(FrozenEstimator(model), conformity_score="aps")
    clf.fit(X[300:600], y[300:600])
    assert clf.n_features_in_ == X.shape[1]
    np.testing.assert_allclose(clf.predict_proba(X[600:]), model.predict_proba(X[600:]))
    assert set_coverage(y[600:], clf.predict_set(X[600:])) > 0.8


def test_calibrator_without_sample_weight_refuses_weights():
    from sklearn.neighbors import KNeighborsClassifier

    X, y = make_logits(n_samples=100, n_classes=3, seed=24)
    with pytest.raises(TypeError, match="does not accept sample_weight"):
        ConformalClassifier(KNeighborsClassifier()).fit(
            X, y, sample_weight=np.ones(100)
        )
    # A frozen one is not refitted: the weights go to the scores only.
    knn = KNeighborsClassifier().fit(X, y)
    ConformalClassifier(FrozenEstimator(knn)).fit(X, y, sample_weight=np.ones(100))


def test_parameters_changed_after_fit_do_not_apply_until_refit():
    X, y = make_logits(n_samples=400, n_classes=5, seed=25)
    clf = ConformalClassifier(conformity_score="aps", randomized=True, random_state=0)
    clf.fit(X[:200], y[:200])
    before = clf.predict_set(X[200:])
    clf.set_params(conformity_score="top_k", randomized=False, conditional="class")
    np.testing.assert_array_equal(clf.predict_set(X[200:]), before)


def test_frozen_calibrator_rejects_unknown_labels():
    X, y = make_logits(n_samples=200, n_classes=3, seed=8)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="not among the calibrator's classes"):
        ConformalClassifier(FrozenEstimator(ts)).fit(X, np.where(y == 2, 5, y))


def test_frozen_calibrator_refuses_2d_labels_by_name():
    # a frozen calibrator's fit ignores y: labels of shape (n, 2) reached
    # numpy's take_along_axis ("`indices` and `arr` must have the same number
    # of dimensions"), in ConformalClassifier and ConformalRiskClassifier
    X, y = make_logits(n_samples=200, n_classes=3, seed=8)
    frozen = FrozenEstimator(TemperatureScaling(device="cpu").fit(X, y))
    for estimator in (ConformalClassifier(frozen), ConformalRiskClassifier(frozen)):
        with pytest.raises(ValueError, match="y must be 1-D"):
            estimator.fit(X, np.c_[y, y])
    # a column vector is one label per row
    column = ConformalClassifier(frozen).fit(X, y[:, None])
    assert column.quantile_ == ConformalClassifier(frozen).fit(X, y).quantile_


def test_missing_labels_are_refused_in_the_callers_name():
    X, _ = make_logits(n_samples=50, n_classes=3, seed=8)
    for estimator in (ConformalClassifier(), ConformalRiskClassifier()):
        name = type(estimator).__name__
        with pytest.raises(ValueError, match=f"^{name} requires y to be passed"):
            estimator.fit(X, None)


# --- masked classes (-inf logits) -----------------------------------------------------


def test_masked_classes_never_enter_a_set():
    X, y = make_logits(n_samples=300, n_classes=5, seed=9)
    X[:, 4] = -np.inf
    X[::3, 2] = -np.inf
    y = np.where(np.isinf(X[np.arange(300), y]), 0, y)
    for score in SCORES:
        clf = ConformalClassifier(conformity_score=score, confidence_level=0.99)
        clf.fit(X[:150], y[:150])
        with pytest.warns(UserWarning, match="Too few calibration samples"):
            sets = clf.predict_set(X[150:], confidence_level=0.999)
        assert sets[~np.isinf(X[150:])].all()  # full sets otherwise
        assert not sets[np.isinf(X[150:])].any()
        proba = clf.predict_proba(X[150:])
        assert np.all(proba[np.isinf(X[150:])] == 0)
        np.testing.assert_allclose(proba.sum(axis=1), 1)


def test_masked_classes_stay_out_of_full_sets():
    X, y = make_logits(n_samples=5, n_classes=4, seed=10)
    X[:, 3] = -np.inf
    y = np.minimum(y, 2)
    with pytest.warns(UserWarning, match="Too few calibration samples"):
        clf = ConformalClassifier(conformity_score="aps").fit(X, y)
    sets = clf.predict_set(X)
    assert sets[:, :3].all() and not sets[:, 3].any()


class _TanhFeatureClassifier(ClassifierMixin, BaseEstimator):
    """Three features, three classes; accepts -inf features (tanh(-inf) = -1)."""

    def fit(self, X, y):
        self.classes_ = np.arange(3)
        return self

    def predict_proba(self, X):
        return softmax(-3.0 * np.tanh(np.asarray(X, dtype=float)))


def test_infinite_feature_of_a_classifier_masks_no_class():
    # A frozen classifier of 3 features and 3 classes: a -inf feature (which
    # gradient boosting, for one, accepts) was read as a masked class, so
    # class 1, the likeliest there, never entered a set, calibration warned
    # of masked true classes and the threshold was infinite. Only a class
    # that the classifier gives probability exactly 0 is masked.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    X[:, 1] = np.where(rng.random(600) < 0.2, -np.inf, X[:, 1])
    model = _TanhFeatureClassifier().fit(X, None)
    proba = model.predict_proba(X)
    y = (rng.random(600)[:, None] > np.cumsum(proba, axis=1)).sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = ConformalClassifier(FrozenEstimator(model)).fit(X[:300], y[:300])
    sets = clf.predict_set(X[300:])
    assert np.isfinite(clf.quantile_)
    np.testing.assert_array_equal(sets, clf._scores(proba[300:], None) <= clf.quantile_)
    assert sets[np.isinf(X[300:, 1]), 1].all()


def test_masked_true_class_warns_and_is_never_covered():
    X, y = make_logits(n_samples=100, n_classes=3, seed=11)
    X[:4, 1], y[:4] = -np.inf, 1
    with pytest.warns(UserWarning, match="true class of 4 calibration"):
        clf = ConformalClassifier().fit(X, y)
    assert np.isinf(clf.conformity_scores_[:4]).all()


def test_row_without_finite_logit_raises():
    X, y = make_logits(n_samples=50, n_classes=3, seed=12)
    clf = ConformalClassifier().fit(X, y)
    X[7] = -np.inf
    with pytest.raises(ValueError, match="Row 7 of X has no finite logit"):
        clf.predict_set(X)


# --- input types, errors, persistence -------------------------------------------------


def test_binary_single_score_column():
    X, y = make_logits(n_samples=400, n_classes=2, seed=13)
    score = (X[:, 1] - X[:, 0])[:, None]
    one = ConformalClassifier(conformity_score="aps").fit(score[:200], y[:200])
    two = ConformalClassifier(conformity_score="aps").fit(X[:200], y[:200])
    assert one.n_features_in_ == 1
    np.testing.assert_array_equal(
        one.predict_set(score[200:]), two.predict_set(X[200:])
    )


def test_string_labels_pandas_and_torch():
    pd = pytest.importorskip("pandas")
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=300, n_classes=3, seed=14)
    names = np.array(["ant", "bee", "cat"])
    reference = ConformalClassifier(conformity_score="aps").fit(X, y).predict_set(X)
    named = ConformalClassifier(conformity_score="aps").fit(
        pd.DataFrame(X, columns=list("abc")), pd.Series(names[y])
    )
    np.testing.assert_array_equal(named.classes_, names)
    np.testing.assert_array_equal(named.feature_names_in_, list("abc"))
    np.testing.assert_array_equal(
        named.predict_set(pd.DataFrame(X, columns=list("abc"))), reference
    )
    tensors = ConformalClassifier(conformity_score="aps").fit(
        torch.from_numpy(X), torch.from_numpy(y)
    )
    np.testing.assert_array_equal(tensors.predict_set(torch.from_numpy(X)), reference)


def test_float32_logits_give_the_same_sets_as_float64():
    X, y = make_logits(n_samples=400, n_classes=6, seed=15)
    X = X.astype(np.float32)
    a = ConformalClassifier(conformity_score="saps").fit(X[:200], y[:200])
    b = ConformalClassifier(conformity_score="saps").fit(
        X[:200].astype(np.float64), y[:200]
    )
    np.testing.assert_array_equal(
        a.predict_set(X[200:]), b.predict_set(X[200:].astype(np.float64))
    )
    assert a.predict_proba(X[200:]).dtype == np.float32


def test_pickle_and_clone_keep_the_sets():
    X, y = make_logits(n_samples=300, n_classes=4, seed=16)
    clf = ConformalClassifier(
        conformity_score="raps", randomized=True, random_state=0
    ).fit(X, y)
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict_set(X), clf.predict_set(X))
    # Reproducible: the same seed gives the same sets, another seed others.
    again = clone(clf).fit(X, y)
    np.testing.assert_array_equal(again.predict_set(X), clf.predict_set(X))
    other = clone(clf).set_params(random_state=1).fit(X, y)
    assert not np.array_equal(other.predict_set(X), clf.predict_set(X))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"conformity_score": "thr"}, "conformity_score"),
        ({"confidence_level": 1.0}, "confidence_level"),
        ({"conditional": "group"}, "conditional"),
        ({"saps_weight": 0.0}, "saps_weight"),
        ({"raps_k_reg": -1}, "raps_k_reg"),
        ({"calibrator": "ts"}, "calibrator"),
    ],
)
def test_bad_parameters_raise(params, message):
    X, y = make_logits(n_samples=50, n_classes=3, seed=17)
    with pytest.raises(ValueError, match=message):
        ConformalClassifier(**params).fit(X, y)


@pytest.mark.parametrize("level", [0, 1, 1.5, "0.9", True])
def test_bad_confidence_level_at_prediction_raises(level):
    X, y = make_logits(n_samples=50, n_classes=3, seed=18)
    clf = ConformalClassifier().fit(X, y)
    with pytest.raises(ValueError, match="confidence_level"):
        clf.predict_set(X, confidence_level=level)


@pytest.mark.parametrize(
    "value, message", [(np.nan, "NaN"), (np.inf, "infinity")], ids=["nan", "inf"]
)
def test_nan_and_positive_infinity_raise(value, message):
    X, y = make_logits(n_samples=50, n_classes=3, seed=19)
    bad = X.copy()
    bad[3, 1] = value
    with pytest.raises(ValueError, match=message):
        ConformalClassifier().fit(bad, y)
    clf = ConformalClassifier().fit(X, y)
    with pytest.raises(ValueError, match=message):
        clf.predict_set(bad)


def test_risk_threshold_works_in_row_blocks():
    # The threshold built whole (n, K) temporaries, about 12 times the score
    # matrix (3.1 GB and 12 s for 2000 samples of 10,000 classes); block by
    # block, keeping only the entries where a loss drops, it is the same
    # threshold with temporaries near the size of the scores.
    import tracemalloc

    from sklearn_calib.conformal import _crc_threshold

    rng = np.random.default_rng(0)
    n, n_classes = 2000, 500
    scores = np.round(rng.random((n, n_classes)) * 64) / 64  # ties
    y = rng.integers(0, n_classes, n)
    cost = rng.random((n_classes, n_classes))
    np.fill_diagonal(cost, 0.0)
    tracemalloc.start()
    try:
        threshold, risk = _crc_threshold(scores, y, cost, 0.1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * scores.nbytes

    # The definition: the smallest score whose mean loss certifies 0.1.
    def loss(lam):
        held = scores <= lam
        best = np.where(held, cost[y], np.inf).min(axis=1)
        return np.where(held.any(axis=1), best, cost[y].max(axis=1))

    candidates = np.unique(scores)
    ok = [lam for lam in candidates if loss(lam).sum() <= (n + 1) * 0.1 - cost.max()]
    assert threshold == ok[0] and risk == pytest.approx(loss(ok[0]).mean())


def test_raps_penalty_past_float_range_is_not_a_masked_class():
    # raps_penalty=1e308 overflowed the penalty of the third rank to inf, the
    # score of a masked class: calibration samples whose true class ranked
    # there were counted as masked (a false warning), the threshold became
    # infinite and those classes still never entered a set.
    X, y = make_logits(n_samples=300, n_classes=5, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = ConformalClassifier(conformity_score="raps", raps_penalty=1e308)
        clf.fit(X, y)
        sets = clf.predict_set(X)
    assert np.isfinite(clf.conformity_scores_).all() and np.isfinite(clf.quantile_)
    assert sets[np.arange(300), y].mean() >= 0.9


def test_logits_of_opposite_float_extremes_do_not_warn():
    # -max - max overflowed to -inf (probability 0, right) with numpy's
    # "overflow encountered in subtract" RuntimeWarning.
    big = np.finfo(np.float64).max
    X = np.array([[big, -big, 0.0], [-big, big, 0.0], [0.0, -big, big]] * 4)
    y = np.array([0, 1, 2] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = ConformalClassifier(confidence_level=0.5).fit(X, y)
        proba = clf.predict_proba(X[:3])
    np.testing.assert_array_equal(proba, np.eye(3))


def test_wrong_width_at_prediction_raises():
    X, y = make_logits(n_samples=50, n_classes=3, seed=20)
    clf = ConformalClassifier().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.predict_set(X[:, :2])


# --- scorers and model selection ------------------------------------------------------


def test_set_scorers_call_predict_set():
    X, y = make_logits(n_samples=600, n_classes=4, seed=21)
    clf = ConformalClassifier(conformity_score="aps").fit(X[:300], y[:300])
    sets = clf.predict_set(X[300:])
    assert get_scorer("set_coverage")(clf, X[300:], y[300:]) == set_coverage(
        y[300:], sets
    )
    assert get_scorer("worst_class_coverage")(
        clf, X[300:], y[300:]
    ) == worst_class_coverage(y[300:], sets)
    assert get_scorer("neg_mean_set_size")(clf, X[300:], y[300:]) == -mean_set_size(
        sets
    )
    assert get_scorer("neg_median_set_size")(clf, X[300:], y[300:]) == -median_set_size(
        sets
    )


def test_grid_search_picks_the_smallest_sets():
    X, y = make_logits(n_samples=900, n_classes=6, seed=22)
    search = GridSearchCV(
        ConformalClassifier(),
        {"conformity_score": ["lac", "top_k"]},
        # scikit-learn's GridSearchCV knows only its own scorer names; ours
        # are passed as objects.
        scoring=get_scorer("neg_mean_set_size"),
        cv=3,
    ).fit(X, y)
    # LAC gives the smallest average sets (Sadinle et al.), top-k the largest.
    assert search.best_params_ == {"conformity_score": "lac"}


# --- the report for the command line --------------------------------------------------


def test_conformal_report_matches_the_estimator(c100):
    X, y = c100
    proba = softmax(X[5000:])
    y_test = y[5000:]
    report = conformal_report(
        y_test,
        {"raw": proba},
        conformity_scores=["aps"],
        confidence_levels=[0.9],
        n_splits=3,
        random_state=0,
    )
    assert list(report.columns) == [
        "model",
        "conformity_score",
        "confidence_level",
        "coverage",
        "coverage_std",
        "mean_set_size",
        "empty_set_rate",
        "aurc",
        "excess_aurc",
    ]
    # The same splits through the public estimator.
    rng = np.random.RandomState(0)
    coverage, size = [], []
    for _ in range(3):
        perm = rng.permutation(5000)
        cal, held = perm[:2500], perm[2500:]
        clf = ConformalClassifier(conformity_score="aps").fit(
            np.log(proba[cal]), y_test[cal]
        )
        sets = clf.predict_set(np.log(proba[held]))
        coverage.append(set_coverage(y_test[held], sets))
        size.append(mean_set_size(sets))
    row = report.iloc[0]
    assert row["coverage"] == pytest.approx(np.mean(coverage), abs=1e-12)
    assert row["mean_set_size"] == pytest.approx(np.mean(size), abs=1e-12)
    from sklearn_calib.selective import aurc, excess_aurc

    assert row["aurc"] == pytest.approx(aurc(y_test, proba), rel=1e-12)
    assert row["excess_aurc"] == pytest.approx(excess_aurc(y_test, proba), rel=1e-12)


def test_conformal_report_rows_and_errors():
    X, y = make_logits(n_samples=400, n_classes=4, seed=23)
    proba = softmax(X)
    rows = conformal_report(
        y, {"a": proba, "b": softmax(X / 2)}, n_splits=2, as_frame=False
    )
    assert len(rows) == 2 * 3 * 2
    assert [r["model"] for r in rows[:6]] == ["a"] * 6
    with pytest.raises(ValueError, match="Unknown conformity score"):
        conformal_report(y, proba, conformity_scores=["thr"])
    with pytest.raises(ValueError, match="confidence_level"):
        conformal_report(y, proba, confidence_levels=[1.2])
    with pytest.raises(ValueError, match="n_splits"):
        conformal_report(y, proba, n_splits=0)
    with pytest.raises(ValueError, match="calibration_size"):
        conformal_report(y, proba, calibration_size=1.0)
    with pytest.raises(ValueError, match=r"y_prob\['b'\]"):
        conformal_report(y, {"a": proba, "b": X})


def test_conformal_report_warns_when_the_calibration_part_is_too_small():
    # 10 samples split in halves: 5 calibration rows cannot bound the 0.9
    # quantile (9 are needed); the full sets (coverage 1) were reported
    # without a word, where the estimator warns.
    X, y = make_logits(n_samples=10, n_classes=3, seed=1)
    with pytest.warns(UserWarning, match=r"confidence_level=0.9: 5 per split"):
        rows = conformal_report(
            y, softmax(X), confidence_levels=[0.5, 0.9], n_splits=2, as_frame=False
        )
    assert rows[1]["coverage"] == 1.0 and rows[1]["mean_set_size"] == 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conformal_report(y, softmax(X), confidence_levels=0.5, n_splits=2)


@pytest.mark.parametrize("levels", [np.array(0.9), "0.9"])
def test_conformal_report_reads_a_single_level_whole(levels):
    # A 0-d array failed deep in numpy (iteration over a 0-d array) and a
    # string was read character by character ("got '0'").
    X, y = make_logits(n_samples=40, n_classes=3, seed=1)
    with pytest.raises(ValueError, match=re.escape(f"got {levels!r}")):
        conformal_report(y, softmax(X), confidence_levels=levels)


def test_conformal_report_randomized_draws_per_split():
    data = load_shared("c10_resnet56_chenyaofo")
    proba, y = softmax(data["logits_test"].astype(float)), data["y_test"]
    common = dict(conformity_scores=["aps"], confidence_levels=[0.9], n_splits=10)
    drawn = conformal_report(y, proba, randomized=True, **common)
    again = conformal_report(y, proba, randomized=True, **common)
    fixed = conformal_report(y, proba, **common)
    assert drawn.equals(again)  # seeded
    # Randomised APS covers the target on average; the deterministic one of
    # this 95%-accurate model keeps the top label, covering far more.
    row, plain = drawn.iloc[0], fixed.iloc[0]
    assert abs(row["coverage"] - 0.9) < 4 * row["coverage_std"] / np.sqrt(10) + 1e-3
    assert plain["coverage"] > 0.93 and row["empty_set_rate"] > 0


def test_api_reference_lists_the_conformal_and_selective_names():
    import sklearn_calib.selective as selective

    from .test_docs import documented_names

    names = set(documented_names())
    expected = {"sklearn_calib.conformal.ConformalClassifier"}
    expected |= {"sklearn_calib.conformal.conformal_report"}
    expected |= {f"sklearn_calib.selective.{n}" for n in selective.__all__}
    expected |= {"sklearn_calib.display.RiskCoverageDisplay"}
    assert expected <= names, sorted(expected - names)


def test_classes_state_the_columns_of_raw_logits():
    # Labels 1..3 of four columns: without classes= the match is ambiguous.
    X, y = make_logits(n_samples=400, n_classes=4, seed=31)
    keep = y != 0
    with pytest.raises(ValueError, match="pass classes="):
        ConformalClassifier().fit(X[keep], y[keep])
    clf = ConformalClassifier(classes=[0, 1, 2, 3]).fit(X[keep], y[keep])
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2, 3])
    assert clf.predict_set(X).shape == (400, 4)
    # A calibrator states its own classes.
    with pytest.raises(ValueError, match="pass classes= to the calibrator"):
        ConformalClassifier(TemperatureScaling(device="cpu"), classes=[0, 1, 2, 3]).fit(
            X, y
        )


@pytest.mark.parametrize("estimator", [ConformalClassifier, ConformalRiskClassifier])
def test_lac_sets_of_integer_logits_do_not_depend_on_the_class_order(estimator):
    # Integer logits: many rows hold the same logits in another column order.
    # The softmax summed in column order set them an ulp apart, so the
    # quantile (the score of one of them) moved by an ulp when the classes
    # were permuted, and 5 of 300 test rows gained or lost a class.
    X, y = make_logits(n_samples=1000, n_classes=4, seed=5)
    X = np.round(X / 2)
    X_test = np.round(make_logits(n_samples=300, n_classes=4, seed=6)[0] / 2)
    permutation = np.array([2, 0, 3, 1])
    inverse = np.argsort(permutation)
    plain = estimator().fit(X, y)
    permuted = estimator().fit(X[:, permutation], inverse[y])
    np.testing.assert_array_equal(
        permuted.predict_set(X_test[:, permutation])[:, inverse],
        plain.predict_set(X_test),
    )
