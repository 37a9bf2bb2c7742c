"""Parametric maps of a binary score: beta calibration and quadratic scaling.

Both read a binary problem as its score ``s = z_1 - z_0`` (the logit of the
positive class; a single score column is ``s`` itself), model the calibrated
positive-class logit as a linear function of two features of ``s`` plus an
intercept, and fit it by exact (unpenalised) maximum likelihood: a logistic
regression with three parameters, solved by Newton's method in float64 numpy.

A row with a masked logit (``-inf``: probability exactly 0) is a certain
prediction: it carries no information about the map, is left out of the fit,
and keeps its probability 0 for the masked class; a row labelled with its
masked class is refused (its NLL is infinite under every map).
"""

import functools
import re
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy.special import expit, log_expit
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseCalibrator
from ..utils._compat import Interval, check_is_fitted
from ..utils._fitted_state import (
    check_state_array,
    check_state_float,
    check_state_int,
    fail_state,
)
from ..utils._math import armijo_step, weighted_quantiles
from ..utils._validation import check_true_class_unmasked
from .affine import SEPARATED_LOSS


def binary_score(logits, name):
    """The score ``z_1 - z_0`` of two logit columns, in float64.

    More columns are refused with a message naming the calibrator.
    """
    if logits.shape[1] != 2:
        raise ValueError(
            f"Only binary classification is supported. {name} calibrates one score "
            f"column or two logit columns, but X has {logits.shape[1]} logit "
            "columns (classes); use TemperatureScaling, VectorScaling or "
            "DirichletCalibration for multiclass logits."
        )
    with np.errstate(invalid="ignore"):
        return logits[:, 1].astype(np.float64) - logits[:, 0].astype(np.float64)


@dataclass
class LogisticFit:
    """Result of :func:`fit_logistic`."""

    coef: np.ndarray
    intercept: float
    loss: float
    n_iter: int
    status: str  # "converged", "max_iter" or "stalled"
    gradient: float
    # Largest loss of a row far beyond the others (see fit_logistic), 0.0 when
    # there is none: such a row left at a loss above log 2 by an unconverged
    # solve is on the wrong side of the map, which float64 could not fix.
    far_loss: float = 0.0


def _loss_grad(X, y, v, theta):
    eta = X @ theta
    loss = float(v @ (np.logaddexp(0.0, eta) - y * eta))
    p = expit(eta)
    return loss, p, X.T @ (v * (p - y))


def fit_logistic(features, y, weights, *, tol, max_iter):
    """Minimise the weighted mean NLL of ``sigmoid(features @ coef + intercept)``.

    Newton's method with a backtracking (Armijo) line search on standardised
    features (each column centred on its weighted median and divided by its
    weighted median absolute deviation, an exact reparametrisation that makes
    the Hessian well conditioned); the solution is mapped back to the
    original features. Median and deviation, not mean and standard
    deviation: one row far out (a score of 1e20, whose feature -ln(1 - p) is
    1e20) would set those, and centring on a mean near 1e17 left the other
    rows no digits. The iteration stops when
    the largest absolute entry of the gradient (in the standardised
    parameters) is at most ``tol``, when no step decreases the loss any more in
    float64 (``"stalled"``), or after ``max_iter`` Newton steps.

    Parameters
    ----------
    features : ndarray of shape (n_samples, n_features), float64, finite
    y : ndarray of shape (n_samples,) in {0, 1}
    weights : ndarray of shape (n_samples,), non-negative, positive sum
    tol : float
    max_iter : int

    Returns
    -------
    LogisticFit
    """
    y = y.astype(np.float64)
    v = weights / weights.sum()
    kept = v > 0
    centre = np.array(
        [weighted_quantiles(column[kept], v[kept], 0.5) for column in features.T]
    )
    centred = features - centre
    scale = np.array(
        [
            weighted_quantiles(np.abs(column[kept]), v[kept], 0.5)
            for column in centred.T
        ]
    )
    # Most of the weight on one value: the mean absolute deviation instead.
    flat = ~(scale > 0)
    scale[flat] = v @ np.abs(centred[:, flat])
    # A constant feature has no identifiable coefficient: its standardised
    # column is zero, the Hessian is singular there and the pseudo-inverse
    # step leaves its coefficient at 0.
    scale[~(scale > 0)] = 1.0
    X = np.column_stack([np.ones(features.shape[0]), centred / scale])
    theta = np.zeros(X.shape[1])
    rate = min(max(float(v @ y), 1e-12), 1 - 1e-12)
    theta[0] = np.log(rate) - np.log1p(-rate)
    start_iterations = 0
    far = np.any(np.abs(X[:, 1:]) > _FAR_FEATURE, axis=1) & kept
    near = kept & ~far
    if far.any() and near.any():
        # From the intercept-only start, a row far out is where the loss is
        # linear: each Newton step, ruled by its curvature, moved the
        # coefficients by ~1 / its feature (1e-100 a step at 1e100). The
        # start is the fit without such rows; the iteration below then
        # minimises the whole problem from there.
        theta, _, _, _, start_iterations = _newton(
            X[near], y[near], v[near] / v[near].sum(), theta, tol, max_iter
        )
    theta, loss, grad, status, n_iter = _newton(X, y, v, theta, tol, max_iter)
    n_iter += start_iterations
    far_loss = 0.0
    if far.any():
        with np.errstate(over="ignore", invalid="ignore"):
            eta = X[far] @ theta
            far_loss = float(np.max(np.logaddexp(0.0, eta) - y[far] * eta))
    coef = theta[1:] / scale
    intercept = float(theta[0] - coef @ centre)
    return LogisticFit(
        coef,
        intercept,
        loss,
        n_iter,
        status,
        float(np.max(np.abs(grad))),
        far_loss if np.isfinite(far_loss) else np.inf,
    )


# Standardised features beyond this many median absolute deviations are far
# out: the start is fitted without their rows (see fit_logistic).
_FAR_FEATURE = 2.0**20


def _newton(X, y, v, theta, tol, max_iter):
    """Newton iterations from ``theta``: ``(theta, loss, grad, status, n_iter)``."""
    loss, p, grad = _loss_grad(X, y, v, theta)
    status, n_iter = "max_iter", max_iter
    for iteration in range(1, max_iter + 1):
        if np.max(np.abs(grad)) <= tol:
            status, n_iter = "converged", iteration - 1
            break
        hessian = (X * (v * p * (1 - p))[:, None]).T @ X
        if not np.all(np.isfinite(hessian)):
            top = float(np.max(np.abs(X[:, 1:])))
            raise FloatingPointError(
                "cannot fit these scores in float64: standardised features of "
                f"magnitude up to {top:.3g} make the Hessian overflow"
            )
        step = -np.linalg.lstsq(hessian, grad, rcond=1e-13)[0]
        with np.errstate(over="ignore", invalid="ignore"):
            # A row far out (a score of 1e100 against its label) makes the
            # gradient and the step so large that their product overflows.
            slope = float(grad @ step)
        if not -np.inf < slope < 0:  # no (representable) descent direction left
            status, n_iter = "stalled", iteration - 1
            break
        # Halving 60 times reaches t ~ 1e-18: bounded.
        accepted = armijo_step(
            functools.partial(_trial, X, y, v, theta, step),
            loss,
            slope,
            slack=8 * np.finfo(float).eps * abs(loss),
        )
        if accepted is None:
            status, n_iter = "stalled", iteration - 1
            break
        loss, p, grad, theta = accepted[1]
    else:
        if np.max(np.abs(grad)) <= tol:
            status = "converged"
    return theta, loss, grad, status, n_iter


def _trial(X, y, v, theta, step, t):
    """``(loss, p, grad, theta)`` at ``theta + t * step`` (a line search trial)."""
    new_theta = theta + t * step
    return (*_loss_grad(X, y, v, new_theta), new_theta)


def _warn_if_unconverged(name, fit, tol, max_iter):
    if fit.status == "max_iter":
        warnings.warn(
            f"{name} did not converge in max_iter={max_iter} Newton iterations: the "
            f"largest gradient entry is {fit.gradient:.3e} > tol={tol:g}. Increase "
            "max_iter.",
            ConvergenceWarning,
            stacklevel=5,
        )
    elif fit.status == "stalled" and fit.gradient > tol:
        warnings.warn(
            f"{name} stopped after {fit.n_iter} Newton iterations without further "
            "decrease of the loss in float64: the largest gradient entry is "
            f"{fit.gradient:.3e} > tol={tol:g}. The optimum may lie at infinity "
            "(scores that separate the classes); the probabilities are then "
            "extreme.",
            ConvergenceWarning,
            stacklevel=5,
        )


# Label patterns of the distinct scores, in increasing order, whose NLL has no
# finite optimum ("P": only positives at the score, "N": only negatives, "M":
# both; "." is one score where the map's logit is 0, any labels): a map
# non-decreasing in s (beta calibration: N*.?P*), and the sign patterns of a
# polynomial of degree at most 2 (quadratic scaling: one class outside an
# interval, the other inside, each end on a score or between two).
_SEPARABLE_PATTERNS = {
    "monotone": re.compile(r"N*.?P*"),
    "quadratic": re.compile(r"P*.?N*.?P*|N*.?P*.?N*"),
}


def scores_separate(score, y, weights, family):
    """Whether the map family separates the samples, ties included.

    Exact, from the order of the scores: the (weighted) NLL of the family
    ``"monotone"`` (beta calibration, whose logit ``c + a ln p - b ln(1 - p)``
    with ``a, b >= 0`` is constant or strictly increasing in ``s``) or
    ``"quadratic"`` (``c + a s + b s^2``) has no finite optimum exactly when a
    map of the family that is not 0 on every sample has the sign of each
    sample's label or is 0 there (complete or quasi-complete separation):
    along it the loss decreases for ever. Rows of zero weight are left out.
    """
    keep = weights > 0
    score, y = score[keep], y[keep]
    values, codes = np.unique(score, return_inverse=True)
    codes = codes.reshape(-1)
    has_positive = np.zeros(values.shape[0], dtype=bool)
    has_negative = np.zeros(values.shape[0], dtype=bool)
    has_positive[codes[y == 1]] = True
    has_negative[codes[y == 0]] = True
    if (has_positive & has_negative).all():
        return False  # every score is a root of the map: no direction
    states = np.where(has_positive, np.where(has_negative, "M", "P"), "N")
    # A run of one state longer than 3 matches as a run of 3 (a "." takes at
    # most one score from either end of it): the pattern stays short.
    change = np.flatnonzero(states[1:] != states[:-1]) + 1
    starts = np.concatenate([[0], change])
    lengths = np.diff(np.concatenate([starts, [states.shape[0]]]))
    text = "".join(
        state * min(int(length), 3)
        for state, length in zip(states[starts], lengths, strict=True)
    )
    return _SEPARABLE_PATTERNS[family].fullmatch(text) is not None


def _warn_if_separated(name, fit, stacklevel=5, *, separated=False):
    """A UserWarning where the fitted map separates the calibration samples.

    The NLL then has no finite optimum: Newton's method meets the gradient
    tolerance on its way to infinity, at a point that says nothing about new
    scores (as for the affine maps, see ``SEPARATED_LOSS``). ``separated``
    is the exact check of :func:`scores_separate`, which also catches ties
    at the boundary (a loss that stays above ``SEPARATED_LOSS``) and a loose
    ``tol``.
    """
    if separated or fit.loss < SEPARATED_LOSS:
        warnings.warn(
            f"{name}: the calibrated logits separate the calibration samples "
            "(where the scores are not tied at the boundary; mean NLL "
            f"{max(fit.loss, 0.0):.1e} on them), so the likelihood has "
            "no finite optimum and the fit stopped on a ray where it was still "
            "improving; its predictions on new data are overconfident and "
            "depend on where it stopped. Use PlattScaling (smoothed targets) or "
            "more calibration samples.",
            UserWarning,
            stacklevel=stacklevel,
        )


def _unmasked_rows(logits, score, y, sample_weight, name):
    """Rows without a masked (-inf) logit, as fit data.

    A row of positive weight whose true class is masked has an infinite NLL
    under every map: a ``ValueError`` names it, as for the other likelihood
    fits.
    """
    unmasked = ~np.any(logits == -np.inf, axis=1)
    if not unmasked.all():
        check_true_class_unmasked(logits, y, sample_weight)
        score, y, sample_weight = score[unmasked], y[unmasked], sample_weight[unmasked]
        if not np.any(sample_weight > 0):
            raise ValueError(
                f"{name} needs rows with two finite logits; every row with a "
                "positive weight has a masked (-inf) logit."
            )
    # Finite logits near the float range can still differ by more than it.
    return np.clip(score, -_SCORE_LIMIT, _SCORE_LIMIT), y, sample_weight


# Scores are clipped here so that features and maps of them never hold inf
# (a difference of two finite logits near the float range overflows).
_SCORE_LIMIT = np.finfo(np.float64).max / 4


def _binary_logits(logits, positive_logit):
    """Calibrated logits ``(0, f)``; a masked row keeps its certain prediction."""
    limit = np.finfo(logits.dtype).max / 4  # finite, and safe to shift in a softmax
    out = np.zeros(logits.shape, dtype=np.float64)
    out[:, 1] = np.clip(positive_logit, -limit, limit)
    masked = np.any(logits == -np.inf, axis=1)
    out[masked] = logits[masked]
    return out


class _BinaryLogisticMap(BaseCalibrator):
    """Shared fitting of a logistic model on two features of the binary score."""

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _solve(self, features, y, sample_weight, *, separated):
        try:
            fit = fit_logistic(
                features, y, sample_weight, tol=self.tol, max_iter=self.max_iter
            )
        except FloatingPointError as exc:
            raise ValueError(f"{type(self).__name__} {exc}.") from None
        if fit.status != "converged" and fit.far_loss > np.log(2.0):
            # The optimum pins such a row's logit below 0 through a
            # cancellation between the coefficients that float64 cannot hold.
            raise ValueError(
                f"{type(self).__name__} cannot fit these scores in float64: a "
                "score more than 2**20 median absolute deviations beyond the "
                "others is left with its label's probability "
                f"{np.exp(-fit.far_loss):.3g} by a Newton solve that stopped "
                "unconverged. Such a score (1e20 beside scores of order 1) is "
                "likely an error; remove or clip it."
            )
        _warn_if_unconverged(type(self).__name__, fit, self.tol, self.max_iter)
        _warn_if_separated(type(self).__name__, fit, stacklevel=6, separated=separated)
        return fit

    def _calibrated_logits(self, logits):
        score = binary_score(logits, type(self).__name__)
        score = np.clip(np.nan_to_num(score, nan=0.0), -_SCORE_LIMIT, _SCORE_LIMIT)
        with np.errstate(over="ignore"):
            positive = self._positive_logit(score)
        return _binary_logits(logits, positive)


class BetaCalibration(_BinaryLogisticMap):
    r"""Beta calibration of a binary classifier (Kull, Silva Filho, Flach 2017).

    The positive-class probability ``p = sigmoid(s)`` of the score ``s`` (the
    single score column, or ``z_1 - z_0``) is mapped to

    .. math::

        q = \operatorname{sigmoid}\big(c + a \ln p - b \ln(1 - p)\big),
        \qquad a \ge 0,\; b \ge 0,

    the three-parameter ("abm") beta calibration map: the family of
    likelihood-ratio maps between two beta distributions. It contains the
    identity (``a = b = 1, c = 0``) and Platt scaling on the logit
    (``a = b``: ``c + a s``), and unlike a logistic map of ``s`` it can bend
    differently near 0 and near 1 (sigmoid and inverse-sigmoid shapes). The
    constraints ``a, b >= 0`` keep the map non-decreasing in ``p``.

    ``(a, b, c)`` minimise the (weighted) mean negative log-likelihood under
    those constraints, exactly: the problem is a convex logistic regression
    on the features ``(ln p, -ln(1 - p))``, solved by Newton's method on each
    face of the constraint set (both free, ``a = 0``, ``b = 0``, both 0), and
    the best feasible solution is kept (for a convex problem that is the
    constrained optimum). ``ln p`` and ``ln(1 - p)`` are computed from ``s``
    without forming ``p``, so extreme scores keep their order.

    Parameters
    ----------
    max_iter : int, default=100
        Maximum number of Newton iterations per solve. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-10
        The solve stops when the largest absolute entry of the gradient of the
        mean NLL (with respect to the parameters of the standardised
        features) is at most ``tol``.

    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).

    Attributes
    ----------
    coef_ : ndarray of shape (2,)
        ``(a, b)``, both non-negative.
    intercept_ : ndarray of shape (1,)
        ``c``.
    n_iter_ : int
        Newton iterations of the solve that was kept.
    classes_ : ndarray of shape (2,)
        Class labels; ``classes_[1]`` is the positive class.
    n_features_in_ : int
        Number of columns seen in :meth:`fit` (1 or 2).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    PlattScaling : ``sigmoid(a s + c)``, the special case ``a = b``.
    QuadraticScaling : A quadratic function of the logit.
    DirichletCalibration : The multiclass generalisation (Kull et al. 2019).

    Notes
    -----
    The reference implementation, the ``betacal`` package, fits
    scikit-learn's ``LogisticRegression(C=99999999999)``: an L2 penalty of
    ``(a^2 + b^2) / (2 C)`` on the *summed* log-loss, about ``5e-12``, so
    effectively none; this class fits without penalty. Where its
    unconstrained fit has ``a < 0`` (or ``b < 0``), betacal refits with that
    coefficient at 0, which is the constrained optimum except in rare cases
    that this class resolves by comparing every face. betacal also clips
    ``p`` to ``[eps, 1 - eps]`` (scores beyond about +-36), where this class
    uses the exact log-probabilities. The tests match betacal's parameters
    and probabilities on real and random scores.

    Scores that separate the classes (every negative at most every positive,
    ties at the boundary allowed) leave the likelihood without a finite
    optimum: the solve stops on the gradient tolerance with a ``UserWarning``
    (the calibrated logits separate the calibration samples), whatever
    ``tol``.

    The midpoint ``m`` of the paper (the ``p`` mapped to 1/2) solves
    ``c + a ln m - b ln(1 - m) = 0``.

    A row with a masked score (a ``-inf`` logit) keeps its certain prediction
    and is left out of the fit, unless its label is the masked class (a
    ``ValueError`` names the row).

    References
    ----------
    .. [1] M. Kull, T. Silva Filho and P. Flach, "Beta calibration: a
       well-founded and easily implemented improvement on logistic calibration
       for binary classifiers", AISTATS 2017.
    .. [2] M. Kull, T. M. Silva Filho and P. Flach, "Beyond sigmoids: How to
       obtain well-calibrated probabilities from binary classifiers with beta
       calibration", Electronic Journal of Statistics 11(2), 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import BetaCalibration
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=500)
    >>> score = 3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=500)
    >>> beta = BetaCalibration().fit(score[:, None], y)
    >>> bool(np.all(beta.coef_ >= 0))
    True
    >>> beta.predict_proba(score[:2, None]).sum(axis=1)
    array([1., 1.])
    """

    def __init__(self, *, max_iter=100, tol=1e-10, classes=None):
        self.classes = classes
        self.max_iter = max_iter
        self.tol = tol

    @staticmethod
    def _features(score):
        # ln p = log_sigmoid(s) and -ln(1 - p) = softplus(s), computed stably.
        return np.column_stack([log_expit(score), np.logaddexp(0.0, score)])

    def _fit(self, logits, y, sample_weight):
        name = type(self).__name__
        score, y, sample_weight = _unmasked_rows(
            logits, binary_score(logits, name), y, sample_weight, name
        )
        features = self._features(score)
        best = None
        # Faces of {a >= 0, b >= 0}: the constrained optimum of the convex
        # NLL is the best feasible face optimum.
        for free in ((0, 1), (1,), (0,), ()):
            fit = fit_logistic(
                features[:, free],
                y,
                sample_weight,
                tol=self.tol,
                max_iter=self.max_iter,
            )
            coef = np.zeros(2)
            coef[list(free)] = fit.coef
            if np.any(coef < 0):
                continue
            if best is None or fit.loss < best[0].loss - 1e-15 * abs(best[0].loss):
                best = (fit, coef)
            if len(free) == 2 and fit.status == "converged":
                break  # the unconstrained optimum is feasible: it is the optimum
        fit, coef = best
        _warn_if_unconverged(name, fit, self.tol, self.max_iter)
        _warn_if_separated(
            name,
            fit,
            separated=scores_separate(score, y, sample_weight, "monotone"),
        )
        self.coef_ = coef
        self.intercept_ = np.array([fit.intercept])
        self.n_iter_ = fit.n_iter

    def _check_fitted_state(self):
        super()._check_fitted_state()
        # a, b >= 0 keep the map non-decreasing in p: a negative one bends
        # the map back and would reorder the scores.
        check_state_array(self, "coef_", shape=(2,), finite=True, low=0.0)
        check_state_array(self, "intercept_", shape=(1,), finite=True)
        check_state_int(self, "n_iter_")

    def _positive_logit(self, score):
        a, b = self.coef_
        features = self._features(score)
        return self.intercept_[0] + a * features[:, 0] + b * features[:, 1]

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax((0, c + a log_sigmoid(s) + b softplus(s)))`` with
            ``s`` the score column or the difference of the two logits.
        """
        check_is_fitted(self)
        from .._torch._scaling_modules import BinaryFeatureModule

        a, b = (float(v) for v in self.coef_)
        return BinaryFeatureModule("beta", a, b, float(self.intercept_[0]), 1.0)


class QuadraticScaling(_BinaryLogisticMap):
    r"""Quadratic scaling of a binary logit: ``sigmoid(c + a s + b s^2)``.

    The positive-class logit ``s`` (the single score column, or
    ``z_1 - z_0``) is mapped to ``c + a s + b s^2``: Platt scaling (``b = 0``)
    plus a quadratic term that lets the calibrated logit bend, for example
    when a classifier is over-confident on one side and not the other. This is
    probmetrics' ``quadratic-scaling`` (``BinaryLogisticCalibrator(
    type="quadratic")``), among the best binary calibrators of the CalArena
    comparison [1]_.

    ``(a, b, c)`` minimise the (weighted) mean negative log-likelihood
    without penalty (as probmetrics' unpenalised ``LogisticRegression``): a
    convex logistic regression on the features ``(s, s^2)``, solved by
    Newton's method to a tight gradient tolerance.
    The score is divided by its largest calibration value ``score_scale_``
    first, and the map is evaluated as ``c + a' u + b' u^2`` with
    ``u = s / score_scale_``, so ``s^2`` never overflows.

    The map is not monotone in ``s`` when ``b != 0`` (the calibrated logit
    turns at ``s = -a / (2 b)``), so the predicted class may change; report
    accuracy beside the calibration metrics.

    Parameters
    ----------
    max_iter : int, default=100
        Maximum number of Newton iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-10
        The solve stops when the largest absolute entry of the gradient of the
        mean NLL (with respect to the parameters of the standardised
        features) is at most ``tol``.

    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).

    Attributes
    ----------
    coef_ : ndarray of shape (2,)
        ``(a, b)``: the linear and quadratic coefficients of ``s``.
    intercept_ : ndarray of shape (1,)
        ``c``.
    score_scale_ : float
        The largest ``|s|`` of the calibration set (1 if all are 0).
    scaled_coef_ : ndarray of shape (2,)
        ``(a', b') = (a * score_scale_, b * score_scale_**2)``, the
        coefficients of ``u = s / score_scale_`` and ``u^2`` that predictions
        use (for scores near the float range ``b`` itself can underflow).
    n_iter_ : int
        Newton iterations.
    classes_ : ndarray of shape (2,)
        Class labels; ``classes_[1]`` is the positive class.
    n_features_in_ : int
        Number of columns seen in :meth:`fit` (1 or 2).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    PlattScaling : The affine map ``sigmoid(a s + c)``.
    BetaCalibration : A monotone three-parameter map.

    Notes
    -----
    Without a penalty the optimum may lie at infinity (an interval of scores
    that holds one class, the other outside, ties at its ends allowed); the
    solver then stops on the gradient tolerance or on ``max_iter``, with a
    warning either way. Calibrated logits are
    clipped to a quarter of the largest finite value of the logits' dtype, so
    an extreme score never gives an infinite logit. A row with a masked score
    (a ``-inf`` logit) keeps its certain prediction and is left out of the
    fit, unless its label is the masked class (a ``ValueError`` names the
    row).

    References
    ----------
    .. [1] D. Holzmüller et al., probmetrics (PyPI ``probmetrics``),
       calibrator ``quadratic-scaling``, and the CalArena comparison of
       post-hoc calibrators by E. Berta, D. Holzmüller, F. Bach and
       M. I. Jordan (2026), where it leads the binary tasks.
    .. [2] J. Platt, "Probabilistic Outputs for Support Vector Machines and
       Comparisons to Regularized Likelihood Methods", Advances in Large
       Margin Classifiers, 1999.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import QuadraticScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=500)
    >>> score = 3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=500)
    >>> quad = QuadraticScaling().fit(score[:, None], y)
    >>> quad.coef_.shape, quad.intercept_.shape
    ((2,), (1,))
    >>> quad.predict_proba(score[:2, None]).sum(axis=1)
    array([1., 1.])
    """

    def __init__(self, *, max_iter=100, tol=1e-10, classes=None):
        self.classes = classes
        self.max_iter = max_iter
        self.tol = tol

    def _fit(self, logits, y, sample_weight):
        name = type(self).__name__
        score, y, sample_weight = _unmasked_rows(
            logits, binary_score(logits, name), y, sample_weight, name
        )
        largest = float(np.max(np.abs(score), initial=0.0))
        self.score_scale_ = largest if largest > 0 else 1.0
        u = score / self.score_scale_
        fit = self._solve(
            np.column_stack([u, u * u]),
            y,
            sample_weight,
            separated=scores_separate(score, y, sample_weight, "quadratic"),
        )
        self.scaled_coef_ = fit.coef
        # b may underflow (huge scores) or a, b overflow (tiny ones, as the
        # state check allows); predictions use scaled_coef_, which is exact.
        with np.errstate(under="ignore", over="ignore"):
            self.coef_ = (
                fit.coef / self.score_scale_ / np.array([1.0, self.score_scale_])
            )
        self.intercept_ = np.array([fit.intercept])
        self.n_iter_ = fit.n_iter

    def _check_fitted_state(self):
        super()._check_fitted_state()
        scale = check_state_float(self, "score_scale_", low=0.0, low_open=True)
        # Predictions use scaled_coef_; coef_ = scaled_coef_ / (scale, scale**2)
        # may overflow to +-inf for a tiny score_scale_, so only NaN is refused.
        scaled = check_state_array(self, "scaled_coef_", shape=(2,), finite=True)
        coef = check_state_array(self, "coef_", shape=(2,), low=-np.inf, high=np.inf)
        with np.errstate(over="ignore", under="ignore"):
            expected = scaled / scale / np.array([1.0, scale])
        if not np.allclose(coef, expected, rtol=1e-12, atol=0.0):
            fail_state(
                self,
                "scaled_coef_",
                "disagrees with coef_ and score_scale_: coef_ must be scaled_coef_ "
                f"/ (score_scale_, score_scale_**2) = {expected.tolist()!r}, got "
                f"{coef.tolist()!r}",
            )
        check_state_array(self, "intercept_", shape=(1,), finite=True)
        check_state_int(self, "n_iter_")

    def _positive_logit(self, score):
        a, b = self.scaled_coef_
        u = score / self.score_scale_
        # Horner form in the scaled score: no overflow of s^2.
        return self.intercept_[0] + u * (a + b * u)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax((0, c + a s + b s^2))`` with ``s`` the score column
            or the difference of the two logits.
        """
        check_is_fitted(self)
        from .._torch._scaling_modules import BinaryFeatureModule

        a, b = (float(v) for v in self.scaled_coef_)
        return BinaryFeatureModule(
            "quadratic", a, b, float(self.intercept_[0]), self.score_scale_
        )
