"""Affine calibration maps of the logits, fitted by exact NLL minimisation in torch.

Temperature scaling lives here; the vector, matrix, Dirichlet and Platt maps of
the same family share the torch layer in ``sklearn_calib._torch``.
"""

import functools
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseCalibrator
from ..utils._compat import Interval, StrOptions, check_is_fitted
from ..utils._fitted_state import (
    check_state_array,
    check_state_float,
    check_state_int,
    fail_state,
)
from ..utils._math import log_softmax, row_blocks, scale_logits
from ..utils._validation import (
    check_device,
    check_true_class_unmasked,
    mask_of,
)


def _torch_inputs(logits, y, sample_weight, device):
    """Move validated numpy inputs to torch on the resolved device."""
    from .._torch._device import resolve_device, to_tensor

    torch_device = resolve_device(check_device(device))
    return (
        to_tensor(logits, torch_device),
        to_tensor(y.astype(np.int64, copy=False), torch_device),
        to_tensor(sample_weight, torch_device),
    )


# A mean NLL this low on the calibration set means that the map separates it:
# with 15 classes, a true-class probability of 1 - 1e-6 on every sample.
SEPARATED_LOSS = 1e-6


def _parameter_dtype(dtype, *arrays):
    """The dtype to apply fitted parameters in: the logits' own, or float64
    when a parameter or feature does not fit in it (float32 logits spread by
    1e-40 are fitted with scales near 1e40, beyond float32's range, yet map to
    calibrated logits of order 1; log-probabilities of float32 logits near
    3e38 reach -6e38)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.float64
    limit = np.finfo(dtype).max
    if any(np.any(np.abs(a) > limit) for a in arrays):
        return np.float64
    return dtype.type


def _mixing_inputs(features, mask):
    """Finite inputs of an affine map: what a masked entry contributes.

    For the matrix map a masked entry enters as the lowest unmasked feature of
    its row (the least likely class the row allows), so that a masked class is
    treated as no more likely than any available one, and adding a constant
    to a row of logits shifts every input alike. The vector map never mixes
    columns, and its masked outputs are -inf whatever the input: 0 there.
    """
    if mask is None:
        return features
    lowest = np.where(mask, np.inf, features).min(axis=1, keepdims=True)
    return np.where(mask, lowest, features)


class TemperatureScaling(BaseCalibrator):
    r"""Temperature scaling: one scalar temperature for all logits.

    Calibrated probabilities are ``softmax(z / T)``. ``T`` minimises the
    (weighted) negative log-likelihood on the calibration set exactly: the
    problem is convex in ``beta = 1 / T`` and is solved by a bracketed Newton
    method to machine precision, typically in 3 to 6 passes over the logits
    after a warm start on a subsample. Dividing by ``T > 0`` never changes the
    argmax, so accuracy is preserved exactly.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solver runs. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is a Python float either way.
    max_iter : int, default=100
        Maximum number of Newton iterations over the full data. A
        :class:`~sklearn.exceptions.ConvergenceWarning` is raised if reached.

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
    temperature_ : float
        The fitted temperature ``T`` (not its inverse). ``T > 1`` softens an
        over-confident model, ``T < 1`` sharpens an under-confident one.
    n_iter_ : int
        Newton iterations (passes over the full data) of the final solve.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    VectorScaling : One temperature and bias per class.
    sklearn.calibration.CalibratedClassifierCV : ``method="temperature"``.

    Notes
    -----
    The optimum satisfies ``mean_w(E_q[z]) = mean_w(z_y)``: the mean logit of
    the true class equals the mean expected logit. When every calibration
    sample is classified correctly and separably, the NLL decreases for ever
    as ``T -> 0``; when the logits carry no ranking information it is lowest
    as ``T -> infinity``. ``T`` is therefore bounded relative to the logits'
    own scales, and a warning is raised when the optimum sits on a bound:
    ``T >= 1e-4 g`` with ``g`` the median gap between a row's top logit and
    the next lower one, and ``T <= 1e4 s`` with ``s`` the larger of ``g`` and
    the mean gap between a row's maximum and the mean of its finite logits.
    For float32 logits ``T`` also stays below about ``2^28 g`` (``2^476 g``
    for float64), beyond which the derivatives are not representable.
    Constant logits (the same value in every column) leave ``T = 1`` with a
    warning.

    Masked classes, ``-inf`` logits, have probability exactly 0 at every
    temperature and do not enter the bounds: adding a masked column changes
    neither ``T`` nor the other columns' probabilities. A finite fill such as
    ``-1e9`` or ``np.finfo(np.float32).min`` gives the same ``T`` whenever
    its probability underflows to exactly 0 at the fitted temperature (it
    only widens the upper bound of ``T``). A sample labelled with a masked
    class has likelihood 0 at every temperature and raises a ``ValueError``.
    Only the ratios of ``sample_weight`` matter: multiplying every weight by
    a constant changes nothing.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import TemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> ts = TemperatureScaling(device="cpu").fit(logits, y)
    >>> round(ts.temperature_, 3) > 0
    True
    >>> ts.predict_proba(logits).sum(axis=1)[:3]
    array([1., 1., 1.])
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "device": [str],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }
    _preserves_argmax = True

    def __init__(self, *, device="auto", max_iter=100, classes=None):
        self.device = device
        self.max_iter = max_iter
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        from .._torch._temperature import fit_inverse_temperature

        # A sample of positive weight whose true class is masked has an
        # infinite NLL at every temperature.
        check_true_class_unmasked(logits, y, sample_weight)
        result = fit_inverse_temperature(
            *_torch_inputs(logits, y, sample_weight, self.device),
            max_iter=self.max_iter,
        )
        self._store_temperature_fit(result)

    def _chunk_sample_rows(self):
        """The rows the chunked fit gathers: those of the in-memory warm start."""
        from .._torch._chunked import spaced_row_indices

        return spaced_row_indices

    def _fit_chunked(self, data):
        """The exact fit from chunks: the in-memory Newton iteration on sums."""
        self._store_temperature_fit(
            fit_temperature_chunks(data, max_iter=self.max_iter)
        )

    def _store_temperature_fit(self, result):
        """Set the fitted attributes from a solve (in memory or over chunks)."""
        self.n_iter_ = result.n_iter
        self.temperature_ = 1.0 / result.beta
        if result.status == "max_iter":
            warnings.warn(
                f"TemperatureScaling did not converge in max_iter={self.max_iter} "
                f"Newton iterations (gradient {result.gradient:.3e}); increase "
                "max_iter.",
                ConvergenceWarning,
                stacklevel=5,
            )
        elif result.status == "at_upper_beta":
            warnings.warn(
                "The NLL keeps decreasing as T -> 0: every calibration sample is "
                "classified correctly. T was clamped to its lower bound "
                f"{self.temperature_:.4g}; use a calibration set with errors for a "
                "meaningful temperature.",
                UserWarning,
                stacklevel=5,
            )
        elif result.status == "at_lower_beta":
            warnings.warn(
                "The NLL keeps decreasing as T -> infinity: the logits carry no "
                "ranking information about y. T was clamped to its upper bound "
                f"{self.temperature_:.4g}.",
                UserWarning,
                stacklevel=5,
            )
        elif result.status == "constant":
            warnings.warn(
                "The logits are constant across classes in every row (or "
                "spread by less than 1e-289, or every row has a single finite "
                "logit); the temperature has no effect and was left at T = 1.",
                UserWarning,
                stacklevel=5,
            )

    def _check_fitted_state(self):
        super()._check_fitted_state()
        # T > 0 keeps the order of the logits; T <= 0 would reverse or erase it.
        check_state_float(self, "temperature_", low=0.0, low_open=True)
        check_state_int(self, "n_iter_")

    def _calibrated_logits(self, logits):
        return scale_logits(logits, 1.0 / self.temperature_)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(z / T)``;
            exportable with ``torch.export.export`` (a program per input
            dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._modules import TemperatureModule

        return TemperatureModule(self.temperature_)


# --- vector, matrix and Dirichlet scaling, Platt scaling ----------------------


# Largest affine map fitted: 2**24 parameters is a full K x K matrix up to
# K = 4095. The L-BFGS solver keeps about 25 float64 vectors of that size
# (history pairs, gradients, line-search points) and each iteration costs
# n_samples * K^2 multiply-adds: ~3.4 GB at K = 4095, ~19 GB at K = 10,000.
_MAX_AFFINE_PARAMETERS = 2**24
_SOLVER_COPIES = 25


class _AffineCalibrator(BaseCalibrator):
    """Shared fitting of the affine maps softmax(A x + b) by the torch solver."""

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "device": [str],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    # Shapes of coef_ and intercept_ for n classes (the subclasses' layouts).
    def _state_shapes(self, n_classes):
        return (n_classes,), (n_classes,)

    def _check_fitted_state(self):
        super()._check_fitted_state()
        coef_shape, intercept_shape = self._state_shapes(len(self.classes_))
        check_state_array(self, "coef_", shape=coef_shape, finite=True)
        check_state_array(self, "intercept_", shape=intercept_shape, finite=True)
        check_state_int(self, "n_iter_")

    def _is_penalised(self):
        """Whether the objective has a penalty (then a finite optimum exists)."""
        return bool(getattr(self, "reg_lambda", 0) or getattr(self, "reg_mu", 0))

    def _solve(
        self,
        features,
        y,
        sample_weight,
        kind,
        reg_lambda=0.0,
        reg_mu=0.0,
        mask=None,
        penalty=None,
    ):
        """Minimise the penalised NLL; store n_iter_ and return the solution.

        ``mask`` marks the masked (-inf) entries; ``features`` then holds
        finite stand-ins there (see :func:`_mixing_inputs`).
        """
        from .._torch._affine import fit_affine
        from .._torch._device import to_tensor

        name = type(self).__name__
        if kind == "matrix":
            n_parameters = features.shape[1] * (features.shape[1] + 1)
            if n_parameters > _MAX_AFFINE_PARAMETERS:
                gib = _SOLVER_COPIES * 8 * n_parameters / 2**30
                raise ValueError(
                    f"{name} with {features.shape[1]:,} classes has "
                    f"{n_parameters:,} parameters (a full K x K matrix and K "
                    f"biases); the solver would need about {gib:.0f} GiB. The "
                    f"limit is {_MAX_AFFINE_PARAMETERS:,} parameters "
                    "(K <= 4095). Use VectorScaling or TemperatureScaling for "
                    "this many classes."
                )
        if mask is not None:
            check_true_class_unmasked(mask, y, sample_weight)
        # Normalised weights: the fit cannot depend on their scale (the torch
        # layer normalises their sum again, in float64).
        sample_weight = sample_weight / sample_weight.max()

        features_t, y_t, weights_t = _torch_inputs(
            features, y, sample_weight, self.device
        )
        try:
            result = fit_affine(
                features_t,
                y_t,
                weights_t,
                kind=kind,
                mask=None if mask is None else to_tensor(mask, features_t.device),
                reg_lambda=reg_lambda,
                reg_mu=reg_mu,
                penalty=penalty,
                max_iter=self.max_iter,
                tol=self.tol,
            )
        except FloatingPointError as exc:
            finite = features[np.isfinite(features)]
            top = float(np.abs(finite).max()) if finite.size else 0.0
            if "subnormal" in str(exc):
                raise ValueError(
                    f"{name} cannot fit these logits: {exc}. Logits this close "
                    "to each other carry no usable ranking; check their units."
                ) from None
            raise ValueError(
                f"{name} cannot fit these logits in float64 ({exc}): entries of "
                f"magnitude up to {top:.3g} make the calibrated logits or their "
                "derivatives overflow. If large negative values mark masked "
                "classes (such as finfo.min or -1e30), pass -inf instead."
            ) from None
        self._check_affine_result(result, n_classes=features.shape[1])
        return result

    def _check_affine_result(self, result, n_classes):
        """Store n_iter_ and warn when a solve (in memory or over chunks) fell short."""
        name = type(self).__name__
        self.n_iter_ = result.n_iter
        n_frozen = getattr(result, "n_absent", 0) + getattr(result, "n_separable", 0)
        if n_frozen:
            warnings.warn(
                f"{name}: for {n_frozen:,} of the {n_classes:,} classes the "
                "calibration data determine no finite scale and bias "
                f"({result.n_absent:,} have no calibration sample, "
                f"{result.n_separable:,} are separated from every other sample by "
                "their own logit), so the likelihood keeps improving as their "
                "parameters go to infinity. They keep the temperature-scaling "
                f"map (scale 1/T = {result.start:.4g}, bias 0). More calibration "
                "samples per class, or TemperatureScaling, avoid this.",
                UserWarning,
                stacklevel=4,
            )
        penalised = self._is_penalised()
        # A fit over chunks does not keep its final loss.
        loss = getattr(result, "loss", None)
        if loss is not None and loss < SEPARATED_LOSS and not penalised:
            remedy = (
                "Regularise (reg_lambda, reg_mu)"
                if hasattr(self, "reg_lambda")
                else "Use TemperatureScaling"
            )
            warnings.warn(
                f"{name}: the calibrated logits separate the calibration "
                f"samples (mean NLL {loss:.1e} on them), so the likelihood "
                "has no finite optimum and the fit stopped on a ray where it "
                "was still improving; its predictions on new data are "
                f"overconfident and depend on where it stopped. {remedy} or "
                "use more calibration samples.",
                UserWarning,
                stacklevel=4,
            )
        if result.status == "max_iter":
            detail = (
                f"the largest gradient entry is {result.gradient:.3e} > "
                f"tol={self.tol:g}"
            )
            if result.gradient <= self.tol and hasattr(result, "decrement"):
                detail = (
                    f"the largest gradient entry is {result.gradient:.3e} but a "
                    "Newton step still predicts a decrease of the loss by "
                    f"{result.decrement / 2:.3e}"
                )
            warnings.warn(
                f"{name} did not converge in max_iter={self.max_iter} "
                f"{result.solver} iterations: {detail}. Increase max_iter.",
                ConvergenceWarning,
                stacklevel=5,
            )
        elif result.status == "stalled" and result.gradient > self.tol:
            warnings.warn(
                f"{name} stopped after {result.n_iter} {result.solver} iterations "
                "without further decrease of the loss in float64: the largest "
                f"gradient entry is {result.gradient:.3e} > tol={self.tol:g}. The "
                "optimum may lie at infinity (for example a class that the "
                "logits separate perfectly); consider a regularised method.",
                ConvergenceWarning,
                stacklevel=5,
            )


class VectorScaling(_AffineCalibrator):
    r"""Vector scaling: one scale and one bias per class.

    Calibrated probabilities are ``softmax(w * z + b)`` with ``w, b`` in
    ``R^K`` (``*`` elementwise). ``(w, b)`` minimise the (weighted)
    negative log-likelihood on the calibration set, a convex problem solved
    to a tight gradient tolerance: by Newton's method when the Hessian is
    cheap (up to 64 classes), otherwise by L-BFGS preconditioned with the
    exact 2 x 2 Hessian block of each class, recomputed at every point. Each
    pass over the logits costs ``O(N K)``. The solve starts from the exact
    temperature-scaling solution ``w = 1 / T, b = 0``, which it contains, so
    the calibration NLL is never above temperature scaling's.

    Unlike temperature scaling, a per-class scale and bias can change the
    argmax, so accuracy may change (usually by a fraction of a percent, in
    either direction); report it beside the calibration metrics.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solver runs. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is numpy either way.
    max_iter : int, default=1000
        Maximum number of solver iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-7
        The solve stops when the largest absolute entry of the gradient of the
        mean weighted NLL is at most ``tol`` (with the Newton solver, also
        when a Newton step predicts a decrease of the loss below ``tol / 100``).
        float32 logits are processed in float32 until float32 rounding
        dominates and in float64 after that, so any ``tol`` down to about
        ``1e-10`` is reachable. Logits whose spread lies outside ``2**-32`` to
        ``2**32`` are first multiplied by a power of two (exactly), and ``tol``
        applies to that rescaled problem.

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
    coef_ : ndarray of shape (n_classes,)
        The per-class scales ``w``.
    intercept_ : ndarray of shape (n_classes,)
        The per-class biases ``b``. Adding a constant to every bias changes
        nothing; unless a class is kept at the temperature map (see Notes),
        the solution returned has the biases summing to zero.
    n_iter_ : int
        Solver iterations (those of the temperature-scaling start when every
        class keeps the temperature map).
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    TemperatureScaling : One scale for all classes; keeps the argmax.
    MatrixScaling : A full matrix, with the ODIR penalty.
    DirichletCalibration : Matrix scaling of log-probabilities.

    Notes
    -----
    With a single score column ``s`` (binary problem, read as the logits
    ``(0, s)``), only ``coef_[1]`` and ``intercept_[1] - intercept_[0]``
    matter; this is then the same model as :class:`PlattScaling` without
    Platt's target smoothing.

    **Classes without a finite optimum.** The NLL has no minimiser in
    ``(w_k, b_k)`` when class ``k`` has no calibration sample (its
    probability should fall to 0) or when its own logit separates its
    samples from every other sample (a threshold on ``z_k``; its scale should
    grow for ever). Such classes, common when the calibration set has few
    samples per class (language-model vocabularies), are found exactly and
    kept at the temperature map ``w_k = 1 / T, b_k = 0``, with a
    ``UserWarning`` that counts them; the other classes are fitted with
    those held fixed (and, when every held class lacks samples, with their
    mean bias held at 0, so that the held classes keep their temperature
    odds against the mean class instead of falling to wherever the solver
    stops). Classes that separate the samples only jointly are not
    detected: their parameters grow until the gradient tolerance is met.

    **Masked classes.** A logit of ``-inf`` marks a class the row does not
    allow: its calibrated logit stays ``-inf`` (probability exactly 0,
    whatever the sign of ``w_k``), in :meth:`predict_proba`,
    :meth:`transform` and :meth:`to_torch`. A row may allow a single class
    (which then gets probability 1), but never mask its true class (a
    ``ValueError`` names the row). A column masked with ``-inf``, with a
    finite sentinel such as ``-1e9`` or ``np.finfo(dtype).min``, in every row
    of a class that is never the label gives the same fit of the other
    classes as the data without that column (to rounding; exactly for
    ``-inf``), and that class keeps the temperature map.

    **Scale.** The fit does not depend on the scale of ``sample_weight``
    (the weights are normalised), and logits ``c z`` give the map of ``z``
    with ``coef_ / c``, from ``1e-300`` to ``1e300``.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import VectorScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> vs = VectorScaling(device="cpu").fit(logits, y)
    >>> vs.coef_.shape, vs.intercept_.shape
    ((3,), (3,))
    >>> accuracy = (vs.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.882 -> 0.882
    """

    def __init__(self, *, device="auto", max_iter=1000, tol=1e-7, classes=None):
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        mask = mask_of(logits)
        features = logits if mask is None else np.where(mask, 0, logits)
        result = self._solve(features, y, sample_weight, "vector", mask=mask)
        self.coef_ = result.coef
        self.intercept_ = result.intercept

    def _chunk_sample_rows(self):
        """The rows the chunked fit gathers: its temperature start's warm start."""
        from .._torch._chunked import spaced_row_indices

        return spaced_row_indices

    def _fit_chunked(self, data):
        """The exact fit from chunks: Newton (L-BFGS beyond 64 classes) on sums."""
        check_device(self.device)
        n_classes = data.n_classes
        start = fit_temperature_chunks(data)
        theta = np.concatenate([np.full(n_classes, start.beta), np.zeros(n_classes)])
        # A class without a calibration sample, or one that its own logit
        # separates, has no finite scale and bias (the NLL keeps falling along a
        # ray): as in memory, it keeps the temperature map, and the solve runs
        # over the other classes' parameters.
        absent, separable = _unidentified_classes(data)
        frozen = absent | separable
        if frozen.all():
            frozen[:] = False  # nothing to solve for: the rays, as before
        free_classes = np.flatnonzero(~frozen)
        free = np.concatenate([free_classes, n_classes + free_classes])
        n_free = free_classes.shape[0]
        # When every frozen class lacks samples, a common shift of the free biases
        # is a ray (the frozen classes' probabilities fall for ever): their mean
        # is held at 0, as in memory (see _torch._affine._Objective.freeze).
        hold_bias_mean = bool(frozen.any()) and not bool((separable & frozen).any())

        def project(vector):
            if hold_bias_mean:
                vector = vector.copy()
                vector[n_free:] -= vector[n_free:].mean()
            return vector

        def evaluate(theta_free, hessian):
            full = theta.copy()
            full[free] = theta_free
            sums = data.reduce(
                functools.partial(
                    _vector_sums,
                    coef=full[:n_classes],
                    intercept=full[n_classes:],
                    hessian=hessian,
                )
            )
            total = sums[0]
            grad = project((sums[2 : 2 + 2 * n_classes] / total)[free])
            hess = None
            if hessian:
                hess = sums[2 + 2 * n_classes :].reshape(2 * n_classes, -1) / total
                hess = hess[np.ix_(free, free)]
                if hold_bias_mean:  # P H P, P centring the bias block
                    hess[n_free:, :] -= hess[n_free:, :].mean(axis=0)
                    hess[:, n_free:] -= hess[:, n_free:].mean(axis=1, keepdims=True)
            return sums[1] / total, grad, hess

        # The Hessian pass costs (2K)^2 per row whatever is frozen.
        if 2 * n_classes <= _NEWTON_PARAMS:
            gauge = None
            if hold_bias_mean or not frozen.any():
                # Adding a constant to every bias changes nothing (or is held),
                # unless some biases are held fixed.
                gauge = np.concatenate([np.zeros(n_free), np.ones(n_free)])
                gauge /= np.sqrt(n_free)
            result = _newton_over_chunks(
                evaluate,
                theta[free],
                tol=self.tol,
                max_iter=self.max_iter,
                gauge=gauge,
            )
        else:
            blocks = data.reduce(
                functools.partial(
                    _vector_sums,
                    coef=theta[:n_classes],
                    intercept=theta[n_classes:],
                    hessian="blocks",
                )
            )
            blocks = blocks[2 + 2 * n_classes :].reshape(3, n_classes) / blocks[0]
            to_theta, to_phi_grad = _block_preconditioner(
                blocks[:, free_classes], n_free
            )
            result = _lbfgs_over_chunks(
                evaluate,
                theta[free],
                tol=self.tol,
                max_iter=self.max_iter,
                # Steps stay where the bias mean is held (P is its own adjoint).
                preconditioner=(
                    lambda phi: project(to_theta(phi)),
                    lambda grad: to_phi_grad(project(grad)),
                ),
            )
        fitted = theta.copy()
        fitted[free] = result.theta
        coef = fitted[:n_classes].copy()
        intercept = fitted[n_classes:] - fitted[n_classes:].mean()
        summary = _AffineChunkedFit(coef, intercept, result)
        summary.n_absent = int((absent & frozen).sum())
        summary.n_separable = int((separable & frozen).sum())
        summary.start = start.beta
        self._check_affine_result(summary, n_classes=len(intercept))
        self.coef_ = coef
        self.intercept_ = intercept

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        work = _parameter_dtype(dtype, self.coef_, self.intercept_)
        mask = mask_of(logits)
        if mask is not None:
            logits = np.where(mask, 0, logits)
        out = logits.astype(work, copy=False) * self.coef_.astype(work)
        out += self.intercept_.astype(work)
        if mask is not None:
            out[mask] = -np.inf
        return out.astype(dtype, copy=False)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(w * z + b)``;
            exportable with ``torch.export.export`` (a program per input
            dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._modules import VectorScalingModule

        return VectorScalingModule(self.coef_, self.intercept_)


# Penalty per off-diagonal entry and per bias of the "auto" ODIR setting. On the
# bundled real logits (5000 calibration samples; K = 7, 10 and 100), 0.3 per
# entry gave the lowest or near-lowest test NLL for matrix and Dirichlet scaling
# among 0.01 to 1: below 0.1 the 100-class fits overfit, above 1 the 10-class
# fits lose what the off-diagonal terms offer. The bias matters less; 0.003 per
# bias was as good as or better than 0.03 and 0.3, and 0 overfits at K = 100.
_AUTO_LAMBDA = 0.3
_AUTO_MU = 0.003


class MatrixScaling(_AffineCalibrator):
    r"""Matrix scaling with the ODIR penalty: a full affine map of the logits.

    Calibrated probabilities are ``softmax(W z + b)`` with ``W`` in
    ``R^{K x K}`` and ``b`` in ``R^K``, minimising the (weighted) mean
    negative log-likelihood plus Kull et al.'s off-diagonal and intercept
    regularisation (ODIR)

    .. math::

        \frac{\lambda}{K(K-1)} \sum_{j \ne k} W_{jk}^2
        + \frac{\mu}{K} \sum_k b_k^2 .

    The problem is convex. It is solved to a tight gradient tolerance, from
    the exact temperature-scaling solution ``W = I / T, b = 0``: by Newton's
    method for small problems (up to 10 classes), otherwise by L-BFGS
    preconditioned with the exact Hessian block of each class.

    The map can change the argmax, so accuracy may change (in either
    direction); report it beside the calibration metrics.

    Parameters
    ----------
    reg_lambda : float or "auto", default="auto"
        ODIR penalty on the off-diagonal entries of ``W``: the objective adds
        ``reg_lambda / (K (K - 1)) * sum_{j != k} W_jk^2`` to the mean NLL.
        ``"auto"`` is ``0.3 K (K - 1)``, a penalty of ``0.3 W_jk^2`` on each
        entry whatever the number of classes ``K``. The diagonal is not
        penalised, so a large value tends to vector scaling (with a penalised
        bias). ``0`` gives the unregularised fit, which overfits badly when
        ``K`` is large (``K^2 + K`` parameters): with 100 classes and 5000
        samples it drives the calibration NLL to about 0 and multiplies the
        test NLL.
    reg_mu : float or "auto", default="auto"
        ODIR penalty on the biases: ``reg_mu / K * sum_k b_k^2``. ``"auto"`` is
        ``0.003 K``, a penalty of ``0.003 b_k^2`` on each bias.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solver runs. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is numpy either way.
    max_iter : int, default=1000
        Maximum number of solver iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-7
        The solve stops when the largest absolute entry of the gradient of the
        penalised objective is at most ``tol`` and, with the Newton solver,
        a Newton step predicts a decrease of the objective below
        ``tol / 100``: in a flat valley the gradient can be tiny while the
        optimum is still far. Logits whose spread lies outside ``2**-32`` to
        ``2**32`` are first multiplied by a power of two (exactly), and ``tol``
        applies to that rescaled problem.

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
    coef_ : ndarray of shape (n_classes, n_classes)
        The matrix ``W``: row ``k`` maps the logits to calibrated logit ``k``.
    intercept_ : ndarray of shape (n_classes,)
        The biases ``b``.
    n_iter_ : int
        Solver iterations.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    VectorScaling : A diagonal ``W``.
    DirichletCalibration : The same map applied to log-probabilities.
    TemperatureScaling : ``W = I / T``; keeps the argmax.

    Notes
    -----
    Unregularised, the map is unchanged by adding the same vector to every
    row of ``W`` or a constant to every bias; the solver moves only
    orthogonally to those directions from its start, so the solution returned
    is the optimum nearest to ``(I / T, 0)``. Without regularisation the
    optimum may not exist (the NLL can decrease for ever when the logits
    separate the classes); the solver then stops on the gradient tolerance.

    **Classes without a calibration sample.** The diagonal of ``W`` is not
    penalised, so such a class has no finite ``W_kk`` (its probability should
    fall to 0); it keeps its temperature-scaling row (``W_kk = 1 / T``, zeros,
    ``b_k = 0``), with a ``UserWarning`` that counts it, and the other rows
    are fitted with it held.

    **Masked classes.** A logit of ``-inf`` marks a class the row does not
    allow. Its calibrated logit is ``-inf`` (probability exactly 0, in
    :meth:`predict_proba`, :meth:`transform` and :meth:`to_torch`), and as an
    input to the mixing it stands in as the lowest unmasked logit of its row:
    a masked class counts as no more likely than the least likely class the
    row allows, and adding a constant to a row still shifts every input alike.
    A row may allow a single class (probability 1), but never mask its true
    class (a ``ValueError`` names the row). A column masked with ``-inf`` in
    every row is left out of the solve: the other classes get the fit of the
    data without it when the penalty per entry does not depend on ``K``
    (``"auto"`` or ``0``; an explicit ``reg_lambda`` is divided by the
    ``K (K - 1)`` of ``X``), and the column keeps ``W_kk = 1 / T`` and zeros.
    Finite sentinels (``-1e9``, ``np.finfo(dtype).min``) are numbers to this
    map: they enter every class's logit through ``W`` and change the fit;
    mask with ``-inf``.

    **Scale.** The fit does not depend on the scale of ``sample_weight``
    (the weights are normalised, so the penalty keeps its weight relative to
    the mean NLL). The ODIR penalty is not scale-free: logits ``c z`` with
    penalty ``lambda`` give exactly the map of ``z`` with penalty
    ``lambda / c^2`` (``W`` divided by ``c``), so at ``c = 1e155`` the
    penalty on ``W`` has no effect and at ``c = 1e-300`` it keeps ``W``
    diagonal. Extreme logits are solved as this exact equivalent problem, on
    logits brought near 1 by a power of two.

    The ``K (K + 1)`` parameters limit the number of classes: above 4095
    (``2**24`` parameters) :meth:`fit` raises a ``ValueError`` rather than
    start a solve that needs gigabytes per copy of the parameters; vector
    and temperature scaling scale linearly in ``K``.

    The ``"auto"`` penalties were chosen on the bundled real logits (CIFAR-10
    and CIFAR-100 networks, 5000 calibration samples): with them, matrix
    scaling improves the test NLL of every CIFAR-100 model over the raw
    logits and over vector scaling, where the unregularised fit multiplies
    it. With much smaller calibration sets, prefer stronger penalties (or
    temperature scaling); tune them with
    :class:`~sklearn.model_selection.GridSearchCV` and a NLL scorer.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.
    .. [2] M. Kull, M. Perello-Nieto, M. Kangsepp, T. Silva Filho, H. Song and
       P. Flach, "Beyond temperature scaling: Obtaining well-calibrated
       multi-class probabilities with Dirichlet calibration", NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import MatrixScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> ms = MatrixScaling(reg_lambda=0.0, reg_mu=0.0, device="cpu").fit(logits, y)
    >>> ms.coef_.shape, ms.intercept_.shape
    ((3, 3), (3,))
    >>> accuracy = (ms.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.882 -> 0.884
    """

    _parameter_constraints: dict = {
        **_AffineCalibrator._parameter_constraints,
        "reg_lambda": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "reg_mu": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(
        self,
        *,
        reg_lambda="auto",
        reg_mu="auto",
        device="auto",
        max_iter=1000,
        tol=1e-7,
        classes=None,
    ):
        self.reg_lambda = reg_lambda
        self.reg_mu = reg_mu
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes

    def _features(self, logits):
        return logits

    def _state_shapes(self, n_classes):
        return (n_classes, n_classes), (n_classes,)

    def _fit(self, logits, y, sample_weight):
        n_classes = logits.shape[1]
        reg_lambda, reg_mu = self.reg_lambda, self.reg_mu
        if reg_lambda == "auto":
            reg_lambda = _AUTO_LAMBDA * n_classes * (n_classes - 1)
        if reg_mu == "auto":
            reg_mu = _AUTO_MU * n_classes
        mask = mask_of(logits)
        result = self._solve(
            _mixing_inputs(self._features(logits), mask),
            y,
            sample_weight,
            "matrix",
            reg_lambda=reg_lambda,
            reg_mu=reg_mu,
            mask=mask,
        )
        self.coef_ = result.coef
        self.intercept_ = result.intercept

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        mask = mask_of(logits)
        features = _mixing_inputs(self._features(logits), mask)
        # Features in the logits' own dtype are within its range already.
        wider = () if features.dtype == dtype else (features,)
        work = _parameter_dtype(dtype, self.coef_, self.intercept_, *wider)
        features = features.astype(work, copy=False)
        out = features @ self.coef_.T.astype(work) + self.intercept_.astype(work)
        if mask is not None:
            out[mask] = -np.inf
        return out.astype(dtype, copy=False)

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(W z + b)``;
            exportable with ``torch.export.export`` (a program per input
            dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._modules import MatrixScalingModule

        return MatrixScalingModule(self.coef_, self.intercept_, log_probabilities=False)


class DirichletCalibration(MatrixScaling):
    r"""Dirichlet calibration: matrix scaling of the log-probabilities, with ODIR.

    Calibrated probabilities are ``softmax(W log softmax(z) + b)``: the full
    Dirichlet calibration map of Kull et al. (2019) applied to the model's
    probabilities ``softmax(z)``, fitted by minimising the (weighted) mean
    negative log-likelihood plus the off-diagonal and intercept
    regularisation (ODIR)

    .. math::

        \frac{\lambda}{K(K-1)} \sum_{j \ne k} W_{jk}^2
        + \frac{\mu}{K} \sum_k b_k^2 .

    Compared with :class:`MatrixScaling`, each row's logits are first shifted
    by their log-sum-exp, so the map only sees what the probabilities carry:
    the two coincide when ``W``'s rows sum to the same value. The problem is
    convex and solved to a tight gradient tolerance from the exact
    temperature-scaling solution (see :class:`MatrixScaling`).

    The map can change the argmax, so accuracy may change (in either
    direction); report it beside the calibration metrics.

    Parameters
    ----------
    reg_lambda : float or "auto", default="auto"
        ODIR penalty on the off-diagonal entries of ``W``: the objective adds
        ``reg_lambda / (K (K - 1)) * sum_{j != k} W_jk^2`` to the mean NLL.
        ``"auto"`` is ``0.3 K (K - 1)``, a penalty of ``0.3 W_jk^2`` on each
        entry whatever the number of classes ``K``. The diagonal is not
        penalised, so a large value tends to vector scaling (with a penalised
        bias). ``0`` gives the unregularised fit, which overfits badly when
        ``K`` is large (``K^2 + K`` parameters): with 100 classes and 5000
        samples it drives the calibration NLL to about 0 and multiplies the
        test NLL.
    reg_mu : float or "auto", default="auto"
        ODIR penalty on the biases: ``reg_mu / K * sum_k b_k^2``. ``"auto"`` is
        ``0.003 K``, a penalty of ``0.003 b_k^2`` on each bias.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solver runs. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is numpy either way.
    max_iter : int, default=1000
        Maximum number of solver iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-7
        The solve stops when the largest absolute entry of the gradient of the
        penalised objective is at most ``tol``.

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
    coef_ : ndarray of shape (n_classes, n_classes)
        The matrix ``W`` applied to the log-probabilities.
    intercept_ : ndarray of shape (n_classes,)
        The biases ``b``.
    n_iter_ : int
        Solver iterations.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    MatrixScaling : The same map applied to the logits themselves.
    VectorScaling : A diagonal map of the logits, without penalty.

    Notes
    -----
    ``X`` holds logits, as for every calibrator of this library. To calibrate
    probabilities ``p``, pass ``np.log(p)``: the log-probabilities are then
    ``log p`` itself, and a probability of 0 is a masked class. As for
    :class:`MatrixScaling`, more than 4095 classes are refused.

    **Masked classes.** A logit of ``-inf`` has log-probability ``-inf``. Its
    calibrated logit is ``-inf`` (probability exactly 0), and as an input to
    the mixing it stands in as the lowest finite log-probability of its row
    (rather than ``0``, the log-probability of a certain class): the map
    then is :class:`MatrixScaling` of the log-probabilities, masks included.
    Finite sentinels enter the mixing as the numbers they are. See
    :class:`MatrixScaling` for the column masked everywhere, the scale of the
    weights and of the logits (with the log-probabilities in place of the
    logits).

    References
    ----------
    .. [1] M. Kull, M. Perello-Nieto, M. Kangsepp, T. Silva Filho, H. Song and
       P. Flach, "Beyond temperature scaling: Obtaining well-calibrated
       multi-class probabilities with Dirichlet calibration", NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import DirichletCalibration
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(500, 3))
    >>> dc = DirichletCalibration(device="cpu").fit(logits, y)
    >>> dc.coef_.shape
    (3, 3)
    >>> accuracy = (dc.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.882 -> 0.878
    """

    def _features(self, logits):
        # In float64: float32 logits near its range (3e38) have gaps that
        # overflow float32, which would turn finite log-probabilities to -inf.
        return log_softmax(logits.astype(np.float64, copy=False))

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(W log_softmax(z) + b)``;
            exportable with ``torch.export.export`` (a program per input
            dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._modules import MatrixScalingModule

        return MatrixScalingModule(self.coef_, self.intercept_, log_probabilities=True)


class PlattScaling(_AffineCalibrator):
    r"""Platt scaling of a binary classifier's score: ``sigmoid(a s + c)``.

    The positive-class probability is ``sigmoid(a s + c)`` where ``s`` is a
    single score column (a ``decision_function``, or any real score), or the
    difference ``z_1 - z_0`` of two logit columns. ``(a, c)`` minimise the
    (weighted) negative log-likelihood, by Newton's method to a tight
    gradient tolerance.

    With ``smooth_targets=True`` (the default, as in Platt's paper and in
    scikit-learn's ``CalibratedClassifierCV(method="sigmoid")``) the 0/1
    labels are replaced by Platt's out-of-sample targets
    ``t_+ = (N_+ + 1) / (N_+ + 2)`` and ``t_- = 1 / (N_- + 2)``, with ``N_+``,
    ``N_-`` the (weighted) numbers of positive and negative samples, which
    keeps ``a`` finite when the scores separate the classes. The fitted map
    then matches scikit-learn's sigmoid calibration on the same scores.
    ``smooth_targets=False`` fits the plain maximum-likelihood logistic map.

    ``a`` is not constrained to be positive, and the intercept moves the
    decision threshold, so the predicted class can change.

    Parameters
    ----------
    smooth_targets : bool, default=True
        Use Platt's smoothed targets instead of the 0/1 labels.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the solver runs. ``"auto"`` uses CUDA when available. Asking
        for CUDA without it falls back to the CPU with a warning. The fitted
        state is numpy either way.
    max_iter : int, default=1000
        Maximum number of Newton iterations. A
        :class:`~sklearn.exceptions.ConvergenceWarning` naming the final
        gradient is raised if reached.
    tol : float, default=1e-7
        The solve stops when the largest absolute entry of the gradient of the
        mean weighted NLL is at most ``tol``.

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
    coef_ : ndarray of shape (1,)
        The slope ``a``.
    intercept_ : ndarray of shape (1,)
        The intercept ``c``.
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
    VectorScaling : A scale and a bias per class, for any number of classes.
    sklearn.calibration.CalibratedClassifierCV : ``method="sigmoid"``.

    Notes
    -----
    scikit-learn's sigmoid calibration parametrises the same map as
    ``1 / (1 + exp(A s + B))``, that is ``A = -a`` and ``B = -c``.

    **Scale of the weights.** Platt's targets take the weighted counts
    ``N_+`` and ``N_-`` as sample sizes, as scikit-learn does: multiplying
    every weight by ``c`` changes the targets (and so the fit), from the
    plain logistic fit as ``c -> infinity`` to ``t_+ = t_- = 1/2`` (a
    constant probability 1/2) as ``c -> 0``. Only the counts depend on the
    scale: the weighted likelihood itself is normalised, so with
    ``smooth_targets=False`` the fit does not depend on the scale at all.

    **Masked classes.** A score of ``-inf`` (a single score column, or
    ``z_1 = -inf``) masks the positive class: probability 0, whatever the
    sign of ``a``. ``z_0 = -inf`` masks the negative class: the positive one
    gets probability 1. Such a row's probability is fixed, so it is left out
    of the fit and of ``N_+``, ``N_-``, unless its label is the masked class
    (a ``ValueError`` names the row). ``+inf`` is not a logit; mask the
    negative class with two columns. Scores of any magnitude are fitted
    (they are brought near 1 by an exact power of two); with
    ``smooth_targets=False``, scores that separate the classes leave ``a``
    at the temperature-scaling slope, with a warning.

    References
    ----------
    .. [1] J. Platt, "Probabilistic Outputs for Support Vector Machines and
       Comparisons to Regularized Likelihood Methods", Advances in Large
       Margin Classifiers, 1999.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import PlattScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=500)
    >>> score = 3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=500)
    >>> platt = PlattScaling(device="cpu").fit(score[:, None], y)
    >>> platt.coef_.shape, platt.intercept_.shape
    ((1,), (1,))
    >>> accuracy = (platt.predict(score[:, None]) == y).mean()
    >>> print(f"accuracy {((score > 0) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.936 -> 0.934
    """

    _parameter_constraints: dict = {
        **_AffineCalibrator._parameter_constraints,
        "smooth_targets": ["boolean"],
    }

    def __init__(
        self,
        *,
        smooth_targets=True,
        device="auto",
        max_iter=1000,
        tol=1e-7,
        classes=None,
    ):
        self.smooth_targets = smooth_targets
        self.device = device
        self.max_iter = max_iter
        self.tol = tol
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        check_device(self.device)
        if logits.shape[1] != 2:
            raise ValueError(
                "Only binary classification is supported. PlattScaling calibrates "
                "one score column or two logit columns, but X has "
                f"{logits.shape[1]} logit columns (classes); use VectorScaling, "
                "MatrixScaling or TemperatureScaling for multiclass logits."
            )
        score = logits[:, 1] - logits[:, 0]
        fixed = ~np.isfinite(score)
        if fixed.any():
            # A masked class (score -inf: the positive one, +inf: the
            # negative one) fixes the row's probability whatever (a, c): the
            # row says nothing about the map and is left out of the fit (and
            # of Platt's counts), unless its label is the masked class.
            check_true_class_unmasked(logits, y, sample_weight)
            keep = ~fixed & (sample_weight > 0)
            if not keep.any():
                raise ValueError(
                    "PlattScaling needs samples with a finite score: every row "
                    "with a positive weight has a masked (-inf) class."
                )
            score, y, sample_weight = score[keep], y[keep], sample_weight[keep]
        features = np.column_stack([np.zeros_like(score), score])
        if self.smooth_targets:
            # Each sample becomes a positive row weighted by its target t and
            # a negative row weighted by 1 - t: the NLL against soft targets.
            # The targets use the weighted counts as they are (scikit-learn's
            # convention); the weights are normalised only afterwards.
            n_positive = float(sample_weight[y == 1].sum())
            n_negative = float(sample_weight[y == 0].sum())
            target = np.where(
                y == 1, (n_positive + 1) / (n_positive + 2), 1 / (n_negative + 2)
            )
            sample_weight = sample_weight / sample_weight.max()
            features = np.concatenate([features, features])
            y = np.concatenate([np.ones_like(y), np.zeros_like(y)])
            sample_weight = np.concatenate(
                [sample_weight * target, sample_weight * (1 - target)]
            )
        result = self._solve(features, y, sample_weight, "vector")
        self.coef_ = result.coef[1:].copy()
        self.intercept_ = result.intercept[1:] - result.intercept[:1]

    def _fit_chunked(self, data):
        """The exact fit from chunks: Newton on sums over chunks."""
        check_device(self.device)
        if data.n_classes != 2:
            raise ValueError(
                "Only binary classification is supported. PlattScaling calibrates "
                "one score column or two logit columns, but X has "
                f"{data.n_classes} logit columns (classes); use VectorScaling, "
                "MatrixScaling or TemperatureScaling for multiclass logits."
            )
        if not data.open_class_weight.sum() > 0:
            raise ValueError(
                "PlattScaling needs samples with a finite score: every row "
                "with a positive weight has a masked (-inf) class."
            )
        if self.smooth_targets:
            # Platt's counts leave out the rows with a masked class, as in memory.
            n_negative, n_positive = data.open_class_weight
            targets = np.array(
                [1 / (n_negative + 2), (n_positive + 1) / (n_positive + 2)]
            )
        else:
            targets = np.array([0.0, 1.0])

        def evaluate(theta, hessian):
            sums = data.reduce(
                functools.partial(
                    _platt_sums,
                    slope=theta[0],
                    intercept=theta[1],
                    targets=targets,
                    hessian=hessian,
                )
            )
            total = sums[0]
            return sums[1] / total, sums[2:4] / total, sums[4:].reshape(2, 2) / total

        result = _newton_over_chunks(
            evaluate, np.array([1.0, 0.0]), tol=self.tol, max_iter=self.max_iter
        )
        coef, intercept = result.theta[:1].copy(), result.theta[1:].copy()
        self._check_affine_result(
            _AffineChunkedFit(coef, intercept, result), n_classes=2
        )
        self.coef_ = coef
        self.intercept_ = intercept

    def _state_shapes(self, n_classes):
        if n_classes != 2:
            fail_state(self, "classes_", f"must hold 2 classes, got {n_classes}")
        return (1,), (1,)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        score = logits[:, 1] - logits[:, 0]
        # A masked class keeps probability 0: a score of -inf (positive class
        # masked) or +inf (negative class masked) bypasses the map.
        positive_masked = np.isneginf(score)
        negative_masked = np.isposinf(score)
        score = np.where(positive_masked | negative_masked, 0, score)
        work = _parameter_dtype(dtype, self.coef_, self.intercept_)
        positive = score.astype(work, copy=False) * work(self.coef_[0]) + work(
            self.intercept_[0]
        )
        positive = positive.astype(dtype, copy=False)
        out = np.column_stack([np.zeros_like(positive), positive])
        out[negative_masked, 0] = -np.inf
        out[positive_masked, 1] = -np.inf
        return out

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax((0, a s + c))`` with ``s`` the score column or the
            difference of the two logits;
            exportable with ``torch.export.export`` (a program per input
            dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._modules import PlattModule

        return PlattModule(float(self.coef_[0]), float(self.intercept_[0]))


# --- the chunked fits: sums over chunks -------------------------------------------

# Newton for the affine maps up to this many parameters (vector scaling up to
# 64 classes, Platt always), as the in-memory solver; L-BFGS beyond.
_NEWTON_PARAMS = 128
_ARMIJO = 1e-4
_MAX_HALVINGS = 40


def _temperature_sums(logits, codes, weights, *, beta, exponent):
    from .._torch._chunked import temperature_chunk_sums

    check_true_class_unmasked(logits, codes, weights, of=" of a chunk")
    return temperature_chunk_sums(logits, codes, weights, beta, exponent)


def fit_temperature_chunks(data, max_iter=100):
    """The exact temperature solve over chunks: a ``TemperatureFit``."""
    from .._torch._chunked import fit_inverse_temperature_chunked, spaced_row_indices

    def reduce(beta, exponent):
        return data.reduce(
            functools.partial(_temperature_sums, beta=beta, exponent=exponent)
        )

    # The in-memory solver reads the logit scale and runs its warm start on
    # evenly spaced rows; gathering the same rows gives the same start.
    sample = data.sample
    if sample is None:
        sample = data.gather(spaced_row_indices(data.n_samples))
    result, _ = fit_inverse_temperature_chunked(
        sample, reduce, data.n_samples, max_iter=max_iter
    )
    return result


def _vector_sums(logits, codes, weights, *, coef, intercept, hessian):
    """``[W, sum w nll, grad (2K), Hessian (2K x 2K) if asked]`` of one chunk.

    Unnormalised sums over the rows; the NLL of ``softmax(coef * z + b)``.
    """
    n_classes = logits.shape[1]
    blocks = hessian == "blocks"
    size = 2 + 2 * n_classes
    if blocks:
        size += 3 * n_classes
    elif hessian:
        size += 4 * n_classes**2
    out = np.zeros(size)
    if logits.shape[0] == 0:
        return out
    check_true_class_unmasked(logits, codes, weights, of=" of a chunk")
    g_w, g_b = np.zeros(n_classes), np.zeros(n_classes)
    if blocks:
        h = np.zeros((3, n_classes))
    elif hessian:
        h = np.zeros((2 * n_classes, 2 * n_classes))
    for rows in row_blocks(*logits.shape):
        z = logits[rows].astype(np.float64)
        w = weights[rows]
        y = codes[rows]
        mask = mask_of(z)
        if mask is not None:
            # A masked entry has calibrated logit -inf whatever (w_k, b_k), as
            # in memory: feature 0 (so that -inf * 0 never makes a NaN in the
            # sums of z q) and output -inf (q = 0: no term in any sum).
            z[mask] = 0.0
        f = z * coef + intercept
        if mask is not None:
            f[mask] = -np.inf
        top = f.max(axis=1, keepdims=True)
        f -= top
        q = np.exp(f)
        norm = q.sum(axis=1, keepdims=True)
        q /= norm
        index = np.arange(z.shape[0])
        out[0] += w.sum()
        out[1] += w @ (np.log(norm[:, 0]) - f[index, y])
        residual = q.copy()
        residual[index, y] -= 1.0
        residual *= w[:, None]
        g_w += np.einsum("ij,ij->j", residual, z)
        g_b += residual.sum(axis=0)
        if blocks:
            # The 2 x 2 Hessian block (w_k, b_k) of every class.
            curvature = q * (1.0 - q) * w[:, None]
            h[0] += np.einsum("ij,ij->j", curvature * z, z)
            h[1] += np.einsum("ij,ij->j", curvature, z)
            h[2] += curvature.sum(axis=0)
        elif hessian:
            wq = q * w[:, None]
            qz = q * z
            wqz = wq * z
            k = n_classes
            h[:k, :k] += np.diag(np.einsum("ij,ij->j", wqz, z)) - wqz.T @ qz
            cross = np.diag(wqz.sum(axis=0)) - wqz.T @ q
            h[:k, k:] += cross
            h[k:, :k] += cross.T
            h[k:, k:] += np.diag(wq.sum(axis=0)) - wq.T @ q
    out[2 : 2 + n_classes] = g_w
    out[2 + n_classes : 2 + 2 * n_classes] = g_b
    if hessian:
        out[2 + 2 * n_classes :] = h.ravel()
    return out


def _platt_sums(logits, codes, weights, *, slope, intercept, targets, hessian):
    """``[W, sum w nll, grad (2), Hessian (2 x 2)]`` of the logistic map of one chunk.

    Soft targets ``t`` per class (Platt's, or 0/1): the loss of a row is
    ``softplus(u) - t u`` with ``u = a s + c``, ``s = z_1 - z_0``.
    """
    out = np.zeros(8)
    if logits.shape[0] == 0:
        return out
    s = logits[:, 1].astype(np.float64) - logits[:, 0]
    fixed = ~np.isfinite(s)
    if fixed.any():
        # As in memory: a masked class fixes the row's probability whatever
        # (a, c), so the row is left out of the fit, unless its label is the
        # masked class (an infinite NLL: a ValueError).
        check_true_class_unmasked(logits, codes, weights, of=" of a chunk")
        keep = ~fixed
        s, codes, weights = s[keep], codes[keep], weights[keep]
    t = targets[codes]
    u = slope * s + intercept
    softplus = np.logaddexp(0.0, u)
    p = np.exp(u - softplus)  # sigmoid(u), stable for both signs
    out[0] = weights.sum()
    out[1] = weights @ (softplus - t * u)
    r = weights * (p - t)
    out[2], out[3] = r @ s, r.sum()
    if hessian:
        c = weights * p * (1.0 - p)
        out[4], out[5], out[7] = c @ (s * s), c @ s, c.sum()
        out[6] = out[5]
    return out


class _NewtonResult:
    def __init__(self, theta, n_iter, status, gradient, solver):
        self.theta = theta
        self.n_iter = n_iter
        self.status = status
        self.gradient = gradient
        self.solver = solver


def _newton_over_chunks(evaluate, theta, *, tol, max_iter, gauge=None):
    """Damped Newton on a convex loss whose value, gradient and Hessian are sums.

    ``evaluate(theta, hessian)`` returns the mean loss, gradient and Hessian
    (one pass over the chunks). Steps are Newton steps on the Hessian plus the
    gauge projector (directions that change nothing), solved by least squares
    so that directions without curvature keep their start value; a step that
    does not decrease the loss enough is halved (Armijo). Stops when the
    largest gradient entry is at most ``tol``.
    """
    loss, grad, hess = evaluate(theta, True)
    for n_iter in range(1, max_iter + 1):
        if np.max(np.abs(grad)) <= tol:
            return _NewtonResult(
                theta, n_iter - 1, "converged", np.max(np.abs(grad)), "Newton"
            )
        system = hess if gauge is None else hess + np.outer(gauge, gauge)
        direction = np.linalg.lstsq(system, -grad, rcond=None)[0]
        slope = grad @ direction
        if not slope < 0:
            direction, slope = -grad, -(grad @ grad)
        step = 1.0
        noise = 1e-13 * max(1.0, abs(loss))
        for _ in range(_MAX_HALVINGS):
            candidate = theta + step * direction
            new_loss, new_grad, new_hess = evaluate(candidate, True)
            if new_loss <= loss + _ARMIJO * step * slope + noise:
                break
            step *= 0.5
        else:
            return _NewtonResult(
                theta, n_iter, "stalled", np.max(np.abs(grad)), "Newton"
            )
        theta, loss, grad, hess = candidate, new_loss, new_grad, new_hess
    status = "converged" if np.max(np.abs(grad)) <= tol else "max_iter"
    return _NewtonResult(theta, max_iter, status, np.max(np.abs(grad)), "Newton")


def _block_preconditioner(blocks, n_classes):
    """``L^-T`` of the per-class 2 x 2 Hessian blocks ``L L^T``, as a function.

    Curvatures below a tiny fraction of the largest are floored, as in memory:
    a class without samples has (almost) none.
    """
    a, b, c = blocks
    floor = 1e-9 * max(float(np.max(a)), float(np.max(c)), 1e-300)
    a = np.maximum(a, floor)
    c = np.maximum(c, floor)
    # Cholesky of [[a, b], [b, c]]: l11 = sqrt(a), l21 = b / l11, l22 = sqrt(c - l21^2)
    l11 = np.sqrt(a)
    l21 = b / l11
    l22 = np.sqrt(np.maximum(c - l21**2, floor))

    def to_theta(phi):
        """theta offset = L^-T phi, class by class."""
        u, v = phi[:n_classes], phi[n_classes:]
        y2 = v / l22
        y1 = (u - l21 * y2) / l11
        return np.concatenate([y1, y2])

    def to_phi_grad(grad):
        """d/dphi = L^-1 d/dtheta."""
        gu, gv = grad[:n_classes], grad[n_classes:]
        x1 = gu / l11
        x2 = (gv - l21 * x1) / l22
        return np.concatenate([x1, x2])

    return to_theta, to_phi_grad


def _lbfgs_over_chunks(evaluate, theta, *, tol, max_iter, preconditioner=None):
    """L-BFGS (scipy) on value and gradient, one pass per evaluation.

    With a ``preconditioner`` ``(to_theta, to_phi_grad)``, the solve runs in
    the variables ``phi`` of ``theta = theta0 + to_theta(phi)``, where the
    per-class Hessian blocks at the start are the identity. It stops when the
    largest gradient entry in ``theta`` is at most ``tol``.
    """
    from scipy.optimize import minimize

    if preconditioner is None:
        preconditioner = (lambda phi: phi, lambda grad: grad)
    to_theta, to_phi_grad = preconditioner
    start = theta.copy()
    seen = {}

    def fun(phi):
        loss, grad, _ = evaluate(start + to_theta(phi), False)
        seen[phi.tobytes()] = float(np.max(np.abs(grad)))
        return loss, to_phi_grad(grad)

    iterations = [0]
    stopped = {}

    class _Converged(Exception):
        pass

    def callback(xk):
        # The current point as a plain array: scipy < 1.11 passes only that
        # (and lets no StopIteration end the solve), so stopping goes through
        # an exception of our own on every version.
        iterations[0] += 1
        if seen.get(np.asarray(xk).tobytes(), np.inf) <= tol:
            stopped["x"] = np.array(xk, dtype=np.float64)
            raise _Converged

    n = theta.shape[0]
    try:
        solution = minimize(
            fun,
            np.zeros(n),
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options={"maxiter": max_iter, "gtol": 0.0, "ftol": 0.0, "maxcor": 10},
        )
        phi, n_iter = solution.x, solution.nit
    except _Converged:
        phi, n_iter = stopped["x"], iterations[0]
    theta = start + to_theta(phi)
    gradient = seen.get(phi.tobytes())
    if gradient is None:
        gradient = float(np.max(np.abs(evaluate(theta, False)[1])))
    if gradient <= tol:
        status = "converged"
    elif n_iter >= max_iter:
        status = "max_iter"
    else:
        status = "stalled"
    return _NewtonResult(theta, n_iter, status, gradient, "L-BFGS")


class _AffineChunkedFit:
    """What ``_AffineCalibrator._check_affine_result`` reads of a solve."""

    def __init__(self, coef, intercept, newton):
        self.coef = coef
        self.intercept = intercept
        self.n_iter = newton.n_iter
        self.status = newton.status
        self.gradient = newton.gradient
        self.solver = newton.solver


def _separation_extremes(logits, codes, weights):
    """Per class: the extremes of its logit on its own rows and on the others.

    ``(own_min, own_max, other_min, other_max)`` concatenated, over rows of
    positive weight, masked entries left out; combined by min and max.
    """
    k = logits.shape[1]
    counted = weights > 0
    x = np.asarray(logits[counted], dtype=np.float64)
    y = codes[counted]
    extremes = np.concatenate([np.full(k, np.inf), np.full(k, -np.inf)] * 2)
    if not y.shape[0]:
        return extremes
    rows = np.arange(y.shape[0])
    true = x[rows, y]
    np.minimum.at(extremes[:k], y, true)
    np.maximum.at(extremes[k : 2 * k], y, true)
    masked = np.isneginf(x)
    x[rows, y] = -np.inf  # masked entries are -inf already
    extremes[3 * k :] = x.max(axis=0)
    x[masked] = np.inf
    x[rows, y] = np.inf
    extremes[2 * k : 3 * k] = x.min(axis=0)
    return extremes


def _combine_extremes(a, b):
    k = a.shape[0] // 4
    return np.concatenate(
        [np.minimum(a[:k], b[:k]), np.maximum(a[k : 2 * k], b[k : 2 * k])]
        + [np.minimum(a[2 * k : 3 * k], b[2 * k : 3 * k])]
        + [np.maximum(a[3 * k :], b[3 * k :])]
    )


def _unidentified_classes(data):
    """Classes whose vector-scaling (w_k, b_k) have no finite optimum.

    The rule of the in-memory solver, from one pass of per-class extremes:
    absent (no sample of positive weight), or separable (a threshold on the
    class's own logit puts its rows on one side and every other row on the
    other, unless all of them are equal, or no other row sees the class).
    Returns (absent, separable), boolean arrays of shape (n_classes,).
    """
    from .._torch._affine import unidentified_from_extremes

    extremes = data.reduce(_separation_extremes, _combine_extremes)
    return unidentified_from_extremes(*np.split(extremes, 4))
