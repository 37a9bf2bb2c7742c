"""SMART: a per-sample temperature predicted from the logit margin."""

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
    check_state_list,
)
from ..utils._math import scale_logits, top_label_correctness
from ..utils._validation import check_device, check_true_class_unmasked
from .features import (
    MARGIN_STD_FLOOR,
    logit_margins,
    margin_statistics,
    standardise,
)

# Below this (effective) number of calibration samples, about 67 per soft bin
# at the default 15 bins, SMART's per-margin temperatures fit noise: fitted on
# random subsets of the public CIFAR val sets, its mean test ECE is worse than
# temperature scaling's up to 500 rows and better from 1000 (user guide).
MIN_RELIABLE_SAMPLES = 1000


def check_smart_rows(logits, y, loss, *, of=""):
    """The margins and true-class logits of SMART's rows, checked.

    ValueError where a margin overflows float64 (a masked runner-up gives an
    infinite margin, which is valid), and, for the ``"nll"`` loss, where the
    true class is masked. ``of`` follows the row numbers in the messages
    (" of a chunk" where the chunked fit checks chunk by chunk).
    """
    top2 = np.partition(logits, -2, axis=1)[:, -2:]
    margins = logit_margins(logits, top2=top2)
    # An infinite margin is a masked runner-up, or a gap beyond float64.
    overflow = ~np.isfinite(margins) & ~np.isneginf(top2[:, 0])
    if overflow.any():
        row = int(np.flatnonzero(overflow)[0])
        raise ValueError(
            "The gap between the two largest logits overflows float64 in "
            f"row {row}{of} ({logits[row].max():.3g} and below): SMART's "
            "temperatures apply to the raw logits and need their margins "
            "to be finite. Rescale the logits (SMART is not scale "
            "invariant), or use TemperatureScaling."
        )
    if loss == "nll":
        # The calibration-error losses read only the confidence: for them a
        # masked true class is a wrong prediction like any other.
        check_true_class_unmasked(logits, y, of=of)
    return margins, logits[np.arange(logits.shape[0]), y]


def _check_hidden_sizes(hidden_sizes):
    sizes = [hidden_sizes] if isinstance(hidden_sizes, Integral) else list(hidden_sizes)
    if not all(isinstance(s, Integral) and not isinstance(s, bool) for s in sizes) or (
        any(s < 1 for s in sizes)
    ):
        raise ValueError(
            "hidden_sizes must be a positive integer or a sequence of positive "
            f"integers, got {hidden_sizes!r}."
        )
    return tuple(int(s) for s in sizes)


class SMART(BaseCalibrator):
    r"""Sample margin-aware recalibration of temperature (SMART).

    Each sample gets its own temperature, predicted from its logit margin
    ``m = z_(1) - z_(2)`` (largest minus second-largest logit) by a small
    network, and the calibrated probabilities are ``softmax(z / T(m))``:

    .. math::

        T(m) = \mathrm{softplus}\big(w_2^\top \mathrm{relu}(W_1 \tilde m + b_1)
        + b_2\big) + 0.1, \qquad \tilde m = (m - \mu) / s,

    with ``mu`` and ``s`` the mean and standard deviation of the calibration
    margins. The default network has 16 hidden units (49 parameters). It is
    trained full batch with Adam on a differentiable, soft-binned version of
    the expected calibration error of the top-label confidence
    (Charbonnier-SoftECE), and the parameters with the lowest loss seen are
    kept. Every temperature is at least 0.1 and positive, so the argmax and
    the accuracy never change.

    Where a single temperature cannot fit, for example when low-margin
    predictions are over-confident but high-margin ones under-confident,
    SMART can correct both; it needs enough calibration samples to see that
    structure (a warning is raised below 1000 samples).

    Parameters
    ----------
    hidden_sizes : int or tuple of int, default=(16,)
        Units of the hidden ReLU layers. ``(16,)`` is the 49-parameter
        network of the paper; ``(16, 16)`` the 321-parameter one of the
        authors' later code.
    loss : {"charbonnier_soft_ece", "soft_ece", "nll"}, default="charbonnier_soft_ece"
        Training objective on the calibration set. ``"charbonnier_soft_ece"``:
        ``sum_b (M_b / N) sqrt((conf_b - acc_b)^2 + delta^2)`` over ``n_bins``
        Gaussian soft bins of the confidence; ``"soft_ece"``: the same with
        ``|conf_b - acc_b|``; ``"nll"``: the negative log-likelihood.
    n_bins : int, default=15
        Number of soft bins, with centres ``(b - 1/2) / n_bins``.
    sigma : float, default=0.05
        Width of the Gaussian soft-binning kernel, at least ``1e-6``.
    delta : float, default=1e-3
        Smoothing of the Charbonnier penalty ``sqrt(r^2 + delta^2)``.
    lr : float, default=4e-2
        Adam learning rate. The paper trains at ``5e-3`` for 2,000 steps
        (``SMART(lr=5e-3, max_iter=2000)``). Eight times the rate for 300
        steps gives about the same mean test ECE on the public sets (1.56 %
        against 1.63 % fitted on val, seeds 0-4; 1.52 % against 1.46 % over
        random re-splits) and a lower NLL, in a sixth of the CPU time; a
        fit depends more on rounding (see the user guide).
    max_iter : int, default=300
        Number of full-batch Adam steps.
    early_stopping : bool, default=False
        Stop once ``n_iter_no_change`` consecutive steps bring no improvement
        of the training loss larger than ``tol`` (there is no held-out split:
        the loss is the calibration objective itself). The best parameters
        seen are kept either way. The authors' recipe is
        ``SMART(lr=5e-3, max_iter=2000, early_stopping=True)``.
    n_iter_no_change : int, default=200
        Patience of the early stop.
    tol : float, default=1e-4
        Smallest loss improvement that resets the patience.
    device : {"auto", "cpu", "cuda"} or "cuda:N", default="auto"
        Where training runs. ``"auto"`` uses CUDA when available; asking for
        CUDA without it falls back to the CPU with a warning. The fitted state
        is numpy either way.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation of the network: PyTorch's default
        ``nn.Linear`` initialisation, drawn from a private ``torch.Generator``
        (the global torch generator is left alone). An integer ``s`` gives the
        network that ``torch.manual_seed(s)`` and ``nn.Linear(1, 16)``,
        ``nn.Linear(16, 1)`` would. The same seed gives the same result on the
        same CPU; different seeds differ by about 0.1 point of test ECE on
        CIFAR (see the user guide).

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
    margin_mean_ : float
        Mean of the (weighted) calibration margins.
    margin_std_ : float
        Their population standard deviation, at least 1e-8.
    coefs_ : list of ndarray
        Weight matrices of the network, ``coefs_[i]`` of shape
        (n_units_in, n_units_out), as in
        :class:`~sklearn.neural_network.MLPClassifier`.
    intercepts_ : list of ndarray
        Bias vectors, ``intercepts_[i]`` of shape (n_units_out,).
    loss_curve_ : ndarray of shape (n_iter_,)
        Training loss at each step, before that step's update.
    best_loss_ : float
        The lowest training loss, that of the kept parameters.
    n_iter_ : int
        Number of Adam steps taken.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    TemperatureScaling : One temperature for every sample, fitted exactly.

    Notes
    -----
    The margin is standardised with the calibration set's statistics, which
    are stored and reused unchanged at prediction. The loss depends on the
    parameters only through the confidences ``p_i = max_k softmax(z_i / T_i)``
    (the correctness of each top-label prediction does not depend on them),
    so training precomputes everything else; forward and backward passes are
    written out by hand. Float32 logits are trained in float32, float64
    logits in float64. On the CPU the training loop runs on one thread: its
    steps are too small to gain from more.

    Masked classes (``-inf`` logits) have probability exactly 0. The margin
    never involves them unless a row has a single finite logit: such a row is
    one-hot at every temperature, is left out of the margin statistics, and
    is given the temperature of the mean margin. Only the ratios of
    ``sample_weight`` matter, in exact arithmetic: the training (a fixed
    number of Adam steps from a seeded start) is reproducible bit for bit for
    the same inputs, but it does not settle on a unique optimum, so inputs
    that differ only by rounding (weights scaled by a constant that is not a
    power of two, integer weights instead of repeated rows, another row order
    or chunking) can move the fitted probabilities by a few 1e-3 to a few
    1e-2 (measured: 1e-3 on 600 x 4 logits, 8e-3 to 2e-2 on 2,500 x 10, and
    2e-2 to 3e-2 between chunked fits of the same rows). If the
    training loss becomes NaN or infinite,
    training stops being useful: a ``ConvergenceWarning`` names the step and
    the parameters with the lowest finite loss are kept.

    References
    ----------
    .. [1] C. Guo, D. Tao, H. Luo, Z. Dong and Z. Xu, "SMART: Sample
       Margin-Aware Recalibration of Temperature", ICML 2026.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import SMART
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=2000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(2000, 3))
    >>> smart = SMART(device="cpu", random_state=0).fit(logits, y)
    >>> bool(smart.predict_temperature(logits).min() >= 0.1)
    True
    >>> bool((smart.predict(logits) == logits.argmax(axis=1)).all())
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "hidden_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "loss": [StrOptions({"charbonnier_soft_ece", "soft_ece", "nll"})],
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        # Narrower kernels are hard bins below float32's resolution of the
        # confidences, and SMART's float32 training fails at 1e-7 (measured).
        "sigma": [Interval(Real, 1e-6, None, closed="left")],
        "delta": [Interval(Real, 0, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "device": [str],
        "random_state": ["random_state"],
    }
    _preserves_argmax = True

    def __init__(
        self,
        *,
        hidden_sizes=(16,),
        loss="charbonnier_soft_ece",
        n_bins=15,
        sigma=0.05,
        delta=1e-3,
        lr=4e-2,
        max_iter=300,
        early_stopping=False,
        n_iter_no_change=200,
        tol=1e-4,
        device="auto",
        random_state=None,
        classes=None,
    ):
        self.hidden_sizes = hidden_sizes
        self.loss = loss
        self.n_bins = n_bins
        self.sigma = sigma
        self.delta = delta
        self.lr = lr
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.device = device
        self.random_state = random_state
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        from .._torch._device import resolve_device, to_tensor
        from .._torch._smart import (
            SmartProblem,
            fit_smart,
            initial_parameters,
            seeded_generator,
        )

        hidden_sizes = _check_hidden_sizes(self.hidden_sizes)
        torch_device = resolve_device(check_device(self.device))
        # Zero-weight rows change no sum: leaving them out is exact. Only the
        # ratios of the weights matter: dividing by the largest keeps every
        # sum below finite (weights of 1e305) and away from subnormals (1e-310).
        keep = sample_weight > 0
        if not keep.all():
            logits, y, sample_weight = logits[keep], y[keep], sample_weight[keep]
        sample_weight = sample_weight / sample_weight.max()
        self._warn_effective_samples(
            sample_weight.sum() ** 2 / np.sum(sample_weight**2)
        )

        margins, true_logit = check_smart_rows(logits, y, self.loss)
        rows = np.arange(logits.shape[0])
        top = logits.argmax(axis=1)
        # A row with a single finite logit is one-hot at every temperature:
        # its margin (infinite) does not enter the standardisation.
        finite = np.isfinite(margins)
        share = sample_weight[finite] / sample_weight[finite].sum()
        self.margin_mean_, self.margin_std_ = (
            margin_statistics(margins[finite], share) if finite.any() else (0.0, 1.0)
        )

        correct = top_label_correctness(logits, y)
        with np.errstate(over="ignore", invalid="ignore"):
            true_gap = true_logit.astype(np.float64) - logits[rows, top]
        true_gap = np.maximum(true_gap, np.finfo(np.float64).min)  # -inf: masked
        standardised = standardise(margins, self.margin_mean_, self.margin_std_)

        def tensor(array):
            return to_tensor(array, torch_device)

        problem = SmartProblem(
            tensor(logits),
            tensor(correct),
            tensor(sample_weight),
            tensor(standardised),
            tensor(true_gap),
        )
        coefs, intercepts = initial_parameters(
            hidden_sizes, seeded_generator(self.random_state)
        )
        result = fit_smart(
            problem,
            coefs,
            intercepts,
            **self._loss_options(),
            lr=self.lr,
            max_iter=self.max_iter,
            early_stopping=self.early_stopping,
            n_iter_no_change=self.n_iter_no_change,
            tol=self.tol,
        )
        self._set_trained_state(result)
        if result.first_non_finite is not None:
            warnings.warn(
                f"SMART's training loss became NaN or infinite at step "
                f"{result.first_non_finite} of {result.n_iter}; training could not "
                f"continue past it, and the parameters of step {result.best_iter} "
                f"(the lowest finite loss, {result.best_loss:.4g}) were kept.",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _fit_chunked(self, data):
        """SMART by mini-batch Adam over the chunks.

        What changes against the full-batch fit: each Adam step sees one chunk
        (its own soft-binned loss, weights normalised within the chunk), so the
        gradient is that of a mini-batch, not of the whole calibration set; chunks
        are visited in a shuffled order each epoch (dask sources; iterables in
        their own order); the parameters kept are those with the lowest exact
        full-data loss among the epoch boundaries (one extra pass each, at most
        about ``_SMART_EVALUATIONS`` in all), not the best of every step. The
        margin standardisation is exact. With a single chunk, the fit is the
        full-batch one.
        """
        from sklearn.utils import check_random_state

        from .._torch._chunked import (
            SmartMiniBatchTrainer,
            smart_chunk_sums,
            smart_loss_from_sums,
        )
        from .._torch._device import resolve_device
        from .._torch._smart import (
            initial_parameters,
            one_cpu_thread,
            seeded_generator,
        )

        hidden_sizes = _check_hidden_sizes(self.hidden_sizes)
        device = resolve_device(check_device(self.device))
        n_chunks = data.n_chunks
        if n_chunks == 1:
            logits, codes, weights = data.gather(np.arange(data.n_samples))
            self._fit(logits, codes, weights)
            return
        self._warn_effective_samples(data.total_weight**2 / data.weight_squares)
        total, mean, scale, m2 = data.reduce(
            functools.partial(_margin_moments, loss=self.loss), _merge_moments
        )
        if not total > 0:
            # Every row has a single finite logit: as in memory, no standardisation.
            mean, scale, m2, total = 0.0, 1.0, 1.0, 1.0
        self.margin_mean_ = mean
        self.margin_std_ = max(scale * (m2 / total) ** 0.5, MARGIN_STD_FLOOR)
        std = self.margin_std_

        coefs, intercepts = initial_parameters(
            hidden_sizes, seeded_generator(self.random_state)
        )
        loss_options = self._loss_options()
        trainer = SmartMiniBatchTrainer(
            coefs,
            intercepts,
            **loss_options,
            lr=self.lr,
            dtype=data.dtype,
            device=device,
        )

        rng = check_random_state(self.random_state)
        order_rng = np.random.default_rng(rng.randint(2**31 - 1))
        # One torch thread for the whole training, as in memory: the per-chunk
        # operations are small, and on a busy machine more threads cost far more
        # in synchronisation than they gain.
        with one_cpu_thread(device):
            problem_bytes = 2 * data.n_samples * data.n_classes * data.dtype.itemsize
            if problem_bytes <= _SMART_CACHE_BYTES:
                # Small data: every chunk is prepared once and kept (the
                # mini-batches are the same, in the same order as streamed
                # below: shuffled for dask, an iterable's own order otherwise;
                # only the re-reading is saved).
                prepared = [
                    _smart_problem(
                        *chunk, mean=mean, std=std, device=device, loss=self.loss
                    )
                    for chunk in data.chunks()
                ]
                cached = [chunk for chunk in prepared if chunk[0] is not None]

                def problems():
                    while True:
                        order = range(len(prepared))
                        if data.shuffles_chunks:
                            order = order_rng.permutation(len(prepared))
                        for index in order:
                            if prepared[index][0] is not None:
                                yield prepared[index][0]

                def full_loss():
                    coefs, intercepts = trainer.parameters()
                    sums = sum(
                        smart_chunk_sums(
                            problem, total, coefs, intercepts, **loss_options
                        )
                        for problem, total in cached
                    )
                    return smart_loss_from_sums(
                        sums, data.total_weight, self.loss, self.delta
                    )

            else:

                def problems():
                    for chunk in data.shuffled_chunks(order_rng):
                        problem, _ = _smart_problem(
                            *chunk,
                            mean=mean,
                            std=std,
                            device=device,
                            loss=self.loss,
                        )
                        if problem is not None:
                            yield problem

                def full_loss():
                    coefs, intercepts = trainer.parameters()
                    sums = data.reduce(
                        functools.partial(
                            _smart_loss_sums,
                            mean=mean,
                            std=std,
                            coefs=coefs,
                            intercepts=intercepts,
                            **loss_options,
                        )
                    )
                    return smart_loss_from_sums(
                        sums, data.total_weight, self.loss, self.delta
                    )

            fit = self._train_mini_batches(trainer, problems(), full_loss, n_chunks)
        self._set_trained_state(fit)

    def _loss_options(self):
        """The training loss's parameters, as the torch kernels take them."""
        return {
            "loss": self.loss,
            "n_bins": self.n_bins,
            "sigma": self.sigma,
            "delta": self.delta,
        }

    def _set_trained_state(self, fit):
        """Store a training's result (full-batch or over chunks) as fitted state."""
        self.coefs_ = fit.coefs
        self.intercepts_ = fit.intercepts
        self.loss_curve_ = fit.loss_curve
        self.best_loss_ = fit.best_loss
        self.n_iter_ = fit.n_iter

    def _train_mini_batches(self, trainer, problems, full_loss, n_chunks):
        """Adam steps over the chunks, the exact loss at (some) epoch boundaries."""
        # The full-data loss is evaluated at epoch boundaries, every few epochs
        # when there are many (few chunks), so that the evaluations stay a
        # fraction of the training's passes.
        n_epochs = -(-self.max_iter // n_chunks)
        every = n_chunks * max(1, -(-n_epochs // _SMART_EVALUATIONS))
        epoch_losses = [full_loss()]
        trainer.offer(epoch_losses[0])
        best, best_step = epoch_losses[0], 0
        for step in range(self.max_iter):
            if step and step % every == 0:
                epoch_losses.append(full_loss())
                trainer.offer(epoch_losses[-1])
                if epoch_losses[-1] < best - self.tol:
                    best, best_step = epoch_losses[-1], step
                if self.early_stopping and step - best_step >= max(
                    self.n_iter_no_change, every
                ):
                    break
            trainer.step(next(problems))
        epoch_losses.append(full_loss())
        trainer.offer(epoch_losses[-1])
        fit = trainer.result(epoch_losses)
        if not np.isfinite(fit.best_loss):
            raise FloatingPointError(
                "the SMART loss is not finite at any epoch boundary"
            )
        finite = np.isfinite(fit.loss_curve)
        if not finite.all():
            # As in memory: a non-finite loss makes every later step NaN.
            warnings.warn(
                "SMART's training loss became NaN or infinite at step "
                f"{int(np.argmin(finite))} of {fit.n_iter} (a chunk's "
                "mini-batch); training could not continue past it, and the "
                "parameters of the epoch boundary with the lowest full-data "
                f"loss ({fit.best_loss:.4g}) were kept.",
                ConvergenceWarning,
                stacklevel=6,
            )
        return fit

    def _check_fitted_state(self):
        super()._check_fitted_state()
        check_state_float(self, "margin_mean_")
        check_state_float(self, "margin_std_", low=MARGIN_STD_FLOOR)
        # The network maps 1 standardised margin through the hidden layers to
        # 1 raw temperature (sizes as in fit, computed here without torch).
        sizes = (1, *_check_hidden_sizes(self.hidden_sizes), 1)
        coefs = check_state_list(self, "coefs_", length=len(sizes) - 1)
        intercepts = check_state_list(self, "intercepts_", length=len(sizes) - 1)
        for i, (coef, intercept) in enumerate(zip(coefs, intercepts, strict=True)):
            check_state_array(
                self,
                f"coefs_[{i}]",
                value=coef,
                shape=(sizes[i], sizes[i + 1]),
                finite=True,
            )
            check_state_array(
                self,
                f"intercepts_[{i}]",
                value=intercept,
                shape=(sizes[i + 1],),
                finite=True,
            )
        check_state_int(self, "n_iter_")
        check_state_array(self, "loss_curve_", ndim=1, numeric=True)
        check_state_float(self, "best_loss_")

    def _warn_effective_samples(self, effective):
        """Warn below MIN_RELIABLE_SAMPLES (effective) calibration samples."""
        if effective < MIN_RELIABLE_SAMPLES:
            warnings.warn(
                f"SMART was fitted on {effective:.0f} (effective) calibration "
                f"samples; below {MIN_RELIABLE_SAMPLES} its per-margin "
                "temperatures are too noisy to be reliable, and "
                "TemperatureScaling is usually as good or better.",
                UserWarning,
                stacklevel=5,
            )

    def _temperatures(self, logits):
        from .._torch._smart import temperature_numpy

        standardised = standardise(
            logit_margins(logits), self.margin_mean_, self.margin_std_
        )
        return temperature_numpy(standardised, self.coefs_, self.intercepts_)

    def _calibrated_logits(self, logits):
        inverse = 1.0 / self._temperatures(logits)
        return scale_logits(logits, inverse[:, None])

    def predict_temperature(self, X):
        """Temperature of every sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        temperature : ndarray of shape (n_samples,)
            ``T(m)`` for each row, at least 0.1; the calibrated logits are
            ``X / T``.
        """
        return self._temperatures(self._check_fitted_input(X))

    def to_torch(self):
        """Export as a ``torch.nn.Module`` mapping logits to calibrated log-probas.

        Returns
        -------
        module : torch.nn.Module
            ``log_softmax(z / T(m))`` on the last dimension, with the fitted
            margin statistics and network weights in float64 buffers (frozen:
            the module has no parameters, so training a model that contains
            it never changes it); exportable with ``torch.export.export`` (a
            program per input dtype; see the user guide).
        """
        check_is_fitted(self)
        from .._torch._smart import SmartModule

        return SmartModule(
            self.margin_mean_, self.margin_std_, self.coefs_, self.intercepts_
        )


# --- the chunked fit of SMART: mini-batches over chunks ----------------------------

# At most about this many evaluations of SMART's full-data loss per fit.
_SMART_EVALUATIONS = 100
# Chunks prepared for SMART's steps are kept when all of them take at most
# this much memory (small data split into chunks); larger data is re-read.
_SMART_CACHE_BYTES = 2**28
# Rows of a chunk are summed for the full-data loss in blocks of about this
# many bytes of float64 work (see _smart_loss_sums).
_SMART_SUM_BLOCK_BYTES = 2**23


def _smart_arrays(logits, codes, weights, loss):
    """Rows with a positive weight, their margins, correctness and true gaps.

    Checked and computed as in memory (``SMART._fit``): masked entries give
    infinite margins (rows with one finite logit) and true gaps of -inf
    (a masked true class, valid for the calibration-error losses).
    """
    keep = weights > 0
    if not keep.all():
        logits, codes, weights = logits[keep], codes[keep], weights[keep]
    if logits.shape[0] == 0:
        empty = np.empty(0)
        return logits, codes, weights, empty, empty, empty
    margins, true_logit = check_smart_rows(logits, codes, loss, of=" of a chunk")
    rows = np.arange(logits.shape[0])
    top = logits.argmax(axis=1)
    correct = top_label_correctness(logits, codes)
    with np.errstate(over="ignore", invalid="ignore"):
        true_gap = true_logit.astype(np.float64) - logits[rows, top]
    true_gap = np.maximum(true_gap, np.finfo(np.float64).min)  # -inf: masked
    return logits, codes, weights, margins, correct, true_gap


def _margin_moments(logits, codes, weights, *, loss):
    """``(W, mean, scale, M2 / scale^2)`` of the weighted finite margins of one chunk.

    A row with a single finite logit (infinite margin) is one-hot at every
    temperature and stays out of the standardisation, as in memory. The
    squared deviations are carried divided by ``scale^2`` (``scale`` the
    largest deviation), as ``margin_statistics`` computes them in memory:
    margins near 1e200 square beyond float64, and the standard deviation of
    the chunked fit was infinite where the in-memory one is finite.
    """
    _, _, weights, margins, _, _ = _smart_arrays(logits, codes, weights, loss)
    finite = np.isfinite(margins)
    if not finite.all():
        margins, weights = margins[finite], weights[finite]
    total = float(weights.sum())
    if not total > 0:
        return (0.0, 0.0, 0.0, 0.0)
    # A convex combination of margins (all >= 0): it cannot overflow.
    mean = float((weights / total) @ margins)
    deviation = margins - mean
    scale = float(np.max(np.abs(deviation)))
    if not scale > 0:
        return (total, mean, 0.0, 0.0)
    return (total, mean, scale, float(weights @ (deviation / scale) ** 2))


def _merge_moments(a, b):
    """Chan et al.'s pairwise update of weighted means and squared deviations.

    On the scaled moments of ``_margin_moments``: every square is of a ratio
    at most 1, so the sums stay finite for margins up to float64's range.
    """
    w_a, mean_a, scale_a, m2_a = a
    w_b, mean_b, scale_b, m2_b = b
    total = w_a + w_b
    if total == 0:
        return (0.0, 0.0, 0.0, 0.0)
    share_b = w_b / total
    # Both means are >= 0 (margins), so their difference cannot overflow.
    delta = mean_b - mean_a
    mean = mean_a + delta * share_b
    scale = max(scale_a, scale_b, abs(delta))
    if not scale > 0:
        return (total, mean, 0.0, 0.0)
    m2 = (
        m2_a * (scale_a / scale) ** 2
        + m2_b * (scale_b / scale) ** 2
        + (delta / scale) ** 2 * w_a * share_b
    )
    return (total, mean, scale, m2)


def _smart_problem(logits, codes, weights, *, mean, std, device, loss):
    from .._torch._chunked import smart_chunk_problem

    logits, codes, weights, margins, correct, true_gap = _smart_arrays(
        logits, codes, weights, loss
    )
    if logits.shape[0] == 0:
        return None, 0.0
    total = float(weights.sum())
    problem = smart_chunk_problem(
        logits, correct, weights, standardise(margins, mean, std), true_gap, device
    )
    return problem, total


def _smart_loss_sums(
    logits, codes, weights, *, mean, std, coefs, intercepts, loss, n_bins, sigma, delta
):
    """``smart_chunk_sums`` of one chunk, added over blocks of its rows.

    The sums are additive over rows, so a block at a time gives the chunk's
    sums while its float64 temporaries (the soft-bin kernel is rows x bins,
    three times over) stay a few MiB: these passes run on every dask worker
    thread at once, and whole chunks made them the largest anonymous memory
    of a fit from a memmap.
    """
    from .._torch._chunked import smart_chunk_sums

    size = 1 if loss == "nll" else 2 * n_bins
    row_bytes = 8 * logits.shape[1] + 24 * n_bins
    block = max(1, _SMART_SUM_BLOCK_BYTES // row_bytes)
    sums = np.zeros(size)
    for start in range(0, logits.shape[0], block):
        rows = slice(start, start + block)
        problem, total = _smart_problem(
            logits[rows],
            codes[rows],
            weights[rows],
            mean=mean,
            std=std,
            device="cpu",
            loss=loss,
        )
        if problem is not None:
            sums += smart_chunk_sums(
                problem,
                total,
                coefs,
                intercepts,
                loss=loss,
                n_bins=n_bins,
                sigma=sigma,
                delta=delta,
            )
    return sums
