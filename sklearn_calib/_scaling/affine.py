"""Affine calibration maps of the logits: vector, matrix, Dirichlet and Platt scaling.

Each map is fitted by exact minimisation of the (penalised) NLL in torch
(:mod:`sklearn_calib._torch._affine`); vector and Platt scaling also fit from
chunks, on sums over the chunks.
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
    check_state_int,
    fail_state,
)
from ..utils._math import log_softmax
from ..utils._validation import (
    check_device,
    check_true_class_unmasked,
    keep_masked,
    mask_of,
    weight_scale,
    zero_masked,
)
from .temperature import (
    fit_temperature_chunks,
    torch_inputs,
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


def mixing_inputs(features, mask):
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


# --- vector, matrix and Dirichlet scaling, Platt scaling ----------------------


# Largest affine map fitted: 2**24 parameters is a full K x K matrix up to
# K = 4095. The L-BFGS solver keeps about 25 float64 vectors of that size
# (history pairs, gradients, line-search points) and each iteration costs
# n_samples * K^2 multiply-adds: ~3.4 GB at K = 4095, ~19 GB at K = 10,000.
_MAX_AFFINE_PARAMETERS = 2**24
_SOLVER_COPIES = 25


class AffineCalibrator(BaseCalibrator):
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

    def _bounds_every_entry(self):
        """Whether a penalty bounds every parameter (ODIR leaves the diagonal)."""
        return False

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
        ray_start=None,
    ):
        """Minimise the penalised NLL; store n_iter_ and return the solution.

        ``mask`` marks the masked (-inf) entries; ``features`` then holds
        finite stand-ins there (see :func:`mixing_inputs`). ``ray_start``:
        where the solver's search for its temperature-ray start begins
        (``fit_affine``), for features whose best scale is known to be near
        a value.
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

        features_t, y_t, weights_t = torch_inputs(
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
                # Set by CalibratorSelector: on its fold fits the full fit's
                # map (and class blocks), on its full fit _keep_blocks.
                warm_start=getattr(self, "_warm_start", None),
                ray_start=ray_start,
                keep_blocks=getattr(self, "_keep_blocks", False),
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
        if result.blocks is not None:
            self._blocks = result.blocks
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
        # The loss sums exact terms minus the labels' part, so near 0 it can
        # round below 0 (-7e-13 seen over chunks): shown as 0.
        loss = getattr(result, "loss", None)
        if loss is not None and loss < SEPARATED_LOSS and not penalised:
            remedy = (
                "Regularise (reg_lambda, reg_mu)"
                if hasattr(self, "reg_lambda")
                else "Use TemperatureScaling"
            )
            warnings.warn(
                f"{name}: the calibrated logits separate the calibration "
                f"samples (mean NLL {max(loss, 0.0):.1e} on them), so the likelihood "
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
            # A penalty on every entry bounds the optimum: there the stall is
            # float64's rounding of the loss, below which tol cannot be met.
            cause = (
                "The fit is regularised, so its optimum is finite: tol is below "
                "what float64's rounding of the loss resolves; raise tol."
                if penalised and self._bounds_every_entry()
                else "The optimum may lie at infinity (for example a class that "
                "the logits separate perfectly); consider a regularised method."
            )
            warnings.warn(
                f"{name} stopped after {result.n_iter} {result.solver} iterations "
                "without further decrease of the loss in float64: the largest "
                f"gradient entry is {result.gradient:.3e} > tol={self.tol:g}. "
                + cause,
                ConvergenceWarning,
                stacklevel=5,
            )


class VectorScaling(AffineCalibrator):
    r"""Vector scaling: one scale and one bias per class.

    Calibrated probabilities are ``softmax(w * z + b)`` with ``w, b`` in
    ``R^K`` (``*`` elementwise). ``(w, b)`` minimise the (weighted)
    negative log-likelihood on the calibration set, a convex problem solved
    exactly (to the gradient tolerance ``tol``), starting from the exact
    temperature-scaling solution ``w = 1 / T, b = 0``, which it contains, so
    the calibration NLL is never above temperature scaling's. How the solver
    works is described in :mod:`sklearn_calib._torch._affine`.

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
        mean weighted NLL is at most ``tol``; any ``tol`` down to about
        ``1e-10`` is reachable, float32 logits included.

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
        features = zero_masked(logits, mask)
        result = self._solve(features, y, sample_weight, "vector", mask=mask)
        self.coef_ = result.coef
        self.intercept_ = result.intercept

    def _chunk_sample_rows(self):
        """The rows the chunked fit gathers: its temperature start's warm start."""
        from .._torch._chunked import spaced_row_indices

        return spaced_row_indices

    def _fit_chunked(self, data):
        """The exact fit from chunks: the in-memory solver on sums over chunks."""
        from .._torch._affine import fit_affine_chunks

        check_device(self.device)
        start = fit_temperature_chunks(data)
        # A class without a calibration sample, or one that its own logit
        # separates, has no finite scale and bias: as in memory, it keeps the
        # temperature map (with a warning), and the solve runs over the others.
        absent, separable = _unidentified_classes(data, _vector_rows)
        result = fit_affine_chunks(
            data.reduce,
            _vector_rows,
            data.n_classes,
            beta=start.beta,
            frozen=absent | separable,
            hold_bias_mean=not separable.any(),
            max_iter=self.max_iter,
            tol=self.tol,
            start_iterations=start.n_iter,
        )
        result.n_absent, result.n_separable = int(absent.sum()), int(separable.sum())
        self._check_affine_result(result, n_classes=data.n_classes)
        self.coef_ = result.coef
        self.intercept_ = result.intercept

    def _calibrated_logits(self, logits):
        dtype = logits.dtype
        work = _parameter_dtype(dtype, self.coef_, self.intercept_)
        mask = mask_of(logits)
        logits = zero_masked(logits, mask)
        out = logits.astype(work, copy=False) * self.coef_.astype(work)
        out += self.intercept_.astype(work)
        return keep_masked(out, mask).astype(dtype, copy=False)

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
        from .._torch._scaling_modules import VectorScalingModule

        return VectorScalingModule(self.coef_, self.intercept_)


# Penalty per off-diagonal entry and per bias of the "auto" ODIR setting. On the
# bundled real logits (5000 calibration samples; K = 7, 10 and 100), 0.3 per
# entry gave the lowest or near-lowest test NLL for matrix and Dirichlet scaling
# among 0.01 to 1: below 0.1 the 100-class fits overfit, above 1 the 10-class
# fits lose what the off-diagonal terms offer. The bias matters less; 0.003 per
# bias was as good as or better than 0.03 and 0.3, and 0 overfits at K = 100.
_AUTO_LAMBDA = 0.3
_AUTO_MU = 0.003


class MatrixScaling(AffineCalibrator):
    r"""Matrix scaling with the ODIR penalty: a full affine map of the logits.

    Calibrated probabilities are ``softmax(W z + b)`` with ``W`` in
    ``R^{K x K}`` and ``b`` in ``R^K``, minimising the (weighted) mean
    negative log-likelihood plus Kull et al.'s off-diagonal and intercept
    regularisation (ODIR)

    .. math::

        \frac{\lambda}{K(K-1)} \sum_{j \ne k} W_{jk}^2
        + \frac{\mu}{K} \sum_k b_k^2 .

    The problem is convex. It is solved exactly (to the gradient tolerance
    ``tol``) from the exact temperature-scaling solution ``W = I / T, b = 0``;
    how the solver works is described in :mod:`sklearn_calib._torch._affine`.

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
    are fitted with it held. Where a shift shared by the other rows has no
    penalty (the biases with ``reg_mu=0``; a column of ``W`` with
    ``reg_lambda=0``) it would lower the held class's odds on every row for
    ever, so the other rows' mean bias and, in each such column, the sum of
    their off-diagonal entries stay at the start's 0 (every diagonal map
    remains available: the fit is never worse than vector scaling's).

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
    diagonal.

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
        **AffineCalibrator._parameter_constraints,
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
            mixing_inputs(self._features(logits), mask),
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
        features = mixing_inputs(self._features(logits), mask)
        # Features in the logits' own dtype are within its range already.
        wider = () if features.dtype == dtype else (features,)
        work = _parameter_dtype(dtype, self.coef_, self.intercept_, *wider)
        features = features.astype(work, copy=False)
        out = features @ self.coef_.T.astype(work) + self.intercept_.astype(work)
        return keep_masked(out, mask).astype(dtype, copy=False)

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
        from .._torch._scaling_modules import MatrixScalingModule

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
        from .._torch._scaling_modules import MatrixScalingModule

        return MatrixScalingModule(self.coef_, self.intercept_, log_probabilities=True)


class PlattScaling(AffineCalibrator):
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
        **AffineCalibrator._parameter_constraints,
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

    def _weight_scale_matters(self):
        # Platt's targets read the weighted counts as sample sizes.
        return self.smooth_targets

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
            # convention), summed after dividing by a power of two near the
            # largest weight (exact) so that huge weights cannot overflow the
            # sums; counts beyond float64 give the limit targets 1 and 0.
            scale = weight_scale(sample_weight)
            sample_weight = sample_weight / scale
            n_positive = scale * float(sample_weight[y == 1].sum())
            n_negative = scale * float(sample_weight[y == 0].sum())
            positive_target = (
                (n_positive + 1) / (n_positive + 2) if np.isfinite(n_positive) else 1.0
            )
            target = np.where(y == 1, positive_target, 1 / (n_negative + 2))
            features = np.concatenate([features, features])
            y = np.concatenate([np.ones_like(y), np.zeros_like(y)])
            sample_weight = np.concatenate(
                [sample_weight * target, sample_weight * (1 - target)]
            )
        result = self._solve(features, y, sample_weight, "vector")
        self.coef_ = result.coef[1:].copy()
        self.intercept_ = result.intercept[1:] - result.intercept[:1]

    def _fit_chunked(self, data):
        """The exact fit from chunks: the in-memory solver on sums over chunks."""
        from .._torch._affine import fit_affine_chunks

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
            # The scan's weights are divided by data.weight_unit (a power of
            # two, so that sums cannot overflow); the counts are in samples.
            with np.errstate(over="ignore", invalid="ignore"):
                n_negative, n_positive = data.open_class_weight * data.weight_unit
                positive = (n_positive + 1) / (n_positive + 2)
            targets = np.array(
                [1 / (n_negative + 2), positive if np.isfinite(n_positive) else 1.0]
            )
        else:
            targets = None

        prepare = functools.partial(_platt_rows, targets=targets)
        absent, separable = _unidentified_classes(data, prepare)
        # As in memory, the start is the temperature fit of the two logits
        # (z_0, z_1): the optimum on the ray a (0, s), c = 0.
        start = fit_temperature_chunks(data)
        result = fit_affine_chunks(
            data.reduce,
            prepare,
            2,
            beta=start.beta,
            frozen=absent | separable,
            hold_bias_mean=not separable.any(),
            max_iter=self.max_iter,
            tol=self.tol,
            start_iterations=start.n_iter,
        )
        result.n_absent, result.n_separable = int(absent.sum()), int(separable.sum())
        self._check_affine_result(result, n_classes=2)
        self.coef_ = result.coef[1:].copy()
        self.intercept_ = result.intercept[1:] - result.intercept[:1]

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
        from .._torch._scaling_modules import PlattModule

        return PlattModule(float(self.coef_[0]), float(self.intercept_[0]))


# --- the chunked fits: a chunk as the problem's rows ------------------------------


def _vector_rows(logits, codes, weights):
    """A chunk as rows of the vector map: masked entries 0, with their mask.

    As in memory: a masked entry has calibrated logit -inf whatever (w_k, b_k);
    its feature 0 keeps every product finite.
    """
    if logits.shape[0]:
        check_true_class_unmasked(logits, codes, weights, of=" of a chunk")
    mask = mask_of(logits)
    return zero_masked(logits, mask), codes, weights, mask


def _platt_rows(logits, codes, weights, *, targets):
    """A chunk as rows of Platt's map: features (0, s), s = z_1 - z_0.

    As in memory: a row with a masked class has a fixed probability and is
    left out (unless its label is the masked class: a ValueError); with
    ``targets`` (Platt's smoothed targets of the negative and the positive
    class) every row becomes a positive row of weight w t and a negative row
    of weight w (1 - t).
    """
    score = logits[:, 1].astype(np.float64) - logits[:, 0]
    fixed = ~np.isfinite(score)
    if fixed.any():
        check_true_class_unmasked(logits, codes, weights, of=" of a chunk")
        keep = ~fixed
        score, codes, weights = score[keep], codes[keep], weights[keep]
    features = np.column_stack([np.zeros_like(score), score])
    if targets is None:
        return features, codes, weights, None
    t = targets[codes]
    return (
        np.concatenate([features, features]),
        np.concatenate([np.ones_like(codes), np.zeros_like(codes)]),
        np.concatenate([weights * t, weights * (1 - t)]),
        None,
    )


def _separation_extremes(logits, codes, weights, *, prepare):
    """Per class: the extremes of its feature on its own rows and on the others.

    ``(own_min, own_max, other_min, other_max)`` concatenated, over the
    prepared rows of positive weight, masked entries left out; combined by
    min and max.
    """
    features, codes, weights, mask = prepare(logits, codes, weights)
    k = features.shape[1]
    counted = weights > 0
    x = np.array(features[counted], dtype=np.float64)
    if mask is not None:
        x[mask[counted]] = -np.inf
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


def _unidentified_classes(data, prepare):
    """Classes whose vector-map (w_k, b_k) have no finite optimum.

    The rule of the in-memory solver, from one pass of per-class extremes:
    absent (no sample of positive weight), or separable (a threshold on the
    class's own logit puts its rows on one side and every other row on the
    other, unless all of them are equal, or no other row sees the class).
    Returns (absent, separable), boolean arrays of shape (n_classes,).
    """
    from .._torch._affine_objective import unidentified_from_extremes

    extremes = data.reduce(
        functools.partial(_separation_extremes, prepare=prepare), _combine_extremes
    )
    return unidentified_from_extremes(*np.split(extremes, 4))
