"""VennAbersCalibration against brute-force isotonic regression and venn-abers.

References: scikit-learn's IsotonicRegression refitted on the calibration set
augmented by each test point (the definition), and Manokhin's venn-abers
package (binary ``VennAbers`` and the multiclass one-vs-one
``predict_proba_prefitted_va``).
"""

import numpy as np
import pytest
from scipy.special import expit, softmax
from sklearn.isotonic import IsotonicRegression

from sklearn_calib import VennAbersCalibration
from sklearn_calib._binning.venn_abers import (
    _positions,
    one_vs_rest_logits,
    venn_abers_table,
)
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared

# The reference package divides 0 by 0 on purpose (and silences numpy's
# warnings globally on import, which the fixture below undoes).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:venn_abers")


@pytest.fixture(scope="module")
def venn_abers():
    # The package sets numpy's global error state on import; restore it.
    state = np.geterr()
    module = pytest.importorskip("venn_abers")
    np.seterr(**state)
    return module


def _brute_force(scores, labels, weights, test, label):
    augmented_x = np.append(scores, test)
    augmented_y = np.append(labels, label)
    augmented_w = np.append(weights, 1.0)
    iso = IsotonicRegression(out_of_bounds="clip")
    iso.fit(augmented_x, augmented_y, sample_weight=augmented_w)
    return iso.predict([test])[0]


@pytest.mark.parametrize("labels", ["mixed", "all_zero", "all_one"])
@pytest.mark.parametrize("seed", [0, 1])
def test_table_equals_isotonic_regression_with_the_test_point(seed, labels):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(scale=2.0, size=150), 1)  # many ties
    labels = {
        "mixed": (rng.random(150) < expit(scores)).astype(float),
        "all_zero": np.zeros(150),  # the closed form of a single label
        "all_one": np.ones(150),
    }[labels]
    weights = rng.integers(1, 4, size=150).astype(float)
    thresholds, p0, p1 = venn_abers_table(scores, labels, weights)
    # Gaps, ties with calibration scores, and both ends.
    test = np.concatenate(
        [rng.choice(scores, 20), rng.normal(scale=2.0, size=20), [-50.0, 50.0]]
    )
    position = _positions(thresholds, test)
    for t, pos in zip(test, position, strict=True):
        assert p0[pos] == pytest.approx(_brute_force(scores, labels, weights, t, 0))
        assert p1[pos] == pytest.approx(_brute_force(scores, labels, weights, t, 1))


def test_binary_matches_venn_abers_package(venn_abers):
    rng = np.random.default_rng(0)
    score = rng.normal(scale=2.0, size=600)
    y = (rng.random(600) < expit(1.5 * score - 0.5)).astype(int)
    test = np.concatenate([rng.normal(scale=2.0, size=300), score[:50]])
    va = VennAbersCalibration().fit(score[:, None], y)
    p0, p1 = va.predict_interval(test[:, None])

    def as_proba(s):
        return np.column_stack([1 - expit(s), expit(s)])

    reference = venn_abers.VennAbers().fit(as_proba(score), y)
    p_prime, p0_p1 = reference.predict_proba(as_proba(test))
    np.testing.assert_allclose(p0[:, 0], p0_p1[:, 0], atol=1e-12)
    np.testing.assert_allclose(p1[:, 0], p0_p1[:, 1], atol=1e-12)
    np.testing.assert_allclose(va.predict_proba(test[:, None]), p_prime, atol=1e-12)


def test_binary_matches_venn_abers_package_on_imdb(venn_abers):
    data = load_shared("imdb_fasttext_labelerrors")
    va = VennAbersCalibration().fit(data["logits_val"], data["y_val"])
    reference = venn_abers.VennAbers().fit(
        softmax(data["logits_val"].astype(np.float64), axis=1), data["y_val"]
    )
    test = data["logits_test"].astype(np.float64)
    p_prime, p0_p1 = reference.predict_proba(softmax(test, axis=1))
    p0, p1 = va.predict_interval(test)
    # float64 probabilities tie a few extreme scores that logits keep apart.
    close = np.isclose(p0[:, 0], p0_p1[:, 0], atol=1e-12) & np.isclose(
        p1[:, 0], p0_p1[:, 1], atol=1e-12
    )
    assert close.mean() > 0.999
    np.testing.assert_allclose(
        va.predict_proba(test)[close], p_prime[close], atol=1e-12
    )


@pytest.mark.parametrize(
    "name, shrink",
    [("digits_mlp_trained_here", 1.0), ("beans_mlp_trained_here", 30.0)],
)
def test_multiclass_one_vs_one_matches_venn_abers_package(venn_abers, name, shrink):
    data = load_shared(name)
    logits, y = data["logits_val"].astype(np.float64), data["y_val"]
    test = data["logits_test"].astype(np.float64)
    va = VennAbersCalibration(multiclass="ovo").fit(logits, y)
    # The method sees each pair's scores only through their order, which
    # dividing all logits by a constant keeps. The beans network's logit
    # gaps reach 560: its float64 pairwise probabilities would tie hundreds
    # of distinct scores at 0 and 1, so the package gets logits / 30.
    expected, pairwise = venn_abers.venn_abers.predict_proba_prefitted_va(
        softmax(logits / shrink, axis=1),
        y,
        softmax(test / shrink, axis=1),
        va_tpe="one_vs_one",
    )
    np.testing.assert_allclose(va.predict_proba(test), expected, atol=1e-10)
    p0, p1 = va.predict_interval(test)
    assert len(pairwise) == va.problems_.shape[0]
    for m in range(va.problems_.shape[0]):
        np.testing.assert_allclose(p0[:, m], pairwise[m][:, 0], atol=1e-12)
        np.testing.assert_allclose(p1[:, m], pairwise[m][:, 1], atol=1e-12)


def test_multiclass_one_vs_rest_matches_venn_abers_package(venn_abers):
    data = load_shared("digits_mlp_trained_here")
    logits, y = data["logits_val"].astype(np.float64), data["y_val"]
    test = data["logits_test"].astype(np.float64)
    va = VennAbersCalibration().fit(logits, y)
    expected, per_class = venn_abers.venn_abers.predict_proba_prefitted_va(
        softmax(logits, axis=1), y, softmax(test, axis=1), va_tpe="one_vs_all"
    )
    p0, p1 = va.predict_interval(test)
    np.testing.assert_array_equal(va.problems_, [[-1, k] for k in range(10)])
    # The package ranks softmax(z)_k, which float64 rounds to 1 for the most
    # confident rows; the log-odds used here keep those apart.
    close = np.ones(test.shape[0], dtype=bool)
    for k in range(10):
        close &= np.isclose(p0[:, k], per_class[k][:, 0], atol=1e-12)
        close &= np.isclose(p1[:, k], per_class[k][:, 1], atol=1e-12)
    assert close.mean() > 0.95
    np.testing.assert_allclose(
        va.predict_proba(test)[close], expected[close], atol=1e-12
    )


def test_one_vs_rest_logits_are_the_log_odds():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(50, 4))
    p = softmax(logits, axis=1)
    np.testing.assert_allclose(
        one_vs_rest_logits(logits), np.log(p) - np.log1p(-p), rtol=1e-9, atol=1e-9
    )
    # Where p rounds to 1 in float64, the log-odds stay finite and ordered.
    extreme = np.array([[60.0, 0.0, 0.0], [70.0, 0.0, 0.0]])
    out = one_vs_rest_logits(extreme)
    np.testing.assert_allclose(out[:, 0], [60.0 - np.log(2), 70.0 - np.log(2)])


def test_intervals_are_ordered_and_merge_as_published():
    logits, y = make_logits(n_samples=800, n_classes=4, seed=2)
    va = VennAbersCalibration(multiclass="ovo").fit(logits[:500], y[:500])
    p0, p1 = va.predict_interval(logits[500:])
    assert p0.shape == p1.shape == (300, 6)
    assert np.all(p0 <= p1)
    assert np.all((0 < p1) & (p1 <= 1)) and np.all((0 <= p0) & (p0 < 1))
    np.testing.assert_array_equal(
        va.problems_, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    )
    # Price et al.'s coupling of the merged pairwise probabilities.
    merged = p1 / (1 - p0 + p1)
    inverse = np.zeros((300, 4))
    for m, (i, j) in enumerate(va.problems_):
        inverse[:, j] += 1 / merged[:, m]
        inverse[:, i] += 1 / (1 - merged[:, m])
    coupled = 1 / (inverse - 2)
    coupled /= coupled.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(va.predict_proba(logits[500:]), coupled, rtol=1e-12)


def test_interval_narrows_with_more_calibration_data():
    rng = np.random.default_rng(0)
    score = rng.normal(scale=2.0, size=20_000)
    y = (rng.random(score.shape[0]) < expit(score)).astype(int)
    test = np.linspace(-3, 3, 50)[:, None]
    widths = []
    for n in (200, 20_000):
        p0, p1 = (
            VennAbersCalibration().fit(score[:n, None], y[:n]).predict_interval(test)
        )
        widths.append(np.mean(p1 - p0))
    assert widths[1] < 0.2 * widths[0]


def test_calibrated_on_held_out_data():
    # Labels from a known, miscalibrated model: Venn-Abers recovers it.
    rng = np.random.default_rng(1)
    score = rng.normal(scale=3.0, size=30_000)
    y = (rng.random(score.shape[0]) < expit(0.4 * score + 0.5)).astype(int)
    va = VennAbersCalibration().fit(score[:20_000, None], y[:20_000])
    proba = va.predict_proba(score[20_000:, None])[:, 1]
    np.testing.assert_allclose(proba, expit(0.4 * score[20_000:] + 0.5), atol=0.06)


def test_masked_classes_one_vs_rest():
    logits, y = make_logits(n_samples=600, n_classes=3, seed=3)
    va = VennAbersCalibration().fit(logits, y)
    rows = np.array([[1.0, -np.inf, 0.0], [-np.inf, -np.inf, 2.0]])
    out = va._calibrated_logits(rows)
    assert out[0, 1] == -np.inf and np.all(np.isfinite(out[0, [0, 2]]))
    np.testing.assert_array_equal(np.exp(out[1]), [0.0, 0.0, 1.0])
    p0, p1 = va._bounds(rows)
    assert p0[1, 0] == p1[1, 0] == 0.0  # class 1 masked in row 0
    assert p0[2, 1] == p1[2, 1] == 1.0  # class 2 alone in row 1


def test_masked_pairs_are_certain():
    logits, y = make_logits(n_samples=600, n_classes=3, seed=3)
    va = VennAbersCalibration(multiclass="ovo").fit(logits, y)
    rows = np.array([[1.0, -np.inf, 0.0], [-np.inf, -np.inf, 2.0]])
    out = va._calibrated_logits(rows)
    assert out[0, 1] == -np.inf and np.all(np.isfinite(out[0, [0, 2]]))
    np.testing.assert_array_equal(np.exp(out[1]), [0.0, 0.0, 1.0])
    # The two unmasked classes of the first row share the mass as their pair says.
    p0, p1 = va._bounds(rows)
    merged = p1[1, 0] / (1 - p0[1, 0] + p1[1, 0])  # pair (0, 2), first row
    np.testing.assert_allclose(np.exp(out[0, 2]), merged, rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-306, 1e-308, 5e-324])
def test_tiny_weights_leave_the_test_point_dominant(scale):
    # The test point weighs 1 against the weights as given: against weights
    # of 1e-306 and below (where 1 / their scale overflows) p0 -> 0 and
    # p1 -> 1, so p = p1 / (1 - p0 + p1) = 1/2, with a finite fitted state.
    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 2)) * 3
    y = (rng.random(300) < expit(X[:, 1] - X[:, 0])).astype(int)
    model = VennAbersCalibration().fit(X, y, sample_weight=np.full(300, scale))
    assert np.isfinite(model.p0_).all() and np.isfinite(model.p1_).all()
    np.testing.assert_allclose(model.predict_proba(X[:20]), 0.5, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.uint64, np.int32, np.uint32])
def test_loaded_offsets_of_another_integer_dtype_predict_the_same(dtype):
    # The state check accepts any integer offsets_ (a file written elsewhere);
    # uint64 offsets plus the intp positions are float64 in numpy, which
    # failed as a cast error deep in the prediction.
    import pickle

    logits, y = make_logits(n_samples=300, n_classes=3, seed=4)
    va = VennAbersCalibration().fit(logits, y)
    edited = pickle.loads(pickle.dumps(va))
    edited.offsets_ = va.offsets_.astype(dtype)
    restored = pickle.loads(pickle.dumps(edited))
    np.testing.assert_array_equal(
        restored.predict_proba(logits), va.predict_proba(logits)
    )


@pytest.mark.parametrize("multiclass, k", [("ovr", 2), ("ovr", 5), ("ovo", 5)])
def test_one_far_score_ties_no_other_scores(multiclass, k):
    # Ties were scores within 1e-12 of the largest |score|: one row at 1e20
    # made that 1e8, every other score one group, and the probabilities
    # constant (0.5 to 0.8 off). That row ranks first at 1e3 as at 1e20, so
    # the isotonic fits, and the predictions, must be the same.
    X, y = make_logits(n_samples=400, n_classes=k, seed=3)
    fits = []
    for value in (1e3, 1e20):
        row = np.zeros((1, k))
        row[0, 0] = value
        va = VennAbersCalibration(multiclass=multiclass)
        fits.append(va.fit(np.r_[X, row], np.r_[y, 0]).predict_proba(X))
    np.testing.assert_array_equal(fits[1], fits[0])
    # scores differing in their last bits still tie
    table = venn_abers_table(
        np.array([1.0, 1.0 + 4e-16, 3.0]), np.array([0, 1, 1]), np.ones(3)
    )[0]
    assert table.shape == (2, 2)
