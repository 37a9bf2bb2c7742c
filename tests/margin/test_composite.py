"""MarginTemperatureScaling: its objective and fit against independent references.

References: the objective written again in numpy and minimised by scipy
(finite-difference gradients), temperature scaling (the one-knot NLL fit),
SMART's hand-written Charbonnier-SoftECE kernel, numpy's weighted quantiles
for the knots, and the results on the public real-logit sets.
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import approx_fprime, minimize
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import (
    KFold,
    LeaveOneGroupOut,
    ShuffleSplit,
)

from sklearn_calib import (
    SMART,
    MarginTemperatureScaling,
    MatrixScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.metrics import expected_calibration_error, log_loss
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared, torch_jit_script


def _ts():
    return TemperatureScaling(device="cpu")


def _mts(base=None, **params):
    # in-sample unless a test is about cv: the references below are in-sample
    params.setdefault("cv", None)
    params.setdefault("device", "cpu")
    return MarginTemperatureScaling(_ts() if base is None else base, **params)


def _log_softmax(z):
    return z - logsumexp(z, axis=1, keepdims=True)


def _skewed_logits(n_samples=3000, seed=0):
    """Over-confident at low margins, under-confident at high ones.

    The true logits t give y; the returned logits are t * 2 / (1 + m_t / 2)
    with m_t the true margin: stretched (2x) where the margin is small,
    shrunk where it is large, which no single temperature undoes. The
    observed margin grows with m_t, so a temperature of the margin can.
    """
    rng = np.random.default_rng(seed)
    t = rng.normal(scale=2.5, size=(n_samples, 4))
    p = np.exp(_log_softmax(t))
    y = (rng.random((n_samples, 1)) > p.cumsum(axis=1)).sum(axis=1).clip(0, 3)
    top2 = np.sort(t, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    return t * (2.0 / (1.0 + 0.5 * margin))[:, None], y


def reference_objective(u, log_proba, y, knots, ece_weight, alpha, n_bins=15):
    """NLL + ece_weight * Charbonnier-SoftECE + alpha |u|^2, in plain numpy."""
    top2 = np.sort(log_proba, axis=1)[:, -2:]
    m = np.clip(top2[:, 1] - top2[:, 0], knots[0], knots[-1])
    log_beta = np.interp(m, knots, u)
    scaled = np.exp(log_beta)[:, None] * log_proba
    logq = _log_softmax(scaled)
    n = len(y)
    nll = -np.mean(logq[np.arange(n), y])
    p = np.exp(logq.max(axis=1))
    correct = (log_proba.argmax(axis=1) == y).astype(float)
    centres = (np.arange(n_bins) + 0.5) / n_bins
    bins = -((p[:, None] - centres) ** 2) / (2 * 0.05**2)
    kernel = np.exp(_log_softmax(bins)) / n
    mass = kernel.sum(axis=0)
    gap = kernel.T @ (p - correct)
    ece = np.sum(np.sqrt(gap**2 + (1e-3 * mass) ** 2))
    return nll + ece_weight * ece + alpha * np.dot(u, u)


def test_one_knot_nll_fit_is_temperature_scaling_of_the_base():
    X, y = make_logits(n_samples=800, n_classes=4, overconfidence=2.0, seed=1)
    base = VectorScaling(device="cpu")
    mts = _mts(base, n_knots=1, ece_weight=0.0, alpha=0.0, tol=1e-10).fit(X, y)
    base_log_proba = clone(base).fit(X, y).transform(X)
    ts = _ts().fit(base_log_proba, y)
    assert mts.knots_.shape == (1,)
    assert np.exp(-mts.log_inverse_temperature_[0]) == pytest.approx(
        ts.temperature_, rel=1e-6
    )
    np.testing.assert_allclose(
        mts.predict_proba(X), ts.predict_proba(base_log_proba), atol=1e-7
    )


@pytest.mark.parametrize("ece_weight, alpha", [(0.0, 1e-2), (1.0, 1e-2), (3.0, 1e-3)])
def test_fit_is_a_minimum_of_the_numpy_objective(ece_weight, alpha):
    X, y = _skewed_logits(n_samples=1500)
    mts = _mts(ece_weight=ece_weight, alpha=alpha, n_knots=6, tol=1e-9).fit(X, y)
    log_proba = _log_softmax(mts.base_.transform(X))
    args = (log_proba, y, mts.knots_, ece_weight, alpha)
    u = mts.log_inverse_temperature_
    assert mts.loss_ == pytest.approx(reference_objective(u, *args), rel=1e-10)
    # stationary: a central finite-difference gradient of the numpy objective
    grad = approx_fprime(u, reference_objective, 1e-6, *args)
    assert np.max(np.abs(grad)) < 1e-5
    # and scipy from the same start, on the numpy objective, gets no lower
    ref = minimize(reference_objective, np.zeros_like(u), args=args, method="BFGS")
    assert mts.loss_ <= ref.fun + 1e-9
    np.testing.assert_allclose(u, ref.x, atol=2e-3)


@pytest.mark.parametrize("masked", [False, True])
def test_objective_value_and_gradient_match_the_numpy_objective(masked):
    # The fit's one-pass log-normaliser and its hand-written derivative
    # against the numpy objective and its central differences, at points
    # away from the optimum, with and without a masked (-inf) class.
    pytest.importorskip("torch")
    import torch

    from sklearn_calib._torch._margin import _Objective, interpolation

    X, y = _skewed_logits(n_samples=900, seed=7)
    if masked:
        X[y != 2, 2] = -np.inf  # class 2 allowed only where it is the label
    log_proba = _log_softmax(X)
    top2 = np.sort(log_proba, axis=1)[:, -2:]
    margins = top2[:, 1] - top2[:, 0]
    knots = np.quantile(margins, np.linspace(0.0, 1.0, 5))
    left, right_weight = interpolation(margins, knots)
    objective = _Objective(
        torch.from_numpy(log_proba - log_proba.max(axis=1, keepdims=True)),
        torch.from_numpy(y),
        torch.ones(len(y), dtype=torch.float64),
        torch.from_numpy(left),
        torch.from_numpy(right_weight),
        ece_weight=1.0,
        alpha=1e-2,
        n_bins=15,
        sigma=0.05,
        delta=1e-3,
    )
    args = (log_proba, y, knots, 1.0, 1e-2)
    rng = np.random.default_rng(0)
    for _ in range(3):
        u = rng.normal(scale=0.5, size=knots.shape[0])
        value, grad = objective(u)
        assert value == pytest.approx(reference_objective(u, *args), rel=1e-12)
        step = 1e-5
        central = np.array(
            [
                (
                    reference_objective(u + step * e, *args)
                    - reference_objective(u - step * e, *args)
                )
                / (2 * step)
                for e in np.eye(u.shape[0])
            ]
        )
        np.testing.assert_allclose(grad, central, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "case",
    ["plain", "masked", "weighted", "nll only", "one knot", "two classes", "narrow"],
)
def test_hand_written_gradient_matches_autograd(case):
    # The fit's gradient (written out on SMART's passes and soft bins)
    # against torch autograd through the objective's direct formulation
    # (logsumexp and a softmax over the bins), at points away from the optimum.
    pytest.importorskip("torch")
    import torch

    from sklearn_calib._torch._margin import _Objective, interpolation

    n_classes = 2 if case == "two classes" else 5
    X, y = make_logits(n_samples=700, n_classes=n_classes, seed=11)
    if case == "masked":
        X[y != 2, 2] = -np.inf
    rng = np.random.default_rng(5)
    weights = np.ones(len(y))
    if case == "weighted":
        weights = rng.integers(0, 5, size=len(y)).astype(float) * 1e-3
    log_proba = _log_softmax(X)
    top2 = np.sort(log_proba, axis=1)[:, -2:]
    margins = top2[:, 1] - top2[:, 0]
    n_knots = 1 if case == "one knot" else 6
    knots = np.unique(np.quantile(margins, np.linspace(0.0, 1.0, n_knots)))
    left, right_weight = interpolation(margins, knots)
    objective = _Objective(
        torch.from_numpy(log_proba - log_proba.max(axis=1, keepdims=True)),
        torch.from_numpy(y),
        torch.from_numpy(weights),
        torch.from_numpy(left),
        torch.from_numpy(right_weight),
        ece_weight=0.0 if case == "nll only" else 3.0,
        alpha=1e-2,
        n_bins=15,
        sigma=0.002 if case == "narrow" else 0.05,
        delta=1e-3,
    )
    for _ in range(3):
        u = rng.normal(scale=0.7, size=knots.shape[0])
        value, grad = objective(u)
        ref_value, ref_grad = objective.autograd_value_and_gradient(u)
        assert value == pytest.approx(ref_value, rel=1e-12)
        if case != "narrow":
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-9, atol=1e-12)
            continue
        # Bins no confidence reaches hold exactly 0 mass: autograd's
        # derivative of sqrt(G^2 + delta^2 M^2) there is 0 * inf = NaN, where
        # the bin adds nothing near u; central differences of the value.
        assert np.isnan(ref_grad).any()
        step = 1e-6
        central = [
            (
                objective.autograd_value_and_gradient(u + step * e)[0]
                - objective.autograd_value_and_gradient(u - step * e)[0]
            )
            / (2 * step)
            for e in np.eye(u.shape[0])
        ]
        np.testing.assert_allclose(grad, central, rtol=1e-5, atol=1e-8)


def test_soft_ece_term_matches_smart_kernel():
    # SMART's loss at its initial network, computed by its hand-written
    # kernel, equals our soft ECE of the same temperatures.
    pytest.importorskip("torch")
    import torch

    from sklearn_calib._torch._margin import _Objective

    X, y = make_logits(n_samples=1200, n_classes=5, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # fewer than 1000 samples
        smart = SMART(max_iter=1, device="cpu", random_state=0).fit(X, y)
    temperature = smart.predict_temperature(X)
    log_proba = _log_softmax(X / temperature[:, None])
    shifted = torch.from_numpy(log_proba - log_proba.max(axis=1, keepdims=True))
    objective = _Objective(
        shifted,
        torch.from_numpy(y),
        torch.ones(len(y), dtype=torch.float64),
        torch.zeros(len(y), dtype=torch.long),
        torch.zeros(len(y), dtype=torch.float64),
        ece_weight=1.0,
        alpha=0.0,
        n_bins=15,
        sigma=0.05,
        delta=1e-3,
    )
    confidence = torch.from_numpy(np.exp(log_proba.max(axis=1)))
    ours = float(objective.soft_ece(confidence))
    assert ours == pytest.approx(smart.loss_curve_[0], rel=1e-9)


def test_knots_are_weighted_quantiles_and_weights_equal_repeats():
    X, y = _skewed_logits(n_samples=600, seed=4)
    weights = np.random.default_rng(0).integers(0, 4, size=len(y))
    # a fixed alpha: "auto" counts effective rows, which differ here
    weighted = _mts(alpha=1e-2, tol=1e-10).fit(X, y, sample_weight=weights)
    repeated = _mts(alpha=1e-2, tol=1e-10).fit(
        np.repeat(X, weights, 0), np.repeat(y, weights)
    )
    np.testing.assert_array_equal(weighted.knots_, repeated.knots_)
    log_proba = repeated.base_.transform(np.repeat(X, weights, 0))
    top2 = np.sort(log_proba, axis=1)[:, -2:]
    margins = top2[:, 1] - top2[:, 0]
    expected = np.quantile(margins, np.linspace(0, 1, 8), method="inverted_cdf")
    np.testing.assert_allclose(repeated.knots_, np.unique(expected), rtol=1e-12)
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-6, atol=1e-9
    )


def test_knots_of_integer_weights_are_those_of_repeated_rows_exactly():
    # fit divides the weights by the largest, so their running sum rounds;
    # a level that the repeated rows reach exactly must be reached still
    # (before: another knot on 1 draw in 25 here, probabilities 1.2e-2 apart)
    from fractions import Fraction

    from sklearn_calib.utils._math import weighted_quantiles

    rng = np.random.default_rng(0)
    for _ in range(300):
        n, n_knots = rng.integers(2, 30), rng.integers(2, 12)
        values = rng.normal(size=n)
        weights = rng.integers(1, 6, n)
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(weights[order])
        targets = [Fraction(j, n_knots - 1) * cumulative[-1] for j in range(n_knots)]
        expected = [values[order[np.argmax(cumulative >= t)]] for t in targets]
        levels = np.linspace(0, 1, n_knots)
        for scale in (1.0, 3.7):
            scaled = weights * scale
            got = weighted_quantiles(values, scaled / scaled.max(), levels)
            np.testing.assert_array_equal(got, expected)
    rng = np.random.default_rng(0)
    for _ in range(8):
        y = rng.integers(0, 3, 18)
        X = 2 * np.eye(3)[y] + rng.normal(scale=1.5, size=(18, 3))
        weights = rng.integers(1, 6, 18)
    weighted = _mts(n_knots=11, alpha=0.05).fit(X, y, sample_weight=weights)
    repeated = _mts(n_knots=11, alpha=0.05).fit(
        np.repeat(X, weights, 0), np.repeat(y, weights)
    )
    np.testing.assert_allclose(weighted.knots_, repeated.knots_, rtol=1e-12)
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-6, atol=1e-9
    )


def test_corrects_what_one_temperature_cannot():
    X, y = _skewed_logits(n_samples=4000, seed=5)
    X_test, y_test = _skewed_logits(n_samples=4000, seed=6)
    ts = _ts().fit(X, y)
    mts = _mts().fit(X, y)
    temperatures = mts.predict_temperature(X_test)
    assert np.all(temperatures > 0)
    # low margins get a higher temperature than high ones (relative to TS)
    margins = np.sort(X_test, axis=1)
    margins = margins[:, -1] - margins[:, -2]
    low, high = margins < np.quantile(margins, 0.2), margins > np.quantile(margins, 0.8)
    assert temperatures[low].mean() > temperatures[high].mean()
    ece = expected_calibration_error
    # measured: 5.9 % -> 1.2 % (SMART: 1.3 %)
    assert ece(y_test, mts.predict_proba(X_test)) < 0.4 * ece(
        y_test, ts.predict_proba(X_test)
    )
    assert log_loss(y_test, mts.predict_proba(X_test)) < log_loss(
        y_test, ts.predict_proba(X_test)
    )
    np.testing.assert_array_equal(mts.predict(X_test), X_test.argmax(axis=1))


def test_deterministic_and_large_alpha_gives_the_base():
    X, y = _skewed_logits(n_samples=800, seed=7)
    first = _mts().fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(_mts().fit(X, y).predict_proba(X), first)
    stiff = _mts(alpha=1e8).fit(X, y)
    np.testing.assert_allclose(stiff.log_inverse_temperature_, 0.0, atol=1e-6)
    np.testing.assert_allclose(
        stiff.predict_proba(X), stiff.base_.predict_proba(X), atol=1e-6
    )


def _fit_on(estimator, X, y, rows, sample_weight=None):
    weights = None if sample_weight is None else sample_weight[rows]
    return clone(estimator).fit(X[rows], y[rows], sample_weight=weights)


def test_cv_fits_the_temperature_on_out_of_fold_base_predictions():
    X, y = _skewed_logits(n_samples=900, seed=14)
    base = VectorScaling(device="cpu")
    splits = list(KFold(3, shuffle=True, random_state=0).split(X))
    mts = _mts(base, cv=splits).fit(X, y)
    # by hand: each row predicted by the base fitted without it
    oof = np.empty(X.shape)
    for train, test in splits:
        oof[test] = _fit_on(base, X, y, train).transform(X[test])
    on_oof = _mts(_Passthrough()).fit(oof, y)
    np.testing.assert_allclose(mts.knots_, on_oof.knots_, rtol=1e-10)
    np.testing.assert_allclose(
        mts.log_inverse_temperature_, on_oof.log_inverse_temperature_, atol=1e-7
    )
    # the base that predicts is fitted on every row
    full = clone(base).fit(X, y)
    np.testing.assert_allclose(mts.base_.coef_, full.coef_)
    np.testing.assert_allclose(
        mts.predict_proba(X),
        np.exp(on_oof.transform(full.transform(X))),
        atol=1e-7,
    )


def test_default_base_chooses_and_predicts_out_of_fold_on_the_same_splits():
    X, y = make_logits(n_samples=600, n_classes=3, overconfidence=2.0, seed=8)
    X[:, 1] += 1.0
    mts = MarginTemperatureScaling(device="cpu").fit(X, y)
    selector = mts.base_
    names = selector.cv_results_["calibrator"].tolist()
    candidates = [
        TemperatureScaling(),
        StructuredVectorScaling(),
        StructuredMatrixScaling(),
    ]
    assert names == [repr(c) for c in candidates]
    splits = list(KFold(5, shuffle=True, random_state=0).split(X))
    assert selector.n_splits_ == 5
    for (_, test), (_, own_test) in zip(splits, selector.cv, strict=True):
        np.testing.assert_array_equal(test, own_test)
    winner = candidates[selector.best_index_]
    oof = np.empty(X.shape)
    for train, test in splits:
        oof[test] = _fit_on(winner, X, y, train).transform(X[test])
    on_oof = _mts(_Passthrough()).fit(oof, y)
    # The same folds and fits: equal to the solvers' tolerance, not to
    # rounding.
    np.testing.assert_allclose(
        mts.log_inverse_temperature_, on_oof.log_inverse_temperature_, atol=1e-5
    )


def test_cv_that_does_not_partition_falls_back_with_warning():
    X, y = _skewed_logits(n_samples=600, seed=15)
    splits = list(ShuffleSplit(3, test_size=0.2, random_state=0).split(X))
    with pytest.warns(UserWarning, match="out-of-fold"):
        mts = _mts(cv=splits).fit(X, y)
    in_sample = _mts().fit(X, y)
    np.testing.assert_allclose(
        mts.log_inverse_temperature_, in_sample.log_inverse_temperature_
    )


# tol=1e-10 is below what L-BFGS-B's line search resolves on some builds
# (scipy 1.10, CI's floors: ABNORMAL_TERMINATION_IN_LNSRCH at a gradient of
# 2e-8, with the ConvergenceWarning); the comparison is at rtol 1e-5, which a
# stop there meets, and the warning itself is tested above.
@pytest.mark.filterwarnings(
    "ignore:MarginTemperatureScaling stopped after:"
    "sklearn.exceptions.ConvergenceWarning"
)
def test_cv_sample_weights_equal_repeated_rows():
    # the weighted rows and their repeats form one group, as in
    # scikit-learn's check for estimators with an inner cv
    X, y = _skewed_logits(n_samples=600, seed=16)
    weights = np.random.default_rng(1).integers(0, 4, size=200)
    X_r = np.vstack([np.repeat(X[:200], weights, axis=0), X[200:]])
    y_r = np.concatenate([np.repeat(y[:200], weights), y[200:]])
    groups_w = np.repeat([0, 1, 2], 200)
    groups_r = np.concatenate([np.zeros(weights.sum(), int), np.repeat([1, 2], 200)])
    sw = np.concatenate([weights, np.ones(400)])

    def fit(X, y, groups, **kwargs):
        splits = list(LeaveOneGroupOut().split(X, y, groups))
        # a fixed alpha: "auto" counts effective rows, which differ here
        base = VectorScaling(device="cpu")
        return _mts(base, cv=splits, alpha=1e-2, tol=1e-10).fit(X, y, **kwargs)

    weighted = fit(X, y, groups_w, sample_weight=sw)
    repeated = fit(X_r, y_r, groups_r)
    np.testing.assert_allclose(weighted.knots_, repeated.knots_, rtol=1e-6)
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-5, atol=1e-7
    )


def test_masked_classes_keep_probability_zero():
    X, y = make_logits(n_samples=600, n_classes=4, seed=9)
    masked = X.copy()
    rows = np.flatnonzero(y != 3)[:100]
    masked[rows, 3] = -np.inf
    mts = _mts().fit(masked, y)
    proba = mts.predict_proba(masked)
    assert np.all(proba[rows, 3] == 0)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # one finite class: probability 1 there
    single = np.full((1, 4), -np.inf)
    single[0, 2] = 0.5
    np.testing.assert_array_equal(mts.predict_proba(single), [[0, 0, 1, 0]])


class _Passthrough(BaseEstimator):
    """A base that keeps the logits: its log-probabilities are log_softmax(X)."""

    def fit(self, X, y, sample_weight=None):
        self.fitted_ = True
        return self

    def transform(self, X):
        return _log_softmax(np.asarray(X, dtype=np.float64))


def test_temperatures_running_off_without_alpha_warn_and_still_predict():
    # alpha=0, NLL only: half the rows relabelled, so margin ranges whose top
    # class is right no more often than chance drive T to infinity (u = -4e3,
    # beta = 0) and others far below 1 (u = 5e2). The fit said nothing; a
    # masked class became -inf * 0 = NaN (predict_proba raised 'input logits
    # too large', the export returned NaN), and the export's beta overflowed
    # float32 (top entry 0 * inf = NaN).
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    y = rng.integers(0, 3, 100)
    X = 3 * np.eye(3)[y] + rng.normal(scale=0.5, size=(100, 3))
    y[:50] = (y[:50] + 1) % 3
    with pytest.warns(UserWarning, match="beyond a factor 1e4"):
        mts = _mts(alpha=0.0, ece_weight=0.0).fit(X, y)
    u = mts.log_inverse_temperature_
    assert u.min() < -700 and u.max() > 100
    masked = np.where(X.argmax(axis=1, keepdims=True) == [[0, 1, 2]], X, -np.inf)
    for Z in (X, masked, X.astype(np.float32), masked.astype(np.float32)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            proba = mts.predict_proba(Z)
            temperature = mts.predict_temperature(Z)
        assert np.all(np.isfinite(proba)) and np.all(proba[np.isneginf(Z)] == 0)
        assert np.all(temperature > 0)
        with torch.no_grad():
            out = mts.to_torch()(torch.from_numpy(Z)).numpy()
        assert not np.isnan(out).any()
        np.testing.assert_allclose(np.exp(out), proba, atol=1e-5)
    # the default ridge keeps every temperature within the bound, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _mts(ece_weight=0.0).fit(X, y)


def test_true_class_masked_raises():
    X, y = make_logits(n_samples=300, n_classes=3, seed=10)
    X[0, y[0]] = -np.inf
    with pytest.raises(ValueError, match="true class"):
        _mts(_Passthrough()).fit(X, y)
    # temperature scaling refuses it first, with its own message
    with pytest.raises(ValueError, match="masked"):
        _mts().fit(X, y)


def test_stops_at_the_optimum_not_where_float64_values_stop_improving():
    # scikit-learn's weight check data: 30 columns, 3 labels, margins near 0.
    # L-BFGS-B stops there when values stop improving in float64 (gradient
    # about 8e-9), where the path, hence the summation order, decides;
    # Newton steps on the exact Hessian take both fits to the optimum.
    rng = np.random.RandomState(42)
    X = rng.rand(15, 30)
    y = rng.randint(0, 3, size=15)
    w = rng.randint(0, 5, size=15)
    weighted = _mts(alpha=1e-2, tol=1e-10).fit(X, y, sample_weight=w)
    repeated = _mts(alpha=1e-2, tol=1e-10).fit(
        np.repeat(X, w, axis=0)[::-1], np.repeat(y, w)[::-1]
    )
    np.testing.assert_allclose(
        weighted.log_inverse_temperature_,
        repeated.log_inverse_temperature_,
        rtol=0,
        atol=1e-13,
    )
    log_proba = _log_softmax(weighted.base_.transform(X))
    args = (log_proba, y, weighted.knots_, 1.0, 1e-2)
    # the numpy objective on the repeated rows: its central-difference
    # gradient vanishes at the fit (step 1e-6: the Charbonnier term's large
    # third derivative makes the truncation error 3e-8 at 1e-5, 3e-10 here,
    # as is the rounding error)
    repeated = (np.repeat(log_proba, w, axis=0), np.repeat(y, w), *args[2:])
    u = weighted.log_inverse_temperature_
    step = 1e-6 * np.eye(u.shape[0])
    grad = [
        reference_objective(u + e, *repeated) - reference_objective(u - e, *repeated)
        for e in step
    ]
    assert np.max(np.abs(grad)) / 2e-6 < 2e-9


def test_convergence_warning_when_stopped_short():
    X, y = _skewed_logits(n_samples=600, seed=11)
    with pytest.warns(ConvergenceWarning, match="max_iter=1") as caught:
        _mts(max_iter=1, tol=1e-12).fit(X, y)
    # Attributed to the caller's fit, not to scikit-learn's fit wrapper.
    short = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert [w.filename for w in short] == [__file__]


@pytest.mark.parametrize("base", ["ts", "ms"])
def test_to_torch_matches_transform_and_scripts(base):
    torch = pytest.importorskip("torch")
    X, y = _skewed_logits(n_samples=600, seed=12)
    base = _ts() if base == "ts" else MatrixScaling(device="cpu")
    mts = _mts(base).fit(X, y)
    module = mts.to_torch()
    out = module(torch.from_numpy(X)).detach().numpy()
    np.testing.assert_allclose(out, mts.transform(X), atol=1e-10)
    scripted = torch_jit_script(module)
    X32 = X.astype(np.float32)
    out32 = scripted(torch.from_numpy(X32))
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.detach().numpy(), mts.transform(X32), atol=1e-4)
    batched = module(torch.from_numpy(X).view(6, 100, 4)).detach().numpy()
    np.testing.assert_allclose(batched.reshape(600, 4), out, atol=1e-12)


def test_to_torch_needs_a_base_export():
    from sklearn_calib import IsotonicCalibration

    X, y = _skewed_logits(n_samples=600, seed=13)
    mts = _mts(IsotonicCalibration()).fit(X, y)
    with pytest.raises(AttributeError, match="no to_torch"):
        mts.to_torch()


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_knots": 0}, "n_knots"),
        ({"alpha": -1.0}, "alpha"),
        ({"ece_weight": -1.0}, "ece_weight"),
        ({"sigma": 0.0}, "sigma"),
        ({"base": "ts"}, "base"),
    ],
)
def test_bad_parameters_raise(params, message):
    X, y = make_logits(n_samples=100, n_classes=3)
    with pytest.raises(ValueError, match=message):
        MarginTemperatureScaling(**params).fit(X, y)


def test_lower_ece_than_the_base_on_a_real_set():
    data = load_shared("c10_resnet50_cross_entropy_smart")
    X, y = data["logits_val"], data["y_val"]
    X_test, y_test = data["logits_test"].astype(np.float64), data["y_test"]
    mts = _mts(MatrixScaling(device="cpu")).fit(X, y)
    base = mts.base_
    ece = {
        name: 100 * expected_calibration_error(y_test, model.predict_proba(X_test))
        for name, model in [("base", base), ("mts", mts)]
    }
    nll = {
        name: log_loss(y_test, model.predict_proba(X_test))
        for name, model in [("base", base), ("mts", mts)]
    }
    # measured: ECE 1.39 -> 0.94 %, NLL 0.1955 -> 0.1944 (user guide table)
    assert ece["mts"] < 0.8 * ece["base"]
    assert nll["mts"] <= nll["base"]
    np.testing.assert_array_equal(mts.predict(X_test), base.predict(X_test))


def test_tied_top_logits_do_not_depend_on_the_column_order():
    # The calibration-error term counted a tied row as correct only where its
    # label was the first tied column: over temperature scaling (which keeps
    # ties) permuting the classes moved the probabilities by 4.5e-3 on these
    # logits. A tied row's correctness is now 1/t where the label is one of t
    # tied top classes.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 3000)
    logits = np.round(1.5 * np.eye(4)[y] + rng.normal(size=(3000, 4)))
    order = np.array([3, 1, 0, 2])
    position = np.argsort(order)
    params = dict(base=TemperatureScaling(), device="cpu")
    reference = MarginTemperatureScaling(**params).fit(logits, y)
    permuted = MarginTemperatureScaling(**params).fit(logits[:, order], position[y])
    np.testing.assert_allclose(
        permuted.predict_proba(logits[:, order]),
        reference.predict_proba(logits)[:, order],
        rtol=0,
        atol=1e-9,
    )
