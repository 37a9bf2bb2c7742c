"""Structured vector and matrix scaling (Berta, Holzmueller, Jordan, Bach 2026).

Temperature scaling first, mixed with the uniform distribution; then an affine
map of the log of that mixture whose scales are pulled towards 1 and whose
off-diagonal entries and biases are pulled towards 0 by ridge penalties that
shrink as the calibration set grows. The affine step is solved exactly by the
library's affine solver (``sklearn_calib._torch._affine``).
"""

from numbers import Real

import numpy as np

from ..utils._compat import Interval, check_is_fitted
from ..utils._fitted_state import check_state_float, fail_state, get_state
from ..utils._math import log_softmax, scale_logits, softmax
from ..utils._validation import keep_masked, zero_masked
from .affine import AffineCalibrator, mask_of, mixing_inputs
from .temperature import TemperatureScaling


def effective_sample_size(sample_weight):
    """Kish's effective number of samples, (sum w)^2 / sum w^2.

    The number of rows when every weight is equal, whatever their scale;
    rows of weight 0 do not count.
    """
    w = sample_weight / sample_weight.max()
    return float(w.sum() ** 2 / np.dot(w, w))


def structured_features(logits, temperature, mix_weight, mask=None):
    """``log((1 - e) softmax(z / T) + e / K_row)`` in float64, ``-inf`` where masked.

    ``K_row`` is the number of unmasked (finite) logits of the row, so a
    masked class keeps probability exactly 0 and the mixture stays a
    distribution over the classes the row allows. ``mask`` (the ``-inf``
    entries, or None when there are none) is computed when not given.
    """
    if mask is None:
        mask = mask_of(logits)
    scaled = scale_logits(np.asarray(logits, dtype=np.float64), 1.0 / temperature)
    allowed = logits.shape[1]
    if mask is not None:
        allowed = allowed - np.count_nonzero(mask, axis=1, keepdims=True)
    if mix_weight > 0:
        # The mixture is at least e / K_row > 0: its log is exact to rounding
        # without a log-space sum (np.logaddexp took 2/3 of this function).
        out = softmax(scaled, out=scaled)
        out *= 1.0 - mix_weight
        out += mix_weight / allowed
        out = np.log(out, out=out)
    else:  # the temperature map itself, finite where softmax underflows
        out = log_softmax(scaled, out=scaled)
    return keep_masked(out, mask)


class _StructuredScaling(AffineCalibrator):
    """Shared fit of the structured maps: temperature, mixture, penalised map."""

    _kind = "matrix"

    _parameter_constraints: dict = {
        **AffineCalibrator._parameter_constraints,
        "lambda_intercept": [Interval(Real, 0, None, closed="left")],
        "lambda_diagonal": [Interval(Real, 0, None, closed="left")],
        "rho": [Interval(Real, None, None, closed="neither")],
        "tau": [Interval(Real, None, None, closed="neither")],
    }

    def _penalty_strengths(self, n_classes, n_samples):
        """The strengths (reg_intercept, reg_diagonal, reg_off_diagonal)."""
        off = getattr(self, "lambda_off_diagonal", 0.0)
        # float64 powers: inf or NaN where they overflow (Python's raise).
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            rows = np.float64(n_samples) ** self.tau
            shrink = np.float64(n_classes) ** self.rho / rows
            pairs = np.float64(n_classes * (n_classes - 1)) ** self.rho / rows
            strengths = (
                float(self.lambda_intercept * shrink),
                float(self.lambda_diagonal * shrink),
                float(off * pairs),
            )
        if not np.all(np.isfinite(strengths)):
            raise ValueError(
                f"rho={self.rho!r} and tau={self.tau!r} make the penalty "
                f"strengths n_classes**rho / n_samples**tau overflow for "
                f"{n_classes} classes and {n_samples} samples; use exponents "
                "of moderate size."
            )
        return strengths

    def _is_penalised(self):
        return bool(
            self.lambda_intercept
            or self.lambda_diagonal
            or getattr(self, "lambda_off_diagonal", 0.0)
        )

    def _bounds_every_entry(self):
        strengths = [self.lambda_intercept, self.lambda_diagonal]
        if self._kind == "matrix":
            strengths.append(self.lambda_off_diagonal)
        return all(strength > 0 for strength in strengths)

    def _inputs(self, logits, mask):
        """The solver's finite inputs: the mixing stand-in (matrix) or 0 (vector)."""
        features = structured_features(
            logits, self.temperature_, self.mix_weight_, mask
        )
        # float32 logits give float32 features: the solver's passes then run
        # in float32 until its last, float64 iterations (as for the logits).
        features = features.astype(logits.dtype, copy=False)
        if self._kind == "matrix":
            return mixing_inputs(features, mask)
        return zero_masked(features, mask)

    def _temperature_step(self):
        """The temperature scaling this map starts with, unfitted.

        :class:`CalibratorSelector` fits it once per training part and hands
        its ``temperature_`` to every structured candidate fitted on that
        part (``_given_temperature``): the number this fit would compute
        from the same rows, computed once.
        """
        return TemperatureScaling(device=self.device)

    def _fit(self, logits, y, sample_weight):
        from .._torch._affine_objective import Penalty

        self.temperature_ = getattr(self, "_given_temperature", None)
        if self.temperature_ is None:
            temperature = self._temperature_step()
            temperature._fit(logits, y, sample_weight)
            self.temperature_ = temperature.temperature_
        n_samples = effective_sample_size(sample_weight)
        self.mix_weight_ = 1.0 / (n_samples + 1.0)
        n_classes = logits.shape[1]
        reg_intercept, reg_diagonal, reg_off = self._penalty_strengths(
            n_classes, n_samples
        )
        self.penalty_strengths_ = {
            "intercept": reg_intercept,
            "diagonal": reg_diagonal,
            "off_diagonal": reg_off,
        }
        mask = mask_of(logits)
        # The objective adds reg * sum(theta^2); the solver's is 1/2 rho theta^2.
        penalty = Penalty(
            diagonal=2.0 * reg_diagonal,
            off_diagonal=2.0 * reg_off,
            bias=2.0 * reg_intercept,
            centre=1.0,
        )
        result = self._solve(
            self._inputs(logits, mask),
            y,
            sample_weight,
            self._kind,
            mask=mask,
            penalty=penalty,
            # The features are the temperature map's log-probabilities: the
            # best scale along the identity is near 1 (22 passes on the
            # ray instead of 77 in a default MarginTemperatureScaling fit at
            # 5,000 x 100, the same start).
            ray_start=1.0,
        )
        self.coef_ = result.coef
        self.intercept_ = result.intercept
        self.objective_ = result.loss

    def _check_fitted_state(self):
        super()._check_fitted_state()
        check_state_float(self, "temperature_", low=0.0, low_open=True)
        # e = 1 / (n + 1) with n >= 1 effective sample.
        check_state_float(self, "mix_weight_", low=0.0, low_open=True, high=0.5)
        check_state_float(self, "objective_")
        strengths = get_state(self, "penalty_strengths_")
        if not isinstance(strengths, dict) or set(strengths) != {
            "intercept",
            "diagonal",
            "off_diagonal",
        }:
            fail_state(
                self,
                "penalty_strengths_",
                "must be a dict of the intercept, diagonal and off_diagonal strengths",
            )
        for key, value in strengths.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, Real)
                or not (np.isfinite(value) and value >= 0)
            ):
                fail_state(
                    self,
                    "penalty_strengths_",
                    f"{key} must be a number >= 0, got {value!r}",
                )

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        mask = mask_of(logits)
        # The parameters are float64, and so is the map (features of float32
        # logits are float32, and promote).
        features = self._inputs(logits, mask)
        if self._kind == "matrix":
            out = features @ self.coef_.T
        else:
            out = features * self.coef_
        out += self.intercept_
        return keep_masked(out, mask).astype(dtype, copy=False)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(A f(z) + b)`` with ``f(z) = log((1 - e)
            softmax(z / T) + e / K)``; exportable with
            ``torch.export.export`` (a program per input dtype; see the user
            guide).
        """
        check_is_fitted(self)
        from .._torch._scaling_modules import StructuredScalingModule

        return StructuredScalingModule(
            self.temperature_,
            self.mix_weight_,
            self.coef_,
            self.intercept_,
            matrix=self._kind == "matrix",
        )


_COMMON_PARAMETERS = """
    rho : float, default=1.0
        Exponent of the number of classes ``K`` in the penalty strengths.
    tau : float, default=1.0
        Exponent of the number of calibration samples ``n`` in the penalty
        strengths: with ``tau > 0`` the penalties fade as ``n`` grows.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solvers run. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is numpy either way.
    max_iter : int, default=1000
        Maximum number of solver iterations of the affine step. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-7
        The affine solve stops when the largest absolute entry of the gradient
        of the penalised objective is at most ``tol`` (with the Newton solver,
        also when a Newton step predicts a decrease below ``tol / 100``).

    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).
"""

_COMMON_ATTRIBUTES = """
    temperature_ : float
        The temperature ``T`` of the first step (exact temperature scaling).
    mix_weight_ : float
        The weight ``e = 1 / (n + 1)`` of the uniform distribution in the
        mixture, with ``n`` the effective number of calibration samples.
    penalty_strengths_ : dict
        The strengths ``reg`` of the three penalties, keys ``"intercept"``,
        ``"diagonal"`` and ``"off_diagonal"`` (0 for the vector map).
    objective_ : float
        The penalised objective at the solution (mean NLL plus penalties, on
        the calibration set).
    n_iter_ : int
        Solver iterations of the affine step.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.
"""

_COMMON_NOTES = """
    **Sample size.** ``n`` is Kish's effective number of samples
    ``(sum w)^2 / sum w^2``: the number of rows for unweighted data, unchanged
    when every weight is multiplied by a constant, and blind to rows of
    weight 0. Integer weights are therefore not read as repeated rows (a row
    of weight 2 is not two samples): use repeated rows for that.

    **Masked classes.** A logit of ``-inf`` keeps probability exactly 0: the
    uniform part of the mixture spreads over the classes the row allows
    (``K_row`` of them), and the calibrated logit of a masked class is
    ``-inf`` (in :meth:`predict_proba`, :meth:`transform` and
    :meth:`to_torch`). A row must not mask its true class (``ValueError``).

    **Classes without a calibration sample** (with ``classes=``) have a
    finite optimum only while every one of their parameters is penalised.
    With a ``lambda_*`` of 0 such a class keeps the solver's start (the
    best common scale of the features, near 1, and bias 0) with a
    ``UserWarning``, as in :class:`VectorScaling` and :class:`MatrixScaling`.
"""


class StructuredVectorScaling(_StructuredScaling):
    __doc__ = (
        r"""Structured vector scaling: penalised per-class scales and biases after
    temperature scaling.

    With ``T`` the exact temperature-scaling solution and ``e = 1 / (n + 1)``,
    the features are the log-probabilities of the temperature-scaled model
    mixed with the uniform distribution,
    ``f(z) = log((1 - e) softmax(z / T) + e / K)``, and the calibrated
    probabilities are ``softmax(w * f(z) + b)`` (``*`` elementwise). ``(w,
    b)`` minimise the (weighted) mean negative log-likelihood plus

    .. math::

        r_d \sum_k (w_k - 1)^2 + r_b \sum_k b_k^2, \qquad
        r = \lambda \frac{K^\rho}{n^\tau},

    a convex problem solved exactly (Newton's method up to 64 classes,
    preconditioned L-BFGS beyond). With the defaults the penalties shrink
    like ``K / n``: strong on small calibration sets, where the map stays near
    temperature scaling, weak on large ones. This is probmetrics' ``"svs"``
    calibrator (ridge penalty, its default) with the same objective.

    The map can change the argmax, so accuracy may change; report it beside
    the calibration metrics.

    Parameters
    ----------
    lambda_intercept : float, default=1.0
        ``lambda`` of the penalty on the biases.
    lambda_diagonal : float, default=1.0
        ``lambda`` of the penalty on the scales' distance from 1.
"""
        + _COMMON_PARAMETERS
        + """
    Attributes
    ----------
    coef_ : ndarray of shape (n_classes,)
        The per-class scales ``w`` applied to the features ``f(z)``.
    intercept_ : ndarray of shape (n_classes,)
        The biases ``b``.
"""
        + _COMMON_ATTRIBUTES
        + """
    See Also
    --------
    StructuredMatrixScaling : The full matrix, with its own penalty off the
        diagonal.
    VectorScaling : The same map of the logits, unpenalised.
    TemperatureScaling : The first step alone.

    Notes
    -----
"""
        + _COMMON_NOTES
        + """
    References
    ----------
    .. [1] E. Berta, D. Holzmueller, M. I. Jordan and F. Bach, "Structured
       Matrix Scaling for Multi-Class Calibration", AISTATS 2026.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import StructuredVectorScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> svs = StructuredVectorScaling(device="cpu").fit(logits, y)
    >>> svs.coef_.shape, round(svs.mix_weight_ * 501, 6)
    ((3,), 1.0)
    """
    )

    _kind = "vector"

    def __init__(
        self,
        *,
        lambda_intercept=1.0,
        lambda_diagonal=1.0,
        rho=1.0,
        tau=1.0,
        device="auto",
        max_iter=1000,
        tol=1e-7,
        classes=None,
    ):
        self.lambda_intercept = lambda_intercept
        self.lambda_diagonal = lambda_diagonal
        self.rho = rho
        self.tau = tau
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes


class StructuredMatrixScaling(_StructuredScaling):
    __doc__ = (
        r"""Structured matrix scaling: a full affine map after temperature scaling,
    with separate penalties on its diagonal, off-diagonal and biases.

    With ``T`` the exact temperature-scaling solution and ``e = 1 / (n + 1)``,
    the features are the log-probabilities of the temperature-scaled model
    mixed with the uniform distribution,
    ``f(z) = log((1 - e) softmax(z / T) + e / K)``, and the calibrated
    probabilities are ``softmax(W f(z) + b)``. ``(W, b)`` minimise the
    (weighted) mean negative log-likelihood plus

    .. math::

        r_b \sum_k b_k^2 + r_d \sum_k (W_{kk} - 1)^2
        + r_o \sum_{j \ne k} W_{jk}^2,

    with ``r_b = lambda_intercept K^rho / n^tau``, ``r_d = lambda_diagonal
    K^rho / n^tau`` and ``r_o = lambda_off_diagonal (K (K - 1))^rho /
    n^tau``: the ``K (K - 1)`` off-diagonal entries are held much more
    firmly than the ``K`` scales, and every penalty fades as the calibration
    set grows. The problem is convex and solved exactly (Newton's method up
    to 10 classes, L-BFGS preconditioned with each class's Hessian block
    beyond). This is probmetrics' ``"sms"`` calibrator (ridge penalty, its
    default) with the same objective; on the public sets of the benchmarks
    its solution reaches an objective at least as low, faster (see the
    benchmarks page).

    The map can change the argmax, so accuracy may change; report it beside
    the calibration metrics.

    Parameters
    ----------
    lambda_intercept : float, default=1.0
        ``lambda`` of the penalty on the biases.
    lambda_diagonal : float, default=1.0
        ``lambda`` of the penalty on the diagonal's distance from 1.
    lambda_off_diagonal : float, default=1.0
        ``lambda`` of the penalty on the off-diagonal entries.
"""
        + _COMMON_PARAMETERS
        + """
    Attributes
    ----------
    coef_ : ndarray of shape (n_classes, n_classes)
        The matrix ``W`` applied to the features ``f(z)``.
    intercept_ : ndarray of shape (n_classes,)
        The biases ``b``.
"""
        + _COMMON_ATTRIBUTES
        + """
    See Also
    --------
    StructuredVectorScaling : The diagonal map only.
    MatrixScaling : A full map of the logits with the ODIR penalty.
    DirichletCalibration : A full map of the log-probabilities with ODIR.

    Notes
    -----
"""
        + _COMMON_NOTES
        + """    As an input to the mixing, a masked class stands in as the lowest
    unmasked feature of its row (as in :class:`MatrixScaling`). Above 4095
    classes :meth:`fit` raises a ``ValueError`` (``K (K + 1)`` parameters).

    References
    ----------
    .. [1] E. Berta, D. Holzmueller, M. I. Jordan and F. Bach, "Structured
       Matrix Scaling for Multi-Class Calibration", AISTATS 2026.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import StructuredMatrixScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> sms = StructuredMatrixScaling(device="cpu").fit(logits, y)
    >>> sms.coef_.shape
    (3, 3)
    >>> bool(np.all(np.isclose(sms.predict_proba(logits).sum(axis=1), 1.0)))
    True
    """
    )

    _parameter_constraints: dict = {
        **_StructuredScaling._parameter_constraints,
        "lambda_off_diagonal": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        *,
        lambda_intercept=1.0,
        lambda_diagonal=1.0,
        lambda_off_diagonal=1.0,
        rho=1.0,
        tau=1.0,
        device="auto",
        max_iter=1000,
        tol=1e-7,
        classes=None,
    ):
        self.lambda_intercept = lambda_intercept
        self.lambda_diagonal = lambda_diagonal
        self.lambda_off_diagonal = lambda_off_diagonal
        self.rho = rho
        self.tau = tau
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes

    def _state_shapes(self, n_classes):
        return (n_classes, n_classes), (n_classes,)
