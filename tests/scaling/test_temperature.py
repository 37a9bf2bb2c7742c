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

from ..conftest import load_shared, torch_jit_script

# Fitted T on the val part of every public set (../shared/data/PROVENANCE.md).
# A temperature at the bound of its bracket warns (asserted in
# test_separable_calibration_set_warns and its kin); tests about other
# properties of such fits ignore it.
_IGNORED = [
    "ignore:The NLL keeps decreasing as T:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


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


@pytest.mark.parametrize("dtype, offset", [(np.float32, 1e4), (np.float64, 1e13)])
def test_to_torch_shifts_offset_logits_as_transform_does(dtype, offset):
    # Found: with T >= 1 the module scaled z / T before the shift by the row
    # maximum, rounding to the precision of |z|: float32 logits near 1e4 gave
    # log-probabilities 1.3e-4 off transform's (8e-3 near 1e6).
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=300, n_classes=4, seed=6)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    assert ts.temperature_ > 1
    rng = np.random.default_rng(1)
    Z = (rng.normal(scale=4.0, size=(50, 4)) + offset).astype(dtype)
    # The shift is exact in float64 (the logits are within a factor 2).
    gaps = Z.astype(np.float64) - Z.max(axis=1, keepdims=True)
    exact = scipy_log_softmax(gaps / ts.temperature_, axis=1)
    atol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ts.transform(Z), exact, rtol=0, atol=atol)
    with torch.no_grad():
        out = ts.to_torch()(torch.from_numpy(Z)).numpy()
    assert out.dtype == dtype
    np.testing.assert_allclose(out, exact, rtol=0, atol=atol)


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


# --- masked classes, extreme values, weight scale, large row counts ----------------


def _no_warnings_fit(X, y, **fit_params):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return TemperatureScaling(device="cpu").fit(X, y, **fit_params)


@pytest.mark.parametrize("fill", [-np.inf, -1e9, np.finfo(np.float32).min])
def test_masked_vocabulary_leaves_T_unchanged(fill):
    # 20 real columns and 1,980 masked ones (a language model's vocabulary
    # restricted to 20 answers): the fit of the 20 columns, without a false
    # 'every sample classified correctly' warning. Found with fill -1e9:
    # T = 9.9e4 (the bracket followed the fill's scale).
    X, y = make_logits(n_samples=1000, n_classes=20, seed=12)
    masked = np.hstack([X, np.full((1000, 1980), fill)])
    expected = float64_optimal_temperature(X, y)
    ts = _no_warnings_fit(masked, y)
    assert ts.temperature_ == pytest.approx(expected, rel=1e-10)
    proba = ts.predict_proba(masked)
    assert np.all(proba[:, 20:] == 0)
    np.testing.assert_allclose(
        proba[:, :20], np.exp(scipy_log_softmax(X / expected, axis=1)), rtol=1e-8
    )


def test_masked_fill_on_an_under_confident_model():
    # Found: fill -1e4 gave T = 0.99 instead of 0.406 (T was bounded below by
    # 1e-4 times the fill's scale).
    X, y = make_logits(n_samples=2000, n_classes=20, overconfidence=0.4, seed=13)
    expected = float64_optimal_temperature(X, y)
    assert expected < 0.5
    for fill in (-1e4, -1e6, -np.inf):
        masked = np.hstack([X, np.full((2000, 1980), fill)])
        assert _no_warnings_fit(masked, y).temperature_ == pytest.approx(
            expected, rel=1e-10
        )


def test_rows_with_a_single_unmasked_class():
    # Rows that can only be one class carry no information about T; rows of
    # the label's class only: the fit of the other rows, and one-hot outputs.
    X, y = make_logits(n_samples=600, n_classes=5, seed=14)
    sure = np.arange(600) % 4 == 0
    masked = X.copy()
    masked[sure] = -np.inf
    masked[sure, y[sure]] = X[sure, y[sure]]
    ts = _no_warnings_fit(masked, y)
    assert ts.temperature_ == pytest.approx(
        float64_optimal_temperature(X[~sure], y[~sure]), rel=1e-10
    )
    np.testing.assert_array_equal(ts.predict_proba(masked)[sure], np.eye(5)[y[sure]])


def test_label_on_a_masked_class_is_an_error_unless_weightless():
    X, y = make_logits(n_samples=300, n_classes=4, seed=15)
    X[7, y[7]] = -np.inf
    with pytest.raises(ValueError, match="Sample 7 is labelled with a class whose"):
        TemperatureScaling(device="cpu").fit(X, y)
    weights = np.ones(300)
    weights[7] = 0.0
    ts = TemperatureScaling(device="cpu").fit(X, y, sample_weight=weights)
    keep = np.arange(300) != 7
    assert ts.temperature_ == pytest.approx(
        float64_optimal_temperature(X[keep], y[keep]), rel=1e-10
    )


def test_only_single_class_rows_is_constant():
    X = np.full((6, 3), -np.inf)
    X[np.arange(6), np.arange(6) % 3] = 1.0
    with pytest.warns(UserWarning, match="single finite logit"):
        ts = TemperatureScaling(device="cpu").fit(X, np.arange(6) % 3)
    assert ts.temperature_ == 1.0


@pytest.mark.parametrize(
    "dtype, magnitude", [(np.float32, 3e38), (np.float64, 1e308), (np.float64, 1e300)]
)
def test_logits_near_the_float_range_fit(dtype, magnitude):
    # Found: OverflowError ('cannot convert float infinity to integer') from
    # the power-of-two rescaling, whose scale overflowed in the shift z - max z.
    X, y = make_logits(n_samples=1000, n_classes=5, seed=4)
    factor = magnitude / np.abs(X).max()
    huge = (X * factor).astype(dtype)
    reference = float64_optimal_temperature(huge.astype(np.float64) / factor, y)
    ts = _no_warnings_fit(huge, y)
    rel = 1e-6 if dtype == np.float32 else 1e-10
    assert ts.temperature_ / factor == pytest.approx(reference, rel=rel)
    proba = ts.predict_proba(huge)
    np.testing.assert_allclose(
        proba, np.exp(scipy_log_softmax(X / reference, axis=1)), rtol=1e-4, atol=1e-6
    )
    torch = pytest.importorskip("torch")
    module_proba = ts.to_torch()(torch.from_numpy(huge)).exp().numpy()
    np.testing.assert_allclose(module_proba, proba, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("spread", [1e-40, 1e-44])
def test_float32_subnormal_spread_fits_and_predicts(spread):
    # Found: T = 4.6e-41 was fitted, then predict refused the same logits
    # ("input logits are too large"): 1 / T is beyond float32's range.
    X, y = make_logits(n_samples=1000, n_classes=5, seed=4)
    factor = spread / np.abs(X).max()
    tiny = (X * factor).astype(np.float32)
    representable = tiny.astype(np.float64) / factor  # rounded to subnormals
    reference = float64_optimal_temperature(representable, y)
    ts = _no_warnings_fit(tiny, y)
    assert ts.temperature_ / factor == pytest.approx(reference, rel=1e-5)
    expected = np.exp(scipy_log_softmax(representable / reference, axis=1))
    proba = ts.predict_proba(tiny)
    assert proba.dtype == np.float32
    np.testing.assert_allclose(proba, expected, rtol=1e-4, atol=1e-6)
    torch = pytest.importorskip("torch")
    module = ts.to_torch()
    assert module.split_scale
    module_proba = module(torch.from_numpy(tiny)).exp().numpy()
    np.testing.assert_allclose(module_proba, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("weight", [1e-310, 5e-324, 1e-300, 1e300])
def test_equal_weights_of_any_scale(weight):
    # Found: weights of 1e-310 gave T = 0.0015 instead of 2.47, with a warning
    # that every sample was classified correctly.
    X, y = make_logits(n_samples=2000, n_classes=6, seed=2)
    ts = _no_warnings_fit(X, y, sample_weight=np.full(len(y), weight))
    assert ts.temperature_ == pytest.approx(
        float64_optimal_temperature(X, y), rel=1e-12
    )


def test_sampled_rows_of_zero_weight_do_not_hide_the_scale():
    # The bracket is measured on evenly spaced rows of positive weight.
    X, y = make_logits(n_samples=20000, n_classes=4, seed=5)
    weights = np.zeros(len(y))
    weights[1::7] = 1.0
    ts = _no_warnings_fit(X, y, sample_weight=weights)
    assert ts.temperature_ == pytest.approx(
        float64_optimal_temperature(X[1::7], y[1::7]), rel=1e-10
    )


def _exact_spaced_rows(n_rows, n_sample):
    # round(i (n - 1) / (m - 1)), half up, in Python integers
    span = n_sample - 1
    return np.array(
        [(2 * i * (n_rows - 1) + span) // (2 * span) for i in range(n_sample)]
    )


@pytest.mark.parametrize(
    "n_rows",
    [
        2**24 - 1,
        2**24 + 1,
        2**24 + 3,
        20_000_000,
        2**25 - 1,
        33_554_433,
        123_456_789,
        10**9 + 7,
        2**31 + 11,
        2**40 + 1,
        2**53 // 4096 + 5,
    ],
)
def test_spaced_rows_are_exact_above_2_to_the_24(n_rows):
    # Found: a float32 linspace rounded the last index of 2e7 rows up to
    # 20,000,000, one past the end (IndexError in the fit of 2e7 x 10 float32).
    torch = pytest.importorskip("torch")
    from sklearn_calib._torch._temperature import WARM_START_ROWS, spaced_rows

    rows = spaced_rows(n_rows, torch.device("cpu")).numpy()
    assert rows.dtype == np.int64
    assert rows[0] == 0 and rows[-1] == n_rows - 1
    assert np.all(np.diff(rows) > 0)
    np.testing.assert_array_equal(rows, _exact_spaced_rows(n_rows, WARM_START_ROWS))


def test_spaced_rows_of_small_problems_are_every_row():
    torch = pytest.importorskip("torch")
    from sklearn_calib._torch._temperature import WARM_START_ROWS, spaced_rows

    for n_rows in (1, 7, WARM_START_ROWS):
        np.testing.assert_array_equal(
            spaced_rows(n_rows, torch.device("cpu")).numpy(), np.arange(n_rows)
        )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("far", [1e20, 1e35, 1e100])
def test_one_far_row_with_its_own_label_changes_nothing(dtype, far):
    # Weak logits (T near 80): the row (far, 0, 0, 0) labelled 0 has loss
    # exactly 0 from 1e6 on. Its spread set the bracket's lower end near
    # 1e-4 / far; a bisection towards it was followed by a Newton step a
    # thousandth of the bisection's, taken for quadratic convergence: T of
    # 7.7e9 (1e20) and 7.7e49 (1e100) in float64, without a warning.
    if dtype == np.float32 and far > 1e38:
        pytest.skip("beyond float32's range")
    rng = np.random.default_rng(0)
    X = 2.0 * rng.normal(size=(200, 4))
    y = rng.integers(0, 4, 200)
    temperatures = []
    for value in (1e6, far):
        X[0] = [value, 0.0, 0.0, 0.0]
        y[0] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit = TemperatureScaling().fit(X.astype(dtype), y)
        temperatures.append(fit.temperature_)
    assert 50 < temperatures[0] < 150
    np.testing.assert_allclose(temperatures[1], temperatures[0], rtol=1e-6)


def test_one_far_mislabelled_row_reaches_the_upper_temperature():
    # A row (1e100, 0, 0, 0) labelled 1 sets L'(beta) = 1e100 / n until beta
    # ~1e-100: the loss falls as T -> infinity, to log K. Newton's steps in
    # log(beta) stayed -1, the absolute steps shrank by e each and never
    # looked slow, so the iteration crawled to max_iter=100 (loss 6e53).
    rng = np.random.default_rng(0)
    X = 2.0 * rng.normal(size=(200, 4))
    y = rng.integers(0, 4, 200)
    X[np.arange(200), y] += 3.0
    X[0] = [1e100, 0.0, 0.0, 0.0]
    y[0] = 1
    with pytest.warns(UserWarning, match="T -> infinity") as record:
        fit = TemperatureScaling().fit(X, y)
    assert not [w for w in record if issubclass(w.category, ConvergenceWarning)]
    z = X / fit.temperature_
    loss = np.mean(logsumexp(z, axis=1) - z[np.arange(200), y])
    assert loss < np.log(4) + 1e-4


@pytest.mark.parametrize("far", [1e50, 1e100])
def test_far_mislabelled_row_clamps_at_the_bound_not_max_iter(far):
    # One row (far, 0, 0, 0, 0) labelled 1: the NLL keeps decreasing as
    # T -> infinity (nearly linear in beta), so log-Newton shrank beta by a
    # factor e a step and stopped at max_iter (T = 2.7e43 at far = 1e100,
    # a ConvergenceWarning) far short of T's upper bound (about 1e4 times
    # the row's gap over the mean gap). Now that bound with its warning, as
    # at far = 1e20.
    X, y = make_logits(n_samples=800, n_classes=5, seed=3)
    Xa = np.vstack([X, [[far, 0.0, 0.0, 0.0, 0.0]]])
    ya = np.append(y, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ts = TemperatureScaling(device="cpu").fit(Xa, ya)
    messages = [str(w.message) for w in caught]
    assert not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    assert any("T -> infinity" in m for m in messages), messages
    assert ts.temperature_ > far
    np.testing.assert_allclose(ts.predict_proba(X), 0.2, atol=1e-12)
