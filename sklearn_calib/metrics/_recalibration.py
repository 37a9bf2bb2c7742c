"""Logistic recalibration statistics: calibration intercept and slope, and tests.

Cox (1958) fits ``logit P(y = 1) = a + b * logit(p)`` to the outcomes by
maximum likelihood. Two fits, two intercepts, which tools name differently:

- the **calibration slope** ``b`` and the **joint intercept** ``a`` of the
  two-parameter fit (R ``rms::val.prob``'s "Intercept" and "Slope");
- the **calibration intercept** (calibration-in-the-large) ``a`` of the fit
  with ``b`` fixed at 1, the logit of the predictions entering as an offset
  (TRIPOD, Van Calster et al. 2019, ``CalibrationCurves::val.prob.ci.2``).

The likelihoods are maximised by Newton's method with step halving in
float64 (a concave problem: the optimum is exact to rounding), with a
:class:`~sklearn.exceptions.ConvergenceWarning` where there is no finite
optimum (outcomes separated by the predictions, or one outcome only: checked
exactly before the fit, see :func:`separation`) or the iteration limit is
reached. Wald intervals use the inverse observed
information; profile-likelihood intervals solve
``2 (l_max - l_profile(theta)) = chi2_1(level)`` by Brent's method on each
side.

Weights: the estimates are weighted maximum-likelihood estimates. Intervals,
tests and indices treat the weights as relative: they are rescaled to sum to
Kish's effective sample size ``(sum w)^2 / sum w^2``, so that multiplying
every weight by a constant changes nothing and unit weights give the
unweighted statistics.

Probabilities of exactly 0 or 1 have infinite logits; they are clipped to
``[eps, 1 - eps]`` with ``eps`` the float64 machine epsilon (logits of about
+-36), where R's ``val.prob`` drops them from the logistic fits.
"""

import warnings
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from scipy import special, stats
from sklearn.exceptions import ConvergenceWarning

from ..utils._compat import Interval, StrOptions, validate_params
from ..utils._validation import (
    check_grid_entries,
    check_metric_inputs,
    weight_scale,
)
from ._bin_statistics import top_label

LOGIT_EPS = np.finfo(np.float64).eps
_MAX_NEWTON = 100
_MAX_BRACKET = 60

_COMMON = {
    "y_true": ["array-like"],
    "y_prob": ["array-like"],
    "sample_weight": ["array-like", None],
    "labels": ["array-like", None],
}
_MULTICLASS = [StrOptions({"top-label", "classwise"})]


# --- inputs --------------------------------------------------------------------


def binary_problems(y_true, y_prob, sample_weight, labels, multiclass="top-label"):
    """The binary problems ``(p, y, w)`` a statistic is computed on.

    Two columns: the positive (second) column against ``y == classes[1]``.
    More: the top-label confidence against correctness, or (``"classwise"``)
    each column against its class (one-vs-rest). ``p`` and ``w`` are float64;
    ``w`` is rescaled to sum to the effective sample size.

    Returns
    -------
    problems : list of (p, y, w) tuples
    names : list
        The class of each problem, or ``None`` for one problem.
    """
    y_codes, proba, sample_weight, classes = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    if sample_weight is None:
        weights = np.ones(proba.shape[0])
    else:
        weights = effective_weights(sample_weight)
    if proba.shape[1] == 2:
        problems = [(proba[:, 1].astype(np.float64), (y_codes == 1), weights)]
        return problems, [None]
    if multiclass == "top-label":
        confidence, correct = top_label(proba, y_codes)
        return [(confidence.astype(np.float64), correct, weights)], [None]
    problems = [
        (proba[:, k].astype(np.float64), y_codes == k, weights)
        for k in range(proba.shape[1])
    ]
    return problems, list(classes)


def effective_weights(sample_weight):
    """The weights rescaled to sum to Kish's ``(sum w)^2 / sum w^2``.

    ``w * sum(w) / sum(w^2)``, computed on the weights divided by
    :func:`weight_scale` (exact: a power of two), so that the squares can
    neither overflow nor underflow, whatever the scale of the weights.
    """
    scaled = sample_weight / weight_scale(sample_weight)
    return scaled * (np.sum(scaled) / np.sum(scaled**2))


def clipped_logit(p):
    """``logit(p)`` with ``p`` clipped to ``[eps, 1 - eps]``."""
    return special.logit(np.clip(p, LOGIT_EPS, 1.0 - LOGIT_EPS))


# --- weighted logistic likelihood -------------------------------------------------


def log_likelihood(eta, y, w):
    """``sum_i w_i [y_i eta_i - log(1 + exp(eta_i))]``, stably."""
    softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
    return float(np.dot(w, np.where(y, eta, 0.0)) - np.dot(w, softplus))


def _information(X, w, mu):
    """Fisher information ``X^T diag(w mu (1 - mu)) X`` at the means ``mu``."""
    return (X * (w * mu * (1.0 - mu))[:, None]).T @ X


def _score_and_information(X, y, w, eta):
    """Gradient of :func:`log_likelihood` in the coefficients, and its information."""
    mu = special.expit(eta)
    return X.T @ (w * (y - mu)), _information(X, w, mu)


class LogisticFit(NamedTuple):
    coef: np.ndarray
    loglik: float
    covariance: np.ndarray
    residual: np.ndarray


def _newton(X, y, w, offset, beta):
    """Plain Newton iterations; None when they do not converge.

    From a reasonable start (zeros, or the previous solution of a profile)
    Newton's method converges quadratically on this concave problem in a
    few steps; each costs one pass of ``expit`` over the data and no
    likelihood evaluation, which is most of the speed on millions of rows.
    A vanishing Newton step means a vanishing gradient, hence the maximum
    of the concave likelihood, whatever path led there.
    """
    for _ in range(_MAX_NEWTON):
        eta = offset + X @ beta
        gradient, hessian = _score_and_information(X, y, w, eta)
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            return None
        if not np.all(np.isfinite(step)) or np.max(np.abs(step)) > 50:
            return None
        beta = beta + step
        if np.all(np.abs(step) <= 1e-9 * (1.0 + np.abs(beta))):
            eta = offset + X @ beta
            return beta, eta, log_likelihood(eta, y, w)
    return None


def _damped_newton(X, y, w, offset, beta):
    """Newton's method with step halving; warns when it stops short."""
    eta = offset + X @ beta
    loglik = log_likelihood(eta, y, w)
    converged = False
    for _ in range(_MAX_NEWTON):
        gradient, hessian = _score_and_information(X, y, w, eta)
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        # The Newton decrement: the predicted gain of the step.
        decrement = float(gradient @ step)
        # Where every fitted probability rounds to 0 or 1 (a far start: a
        # profile warm-started at a distant point) the information
        # underflows: the step is astronomical, or infinite, or (singular)
        # the least-squares 0, which would pass for convergence. Steps are
        # shortened to a length from which 60 halvings reach the scale of
        # the coefficients, and where Newton's step is no ascent the
        # gradient is climbed from that length.
        limit = 1e4 * (1.0 + float(np.max(np.abs(beta), initial=0.0)))
        if not (decrement > 0 and np.isfinite(decrement)) and np.any(gradient):
            step = gradient * (limit / np.max(np.abs(gradient)))
            decrement = float(gradient @ step)
        length = float(np.max(np.abs(step), initial=0.0))
        scale = 1.0 if not length > limit else limit / length
        for _ in range(60):
            candidate = beta + scale * step
            new_eta = offset + X @ candidate
            new_loglik = log_likelihood(new_eta, y, w)
            if new_loglik >= loglik - 1e-12 * abs(loglik):
                break
            scale /= 2
        else:
            # No step length gains: stay (never take a step that loses
            # likelihood, whose estimates would be garbage).
            break
        beta, eta, gained = candidate, new_eta, new_loglik - loglik
        loglik = new_loglik
        if decrement < 1e-20 * max(1.0, float(np.sum(w))) or (
            abs(gained) <= 1e-15 * abs(loglik) and decrement < 1e-12
        ):
            converged = True
            break
    if not converged:
        warnings.warn(
            "The logistic recalibration fit did not converge in "
            f"{_MAX_NEWTON} Newton steps (the outcomes may be separated by the "
            "predictions); its estimates and intervals are unreliable.",
            ConvergenceWarning,
            stacklevel=4,
        )
    return beta, eta, loglik


def fit_logistic(X, y, w, offset, start=None, covariance=True):
    """Weighted maximum-likelihood logistic regression with an offset.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_params)
        Design (``n_params`` may be 0: the offset alone).
    y : ndarray of bool
    w : ndarray of float64
    offset : ndarray of float64
    start : ndarray of shape (n_params,), default=None
        Starting point (zeros by default).
    covariance : bool, default=True
        Whether to compute the inverse information.

    Returns
    -------
    LogisticFit
        Coefficients, maximised log-likelihood, inverse information and the
        residuals ``w (y - mu)`` at the optimum (for profile derivatives).
    """
    n_params = X.shape[1]
    beta = np.zeros(n_params) if start is None else np.array(start, dtype=float)
    if n_params == 0:
        eta = offset
        loglik = log_likelihood(eta, y, w)
    else:
        result = _newton(X, y, w, offset, beta)
        if result is None:
            result = _damped_newton(X, y, w, offset, beta)
        beta, eta, loglik = result
    mu = special.expit(eta)
    residual = w * (y - mu)
    cov = np.zeros((n_params, n_params))
    if covariance and n_params:
        cov = np.linalg.pinv(_information(X, w, mu))
    return LogisticFit(beta, loglik, cov, residual)


def _profile_interval(profile, estimate, se, loglik_max, level):
    """Ends of ``{theta: 2 (l_max - profile(theta)) <= chi2_1(level)}``.

    Each end is the root of ``r(theta) - z``, ``r`` the signed square root
    of the likelihood-ratio statistic: nearly linear in ``theta``, with the
    derivative ``-l_p'(theta) / r`` known from the profile fit (the
    envelope theorem: ``l_p'`` is the score of ``theta`` at the nuisance
    optimum). Newton's method from the Wald end, kept inside a bracket
    (bisection when a step leaves it), converges in a few profile fits.
    """
    critical = np.sqrt(stats.chi2.ppf(level, 1))
    se = se if np.isfinite(se) and se > 0 else 1.0

    def f(theta):
        value, slope = profile(theta)
        root = np.sqrt(max(0.0, 2.0 * (loglik_max - value)))
        derivative = -slope / root if root > 0 else np.nan
        return root - critical, derivative

    ends = []
    for direction in (-1.0, 1.0):
        # inside: f < 0 (within the interval); outside: f > 0.
        inside, outside = estimate, None
        theta = estimate + direction * critical * se
        found = None
        for _ in range(_MAX_BRACKET + _MAX_NEWTON):
            value, derivative = f(theta)
            # |f| of 1e-9 moves theta by about 1e-9 standard errors, above
            # the rounding noise of a log-likelihood summed over many rows.
            if abs(value) < 1e-9:
                found = theta
                break
            if value < 0:
                inside = theta
            else:
                outside = theta
            if outside is not None and abs(outside - inside) < 1e-12 * (
                se + abs(theta)
            ):
                found = theta
                break
            step_ok = np.isfinite(derivative) and derivative != 0
            candidate = theta - value / derivative if step_ok else np.nan
            if outside is None:
                # Not bracketed yet: Newton's step, or double the distance
                # (also where Newton's step leaves the search range: on a
                # flat profile its derivative is rounding noise, and the
                # end is declared infinite only when doubling leaves it).
                far = 1e6 * (se + abs(estimate))
                beyond = (candidate - inside) * direction > 0
                if not (
                    np.isfinite(candidate)
                    and beyond
                    and abs(candidate - estimate) <= far
                ):
                    candidate = estimate + 2 * (theta - estimate)
                if abs(candidate - estimate) > far:
                    break
            else:
                lo, hi = sorted((inside, outside))
                if not (np.isfinite(candidate) and lo < candidate < hi):
                    candidate = (inside + outside) / 2
            theta = candidate
        ends.append(direction * np.inf if found is None else found)
    return ends[0], ends[1]


class LogisticCalibration(NamedTuple):
    """Calibration intercept and slope with intervals (see
    :func:`logistic_calibration`).

    Attributes
    ----------
    intercept, intercept_low, intercept_high : float or ndarray
        Calibration intercept (calibration-in-the-large): ``a`` of
        ``logit P(y=1) = a + logit(p)``, the slope fixed at 1 (an offset).
        0 is ideal; below 0 the predictions are too high on average.
    slope, slope_low, slope_high : float or ndarray
        Calibration slope ``b`` of ``logit P(y=1) = a + b logit(p)``. 1 is
        ideal; below 1 the predictions are too extreme (overfitting), above
        1 too moderate.
    joint_intercept, joint_intercept_low, joint_intercept_high : float or ndarray
        ``a`` of that two-parameter fit (``rms::val.prob``'s "Intercept").
    """

    intercept: float
    intercept_low: float
    intercept_high: float
    slope: float
    slope_low: float
    slope_high: float
    joint_intercept: float
    joint_intercept_low: float
    joint_intercept_high: float


def separation(x, y, w):
    """Why ``logit P(y = 1) = a + b x`` has no finite maximum, or None.

    The maximum-likelihood estimates exist unless the outcomes are
    completely or quasi-completely separated (Albert and Anderson 1984):
    unless one threshold on ``x`` puts every event on one side and every
    non-event on the other, ties at the threshold allowed, or one outcome is
    missing. There the likelihood keeps rising as ``|b|`` (or ``|a|``)
    grows, its gradient vanishes along the way, and Newton's method stops
    at an arbitrary finite point. Rows of zero weight do not count.
    """
    counted = w > 0
    x, y = x[counted], y[counted]
    if not np.any(y) or np.all(y):
        return (
            "only one outcome occurs (every sample of positive weight is an "
            "event, or none is: with the top-label confidence, every prediction "
            "right, or every one wrong), so the calibration intercept and the "
            "joint fit have no finite maximum-likelihood estimate"
        )
    events, others = x[y], x[~y]
    if np.all(x == x[0]):
        return None
    if others.max() <= events.min() or events.max() <= others.min():
        return (
            "the predictions separate the outcomes (every event has a "
            "predicted probability at or beyond every non-event's, on one "
            "side), so the calibration slope's maximum-likelihood estimate "
            "is infinite"
        )
    return None


def warn_if_separated(x, y, w, stacklevel):
    """A :class:`~sklearn.exceptions.ConvergenceWarning` if :func:`separation`."""
    reason = separation(x, y, w)
    if reason is not None:
        warnings.warn(
            f"The logistic recalibration fit has no finite optimum: {reason}. "
            "The estimates, intervals and tests reported are where Newton's "
            "method stopped and are unreliable.",
            ConvergenceWarning,
            stacklevel=stacklevel + 1,
        )


def one_prediction(x, w):
    """Whether the samples of positive weight share one prediction.

    Then ``a + b x`` is one number: the slope and the joint intercept are
    not identifiable (R's ``glm`` reports the slope as NA), and Newton's
    least-squares step stops at an arbitrary point of a line of optima.
    """
    counted = x[w > 0]
    return counted.size > 0 and bool(np.all(counted == counted[0]))


def _citl_profile(theta, x, y, w):
    """Log-likelihood and score of the calibration intercept fixed at theta."""
    no_columns = np.empty((x.shape[0], 0))
    fit = fit_logistic(no_columns, y, w, theta + x, covariance=False)
    return fit.loglik, fit.residual.sum()


def _logistic_calibration_one(p, y, w, interval, confidence_level):
    x = clipped_logit(p)
    warn_if_separated(x, y, w, stacklevel=4)
    ones = np.ones_like(x)
    zeros = np.zeros_like(x)
    z = stats.norm.isf((1 - confidence_level) / 2)
    # Calibration-in-the-large: the intercept with the logit as an offset.
    citl = fit_logistic(ones[:, None], y, w, x)
    a0, se0 = citl.coef[0], np.sqrt(citl.covariance[0, 0])
    if one_prediction(x, w):
        warnings.warn(
            "Every sample of positive weight has the same predicted "
            "probability, so the calibration slope and the joint intercept "
            "are not identifiable: they and their intervals are NaN (the "
            "calibration intercept is not affected).",
            UserWarning,
            stacklevel=4,
        )
        if interval == "wald":
            ends = (a0 - z * se0, a0 + z * se0)
        else:
            ends = _profile_interval(
                lambda theta: _citl_profile(theta, x, y, w), a0, se0,
                citl.loglik, confidence_level,
            )  # fmt: skip
        return LogisticCalibration(a0, *ends, *([np.nan] * 6))
    # The joint fit of intercept and slope.
    joint = fit_logistic(np.column_stack([ones, x]), y, w, zeros, start=[0.0, 1.0])
    (a, b), se = joint.coef, np.sqrt(np.diag(joint.covariance))
    if interval == "wald":
        return LogisticCalibration(
            a0, a0 - z * se0, a0 + z * se0,
            b, b - z * se[1], b + z * se[1],
            a, a - z * se[0], a + z * se[0],
        )  # fmt: skip
    # Profile likelihoods, each warm-started at the last solution.
    starts = {"a": np.array([b]), "b": np.array([a])}

    def citl_profile(theta):
        return _citl_profile(theta, x, y, w)

    def slope_profile(theta):
        fit = fit_logistic(
            ones[:, None], y, w, theta * x, start=starts["b"], covariance=False
        )
        starts["b"] = fit.coef
        return fit.loglik, fit.residual @ x

    def intercept_profile(theta):
        fit = fit_logistic(
            x[:, None], y, w, theta * ones, start=starts["a"], covariance=False
        )
        starts["a"] = fit.coef
        return fit.loglik, fit.residual.sum()

    level = confidence_level
    citl_ends = _profile_interval(citl_profile, a0, se0, citl.loglik, level)
    slope_ends = _profile_interval(slope_profile, b, se[1], joint.loglik, level)
    a_ends = _profile_interval(intercept_profile, a, se[0], joint.loglik, level)
    return LogisticCalibration(a0, *citl_ends, b, *slope_ends, a, *a_ends)


def _scalar(value):
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


def _stack(results, names, cls):
    if names == [None]:
        return cls(*(_scalar(v) for v in results[0]))
    return cls(
        *(np.array(column, dtype=float) for column in zip(*results, strict=True))
    )


@validate_params(
    {
        **_COMMON,
        "multiclass": _MULTICLASS,
        "interval": [StrOptions({"wald", "profile"})],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
    },
    prefer_skip_nested_validation=True,
)
def logistic_calibration(
    y_true,
    y_prob,
    *,
    multiclass="top-label",
    interval="profile",
    confidence_level=0.95,
    sample_weight=None,
    labels=None,
):
    """Calibration intercept and slope by logistic recalibration (Cox 1958).

    Fits ``logit P(y = 1) = a + b * logit(p)`` by maximum likelihood:

    - ``intercept``: ``a`` with ``b`` fixed at 1 (``logit(p)`` as an
      offset), the **calibration intercept** or calibration-in-the-large of
      TRIPOD and Van Calster et al.; 0 is ideal, negative means the
      predicted risks are too high on average;
    - ``slope``: ``b`` of the two-parameter fit, the **calibration slope**;
      1 is ideal, below 1 the predictions are too extreme (typical of
      overfitting), above 1 too moderate;
    - ``joint_intercept``: ``a`` of the two-parameter fit, which R
      ``rms::val.prob`` reports as "Intercept" (it is not
      calibration-in-the-large unless the slope is 1).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    multiclass : {"top-label", "classwise"}, default="top-label"
        With more than two classes: the top-label confidence against
        correctness, or each class's probability against that class
        (one-vs-rest; the result holds one value per class). Two classes:
        the positive (second) class in either case.
    interval : {"profile", "wald"}, default="profile"
        Profile-likelihood intervals (accurate on small samples and near the
        boundary), or Wald intervals ``estimate +- z * se``.
    confidence_level : float, default=0.95
        Nominal coverage of the intervals.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights, treated as relative (see the module notes:
        rescaled to sum to the effective sample size).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    result : LogisticCalibration
        Named tuple of the three estimates and the ends of their intervals;
        floats, or arrays of one entry per class for ``"classwise"``. The
        slope and the joint intercept are NaN, with a warning, where every
        sample of positive weight has the same prediction.

    See Also
    --------
    spiegelhalter_test, cox_calibration_test, validation_report

    References
    ----------
    .. [1] D. R. Cox, "Two further applications of a model for binary
       regression", Biometrika 45, 1958.
    .. [2] B. Van Calster, D. J. McLernon, M. van Smeden, L. Wynants and
       E. W. Steyerberg, "Calibration: the Achilles heel of predictive
       analytics", BMC Medicine 17, 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import logistic_calibration
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.05, 0.95, 2000)
    >>> y = rng.uniform(size=2000) < p
    >>> result = logistic_calibration(y, p)
    >>> bool(result.slope_low < 1 < result.slope_high)
    True
    """
    problems, names = binary_problems(y_true, y_prob, sample_weight, labels, multiclass)
    # A loop, not a comprehension: its warnings' stacklevel then names the
    # caller's line on every Python version.
    results = []
    for p, y, w in problems:
        results.append(_logistic_calibration_one(p, y, w, interval, confidence_level))
    return _stack(results, names, LogisticCalibration)


class CalibrationTest(NamedTuple):
    """Statistic and p-value of a calibration test."""

    statistic: float
    pvalue: float


def _spiegelhalter_one(p, y, w):
    numerator = np.dot(w, (y - p) * (1.0 - 2.0 * p))
    variance = np.dot(w**2, (1.0 - 2.0 * p) ** 2 * p * (1.0 - p))
    if variance <= 0:
        # Every prediction is 0, 1/2 or 1. An outcome that a prediction of
        # 0 or 1 ruled out refutes calibration outright: z is infinite (R's
        # Spi divides by 0 too). Otherwise z is 0 / 0.
        if numerator == 0:
            return CalibrationTest(np.nan, np.nan)
        return CalibrationTest(np.copysign(np.inf, numerator), 0.0)
    z = numerator / np.sqrt(variance)
    return CalibrationTest(z, 2 * stats.norm.sf(abs(z)))


@validate_params(
    {**_COMMON, "multiclass": _MULTICLASS}, prefer_skip_nested_validation=True
)
def spiegelhalter_test(
    y_true, y_prob, *, multiclass="top-label", sample_weight=None, labels=None
):
    r"""Spiegelhalter's z-test of calibration (1986).

    .. math::

        z = \frac{\sum_i (y_i - p_i)(1 - 2 p_i)}
        {\sqrt{\sum_i (1 - 2 p_i)^2 p_i (1 - p_i)}},

    standard normal when the probabilities are calibrated; two-sided
    p-value. Weights enter as ``w_i`` in the numerator and ``w_i^2`` in the
    variance. Where every prediction is 0, 1/2 or 1 the variance is 0: an
    outcome that a prediction of 0 or 1 ruled out makes ``z`` infinite
    (p-value 0), and otherwise ``z`` and its p-value are NaN. It tests the
    Brier score against its expectation under calibration, so it has little
    power against miscalibration that the Brier score does not see; report
    it beside the calibration curve.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    multiclass : {"top-label", "classwise"}, default="top-label"
        As in :func:`logistic_calibration`.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    result : CalibrationTest
        ``(statistic, pvalue)``: the z statistic and its two-sided p-value
        (arrays of one entry per class for ``"classwise"``).

    References
    ----------
    .. [1] D. J. Spiegelhalter, "Probabilistic prediction in patient
       management and clinical trials", Statistics in Medicine 5, 1986.

    Examples
    --------
    >>> from sklearn_calib.metrics import spiegelhalter_test
    >>> result = spiegelhalter_test([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3])
    >>> round(result.statistic, 4), round(result.pvalue, 4)
    (-1.005, 0.3149)
    """
    problems, names = binary_problems(y_true, y_prob, sample_weight, labels, multiclass)
    results = [_spiegelhalter_one(p, y, w) for p, y, w in problems]
    return _stack(results, names, CalibrationTest)


class HosmerLemeshowTest(NamedTuple):
    """Hosmer-Lemeshow statistic, p-value and degrees of freedom."""

    statistic: float
    pvalue: float
    dof: int


def _hosmer_lemeshow_one(p, y, w, n_groups, external=False):
    from ._calibration import calibration_curve

    # Its two class-wise groups of n_groups bins.
    check_grid_entries("n_groups", n_groups, 2 * (n_groups + 1), what="groups")
    curve = calibration_curve(
        y, p, n_bins=n_groups, strategy="quantile", multiclass="classwise",
        sample_weight=None if np.all(w == 1) else w, labels=[False, True],
    )  # fmt: skip
    count = curve.count[1]
    occupied = count > 0
    n_g = count[occupied]
    observed = curve.accuracy[1][occupied] * n_g
    expected = curve.confidence[1][occupied] * n_g
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = (observed - expected) ** 2 / (expected * (1.0 - expected / n_g))
    # A group predicted all at 0 (or all at 1) has no variance: it adds
    # nothing where its outcomes agree (0 / 0), and an outcome it ruled out
    # makes the statistic infinite (it was dropped, as if it agreed).
    statistic = float(np.sum(np.where(np.isnan(terms), 0.0, terms)))
    # Predictions fitted on these samples use up two degrees of freedom;
    # predictions from elsewhere (external validation) none.
    dof = int(occupied.sum()) - (0 if external else 2)
    if dof < 1:
        warnings.warn(
            f"The Hosmer-Lemeshow test has {int(occupied.sum())} non-empty "
            "group(s) of risk, so no degree of freedom (non-empty groups - 2): "
            "its p-value is NaN. It needs at least 3 distinct predicted "
            "probabilities among the samples of positive weight (or "
            "external=True, for predictions not fitted on these samples).",
            UserWarning,
            stacklevel=4,
        )
        return HosmerLemeshowTest(statistic, np.nan, dof)
    return HosmerLemeshowTest(statistic, float(stats.chi2.sf(statistic, dof)), dof)


@validate_params(
    {
        **_COMMON,
        "n_groups": [Interval(Integral, 3, None, closed="left")],
        "multiclass": _MULTICLASS,
        "external": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def hosmer_lemeshow_test(
    y_true,
    y_prob,
    *,
    n_groups=10,
    multiclass="top-label",
    sample_weight=None,
    labels=None,
    external=False,
):
    r"""Hosmer-Lemeshow goodness-of-fit test ("C" statistic, groups of risk).

    .. math::

        H = \sum_g \frac{(O_g - E_g)^2}{E_g (1 - E_g / n_g)},

    over ``n_groups`` equal-mass groups of the predicted probability (the
    library's quantile bins, ``(lo, hi]``, empty groups skipped), with
    ``O_g`` the observed and ``E_g`` the expected number of events and
    ``n_g`` the group size; chi-square with (non-empty groups - 2) degrees
    of freedom for a model fitted on these samples, with as many degrees of
    freedom as non-empty groups with ``external=True``. A group whose
    predictions are all 0 (or all 1) adds 0 where its outcomes agree with
    them and makes ``H`` infinite (p-value 0) where one does not.

    .. warning::

       The statistic depends on the number and the placement of the groups
       (ties and another quantile rule can change the p-value), has low power
       on small samples and rejects trivial miscalibration on large ones.
       Van Calster et al. (2019) and TRIPOD discourage it; report the
       calibration intercept, slope and a smooth calibration curve instead.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_groups : int, default=10
        Number of groups (deciles of risk by default).
    multiclass : {"top-label", "classwise"}, default="top-label"
        As in :func:`logistic_calibration`.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights (relative: rescaled to the effective sample size).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.
    external : bool, default=False
        Whether the predictions come from a model not fitted on these
        samples (external validation, or a held-out calibration set). Fitting
        on the samples uses up two degrees of freedom (Hosmer and Lemeshow's
        g - 2); predictions from elsewhere do not, and their statistic follows
        chi-square with g degrees of freedom when they are calibrated. With
        g - 2 there, a test at 5 % rejected 11-12 % of calibrated samples
        (simulated; ``tests/test_validation_stats.py``).

    Returns
    -------
    result : HosmerLemeshowTest
        ``(statistic, pvalue, dof)``; the p-value is NaN, with a warning,
        where fewer than 3 groups are non-empty.

    References
    ----------
    .. [1] D. W. Hosmer and S. Lemeshow, "Goodness of fit tests for the
       multiple logistic regression model", Communications in Statistics 9,
       1980.
    .. [2] D. W. Hosmer, S. Lemeshow and R. X. Sturdivant, "Applied Logistic
       Regression", 3rd ed., Wiley, 2013 (external validation: g degrees of
       freedom).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import hosmer_lemeshow_test
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=1000)
    >>> result = hosmer_lemeshow_test(rng.uniform(size=1000) < p, p)
    >>> result.dof
    8
    """
    problems, names = binary_problems(y_true, y_prob, sample_weight, labels, multiclass)
    # A loop, not a comprehension: its warnings' stacklevel then names the
    # caller's line on every Python version.
    results = []
    for p, y, w in problems:
        results.append(_hosmer_lemeshow_one(p, y, w, n_groups, external))
    return _stack(results, names, HosmerLemeshowTest)


def _cox_one(p, y, w, joint=None):
    x = clipped_logit(p)
    if joint is None:
        warn_if_separated(x, y, w, stacklevel=4)
        ones = np.ones_like(x)
        joint = fit_logistic(
            np.column_stack([ones, x]), y, w, np.zeros_like(x), start=[0.0, 1.0]
        )
    statistic = max(0.0, 2.0 * (joint.loglik - log_likelihood(x, y, w)))
    return CalibrationTest(statistic, float(stats.chi2.sf(statistic, 2)))


@validate_params(
    {**_COMMON, "multiclass": _MULTICLASS}, prefer_skip_nested_validation=True
)
def cox_calibration_test(
    y_true, y_prob, *, multiclass="top-label", sample_weight=None, labels=None
):
    """Cox's likelihood-ratio test of calibration intercept 0 and slope 1 jointly.

    The statistic is twice the log-likelihood gain of the fit
    ``logit P(y = 1) = a + b logit(p)`` over ``a = 0, b = 1`` (the
    predictions taken as they are); chi-square with 2 degrees of freedom
    under calibration. It is ``U:Chi-sq`` of R ``rms::val.prob``.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    multiclass : {"top-label", "classwise"}, default="top-label"
        As in :func:`logistic_calibration`.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights (relative: rescaled to the effective sample size).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    result : CalibrationTest
        ``(statistic, pvalue)``.

    References
    ----------
    .. [1] D. R. Cox, "Two further applications of a model for binary
       regression", Biometrika 45, 1958.

    Examples
    --------
    >>> from sklearn_calib.metrics import cox_calibration_test
    >>> result = cox_calibration_test([0, 1, 1, 0, 1], [0.1, 0.8, 0.6, 0.5, 0.4])
    >>> round(result.statistic, 4)
    0.6919
    """
    problems, names = binary_problems(y_true, y_prob, sample_weight, labels, multiclass)
    # A loop, not a comprehension: its warnings' stacklevel then names the
    # caller's line on every Python version.
    results = []
    for p, y, w in problems:
        results.append(_cox_one(p, y, w))
    return _stack(results, names, CalibrationTest)
