"""Decisions with guarantees: p-values, error control, the three estimators.

The guarantees are checked by simulation over 1,000 random calibration
samples of real logits per setting (tests marked ``validity``). The
calibration samples are drawn with replacement from the pooled validation and
test logits of a network, so the pool is the population: the true risk of a
certified threshold is its risk on the pool, exactly. A second check uses
calibration / test splits of the pool (the test part the rest of it) where
the test part is at least nine times the calibration part; with larger
calibration parts the test part's own sampling noise (which the guarantee
does not cover) would be counted as violations.
"""

import math
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import make_pipeline

from sklearn_calib import TemperatureScaling
from sklearn_calib._risk_control._binary import (
    certify_thresholds,
    rank_positive,
    threshold_losses,
)
from sklearn_calib._risk_control._bounds import (
    bonferroni,
    bonferroni_holm,
    fixed_sequence,
)
from sklearn_calib._risk_control._selective import (
    certify_risk_sorted,
    minimum_accepted,
)
from sklearn_calib.conformal import ConformalClassifier, ConformalRiskClassifier
from sklearn_calib.conformal import _crc_threshold as crc_threshold
from sklearn_calib.selective import (
    CertifiedThresholdClassifier,
    SelectiveClassifier,
    acceptance_rate,
    acceptance_rate_scorer,
    accepted_error_rate,
    binomial_tail_pvalue,
    hoeffding_bentkus_pvalue,
    neg_accepted_error_rate,
    risk_upper_bound,
)
from sklearn_calib.utils._testing import make_logits

from .conftest import load_shared

N_SPLITS = 1000


def softmax(X, axis=1):
    """The softmax the estimators use: each row summed over its sorted entries.

    Rows holding the same logits in another column order then get the same
    probabilities, which the exact threshold comparisons below rely on.
    """
    X = np.asarray(X, dtype=np.float64)
    e = np.exp(X - X.max(axis=axis, keepdims=True))
    return e / np.sort(e, axis=axis).sum(axis=axis, keepdims=True)


def binomial_noise(delta, n_splits=N_SPLITS):
    """Three standard deviations of a violation frequency of ``delta``."""
    return 3 * math.sqrt(delta * (1 - delta) / n_splits)


@pytest.fixture(scope="module")
def c10():
    data = load_shared("c10_densenet40_guo")
    X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(np.float64)
    y = np.concatenate([data["y_val"], data["y_test"]])
    return X, y


@pytest.fixture(scope="module")
def c100():
    data = load_shared("c100_resnet56_chenyaofo")
    X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(np.float64)
    y = np.concatenate([data["y_val"], data["y_test"]])
    return X, y


# --- p-values and bounds: scipy and hand computations ---------------------------------


def test_binomial_pvalue_is_the_binomial_cdf():
    k = np.array([0, 1, 3, 10, 50])
    n = np.array([45, 60, 100, 100, 1000])
    for alpha in (0.01, 0.05, 0.2):
        np.testing.assert_allclose(
            binomial_tail_pvalue(k, n, alpha),
            stats.binom.cdf(k, n, alpha),
            rtol=1e-12,
        )
    # by hand: P(Bin(n, a) <= 0) = (1 - a)^n, P(<= 1) adds n a (1 - a)^(n - 1)
    assert binomial_tail_pvalue(0, 45, 0.05) == pytest.approx(0.95**45, rel=1e-12)
    assert binomial_tail_pvalue(1, 60, 0.05) == pytest.approx(
        0.95**60 + 60 * 0.05 * 0.95**59, rel=1e-12
    )
    assert binomial_tail_pvalue(0, 0, 0.05) == 1.0
    assert binomial_tail_pvalue(5, 5, 0.05) == 1.0


def test_binomial_pvalue_of_a_large_sample():
    # scipy.special.bdtr drifted from ten million samples: P(Bin(1e9, 0.5)
    # <= 5e8) came out 0.84 (0.50001); at 1e10 samples a tail of 0.00135
    # came out 1.0 (p = 0.05) or NaN (p = 0.5), so nothing a large sample
    # supports was certified. The reference: the normal approximation with
    # continuity correction, within 2e-4 of the exact tail here.
    cases = [
        (5 * 10**8, 10**9, 0.5),
        (4_999_850_000, 10**10, 0.5),
        (499_934_616, 10**10, 0.05),
    ]
    for k, n, alpha in cases:
        sd = math.sqrt(n * alpha * (1 - alpha))
        normal = stats.norm.cdf((k + 0.5 - n * alpha) / sd)
        assert binomial_tail_pvalue(k, n, alpha) == pytest.approx(normal, rel=1e-3)
        bentkus = math.e * normal
        assert hoeffding_bentkus_pvalue(k, n, alpha) <= bentkus * (1 + 1e-4)
    # P(Bin(n, a) <= 0) = (1 - a)^n, by hand
    assert binomial_tail_pvalue(0, 10**10, 1e-9) == pytest.approx(
        math.exp(10**10 * math.log1p(-1e-9)), rel=1e-9
    )


def test_hoeffding_bentkus_pvalue_by_hand():
    k, n, a = 3, 100, 0.1
    r = k / n
    hoeffding = math.exp(
        -n * (r * math.log(r / a) + (1 - r) * math.log((1 - r) / (1 - a)))
    )
    bentkus = math.e * stats.binom.cdf(k, n, a)
    assert hoeffding_bentkus_pvalue(k, n, a) == pytest.approx(
        min(hoeffding, bentkus), rel=1e-12
    )
    # above the target, the Hoeffding term is 1: the p-value is e P(...) or 1
    assert hoeffding_bentkus_pvalue(20, 100, 0.1) == 1.0
    # never below the exact binomial p-value on a binary loss
    kk = np.arange(0, 30)
    assert np.all(
        hoeffding_bentkus_pvalue(kk, 200, 0.1)
        >= binomial_tail_pvalue(kk, 200, 0.1) * (1 - 1e-12)
    )
    assert hoeffding_bentkus_pvalue(0, 0, 0.1) == 1.0


def test_clopper_pearson_upper_bound():
    statsmodels = pytest.importorskip("statsmodels.stats.proportion")
    for k, n in [(0, 45), (3, 100), (40, 1000), (7, 7)]:
        for level in (0.8, 0.9, 0.95):
            ours = risk_upper_bound(k, n, level)
            # the one-sided bound at `level` is the two-sided one at 2 level - 1
            _, upper = statsmodels.proportion_confint(
                k, n, alpha=2 * (1 - level), method="beta"
            )
            assert ours == pytest.approx(upper, rel=1e-9)
            if k < n:  # the bound inverts the p-value
                assert binomial_tail_pvalue(k, n, ours) == pytest.approx(
                    1 - level, rel=1e-7
                )
    # by hand: no error among 45, 1 - 0.1 ** (1 / 45)
    assert risk_upper_bound(0, 45, 0.9) == pytest.approx(1 - 0.1 ** (1 / 45))


def test_hoeffding_bentkus_upper_bound_inverts_its_pvalue():
    for k, n in [(0, 45), (3, 100), (40, 1000)]:
        upper = float(risk_upper_bound(k, n, 0.9, "hoeffding_bentkus"))
        assert hoeffding_bentkus_pvalue(k, n, upper) <= 0.1
        assert hoeffding_bentkus_pvalue(k, n, upper - 1e-9) > 0.1
        assert upper >= risk_upper_bound(k, n, 0.9)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: risk_upper_bound(1, 10, 0.9, bound="Binomial"), "bound must be"),
        (lambda: risk_upper_bound(1, 10, 0.9, bound="bentkus"), "bound must be"),
        (lambda: risk_upper_bound(5, 3, 0.9), r"\[0, n\]"),
        (lambda: risk_upper_bound(-1, 3, 0.9), r"\[0, n\]"),
        (lambda: risk_upper_bound(1, 3, 1.0), "confidence_level"),
        (lambda: binomial_tail_pvalue(4, 3, 0.1), r"\[0, n\]"),
        (lambda: binomial_tail_pvalue(np.nan, 3, 0.1), "finite"),
        (lambda: binomial_tail_pvalue(1, 3, 1.5), "alpha"),
        (lambda: hoeffding_bentkus_pvalue(1, 3, 0.0), "alpha"),
        (lambda: hoeffding_bentkus_pvalue([1, 4], 3, 0.1), r"\[0, n\]"),
        # 2.5 losses among 10.5 samples: the p-value read 2 among 10, the
        # upper bound 2.5 among 10.5; beyond 2**53 the tail was NaN
        (lambda: binomial_tail_pvalue(2.5, 10, 0.1), "k must be whole"),
        (lambda: binomial_tail_pvalue(2, 10.5, 0.1), "n must be whole"),
        (lambda: risk_upper_bound(2.5, 10, 0.9), "k must be whole"),
        (lambda: risk_upper_bound(2, 10.5, 0.9), "n must be whole"),
        (lambda: hoeffding_bentkus_pvalue(2, 10.5, 0.1), "n must be whole"),
        (lambda: binomial_tail_pvalue(5e18, 1e20, 0.05), r"2\*\*53"),
    ],
)
def test_bounds_refuse_arguments_out_of_range(call, message):
    # a misspelt bound silently gave the Hoeffding-Bentkus bound, k > n a
    # bound of 1 and k < 0 or alpha > 1 NaN
    with pytest.raises(ValueError, match=message):
        call()
    # the edges stay valid: nothing observed, every sample a loss, a sum of
    # losses in [0, 1] for Hoeffding-Bentkus
    assert risk_upper_bound(0, 0, 0.9) == 1.0
    assert 0 < hoeffding_bentkus_pvalue(2.5, 100, 0.1) < 1
    assert 0 < risk_upper_bound(2.5, 100, 0.9, "hoeffding_bentkus") < 1
    assert risk_upper_bound(3, 3, 0.9) == 1.0


def test_hoeffding_bentkus_upper_bound_of_all_losses_is_one_without_warning():
    # k = n bisected the bracket [1, 1]: h(1, 1) = 0 / 0 warned (invalid
    # value) in risk_upper_bound and in SelectiveClassifier's fit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        upper = risk_upper_bound([3, 1, 0, 2], [3, 1, 0, 5], 0.9, "hoeffding_bentkus")
        rng = np.random.default_rng(0)
        X = rng.normal(size=(40, 3))
        y = (X.argmax(axis=1) + 1) % 3  # every prediction wrong
        clf = SelectiveClassifier(control="coverage", bound="hoeffding_bentkus")
        clf.fit(X, y)
    np.testing.assert_array_equal(upper[:3], 1.0)
    assert upper[3] == risk_upper_bound(2, 5, 0.9, "hoeffding_bentkus")
    assert clf.empirical_risk_ == 1.0 and clf.risk_upper_bound_ == 1.0


def test_error_control_against_statsmodels_and_by_hand():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.05, size=20) ** rng.uniform(0.5, 3)
        holm = multitest.multipletests(p, alpha=0.1, method="holm")[0]
        np.testing.assert_array_equal(bonferroni_holm(p, 0.1), holm)
        bonf = multitest.multipletests(p, alpha=0.1, method="bonferroni")[0]
        np.testing.assert_array_equal(bonferroni(p, 0.1), bonf)
    # fixed sequence: a prefix, up to the first p-value above delta
    p = np.array([0.01, 0.09, 0.2, 0.01])
    np.testing.assert_array_equal(fixed_sequence(p, 0.1), [True, True, False, False])
    # many rows at once equal one row at a time
    rows = rng.uniform(0, 0.2, size=(30, 12))
    np.testing.assert_array_equal(
        bonferroni_holm(rows, 0.1), [bonferroni_holm(r, 0.1) for r in rows]
    )


def test_error_control_against_mapie():
    fwer = pytest.importorskip("mapie.risk_control.fwer_control")
    rng = np.random.default_rng(1)
    for _ in range(30):
        p = rng.uniform(0, 0.03, size=25)
        for ours, name in [
            (bonferroni, "bonferroni"),
            (bonferroni_holm, "bonferroni_holm"),
            (fixed_sequence, "fixed_sequence"),
        ]:
            expected = fwer.control_fwer(p, 0.1, fwer_method=name)
            np.testing.assert_array_equal(np.flatnonzero(ours(p, 0.1)), expected)


# --- SelectiveClassifier: the procedure on small cases --------------------------------


def test_minimum_accepted_by_hand():
    # (1 - 0.05) ** 45 = 0.0994 <= 0.1 < 0.95 ** 44
    assert minimum_accepted(0.05, 0.9) == 45
    assert minimum_accepted(0.1, 0.9) == 22  # 0.9 ** 22 = 0.098


def test_fixed_sequence_certifies_the_last_threshold_of_the_prefix():
    # 200 samples by decreasing score; errors at ranks 60 and 150 (1-based)
    scores = np.linspace(1, 0, 200)
    errors = np.zeros(200, dtype=bool)
    errors[[59, 149]] = True
    n_accepted, counts, losses, p = certify_risk_sorted(
        scores[None], np.cumsum(errors)[None], risk=0.05, confidence_level=0.9
    )
    counts, losses, p = counts[0], losses[0], p[0]
    assert counts[0] == 45
    np.testing.assert_allclose(p, stats.binom.cdf(losses, counts, 0.05), rtol=1e-12)
    prefix = np.logical_and.accumulate(p <= 0.1)
    assert n_accepted[0] == counts[prefix][-1]
    # the error at 60 stops it: 1 error in m certifies only for m >= 77
    assert counts[prefix][-1] < 60


def test_sgr_is_geifman_el_yaniv_binary_search():
    rng = np.random.default_rng(3)
    scores = np.sort(rng.uniform(size=500))[::-1]
    errors = rng.uniform(size=500) < np.linspace(0.0, 0.3, 500)
    # Algorithm 1 of Geifman & El-Yaniv (2017), written from the paper:
    # z-th smallest score as threshold, bound at delta / ceil(log2 m)
    m = len(scores)
    k = math.ceil(math.log2(m))
    ascending = scores[::-1]
    z_min, z_max, best = 0, m, 0
    for _ in range(k):
        z = math.ceil((z_min + z_max) / 2)
        theta = ascending[z - 1]
        accepted = scores >= theta
        n_acc = int(accepted.sum())
        b = stats.beta.ppf(
            1 - 0.1 / k, errors[accepted].sum() + 1, n_acc - errors[accepted].sum()
        )
        if b < 0.1:
            z_max, best = z, max(best, n_acc)
        else:
            z_min = z
    n_accepted, *_ = certify_risk_sorted(
        scores[None],
        np.cumsum(errors)[None],
        risk=0.1,
        confidence_level=0.9,
        error_control="sgr",
    )
    assert n_accepted[0] == best > 0


def test_coverage_control_is_the_order_statistic_bound():
    X, y = make_logits(n_samples=400, n_classes=4, seed=2)
    clf = SelectiveClassifier(control="coverage", coverage=0.8).fit(X, y)
    scores = softmax(X, axis=1).max(axis=1)
    ranked = np.sort(scores)
    # the largest k with P(Bin(n, 0.2) <= k - 1) <= 0.1: abstain on k - 1
    k = max(j for j in range(1, 401) if stats.binom.cdf(j - 1, 400, 0.2) <= 0.1)
    assert clf.threshold_ == ranked[k - 1]
    assert clf.coverage_ == pytest.approx((400 - (k - 1)) / 400)
    assert clf.certified_


def test_decisions_of_integer_logits_do_not_depend_on_the_class_order():
    # Integer logits: test rows holding a calibration row's logits in another
    # column order got a confidence an ulp off the threshold (the softmax
    # summed in column order), and 2 of 300 were accepted in one class order
    # and abstained on in the other.
    X, y = make_logits(n_samples=1000, n_classes=4, seed=5)
    X = np.round(X / 2)
    X_test = np.round(make_logits(n_samples=300, n_classes=4, seed=6)[0] / 2)
    permutation = np.array([2, 0, 3, 1])
    inverse = np.argsort(permutation)
    params = {"control": "coverage", "coverage": 0.6}
    plain = SelectiveClassifier(**params).fit(X, y)
    permuted = SelectiveClassifier(**params).fit(X[:, permutation], inverse[y])
    assert permuted.threshold_ == plain.threshold_
    decided = permuted.predict(X_test[:, permutation])
    decided = np.where(decided >= 0, permutation[np.maximum(decided, 0)], decided)
    np.testing.assert_array_equal(decided, plain.predict(X_test))


def test_estimator_reports_what_it_certified():
    X, y = make_logits(n_samples=3000, n_classes=4, seed=0, overconfidence=1.0)
    clf = SelectiveClassifier(risk=0.1).fit(X, y)
    proba = softmax(X, axis=1)
    accepted = proba.max(axis=1) >= clf.threshold_
    errors = proba.argmax(axis=1) != y
    np.testing.assert_array_equal(clf.accept(X), accepted)
    assert clf.coverage_ == pytest.approx(accepted.mean())
    assert clf.empirical_risk_ == pytest.approx(errors[accepted].mean())
    assert clf.risk_upper_bound_ == pytest.approx(
        risk_upper_bound(errors[accepted].sum(), accepted.sum(), 0.9)
    )
    assert clf.risk_upper_bound_ <= 0.1
    pred = clf.predict(X)
    np.testing.assert_array_equal(pred[~accepted], -1)
    np.testing.assert_array_equal(pred[accepted], proba.argmax(axis=1)[accepted])
    np.testing.assert_allclose(clf.predict_proba(X), proba, rtol=1e-12)
    assert np.all(clf.p_values_[clf.thresholds_ >= clf.threshold_] <= 0.1)


def test_no_certified_threshold_warns_and_abstains_everywhere():
    X, y = make_logits(n_samples=30, n_classes=4, seed=0)
    with pytest.warns(UserWarning, match="No threshold can be certified"):
        clf = SelectiveClassifier(risk=0.01).fit(X, y)
    assert not clf.certified_ and clf.threshold_ == math.inf
    assert not clf.accept(X).any()
    assert np.all(clf.predict(X) == -1)
    assert math.isnan(clf.risk_upper_bound_) and clf.coverage_ == 0


def test_abstain_label_rules():
    X, y = make_logits(n_samples=600, n_classes=3, seed=1, overconfidence=1.0)
    names = np.array(["ant", "bee", "cat"])
    with pytest.raises(ValueError, match="abstain_label"):
        SelectiveClassifier(risk=0.2).fit(X, names[y])
    clf = SelectiveClassifier(risk=0.2, abstain_label="pass").fit(X, names[y])
    assert set(clf.predict(X)) <= {"ant", "bee", "cat", "pass"}
    with pytest.raises(ValueError, match="is one of the classes"):
        SelectiveClassifier(risk=0.2, abstain_label=1).fit(X, y)


def test_predictions_keep_the_class_labels_beside_another_abstain_label():
    # Integer (or bool) classes with a string abstain_label were predicted as
    # strings ('0'), never equal to the true labels: the scorer reported an
    # error rate of 1 for a classifier without error. String classes with
    # an integer label failed in numpy's type promotion.
    X, y = make_logits(n_samples=600, n_classes=3, seed=1, overconfidence=1.0)
    clf = SelectiveClassifier(risk=0.2, abstain_label="pass").fit(X, y)
    pred = clf.predict(X)
    accepted = clf.accept(X)
    assert accepted.any() and not accepted.all()
    assert set(pred[accepted]) <= {0, 1, 2} and set(pred[~accepted]) == {"pass"}
    errors = pred[accepted] != y[accepted]
    assert neg_accepted_error_rate(clf, X, y) == pytest.approx(-errors.mean())
    assert 0 < errors.mean() < 0.2
    even = y % 2 == 0
    X_bool = np.where(even[:, None], [0.0, 3.0], [3.0, 0.0]) + X[:, :2]
    as_bool = SelectiveClassifier(risk=0.2, abstain_label="pass").fit(X_bool, even)
    assert set(as_bool.predict(X_bool)) == {True, False, "pass"}
    names = np.array(["ant", "bee", "cat"])
    by_name = SelectiveClassifier(risk=0.2, abstain_label=-1).fit(X, names[y])
    assert set(by_name.predict(X)) == {"ant", "bee", "cat", -1}
    # numbers with numbers keep numpy's common type
    assert clf.set_params(abstain_label=-1).fit(X, y).predict(X).dtype.kind == "i"


def test_more_thresholds_than_ranks_is_every_rank():
    # n_thresholds beyond the number of ranks gives every rank; it allocated
    # n_thresholds floats first (10**12 of them: a MemoryError)
    X, y = make_logits(n_samples=300, n_classes=3, seed=3, overconfidence=1.0)
    every = SelectiveClassifier(risk=0.2, n_thresholds=300).fit(X, y)
    many = SelectiveClassifier(risk=0.2, n_thresholds=10**12).fit(X, y)
    assert every.certified_ and many.threshold_ == every.threshold_
    np.testing.assert_array_equal(many.thresholds_, every.thresholds_)


def test_scores_margin_and_callable():
    X, y = make_logits(n_samples=2000, n_classes=4, seed=4, overconfidence=1.0)
    proba = softmax(X, axis=1)
    top2 = np.sort(proba, axis=1)[:, -2:]
    margin = SelectiveClassifier(risk=0.15, confidence_score="margin").fit(X, y)
    np.testing.assert_allclose(margin.decision_score(X), top2[:, 1] - top2[:, 0])
    entropy = SelectiveClassifier(
        risk=0.15, confidence_score=lambda p: (p * np.log(p)).sum(axis=1)
    ).fit(X, y)
    assert entropy.certified_
    with pytest.raises(ValueError, match="one value per sample"):
        SelectiveClassifier(confidence_score=lambda p: p).fit(X, y)


def test_masked_logits_are_never_predicted():
    X, y = make_logits(n_samples=1000, n_classes=4, seed=5, overconfidence=1.0)
    X = X.copy()
    X[::3, 0] = -np.inf
    keep = ~(np.isinf(X[:, 0]) & (y == 0))
    clf = SelectiveClassifier(risk=0.3).fit(X[keep], y[keep])
    pred = clf.predict(X)
    assert not np.any(pred[np.isinf(X[:, 0])] == 0)
    assert np.all(clf.predict_proba(X)[np.isinf(X[:, 0]), 0] == 0)


def test_calibrator_on_its_own_split_or_frozen():
    X, y = make_logits(n_samples=2000, n_classes=4, seed=6)
    clf = SelectiveClassifier(
        TemperatureScaling(device="cpu"), risk=0.15, random_state=0
    ).fit(X, y)
    assert clf.n_certification_samples_ == 1000
    assert clf.calibrator_.temperature_ > 1.5  # the logits are overconfident
    np.testing.assert_allclose(
        clf.predict_proba(X), clf.calibrator_.predict_proba(X), rtol=1e-12
    )
    frozen = FrozenEstimator(TemperatureScaling(device="cpu").fit(X[:1000], y[:1000]))
    fit = SelectiveClassifier(frozen, risk=0.15).fit(X[1000:], y[1000:])
    assert fit.n_certification_samples_ == 1000 and fit.calibrator_ is frozen


def test_pipeline_grid_search_and_scorers():
    X, y = make_logits(n_samples=1500, n_classes=3, seed=7, overconfidence=1.0)
    pipe = make_pipeline(SelectiveClassifier(risk=0.2))
    scores = cross_validate(
        pipe,
        X,
        y,
        cv=3,
        scoring={"risk": neg_accepted_error_rate, "coverage": acceptance_rate_scorer},
    )
    assert np.all(scores["test_coverage"] > 0.3)
    grid = GridSearchCV(
        SelectiveClassifier(),
        {"risk": [0.1, 0.2, 0.3]},
        scoring=acceptance_rate_scorer,
        cv=3,
    )
    with warnings.catch_warnings():
        # risk=0.1 may certify nothing on a fold (a warning of its own test)
        warnings.simplefilter("ignore", UserWarning)
        grid.fit(X, y)
    assert grid.best_params_ == {"risk": 0.3}  # more risk allowed, more accepted
    clf = SelectiveClassifier(risk=0.2).fit(X[:1000], y[:1000])
    pred = clf.predict(X[1000:])
    assert neg_accepted_error_rate(clf, X[1000:], y[1000:]) == pytest.approx(
        -accepted_error_rate(y[1000:], pred)
    )


def test_scorer_metrics_by_hand():
    y = np.array([0, 1, 2, 0, 1])
    pred = np.array([0, 2, -1, -1, 1])
    assert accepted_error_rate(y, pred) == pytest.approx(1 / 3)
    assert acceptance_rate(y, pred) == pytest.approx(3 / 5)
    w = np.array([1, 3, 1, 1, 1.0])
    assert accepted_error_rate(y, pred, sample_weight=w) == pytest.approx(3 / 5)
    assert accepted_error_rate(y, np.full(5, -1)) == 0.0
    assert acceptance_rate(y, pred, abstain_label=2) == pytest.approx(4 / 5)


def test_scorer_metrics_do_not_cast_the_abstain_label():
    # 'abstain' cast to the '<U1' predictions was 'a', 0.5 cast to int was 0:
    # a class counted as the abstention
    y = np.array(["a", "b", "a"])
    pred = np.array(["a", "a", "b"])
    assert acceptance_rate(y, pred, abstain_label="abstain") == 1.0
    assert accepted_error_rate(y, pred, abstain_label="abstain") == pytest.approx(2 / 3)
    assert acceptance_rate([0, 1, 1], [0, 1, 1], abstain_label=0.5) == 1.0
    small = np.array([0, 1, 44], dtype=np.uint8)
    assert acceptance_rate([0, 1, 44], small, abstain_label=300) == 1.0
    assert acceptance_rate([0, 1, 2], [0.0, np.nan, 2.0], abstain_label=np.nan) == (
        pytest.approx(2 / 3)
    )
    objects = np.array(["a", np.nan, "b"], dtype=object)
    assert acceptance_rate(["a", "b", "b"], objects, abstain_label=np.nan) == (
        pytest.approx(2 / 3)
    )


@pytest.mark.parametrize(
    "weights, message",
    [
        ([np.nan, 1, 1, 1, 1], "NaN"),
        ([1, 1, np.nan, 1, 1], "NaN"),  # on an abstention too
        ([np.inf, 1, 1, 1, 1], "infinity"),
        ([0, 0, 0, 0, 0], "zero for every sample"),
        ([1, -1, 1, 1, 1], "negative"),
        ([1, 1, 1], "shape"),
    ],
)
def test_scorer_metrics_refuse_bad_weights(weights, message):
    y = np.array([0, 1, 2, 0, 1])
    pred = np.array([0, 2, -1, -1, 1])
    for metric in (accepted_error_rate, acceptance_rate):
        with pytest.raises(ValueError, match=message):
            metric(y, pred, sample_weight=np.array(weights, dtype=float))


def test_scorer_metrics_weights_are_relative():
    y = np.array([0, 1, 2, 0, 1])
    pred = np.array([0, 2, -1, -1, 1])
    w = np.array([1, 3, 1, 2, 1.0])
    for metric in (accepted_error_rate, acceptance_rate):
        expected = metric(y, pred, sample_weight=w)
        for scale in (1e-300, 7.0, 1e300):
            assert metric(y, pred, sample_weight=scale * w) == pytest.approx(
                expected, rel=1e-14
            )


# --- validity by simulation -----------------------------------------------------------


def _draws(rng, n_pool, n, n_splits=N_SPLITS):
    return rng.integers(0, n_pool, size=(n_splits, n))


def _sorted_rows(scores, errors, rows):
    s = scores[rows]
    order = np.argsort(-s, axis=1, kind="stable")
    ranked = np.take_along_axis(s, order, axis=1)
    cum = np.cumsum(np.take_along_axis(errors[rows], order, axis=1), axis=1)
    return ranked, cum


def _pool_risk(scores, errors, thresholds):
    """Risk and coverage on the pool (the population) of each threshold."""
    order = np.argsort(-scores, kind="stable")
    ranked, cum = scores[order], np.cumsum(errors[order])
    accepted = np.searchsorted(-ranked, -thresholds, side="right")
    risk = np.where(accepted > 0, cum[np.maximum(accepted, 1) - 1], 0) / np.maximum(
        accepted, 1
    )
    return risk, accepted / len(scores)


def _oracle_coverage(scores, errors, risk):
    order = np.argsort(-scores, kind="stable")
    rate = np.cumsum(errors[order]) / np.arange(1, len(scores) + 1)
    ok = np.flatnonzero(rate <= risk)
    return (ok[-1] + 1) / len(scores) if ok.size else 0.0


SETTINGS = [  # (data set, calibration size, risk, confidence level)
    ("c10", 100, 0.05, 0.9),
    ("c10", 1000, 0.02, 0.9),
    ("c10", 5000, 0.05, 0.8),
    ("c100", 100, 0.1, 0.8),
    ("c100", 1000, 0.05, 0.9),
    ("c100", 5000, 0.1, 0.95),
    ("c100", 5000, 0.2, 0.9),
]


@pytest.fixture(scope="module")
def selective_draws(c10, c100):
    """Per setting: pool scores and errors, and 1,000 sorted calibration draws."""
    rng = np.random.default_rng(0)
    pools = {}
    for name, (X, y) in (("c10", c10), ("c100", c100)):
        proba = softmax(X, axis=1)
        pools[name] = (proba.max(axis=1), proba.argmax(axis=1) != y)
    draws = []
    for name, n, risk, level in SETTINGS:
        scores, errors = pools[name]
        ranked, cum = _sorted_rows(scores, errors, _draws(rng, len(scores), n))
        draws.append((name, n, risk, level, scores, errors, ranked, cum))
    return draws


@pytest.mark.parametrize("bound", ["binomial", "hoeffding_bentkus"])
@pytest.mark.parametrize(
    "error_control", ["fixed_sequence", "bonferroni", "bonferroni_holm", "sgr"]
)
def test_selective_risk_is_controlled(selective_draws, error_control, bound):
    for name, n, risk, level, scores, errors, ranked, cum in selective_draws:
        n_accepted, *_ = certify_risk_sorted(
            ranked,
            cum,
            risk=risk,
            confidence_level=level,
            bound=bound,
            error_control=error_control,
        )
        rows = np.arange(N_SPLITS)
        thresholds = np.where(
            n_accepted > 0, ranked[rows, np.maximum(n_accepted, 1) - 1], np.inf
        )
        true_risk, coverage = _pool_risk(scores, errors, thresholds)
        delta = 1 - level
        violations = np.mean(true_risk > risk)
        assert violations <= delta + binomial_noise(delta), (name, n, risk, level)
        # the price of the guarantee: below the oracle's coverage, and with
        # 5,000 samples and the exact bound, close to it
        oracle = _oracle_coverage(scores, errors, risk)
        assert np.mean(coverage) <= oracle + 0.01
        if n == 5000 and bound == "binomial" and error_control != "bonferroni":
            assert np.mean(coverage) >= 0.85 * oracle, (name, risk, oracle)


def test_selective_risk_on_calibration_test_splits(c10, c100):
    # Splits without replacement; the test part (the rest of the pool) is at
    # least nine times the calibration part.
    rng = np.random.default_rng(1)
    for (X, y), n, risk, level in [
        (c10, 100, 0.05, 0.9),
        (c10, 1000, 0.02, 0.8),
        (c100, 1000, 0.1, 0.9),
    ]:
        proba = softmax(X, axis=1)
        scores, errors = proba.max(axis=1), proba.argmax(axis=1) != y
        cal = np.stack([rng.choice(len(y), n, replace=False) for _ in range(N_SPLITS)])
        ranked, cum = _sorted_rows(scores, errors, cal)
        n_accepted, *_ = certify_risk_sorted(
            ranked, cum, risk=risk, confidence_level=level
        )
        rows = np.arange(N_SPLITS)
        safe = np.maximum(n_accepted, 1) - 1
        thresholds = np.where(n_accepted > 0, ranked[rows, safe], np.inf)
        # test = pool minus calibration: subtract the calibration counts
        pool_risk, pool_cov = _pool_risk(scores, errors, thresholds)
        pool_acc = np.rint(pool_cov * len(y))
        test_acc = pool_acc - n_accepted
        test_err = pool_risk * pool_acc - np.where(n_accepted > 0, cum[rows, safe], 0)
        test_risk = test_err / np.maximum(test_acc, 1)
        delta = 1 - level
        assert np.mean(test_risk > risk) <= delta + binomial_noise(delta)


def test_estimator_matches_the_batch_procedure(c100):
    X, y = c100
    rng = np.random.default_rng(2)
    proba = softmax(X, axis=1)
    scores, errors = proba.max(axis=1), proba.argmax(axis=1) != y
    for error_control in ("fixed_sequence", "sgr"):
        rows = _draws(rng, len(y), 800, n_splits=3)
        ranked, cum = _sorted_rows(scores, errors, rows)
        n_accepted, *_ = certify_risk_sorted(
            ranked, cum, risk=0.1, confidence_level=0.9, error_control=error_control
        )
        for i, row in enumerate(rows):
            clf = SelectiveClassifier(
                risk=0.1, error_control=error_control, classes=np.arange(100)
            ).fit(X[row], y[row])
            assert clf.threshold_ == ranked[i, n_accepted[i] - 1]


@pytest.mark.parametrize("n", [100, 1000, 5000])
def test_coverage_is_controlled(c100, n):
    X, y = c100
    proba = softmax(X, axis=1)
    scores = proba.max(axis=1)
    rng = np.random.default_rng(3)
    draws = _draws(rng, len(y), n)
    ranked = np.sort(scores[draws], axis=1)
    abstained = np.stack([np.searchsorted(r, r, side="left") for r in ranked])
    for coverage, level in [(0.8, 0.9), (0.5, 0.8)]:
        p = binomial_tail_pvalue(abstained, n, 1 - coverage)
        passed = np.logical_and.accumulate(p <= 1 - level, axis=1)
        last = passed.shape[1] - 1 - np.argmax(passed[:, ::-1], axis=1)
        thresholds = np.where(
            passed.any(axis=1), ranked[np.arange(N_SPLITS), last], -np.inf
        )
        true_cov = (scores[None, :] >= thresholds[:, None]).mean(axis=1)
        delta = 1 - level
        assert np.mean(true_cov < coverage) <= delta + binomial_noise(delta)
        # the estimator runs the same rule
        clf = SelectiveClassifier(
            control="coverage",
            coverage=coverage,
            confidence_level=level,
            classes=np.arange(100),
        ).fit(X[draws[0]], y[draws[0]])
        assert clf.threshold_ == thresholds[0]


# --- CertifiedThresholdClassifier -----------------------------------------------------


@pytest.fixture(scope="module")
def pneumonia():
    data = load_shared("pneumoniamnist_resnet50")
    X = np.concatenate([data["logits_val"], data["logits_test"]]).astype(np.float64)
    y = np.concatenate([data["y_val"], data["y_test"]])
    return X, y


def _mapie_exact(monkeypatch):
    """MAPIE with its binomial p-value at ceil(n r) read exactly.

    MAPIE 1.6 evaluates ``binom.cdf(ceil(n * r_hat), n, alpha)`` with
    ``r_hat = 1 - correct / n``; in floating point ``n * r_hat`` is often a
    hair above the integer number of errors (188 * (1 - 187/188) =
    1.0000000000000002) and ceil adds one error: a larger p-value than the
    exact tail. Shifting r_hat down by 1e-12 gives MAPIE's intended value.
    """
    controller = pytest.importorskip("mapie.risk_control._base_controller")
    original = controller.compute_hoeffding_bentkus_p_value

    def exact(r_hat, n_obs, alpha, binary=False):
        return original(np.maximum(r_hat - 1e-12, 0.0), n_obs, alpha, binary)

    monkeypatch.setattr(controller, "compute_hoeffding_bentkus_p_value", exact)
    return pytest.importorskip("mapie.risk_control").BinaryClassificationController


MAPIE_CASES = [  # (our metric, our target, MAPIE's risk, MAPIE's target)
    ("precision", 0.9, "precision", 0.9),
    ("recall", 0.9, "recall", 0.9),
    ("fpr", 0.1, "fpr", 0.1),
    ("specificity", 0.9, "fpr", 0.1),
]


@pytest.mark.parametrize(
    "error_control", ["bonferroni", "bonferroni_holm", "fixed_sequence"]
)
def test_same_thresholds_as_mapie(pneumonia, monkeypatch, error_control):
    Controller = _mapie_exact(monkeypatch)
    X, y = pneumonia
    rng = np.random.default_rng(0)
    for _ in range(8):
        rows = rng.choice(len(y), int(rng.integers(100, 600)), replace=False)
        proba = softmax(X[rows], axis=1)
        for metric, target, risk, mapie_target in MAPIE_CASES:
            with warnings.catch_warnings():
                # MAPIE warns on non-monotone risks and on failed calibration
                warnings.simplefilter("ignore", UserWarning)
                mapie = Controller(
                    lambda p: p, risk, mapie_target, 0.9, fwer_method=error_control
                ).calibrate(proba, y[rows])
                ours = CertifiedThresholdClassifier(
                    metric=metric, target=target, error_control=error_control
                ).fit(X[rows], y[rows])
            np.testing.assert_array_equal(
                np.sort(mapie.valid_predict_params), ours.valid_thresholds_
            )
            expected = mapie.best_predict_param
            assert (ours.threshold_ if ours.certified_ else None) == expected


def test_mapie_unpatched_is_never_less_conservative(pneumonia):
    Controller = pytest.importorskip(
        "mapie.risk_control"
    ).BinaryClassificationController
    X, y = pneumonia
    proba = softmax(X, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mapie = Controller(lambda p: p, "recall", 0.9, 0.9).calibrate(proba, y)
    ours = CertifiedThresholdClassifier(metric="recall", target=0.9).fit(X, y)
    assert set(mapie.valid_predict_params) <= set(ours.valid_thresholds_)
    assert np.all(mapie.p_values.ravel() >= ours.p_values_ - 1e-15)


@pytest.mark.parametrize(
    "metric, target", [("recall", 0.95), ("precision", 0.95), ("fpr", 0.02)]
)
@pytest.mark.parametrize(
    "error_control", ["bonferroni", "bonferroni_holm", "fixed_sequence"]
)
def test_binary_metric_is_controlled(c10, metric, target, error_control):
    # cat against the nine other classes; every certified threshold must meet
    # the target on the pool (the family-wise guarantee)
    X, y = c10
    proba = softmax(X, axis=1)[:, 3]
    positive = y == 3
    grid = np.linspace(0, 0.99, 100)
    rng = np.random.default_rng(4)
    for n, level in [(100, 0.9), (1000, 0.8), (5000, 0.9)]:
        draws = _draws(rng, len(y), n)
        p, pos = proba[draws], positive[draws]
        # counts per threshold through the bin of each draw
        bins = np.searchsorted(grid, p, side="right") - 1  # p >= grid[bins]

        def at_least(mask, bins=bins):
            flat = (np.arange(N_SPLITS)[:, None] * 100 + bins)[mask]
            hist = np.bincount(flat, minlength=N_SPLITS * 100).reshape(N_SPLITS, 100)
            return np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]

        tp, fp = at_least(pos), at_least(~pos)
        n_pos = pos.sum(axis=1, keepdims=True)
        n_neg = n - n_pos
        if metric == "recall":
            losses, counts = n_pos - tp, np.broadcast_to(n_pos, tp.shape)
        elif metric == "precision":
            losses, counts = fp, tp + fp
        else:
            losses, counts = fp, np.broadcast_to(n_neg, fp.shape)
        rejected, *_ = certify_thresholds(
            losses,
            counts,
            grid,
            metric=metric,
            target=target,
            confidence_level=level,
            error_control=error_control,
            bound="binomial",
        )
        predicted = proba[None, :] >= grid[:, None]
        if metric == "recall":
            value = predicted[:, positive].mean(axis=1)
            bad = value < target
        elif metric == "precision":
            value = (predicted & positive).sum(1) / np.maximum(predicted.sum(1), 1)
            bad = value < target
        else:
            bad = predicted[:, ~positive].mean(axis=1) > target
        violations = np.mean((rejected & bad[None, :]).any(axis=1))
        delta = 1 - level
        assert violations <= delta + binomial_noise(delta), (n, level)
    # the estimator runs the same rule on one draw
    clf = CertifiedThresholdClassifier(
        metric=metric,
        target=target,
        confidence_level=level,
        error_control=error_control,
        classes=[False, True],
    )
    logits = np.c_[np.log1p(-np.minimum(proba, 1 - 1e-16)), np.log(proba)][draws[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # may certify none
        clf.fit(logits, positive[draws[0]])
    np.testing.assert_array_equal(clf.valid_thresholds_, grid[rejected[0]])


@pytest.mark.parametrize("bound", ["binomial", "hoeffding_bentkus"])
def test_a_target_below_float_resolution_is_met_by_any_loss_count_short_of_n(bound):
    # 1 - 1e-300 rounds to 1: fit raised "alpha (the target risk) must lie in
    # (0, 1)", a parameter the user never set. The answers are the limits as
    # the target tends to 0, the same as at 1e-15.
    rng = np.random.default_rng(0)
    s = 3 * rng.normal(size=300)
    y = (rng.random(300) < 1 / (1 + np.exp(-s))).astype(int)
    X = np.c_[np.zeros(300), s]
    for target in (1e-300, 1e-15):
        clf = CertifiedThresholdClassifier(
            metric="precision", target=target, bound=bound
        ).fit(X, y)
        # the lowest threshold of the grid: some true positive, best recall
        assert clf.certified_ and clf.threshold_ == 0.0
        sel = SelectiveClassifier(control="coverage", coverage=target, bound=bound).fit(
            X, y
        )
        # accept the most confident sample only
        assert sel.threshold_ == sel.decision_score(X).max()
        assert sel.coverage_ == 1 / 300


def test_threshold_losses_count_the_predictions_of_every_threshold():
    # the definition, one (n_thresholds, n_samples) matrix of predictions
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(0, 40))
        p = np.round(rng.random(n), 1)  # ties
        y = rng.random(n) < 0.5
        grid = np.r_[np.round(rng.random(10), 1), p[:3], -np.inf, np.inf, 0.0, 1.0]
        predicted = p[None, :] >= grid[:, None]
        expected = {
            "precision": ((predicted & ~y).sum(1), predicted.sum(1)),
            "recall": ((~predicted & y).sum(1), np.full(len(grid), y.sum())),
            "fpr": ((predicted & ~y).sum(1), np.full(len(grid), (~y).sum())),
        }
        for metric, (losses, counts) in expected.items():
            ours = threshold_losses(rank_positive(p, y), grid, metric)
            np.testing.assert_array_equal(ours[0], losses)
            np.testing.assert_array_equal(ours[1], counts)


def test_binary_fit_does_not_hold_a_prediction_per_threshold_and_sample():
    # the matrix of predictions at every threshold took 2 GB for ten million
    # samples on the default grid; 1,000 thresholds and 100,000 samples held
    # 200 MB
    import tracemalloc

    rng = np.random.default_rng(0)
    s = 3 * rng.normal(size=100_000)
    y = (rng.random(100_000) < 1 / (1 + np.exp(-s))).astype(int)
    clf = CertifiedThresholdClassifier(thresholds=np.linspace(0, 0.999, 1000))
    tracemalloc.start()
    try:
        clf.fit(s[:, None], y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert clf.certified_
    assert peak < 40e6


def test_calibrator_fraction_that_leaves_a_part_empty_is_named():
    # train_test_split refused it naming its own train_size
    X, y = make_logits(n_samples=50, n_classes=2, seed=0)
    for estimator in (SelectiveClassifier, CertifiedThresholdClassifier):
        clf = estimator(TemperatureScaling(device="cpu"), calibrator_fraction=0.01)
        with pytest.raises(ValueError, match="calibrator_fraction=0.01 of 50"):
            clf.fit(X, y)


def test_binary_failure_and_fallbacks():
    X, y = make_logits(n_samples=40, n_classes=2, seed=0)
    with pytest.warns(UserWarning, match="No threshold certifies recall"):
        clf = CertifiedThresholdClassifier(metric="recall", target=0.99).fit(X, y)
    assert clf.threshold_ == -math.inf and np.all(clf.predict(X) == 1)
    with pytest.warns(UserWarning, match="No threshold certifies precision"):
        clf = CertifiedThresholdClassifier(metric="precision", target=0.99).fit(X, y)
    assert clf.threshold_ == math.inf and np.all(clf.predict(X) == 0)
    X3, y3 = make_logits(n_samples=100, n_classes=3, seed=0)
    with pytest.raises(ValueError, match="Only binary classification"):
        CertifiedThresholdClassifier().fit(X3, y3)
    # numpy's "could not convert string to float" named no parameter
    for grid in (["a", "b"], [0.5, np.nan], [[0.5]], [], [0.5, None]):
        with pytest.raises(ValueError, match="thresholds must be a non-empty 1-D"):
            CertifiedThresholdClassifier(thresholds=grid).fit(X, y)


def test_binary_reports_bounds():
    X, y = make_logits(n_samples=3000, n_classes=2, seed=1, overconfidence=1.0)
    clf = CertifiedThresholdClassifier(metric="precision", target=0.8).fit(X, y)
    p = softmax(X, axis=1)[:, 1]
    predicted = p >= clf.threshold_
    precision = y[predicted].mean()
    assert clf.metric_value_ == pytest.approx(precision)
    assert clf.metric_bound_ == pytest.approx(
        1 - risk_upper_bound((~y.astype(bool) & predicted).sum(), predicted.sum(), 0.9)
    )
    assert clf.metric_bound_ >= 0.8
    np.testing.assert_array_equal(clf.predict(X), predicted.astype(int))


# --- conformal risk control -----------------------------------------------------------


def test_crc_hand_worked_example():
    # 4 samples, 3 classes, LAC scores 1 - p; cost of missing class 0 is 4,
    # of missing 1 or 2 is 1 (B = 4), target risk 1.5.
    proba = np.array(
        [[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.5, 0.1, 0.4]]
    )
    y = np.array([0, 2, 0, 1])
    clf = ConformalRiskClassifier(risk=1.5, miss_cost=[4.0, 1.0, 1.0]).fit(
        np.log(proba), y
    )
    # true-label scores 0.3, 0.7, 0.7, 0.9 with losses 4, 1, 4, 1 when missed.
    # lambda_hat = inf{l : 4/5 R(l) + 4/5 <= 1.5}, i.e. R(l) <= 0.875, i.e. a
    # total loss <= 3.5 over the 4 samples: missing only sample 3 (loss 1)
    # needs l >= 0.7; at l = 0.7, the total is 1 -> lambda_hat = 0.7.
    assert clf.threshold_ == pytest.approx(0.7)
    assert clf.calibration_risk_ == pytest.approx(0.25)
    sets = clf.predict_set(np.log(proba))
    np.testing.assert_array_equal(sets, 1 - proba <= 0.7 + 1e-12)
    # the paper's formula, by brute force over a fine grid of lambda
    grid = np.linspace(0, 1, 100001)
    missed = (1 - proba[np.arange(4), y])[None, :] > grid[:, None]
    total = (missed * np.array([4.0, 1.0, 4.0, 1.0])).sum(axis=1)
    ok = 4 / 5 * total / 4 + 4 / 5 <= 1.5
    assert grid[ok][0] == pytest.approx(0.7, abs=1e-5)


def test_crc_cost_matrix_by_brute_force():
    rng = np.random.default_rng(5)
    X, y = make_logits(n_samples=60, n_classes=4, seed=9, overconfidence=1.0)
    cost = rng.uniform(0.5, 3, size=(4, 4))
    np.fill_diagonal(cost, 0)
    clf = ConformalRiskClassifier(risk=0.6, cost_matrix=cost).fit(X, y)
    scores = 1 - softmax(X, axis=1)
    candidates = np.unique(scores)

    def total_loss(lam):
        sets = scores <= lam
        loss = np.where(sets, cost[y], np.inf).min(axis=1)
        return np.where(np.isinf(loss), cost[y].max(axis=1), loss).sum()

    n, bound = 60, cost.max()
    ok = [
        lam
        for lam in candidates
        if n / (n + 1) * total_loss(lam) / n + bound / (n + 1) <= 0.6
    ]
    assert clf.threshold_ == pytest.approx(min(ok))


@pytest.mark.parametrize("unit", [1e-14, 1e-200, 1e200])
def test_crc_costs_in_any_unit_give_the_same_sets(unit):
    # The loss and the target in other units (a cost matrix in 1e-14 of the
    # currency) are the same problem. An absolute rounding slack of 1e-12 let
    # costs of order 1e-14 certify a threshold of 0.29 where 0.54 is needed:
    # a calibration loss 1.8 times the target.
    rng = np.random.default_rng(0)
    X, y = make_logits(n_samples=400, n_classes=4, seed=3)
    cost = rng.uniform(0.2, 1.0, size=(4, 4))
    np.fill_diagonal(cost, 0)
    weight = rng.uniform(0.5, 2.0, size=4)
    for params in ({"cost_matrix": cost}, {"miss_cost": weight}):
        reference = ConformalRiskClassifier(risk=0.3, **params).fit(X, y)
        scaled = {key: value * unit for key, value in params.items()}
        clf = ConformalRiskClassifier(risk=0.3 * unit, **scaled).fit(X, y)
        assert clf.threshold_ == reference.threshold_
        assert clf.calibration_risk_ / unit == pytest.approx(
            reference.calibration_risk_, rel=1e-12
        )
        assert reference.calibration_risk_ <= 0.3


def test_crc_miscoverage_is_the_conformal_quantile(c10):
    X, y = c10
    for n, alpha in [(50, 0.1), (500, 0.05), (2000, 0.2)]:
        crc = ConformalRiskClassifier(risk=alpha).fit(X[:n], y[:n])
        conformal = ConformalClassifier(confidence_level=1 - alpha).fit(X[:n], y[:n])
        assert crc.threshold_ == conformal.quantile_


def test_crc_too_few_samples_warns():
    X, y = make_logits(n_samples=20, n_classes=3, seed=0)
    with pytest.warns(UserWarning, match="Too few calibration samples"):
        clf = ConformalRiskClassifier(risk=0.1, miss_cost=[5, 1, 1]).fit(X, y)
    assert clf.threshold_ == math.inf and clf.predict_set(X).all()
    with pytest.raises(ValueError, match="not both"):
        ConformalRiskClassifier(miss_cost=[1, 1, 1], cost_matrix=np.ones((3, 3))).fit(
            X, y
        )
    with pytest.raises(ValueError, match="diagonal"):
        ConformalRiskClassifier(cost_matrix=np.ones((3, 3))).fit(X, y)


@pytest.mark.parametrize("n", [100, 1000, 5000])
def test_crc_expected_loss_is_controlled(c10, n):
    X, y = c10
    proba = softmax(X, axis=1)
    weight = np.ones(10)
    weight[[3, 5]] = 4.0  # cats and dogs cost four times as much
    cost = np.repeat(weight[:, None], 10, axis=1)
    np.fill_diagonal(cost, 0)
    scores = 1 - proba
    true_scores = scores[np.arange(len(y)), y]
    # pool loss of a threshold: weight of the true class when it is missed
    order = np.argsort(true_scores)
    sorted_scores = true_scores[order]
    tail = np.cumsum(weight[y][order][::-1])[::-1]

    def pool_loss(lam):
        first = np.searchsorted(sorted_scores, lam, side="right")
        return tail[first] / len(y) if first < len(y) else 0.0

    rng = np.random.default_rng(6)
    n_splits = 300 if n == 5000 else N_SPLITS
    for alpha in {100: (0.3,), 1000: (0.1,), 5000: (0.1,)}[n]:
        losses = []
        for rows in _draws(rng, len(y), n, n_splits):
            lam, _ = crc_threshold(scores[rows], y[rows], cost, alpha)
            losses.append(pool_loss(lam))
        losses = np.array(losses)
        # E[loss] <= alpha, up to the noise of the mean over splits
        assert losses.mean() <= alpha + 3 * losses.std() / math.sqrt(n_splits)
        # and tight: at least alpha - B / (n + 1) (Theorem 2), minus noise
        assert (
            losses.mean()
            >= alpha - 4 / (n + 1) - 3 * losses.std() / math.sqrt(n_splits) - 0.01
        )
