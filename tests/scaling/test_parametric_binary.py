"""BetaCalibration and QuadraticScaling against betacal, probmetrics and scipy.

References: the betacal package (Kull et al.'s own code), probmetrics'
``quadratic-scaling`` (an unpenalised scikit-learn LogisticRegression), and a
scipy L-BFGS-B solve of the same NLL with its analytic gradient.
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit, log_expit
from sklearn.exceptions import ConvergenceWarning

from sklearn_calib import BetaCalibration, PlattScaling, QuadraticScaling

from ..conftest import load_shared


def _scores(n=2000, seed=0, skew=1.0):
    """Binary scores whose calibration bends differently on each side."""
    rng = np.random.default_rng(seed)
    s = rng.normal(scale=3.0, size=n)
    true_logit = 0.5 * s + 0.15 * skew * s * np.abs(s) - 0.3
    y = (rng.random(n) < expit(true_logit)).astype(int)
    return s, y


def _imdb():
    data = load_shared("imdb_fasttext_labelerrors")
    split = {}
    for part in ("val", "test"):
        z = data[f"logits_{part}"].astype(np.float64)
        split[part] = (z[:, 1] - z[:, 0], data[f"y_{part}"])
    return split


def _nll(eta, y):
    return np.mean(np.logaddexp(0.0, eta) - y * eta)


def _scipy_logistic(features, y, bounds=None):
    """Unpenalised logistic regression (intercept last) by L-BFGS-B, float64."""
    X = np.column_stack([features, np.ones(len(y))])

    def fun(theta):
        eta = X @ theta
        return _nll(eta, y), X.T @ (expit(eta) - y) / len(y)

    result = minimize(
        fun,
        np.zeros(X.shape[1]),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 10_000},
    )
    return result.x, result.fun


def _beta_features(s):
    return np.column_stack([log_expit(s), -log_expit(-s)])


# --- BetaCalibration ---------------------------------------------------------


@pytest.fixture(scope="module")
def betacal():
    module = pytest.importorskip("betacal")
    return module


def _betacal_fit(betacal, s, y, monkeypatch=None):
    """betacal's abm fit; with ``monkeypatch``, its LogisticRegression solves
    to tol 1e-12 (betacal's own code, at solver precision)."""
    if monkeypatch is not None:
        from functools import partial

        from sklearn.linear_model import LogisticRegression

        module = __import__("betacal.beta_calibration", fromlist=["x"])
        monkeypatch.setattr(
            module,
            "LogisticRegression",
            partial(LogisticRegression, tol=1e-12, max_iter=100_000),
        )
    with warnings.catch_warnings():
        # betacal calls warnings.filterwarnings("ignore") on every fit: keep
        # that inside this block.
        reference = betacal.BetaCalibration(parameters="abm").fit(expit(s), y)
    a, b, _ = reference.calibrator_.map_
    c = reference.calibrator_.lr_.intercept_[0]
    return reference, np.array([a, b]), c


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beta_matches_betacal_on_random_scores(betacal, seed, monkeypatch):
    s, y = _scores(seed=seed)
    ours = BetaCalibration().fit(s[:, None], y)
    # betacal as shipped: lbfgs at scikit-learn's default tol=1e-4.
    reference, coef, intercept = _betacal_fit(betacal, s, y)
    np.testing.assert_allclose(
        ours.predict_proba(s[:, None])[:, 1], reference.predict(expit(s)), atol=1e-3
    )
    ours_eta = ours.intercept_[0] + _beta_features(s) @ ours.coef_
    ref_eta = intercept + _beta_features(s) @ coef
    assert _nll(ours_eta, y) <= _nll(ref_eta, y) + 1e-13
    # betacal solved tightly: the same parameters to solver precision. Its L2
    # term (a^2 + b^2) / (2 * 99999999999) on the summed loss moves them by
    # about 1e-12.
    reference, coef, intercept = _betacal_fit(betacal, s, y, monkeypatch)
    np.testing.assert_allclose(ours.coef_, coef, rtol=1e-6)
    np.testing.assert_allclose(ours.intercept_[0], intercept, rtol=1e-6)
    np.testing.assert_allclose(
        ours.predict_proba(s[:, None])[:, 1], reference.predict(expit(s)), atol=1e-9
    )


def test_beta_matches_betacal_on_imdb(betacal, monkeypatch):
    split = _imdb()
    s, y = split["val"]
    ours = BetaCalibration().fit(s[:, None], y)
    reference, coef, intercept = _betacal_fit(betacal, s, y, monkeypatch)
    np.testing.assert_allclose(ours.coef_, coef, rtol=1e-6)
    np.testing.assert_allclose(ours.intercept_[0], intercept, rtol=1e-6, atol=1e-9)
    s_test, _ = split["test"]
    np.testing.assert_allclose(
        ours.predict_proba(s_test[:, None])[:, 1],
        reference.predict(expit(s_test)),
        atol=1e-9,
    )


def test_beta_equals_bounded_scipy_solve():
    s, y = _scores(seed=3)
    ours = BetaCalibration().fit(s[:, None], y)
    theta, loss = _scipy_logistic(
        _beta_features(s), y, bounds=[(0, None), (0, None), (None, None)]
    )
    np.testing.assert_allclose(ours.coef_, theta[:2], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ours.intercept_[0], theta[2], rtol=1e-6, atol=1e-8)
    eta = ours.intercept_[0] + _beta_features(s) @ ours.coef_
    assert _nll(eta, y) <= loss + 1e-14


def test_beta_constraint_active_matches_betacal_and_scipy(betacal, monkeypatch):
    # The positive rate rises again at the low end (logit -0.3 s for s < 0):
    # unconstrained, the coefficient a of ln p (~ s there) is negative, and
    # the constrained fit sets it to 0.
    rng = np.random.default_rng(5)
    s = rng.normal(scale=3.0, size=3000)
    y = (rng.random(3000) < expit(np.where(s < 0, -0.3 * s, s) - 0.5)).astype(int)
    unconstrained, _ = _scipy_logistic(_beta_features(s), y)
    assert unconstrained[0] < 0  # the case this test is about
    ours = BetaCalibration().fit(s[:, None], y)
    assert ours.coef_[0] == 0.0 and ours.coef_[1] > 0
    theta, loss = _scipy_logistic(
        _beta_features(s), y, bounds=[(0, None), (0, None), (None, None)]
    )
    np.testing.assert_allclose(ours.coef_, theta[:2], rtol=1e-6, atol=1e-7)
    _, coef, intercept = _betacal_fit(betacal, s, y, monkeypatch)
    assert coef[0] == 0
    np.testing.assert_allclose(ours.coef_[1], coef[1], rtol=1e-6)
    np.testing.assert_allclose(ours.intercept_[0], intercept, rtol=1e-6)


def test_beta_identity_and_platt_special_cases():
    # Labels drawn from sigmoid(s): the fit is near the identity a = b = 1, c = 0.
    rng = np.random.default_rng(0)
    s = rng.normal(scale=2.0, size=200_000)
    y = (rng.random(s.shape[0]) < expit(s)).astype(int)
    beta = BetaCalibration().fit(s[:, None], y)
    np.testing.assert_allclose(beta.coef_, [1.0, 1.0], atol=0.03)
    np.testing.assert_allclose(beta.intercept_, [0.0], atol=0.03)
    # The features sum to s: with a = b the map is Platt's c + a s.
    features = _beta_features(s[:10])
    np.testing.assert_allclose(features.sum(axis=1), s[:10], rtol=1e-12)


def test_beta_masked_rows_are_certain_and_left_out():
    s, y = _scores(n=500, seed=4)
    logits = np.column_stack([np.zeros_like(s), s])
    plain = BetaCalibration().fit(logits, y)
    masked = np.vstack([logits, [[0.0, -np.inf], [-np.inf, 0.0]]])
    try:
        fitted = BetaCalibration().fit(masked, np.append(y, [0, 1]))
    except ValueError as exc:
        assert "inf" in str(exc)
        pytest.skip("-inf logits are not accepted by the validation yet")
    np.testing.assert_allclose(fitted.coef_, plain.coef_, rtol=1e-10)
    proba = fitted.predict_proba(masked[-2:])
    np.testing.assert_array_equal(proba, [[1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize("cls", [BetaCalibration, QuadraticScaling])
def test_masked_true_class_is_refused_by_row(cls):
    # A row labelled with its masked class has an infinite NLL under every
    # map: it was left out silently, where PlattScaling (the case a = b of
    # beta calibration) and every other likelihood fit raise.
    s, y = _scores(n=200, seed=4)
    logits = np.column_stack([np.zeros_like(s), s])
    row = int(np.flatnonzero(y == 1)[3])
    logits[row, 1] = -np.inf
    match = f"Sample {row} is labelled with a class whose"
    with pytest.raises(ValueError, match=match):
        cls().fit(logits, y)
    with pytest.raises(ValueError, match=match):
        cls().fit(logits[:, 1:], y)  # a score column of -inf
    # With zero weight the row counts for nothing: the same fit as without it.
    weights = np.ones(len(y))
    weights[row] = 0.0
    zero = cls().fit(logits, y, sample_weight=weights)
    dropped = cls().fit(np.delete(logits, row, axis=0), np.delete(y, row))
    np.testing.assert_array_equal(zero.coef_, dropped.coef_)


def test_beta_calibrated_logits_keep_masked_probability_zero():
    s, y = _scores(n=500, seed=4)
    beta = BetaCalibration().fit(s[:, None], y)
    out = beta._calibrated_logits(np.array([[0.0, -np.inf], [-np.inf, 2.0], [0, 1.0]]))
    assert out[0, 1] == -np.inf and out[1, 0] == -np.inf
    assert np.all(np.isfinite(out[2]))


def test_beta_refuses_multiclass():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="Only binary"):
        BetaCalibration().fit(rng.normal(size=(30, 3)), np.arange(30) % 3)


# --- QuadraticScaling ------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_quadratic_equals_scipy_solve(seed):
    s, y = _scores(seed=seed)
    quad = QuadraticScaling().fit(s[:, None], y)
    theta, loss = _scipy_logistic(np.column_stack([s, s * s]), y)
    np.testing.assert_allclose(quad.coef_, theta[:2], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(quad.intercept_[0], theta[2], rtol=1e-6, atol=1e-9)
    eta = quad.intercept_[0] + s * quad.coef_[0] + s * s * quad.coef_[1]
    assert _nll(eta, y) <= loss + 1e-14


def test_quadratic_equals_scipy_on_imdb():
    s, y = _imdb()["val"]
    quad = QuadraticScaling().fit(s[:, None], y)
    theta, loss = _scipy_logistic(np.column_stack([s, s * s]), y)
    np.testing.assert_allclose(quad.coef_, theta[:2], rtol=1e-5)
    eta = quad.intercept_[0] + s * quad.coef_[0] + s * s * quad.coef_[1]
    assert _nll(eta, y) <= loss + 1e-14


# probmetrics passes penalty=None, which scikit-learn 1.8+ deprecates.
@pytest.mark.filterwarnings("ignore:'penalty' was deprecated:FutureWarning")
def test_quadratic_matches_probmetrics():
    pytest.importorskip("probmetrics")
    pytest.importorskip("numba")  # quadratic-scaling imports it from probmetrics.saga
    from probmetrics.calibrators import get_calibrator

    split = _imdb()
    s, y = split["val"]
    s_test, _ = split["test"]
    reference = get_calibrator("quadratic-scaling")
    reference.fit(np.column_stack([1 - expit(s), expit(s)]), y)
    expected = reference.predict_proba(
        np.column_stack([1 - expit(s_test), expit(s_test)])
    )[:, 1]
    quad = QuadraticScaling().fit(s[:, None], y)
    # probmetrics stops lbfgs at scikit-learn's default tolerance.
    np.testing.assert_allclose(
        quad.predict_proba(s_test[:, None])[:, 1], expected, atol=1e-4
    )


def test_quadratic_with_zero_quadratic_term_is_platt():
    # Labels from a logistic model of s: the quadratic coefficient is ~0 and
    # the fit is the maximum-likelihood Platt map.
    rng = np.random.default_rng(0)
    s = rng.normal(scale=2.0, size=100_000)
    y = (rng.random(s.shape[0]) < expit(0.7 * s - 0.2)).astype(int)
    quad = QuadraticScaling().fit(s[:, None], y)
    platt = PlattScaling(smooth_targets=False, device="cpu").fit(s[:, None], y)
    assert abs(quad.coef_[1]) < 3e-3
    np.testing.assert_allclose(
        quad.predict_proba(s[:200, None]), platt.predict_proba(s[:200, None]), atol=5e-3
    )


def test_quadratic_extreme_scores_fit_without_overflow():
    s, y = _scores(n=400, seed=2)
    big = QuadraticScaling().fit(1e200 * s[:, None], y)
    small = QuadraticScaling().fit(s[:, None], y)
    np.testing.assert_allclose(
        big.predict_proba(1e200 * s[:, None]),
        small.predict_proba(s[:, None]),
        rtol=1e-8,
        atol=1e-12,
    )


def test_quadratic_warns_when_stopped_early():
    s, y = _scores(n=400, seed=2)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        QuadraticScaling(max_iter=1).fit(s[:, None], y)


@pytest.mark.parametrize("cls", [BetaCalibration, QuadraticScaling])
def test_separated_scores_warn(cls):
    # No finite optimum: Newton's method met the gradient tolerance on its way
    # to infinity (NLL ~1e-10) and returned silently, where PlattScaling and
    # the affine maps warn.
    s = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    y = (s > 0).astype(int)
    with pytest.warns(UserWarning, match="logits separate the calibration") as record:
        cls().fit(s[:, None], y)
    assert record[0].filename == __file__
    # Overlapping classes: no warning.
    s, y = _scores(n=400, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls().fit(s[:, None], y)


@pytest.mark.parametrize("cls", [BetaCalibration, QuadraticScaling])
@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_quasi_separated_scores_warn(cls, tol):
    # One tie at the boundary (s = 0 holds both labels): the NLL stays at
    # 2 ln 2 / 6, far above SEPARATED_LOSS, yet has no finite optimum; the
    # slope followed tol (13, 22, 27 at tol 1e-6, 1e-10, 1e-12) silently.
    s = np.array([-2.0, -1.0, 0.0, 0.0, 1.0, 2.0])
    y = np.array([0, 0, 0, 1, 1, 1])
    with pytest.warns(UserWarning, match="logits separate the calibration"):
        cls(tol=tol).fit(s[:, None], y)
    # Separated with a loose tol (loss above SEPARATED_LOSS at the stop).
    with pytest.warns(UserWarning, match="logits separate the calibration"):
        cls(tol=tol).fit(np.array([[-3.0], [-1.0], [1.0], [2.0]]), [0, 0, 1, 1])


def test_quadratic_warns_where_an_interval_separates():
    # |s| separates the labels: the quadratic map has no finite optimum
    # (coefficients followed tol silently); beta calibration, monotone in s,
    # has one and must not warn.
    s = np.array([-3.0, -2.0, -0.5, 0.1, 0.5, 2.5, 3.0])
    y = np.array([1, 1, 0, 0, 0, 1, 1])
    with pytest.warns(UserWarning, match="logits separate the calibration"):
        QuadraticScaling(tol=1e-6).fit(s[:, None], y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BetaCalibration(tol=1e-6).fit(s[:, None], y)
        # One sample inside the interval on the wrong side: finite optimum.
        QuadraticScaling().fit(np.append(s, 0.0)[:, None], np.append(y, 1))


@pytest.mark.parametrize("family", ["monotone", "quadratic"])
def test_scores_separate_matches_a_linear_program(family):
    # The exact rule from the order of the scores against an LP: is there a
    # map of the family, not 0 on every sample, with each label's sign or 0?
    from scipy.optimize import linprog

    from sklearn_calib._scaling.beta_quadratic import scores_separate

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 20))
        s = rng.integers(-4, 5, n).astype(float)
        rule = [0.5, np.abs(s) > 1.5, s > 0][trial % 3]
        y = (rng.random(n) < rule).astype(int)
        y = np.where(rng.random(n) < 0.1 * (trial % 2), 1 - y, y)
        if family == "monotone":
            features = np.column_stack([log_expit(s), np.logaddexp(0.0, s)])
            bounds = [(None, None), (0, None), (0, None)]
        else:
            features = np.column_stack([s / 4, (s / 4) ** 2])
            bounds = [(None, None)] * 3
        margins = (2 * y - 1)[:, None] * np.column_stack([np.ones(n), features])
        lp = linprog(
            -margins.sum(axis=0),
            A_ub=np.vstack([-margins, margins]),
            b_ub=np.concatenate([np.zeros(n), np.ones(n)]),
            bounds=bounds,
            method="highs",
        )
        expected = lp.status == 0 and -lp.fun > 1e-7
        assert scores_separate(s, y, np.ones(n), family) == expected, (s, y)


def test_quadratic_tiny_scores_fit_without_numpy_warnings():
    # Scores near 1e-300: coef_ = scaled_coef_ / (scale, scale**2) overflows
    # to inf (documented, and accepted by the state check), but numpy's
    # "overflow encountered in divide" RuntimeWarning leaked from fit.
    s, y = _scores(n=300, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = QuadraticScaling().fit(s[:, None] * 1e-300, y)
    plain = QuadraticScaling().fit(s[:, None], y)
    assert np.isinf(tiny.coef_[1])
    np.testing.assert_allclose(tiny.scaled_coef_, plain.scaled_coef_, rtol=1e-6)
    np.testing.assert_allclose(
        tiny.predict_proba(s[:5, None] * 1e-300),
        plain.predict_proba(s[:5, None]),
        rtol=1e-6,
    )


def test_quadratic_refuses_multiclass():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="Only binary"):
        QuadraticScaling().fit(rng.normal(size=(30, 3)), np.arange(30) % 3)


@pytest.mark.parametrize("cls", [BetaCalibration, QuadraticScaling])
def test_to_torch_keeps_masked_rows_certain(cls):
    torch = pytest.importorskip("torch")
    s, y = _scores(n=500, seed=6)
    calibrator = cls().fit(np.column_stack([np.zeros_like(s), s]), y)
    rows = np.array([[1.0, -np.inf], [-np.inf, 2.0], [3.0, 1.0]])
    with torch.no_grad():
        out = calibrator.to_torch()(torch.from_numpy(rows)).numpy()
    np.testing.assert_array_equal(np.exp(out[:2]), [[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(
        out[2], np.log(calibrator.predict_proba(rows[2:]))[0], rtol=1e-12
    )


@pytest.mark.parametrize("value", [1e20, 1e100])
def test_beta_one_far_score_with_its_own_label_changes_nothing(value):
    # That row's loss is exactly 0 near the optimum, wherever it lies beyond
    # 1e3. Before, its feature -ln(1 - p) set the standardisation (a mean
    # near value / n left the other rows no digits): 0.2 off at 1e20, and at
    # 1e100 Newton crawled 1e-100 a step from the start.
    rng = np.random.default_rng(3)
    score = rng.normal(scale=2.0, size=800)
    y = (rng.random(800) < expit(1.5 * score - 0.3)).astype(int)
    fits = []
    for far in (1e3, value):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            beta = BetaCalibration().fit(np.r_[score, far][:, None], np.r_[y, 1])
        fits.append(beta.predict_proba(score[:, None]))
    np.testing.assert_allclose(fits[1], fits[0], atol=1e-9)


@pytest.mark.parametrize("value", [1e100, -1e100])
def test_beta_one_far_mislabelled_score_reaches_the_optimum(value):
    # A score of 1e100 labelled 0 (-1e100 labelled 1) forces the coefficient
    # of its feature, -ln(1 - p) = 1e100 (ln p = -1e100), to 0: the optimum
    # lies on a face of {a >= 0, b >= 0}. The unconstrained Newton solve
    # stalled (loss 1.9e97) at coefficients that were both positive, and that
    # stalled fit was kept as "the unconstrained optimum is feasible" without
    # trying the faces: the far row's probability 0, with a ConvergenceWarning.
    rng = np.random.default_rng(3)
    score = np.r_[rng.normal(scale=2.0, size=800), value]
    y = (rng.random(801) < expit(1.5 * score - 0.3)).astype(int)
    y[-1] = int(value < 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        beta = BetaCalibration().fit(score[:, None], y)
    features = np.column_stack([log_expit(score), np.logaddexp(0.0, score)])

    def nll(theta):
        eta = features @ theta[:2] + theta[2]
        return np.mean(np.logaddexp(0.0, eta) - y * eta)

    fitted = np.r_[beta.coef_, beta.intercept_]
    free = 0 if value > 0 else 1  # the coefficient of the near feature
    reference = minimize(
        lambda t: nll(np.insert(t, 1 - free, 0.0)),
        np.zeros(2),
        method="BFGS",
        options={"gtol": 1e-10},
    )
    assert fitted[1 - free] == 0.0
    assert nll(fitted) <= reference.fun + 1e-9


@pytest.mark.parametrize("value", [1e20, 1e100, -1e20, -1e100])
def test_quadratic_far_score_its_map_cannot_reach_is_refused(value):
    # The fit of the other rows has a positive quadratic term: one score far
    # beyond them labelled 0 needs that term below -(linear part) / value, a
    # cancellation float64 cannot hold. The Newton solve stalled there, with
    # the row's label at probability 0 and a ConvergenceWarning about
    # separation (at 1e100 also numpy's overflow RuntimeWarnings). Labelled
    # 1, on the side the fit already gives it, the row changes nothing.
    s, y = _scores(n=800, seed=3)
    reference = QuadraticScaling().fit(np.r_[s, 1e3][:, None], np.r_[y, 1])
    assert reference.coef_[1] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        far = QuadraticScaling().fit(np.r_[s, value][:, None], np.r_[y, 1])
        np.testing.assert_allclose(
            far.predict_proba(s[:, None]),
            reference.predict_proba(s[:, None]),
            atol=1e-9,
        )
        with pytest.raises(ValueError, match="QuadraticScaling cannot fit"):
            QuadraticScaling().fit(np.r_[s, value][:, None], np.r_[y, 0])
