"""Temperature scaling: one temperature for every logit, the exact NLL optimum.

The fit is torch's bracketed Newton iteration in 1/T
(:mod:`sklearn_calib._torch._temperature`); its chunked fit runs the same
iteration on the sums of the derivatives over chunks
(:mod:`sklearn_calib._torch._chunked`), so both reach the same temperature.
"""

import functools
import warnings
from numbers import Integral

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseCalibrator
from ..utils._compat import Interval, check_is_fitted
from ..utils._fitted_state import (
    check_state_float,
    check_state_int,
)
from ..utils._math import scale_logits
from ..utils._validation import (
    check_device,
    check_true_class_unmasked,
)


def torch_inputs(logits, y, sample_weight, device):
    """Move validated numpy inputs to torch on the resolved device."""
    from .._torch._device import resolve_device, to_tensor

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
            *torch_inputs(logits, y, sample_weight, self.device),
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
        from .._torch._scaling_modules import TemperatureModule

        return TemperatureModule(self.temperature_)


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
