"""``nn.Module`` export of the spline calibrator's top-label table.

It maps logits to calibrated log-probabilities, keeps a masked logit (``-inf``)
at probability exactly 0, reads a single score column ``s`` as the logits
``(0, s)``, returns the input's dtype and holds its fitted values as float64
buffers (never trainable parameters), computing in float64 as
``predict_proba`` does.
"""

import torch
from torch import nn

from ._scaling_modules import binary_as_two_logits


class TopLabelTableModule(nn.Module):
    """Top-label recalibration by a piecewise-linear table of the confidence.

    The confidence ``p = max softmax(z)`` becomes ``g(p)`` (linear
    interpolation of the table, constant beyond its ends), floored where
    needed so that the predicted class stays on top; the other classes are
    rescaled by ``(1 - g) / (1 - p)``, in log space (where ``t`` columns tie
    at the maximum, each gets ``g``, at most ``cap / t``, and the others
    share ``1 - t g``). The table's points ``x``
    are increasing values of ``log(1 - p)``, the log of the other classes'
    total, which keeps apart the confidences that float64 rounds together
    near 1.
    """

    def __init__(self, x, values, cap: float):
        super().__init__()
        self.register_buffer("x", torch.as_tensor(x, dtype=torch.float64).clone())
        self.register_buffer(
            "values", torch.as_tensor(values, dtype=torch.float64).clone()
        )
        self.cap = cap

    def _interpolate(self, u: torch.Tensor) -> torch.Tensor:
        x = self.x
        values = self.values
        n = x.shape[0]
        if n == 1:
            return values[0].expand_as(u).clone()
        index = torch.searchsorted(x, u.contiguous(), right=True).clamp(1, n - 1)
        x0 = x[index - 1]
        x1 = x[index]
        v0 = values[index - 1]
        v1 = values[index]
        # Linear in p = 1 - exp(u) between the points, expm1(u - u0) /
        # expm1(u1 - u0) in logs: no cancellation, no overflow. Below the
        # segment (u <= u0, also u = -inf: no other class) the weight is 0.
        gap = u - x0
        positive = gap.clamp(min=0.0)
        span = x1 - x0
        log_ratio = (positive + torch.log(-torch.expm1(-positive))) - (
            span + torch.log(-torch.expm1(-span))
        )
        t = torch.where(gap > 0, torch.exp(log_ratio).clamp(max=1.0), 0.0)
        return v0 + t * (v1 - v0)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        logits = binary_as_two_logits(logits)
        dtype = logits.dtype
        work = logits.to(torch.float64)
        log_p = torch.log_softmax(work, dim=-1)
        top = log_p.argmax(dim=-1, keepdim=True)
        others = log_p.scatter(-1, top, float("-inf"))
        # The map reads log(1 - p) of the top confidence p.
        new = self._interpolate(torch.logsumexp(others, dim=-1))
        new = new.unsqueeze(-1)
        # The t columns tied at the maximum (t = 1 but on exact ties) each
        # get the map's value; the other classes share the rest.
        is_top = log_p == log_p.gather(-1, top)
        n_top = is_top.sum(dim=-1, keepdim=True).to(torch.float64)
        rest = log_p.masked_fill(is_top, float("-inf"))
        log_rest = torch.logsumexp(rest, dim=-1, keepdim=True)
        log_second = rest.amax(dim=-1, keepdim=True)
        # The tie point with the runner-up after rescaling, p2 / (R + t p2),
        # and a cap that keeps the other classes' probabilities positive.
        tie = torch.where(
            n_top == 1,
            torch.sigmoid(log_second - log_rest),
            1.0 / (torch.exp(log_rest - log_second) + n_top),
        )
        new = torch.maximum(new, tie * (1.0 + 1e-9))
        new = torch.minimum(new, self.cap / n_top)
        has_rest = torch.isfinite(log_rest)
        log_new = torch.log(new)
        # (rest - R) first: both can be huge, log1p(-t new) is small.
        rescaled = (rest - log_rest) + torch.log1p(-n_top * new)
        out = torch.where(is_top, log_new, rescaled)
        out = torch.where(has_rest, out, log_p)
        return out.to(dtype)
