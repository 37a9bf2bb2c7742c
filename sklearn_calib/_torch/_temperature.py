"""Exact temperature scaling: a bracketed Newton method on beta = 1 / T.

L(beta) = mean_w( logsumexp(beta z_i) - beta z_{i,y_i} ) is convex with
  L'(beta)  = mean_w( E_q[z_i] - z_{i,y_i} ),
  L''(beta) = mean_w( Var_q[z_i] ),      q_i = softmax(beta z_i).
Every Newton iteration is one pass over the logits, row block by row block, so
that the temporaries stay small and in cache. Inside a block the logits are
shifted by the row maximum, d = z - max z <= 0: exp(beta d) never overflows and
the variance E[d^2] - E[d]^2 loses little to cancellation. Row sums are taken
in the logits' dtype and every mean over rows in float64.

Masked classes (``-inf`` logits) have probability exactly 0 at every beta: in
the shifted copy they are stored as the dtype's lowest finite value, whose
weight exp(beta d) is exactly 0 at every beta of the bracket, so that the
products d exp(beta d) are 0 rather than NaN (0 * inf).
"""

import math
from dataclasses import dataclass

import torch

# The bracket of beta, relative to the logits' own scales: the calibrated gap
# between a row's top logit and its runner-up stays below 1e4 (typical row),
# and the calibrated spread of a row stays above 1e-4 (mean row).
BETA_RANGE = (1e-4, 1e4)
WARM_START_ROWS = 2048
# A Newton step below this relative size that no longer shrinks quadratically
# has hit the rounding noise of float32 row sums.
_NOISE_FLOOR = 1e-6
_MAX_LOG_STEP = 3.0
_CPU_BLOCK_ELEMENTS = 2**19
_CUDA_BLOCK_ELEMENTS = 2**27
# Runner-up gaps in this range are solved as given; others are first brought
# to about 1 by an exact power-of-two scaling of the shifted logits, so that
# beta stays well inside the range where the derivatives are representable.
_COMFORT_SCALE = (2.0**-16, 2.0**16)
# Below this scale (about 1e-289) the logits are constant for all purposes: the
# temperature that would make them matter, ~scale, has no finite inverse 1/T
# to multiply them by.
_CONSTANT_SCALE = 2.0**-960
# The shift z - max z keeps every gap below the dtype's largest value times
# 2^-HEADROOM (logits of larger magnitude are first scaled by a power of two),
# so that gaps never overflow and float64 sums of gaps over a row stay finite.
_HEADROOM_BITS = 40


@dataclass
class TemperatureFit:
    beta: float
    n_iter: int
    status: str  # "converged", "max_iter", "at_upper_beta", "at_lower_beta", "constant"
    gradient: float


def _spaced_rows(n_rows, device):
    """Up to WARM_START_ROWS evenly spaced row indices (all rows when fewer).

    Row i of the sample is round(i (n_rows - 1) / (WARM_START_ROWS - 1)),
    computed in integers: a float32 ``linspace`` rounds indices above 2^24 to
    the nearest representable float, which can lie past the last row.
    """
    if n_rows <= WARM_START_ROWS:
        return torch.arange(n_rows, device=device)
    steps = torch.arange(WARM_START_ROWS, device=device, dtype=torch.int64)
    span = WARM_START_ROWS - 1
    return (steps * (n_rows - 1) + span // 2) // span


def _max_exponent(dtype):
    """e such that 2^e is just above the dtype's largest value (128, 1024)."""
    return math.frexp(torch.finfo(dtype).max)[1]


def _beta_limits(dtype):
    """Range of beta (on logits of unit scale) where the derivatives are finite.

    A row's terms exp(beta d) d^2 peak at 4 / (e beta)^2: beta above
    2^-(maxexp / 2 - 20) keeps their sum over up to 2^30 classes below the
    dtype's largest value (2^-44 for float32, 2^-492 for float64); the upper
    limit keeps beta itself representable with the same margin.
    """
    bits = _max_exponent(dtype) // 2 - 20
    return 2.0**-bits, 2.0**bits


def _scale_by_power_of_two(tensor, exponent):
    """``tensor *= 2**exponent`` in place, in factors the dtype can represent.

    Scaling by a power of two is exact (short of underflow to 0 or overflow to
    -inf of entries far outside the scale that matters).
    """
    step = _max_exponent(tensor.dtype) - 2
    n_steps = -(-abs(exponent) // step)  # at most 9 for float64 exponents
    for _ in range(n_steps):
        part = max(-step, min(step, exponent))
        tensor.mul_(2.0**part)
        exponent -= part


def _finite_row_min(logits, row_max, block_rows):
    """Smallest finite entry of every row (``-inf`` entries are masked classes)."""
    low = torch.empty_like(row_max)
    for start in range(0, logits.shape[0], block_rows):
        block = logits[start : start + block_rows]
        top = row_max[start : start + block_rows].view(-1, 1)
        low[start : start + block_rows] = torch.where(
            torch.isneginf(block), top, block
        ).amin(dim=1)
    return low


def _block_rows(tensor):
    limit = _CUDA_BLOCK_ELEMENTS if tensor.is_cuda else _CPU_BLOCK_ELEMENTS
    return max(1, limit // max(1, tensor.shape[1]))


def _shift(logits):
    """Shifted logits ``c (z - max z)``, the power of two ``c``, any masked entry.

    ``c = 1`` unless some row's gap between its largest and smallest finite
    logit comes within 2^-HEADROOM of the dtype's largest value (float32
    logits of magnitude ~1e27, float64 ~1e296); then ``c`` is the power of two
    that brings it there. ``-inf`` entries stay ``-inf``.
    """
    finfo = torch.finfo(logits.dtype)
    low, high = torch.aminmax(logits, dim=1)
    masked = bool(torch.isneginf(low).any())
    if masked:
        low = _finite_row_min(logits, high, _block_rows(logits))
    # Half gaps, so that float64 logits near its range do not overflow here.
    half_gap = float((0.5 * high.to(torch.float64) - 0.5 * low.to(torch.float64)).max())
    if not math.isfinite(half_gap):
        # Callers pass validated logits; features derived from them (a
        # difference of two logits) can still overflow or hold +inf.
        raise ValueError(
            "The logits (or features derived from them) contain +inf or NaN; "
            "they must be finite numbers or -inf (a masked class)."
        )
    half_limit = 0.5 * finfo.max * 2.0**-_HEADROOM_BITS
    if half_gap <= half_limit:
        return torch.sub(logits, high.view(-1, 1)), 1.0, masked
    factor = 2.0 ** -math.ceil(math.log2(half_gap / half_limit))
    return torch.add(high.view(-1, 1) * -factor, logits, alpha=factor), factor, masked


def _weighted_median(values, weights):
    order = torch.argsort(values)
    cumulative = torch.cumsum(weights[order], dim=0)
    index = int(torch.searchsorted(cumulative, 0.5 * cumulative[-1]))
    return float(values[order][min(index, values.shape[0] - 1)])


def _scales(shifted, rows, weights):
    """The logits' own scales on the given rows, in float64: ``(wide, near)``.

    ``wide`` is the weighted mean, over rows with at least two finite logits,
    of the gap between a row's maximum and the mean of its finite logits (the
    spread that the flattening side of the bracket is relative to); ``near``
    is the weighted median, over rows with a finite logit below their maximum,
    of the gap between the maximum and the next lower finite logit (the
    runner-up, which the sharpening side is relative to). Masked (``-inf``)
    entries count in neither. ``None`` where no row qualifies.
    """
    wide_sum = wide_weight = 0.0
    near_values, near_weights = [], []
    for chunk in rows.split(_block_rows(shifted)):
        d = shifted[chunk]
        w = weights[chunk]
        finite = torch.isfinite(d)
        count = finite.sum(dim=1)
        spread = -torch.where(finite, d, 0.0).sum(dim=1, dtype=torch.float64) / count
        several = count >= 2
        wide_sum += float((spread * w)[several].sum())
        wide_weight += float(w[several].sum())
        runner_up = -torch.where(d < 0, d, -math.inf).amax(dim=1).to(torch.float64)
        has_runner_up = torch.isfinite(runner_up)
        near_values.append(runner_up[has_runner_up])
        near_weights.append(w[has_runner_up])
    near_values = torch.cat(near_values)
    if near_values.numel() == 0 or not wide_weight > 0:
        return None, None
    near = _weighted_median(near_values, torch.cat(near_weights))
    return wide_sum / wide_weight, near


class _Problem:
    """Shifted logits, labels and weights, with the per-block pass of one Newton step.

    ``shifted`` holds d = z - max z (at most 0, finite: masked entries at the
    dtype's lowest value); each Newton pass reads it block by block with
    block-sized temporaries. Weights are normalised to sum to 1, so that every
    weighted sum below is a mean, bounded by its largest term.
    """

    def __init__(self, shifted, y, weights):
        """``weights`` (float64) is normalised in place: pass a tensor to give away."""
        self.shifted = shifted
        self.weights = weights.div_(weights.sum())
        self.block_rows = _block_rows(shifted)
        true_shifted = shifted.gather(1, y.view(-1, 1)).squeeze(1)
        # mean_w d_{i,y_i}, constant in beta
        self.mean_true = float((true_shifted.to(torch.float64) * self.weights).sum())

    def derivatives(self, beta):
        """First and second derivative of the weighted mean NLL at beta."""
        first = 0.0
        second = 0.0
        n_rows = self.shifted.shape[0]
        for start in range(0, n_rows, self.block_rows):
            d = self.shifted[start : start + self.block_rows]
            e = torch.mul(d, beta).exp_()
            s0 = e.sum(dim=1).to(torch.float64)
            e.mul_(d)
            s1 = e.sum(dim=1).to(torch.float64)
            s2 = torch.linalg.vecdot(e, d).to(torch.float64)
            mean_d = s1 / s0
            w = self.weights[start : start + self.block_rows]
            first += float((w * mean_d).sum())
            second += float((w * (s2 / s0 - mean_d * mean_d)).sum())
        return first - self.mean_true, second


def _newton_candidate(beta, g, h):
    """Next iterate: Newton in u = log(beta) where that is locally convex.

    Far from the optimum a Newton step in beta overshoots (L' is strongly
    curved); in u the step is multiplicative and lands close from either
    side. Near the optimum both are quadratically convergent.
    d/du L = beta L'  and  d2/du2 L = beta L' + beta^2 L''.
    """
    curvature_u = beta * g + beta * beta * h
    if curvature_u > 0:
        step_u = -beta * g / curvature_u
        return beta * math.exp(min(max(step_u, -_MAX_LOG_STEP), _MAX_LOG_STEP))
    candidate = beta - g / h
    return min(
        max(candidate, beta * math.exp(-_MAX_LOG_STEP)), beta * math.exp(_MAX_LOG_STEP)
    )


def _newton(problem, beta, lo, hi, max_iter, rtol):
    """Bracketed Newton iteration for L'(beta) = 0 on [lo, hi].

    ``lo``/``hi`` start at the allowed range; their derivative signs are
    checked only when an iterate would leave it, so an interior optimum costs
    no extra pass.
    """
    lo_checked = hi_checked = False
    previous_step = float("inf")
    slow_steps = 0
    g = float("nan")
    for n_iter in range(1, max_iter + 1):
        g, h = problem.derivatives(beta)
        if g > 0:
            hi, hi_checked = beta, True
        else:
            lo, lo_checked = beta, True
        if g == 0.0:
            return TemperatureFit(beta, n_iter, "converged", g)
        if h <= 0.0:
            # No curvature left: every row's softmax is a point mass, so the
            # loss only keeps falling towards the bound the gradient points to.
            if g < 0:
                return TemperatureFit(hi, n_iter, "at_upper_beta", g)
            return TemperatureFit(lo, n_iter, "at_lower_beta", g)
        candidate = _newton_candidate(beta, g, h)
        # Newton crawls linearly when the optimum is at a bound (for example
        # a separable calibration set: L' ~ -c exp(-beta gap)); two slow steps
        # in a row trigger the check of the bound the gradient points to.
        slow = abs(candidate - beta) > max(0.5 * previous_step, _NOISE_FLOOR * beta)
        slow_steps = slow_steps + 1 if slow else 0
        if (candidate >= hi or (slow_steps >= 2 and g < 0)) and not hi_checked:
            g_hi, _ = problem.derivatives(hi)
            if g_hi <= 0:
                return TemperatureFit(hi, n_iter + 1, "at_upper_beta", g_hi)
            hi_checked = True
        if (candidate <= lo or (slow_steps >= 2 and g > 0)) and not lo_checked:
            g_lo, _ = problem.derivatives(lo)
            if g_lo >= 0:
                return TemperatureFit(lo, n_iter + 1, "at_lower_beta", g_lo)
            lo_checked = True
        if not lo < candidate < hi or (slow_steps >= 2 and lo_checked and hi_checked):
            candidate = (lo * hi) ** 0.5  # bisect in log space: beta spans decades
        step = abs(candidate - beta)
        beta = candidate
        # Converged: the step is below tolerance, or quadratic convergence
        # (error_{k+1} ~ C step_k^2, C estimated from the last two steps)
        # predicts that the step just taken already lands within tolerance.
        # Or the step stopped shrinking at the rounding floor of the logits'
        # dtype, where another pass has nothing left to gain.
        predicted_error = step * step * step / previous_step**2
        if (
            step <= rtol * beta
            or (step <= _NOISE_FLOOR * beta and predicted_error <= rtol * beta)
            or (step <= _NOISE_FLOOR * beta and step > 0.25 * previous_step)
        ):
            return TemperatureFit(beta, n_iter, "converged", g)
        previous_step = step
    return TemperatureFit(beta, max_iter, "max_iter", g)


def fit_inverse_temperature(logits, y, weights, *, max_iter=100):
    """Minimise the weighted NLL of softmax(beta * logits) over beta > 0.

    Parameters
    ----------
    logits : Tensor (n, k), float32 or float64
        Finite or ``-inf`` (masked class); every row has a finite entry.
    y : Tensor (n,), int64 class codes
    weights : Tensor (n,)
        Non-negative with a positive sum; only their ratios matter (they are
        divided by their maximum first, so their scale never does).
    max_iter : int, Newton iterations on the full data

    Returns
    -------
    TemperatureFit

    The caller has checked that no sample of positive weight has the label of
    a masked class (``check_true_class_unmasked``): its likelihood would be 0
    at every temperature.
    """
    # Only ratios matter: dividing by the largest weight keeps every sum
    # finite (weights of 1e300) and away from subnormals (1e-310). A copy,
    # normalised in place from here on.
    weights = weights.to(torch.float64, copy=True)
    weights.div_(weights.max())
    shifted, prescale, masked = _shift(logits)

    # The scales only set the bracket of beta: evenly spaced rows of positive
    # weight suffice, unless none of them has a runner-up logit.
    n_rows = logits.shape[0]
    if bool((weights > 0).all()):
        positive = None
        sample = _spaced_rows(n_rows, weights.device)
    else:
        positive = torch.nonzero(weights > 0).view(-1)
        sample = positive[_spaced_rows(positive.shape[0], positive.device)]
    wide, near = _scales(shifted, sample, weights)
    if near is None and sample.shape[0] < n_rows:
        every = torch.arange(n_rows, device=weights.device)
        wide, near = _scales(shifted, every if positive is None else positive, weights)
    if near is None or not near / prescale > _CONSTANT_SCALE:
        return TemperatureFit(1.0, 0, "constant", 0.0)

    exponent = 0
    if not _COMFORT_SCALE[0] <= near <= _COMFORT_SCALE[1]:
        # Runner-up gaps of ~1e-285 (or ~1e280) would make beta d and d^2
        # underflow or overflow in the derivatives. Scaling them by a power of
        # two is exact, and softmax(beta z) = softmax((beta / c) (c z)).
        exponent = -round(math.log2(near))
        _scale_by_power_of_two(shifted, exponent)
        wide *= 2.0**exponent
        near *= 2.0**exponent
    if masked or exponent > 0:
        # -inf (masked, or a gap scaled past the dtype's range) becomes the
        # lowest finite value: exp(beta d) is still exactly 0 at every beta of
        # the bracket, and d exp(beta d) is 0 instead of NaN.
        shifted.clamp_(min=torch.finfo(shifted.dtype).min)
    problem = _Problem(shifted, y, weights)

    lowest, highest = _beta_limits(shifted.dtype)
    lo = max(BETA_RANGE[0] / max(wide, near), lowest)
    hi = min(BETA_RANGE[1] / near, highest)
    rtol = 1e-13 if logits.dtype == torch.float64 else 1e-10

    beta = 1.0 if lo < 1.0 < hi else (lo * hi) ** 0.5
    if n_rows > 4 * WARM_START_ROWS:
        # A solve on evenly spaced rows lands within a few percent of the
        # optimum, so the full data needs only the last quadratic steps.
        sub = _Problem(shifted[sample], y[sample], weights[sample])
        warm = _newton(sub, beta, lo, hi, max_iter, rtol=1e-6)
        if warm.status == "converged":
            beta = warm.beta
        del sub
    result = _newton(problem, beta, lo, hi, max_iter, rtol)
    result.beta *= 2.0**exponent * prescale
    return result
