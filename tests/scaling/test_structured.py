"""Structured vector and matrix scaling against scipy, probmetrics and by hand."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from sklearn_calib import (
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
)
from sklearn_calib._scaling.structured import effective_sample_size, structured_features
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared

ESTIMATORS = {"matrix": StructuredMatrixScaling, "vector": StructuredVectorScaling}


def _strengths(est):
    s = est.penalty_strengths_
    return s["intercept"], s["diagonal"], s["off_diagonal"]


def objective(features, y, coef, intercept, strengths, weights=None):
    """Mean (weighted) NLL of softmax(A f + b) plus the three ridge penalties."""
    vector = coef.ndim == 1
    z = features * coef + intercept if vector else features @ coef.T + intercept
    nll = logsumexp(z, axis=1) - z[np.arange(len(y)), y]
    w = np.ones(len(y)) if weights is None else weights
    reg_b, reg_d, reg_o = strengths
    diagonal = coef if vector else np.diag(coef)
    value = np.average(nll, weights=w) + reg_b * intercept @ intercept
    value += reg_d * np.sum((diagonal - 1.0) ** 2)
    if not vector:
        value += reg_o * (np.sum(coef**2) - np.sum(diagonal**2))
    return value


def scipy_solve(features, y, kind, strengths):
    """The same objective minimised by scipy's L-BFGS with exact gradients."""
    n, k = features.shape
    onehot = np.eye(k)[y]
    reg_b, reg_d, reg_o = strengths

    def unpack(theta):
        if kind == "vector":
            return theta[:k], theta[k:]
        return theta[: k * k].reshape(k, k), theta[k * k :]

    def fun(theta):
        coef, intercept = unpack(theta)
        value = objective(features, y, coef, intercept, strengths)
        z = (
            features * coef + intercept
            if kind == "vector"
            else features @ coef.T + intercept
        )
        residual = (softmax(z, axis=1) - onehot) / n
        grad_b = residual.sum(0) + 2 * reg_b * intercept
        if kind == "vector":
            grad_a = (residual * features).sum(0) + 2 * reg_d * (coef - 1.0)
        else:
            grad_a = residual.T @ features + 2 * reg_o * coef
            grad_a[np.diag_indices(k)] += 2 * (reg_d - reg_o) * np.diag(coef)
            grad_a[np.diag_indices(k)] -= 2 * reg_d
        return value, np.concatenate([grad_a.ravel(), grad_b])

    start = np.concatenate(
        [np.ones(k) if kind == "vector" else np.eye(k).ravel(), np.zeros(k)]
    )
    result = minimize(
        fun,
        start,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 10000, "gtol": 1e-12, "ftol": 1e-15},
    )
    return unpack(result.x)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_solution_equals_an_independent_scipy_solve(kind):
    X, y = make_logits(n_samples=600, n_classes=4, seed=1)
    est = ESTIMATORS[kind](device="cpu", tol=1e-10).fit(X, y)
    features = structured_features(X, est.temperature_, est.mix_weight_)
    coef, intercept = scipy_solve(features, y, kind, _strengths(est))
    np.testing.assert_allclose(est.coef_, coef, atol=1e-6)
    np.testing.assert_allclose(est.intercept_, intercept, atol=1e-6)
    ours = objective(features, y, est.coef_, est.intercept_, _strengths(est))
    theirs = objective(features, y, coef, intercept, _strengths(est))
    assert ours <= theirs + 1e-12
    assert est.objective_ == pytest.approx(ours, rel=1e-10)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_ray_search_from_one_finds_the_spread_start_sooner(kind, monkeypatch):
    # The features are log-probabilities of the fitted temperature map, so the
    # solver's start on the temperature ray is searched from beta = 1; from
    # the features' spread it must land on the same start and the same fit.
    from sklearn_calib._torch import _affine

    X, y = make_logits(n_samples=600, n_classes=4, seed=1)
    fits, newton_steps = {}, {}
    original, original_start = _affine.fit_affine, _affine._ray_start

    def solve_from(ray_start):
        def fit(*args, **kwargs):
            assert kwargs["ray_start"] == 1.0
            kwargs["ray_start"] = ray_start
            fits[ray_start] = original(*args, **kwargs)
            return fits[ray_start]

        return fit

    def counted_start(objective, log2_spread, beta=None):
        found, steps = original_start(objective, log2_spread, beta)
        newton_steps[beta] = steps
        return found, steps

    monkeypatch.setattr(_affine, "_ray_start", counted_start)

    monkeypatch.setattr(_affine, "fit_affine", solve_from(1.0))
    from_one = ESTIMATORS[kind](device="cpu").fit(X, y)
    monkeypatch.setattr(_affine, "fit_affine", solve_from(None))
    from_spread = ESTIMATORS[kind](device="cpu").fit(X, y)
    assert fits[1.0].start == pytest.approx(fits[None].start, rel=1e-9)
    assert fits[1.0].start == pytest.approx(1.0, abs=0.05)
    assert newton_steps[1.0] < newton_steps[None]
    np.testing.assert_allclose(from_one.coef_, from_spread.coef_, atol=1e-6)
    np.testing.assert_allclose(
        from_one.intercept_, from_spread.intercept_, atol=1e-6
    )
    assert from_one.objective_ == pytest.approx(from_spread.objective_, rel=1e-10)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_penalty_strengths_and_mixture_follow_the_definition(kind):
    X, y = make_logits(n_samples=500, n_classes=5, seed=2)
    params = {"lambda_intercept": 0.5, "lambda_diagonal": 2.0, "rho": 0.5, "tau": 0.75}
    if kind == "matrix":
        params["lambda_off_diagonal"] = 3.0
    est = ESTIMATORS[kind](device="cpu", **params).fit(X, y)
    shrink = 5**0.5 / 500**0.75
    expected = {
        "intercept": 0.5 * shrink,
        "diagonal": 2.0 * shrink,
        "off_diagonal": 3.0 * 20**0.5 / 500**0.75 if kind == "matrix" else 0.0,
    }
    for key, value in expected.items():
        assert est.penalty_strengths_[key] == pytest.approx(value, rel=1e-14)
    assert est.mix_weight_ == pytest.approx(1 / 501, rel=1e-14)
    assert est.temperature_ == TemperatureScaling(device="cpu").fit(X, y).temperature_


def test_features_are_the_log_of_the_uniform_mixture_by_hand():
    X, y = make_logits(n_samples=50, n_classes=3, seed=3)
    X[0, 2] = -np.inf
    got = structured_features(X, 2.0, 0.1)
    p = softmax(X / 2.0, axis=1)
    allowed = np.isfinite(X).sum(axis=1, keepdims=True)
    expected = np.log(0.9 * p + 0.1 / allowed)
    expected[0, 2] = -np.inf
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_effective_sample_size_by_hand():
    assert effective_sample_size(np.ones(7)) == pytest.approx(7.0)
    assert effective_sample_size(np.array([1.0, 1.0, 2.0, 0.0])) == pytest.approx(
        16 / 6
    )
    assert effective_sample_size(np.full(5, 1e-310)) == pytest.approx(5.0)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_zero_weight_rows_are_rows_left_out(kind):
    X, y = make_logits(n_samples=400, n_classes=4, seed=4)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    weights[::7] = 0.0
    keep = weights > 0
    weighted = ESTIMATORS[kind](device="cpu", tol=1e-10).fit(
        X, y, sample_weight=weights
    )
    dropped = ESTIMATORS[kind](device="cpu", tol=1e-10).fit(
        X[keep], y[keep], sample_weight=weights[keep]
    )
    assert weighted.mix_weight_ == pytest.approx(dropped.mix_weight_, rel=1e-14)
    np.testing.assert_allclose(
        weighted.predict_proba(X), dropped.predict_proba(X), atol=1e-9
    )


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_strong_penalties_leave_the_temperature_mixture(kind):
    X, y = make_logits(n_samples=400, n_classes=4, seed=5)
    params = {"lambda_intercept": 1e8, "lambda_diagonal": 1e8}
    if kind == "matrix":
        params["lambda_off_diagonal"] = 1e8
    est = ESTIMATORS[kind](device="cpu", **params).fit(X, y)
    mixture = np.exp(structured_features(X, est.temperature_, est.mix_weight_))
    np.testing.assert_allclose(est.predict_proba(X), mixture, atol=1e-6)


def test_vector_map_ignores_a_column_masked_with_minus_inf_when_rho_is_zero():
    X, y = make_logits(n_samples=500, n_classes=4, seed=6)
    masked = np.insert(X, 2, -np.inf, axis=1)
    y_masked = np.where(y >= 2, y + 1, y)
    plain = StructuredVectorScaling(device="cpu", rho=0.0, tol=1e-10).fit(X, y)
    est = StructuredVectorScaling(
        device="cpu", rho=0.0, tol=1e-10, classes=np.arange(5)
    ).fit(masked, y_masked)
    real = [0, 1, 3, 4]
    np.testing.assert_allclose(est.coef_[real], plain.coef_, rtol=1e-8)
    proba = est.predict_proba(masked)
    assert np.all(proba[:, 2] == 0)
    np.testing.assert_allclose(proba[:, real], plain.predict_proba(X), atol=1e-9)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_a_column_masked_everywhere_sits_at_its_penalty_optimum(kind):
    # The loss never sees the column: its scale minimises its penalty alone
    # (1), and objective_ is the stated objective at coef_ (the column kept
    # the solver's start, 1.006 here, and objective_ left its penalty out).
    X, y = make_logits(n_samples=300, n_classes=4, seed=14)
    masked = np.insert(X, 2, -np.inf, axis=1)
    y_masked = np.where(y >= 2, y + 1, y)
    est = ESTIMATORS[kind](device="cpu", tol=1e-10, classes=np.arange(5))
    est.fit(masked, y_masked)
    diagonal = est.coef_ if kind == "vector" else np.diag(est.coef_)
    assert diagonal[2] == 1.0
    # The stated objective: mean NLL of the predictions plus the penalties.
    proba = est.predict_proba(masked)
    nll = -np.mean(np.log(proba[np.arange(len(y)), y_masked]))
    reg_b, reg_d, reg_o = _strengths(est)
    value = nll + reg_b * est.intercept_ @ est.intercept_
    value += reg_d * np.sum((diagonal - 1.0) ** 2)
    if kind == "matrix":
        value += reg_o * (np.sum(est.coef_**2) - np.sum(diagonal**2))
    assert est.objective_ == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_to_torch_matches_predict_proba_with_masks(kind):
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=300, n_classes=5, seed=7)
    rng = np.random.default_rng(0)
    mask = rng.random(X.shape) < 0.3
    mask[np.arange(len(y)), y] = False
    X[mask] = -np.inf
    est = ESTIMATORS[kind](device="cpu").fit(X, y)
    module = est.to_torch()
    assert not list(module.parameters())
    got = module(torch.from_numpy(X)).exp().numpy()
    np.testing.assert_allclose(got, est.predict_proba(X), atol=1e-12)
    assert np.all(got[mask] == 0)


# --- probmetrics: same objective, their solver --------------------------------


def _probmetrics_solution(kind, X, y):
    calibrators = pytest.importorskip("probmetrics.calibrators")
    cal = calibrators.get_calibrator("sms" if kind == "matrix" else "svs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.fit(softmax(X.astype(np.float64), axis=1), y)
    if kind == "vector":
        return cal, np.asarray(cal.v_, float), np.asarray(cal.b_, float)
    return cal, np.asarray(cal.W_[:, :-1], float), np.asarray(cal.W_[:, -1], float)


def _compare_with_probmetrics(kind, X, y):
    cal, coef, intercept = _probmetrics_solution(kind, X, y)
    est = ESTIMATORS[kind](device="cpu").fit(X, y)
    assert 1.0 / cal.ts_.cal_.invtemp_ == pytest.approx(est.temperature_, rel=1e-5)
    features = structured_features(X, est.temperature_, est.mix_weight_)
    # Their features (float32 log of the mixture) agree with ours.
    mixture = cal.ts_.predict_proba(softmax(X.astype(np.float64), axis=1))
    np.testing.assert_allclose(np.log(mixture), features, rtol=1e-5, atol=1e-5)
    ours = objective(features, y, est.coef_, est.intercept_, _strengths(est))
    theirs = objective(features, y, coef, intercept, _strengths(est))
    assert ours <= theirs + 1e-12
    # Same problem: both near its optimum.
    assert theirs - ours < 1e-4


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_objective_at_most_probmetrics_on_synthetic_logits(kind):
    X, y = make_logits(n_samples=800, n_classes=6, seed=8)
    _compare_with_probmetrics(kind, X, y)


@pytest.mark.parametrize("name", ["c10_densenet40_guo", "c100_resnet56_chenyaofo"])
@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_objective_at_most_probmetrics_on_real_logits(kind, name):
    data = load_shared(name)
    _compare_with_probmetrics(kind, data["logits_val"], data["y_val"])


@pytest.mark.parametrize("cls", [StructuredVectorScaling, StructuredMatrixScaling])
@pytest.mark.parametrize("params", [{"rho": 1e300}, {"tau": -1e300}])
def test_exponents_whose_strengths_overflow_are_refused(cls, params):
    logits, y = make_logits(n_samples=200, n_classes=4, seed=5)
    with pytest.raises(ValueError, match="penalty strengths .* overflow"):
        cls(device="cpu", **params).fit(logits, y)


@pytest.mark.parametrize("cls", [StructuredVectorScaling, StructuredMatrixScaling])
def test_tol_zero_stalls_on_rounding_not_at_infinity(cls):
    # Every entry has a ridge, so the optimum is finite: a tolerance of 0,
    # below float64's rounding of the loss, ends in a stall whose warning
    # says so, not that the optimum may lie at infinity.
    from sklearn.exceptions import ConvergenceWarning

    X, y = make_logits(600, 4, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cls(device="cpu", tol=0).fit(X, y)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert messages and all("raise tol" in m for m in messages)
    assert not any("infinity" in m for m in messages)


@pytest.mark.parametrize("cls", [StructuredVectorScaling, StructuredMatrixScaling])
@pytest.mark.parametrize("far", [1e20, 1e100])
def test_one_far_row_with_its_own_label_changes_nothing(cls, far):
    # Weak logits (temperature near 80): the row (far, 0, 0, 0) labelled 0
    # adds exactly nothing to the likelihood. The temperature solver that
    # starts these fits took a step after a bisection for convergence and
    # stopped at T ~7.7e9 (1e20), and the fits moved by 2.9e-2 silently.
    rng = np.random.default_rng(0)
    X = 2.0 * rng.normal(size=(300, 4))
    y = rng.integers(0, 4, 300)
    probabilities = []
    for value in (1e6, far):
        rows = np.r_[[[value, 0.0, 0.0, 0.0]], X]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit = cls().fit(rows, np.r_[0, y])
        probabilities.append(fit.predict_proba(X))
    np.testing.assert_allclose(probabilities[1], probabilities[0], atol=1e-6)
