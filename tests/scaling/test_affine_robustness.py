"""The affine calibrators on inputs real models produce.

Masked classes (-inf logits, and the finite sentinels -1e9 and finfo.min),
logits of extreme magnitude, sample weights of any scale, vocabularies far
larger than the calibration set, and an unregularised optimum in a flat valley.

Oracles: the fit on the same data without the masked column; scipy's L-BFGS-B
on the masked objective written here in numpy; temperature scaling; scikit-
learn's sigmoid calibration; exact power-of-two rescalings; hand-computed
Platt targets. No test asserts a wall-clock time: ``deadline`` only turns a
hang into a failure.
"""

import contextlib
import signal
import threading
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from sklearn_calib import (
    DirichletCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared
from .test_affine import reference_fit

AFFINE = [VectorScaling, MatrixScaling, DirichletCalibration]


@contextlib.contextmanager
def deadline(seconds=600):
    """Fail instead of hanging when the block runs longer than ``seconds``.

    Generous on purpose: this guards against a solver loop without exit, not
    against a slow machine.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a loop without exit?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def masked_data(n=300, k=5, seed=0, dtype=np.float64):
    """Logits with a quarter of the entries masked (never the true class).

    The first 10 rows allow their true class only.
    """
    X, y = make_logits(n_samples=n, n_classes=k, seed=seed, dtype=dtype)
    mask = np.random.default_rng(seed).random(X.shape) < 0.25
    mask[:10] = True
    mask[np.arange(n), y] = False
    X = X.copy()
    X[mask] = -np.inf
    return X, y, mask


# --- masked classes -------------------------------------------------------------


@pytest.mark.parametrize("cls", AFFINE)
def test_masked_classes_get_probability_exactly_zero(cls):
    torch = pytest.importorskip("torch")
    X, y, mask = masked_data()
    model = cls(device="cpu").fit(X, y)
    proba = model.predict_proba(X)
    assert np.all(proba[mask] == 0)
    assert np.all(proba[~mask] > 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # Rows that allow one class only give it probability 1.
    np.testing.assert_array_equal(proba[np.arange(10), y[:10]], 1.0)
    log_proba = model.transform(X)
    assert np.all(np.isneginf(log_proba[mask]))
    assert np.all(np.isfinite(log_proba[~mask]))
    module = model.to_torch()
    for dtype in (np.float64, np.float32):
        out = module(torch.from_numpy(X.astype(dtype))).numpy()
        expected = model.transform(X.astype(dtype))
        np.testing.assert_array_equal(np.isneginf(out), mask)
        np.testing.assert_allclose(
            out[~mask], expected[~mask], atol=1e-12 if dtype == np.float64 else 1e-5
        )


@pytest.mark.parametrize("cls", [MatrixScaling, DirichletCalibration])
def test_masked_inputs_enter_the_mixing_as_the_rows_lowest_value(cls):
    # The convention, computed by hand from the fitted parameters: a masked
    # entry of the features (logits, or log-probabilities for Dirichlet)
    # stands in as its row's lowest unmasked feature; its output is -inf.
    X, y, mask = masked_data(seed=1)
    model = cls(device="cpu").fit(X, y)
    features = log_softmax(X, axis=1) if cls is DirichletCalibration else X
    lowest = np.where(mask, np.inf, features).min(axis=1, keepdims=True)
    logits = np.where(mask, lowest, features) @ model.coef_.T + model.intercept_
    logits[mask] = -np.inf
    np.testing.assert_allclose(
        model.predict_proba(X), softmax(logits, axis=1), rtol=1e-12, atol=1e-15
    )


def masked_reference_fit(inputs, mask, y, reg_lambda, reg_mu):
    """scipy's L-BFGS-B on the masked matrix objective, in float64 numpy."""
    n, k = inputs.shape
    onehot = np.eye(k)[y]
    off_diagonal = 1.0 - np.eye(k)
    scale = reg_lambda / (k * (k - 1))

    def objective(params):
        coef, bias = params[: k * k].reshape(k, k), params[k * k :]
        logits = inputs @ coef.T + bias
        logits[mask] = -np.inf
        log_q = log_softmax(logits, axis=1)
        residual = (np.exp(log_q) - onehot) / n
        loss = -log_q[np.arange(n), y].mean()
        loss += scale * np.sum((coef * off_diagonal) ** 2) + reg_mu / k * bias @ bias
        grad_coef = residual.T @ inputs + 2 * scale * coef * off_diagonal
        grad_bias = residual.sum(axis=0) + 2 * reg_mu / k * bias
        return loss, np.concatenate([grad_coef.ravel(), grad_bias])

    start = np.concatenate([np.eye(k).ravel(), np.zeros(k)])
    result = minimize(
        objective,
        start,
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 20000, "maxcor": 30},
    )
    return result.x[: k * k].reshape(k, k), result.x[k * k :]


@pytest.mark.parametrize("cls", [MatrixScaling, DirichletCalibration])
def test_masked_fit_matches_scipy_on_the_same_convention(cls):
    X, y, mask = masked_data(n=400, k=4, seed=2)
    features = log_softmax(X, axis=1) if cls is DirichletCalibration else X
    lowest = np.where(mask, np.inf, features).min(axis=1, keepdims=True)
    inputs = np.where(mask, lowest, features)
    coef, bias = masked_reference_fit(inputs, mask, y, reg_lambda=2.0, reg_mu=0.5)
    model = cls(reg_lambda=2.0, reg_mu=0.5, device="cpu", tol=1e-10).fit(X, y)
    np.testing.assert_allclose(model.coef_, coef, atol=1e-6)
    np.testing.assert_allclose(model.intercept_, bias, atol=1e-6)


def with_column(X, fill, at=2):
    """X with a column of ``fill`` inserted at ``at`` (a class never observed)."""
    return np.insert(X, at, np.asarray(fill, dtype=X.dtype), axis=1)


@pytest.mark.parametrize(
    "fill, dtype",
    [
        (-np.inf, np.float64),
        (np.finfo(np.float64).min, np.float64),
        (-1e9, np.float64),
        (-np.inf, np.float32),
        (np.finfo(np.float32).min, np.float32),
    ],
    ids=["-inf", "finfo64.min", "-1e9", "-inf-float32", "finfo32.min"],
)
def test_vector_scaling_masked_column_gives_the_fit_without_it(fill, dtype):
    X, y = make_logits(n_samples=400, n_classes=5, seed=3, dtype=dtype)
    y_with = np.where(y >= 2, y + 1, y)
    keep = [0, 1, 3, 4, 5]
    without = VectorScaling(device="cpu").fit(X, y)
    with warnings.catch_warnings():
        # The finite sentinels are a class without samples: named in a warning.
        warnings.simplefilter("ignore", UserWarning)
        masked = VectorScaling(device="cpu").fit(with_column(X, fill), y_with)
    # The column never changes another class's probability, so the other
    # classes' fit is the same problem; it is left out of the solve exactly.
    np.testing.assert_allclose(masked.coef_[keep], without.coef_, rtol=1e-12)
    np.testing.assert_allclose(
        masked.intercept_[keep], without.intercept_, rtol=1e-12, atol=1e-15
    )
    proba = masked.predict_proba(with_column(X, fill))
    assert np.all(proba[:, 2] == 0)
    np.testing.assert_allclose(
        proba[:, keep], without.predict_proba(X), rtol=1e-12, atol=1e-15
    )
    # Its own parameters stay at the start: temperature scaling's map.
    temperature = TemperatureScaling(device="cpu").fit(X, y).temperature_
    assert masked.coef_[2] == pytest.approx(1 / temperature, rel=1e-6)
    assert masked.intercept_[2] == 0


@pytest.mark.parametrize(
    "cls, params",
    [
        (MatrixScaling, {}),
        (MatrixScaling, {"reg_lambda": 0.0, "reg_mu": 0.0}),
        (DirichletCalibration, {}),
    ],
    ids=["matrix_odir_auto", "matrix_unregularised", "dirichlet_odir_auto"],
)
def test_matrix_column_masked_everywhere_gives_the_fit_without_it(cls, params):
    # Holds for -inf only (finite sentinels mix into the other classes), and
    # for penalties per entry that do not depend on K: "auto" or zero.
    X, y = make_logits(n_samples=400, n_classes=4, seed=4)
    y_with = np.where(y >= 2, y + 1, y)
    keep = [0, 1, 3, 4]
    without = cls(device="cpu", **params).fit(X, y)
    masked = cls(device="cpu", **params).fit(with_column(X, -np.inf), y_with)
    np.testing.assert_allclose(
        masked.coef_[np.ix_(keep, keep)], without.coef_, rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(
        masked.intercept_[keep], without.intercept_, rtol=1e-12, atol=1e-14
    )
    temperature = TemperatureScaling(device="cpu").fit(X, y).temperature_
    assert masked.coef_[2, 2] == pytest.approx(1 / temperature, rel=1e-6)
    assert np.all(np.delete(masked.coef_[2], 2) == 0)
    assert np.all(np.delete(masked.coef_[:, 2], 2) == 0)
    assert masked.intercept_[2] == 0


@pytest.mark.parametrize("cls", AFFINE + [PlattScaling])
def test_a_masked_true_class_is_refused_by_row(cls):
    k = 2 if cls is PlattScaling else 4
    X, y = make_logits(n_samples=200, n_classes=k, seed=5)
    X = X.copy()
    X[7, y[7]] = -np.inf
    with pytest.raises(ValueError, match="Sample 7 is labelled with a class whose"):
        cls(device="cpu").fit(X, y)
    # With zero weight the row counts for nothing: the same fit as without it.
    weights = np.ones(len(y))
    weights[7] = 0.0
    zero = cls(device="cpu").fit(X, y, sample_weight=weights)
    dropped = cls(device="cpu").fit(np.delete(X, 7, axis=0), np.delete(y, 7))
    np.testing.assert_allclose(zero.coef_, dropped.coef_, rtol=1e-9, atol=1e-12)


def platt_scores(seed=0, n=600):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2 * n, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=1.5, size=2 * n) > 0.3).astype(int)
    classifier = LogisticRegression().fit(X[:n], y[:n])
    return classifier, X[n:], y[n:], classifier.decision_function(X[n:])


@pytest.mark.parametrize("smooth_targets", [True, False])
def test_platt_masked_scores(smooth_targets):
    torch = pytest.importorskip("torch")
    _, _, y, score = platt_scores()
    logits = np.column_stack([np.zeros_like(score), score])
    # A masked class fixes the row's probability: the row is left out of the
    # fit (and of Platt's counts), whatever its score would have been.
    masked = logits.copy()
    negatives = np.flatnonzero(y == 0)[:40]
    positives = np.flatnonzero(y == 1)[:30]
    masked[negatives, 1] = -np.inf  # positive class masked, label negative
    masked[positives, 0] = -np.inf  # negative class masked, label positive
    left_out = np.r_[negatives, positives]
    platt = PlattScaling(smooth_targets=smooth_targets, device="cpu")
    fitted = clone(platt).fit(masked, y)
    reference = clone(platt).fit(np.delete(logits, left_out, 0), np.delete(y, left_out))
    np.testing.assert_allclose(fitted.coef_, reference.coef_, rtol=1e-10)
    np.testing.assert_allclose(fitted.intercept_, reference.intercept_, rtol=1e-10)
    proba = fitted.predict_proba(masked)
    np.testing.assert_array_equal(proba[negatives], [[1.0, 0.0]] * 40)
    np.testing.assert_array_equal(proba[positives], [[0.0, 1.0]] * 30)
    out = fitted.to_torch()(torch.from_numpy(masked)).numpy()
    np.testing.assert_allclose(np.exp(out), proba, atol=1e-12)
    # A single score column of -inf: the positive class is masked.
    single = PlattScaling(device="cpu").fit(score[:, None], y)
    np.testing.assert_array_equal(single.predict_proba([[-np.inf]]), [[1.0, 0.0]])
    out = single.to_torch()(torch.tensor([[-np.inf]], dtype=torch.float64))
    np.testing.assert_array_equal(out.exp().numpy(), [[1.0, 0.0]])


# --- no hang, no crash: extreme magnitudes ------------------------------------------

MAGNITUDES = [1e155, 1e160, 1e300, 1e-300]


@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_vector_and_platt_are_scale_equivariant_at_extreme_magnitudes(magnitude):
    # No penalty: the map fitted on c z is the map fitted on z with w / c.
    for cls, k in ((VectorScaling, 4), (PlattScaling, 2)):
        X, y = make_logits(n_samples=300, n_classes=k, seed=6)
        base = cls(device="cpu").fit(X, y)
        with deadline():
            scaled = cls(device="cpu").fit(X * magnitude, y)
        np.testing.assert_allclose(scaled.coef_ * magnitude, base.coef_, rtol=1e-6)
        np.testing.assert_allclose(scaled.intercept_, base.intercept_, atol=1e-6)
        np.testing.assert_allclose(
            scaled.predict_proba(X * magnitude), base.predict_proba(X), atol=1e-7
        )


@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_matrix_and_dirichlet_fit_at_extreme_magnitudes(magnitude):
    # The ODIR penalty on W is not scale-free: logits c z with penalty lambda
    # are logits z with penalty lambda / c^2. At c = 1e155 that is no penalty
    # on W at all, while the bias penalty (mu) is unchanged.
    X, y = make_logits(n_samples=300, n_classes=4, seed=7)
    shifted = X - X.max(axis=1, keepdims=True)  # what Dirichlet sees, for c >> 1
    for cls, equivalent_input in ((MatrixScaling, X), (DirichletCalibration, shifted)):
        with deadline():
            scaled = cls(device="cpu").fit(X * magnitude, y)
        proba = scaled.predict_proba(X * magnitude)
        assert np.isfinite(proba).all()
        if magnitude < 1:
            continue  # the penalty on W then dominates: W is diagonal
        equivalent = MatrixScaling(reg_lambda=0.0, reg_mu="auto", device="cpu")
        equivalent.fit(equivalent_input, y)
        np.testing.assert_allclose(
            proba, equivalent.predict_proba(equivalent_input), atol=1e-6
        )


def _with_extreme_row(X, y, value):
    # one more row whose label is its maximum by `value`: its loss is exactly
    # 0 (exp underflows) at any positive scale near the optimum
    row = np.zeros((1, X.shape[1]), dtype=X.dtype)
    row[0, 0] = value
    return np.concatenate([X, row]), np.concatenate([y, [0]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "cls, k",
    [
        (VectorScaling, 4),  # Newton
        (VectorScaling, 80),  # L-BFGS
        (MatrixScaling, 4),
        (MatrixScaling, 15),
        (DirichletCalibration, 15),
        (PlattScaling, 2),
    ],
)
def test_one_extreme_row_whose_label_is_its_maximum_changes_nothing(cls, k, dtype):
    # The reference puts that row at 1e3, where its loss is already exactly
    # 0. Summed over rows, 1e20's loss and gradient (sum of log-normalisers
    # minus a label sum; w q x x^T minus (w q x)(q x)^T) kept only its
    # rounding, 1e20 * eps: vector scaling moved by 4e-2 with a false
    # separation warning; and one row of 1e100 rescaled the others towards
    # 0, where the fit stopped at its start: 0.1 to 0.4 in probability.
    X, y = make_logits(n_samples=1500, n_classes=k, seed=12)
    X = X.astype(dtype)
    params = {"smooth_targets": False} if cls is PlattScaling else {}
    reference = cls(device="cpu", **params).fit(*_with_extreme_row(X, y, 1e3))
    for value in (1e20, 1e35) if dtype == np.float32 else (1e20, 1e100):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fitted = cls(device="cpu", **params).fit(*_with_extreme_row(X, y, value))
        np.testing.assert_allclose(
            fitted.predict_proba(X), reference.predict_proba(X), atol=1e-6
        )


def test_a_mislabelled_far_row_reaches_the_optimum():
    # A row (1e6, 0, 0, 0) labelled 1 drives the scale of class 0 to about 0.
    # From the temperature start, the minimiser along Newton's first step lay
    # 1e-7 of the step away; the line search's secant steps, clamped at the
    # bracket's end, shrank it by a tenth a trial and gave up after 30: the
    # fit stopped at its start (mean NLL 1.437 against 0.879) with a warning.
    X, y = make_logits(n_samples=600, n_classes=4, seed=12)
    X, y = _with_extreme_row(X, y, 1e6)
    y[-1] = 1
    n = len(y)

    def nll(theta):
        logits = X * theta[:4] + theta[4:]
        g = softmax(logits, axis=1)
        g[np.arange(n), y] -= 1
        loss = -log_softmax(logits, axis=1)[np.arange(n), y].mean()
        return loss, np.r_[(g * X).mean(axis=0), g.mean(axis=0)]

    reference = minimize(
        nll,
        np.r_[0.0, 1.0, 1.0, 1.0, np.zeros(4)],
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 10000, "ftol": 1e-15, "gtol": 1e-12},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = VectorScaling(device="cpu").fit(X, y)
    loss = nll(np.r_[fitted.coef_, fitted.intercept_])[0]
    assert loss <= reference.fun + 1e-10
    assert abs(fitted.coef_[0]) < 1e-4


def test_a_row_beyond_the_range_of_the_others_is_refused_not_misfitted():
    # 1e300 beside logits of order 1: the two cannot share one float64 scale.
    # The fit stopped at its start (0.1 off) before; now a ValueError.
    X, y = make_logits(n_samples=300, n_classes=4, seed=12)
    with pytest.raises(ValueError, match="magnitude up to 1e\\+300"):
        VectorScaling(device="cpu").fit(*_with_extreme_row(X, y, 1e300))


def test_matrix_penalty_scales_exactly_with_the_logits():
    # Logits 2^40 z (rescaled inside by a power of two) with penalty
    # lambda 2^80: exactly the problem of z with lambda, W divided by 2^40.
    X, y = make_logits(n_samples=300, n_classes=4, seed=8)
    small = MatrixScaling(reg_lambda=2.0, reg_mu=0.5, device="cpu", tol=1e-10)
    small.fit(X, y)
    big = MatrixScaling(reg_lambda=2.0 * 2.0**80, reg_mu=0.5, device="cpu", tol=1e-10)
    big.fit(X * 2.0**40, y)
    np.testing.assert_allclose(big.coef_ * 2.0**40, small.coef_, atol=1e-8)
    np.testing.assert_allclose(big.intercept_, small.intercept_, atol=1e-8)


def test_platt_with_the_smallest_weights_fits_platts_targets():
    # Weights of 5e-324 make the weighted counts N+ and N- vanish: Platt's
    # targets are then (0 + 1) / (0 + 2) = 1 / (0 + 2) = 1/2 for every sample,
    # and the best sigmoid is the constant 1/2 (a = c = 0).
    _, _, y, score = platt_scores(seed=1)
    with deadline():
        platt = PlattScaling(device="cpu").fit(
            score[:, None], y, sample_weight=np.full(len(y), 5e-324)
        )
    np.testing.assert_allclose(platt.coef_, 0.0, atol=1e-9)
    np.testing.assert_allclose(platt.intercept_, 0.0, atol=1e-9)
    np.testing.assert_allclose(platt.predict_proba(score[:, None]), 0.5, atol=1e-9)


def unusable_hessian(value):
    """A stand-in for AffineObjective.hessian: value times the identity."""

    def hessian(self, theta):
        import torch

        n_free = self.n_classes if self.free is None else len(self.free)
        n_params = n_free * self.shape[1]
        return value * torch.eye(n_params, dtype=torch.float64)

    return hessian


@pytest.mark.parametrize("value", [float("nan"), -1.0], ids=["nan", "negative"])
def test_solver_loops_are_bounded_when_the_hessian_is_unusable(monkeypatch, value):
    # A Hessian that is not finite, or not positive definite, exhausts the
    # bounded ridge increases; the solver then takes gradient steps.
    from sklearn_calib._torch._affine_objective import AffineObjective

    monkeypatch.setattr(AffineObjective, "hessian", unusable_hessian(value))
    X, y = make_logits(n_samples=200, n_classes=3, seed=9)
    with deadline(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = VectorScaling(device="cpu", max_iter=20).fit(X, y)
    assert np.isfinite(model.coef_).all()
    assert model.n_iter_ <= 20


def test_refuses_what_float64_cannot_hold_with_a_clear_message():
    # A spread of 1e-300 next to a finite sentinel of -1e9: bringing the
    # spread near 1 would send the sentinel past float64's range.
    X, y = make_logits(n_samples=200, n_classes=3, seed=10)
    X = with_column(X * 1e-300, -1e9)
    with pytest.raises(ValueError, match="cannot fit these logits in float64"):
        VectorScaling(device="cpu").fit(X, y)


def test_spaced_rows_stay_in_range_beyond_float32_precision():
    import torch

    from sklearn_calib._torch._affine_objective import spaced_rows

    for n_rows in (2**24 + 1, 20_000_000, 2**31 + 7):
        rows = spaced_rows(n_rows, 1024, torch.device("cpu"))
        assert rows[0] == 0 and rows[-1] == n_rows - 1
        assert bool((rows[1:] > rows[:-1]).all())


# --- the scale of the sample weights --------------------------------------------------

WEIGHT_SCALES = [1e-300, 1e-5, 1e5, 1e300]


@pytest.mark.parametrize("scale", WEIGHT_SCALES)
@pytest.mark.parametrize(
    "estimator",
    [
        VectorScaling(device="cpu"),
        MatrixScaling(device="cpu"),
        MatrixScaling(reg_lambda=5.0, reg_mu=1.0, device="cpu"),
        DirichletCalibration(device="cpu"),
        PlattScaling(smooth_targets=False, device="cpu"),
    ],
    ids=["vector", "matrix_auto", "matrix_odir", "dirichlet", "platt_plain"],
)
def test_weight_scale_does_not_change_the_fit(estimator, scale):
    k = 2 if isinstance(estimator, PlattScaling) else 3
    X, y = make_logits(n_samples=200, n_classes=k, seed=11)
    weights = np.random.default_rng(0).uniform(0.2, 2.0, size=len(y))
    reference = clone(estimator).fit(X, y, sample_weight=weights)
    scaled = clone(estimator).fit(X, y, sample_weight=weights * scale)
    np.testing.assert_allclose(scaled.coef_, reference.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        scaled.intercept_, reference.intercept_, rtol=1e-9, atol=1e-12
    )


# FrozenEstimator takes no sample_weight: scikit-learn warns that the weights
# only reach the calibration, which is exactly what is compared here.
@pytest.mark.filterwarnings("ignore:Since FrozenEstimator:UserWarning")
@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_platt_targets_follow_the_weighted_counts_as_in_scikit_learn(scale):
    # The documented exception: Platt's targets use the weighted counts as
    # sample sizes, so scaling the weights changes them, as in scikit-learn.
    classifier, X, y, score = platt_scores(seed=2)
    weights = np.random.default_rng(3).uniform(0.5, 3.0, len(y))
    reference = CalibratedClassifierCV(FrozenEstimator(classifier), method="sigmoid")
    reference.fit(X, y, sample_weight=weights * scale)
    platt = PlattScaling(device="cpu").fit(score[:, None], y, weights * scale)
    np.testing.assert_allclose(
        platt.predict_proba(score[:, None]), reference.predict_proba(X), atol=1e-6
    )
    unscaled = PlattScaling(device="cpu").fit(score[:, None], y, weights)
    assert abs(unscaled.intercept_[0] - platt.intercept_[0]) > 1e-4


# --- vocabularies far larger than the calibration set ------------------------------


def vocabulary_logits(n, k, seed=0):
    """Over-confident float32 logits, labels drawn from a softened model."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)).astype(np.float32)
    logits[np.arange(n), rng.integers(0, k, n)] += 3.0
    gumbel = -np.log(-np.log(rng.random((n, k))))
    return 2.5 * logits, np.argmax(logits + gumbel, axis=1)


def test_vector_scaling_iterations_do_not_grow_with_the_vocabulary():
    # With about one sample per class, most classes have no finite optimum
    # (no sample, or one that their own logit separates): kept at the
    # temperature map, they no longer make the solver crawl for ever.
    iterations = []
    for k in (1000, 4000):
        X, y = vocabulary_logits(200, k)
        with pytest.warns(UserWarning, match="determine no finite scale and bias"):
            model = VectorScaling(device="cpu", classes=np.arange(k)).fit(X, y)
        iterations.append(model.n_iter_)
        absent = np.setdiff1d(np.arange(k), y)
        temperature = (
            TemperatureScaling(device="cpu", classes=np.arange(k)).fit(X, y)
        ).temperature_
        np.testing.assert_allclose(model.coef_[absent], 1 / temperature, rtol=1e-5)
        assert np.all(model.intercept_[absent] == 0)
    assert max(iterations) <= 60, iterations


def test_frozen_classes_and_the_rest_match_scipy():
    # Class 3 separated by its own logit, class 4 never observed: both stay
    # at (1/T, 0); the other classes minimise the NLL with those fixed.
    rng = np.random.default_rng(12)
    n, k = 400, 5
    y = rng.integers(0, 3, n)
    y[:20] = 3
    X = rng.normal(size=(n, k)) + 2.0 * np.eye(k)[y]
    X[:20, 3] += 10.0
    with pytest.warns(UserWarning, match="1 have no calibration sample, 1 are"):
        model = VectorScaling(device="cpu", tol=1e-10).fit(X, y)
    beta = 1 / TemperatureScaling(device="cpu").fit(X, y).temperature_
    np.testing.assert_allclose(model.coef_[3:], beta, rtol=1e-7)
    np.testing.assert_array_equal(model.intercept_[3:], 0.0)

    onehot = np.eye(k)[y]

    def objective(params):
        w = np.r_[params[:3], beta, beta]
        b = np.r_[params[3:], 0.0, 0.0]
        log_q = log_softmax(X * w + b, axis=1)
        residual = (np.exp(log_q) - onehot) / n
        grad = np.r_[(residual * X).sum(0)[:3], residual.sum(0)[:3]]
        return -log_q[np.arange(n), y].mean(), grad

    result = minimize(
        objective,
        np.r_[np.full(3, beta), np.zeros(3)],
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 20000},
    )
    np.testing.assert_allclose(model.coef_[:3], result.x[:3], atol=1e-6)
    np.testing.assert_allclose(model.intercept_[:3], result.x[3:], atol=1e-6)


@pytest.mark.parametrize("tol", [1e-5, 1e-10])
def test_classes_without_samples_keep_their_odds_whatever_the_tolerance(tol):
    # Classes 4 and 5 are never observed and no class is separated: a common
    # shift of the other biases would lower them for ever. The fit holds the
    # other biases' mean, which is the fit with the absent classes' biases
    # tied to that mean: scipy solves the tied problem independently.
    rng = np.random.default_rng(13)
    n, k = 600, 6
    y = rng.integers(0, 4, n)
    X = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    with pytest.warns(UserWarning, match="2 have no calibration sample, 0 are"):
        model = VectorScaling(device="cpu", tol=tol, classes=np.arange(k)).fit(X, y)
    beta = (
        1
        / TemperatureScaling(device="cpu", classes=np.arange(k)).fit(X, y).temperature_
    )
    np.testing.assert_allclose(model.coef_[4:], beta, rtol=1e-7)
    onehot = np.eye(k)[y]

    def unpack(params):
        b = params[4:]
        return np.r_[params[:4], beta, beta], np.r_[b, b.mean(), b.mean()]

    def objective(params):
        w, b = unpack(params)
        log_q = log_softmax(X * w + b, axis=1)
        residual = (np.exp(log_q) - onehot) / n
        g_w, g_b = (residual * X).sum(0), residual.sum(0)
        grad = np.r_[g_w[:4], g_b[:4] + g_b[4:].sum() / 4]
        return -log_q[np.arange(n), y].mean(), grad

    result = minimize(
        objective,
        np.r_[np.full(4, beta), np.zeros(4)],
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 20000},
    )
    w, b = unpack(result.x)
    expected = softmax(X * w + b, axis=1)
    atol = 1e-4 if tol == 1e-5 else 1e-7
    np.testing.assert_allclose(model.predict_proba(X), expected, atol=atol)
    # The absent classes keep a probability of the temperature map's order,
    # not one that falls with the tolerance.
    assert model.predict_proba(X)[:, 4:].mean() > 1e-3


# --- an unregularised optimum in a flat valley --------------------------------------


def test_unregularised_matrix_scaling_reaches_the_optimum_of_a_flat_valley():
    # On this set the gradient falls below tol=1e-7 while the NLL is still
    # 7e-4 above its optimum; the Newton decrement keeps the solve going.
    data = load_shared("c10_resnet56_chenyaofo")
    X, y = data["logits_val"].astype(np.float64), data["y_val"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = MatrixScaling(reg_lambda=0.0, reg_mu=0.0, device="cpu").fit(X, y)
    ours = log_loss(y, model.predict_proba(X), labels=np.arange(10))
    _, _, scipy_loss = reference_fit(X, y, "matrix")
    assert ours <= scipy_loss + 1e-9
    tight = MatrixScaling(reg_lambda=0.0, reg_mu=0.0, device="cpu", tol=1e-10)
    tight.fit(X, y)
    assert ours - log_loss(y, tight.predict_proba(X), labels=np.arange(10)) < 1e-7


def test_unregularised_matrix_scaling_warns_when_it_separates_the_calibration_set():
    # 3 classes, 12 samples whose true-class logit is always the largest: the
    # 12 affine parameters separate them and the NLL has no finite optimum.
    rng = np.random.default_rng(0)
    y = np.arange(12) % 3
    X = 5.0 * np.eye(3)[y] + rng.normal(scale=0.1, size=(12, 3))
    with pytest.warns(UserWarning, match="separate the calibration samples"):
        MatrixScaling(reg_lambda=0.0, reg_mu=0.0, device="cpu").fit(X, y)
    # ODIR's penalty gives a finite optimum: no such warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        MatrixScaling(device="cpu").fit(X, y)


@pytest.mark.parametrize("cls", [PlattScaling, VectorScaling])
def test_subnormal_spread_is_a_value_error_that_says_so(cls):
    # Logits that differ by 2e-313 would need a scale beyond float64.
    X = np.zeros((20, 2))
    X[0, 0] = 2.2e-313
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match="subnormal"):
        cls(device="cpu").fit(X, y)
