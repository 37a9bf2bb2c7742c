"""Bias-corrected temperature scaling against an independent float64 solve."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning

from sklearn_calib import BiasCorrectedTemperatureScaling, TemperatureScaling
from sklearn_calib._scaling.bias_corrected import bcts_objective
from sklearn_calib.utils._testing import make_logits

from ..conftest import load_shared


def _scipy_bcts(logits, y, weights=None):
    """Minimise the same weighted NLL with scipy's BFGS (float64, analytic grad)."""
    n, k = logits.shape
    w = np.ones(n) if weights is None else np.asarray(weights, float)
    w = w / w.sum()
    finite = np.isfinite(logits)
    z = np.where(finite, logits, 0.0)

    def fun(p):
        f = np.where(finite, z * p[0] + p[1:], -np.inf)
        lse = logsumexp(f, axis=1)
        q = np.exp(f - lse[:, None])
        loss = w @ (lse - f[np.arange(n), y])
        g_b = w @ q - np.bincount(y, weights=w, minlength=k)
        g_beta = w @ ((q * z).sum(1) - z[np.arange(n), y])
        return loss, np.r_[g_beta, g_b]

    start = np.r_[1.0, np.zeros(k)]
    res = minimize(fun, start, jac=True, method="BFGS", options={"gtol": 1e-11})
    beta, bias = res.x[0], res.x[1:]
    return 1.0 / beta, bias - bias.mean(), res.fun


def _offset_logits(seed=0, n=800, k=4):
    logits, y = make_logits(n, k, overconfidence=2.0, seed=seed)
    # Per-class offsets that one temperature cannot remove.
    return logits + np.linspace(-1.5, 1.5, k), y


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_scipy(seed):
    logits, y = _offset_logits(seed)
    weights = np.random.default_rng(seed).uniform(0.2, 3.0, len(y))
    est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y, weights)
    temperature, bias, loss = _scipy_bcts(logits, y, weights)
    assert est.temperature_ == pytest.approx(temperature, rel=1e-6)
    np.testing.assert_allclose(est.intercept_, bias, atol=1e-6)
    assert est.objective_ == pytest.approx(loss, rel=1e-9, abs=1e-12)
    assert est.objective_ <= loss + 1e-12
    assert abs(est.intercept_.sum()) < 1e-10


def test_real_logits_match_scipy_and_beat_temperature():
    data = load_shared("kundajelab_cifar10_vgg_labelshift")
    logits, y = data["logits_val"][:3000], data["y_val"][:3000]
    est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)
    temperature, bias, loss = _scipy_bcts(logits, y)
    assert est.temperature_ == pytest.approx(temperature, rel=1e-6)
    # The objective is flat along the biases of these real logits: scipy 1.10's
    # BFGS stops 4e-4 from the optimum there, so the biases are compared at that
    # scale and exactness by the objective, at most scipy's.
    np.testing.assert_allclose(est.intercept_, bias, atol=1e-3)
    assert est.objective_ <= loss + 1e-12
    ts = TemperatureScaling(device="cpu").fit(logits, y)
    ts_nll = np.mean(
        -scipy_log_softmax(logits / ts.temperature_, axis=1)[np.arange(len(y)), y]
    )
    assert est.objective_ <= ts_nll + 1e-12


def test_gradient_and_hessian_are_the_derivatives():
    logits, y = _offset_logits(2, n=200, k=3)
    w = np.full(len(y), 1.0 / len(y))
    point = np.array([0.7, 0.3, -0.1, -0.2])
    loss, grad, hess = bcts_objective(logits, y, w, point[0], point[1:])
    eps = 1e-6
    for j in range(4):
        step = np.zeros(4)
        step[j] = eps
        up = bcts_objective(logits, y, w, *np.split(point + step, [1]))
        down = bcts_objective(logits, y, w, *np.split(point - step, [1]))
        assert (up[0] - down[0]) / (2 * eps) == pytest.approx(grad[j], abs=1e-7)
        np.testing.assert_allclose((up[1] - down[1]) / (2 * eps), hess[j], atol=1e-6)


def test_weight_scale_and_repeated_rows():
    logits, y = _offset_logits(3, n=300)
    counts = np.random.default_rng(3).integers(0, 3, len(y))
    weighted = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y, counts)
    scaled = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y, counts * 1e6)
    repeated = BiasCorrectedTemperatureScaling(device="cpu").fit(
        np.repeat(logits, counts, axis=0), np.repeat(y, counts)
    )
    for other in (scaled, repeated):
        assert other.temperature_ == pytest.approx(weighted.temperature_, rel=1e-8)
        np.testing.assert_allclose(other.intercept_, weighted.intercept_, atol=1e-8)


def test_masked_logits_match_scipy():
    logits, y = _offset_logits(4, n=400)
    rng = np.random.default_rng(4)
    masked = (rng.random(logits.shape) < 0.2) & (np.arange(4) != y[:, None])
    logits[masked] = -np.inf
    est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)
    temperature, bias, _ = _scipy_bcts(logits, y)
    assert est.temperature_ == pytest.approx(temperature, rel=1e-6)
    np.testing.assert_allclose(est.intercept_, bias, atol=1e-6)
    proba = est.predict_proba(logits)
    assert np.all(proba[masked] == 0.0)
    np.testing.assert_allclose(proba.sum(1), 1.0)


def test_masked_true_class_is_refused():
    logits, y = _offset_logits(5, n=100)
    logits[0, y[0]] = -np.inf
    with pytest.raises(ValueError, match="mask"):
        BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)


def test_absent_class_is_held_with_a_warning():
    logits, y = _offset_logits(6, n=400)
    keep = y != 3
    with pytest.warns(UserWarning, match="no calibration sample"):
        est = BiasCorrectedTemperatureScaling(device="cpu", classes=[0, 1, 2, 3]).fit(
            logits[keep], y[keep]
        )
    assert est.intercept_[3] == 0.0
    assert est.intercept_[:3].sum() == pytest.approx(0.0, abs=1e-10)
    assert np.isfinite(est.predict_proba(logits)).all()


def test_string_labels_and_binary_column():
    logits, y = _offset_logits(7, n=300, k=2)
    labels = np.array(["neg", "pos"])[y]
    est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, labels)
    single = BiasCorrectedTemperatureScaling(device="cpu").fit(
        logits[:, 1:] - logits[:, :1], labels
    )
    # The same model: only the bias difference matters.
    assert single.temperature_ == pytest.approx(est.temperature_, rel=1e-7)
    np.testing.assert_allclose(
        single.predict_proba(logits[:, 1:] - logits[:, :1]),
        est.predict_proba(logits),
        atol=1e-8,
    )
    assert set(est.predict(logits)) <= {"neg", "pos"}


def test_max_iter_warns():
    logits, y = _offset_logits(8)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        BiasCorrectedTemperatureScaling(device="cpu", max_iter=1).fit(logits, y)


def test_to_torch_matches_predict_proba():
    torch = pytest.importorskip("torch")
    logits, y = _offset_logits(9)
    logits[0, (y[0] + 1) % 4] = -np.inf
    est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)
    out = est.to_torch()(torch.as_tensor(logits)).exp().numpy()
    np.testing.assert_allclose(out, est.predict_proba(logits), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("dtype, offset", [(np.float32, 1e4), (np.float64, 1e13)])
def test_offset_logits_predict_as_their_gaps(dtype, offset):
    # Found: z / T + b was formed before any shift, rounding to the precision
    # of |z|: float32 logits offset by 1e4 gave log-probabilities 4e-4 off
    # (transform) and 7e-4 off (to_torch), 2.5e-2 and 3.6e-2 at 1e6, although
    # the map is invariant to adding a constant to a row.
    X, y = make_logits(n_samples=600, n_classes=4, seed=3)
    bcts = BiasCorrectedTemperatureScaling(device="cpu").fit(X, y)
    rng = np.random.default_rng(1)
    Z = (rng.normal(scale=4.0, size=(50, 4)) + offset).astype(dtype)
    Z[::3, 1] = -np.inf
    # The shift is exact in float64 (the finite logits are within a factor 2).
    gaps = Z.astype(np.float64) - Z.max(axis=1, keepdims=True)
    # A masked class (-inf) stays -inf: scipy's softmax gives it 0.
    exact = scipy_log_softmax(gaps / bcts.temperature_ + bcts.intercept_, axis=1)
    atol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(bcts.transform(Z), exact, rtol=0, atol=atol)
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        out = bcts.to_torch()(torch.from_numpy(Z)).numpy()
    assert out.dtype == dtype
    np.testing.assert_allclose(out, exact, rtol=0, atol=atol)


def test_hessian_vector_product_and_many_class_path(monkeypatch):
    from sklearn_calib._scaling import bias_corrected as _bias_corrected
    from sklearn_calib._scaling.bias_corrected import bcts_hessp

    logits, y = _offset_logits(10, n=300, k=5)
    w = np.full(len(y), 1.0 / len(y))
    vector = np.random.default_rng(10).normal(size=6)
    _, _, hess = bcts_objective(logits, y, w, 0.8, np.linspace(-1, 1, 5))
    product = bcts_hessp(logits, w, 0.8, np.linspace(-1, 1, 5), vector)
    np.testing.assert_allclose(product, hess @ vector, atol=1e-12)
    exact = BiasCorrectedTemperatureScaling(device="cpu", classes=range(6))
    with pytest.warns(UserWarning, match="no calibration sample"):
        exact.fit(np.c_[logits, logits[:, 0] - 1.0], y)
    monkeypatch.setattr(_bias_corrected, "_MAX_CLASSES", 2)
    cg = BiasCorrectedTemperatureScaling(device="cpu", classes=range(6))
    with pytest.warns(UserWarning, match="no calibration sample"):
        cg.fit(np.c_[logits, logits[:, 0] - 1.0], y)
    assert cg.temperature_ == pytest.approx(exact.temperature_, rel=1e-7)
    np.testing.assert_allclose(cg.intercept_, exact.intercept_, atol=1e-7)


def test_float32_logits_spread_by_1e_40_fit_as_their_units():
    # The fit is scale-free: logits c * z give the map of z (scale beta / c).
    # Spread by 1e-40 in float32, the temperature start beta0 is near 1e40,
    # and the scaled logits overflowed float32 (inf, a stalled solve with a
    # ConvergenceWarning and probabilities 1e-2 off); they are scaled in
    # float64, as the objective computes.
    X, y = make_logits(n_samples=400, n_classes=4, seed=3)
    scale = 1e-40 / np.abs(X).max()
    tiny = (X * scale).astype(np.float32)
    reference = BiasCorrectedTemperatureScaling(device="cpu").fit(
        tiny.astype(np.float64), y
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow, the stalled solve
        fitted = BiasCorrectedTemperatureScaling(device="cpu").fit(tiny, y)
    np.testing.assert_allclose(
        fitted.predict_proba(tiny), reference.predict_proba(tiny), rtol=1e-5
    )


def test_overflowing_objective_is_reported_not_used():
    # A gap of 1e20 next to a gap of 2.7e-284: the temperature solution is
    # ~1e135 (the end of its bracket), and the squared scaled logits of BCTS's
    # Hessian overflow float64 (a hypothesis draw of test_robustness, with a
    # gap of 1, raised numpy's overflow warning; there the temperature solver
    # crawled to ~1e240 before it stopped at its bracket's end).
    X = np.zeros((12, 2))
    X[0, 0], X[1, 0] = 1e20, 2.68968283e-284
    y = np.array([0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("error", RuntimeWarning)
        bcts = BiasCorrectedTemperatureScaling(device="cpu").fit(X, y)
    messages = [str(w.message) for w in caught]
    assert any("did not converge (overflow)" in m for m in messages), messages
    proba = bcts.predict_proba(X)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # The temperature-scaling solution is kept: no bias.
    np.testing.assert_array_equal(bcts.intercept_, 0.0)
    # (TemperatureScaling itself stops at its bracket's end: its own warning.)
    with pytest.warns(UserWarning, match="T -> infinity"):
        temperature = TemperatureScaling(device="cpu").fit(X, y).temperature_
    assert bcts.temperature_ == temperature


@pytest.mark.parametrize("many_classes_path", [False, True])
def test_logits_ranked_against_the_labels_clamp_t_at_its_bound(
    monkeypatch, many_classes_path
):
    # Logits that, with the biases fitted, rank the classes against the
    # labels: the unbounded optimum has a negative scale (a map reversing the
    # ranking, which the fitted-state check refuses). The fit keeps T > 0 at
    # its upper bound, 1e4 times temperature scaling's, with a warning, and
    # the biases solved there, as scipy's bounded solve gives.
    from sklearn_calib._scaling import bias_corrected as _bias_corrected

    if many_classes_path:
        monkeypatch.setattr(_bias_corrected, "_MAX_CLASSES", 2)
    rng = np.random.default_rng(12)
    y = rng.integers(0, 3, 300)
    logits = -2.0 * np.eye(3)[y] + rng.normal(size=(300, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = BiasCorrectedTemperatureScaling(device="cpu").fit(logits, y)
        ts = TemperatureScaling(device="cpu").fit(logits, y)
    assert any("clamped T to its upper bound" in str(w.message) for w in caught)
    assert est.temperature_ == pytest.approx(1e4 * ts.temperature_, rel=1e-12)
    beta = 1.0 / est.temperature_

    def nll(p):
        f = logits * p[0] + p[1:]
        return -scipy_log_softmax(f, axis=1)[np.arange(300), y].mean()

    free = minimize(nll, np.r_[1.0, np.zeros(3)], method="BFGS")
    assert free.x[0] < 0  # the unbounded optimum reverses the ranking
    bounded = minimize(
        nll,
        np.r_[1.0, np.zeros(3)],
        method="L-BFGS-B",
        bounds=[(beta, None)] + [(None, None)] * 3,
        options={"ftol": 1e-15, "gtol": 1e-12},
    )
    assert est.objective_ == pytest.approx(bounded.fun, rel=1e-9)
    assert est.objective_ <= bounded.fun + 1e-12
    np.testing.assert_allclose(
        est.intercept_, bounded.x[1:] - bounded.x[1:].mean(), atol=1e-5
    )
    # The pickled fit loads back (its state check refuses T <= 0).
    import pickle

    pickle.loads(pickle.dumps(est))


def test_uninformative_logits_give_the_class_frequencies():
    # scikit-learn's estimator checks fit on uniform noise (20 rows, 3
    # classes of 6, 8 and 6 rows): temperature scaling clamps T at its
    # bound, and so does BCTS, whose biases are then the log class
    # frequencies. Its step to the bound landed a rounding above it, where
    # the next step had room for 1e-16 of itself: the fit stalled after 2
    # iterations at probabilities of 1/3 each, with a ConvergenceWarning.
    rnd = np.random.RandomState(0)
    X = 3 * rnd.uniform(size=(20, 3))
    y = X[:, 0].astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bcts = BiasCorrectedTemperatureScaling(device="cpu").fit(X, y)
    categories = {w.category for w in caught}
    assert ConvergenceWarning not in categories
    assert any("clamped T to its upper bound" in str(w.message) for w in caught)
    frequencies = np.bincount(y) / len(y)
    np.testing.assert_allclose(bcts.predict_proba(X), np.tile(frequencies, (20, 1)),
                               atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_quasi_separated_logits_warn(tol):
    # Scores z_1 - z_0 = 1, 2, 3, 3, 4, 5 with the labels split at the tie 3:
    # the NLL (2 ln 2 / 6 at the limit) has no finite optimum, T -> 0 with
    # b_1 - b_0 -> +inf, and the fit followed tol silently (P(s = 3.1) 0.77,
    # 0.89, 0.92 at tol 1e-6, 1e-10, 1e-12) where the loss stayed above
    # SEPARATED_LOSS.
    s = np.array([1.0, 2.0, 3.0, 3.0, 4.0, 5.0])
    logits = np.column_stack([np.zeros_like(s), s])
    y = np.array([0, 0, 0, 1, 1, 1])
    with pytest.warns(UserWarning, match="logits separate the calibration"):
        BiasCorrectedTemperatureScaling(device="cpu", tol=tol).fit(logits, y)
    # A sample on the wrong side of the boundary: a finite optimum, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BiasCorrectedTemperatureScaling(device="cpu", tol=tol).fit(
            np.vstack([logits, [0.0, 4.5]]), np.append(y, 0)
        )


def test_scale_and_biases_separate_matches_a_linear_program():
    # The exact rule (difference constraints on the biases, and the biases
    # alone where masks hide a class) against an LP over the directions
    # (beta >= 0, b) along which no sample's loss grows.
    from scipy.optimize import linprog

    from sklearn_calib._scaling.bias_corrected import scale_and_biases_separate

    rng = np.random.default_rng(1)
    for trial in range(300):
        k = int(rng.integers(2, 5))
        n = int(rng.integers(k, 12))
        y = rng.permutation(np.r_[np.arange(k), rng.integers(0, k, n - k)])
        z = rng.integers(-2, 3, (n, k)).astype(float)
        if trial % 3 == 0:
            z[np.arange(n), y] += rng.integers(0, 4)
        elif trial % 3 == 1:
            z = rng.integers(-1, 2, k) + 3.0 * np.eye(k)[y] * rng.integers(0, 2)
        if trial % 5 == 0:
            masked = rng.random((n, k)) < 0.2
            masked[np.arange(n), y] = False
            z[masked] = -np.inf
        rows = []
        for i in range(n):
            for j in np.flatnonzero(np.isfinite(z[i])):
                if j != y[i]:
                    row = np.zeros(k + 1)
                    row[0] = z[i, y[i]] - z[i, j]
                    row[1 + y[i]] += 1.0
                    row[1 + j] -= 1.0
                    rows.append(row)
        margins = np.array(rows)
        lp = linprog(
            -margins.sum(axis=0),
            A_ub=np.vstack([-margins, margins]),
            b_ub=np.concatenate([np.zeros(len(rows)), np.ones(len(rows))]),
            bounds=[(0, None)] + [(None, None)] * k,
            method="highs",
        )
        expected = lp.status == 0 and -lp.fun > 1e-7
        assert scale_and_biases_separate(z, y, np.ones(n)) == expected, (z, y)


def test_far_mislabelled_row_matches_its_fit_at_1e20():
    # A row (1e100, 0, 0, 0, 0) labelled 1: temperature scaling's start
    # stopped at max_iter (T = 2.7e43) and BCTS stalled at an objective of
    # 4.6e49 (1.606 at 1e20) with a flat prior; both now clamp T as at 1e20.
    X, y = make_logits(n_samples=800, n_classes=5, seed=3)
    ya = np.append(y, 1)
    fits = []
    for far in (1e20, 1e100):
        Xa = np.vstack([X, [[far, 0.0, 0.0, 0.0, 0.0]]])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fits.append(BiasCorrectedTemperatureScaling(device="cpu").fit(Xa, ya))
        assert not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    np.testing.assert_allclose(fits[1].objective_, fits[0].objective_, rtol=1e-9)
    np.testing.assert_allclose(fits[1].intercept_, fits[0].intercept_, atol=1e-7)
    np.testing.assert_allclose(
        fits[1].predict_proba(X), fits[0].predict_proba(X), atol=1e-7
    )
