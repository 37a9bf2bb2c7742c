"""A base calibration map followed by a temperature that depends on the margin."""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import clone

from .._meta.cross_validation import cv_splits, partitions, with_code_classes
from .._meta.selector import CalibratorSelector
from ..base import BaseCalibrator
from ..utils._compat import HasMethods, Interval, StrOptions, check_is_fitted
from ..utils._fitted_state import (
    check_state_array,
    check_state_calibrator,
    check_state_float,
    check_state_int,
    fail_state,
)
from ..utils._math import log_softmax, weighted_quantiles
from ..utils._validation import check_device
from .features import logit_margins

# alpha="auto" is a Gaussian prior on the knot values of fixed strength: a
# penalty AUTO_ALPHA_ROWS / n on a mean NLL is that prior's MAP, so the pull
# toward the base map grows as the calibration set shrinks (1e-2 at 5,000
# rows, the former fixed default; 0.5 at 100 rows).
AUTO_ALPHA_ROWS = 50.0


def _default_base():
    # Measured on the 20 public sets (docs/benchmarks.md): adding MatrixScaling
    # to these three moves the mean test NLL of the composite from 0.5348 to
    # 0.5344 and its ECE from 1.67 % to 1.69 %, at 5 to 10 s more per fit on
    # 100 classes (its K^2 + K parameters on every fold).
    from .._scaling.structured import StructuredMatrixScaling, StructuredVectorScaling
    from .._scaling.temperature import TemperatureScaling

    return CalibratorSelector(
        [TemperatureScaling(), StructuredVectorScaling(), StructuredMatrixScaling()]
    )


# A knot temperature beyond this factor of the base map's is read as running
# off to 0 or infinity (the bound temperature scaling puts on its own scale).
DIVERGED_LOG_BETA = math.log(1e4)


def _warn_if_diverged(log_beta, knots):
    """Warn where knot values ran off toward T = 0 or T = infinity.

    Without a ridge penalty (``alpha=0``) the objective can keep decreasing
    as a knot's temperature goes to 0 (a margin range classified without
    error) or to infinity (one whose top class is right no more often than
    chance); L-BFGS-B then stops where the gradient underflows, at values
    such as ``u = -4e3``, and the fitted temperature there is a limit, not
    an optimum.
    """
    far = np.abs(log_beta) > DIVERGED_LOG_BETA
    if far.any():
        warnings.warn(
            f"The temperature at {int(far.sum())} of {knots.shape[0]} knots "
            "went beyond a factor 1e4 of the base map's (at margins "
            f"{np.array2string(knots[far], precision=3, threshold=6)}): the "
            "objective keeps decreasing as T -> 0 or T -> infinity there, "
            "which a ridge penalty prevents; use alpha > 0 (or 'auto').",
            UserWarning,
            stacklevel=5,
        )


class MarginTemperatureScaling(BaseCalibrator):
    r"""A base calibration map, then a temperature that depends on the margin.

    The calibrated log-probabilities of logits :math:`z` are

    .. math::

        q(z) = \log\operatorname{softmax}\big(\beta(m)\,\ell(z)\big),
        \qquad m = \ell_{(1)}(z) - \ell_{(2)}(z),

    where :math:`\ell` is a base calibrator's output (log-probabilities,
    :meth:`transform`), :math:`m` the gap between its two largest entries, and
    :math:`\log\beta` piecewise linear in :math:`m` between ``n_knots`` knots
    :math:`t_0 < \dots < t_J` placed at equally spaced (weighted) quantiles of
    the calibration margins, constant beyond them. As :math:`\beta > 0`, the
    argmax is that of the base map.

    The base is fitted first; then the knot values :math:`u_j = \log
    \beta(t_j)` minimise, from :math:`u = 0` (the base map itself), by
    L-BFGS-B,

    .. math::

        \frac{1}{\sum_i w_i}\sum_i w_i \big[\log\textstyle\sum_k
        e^{\beta_i \ell_{ik}} - \beta_i \ell_{i y_i}\big]
        \; + \; \lambda\,\mathrm{SoftECE}_\delta
        \; + \; \alpha \lVert u \rVert_2^2,

    the negative log-likelihood, plus ``ece_weight`` :math:`\lambda` times the
    Charbonnier-SoftECE of the top-label confidence (the SMART objective:
    Gaussian soft bins of width ``sigma``), plus a ridge penalty ``alpha``
    that pulls the temperatures toward the base map's. The NLL keeps the
    probabilities sharp where the data allow it; the smooth ECE fixes what a
    single temperature cannot (over-confidence at low margins with
    under-confidence at high ones, say). There is no random initialisation:
    the same data give the same fit.

    By default the base map is chosen by cross-validated NLL among
    :class:`TemperatureScaling`, :class:`StructuredVectorScaling` and
    :class:`StructuredMatrixScaling` (a :class:`CalibratorSelector`; the
    structured maps' own penalties also shrink toward temperature scaling as
    the calibration set shrinks): the less flexible maps where the
    calibration set is too small for more parameters, and the same folds
    give the out-of-fold predictions the temperature is fitted on. The ridge
    penalty defaults to a prior of fixed strength, ``50 / n`` for ``n``
    (effective) calibration rows, so the margin temperature falls back to the
    base map as the calibration set shrinks.

    Parameters
    ----------
    base : estimator, default=None
        The first map, cloned at fit: any calibrator of this library (or any
        estimator over logits with ``fit(X, y, sample_weight)`` and
        ``transform`` returning log-probabilities). ``None`` means
        ``CalibratorSelector([TemperatureScaling(), StructuredVectorScaling(),
        StructuredMatrixScaling()])``.
    cv : int, cross-validation generator, iterable or None, default=5
        Where the temperature's training data come from: the base's
        out-of-fold log-probabilities over these splits (for an int, folds of
        one fixed random permutation of the rows, as in
        :class:`CalibratorSelector`; the test parts must hold out every row
        exactly once), while
        the base used for prediction is fitted on all rows. A
        :class:`CalibratorSelector` base (the default) is cross-validated on
        these same splits, which both choose its candidate and give the
        out-of-fold predictions (its structured maps' fits there stop at
        its ``fold_tol``). ``None`` fits the temperature on the base's
        predictions of its own calibration rows: one base fit, but a base
        that overfits looks better calibrated there than on new data.
        ``cv=3`` fits in about 60 % of the time of the default 5 folds, with
        the same mean test ECE and NLL over re-splits of the public sets
        (docs/benchmarks.md).
    n_knots : int, default=8
        Number of knots of :math:`\log\beta` (fewer where the margins have
        fewer distinct values). One knot is temperature scaling of the base.
    ece_weight : float, default=1.0
        Weight :math:`\lambda` of the smooth ECE against the NLL. ``0`` fits
        the NLL only: on a few hundred calibration rows, or under ten per
        class, the smooth ECE fits the noise of a binned calibration error
        and costs NLL, which ``0`` reduces at a higher ECE (user guide).
    alpha : float or "auto", default="auto"
        Ridge penalty on the knot values. Without it a margin range whose
        calibration samples are all correct drives its temperature to 0
        (certainty), which costs dearly on the first test error there.
        ``"auto"`` is ``50 / n_eff`` with ``n_eff = (sum w)^2 / sum w^2`` the
        effective number of calibration rows (Kish): a Gaussian prior on
        :math:`u` of fixed strength, whose pull toward the base map grows as
        the calibration set shrinks (``1e-2`` at 5,000 rows).
    n_bins : int, default=15
        Number of soft bins of the smooth ECE, centred at
        ``(b - 1/2) / n_bins``.
    sigma : float, default=0.05
        Width of the Gaussian soft-binning kernel, at least ``1e-6``.
    delta : float, default=1e-3
        Smoothing of the Charbonnier penalty ``sqrt(r^2 + delta^2)``.
    max_iter : int, default=500
        Maximum number of L-BFGS-B iterations; a
        :class:`~sklearn.exceptions.ConvergenceWarning` says when it stops
        short of ``tol``.
    tol : float, default=1e-6
        Tolerance on the largest entry of the projected gradient.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where the temperature is fitted (the base uses its own ``device``).
    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (see
        :class:`BaseCalibrator`); ``None`` infers them from ``y``.

    Attributes
    ----------
    base_ : estimator
        The fitted base map. It sees the logits as :meth:`fit` validated them
        (a binary score column ``s`` as the two logits ``(0, s)``) and integer
        class codes: code ``i`` stands for ``classes_[i]``.
    knots_ : ndarray of shape (n_knots_,)
        The knots :math:`t_j` (margins of the base log-probabilities).
    log_inverse_temperature_ : ndarray of shape (n_knots_,)
        The fitted :math:`u_j = \log\beta(t_j) = -\log T(t_j)`.
    alpha_ : float
        The ridge penalty used (``alpha``, or its ``"auto"`` value).
    loss_ : float
        The final value of the objective.
    n_iter_ : int
        L-BFGS-B iterations.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    SMART : A margin temperature from a neural network on the raw logits,
        trained on the smooth ECE alone from a random initialisation.
    CalibratorSelector : The default base.

    Notes
    -----
    Measured on the 20 public real-logit sets (fit on val, score on test; the
    choosing guide has the table and the command), the defaults reach a mean
    test ECE of 1.60 % (temperature scaling 3.06 %, :class:`SMART` 1.63 %)
    and a mean NLL of 0.5349 (temperature scaling 0.5964, the
    :class:`CalibratorSelector` default 0.5350), with no seed to vary.

    References
    ----------
    .. [1] C. Guo, D. Tao, H. Luo, Z. Dong and Z. Xu, "SMART: Sample
       Margin-Aware Recalibration of Temperature", ICML 2026.
    .. [2] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song and
       P. Flach, "Beyond temperature scaling: Obtaining well-calibrated
       multi-class probabilities with Dirichlet calibration", NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import MarginTemperatureScaling, TemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=2000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(2000, 3))
    >>> mts = MarginTemperatureScaling(TemperatureScaling(device="cpu"),
    ...                                device="cpu").fit(logits, y)
    >>> mts.knots_.shape
    (8,)
    >>> bool((mts.predict(logits) == logits.argmax(axis=1)).all())
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "base": [HasMethods(["fit", "transform"]), None],
        "n_knots": [Interval(Integral, 1, None, closed="left")],
        "cv": ["cv_object", None],
        "ece_weight": [Interval(Real, 0, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        # Narrower kernels are hard bins below float32's resolution of the
        # confidences, and SMART's float32 training fails at 1e-7 (measured).
        "sigma": [Interval(Real, 1e-6, None, closed="left")],
        "delta": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "device": [str],
    }

    def __init__(
        self,
        base=None,
        *,
        n_knots=8,
        ece_weight=1.0,
        alpha="auto",
        n_bins=15,
        sigma=0.05,
        delta=1e-3,
        cv=5,
        max_iter=500,
        tol=1e-6,
        device="auto",
        classes=None,
    ):
        self.base = base
        self.cv = cv
        self.n_knots = n_knots
        self.ece_weight = ece_weight
        self.alpha = alpha
        self.n_bins = n_bins
        self.sigma = sigma
        self.delta = delta
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.classes = classes

    def _base_log_proba(self, logits):
        """The fitted base's log-probabilities, float64."""
        return log_softmax(np.asarray(self.base_.transform(logits), dtype=np.float64))

    def _fit(self, logits, y, sample_weight):
        from .._torch._device import resolve_device, to_tensor
        from .._torch._margin import (
            fit_margin_temperature,
            interpolation,
            warn_if_short,
        )

        torch_device = resolve_device(check_device(self.device))
        # Only the ratios of the weights matter; dividing by the largest makes
        # the base's choice and the margin fit see the same numbers whatever
        # their scale (1e-300 or 1e300).
        sample_weight = sample_weight / sample_weight.max()
        log_proba = self._training_log_proba(logits, y, sample_weight)
        # Zero-weight rows change no sum: leaving them out is exact.
        keep = sample_weight > 0
        log_proba = log_proba[keep]
        y, sample_weight = y[keep], sample_weight[keep]
        if not np.all(np.isfinite(log_proba[np.arange(y.shape[0]), y])):
            raise ValueError(
                "The base map gives probability 0 to the true class of some "
                "calibration samples (a masked class, -inf logit, that is the "
                "label?); the likelihood is then 0 whatever the temperature."
            )

        margins = logit_margins(log_proba)
        finite = np.isfinite(margins)
        levels = np.linspace(0.0, 1.0, self.n_knots)
        if finite.any():
            knots = weighted_quantiles(margins[finite], sample_weight[finite], levels)
        else:
            knots = np.zeros(1)
        self.knots_ = np.unique(knots)
        left, right_weight = interpolation(margins, self.knots_)

        def tensor(array):
            return to_tensor(array, torch_device)

        shifted = log_proba - log_proba.max(axis=1, keepdims=True)
        alpha = self.alpha
        if alpha == "auto":
            n_eff = sample_weight.sum() ** 2 / np.dot(sample_weight, sample_weight)
            alpha = AUTO_ALPHA_ROWS / float(n_eff)
        self.alpha_ = float(alpha)
        fit = fit_margin_temperature(
            tensor(shifted),
            tensor(y.astype(np.int64)),
            tensor(sample_weight),
            tensor(left.astype(np.int64)),
            tensor(right_weight),
            self.knots_.shape[0],
            ece_weight=self.ece_weight,
            alpha=self.alpha_,
            n_bins=self.n_bins,
            sigma=self.sigma,
            delta=self.delta,
            max_iter=self.max_iter,
            tol=self.tol,
        )
        warn_if_short(fit, type(self).__name__, self.max_iter, self.tol)
        _warn_if_diverged(fit.log_inverse_temperature, self.knots_)
        self.log_inverse_temperature_ = fit.log_inverse_temperature
        self.loss_ = fit.loss
        self.n_iter_ = fit.n_iter

    def _check_fitted_state(self):
        super()._check_fitted_state()
        knots = check_state_array(self, "knots_", ndim=1, finite=True, low=0.0)
        if knots.shape[0] < 1 or np.any(np.diff(knots) <= 0):
            fail_state(self, "knots_", "must be at least one increasing margin")
        check_state_array(
            self,
            "log_inverse_temperature_",
            shape=knots.shape,
            finite=True,
        )
        check_state_float(self, "loss_")
        check_state_float(self, "alpha_", low=0.0)
        check_state_int(self, "n_iter_")
        check_state_calibrator(self, "base_", n_features=len(self.classes_))

    def _training_log_proba(self, logits, y, sample_weight):
        """Fit ``base_`` on every row; return what the temperature is fitted on.

        With ``cv``, the base's out-of-fold log-probabilities: each row as
        predicted by a base fitted without it, so the temperature corrects the
        base's miscalibration on unseen data (its overfitting included), not
        on the rows it was fitted to.
        """
        base = _default_base() if self.base is None else self.base
        # The base sees integer codes; told the class set, it fits even when
        # a training part lacks a class.
        base = with_code_classes(base, logits.shape[1])
        if self.cv is None:
            self.base_ = base.fit(logits, y, sample_weight=sample_weight)
            return self._base_log_proba(logits)
        splits = cv_splits(self.cv, logits, y)
        if isinstance(base, CalibratorSelector):
            # One cross-validation both chooses the candidate and gives its
            # out-of-fold predictions.
            base.set_params(cv=splits)
            oof = base._fit_with_oof(logits, y, sample_weight)
            self.base_ = base
        else:
            oof = None
            if partitions(splits, logits.shape[0]):
                oof = np.empty(logits.shape)
                for train, test in splits:
                    fold = clone(base).fit(
                        logits[train], y[train], sample_weight=sample_weight[train]
                    )
                    oof[test] = fold.transform(logits[test])
            self.base_ = base.fit(logits, y, sample_weight=sample_weight)
        if oof is None:
            warnings.warn(
                f"No out-of-fold predictions of the base with cv={self.cv!r} "
                "(the test parts must hold out every row exactly once, and the "
                "base fit on each part); the temperature is fitted on the "
                "base's predictions of its own calibration rows.",
                UserWarning,
                stacklevel=4,
            )
            return self._base_log_proba(logits)
        return log_softmax(np.asarray(oof, dtype=np.float64))

    def _inverse_temperatures(self, log_proba):
        from .._torch._margin import log_inverse_temperature

        log_beta = log_inverse_temperature(
            logit_margins(log_proba), self.knots_, self.log_inverse_temperature_
        )
        # Without a ridge penalty (alpha=0) a knot value may run off to
        # +-1e3: beta is then 0 or beyond float64, where the largest finite
        # beta gives the same limit (one-hot) without inf * 0.
        with np.errstate(over="ignore"):
            return np.minimum(np.exp(log_beta), np.finfo(np.float64).max)

    def _calibrated_logits(self, logits):
        log_proba = self._base_log_proba(logits)
        beta = self._inverse_temperatures(log_proba)
        shifted = log_proba - log_proba.max(axis=1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = shifted * beta[:, None]
        rows = np.flatnonzero(beta == 0)
        if rows.size:
            # A masked class (-inf) stays masked at beta = 0 (T = infinity),
            # where the product is NaN; only those rows are looked at.
            block = scaled[rows]
            block[np.isneginf(shifted[rows])] = -np.inf
            scaled[rows] = block
        with np.errstate(over="ignore"):  # beyond float32: -inf, its limit
            return scaled.astype(logits.dtype, copy=False)

    def predict_temperature(self, X):
        """Temperature applied to the base log-probabilities of every sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        temperature : ndarray of shape (n_samples,)
            ``1 / beta(m)``; the calibrated log-probabilities are
            ``log_softmax(base.transform(X) / T)``.
        """
        logits = self._check_fitted_input(X)
        with np.errstate(divide="ignore"):  # beta = 0: T = inf
            return 1.0 / self._inverse_temperatures(self._base_log_proba(logits))

    def to_torch(self):
        """Export as a ``torch.nn.Module``: logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            The base's ``to_torch()`` module followed by the margin
            temperature, computed in float64 and returned in the input dtype.

        Raises
        ------
        AttributeError
            If the fitted base has no ``to_torch``.
        """
        check_is_fitted(self)
        if not hasattr(self.base_, "to_torch"):
            raise AttributeError(
                f"The base {type(self.base_).__name__} has no to_torch export."
            )
        from .._torch._margin import MarginTemperatureModule

        return MarginTemperatureModule(
            self.base_.to_torch(), self.knots_, self.log_inverse_temperature_
        )

    @property
    def _preserves_argmax(self):
        # beta(m) > 0 keeps the base's argmax: the argmax of the logits when
        # the base keeps it.
        return getattr(self.base, "_preserves_argmax", False)
