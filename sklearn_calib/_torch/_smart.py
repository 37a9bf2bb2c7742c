"""SMART: the temperature network, its soft-binned losses and the training loop.

The network maps the standardised margin of each sample to a temperature,
T = softplus(MLP(m)) + 0.1, and the calibrated distribution is softmax(z / T).
Training is full batch, so each Adam step is one pass over the data. This
module makes that pass cheap while keeping it exact:

- The losses depend on the parameters only through each sample's confidence
  p = max_k softmax(z / T)_k = 1 / S with S = sum_k exp(d_k / T), d = z - max z.
  The shifted logits, the correctness a and everything else the parameters do
  not change are computed once. The top entry of every row (d = 0, adding
  exactly 1 to S) is dropped; the other K - 1 entries are stored class-major,
  (K - 1) x N, and scaled by log2(e), so a step costs one multiply, one exp2
  and two column sums over them (exp2 is several times faster than exp on the
  CPU; the scaling costs one rounding).
- Forward and backward passes are written out by hand: the network has 49
  parameters and the loss is a handful of reductions, so a step is a fixed
  sequence of about eighty tensor operations, with no autograd graph, no host
  synchronisation and no Python work beyond Adam's scalar bias corrections.
- Every per-sample array is stored with the sample index contiguous (hidden
  activations 16 x N, soft bin weights 15 x N), the layout in which the small
  matrix products over samples run fastest.
- Best-parameter tracking, the loss curve and the early-stopping bookkeeping
  stay on the device (``torch.where`` into preallocated buffers); the host
  reads them only when an early stop could fire and once at the end.

The per-sample work runs in the logits' dtype (float32 logits train in float32,
float64 in float64); the parameters and Adam's moments are float64. Rows are
independent until the sums over samples, so integer sample weights act like
repeated rows.
"""

import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

MIN_TEMPERATURE = 0.1
# torch.nn.Softplus's default: softplus(o) = o above this.
SOFTPLUS_THRESHOLD = 20.0
_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass
class SmartFit:
    coefs: list  # (n_in, n_out) float64 arrays, as MLPClassifier.coefs_
    intercepts: list  # (n_out,) float64 arrays
    loss_curve: np.ndarray  # loss at each step, before that step's update
    n_iter: int
    best_loss: float
    best_iter: int  # 0-based step whose parameters were kept
    first_non_finite: int | None = None  # first step whose loss was NaN or inf


def layer_sizes(hidden_sizes):
    """(n_in, n_out) of every Linear layer: 1 -> hidden... -> 1."""
    sizes = [1, *hidden_sizes, 1]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


def seeded_generator(random_state):
    """A CPU ``torch.Generator`` for the initialisation.

    An integer seeds it directly, so ``random_state=s`` draws the network that
    ``torch.manual_seed(s)`` followed by ``nn.Linear(1, 16), nn.Linear(16, 1)``
    would, as in the usual torch recipe. ``None`` or a ``RandomState`` draw
    the seed from numpy's generator.
    """
    from numbers import Integral

    from sklearn.utils import check_random_state

    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        seed = int(random_state)
    else:
        seed = int(check_random_state(random_state).randint(0, 2**31 - 1))
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


def initial_parameters(hidden_sizes, generator):
    """PyTorch's default ``nn.Linear`` initialisation, drawn from ``generator``.

    Layer by layer, the weight (out, in) then the bias, each uniform on
    (-1/sqrt(in), 1/sqrt(in)) in float32, exactly as ``nn.Linear`` draws them
    from the global generator (``kaiming_uniform_(a=sqrt(5))`` has that bound).
    Returns float64 ``(coefs, intercepts)`` with coefs of shape (in, out).
    """
    coefs, intercepts = [], []
    for n_in, n_out in layer_sizes(hidden_sizes):
        weight = torch.empty(n_out, n_in, dtype=torch.float32)
        torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
        bound = 1.0 / math.sqrt(n_in)
        bias = torch.empty(n_out, dtype=torch.float32)
        bias.uniform_(-bound, bound, generator=generator)
        coefs.append(weight.T.to(torch.float64).numpy())
        intercepts.append(bias.to(torch.float64).numpy())
    return coefs, intercepts


def temperature_numpy(margins, coefs, intercepts):
    """T(m) = softplus(MLP(m)) + 0.1 in float64 numpy, for prediction.

    ``margins`` are already standardised. Mirrors the torch forward pass
    (ReLU hidden layers, torch's softplus with threshold 20).
    """
    x = np.asarray(margins, dtype=np.float64)[:, None]
    for coef, intercept in zip(coefs[:-1], intercepts[:-1], strict=True):
        x = np.maximum(x @ coef + intercept, 0.0)
    out = (x @ coefs[-1] + intercepts[-1])[:, 0]
    # exp underflows harmlessly below -700: T is then 0.1 to the last bit.
    softplus = np.log1p(np.exp(np.clip(out, -700.0, SOFTPLUS_THRESHOLD)))
    return np.where(out > SOFTPLUS_THRESHOLD, out, softplus) + MIN_TEMPERATURE


class SmartNetwork:
    """The temperature MLP on a flat float64 parameter vector.

    Layer l owns a contiguous (n_out, n_in + 1) block of the vector: its
    weight (out, in) with the bias as last column, so that the weight and bias
    gradients of a layer come out of one product with the input augmented by
    a row of ones. Activations are (units, N). The forward and backward passes
    run on a copy of the parameters in the compute dtype.
    """

    def __init__(self, coefs, intercepts, dtype, device):
        blocks = [
            np.hstack([c.T, b[:, None]]) for c, b in zip(coefs, intercepts, strict=True)
        ]
        self.shapes = [b.shape for b in blocks]
        flat = np.concatenate([b.ravel() for b in blocks])
        self.params = torch.tensor(flat, dtype=torch.float64, device=device)
        self.work = torch.empty_like(self.params, dtype=dtype)
        self.work_grad = torch.empty_like(self.work)
        self.blocks = self._views(self.work)
        self.grad_blocks = self._views(self.work_grad)
        # Fixed views, so that a step slices nothing.
        self.weights = [b[:, :-1] for b in self.blocks]
        self.biases = [b[:, -1:] for b in self.blocks]
        self.weights_t = [w.T for w in self.weights]
        if len(self.blocks) == 2:
            output = self.grad_blocks[1]
            self.output_weight_grad = output[0, :-1]
            self.output_bias_grad = output[0, -1]
            self.output_weight = self.weights[1].view(-1, 1)

    def _views(self, flat):
        views, start = [], 0
        for rows, cols in self.shapes:
            views.append(flat[start : start + rows * cols].view(rows, cols))
            start += rows * cols
        return views

    def unpack(self, flat):
        """float64 numpy ``(coefs, intercepts)`` from a flat parameter tensor."""
        blocks = [v.cpu().numpy() for v in self._views(flat)]
        return [b[:, :-1].T.copy() for b in blocks], [b[:, -1].copy() for b in blocks]

    def forward(self, inputs):
        """MLP output (N,) for ``inputs`` = [m; 1] of shape (2, N).

        Keeps the hidden activations for :meth:`backward`.
        """
        self.work.copy_(self.params)
        self.activations = [inputs]
        x = torch.mm(self.blocks[0], inputs)
        for weight, bias in zip(self.weights[1:], self.biases[1:], strict=True):
            x.clamp_(min=0.0)  # ReLU
            self.activations.append(x)
            x = torch.addmm(bias, weight, x)
        return x.view(-1)

    def backward(self, grad_out):
        """float64 d loss / d params from d loss / d output (N,)."""
        if len(self.blocks) == 2:
            self._backward_one_hidden_layer(grad_out)
            return self.work_grad.to(torch.float64)
        grad = grad_out.view(1, -1)
        for layer in range(len(self.blocks) - 1, 0, -1):
            hidden = self.activations[layer]
            grad_block = self.grad_blocks[layer]
            # (strided views of the gradient vector: copied into, not out=)
            grad_block[:, :-1] = torch.mm(grad, hidden.T)
            grad_block[:, -1] = grad.sum(dim=1)
            # ReLU'(h) = sign(h) for h >= 0 (0 at 0, as torch's relu backward)
            grad = torch.mm(self.weights_t[layer], grad).mul_(torch.sign(hidden))
        torch.mm(grad, self.activations[0].T, out=self.grad_blocks[0])
        return self.work_grad.to(torch.float64)

    def _backward_one_hidden_layer(self, grad_out):
        """o = w . relu(W m + b) + c: all four gradients from one product.

        With the mask M_ji = 1[h_ji > 0], A_j = sum_i M_ji g_i m_i and
        B_j = sum_i M_ji g_i: dW = w A, db = w B, dw = W A + b B (as
        h_j = M_j (W_j m + b_j)) and dc = sum_i g_i.
        """
        inputs, hidden = self.activations
        scaled = inputs * grad_out  # (2, N): [g m; g]
        first = self.grad_blocks[0]
        torch.mm(torch.sign(hidden), scaled.T, out=first)  # (units, 2): [A, B]
        torch.linalg.vecdot(first, self.blocks[0], dim=1, out=self.output_weight_grad)
        torch.sum(grad_out, dim=0, out=self.output_bias_grad)
        first.mul_(self.output_weight)


class SmartProblem:
    """The calibration data, with everything the parameters do not change.

    Parameters
    ----------
    logits : Tensor (N, K), float32 or float64, on the training device
    correct : Tensor (N,), 1 where argmax z_i = y_i (1/t where y_i is one of t
        tied top classes, see utils._math.top_label_correctness)
    weights : Tensor (N,), non-negative sample weights (normalised here)
    margins : Tensor (N,) or None, standardised margins (the network's input;
        None where no network reads them, as in the margin temperature's fit)
    true_gap : Tensor (N,), z_{i,y_i} - max z_i (used by the "nll" loss)
    """

    def __init__(self, logits, correct, weights, margins, true_gap):
        n_samples, n_classes = logits.shape
        self.device = logits.device
        self.dtype = dtype = logits.dtype
        # Class-major shifted logits, each column's top entry swapped into
        # row 0, so that rows 1.. hold exactly the K - 1 other entries.
        top = logits.argmax(dim=1)
        shifted = torch.empty((n_classes, n_samples), dtype=dtype, device=self.device)
        torch.sub(logits.T, logits.gather(1, top.view(-1, 1)).view(1, -1), out=shifted)
        shifted.scatter_(0, top.view(1, -1), shifted[:1].clone())
        # Masked classes (-inf logits), and gaps that overflow in the shift or
        # in the scaling by log2(e), become the lowest finite value: their
        # exp2(beta d) is still exactly 0, and d exp2(beta d) 0 instead of NaN.
        lowest = torch.finfo(dtype).min
        self.tail = shifted[1:].mul_(_LOG2E).clamp_(min=lowest)
        self.buffer = torch.empty_like(self.tail)
        weights = weights.to(torch.float64)
        weights = weights / weights.max()  # only ratios matter; the sum stays finite
        weights = weights / weights.sum()
        self.weights = weights.to(dtype)
        # The tail is in log2 units: S1 = ln2 * sum_k exp(beta d_k) (log2e d_k).
        self.weights_ln2 = (weights * _LN2).to(dtype)
        self.correct = correct.to(dtype)
        self.true_gap = true_gap.to(dtype).clamp_(min=lowest)
        self.inputs = None
        if margins is not None:
            margins = margins.to(dtype)
            self.inputs = torch.stack([margins, torch.ones_like(margins)])

    def confidence_terms(self, beta):
        """S = sum_k exp(beta d_k) and S1 / ln2 = sum_k exp(beta d_k) d_k log2(e)."""
        buffer = torch.mul(self.tail, beta, out=self.buffer).exp2_()
        total = buffer.sum(dim=0).add_(1.0)
        return total, torch.linalg.vecdot(buffer, self.tail, dim=0)


class SoftBins:
    """Soft-binned top-label calibration gap: its value and gradient in p.

    With the normalised Gaussian weights w_ib = softmax_b(-(p_i - c_b)^2 /
    (2 sigma^2)), masses M_b = sum_i s_i w_ib and gaps
    G_b = sum_i s_i w_ib (p_i - a_i) (sample weights s summing to 1), the
    Charbonnier-SoftECE of METHODS.md, sum_b M_b sqrt((G_b / M_b)^2 + delta^2),
    is sum_b sqrt(G_b^2 + delta^2 M_b^2) (a bin with M_b = 0 adds 0), and the
    SoftECE is sum_b |G_b|.
    """

    def __init__(self, n_bins, sigma, delta, charbonnier, dtype, device):
        centres = torch.arange(n_bins, dtype=torch.float64, device=device) + 0.5
        centres /= n_bins
        # exp(-(p - c)^2 / (2 sigma^2)) = exp2(-((p - c) k)^2)
        self.scale = math.sqrt(_LOG2E / (2.0 * sigma * sigma))
        self.scaled_centres = (centres * self.scale).to(dtype).view(-1, 1)
        self.n_bins = n_bins
        # Every p lies within 1 / (2 n_bins) of a centre, so the largest
        # unnormalised weight is at least 2^-(log2(e) / (8 (n_bins sigma)^2)):
        # above 2^-18 when n_bins sigma >= 0.1. Narrower kernels could
        # underflow and are shifted by each row's largest bin logit instead.
        self.shift = n_bins * sigma < 0.1
        self.charbonnier = charbonnier
        self.row_scale = torch.tensor([[delta], [1.0]], dtype=dtype, device=device)
        # d u_b / dp = (c_b - p) / sigma^2; the p part cancels in the softmax
        # backward and so does any constant, so centred slopes lose less to
        # cancellation in float32.
        slopes = ((centres - 0.5) / (sigma * sigma)).to(dtype)
        self.slopes = slopes
        self.rhs = torch.empty((5, n_bins), dtype=dtype, device=device)
        self.rhs[4] = slopes
        self.zero = torch.zeros((), dtype=dtype, device=device)

    def _kernel(self, p):
        """Unnormalised bin weights, (n_bins, N)."""
        scaled_p = p * self.scale
        if not self.shift:
            distance = torch.sub(self.scaled_centres, scaled_p)
            return torch.addcmul(self.zero, distance, distance, value=-1.0).exp2_()
        # Shifted by the nearest centre c_n: (c_n - p)^2 - (c_b - p)^2, written
        # as (c_n - c_b)(c_n + c_b - 2p) (scaled), exactly 0 at the nearest
        # bin. The difference of the two squares, each up to (0.5 scale)^2 =
        # 2e11 at sigma = 1e-6, lost whole units of the exponent to float32
        # rounding: 2^(+-1e4) weights, and a non-finite loss with few bins.
        n_bins = self.n_bins
        index = torch.floor(p * n_bins).clamp_(0, n_bins - 1).long()
        nearest = self.scaled_centres.view(-1)[index]
        gap = torch.sub(nearest, self.scaled_centres)
        return gap.mul_(nearest + self.scaled_centres - 2.0 * scaled_p).exp2_()

    def __call__(self, p, correct, weights, out):
        """Write the loss into ``out`` (0-d); return d loss / d p divided by s."""
        kernel = self._kernel(p)
        inv_norm = kernel.sum(dim=0).reciprocal_()
        residual = p - correct
        scaled = weights * inv_norm
        sums = torch.stack([scaled, scaled * residual])
        mass_gap = torch.mm(sums, kernel.T)  # (2, n_bins): [M; G]
        if self.charbonnier:
            mass_gap.mul_(self.row_scale)  # [delta M; G]
            norm = torch.linalg.vector_norm(mass_gap, dim=0)
            torch.sum(norm, dim=0, out=out)
            # [delta^2 M / norm; G / norm], and 0 for an empty bin (norm = 0)
            tiny = torch.finfo(norm.dtype).tiny
            grads = mass_gap.div_(norm.clamp_(min=tiny)).mul_(self.row_scale)
        else:
            torch.sum(mass_gap[1].abs(), dim=0, out=out)
            grads = torch.stack([torch.zeros_like(mass_gap[1]), mass_gap[1].sign()])
        rhs = self.rhs
        rhs[:2] = grads
        torch.mul(grads, self.slopes, out=rhs[2:4])
        q = torch.mm(rhs, kernel).mul_(inv_norm)  # W [gM, gG, gM u, gG u, u]
        # d/dp_i = s_i [W gG + W gM u + r_i W gG u - W u (W gM + r_i W gG)]:
        # the direct term through G, then the softmax backward through w.
        grad = torch.add(q[1], q[2]).addcmul_(residual, q[3])
        return grad.addcmul_(q[4], torch.addcmul(q[0], residual, q[1]), value=-1.0)


def loss_and_temperature_grad(problem, beta, loss, bins, out):
    """Write the loss into ``out``; return its gradient in each temperature.

    ``beta`` holds the inverse temperatures; it is overwritten.
    """
    total, first = problem.confidence_terms(beta)
    if loss == "nll":
        nll = total.log().sub_(beta * problem.true_gap)
        torch.sum(nll.mul_(problem.weights), dim=0, out=out)
        # d/dT [log S - d_y / T] = -(S1 / S - d_y) / T^2
        grad = first.mul_(problem.weights_ln2).div_(total)
        grad.sub_(problem.true_gap * problem.weights)
        return grad.mul_(beta.square_()).neg_()
    confidence = total.reciprocal_()
    grad = bins(confidence, problem.correct, problem.weights, out)
    # p = 1 / S, so dp/dT = S1 (p / T)^2
    factor = confidence.mul_(beta).square_().mul_(first)
    return grad.mul_(factor).mul_(problem.weights_ln2)


def evaluate(problem, network, loss, bins, out):
    """Loss at the current parameters into ``out``; returns its float64 gradient.

    dT/do is taken as sigmoid(o) everywhere; torch's softplus backward uses 1
    above its threshold of 20, which differs by less than 2e-9.
    """
    raw = network.forward(problem.inputs)
    beta = torch.nn.functional.softplus(raw).add_(MIN_TEMPERATURE).reciprocal_()
    grad = loss_and_temperature_grad(problem, beta, loss, bins, out)
    return network.backward(grad.mul_(torch.sigmoid(raw)))


def make_bins(problem, loss, n_bins, sigma, delta):
    charbonnier = loss == "charbonnier_soft_ece"
    return SoftBins(n_bins, sigma, delta, charbonnier, problem.dtype, problem.device)


@contextmanager
def one_cpu_thread(device):
    """Run torch's CPU kernels on one thread, restoring the setting after.

    A step is about eighty operations on arrays of a few ten thousand values,
    too small to gain much from splitting, and each split costs a thread
    synchronisation: on 2 cores shared with other jobs, two threads made
    fits 10 to 50 times slower than one (measured).
    """
    previous = torch.get_num_threads()
    if device.type != "cpu" or previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fit_smart(problem, coefs, intercepts, **options):
    """Full-batch Adam on the SMART loss, keeping the best parameters seen.

    Adam is ``torch.optim.Adam``'s update (betas 0.9 and 0.999, eps 1e-8, no
    weight decay) on the float64 parameters. The loss at step t is evaluated
    at the parameters before that step's update; the parameters with the
    lowest loss are copied into a separate buffer and returned. With
    ``early_stopping``, training stops once ``n_iter_no_change`` consecutive
    steps bring no improvement larger than ``tol`` over the best loss.
    ``options`` are the estimator's ``loss``, ``n_bins``, ``sigma``,
    ``delta``, ``lr``, ``max_iter``, ``early_stopping``, ``n_iter_no_change``
    and ``tol``, all required: the estimator alone holds their defaults.
    """
    with one_cpu_thread(problem.device):
        return _fit_smart(problem, coefs, intercepts, **options)


def _fit_smart(
    problem,
    coefs,
    intercepts,
    *,
    loss,
    n_bins,
    sigma,
    delta,
    lr,
    max_iter,
    early_stopping,
    n_iter_no_change,
    tol,
):
    device = problem.device
    network = SmartNetwork(coefs, intercepts, problem.dtype, device)
    bins = make_bins(problem, loss, n_bins, sigma, delta)
    params = network.params
    first_moment = torch.zeros_like(params)
    second_moment = torch.zeros_like(params)
    best_params = params.clone()
    losses = torch.empty(max_iter, dtype=problem.dtype, device=device)
    best_loss = torch.full((), math.inf, dtype=problem.dtype, device=device)
    steps = torch.arange(max_iter, device=device)
    last_improvement = torch.zeros((), dtype=torch.long, device=device)
    known_last = 0
    beta1, beta2 = ADAM_BETAS
    n_iter = max_iter
    slots = losses.unbind()
    for step in range(max_iter):
        current = slots[step]
        grad = evaluate(problem, network, loss, bins, current)
        improved = current < best_loss
        if early_stopping:
            enough = current < best_loss - tol
            torch.where(enough, steps[step], last_improvement, out=last_improvement)
        torch.where(improved, current, best_loss, out=best_loss)
        torch.where(improved, params, best_params, out=best_params)
        if early_stopping and step - known_last >= n_iter_no_change:
            # The loop's only host read, and only when a stop is possible.
            known_last = int(last_improvement)
            if step - known_last >= n_iter_no_change:
                n_iter = step + 1
                break
        first_moment.lerp_(grad, 1.0 - beta1)
        second_moment.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias1 = 1.0 - beta1 ** (step + 1)
        bias2 = 1.0 - beta2 ** (step + 1)
        denom = (second_moment.sqrt() / math.sqrt(bias2)).add_(ADAM_EPS)
        params.addcdiv_(first_moment, denom, value=-lr / bias1)
    loss_curve = losses[:n_iter].to(torch.float64).cpu().numpy()
    finite = np.isfinite(loss_curve)
    if not finite.any():
        raise ValueError(
            "The SMART loss is not finite at the initial parameters: the "
            f"calibration logits' confidences overflow in {problem.dtype} (logits "
            "too large for the temperatures SMART predicts). Rescale the logits "
            "or fit float64 logits."
        )
    best_iter = int(np.argmin(np.where(finite, loss_curve, np.inf)))
    coefs, intercepts = network.unpack(best_params)
    return SmartFit(
        coefs=coefs,
        intercepts=intercepts,
        loss_curve=loss_curve,
        n_iter=n_iter,
        best_loss=float(loss_curve[best_iter]),
        best_iter=best_iter,
        first_non_finite=None if finite.all() else int(np.argmin(finite)),
    )


# --- the export: SMART as a frozen nn.Module ---


class _FrozenLinear(nn.Module):
    """``x @ weight.T + bias`` with the weights in buffers, not parameters.

    A calibrator's export is fitted state: buffers are never returned by
    ``parameters()``, so an optimizer over a parent module cannot change
    them, and ``requires_grad_()`` on the parent cannot unfreeze them.
    """

    def __init__(self, coef, intercept):
        super().__init__()
        # coef is (n_in, n_out) as in MLPClassifier; nn.Linear's layout is its
        # transpose.
        weight = torch.as_tensor(coef, dtype=torch.float64).T.contiguous().clone()
        self.register_buffer("weight", weight)
        self.register_buffer(
            "bias", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(inputs, self.weight, self.bias)


class SmartModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(z / T(m)).

    ``m`` is the gap between the two largest logits, standardised with the
    calibration statistics, and T(m) = softplus(MLP(m)) + 0.1 (SMART). The
    network computes in the dtype of its buffers (float64 unless converted);
    like every export, it holds buffers only and no trainable parameter. A
    single score column ``s`` is read as the logits (0, s). ``-inf`` logits
    (masked classes) get log-probability ``-inf``.
    """

    def __init__(self, margin_mean: float, margin_std: float, coefs, intercepts):
        super().__init__()
        for name, value in (("margin_mean", margin_mean), ("margin_std", margin_std)):
            self.register_buffer(name, torch.tensor(value, dtype=torch.float64))
        layers: list[nn.Module] = []
        for index, (coef, intercept) in enumerate(zip(coefs, intercepts, strict=True)):
            layers.append(_FrozenLinear(coef, intercept))
            if index < len(coefs) - 1:
                layers.append(nn.ReLU())
        self.network = nn.Sequential(*layers)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
        dtype = self.margin_mean.dtype
        top2 = torch.topk(logits, 2, dim=-1).values.to(dtype)
        margin = (top2[..., 0] - top2[..., 1] - self.margin_mean) / self.margin_std
        # A single finite logit (the rest masked with -inf) gives an infinite
        # margin; the row is one-hot at any temperature, which is taken at the
        # mean margin (as predict_proba does) instead of the network's limit.
        margin = torch.where(torch.isfinite(margin), margin, torch.zeros_like(margin))
        raw = self.network(margin.unsqueeze(-1)).squeeze(-1)
        temperature = nn.functional.softplus(raw) + 0.1
        scale = temperature.reciprocal().to(logits.dtype)
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        return torch.log_softmax(shifted * scale.unsqueeze(-1), dim=-1)
