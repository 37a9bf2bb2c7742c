"""TemperatureScaling against independent references: scipy, sklearn, published T."""

import pickle
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning

from sklearn_calib import TemperatureScaling
from sklearn_calib.utils._testing import make_logits

from .conftest import load_shared, torch_jit_script

# Fitted T on the val part of every public set (../shared/data/PROVENANCE.md).
PUBLISHED_T = {
    "c10_resnet50_cross_entropy_smart": 2.4975,
    "c10_resnet50_focal_loss_smart": 1.0626,
    "c10_densenet40_guo": 2.8826,
    "c10_wrn16-4_netcal": 2.0674,
    "c10_lenet5_netcal": 1.4079,
    "c100_wrn16-4_netcal": 1.1233,
    "c100_densenetbc100_netcal": 2.1178,
    "c10_resnet56_chenyaofo": 1.7576,
    "c100_resnet56_chenyaofo": 1.7335,
    "c100_resnet20_chenyaofo": 1.4399,
    "mnist_cnn_labelerrors": 1.1778,
    "imdb_fasttext_labelerrors": 1.7405,
    "beans_mlp_trained_here": 1.9714,
    "beans_hgb_trained_here": 3.3412,
    "digits_mlp_trained_here": 1.2089,
}


def float64_optimal_temperature(logits, y, weights=None):
    """Independent solve: brentq on the float64 NLL derivative in beta."""
    logits = np.asarray(logits, dtype=np.float64)
    weights = np.ones(len(y)) if weights is None else np.asarray(weights, float)
    true = logits[np.arange(len(y)), y]

    def derivative(beta):
        q = np.exp(scipy_log_softmax(beta * logits, axis=1))
        return np.average((q * logits).sum(axis=1) - true, weights=weights)

    return 1.0 / brentq(derivative, 1e-3, 1e3, xtol=1e-15, rtol=1e-15)


def nll(logits, y, temperature):
    z = np.asarray(logits, dtype=np.float64) / temperature
    return np.mean(logsumexp(z, axis=1) - z[np.arange(len(y)), y])


@pytest.mark.parametrize("n_classes", [2, 5, 40])
def test_matches_float64_solve(n_classes):
    X, y = make_logits(n_samples=3000, n_classes=n_classes, seed=n_classes)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    expected = float64_optimal_temperature(X, y)
    assert ts.temperature_ == pytest.approx(expected, rel=1e-10)
    # The NLL at T is no worse than a neighbourhood of T: a minimum.
    for factor in (0.999, 1.001):
        assert nll(X, y, ts.temperature_) < nll(X, y, factor * ts.temperature_)


def test_float32_matches_float64_solve():
    X, y = make_logits(n_samples=20000, n_classes=10, seed=7, dtype=np.float32)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ == pytest.approx(float64_optimal_temperature(X, y), rel=1e-7)


def test_weighted_matches_float64_solve():
    X, y = make_logits(n_samples=2000, n_classes=6, seed=2)
    weights = np.random.default_rng(3).uniform(0.1, 3.0, size=len(y))
    ts = TemperatureScaling(device="cpu").fit(X, y, sample_weight=weights)
    assert ts.temperature_ == pytest.approx(
        float64_optimal_temperature(X, y, weights), rel=1e-10
    )


def test_optimality_condition():
    # At the optimum the mean true-class logit equals the mean expected logit.
    X, y = make_logits(n_samples=1500, n_classes=8, seed=5)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    q = ts.predict_proba(X)
    np.testing.assert_allclose(
        (q * X).sum(axis=1).mean(), X[np.arange(len(y)), y].mean(), rtol=1e-9
    )


def test_recovers_known_overconfidence():
    X, y = make_logits(n_samples=40000, n_classes=5, overconfidence=2.5, seed=11)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ == pytest.approx(2.5, rel=0.03)
    assert ts.n_iter_ <= 8


class _LogitPassthrough(ClassifierMixin, BaseEstimator):
    """A 'classifier' whose decision_function is its input, to feed sklearn logits."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def decision_function(self, X):
        return X

    def predict(self, X):
        return self.classes_[np.argmax(X, axis=1)]


@pytest.mark.parametrize("n_classes", [3, 10])
def test_matches_scikit_learn_temperature_method(n_classes):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    X, y = make_logits(n_samples=2000, n_classes=n_classes, seed=21)
    frozen = FrozenEstimator(_LogitPassthrough().fit(X, y))
    reference = CalibratedClassifierCV(frozen, method="temperature").fit(X, y)
    beta = float(reference.calibrated_classifiers_[0].calibrators[0].beta_)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    # scikit-learn's bounded scalar search stops at xatol ~ 1e-14 in log(beta).
    assert ts.temperature_ == pytest.approx(1.0 / beta, rel=1e-6)
    np.testing.assert_allclose(
        ts.predict_proba(X), reference.predict_proba(X), atol=1e-6
    )


def test_binary_score_column_is_logits_zero_s():
    X, y = make_logits(n_samples=1000, n_classes=2, seed=8)
    score = X[:, 1] - X[:, 0]
    one_column = TemperatureScaling(device="cpu").fit(score[:, None], y)
    two_columns = TemperatureScaling(device="cpu").fit(X, y)
    assert one_column.temperature_ == pytest.approx(two_columns.temperature_, rel=1e-10)
    np.testing.assert_allclose(
        one_column.predict_proba(score[:, None]),
        two_columns.predict_proba(X),
        atol=1e-12,
    )


@pytest.mark.parametrize("name", sorted(PUBLISHED_T))
def test_reproduces_published_temperature(name):
    data = load_shared(name)
    ts = TemperatureScaling(device="cpu").fit(data["logits_val"], data["y_val"])
    # The table rounds T to 4 decimals: 1e-4 relative plus half a unit of rounding.
    assert ts.temperature_ == pytest.approx(PUBLISHED_T[name], rel=1e-4, abs=5e-5)
    proba = ts.predict_proba(data["logits_test"])
    np.testing.assert_array_equal(proba.argmax(1), data["logits_test"].argmax(1))


def test_all_correct_warns_and_clamps():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=200)
    X = 5.0 * np.eye(3)[y] + rng.normal(scale=0.1, size=(200, 3))
    with pytest.warns(
        UserWarning, match="every calibration sample is classified correctly"
    ):
        ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ > 0
    assert np.all(np.isfinite(ts.predict_proba(X)))


def test_no_ranking_information_warns():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, size=300)
    X = rng.normal(size=(300, 3))
    X[np.arange(300), y] = X.min(axis=1) - 1.0  # the true class always scores lowest
    with pytest.warns(UserWarning, match="no ranking information"):
        ts = TemperatureScaling(device="cpu").fit(X, y)
    proba = ts.predict_proba(X)
    np.testing.assert_allclose(proba, 1 / 3, atol=1e-3)


def test_constant_logits_warn():
    y = np.array([0, 1, 2, 0, 1, 2])
    with pytest.warns(UserWarning, match="constant across classes"):
        ts = TemperatureScaling(device="cpu").fit(np.ones((6, 3)), y)
    assert ts.temperature_ == 1.0


def test_max_iter_reached_warns():
    X, y = make_logits(n_samples=500, n_classes=4, seed=9)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        TemperatureScaling(device="cpu", max_iter=1).fit(X, y)


def test_large_offset_logits_are_stable():
    X, y = make_logits(n_samples=1000, n_classes=5, seed=4)
    ts = TemperatureScaling(device="cpu").fit(X + 1e4, y)
    assert ts.temperature_ == pytest.approx(
        TemperatureScaling(device="cpu").fit(X, y).temperature_, rel=1e-8
    )


@pytest.mark.parametrize("factor", [1e-250, 1e-30, 1e30, 1e250])
def test_tiny_and_huge_logit_scales(factor):
    """T scales with the logits: T(c z) = c T(z), also far outside float's comfort."""
    X, y = make_logits(n_samples=1000, n_classes=5, seed=4)
    reference = float64_optimal_temperature(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an interior optimum: no warning
        ts = TemperatureScaling(device="cpu").fit(X * factor, y)
    assert ts.temperature_ / factor == pytest.approx(reference, rel=1e-10)
    np.testing.assert_allclose(
        ts.predict_proba(X * factor),
        np.exp(scipy_log_softmax(X / reference, axis=1)),
        rtol=1e-8,
    )


def test_subnormal_spread_gives_finite_probabilities():
    # Found by hypothesis: one logit of 2.5e-285, every other zero.
    X = np.zeros((12, 2))
    X[0, 0] = 2.47996677e-285
    y = np.array([0, 1] * 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ts = TemperatureScaling(device="cpu").fit(X, y)
    assert 0 < ts.temperature_ < np.inf
    proba = ts.predict_proba(X)
    assert np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_tiny_temperature_predicts_the_limit_not_nan():
    # T ~ 1e-204 from tiny logits; one row of 1e300 would overflow z / T.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3)) * 1e-200
    y = rng.integers(0, 3, size=2000)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ < 1e-190
    row = np.array([[1e300, 0.0, -1e300], [5e299, 1e300, 0.0]])
    np.testing.assert_array_equal(ts.predict_proba(row), [[1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(ts.predict(row), [0, 1])
    assert np.isfinite(ts.predict_proba(np.vstack([X[:5], row]))).all()
    torch = pytest.importorskip("torch")
    module_out = ts.to_torch()(torch.from_numpy(row)).exp().numpy()
    np.testing.assert_array_equal(module_out, [[1, 0, 0], [0, 1, 0]])


@pytest.mark.parametrize("spread", [1.11253693e-308, 5e-324])
def test_subnormal_spread_is_constant(spread):
    # Found by hypothesis: a spread so small that 1 / T would overflow.
    X = np.zeros((12, 2))
    X[0, 0] = spread
    y = np.array([0, 1] * 6)
    with pytest.warns(UserWarning, match="constant across classes"):
        ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ == 1.0
    np.testing.assert_allclose(ts.predict_proba(X), 0.5)


def test_to_torch_matches_transform_and_scripts():
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=300, n_classes=4, seed=6)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    module = ts.to_torch()
    expected = ts.transform(X)
    np.testing.assert_allclose(
        module(torch.from_numpy(X)).numpy(), expected, atol=1e-12
    )
    scripted = torch_jit_script(module)
    np.testing.assert_allclose(
        scripted(torch.from_numpy(X)).numpy(), expected, atol=1e-12
    )
    restored = pickle.loads(pickle.dumps(module))
    np.testing.assert_allclose(
        restored(torch.from_numpy(X)).numpy(), expected, atol=1e-12
    )


def test_fitted_state_is_plain_python():
    X, y = make_logits(n_samples=200, n_classes=3, seed=1)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    assert isinstance(ts.temperature_, float)
    assert isinstance(ts.n_iter_, int)


def test_no_warning_on_ordinary_fit():
    X, y = make_logits(n_samples=500, n_classes=4, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TemperatureScaling(device="cpu").fit(X, y)
