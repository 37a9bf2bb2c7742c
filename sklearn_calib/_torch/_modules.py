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
    """

    def __init__(self, temperature: float):
        super().__init__()
        self.register_buffer(
            "inverse_temperature", torch.tensor(1.0 / temperature, dtype=torch.float64)
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
        scale = self.inverse_temperature.to(logits.dtype)
        # Shifted first, so that a small T sends logits to -inf, never +inf.
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        return torch.log_softmax(shifted * scale, dim=-1)


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
    single score column ``s`` is read as the logits (0, s).
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


class VectorScalingModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(w * z + b).

    A single score column ``s`` (binary problem) is read as the logits (0, s).
    """

    def __init__(self, coef, intercept):
        super().__init__()
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        logits = _binary_as_two_logits(logits)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        return torch.log_softmax(logits * coef + intercept, dim=-1)


class MatrixScalingModule(nn.Module):
    """Maps logits to calibrated log-probabilities: log_softmax(W x + b).

    ``x`` is the logits themselves (matrix scaling) or their log-softmax
    (``log_probabilities=True``: Dirichlet calibration). A single score column
    ``s`` (binary problem) is read as the logits (0, s).
    """

    def __init__(self, coef, intercept, log_probabilities: bool):
        super().__init__()
        self.log_probabilities = log_probabilities
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        logits = _binary_as_two_logits(logits)
        if self.log_probabilities:
            logits = torch.log_softmax(logits, dim=-1)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        return torch.log_softmax(logits @ coef.T + intercept, dim=-1)


class PlattModule(nn.Module):
    """Maps binary scores to calibrated log-probabilities: log_softmax((0, a s + c)).

    ``s`` is a single score column, or the difference z_1 - z_0 of two logits.
    """

    def __init__(self, coef: float, intercept: float):
        super().__init__()
        self.register_buffer("coef", torch.tensor(coef, dtype=torch.float64))
        self.register_buffer("intercept", torch.tensor(intercept, dtype=torch.float64))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            score = logits
        else:
            score = logits[..., 1:2] - logits[..., 0:1]
        positive = score * self.coef.to(logits.dtype) + self.intercept.to(logits.dtype)
        return torch.log_softmax(
            torch.cat([torch.zeros_like(positive), positive], dim=-1), dim=-1
        )
