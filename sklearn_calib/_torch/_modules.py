"""``nn.Module`` exports of fitted calibrators, for deployment beside a network.

Every export holds its fitted values in buffers and has no parameters: it
moves with ``.to(device)``, is saved in ``state_dict()``, and no optimizer
over a parent module (nor ``requires_grad_()`` on it) can change it.
"""

import torch
from torch import nn


class TemperatureModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(z / T).

    A single score column ``s`` (binary problem) is read as the logits (0, s).
    ``-inf`` logits (masked classes) get log-probability ``-inf``.
    """

    def __init__(self, temperature: float):
        super().__init__()
        inverse = 1.0 / temperature
        self.register_buffer(
            "inverse_temperature", torch.tensor(inverse, dtype=torch.float64)
        )
        # T < 1 can overflow z / T: the logits are then shifted first, so
        # that a small T sends them to -inf, never +inf. T >= 1 cannot, and
        # the shift could itself overflow on logits near the float range.
        self.shift_first = bool(inverse > 1.0)
        # float32 logits spread by less than ~1e-38 fit a T whose inverse is
        # beyond float32's range: it is then applied as two factors, a power
        # of two and the rest, each representable (as predict_proba does).
        self.split_scale = bool(inverse > torch.finfo(torch.float32).max)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
        scale = self.inverse_temperature
        if self.shift_first:
            logits = logits - logits.amax(dim=-1, keepdim=True)
        if self.split_scale:
            power = torch.exp2(torch.floor(torch.log2(scale) / 2))
            logits = logits * power.to(logits.dtype)
            scale = scale / power
        return torch.log_softmax(logits * scale.to(logits.dtype), dim=-1)


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


def _binary_as_two_logits(logits: torch.Tensor) -> torch.Tensor:
    """A single score column s (binary problem) becomes the logits (0, s)."""
    if logits.shape[-1] == 1:
        logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
    return logits


def _beyond_float32(*values) -> bool:
    """Whether a fitted value lies beyond float32's range (float32 logits
    spread by 1e-40 fit scales near 1e40): the module then computes float32
    input in float64, as ``predict_proba`` does, instead of turning the value
    into inf."""
    limit = torch.finfo(torch.float32).max
    return any(
        bool(torch.as_tensor(v, dtype=torch.float64).abs().max() > limit)
        for v in values
    )


class VectorScalingModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(w * z + b).

    A single score column ``s`` (binary problem) is read as the logits (0, s).
    A masked class (logit ``-inf``) keeps log-probability ``-inf``, whatever
    the sign of its scale.
    """

    def __init__(self, coef, intercept):
        super().__init__()
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )
        self.in_float64 = _beyond_float32(coef, intercept)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        if self.in_float64:
            logits = logits.to(torch.float64)
        logits = _binary_as_two_logits(logits)
        masked = torch.isneginf(logits)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        # 0 stands in for -inf, whose product with a scale could be +inf or NaN.
        out = logits.masked_fill(masked, 0.0) * coef + intercept
        out = torch.log_softmax(out.masked_fill(masked, float("-inf")), dim=-1)
        return out.to(dtype)


class MatrixScalingModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(W x + b).

    ``x`` is the logits themselves (matrix scaling) or their log-softmax
    (``log_probabilities=True``: Dirichlet calibration). A single score column
    ``s`` (binary problem) is read as the logits (0, s). A masked class (logit
    ``-inf``) enters the mixing as the lowest unmasked entry of ``x`` in its
    row and keeps log-probability ``-inf``, as in ``predict_proba``.
    """

    def __init__(self, coef, intercept, log_probabilities: bool):
        super().__init__()
        self.log_probabilities = log_probabilities
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )
        # Log-probabilities are computed in float64, as predict_proba does:
        # float32 logits near 3e38 differ by more than float32 can hold.
        self.in_float64 = log_probabilities or _beyond_float32(coef, intercept)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        if self.in_float64:
            logits = logits.to(torch.float64)
        logits = _binary_as_two_logits(logits)
        masked = torch.isneginf(logits)
        if self.log_probabilities:
            logits = torch.log_softmax(logits, dim=-1)
        lowest = logits.masked_fill(masked, float("inf")).amin(dim=-1, keepdim=True)
        inputs = torch.where(masked, lowest, logits)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        out = inputs @ coef.T + intercept
        out = torch.log_softmax(out.masked_fill(masked, float("-inf")), dim=-1)
        return out.to(dtype)


class PlattModule(nn.Module):
    """Maps binary scores to calibrated log-probabilities: log_softmax((0, a s + c)).

    ``s`` is a single score column, or the difference z_1 - z_0 of two logits.
    A score of ``-inf`` (positive class masked) gives the positive class
    log-probability ``-inf``; ``+inf`` (negative class masked) the negative one.
    """

    def __init__(self, coef: float, intercept: float):
        super().__init__()
        self.register_buffer("coef", torch.tensor(coef, dtype=torch.float64))
        self.register_buffer("intercept", torch.tensor(intercept, dtype=torch.float64))
        self.in_float64 = _beyond_float32(coef, intercept)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        if self.in_float64:
            logits = logits.to(torch.float64)
        if logits.shape[-1] == 1:
            score = logits
        else:
            score = logits[..., 1:2] - logits[..., 0:1]
        positive_masked = torch.isneginf(score)
        negative_masked = torch.isposinf(score)
        score = score.masked_fill(positive_masked | negative_masked, 0.0)
        positive = score * self.coef.to(logits.dtype) + self.intercept.to(logits.dtype)
        out = torch.cat([torch.zeros_like(positive), positive], dim=-1)
        masked = torch.cat([negative_masked, positive_masked], dim=-1)
        out = torch.log_softmax(out.masked_fill(masked, float("-inf")), dim=-1)
        return out.to(dtype)
