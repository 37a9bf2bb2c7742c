"""``nn.Module`` exports of the temperature and affine maps, beside a network.

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
        # The logits are shifted by their row maximum first, as predict_proba
        # does (scale_logits): the shift is exact near the maximum, while
        # z / T first rounds to the precision of |z| (float32 logits near 1e4
        # moved log-probabilities by 1e-4). T < 1 then sends entries to -inf,
        # never +inf. Where the shift itself overflows (finite logits spread
        # beyond the dtype's range), T >= 1 scales that row first, which
        # cannot overflow.
        self.shift_first = bool(inverse > 1.0)
        # float32 logits spread by less than ~1e-38 fit a T whose inverse is
        # beyond float32's range: it is then applied as two factors, a power
        # of two and the rest, each representable (as predict_proba does).
        self.split_scale = bool(inverse > torch.finfo(torch.float32).max)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] == 1:
            logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
        scale = self.inverse_temperature
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        if self.shift_first:
            logits = shifted
        else:
            overflow = torch.isneginf(shifted) & torch.isfinite(logits)
            logits = torch.where(overflow.any(dim=-1, keepdim=True), logits, shifted)
        if self.split_scale:
            power = torch.exp2(torch.floor(torch.log2(scale) / 2))
            logits = logits * power.to(logits.dtype)
            scale = scale / power
        return torch.log_softmax(logits * scale.to(logits.dtype), dim=-1)


def binary_as_two_logits(logits: torch.Tensor) -> torch.Tensor:
    """A single score column s (binary problem) becomes the logits (0, s)."""
    if logits.shape[-1] == 1:
        logits = torch.cat([torch.zeros_like(logits), logits], dim=-1)
    return logits


def _computed(logits: torch.Tensor, in_float64: bool) -> torch.Tensor:
    """The logits in the dtype a module computes in: float64 if ``in_float64``;
    float32 for half-precision logits, as ``predict_proba`` computes them
    (``computed_dtype``): a scaled logit overflows half precision's range
    (65504), and inf - inf is NaN; else their own."""
    if in_float64:
        return logits.to(torch.float64)
    if logits.dtype == torch.float16 or logits.dtype == torch.bfloat16:
        return logits.to(torch.float32)
    return logits


def _logits_and_mask(logits: torch.Tensor, in_float64: bool):
    """The logits to map (in the dtype of :func:`_computed`, a single score
    column s as (0, s)) and their ``-inf`` (masked) entries."""
    logits = binary_as_two_logits(_computed(logits, in_float64))
    return logits, torch.isneginf(logits)


def _masked_log_softmax(
    out: torch.Tensor, masked: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """``log_softmax`` of the mapped logits, ``-inf`` where masked, in ``dtype``."""
    out = torch.log_softmax(out.masked_fill(masked, float("-inf")), dim=-1)
    return out.to(dtype)


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

    ``tied=True`` (one scale for every class: bias-corrected temperature
    scaling) computes in float64 and shifts each row by its maximum first,
    as that calibrator's ``predict_proba`` does: the shift changes no softmax
    of ``z / T + b`` and is exact, while ``z / T`` rounds to the precision of
    ``|z|``. A row whose shift overflows (finite logits spread beyond
    float64's range) is not shifted.
    """

    def __init__(self, coef, intercept, tied: bool = False):
        super().__init__()
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).clone())
        self.register_buffer(
            "intercept", torch.as_tensor(intercept, dtype=torch.float64).clone()
        )
        self.tied = bool(tied)
        self.in_float64 = self.tied or _beyond_float32(coef, intercept)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        dtype = logits.dtype
        logits, masked = _logits_and_mask(logits, self.in_float64)
        if self.tied:
            shifted = logits - logits.amax(dim=-1, keepdim=True)
            overflow = (torch.isneginf(shifted) & ~masked).any(dim=-1, keepdim=True)
            logits = torch.where(overflow, logits, shifted)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        # 0 stands in for -inf, whose product with a scale could be +inf or NaN.
        out = logits.masked_fill(masked, 0.0) * coef + intercept
        return _masked_log_softmax(out, masked, dtype)


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
        logits, masked = _logits_and_mask(logits, self.in_float64)
        if self.log_probabilities:
            logits = torch.log_softmax(logits, dim=-1)
        lowest = logits.masked_fill(masked, float("inf")).amin(dim=-1, keepdim=True)
        inputs = torch.where(masked, lowest, logits)
        coef = self.coef.to(logits.dtype)
        intercept = self.intercept.to(logits.dtype)
        out = inputs @ coef.T + intercept
        return _masked_log_softmax(out, masked, dtype)


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
        logits = _computed(logits, self.in_float64)
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
        return _masked_log_softmax(out, masked, dtype)


def _quarter_max(dtype: torch.dtype) -> float:
    """A quarter of the largest finite value of ``dtype`` (TorchScript has no finfo)."""
    if dtype == torch.float64:
        return 4.49423283715579e307
    if dtype == torch.float16:
        return 16376.0
    return 8.507059173023462e37  # float32 and bfloat16


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
        logits = binary_as_two_logits(logits.to(torch.float64))
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
        logits = binary_as_two_logits(logits.to(torch.float64))
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
        return _masked_log_softmax(out, masked, dtype)


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
        logits = binary_as_two_logits(logits.to(torch.float64))
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
        # The calibrated logit is clipped as predict_proba clips it: at a
        # quarter of the largest value of the dtype it computes the input in
        # (float32 for float32 and half logits), so that a float32 output
        # keeps a finite log-probability where transform has one.
        if dtype == torch.float64:
            f_bound = _quarter_max(torch.float64)
        else:
            f_bound = _quarter_max(torch.float32)
        f = torch.clamp(f, -f_bound, f_bound)
        calibrated = torch.stack([zero, f], dim=-1)
        out = torch.where(masked.unsqueeze(-1), logits, calibrated)
        return torch.log_softmax(out, dim=-1).to(dtype)
