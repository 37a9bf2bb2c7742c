"""Torch kernels of the chunked fits: temperature scaling and SMART over chunks.

The chunked fits reuse the in-memory solvers' own pieces, so both paths share
one implementation of the mathematics:

- Temperature scaling: the NLL in beta = 1/T has first and second derivatives
  that are sums over samples. Each chunk's sums come from the in-memory
  ``TemperatureProblem.derivatives`` (its per-block kernel, unchanged), the chunks' sums
  are added by the caller's reduction (a dask graph or a loop), and the
  in-memory bracketed Newton iteration ``bracketed_newton`` runs on the totals: the
  same iterates as in memory, to the rounding of float64 sums.
- SMART: mini-batch Adam, one step per chunk, with the in-memory forward and
  backward passes (``SmartProblem``, ``SmartNetwork``, ``evaluate``).

Chunks arrive as numpy arrays and leave as numpy arrays; nothing here holds
more than one chunk.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._smart import (
    ADAM_BETAS,
    ADAM_EPS,
    MIN_TEMPERATURE,
    SmartNetwork,
    SmartProblem,
    SoftBins,
    evaluate,
    one_cpu_thread,
)
from ._temperature import (
    BETA_RANGE,
    COMFORT_SCALE,
    CONSTANT_SCALE,
    WARM_START_ROWS,
    ShiftedLogits,
    TemperatureFit,
    TemperatureProblem,
    beta_limits,
    bracketed_newton,
    logit_scales,
    noise_floor,
    shift_logits,
    shift_params,
    spaced_rows,
    warm_start,
)


def _tensor(array):
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array)


def spaced_row_indices(n_rows):
    """The rows of the in-memory warm start (and logit scale), as numpy indices.

    The same rows as the in-memory solver picks; clipped to the data, since
    the float32 ``linspace`` behind them can round past the last row of very
    large data.
    """
    rows = spaced_rows(n_rows, torch.device("cpu")).numpy()
    return np.unique(np.clip(rows, 0, n_rows - 1))


def _shifted(logits, exponent):
    """``2**exponent (z - max z)`` of one chunk, masked entries at the lowest value.

    ``exponent`` is fixed for the whole data (from the sample), so every chunk
    computes its terms on the same scale; the chunk's own shift keeps its gaps
    finite and the power of two is exact (entries pushed below the dtype's
    range have probability 0 at every beta of the bracket, as in memory).
    """
    row_max, prescale, _ = shift_params(logits)
    remaining = exponent - round(math.log2(prescale))
    # Shifted block by block as the pass reads it: no copy of the chunk.
    return ShiftedLogits(logits, row_max, prescale, exponent=remaining, clamp=True)


def temperature_chunk_sums(logits, codes, weights, beta, exponent):
    """``[W, W L', W L'', W L3]`` at beta of one chunk (W its total weight).

    ``beta`` applies to the logits scaled by ``2**exponent``. The caller has
    checked that no row of positive weight has its true class masked.
    """
    if logits.shape[0] == 0:
        return np.zeros(4)
    logits = _tensor(logits)
    codes = _tensor(codes.astype(np.int64))
    weights = _tensor(np.asarray(weights, dtype=np.float64))
    total = float(weights.sum())
    if not total > 0:
        return np.zeros(4)
    # TemperatureProblem normalises its weights in place: a copy, not the chunk's array.
    problem = TemperatureProblem(_shifted(logits, exponent), codes, weights.clone())
    first, second, third = problem.derivatives(beta)
    return np.array([total, first * total, second * total, third * total])


class ChunkedTemperatureProblem:
    """The ``derivatives(beta)`` of ``TemperatureProblem``, summed over chunks.

    ``reduce(beta, exponent)`` returns the summed ``temperature_chunk_sums``.
    """

    def __init__(self, reduce, exponent):
        self._reduce = reduce
        self.exponent = exponent
        self.n_passes = 0

    def derivatives(self, beta, third=True):
        # One pass over the chunks either way; the third derivative is free.
        total, first, second, third = self._reduce(beta, self.exponent)
        self.n_passes += 1
        return first / total, second / total, third / total


def fit_inverse_temperature_chunked(sample, reduce, n_rows, *, max_iter=100):
    """Temperature scaling over chunks: ``fit_inverse_temperature``'s algorithm.

    The bracket of beta, the exact power-of-two scaling of the logits and the
    warm start come from the sample rows, as in memory; the Newton iteration
    then runs on the derivatives summed over every chunk.

    Parameters
    ----------
    sample : tuple of numpy arrays
        The logits, codes and weights of the rows ``spaced_row_indices(n_rows)``:
        the in-memory solver reads the logit scale and runs its warm start on
        exactly these rows.
    reduce : callable
        ``reduce(beta, exponent)`` -> summed ``temperature_chunk_sums`` over
        all chunks (one pass over the data).
    n_rows : int
        Number of rows of the data.

    Returns
    -------
    TemperatureFit, and the number of passes over the data.
    """
    logits, codes, weights = sample
    logits = _tensor(logits)
    codes = _tensor(codes.astype(np.int64))
    weights = _tensor(np.asarray(weights, dtype=np.float64))
    if not float(weights.max()) > 0:
        weights = torch.ones_like(weights)  # the sample only sets the scales
    weights = weights / weights.max()
    shifted, prescale, masked = shift_logits(logits)
    rows = torch.arange(shifted.shape[0])
    wide, near = logit_scales(shifted, rows, weights, masked)
    if near is None or not near / prescale > CONSTANT_SCALE:
        return TemperatureFit(1.0, 0, "constant", 0.0), 0
    exponent = round(math.log2(prescale))
    if not COMFORT_SCALE[0] <= near <= COMFORT_SCALE[1]:
        extra = -round(math.log2(near))
        exponent += extra
        wide *= 2.0**extra
        near *= 2.0**extra
    lowest, highest = beta_limits(shifted.dtype)
    lo = max(BETA_RANGE[0] / max(wide, near), lowest)
    hi = min(BETA_RANGE[1] / near, highest)
    rtol = 1e-13 if logits.dtype == torch.float64 else 1e-10
    beta = 1.0 if lo < 1.0 < hi else (lo * hi) ** 0.5
    if n_rows > 4 * WARM_START_ROWS and float(weights.sum()) > 0:
        beta = warm_start(
            _shifted(logits, exponent), codes, weights, None, beta, lo, hi, max_iter
        )
    problem = ChunkedTemperatureProblem(reduce, exponent)
    result = bracketed_newton(
        problem, beta, lo, hi, max_iter, rtol, floor=noise_floor(logits.dtype)
    )
    result.beta *= 2.0**exponent
    return result, problem.n_passes


# --- SMART by mini-batches ---------------------------------------------------------


def smart_chunk_problem(logits, correct, weights, margins, true_gap, device):
    """A ``SmartProblem`` of one chunk (weights normalised within the chunk)."""

    def tensor(array):
        return _tensor(array).to(device)

    return SmartProblem(
        tensor(logits),
        tensor(correct),
        tensor(weights),
        tensor(margins),
        tensor(true_gap),
    )


def smart_chunk_sums(
    problem, total_weight, coefs, intercepts, *, loss, n_bins, sigma, delta
):
    """Sums over one chunk that give the exact full-data loss when added.

    Soft-binned losses: ``[M_b, G_b]`` for every bin (per-bin weight and gap,
    not normalised); ``"nll"``: the weighted sum of the per-sample NLL. The
    network is rebuilt from numpy parameters, so this runs in any process.
    """
    network = SmartNetwork(coefs, intercepts, problem.dtype, problem.device)
    charbonnier = loss == "charbonnier_soft_ece"
    bins = SoftBins(n_bins, sigma, delta, charbonnier, problem.dtype, problem.device)
    # One CPU thread, as the in-memory training loop: these products are small.
    with torch.no_grad(), one_cpu_thread(problem.device):
        raw = network.forward(problem.inputs)
        beta = torch.nn.functional.softplus(raw).add_(MIN_TEMPERATURE).reciprocal_()
        total, _ = problem.confidence_terms(beta)
        weights = problem.weights.to(torch.float64) * total_weight
        if loss == "nll":
            nll = total.log().sub_(beta * problem.true_gap).to(torch.float64)
            return np.array([float((nll * weights).sum())])
        confidence = total.reciprocal_()
        kernel = bins._kernel(confidence).to(torch.float64)
        kernel = kernel / kernel.sum(dim=0)
        residual = confidence.to(torch.float64) - problem.correct.to(torch.float64)
        mass = kernel @ weights
        gap = kernel @ (weights * residual)
        return torch.cat([mass, gap]).cpu().numpy()


def smart_loss_from_sums(sums, total_weight, loss, delta):
    """The full-data SMART loss from the summed ``smart_chunk_sums``."""
    if loss == "nll":
        return float(sums[0] / total_weight)
    mass, gap = np.split(sums, 2)
    if loss == "charbonnier_soft_ece":
        return float(np.sum(np.sqrt(gap**2 + (delta * mass) ** 2)) / total_weight)
    return float(np.sum(np.abs(gap)) / total_weight)


@dataclass
class SmartMiniBatchFit:
    coefs: list
    intercepts: list
    loss_curve: np.ndarray  # mini-batch loss of each step, before its update
    epoch_losses: np.ndarray  # exact full-data loss at each epoch's start and the end
    n_iter: int
    best_loss: float


class SmartMiniBatchTrainer:
    """Adam on the SMART network, one step per chunk (a mini-batch).

    The update is ``fit_smart``'s (torch.optim.Adam's rule on float64
    parameters); only the data of a step changes: the loss of one chunk
    instead of all the data. The parameters kept are those with the lowest
    exact full-data loss among the epoch boundaries.
    """

    def __init__(
        self, coefs, intercepts, *, loss, n_bins, sigma, delta, lr, dtype, device
    ):
        # dtype: the numpy dtype of the logits (float32 or float64).
        dtype = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
        self.network = SmartNetwork(coefs, intercepts, dtype, device)
        self.loss = loss
        self.delta = delta
        self.lr = lr
        self.device = device
        self.dtype = dtype
        charbonnier = loss == "charbonnier_soft_ece"
        self.bins = SoftBins(n_bins, sigma, delta, charbonnier, dtype, device)
        params = self.network.params
        self.first_moment = torch.zeros_like(params)
        self.second_moment = torch.zeros_like(params)
        self.best_params = params.clone()
        self.best_loss = math.inf
        self.step_count = 0
        self.losses = []

    def step(self, problem):
        """One Adam step on the loss of ``problem``; returns that loss."""
        with one_cpu_thread(self.device):
            out = torch.empty((), dtype=self.dtype, device=self.device)
            grad = evaluate(problem, self.network, self.loss, self.bins, out)
            beta1, beta2 = ADAM_BETAS
            t = self.step_count + 1
            self.first_moment.lerp_(grad, 1.0 - beta1)
            self.second_moment.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denom = (self.second_moment.sqrt() / math.sqrt(1.0 - beta2**t)).add_(
                ADAM_EPS
            )
            self.network.params.addcdiv_(
                self.first_moment, denom, value=-self.lr / (1.0 - beta1**t)
            )
        self.step_count = t
        value = float(out)
        self.losses.append(value)
        return value

    def parameters(self):
        """The current parameters as float64 numpy ``(coefs, intercepts)``."""
        return self.network.unpack(self.network.params)

    def offer(self, full_loss):
        """Keep the current parameters if their full-data loss is the best."""
        if full_loss < self.best_loss:
            self.best_loss = full_loss
            self.best_params.copy_(self.network.params)
            return True
        return False

    def result(self, epoch_losses):
        coefs, intercepts = self.network.unpack(self.best_params)
        return SmartMiniBatchFit(
            coefs=coefs,
            intercepts=intercepts,
            loss_curve=np.asarray(self.losses, dtype=np.float64),
            epoch_losses=np.asarray(epoch_losses, dtype=np.float64),
            n_iter=self.step_count,
            best_loss=float(self.best_loss),
        )
