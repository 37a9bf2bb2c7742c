"""``nn.Module`` exports of the ensemble, binary-feature and spline calibrators.

Every module maps logits to calibrated log-probabilities, keeps a masked
logit (``-inf``) at probability exactly 0, reads a single score column ``s``
as the logits ``(0, s)``, returns the input's dtype and holds its fitted
values as float64 buffers (never trainable parameters). Like the
calibrators' ``predict_proba``, they compute in float64: float32 logits near
its range (3e38) differ by more than float32 holds, and a temperature fitted
on float32 logits spread by 1e-40 has an inverse beyond it.
"""

import torch
from torch import nn


def _quarter_max(dtype: torch.dtype) -> float:
    """A quarter of the largest finite value of ``dtype`` (TorchScript has no finfo)."""
    if dtype == torch.float64:
        return 4.49423283715579e307
    if dtype == torch.float16:
        return 16376.0
    return 8.507059173023462e37  # float32 and bfloat16


def _as_two_or_more(logits: torch.Tensor) -> torch.Tensor:
    if logits.shape[-1] == 1:
        logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
    return logits


class EnsembleTemperatureModule(nn.Module):
    """log(w0 softmax(z / T) + w1 softmax(z) + w2 uniform over unmasked classes)."""

    def __init__(self, temperature: float, weights):
        super().__init__()
        self.register_buffer(
            "inverse_temperature", torch.tensor(1.0 / temperature, dtype=torch.float64)
        )
        self.register_buffer(
            "log_weights",
            torch.log(torch.as_tensor(weights, dtype=torch.float64).clone()),
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        logits = _as_two_or_more(logits.to(torch.float64))
        log_w = self.log_weights
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        scaled = torch.log_softmax(shifted * self.inverse_temperature, -1)
        raw = torch.log_softmax(shifted, dim=-1)
        unmasked = torch.isfinite(logits)
        count = unmasked.sum(dim=-1, keepdim=True).to(torch.float64)
        uniform = torch.where(
            unmasked, -torch.log(count), torch.full_like(logits, float("-inf"))
        )
        parts = torch.stack(
            [scaled + log_w[0], raw + log_w[1], uniform + log_w[2]], dim=0
        )
        return torch.logsumexp(parts, dim=0).to(dtype)


class StructuredScalingModule(nn.Module):
    """log_softmax(A f(z) + b), f(z) = log((1 - e) softmax(z / T) + e / K_row).

    ``A`` is a full matrix (``matrix=True``, a masked class entering the
    mixing as the lowest unmasked feature of its row) or a vector of scales.
    ``K_row`` counts the unmasked classes of the row.
    """

    def __init__(self, temperature: float, mix_weight: float, coef, intercept, matrix):
        super().__init__()
        self.matrix = bool(matrix)
        self.register_buffer(
            "inverse_temperature", torch.tensor(1.0 / temperature, dtype=torch.float64)
        )
        self.register_buffer(
            "log_mix",
            torch.log(
                torch.tensor([1.0 - mix_weight, mix_weight], dtype=torch.float64)
            ),
        )
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        logits = _as_two_or_more(logits.to(torch.float64))
        masked = torch.isneginf(logits)
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        scaled = torch.log_softmax(shifted * self.inverse_temperature, -1)
        count = (~masked).sum(dim=-1, keepdim=True).to(torch.float64)
        log_mix = self.log_mix
        features = torch.logaddexp(scaled + log_mix[0], log_mix[1] - torch.log(count))
        if self.matrix:
            lowest = features.masked_fill(masked, float("inf")).amin(-1, keepdim=True)
            inputs = torch.where(masked, lowest, features)
            out = inputs @ self.coef.T + self.intercept
        else:
            inputs = features.masked_fill(masked, 0.0)
            out = inputs * self.coef + self.intercept
        out = torch.log_softmax(out.masked_fill(masked, float("-inf")), dim=-1)
        return out.to(dtype)


class BinaryFeatureModule(nn.Module):
    """log_softmax((0, f(s))) for beta calibration or quadratic scaling of s.

    ``kind="beta"``: f = c + a log_sigmoid(s) + b softplus(s);
    ``kind="quadratic"``: f = c + u (a + b u) with u = s / scale. A row with
    a masked logit keeps its certain prediction.
    """

    def __init__(self, kind: str, a: float, b: float, c: float, scale: float):
        super().__init__()
        self.kind = kind
        self.register_buffer(
            "params", torch.tensor([a, b, c, scale], dtype=torch.float64)
        )

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        logits = _as_two_or_more(logits.to(torch.float64))
        params = self.params
        masked = (logits == float("-inf")).any(dim=-1)
        score = logits[..., 1] - logits[..., 0]
        bound = _quarter_max(logits.dtype)
        s = torch.nan_to_num(score, nan=0.0).clamp(-bound, bound)
        zero = torch.zeros_like(s)
        if self.kind == "beta":
            # log_sigmoid(s) = -logaddexp(0, -s), softplus(s) = logaddexp(0, s)
            f = (
                params[2]
                - params[0] * torch.logaddexp(zero, -s)
                + params[1] * torch.logaddexp(zero, s)
            )
        else:
            u = s / params[3]
            f = params[2] + u * (params[0] + params[1] * u)
        f = torch.clamp(f, -bound, bound)
        calibrated = torch.stack([zero, f], dim=-1)
        out = torch.where(masked.unsqueeze(-1), logits, calibrated)
        return torch.log_softmax(out, dim=-1).to(dtype)


class TopLabelTableModule(nn.Module):
    """Top-label recalibration by a piecewise-linear table of the confidence.

    The confidence ``p = max softmax(z)`` becomes ``g(p)`` (linear
    interpolation of the table, constant beyond its ends), floored where
    needed so that the predicted class stays on top; the other classes are
    rescaled by ``(1 - g) / (1 - p)``, in log space. The table's points ``x``
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
        logits = _as_two_or_more(logits)
        dtype = logits.dtype
        work = logits.to(torch.float64)
        log_p = torch.log_softmax(work, dim=-1)
        top = log_p.argmax(dim=-1, keepdim=True)
        others = log_p.scatter(-1, top, float("-inf"))
        log_rest = torch.logsumexp(others, dim=-1, keepdim=True)
        log_second = others.amax(dim=-1, keepdim=True)
        new = self._interpolate(log_rest.squeeze(-1)).unsqueeze(-1)
        # The tie point with the runner-up after rescaling, and a cap that
        # keeps the other classes' probabilities positive.
        tie = torch.sigmoid(log_second - log_rest)
        new = torch.maximum(new, tie * (1.0 + 1e-9))
        new = torch.clamp(new, max=self.cap)
        has_rest = torch.isfinite(log_rest)
        log_new = torch.log(new)
        # (others - rest) first: both can be huge, log1p(-new) is small.
        rescaled = (others - log_rest) + torch.log1p(-new)
        out = rescaled.scatter(-1, top, log_new)
        out = torch.where(has_rest, out, log_p)
        return out.to(dtype)
