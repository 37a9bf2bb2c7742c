"""Affine calibration maps of the logits, fitted by exact NLL minimisation in torch.

Temperature scaling lives here; the vector, matrix, Dirichlet and Platt maps of
the same family share the torch layer in ``sklearn_calib._torch``.
"""

import warnings
from numbers import Integral

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .base import BaseCalibrator
from .utils._compat import Interval, check_is_fitted
from .utils._validation import check_device


def _torch_inputs(logits, y, sample_weight, device):
    """Move validated numpy inputs to torch on the resolved device."""
    from ._torch._device import resolve_device, to_tensor

    torch_device = resolve_device(check_device(device))
    return (
        to_tensor(logits, torch_device),
        to_tensor(y.astype(np.int64, copy=False), torch_device),
        to_tensor(sample_weight, torch_device),
    )


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
    as ``T -> infinity``. The calibrated logit spread ``z / T`` is therefore
    bounded to ``[1e-4, 1e4]`` times the mean gap between each row's maximum
    and mean logit, and a warning is raised when the optimum sits on a bound.
    Constant logits (the same value in every column) leave ``T = 1`` with a
    warning.

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

    def __init__(self, *, device="auto", max_iter=100):
        self.device = device
        self.max_iter = max_iter

    def _fit(self, logits, y, sample_weight):
        from ._torch._temperature import fit_inverse_temperature

        result = fit_inverse_temperature(
            *_torch_inputs(logits, y, sample_weight, self.device),
            max_iter=self.max_iter,
        )
        self.n_iter_ = result.n_iter
        self.temperature_ = 1.0 / result.beta
        if result.status == "max_iter":
            warnings.warn(
                f"TemperatureScaling did not converge in max_iter={self.max_iter} "
                f"Newton iterations (gradient {result.gradient:.3e}); increase "
                "max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )
        elif result.status == "at_upper_beta":
            warnings.warn(
                "The NLL keeps decreasing as T -> 0: every calibration sample is "
                "classified correctly. T was clamped to its lower bound "
                f"{self.temperature_:.4g}; use a calibration set with errors for a "
                "meaningful temperature.",
                UserWarning,
                stacklevel=3,
            )
        elif result.status == "at_lower_beta":
            warnings.warn(
                "The NLL keeps decreasing as T -> infinity: the logits carry no "
                "ranking information about y. T was clamped to its upper bound "
                f"{self.temperature_:.4g}.",
                UserWarning,
                stacklevel=3,
            )
        elif result.status == "constant":
            warnings.warn(
                "The logits are constant across classes in every row; the "
                "temperature has no effect and was left at T = 1.",
                UserWarning,
                stacklevel=3,
            )

    def _calibrated_logits(self, logits):
        return logits * logits.dtype.type(1.0 / self.temperature_)

    def to_torch(self):
        """Export as a ``torch.nn.Module`` mapping logits to calibrated log-probabilities.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(z / T)``; scriptable with ``torch.jit.script``.
        """
        check_is_fitted(self)
        from ._torch._modules import TemperatureModule

        return TemperatureModule(self.temperature_)
