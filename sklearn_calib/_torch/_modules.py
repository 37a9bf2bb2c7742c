"""``nn.Module`` exports of fitted calibrators, for deployment beside a network."""

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
        return torch.log_softmax(logits * scale, dim=-1)
