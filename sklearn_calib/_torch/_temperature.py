"""Exact temperature scaling: a bracketed Newton method on beta = 1 / T.

L(beta) = mean_w( logsumexp(beta z_i) - beta z_{i,y_i} ) is convex with
  L'(beta)  = mean_w( E_q[z_i] - z_{i,y_i} ),
  L''(beta) = mean_w( Var_q[z_i] ),      q_i = softmax(beta z_i).
Every iteration is one pass over the logits, row block by row block, so that
the temporaries stay small and in cache. Inside a block the logits are
shifted by the row maximum, d = z - max z <= 0 (computed block by block from
the row maxima: no shifted copy of the data), so that exp(beta d) never
overflows and the variance E[d^2] - E[d]^2 loses little to cancellation. Row
sums are taken in the logits' dtype and every mean over rows in float64.

Passes over the data. The same pass also gives the third derivative
L3(beta) = mean_w(third central moment of d under q), so that the steps near
the optimum are Halley steps (cubic convergence) instead of Newton steps. A
warm start on evenly spaced rows (256, then 2,048) lands within a few percent
of the optimum; one pass over the data then lands within ~1e-5 and the second
within rounding. The row maxima and minima (for the shift and the overflow
check) are one read of the data, without exp. Typical data: 2 passes with
exp, plus that read and the warm start (~0.2 pass at 20,000 rows, less on
more rows).

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
# The first stage of the warm start: a solve on this many of those rows.
_FIRST_WARM_ROWS = 256
# A Newton step below this relative size that no longer shrinks quadratically
# has hit the rounding noise of float32 row sums.
_NOISE_FLOOR = 1e-6


def noise_floor(dtype):
    """Relative step below which a stalled Newton iteration is at rounding noise.

    About eight units in the last place of the logits' dtype: 1e-6 for float32
    row sums, 2e-15 for float64, whose solves must reach their 1e-13 tolerance.
    """
    return 8.0 * torch.finfo(dtype).eps


_MAX_LOG_STEP = 3.0
# Two float32 blocks of 2^17 entries (512 KiB each) stay in a core's L2 cache:
# the in-place operations of a pass then run at cache speed (2^19: 30 % slower).
_CPU_BLOCK_ELEMENTS = 2**17
_CUDA_BLOCK_ELEMENTS = 2**27
# Runner-up gaps in this range are solved as given; others are first brought
# to about 1 by an exact power-of-two scaling of the shifted logits, so that
# beta stays well inside the range where the derivatives are representable.
COMFORT_SCALE = (2.0**-16, 2.0**16)
# Below this scale (about 1e-289) the logits are constant for all purposes: the
# temperature that would make them matter, ~scale, has no finite inverse 1/T
# to multiply them by.
CONSTANT_SCALE = 2.0**-960
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


def spaced_rows(n_rows, device, count=None):
    """Up to ``count`` (WARM_START_ROWS) evenly spaced row indices (all when fewer).

    Row i of the sample is round(i (n_rows - 1) / (count - 1)), computed in
    integers: a float32 ``linspace`` rounds indices above 2^24 to the nearest
    representable float, which can lie past the last row.
    """
    count = WARM_START_ROWS if count is None else count
    if n_rows <= count:
        return torch.arange(n_rows, device=device)
    steps = torch.arange(count, device=device, dtype=torch.int64)
    span = count - 1
    return (steps * (n_rows - 1) + span // 2) // span


def _max_exponent(dtype):
    """e such that 2^e is just above the dtype's largest value (128, 1024)."""
    return math.frexp(torch.finfo(dtype).max)[1]


def beta_limits(dtype):
    """Range of beta (on logits of unit scale) where the derivatives are finite.

    A row's terms exp(beta d) d^2 peak at 4 / (e beta)^2: beta above
    2^-(maxexp / 2 - 20) keeps their sum over up to 2^30 classes below the
    dtype's largest value (2^-44 for float32, 2^-492 for float64); the upper
    limit keeps beta itself representable with the same margin.
    """
    bits = _max_exponent(dtype) // 2 - 20
    return 2.0**-bits, 2.0**bits


def scale_by_power_of_two(tensor, exponent):
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


def shift_params(logits):
    """Row maxima, the power of two ``c`` of the shift ``c (z - max z)``, any mask.

    ``c = 1`` unless some row's gap between its largest and smallest finite
    logit comes within 2^-HEADROOM of the dtype's largest value (float32
    logits of magnitude ~1e27, float64 ~1e296); then ``c`` is the power of two
    that brings it there. Two reductions over the logits (no exp, no copy).
    """
    finfo = torch.finfo(logits.dtype)
    high = torch.amax(logits, dim=1)
    # Two plain reductions: a per-row aminmax costs several times as much.
    # The global minimum bounds every row's gap from below; the per-row
    # minima are read only where that bound is too loose to decide.
    global_low = torch.min(logits)
    masked = bool(torch.isneginf(global_low))
    half_limit = 0.5 * finfo.max * 2.0**-_HEADROOM_BITS
    if not masked:
        bound = 0.5 * float(high.max().to(torch.float64)) - 0.5 * float(global_low)
        if bound <= half_limit:
            return high, 1.0, masked
        low = torch.amin(logits, dim=1)
    else:
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
    if half_gap <= half_limit:
        return high, 1.0, masked
    return high, 2.0 ** -math.ceil(math.log2(half_gap / half_limit)), masked


def shift_logits(logits):
    """Shifted logits ``c (z - max z)`` (a copy), the power of two ``c``, any mask.

    ``-inf`` entries stay ``-inf``. (The in-memory solver makes no such copy:
    it shifts block by block, see ``ShiftedLogits``.)
    """
    high, factor, masked = shift_params(logits)
    return ShiftedLogits(logits, high, factor).rows(slice(None)), factor, masked


class ShiftedLogits:
    """``2**exponent * factor * (z - max z)`` of any rows, computed on demand.

    The in-memory solver reads the shifted logits block by block from the
    logits themselves, so that no shifted copy of the data is ever made: the
    same operations, in the same order, as on a materialised copy (so the same
    numbers). ``clamp``: entries at ``-inf`` (masked, or pushed past the
    dtype's range by the power of two) become its lowest finite value, so that
    exp(beta d) is exactly 0 at every beta of the bracket and d exp(beta d) is
    0 instead of NaN. Without ``row_max``, ``logits`` are already shifted.
    """

    def __init__(self, logits, row_max=None, factor=1.0, exponent=0, clamp=False):
        self.logits = logits
        self.row_max = row_max
        self.factor = factor
        self.exponent = exponent
        self.clamp = clamp
        self.shape = logits.shape
        self.dtype = logits.dtype
        self.device = logits.device
        self.is_cuda = logits.is_cuda

    def _apply(self, z, m, out=None):
        if m is None:
            if not (self.exponent or self.clamp):
                return z
            d = z.clone() if out is None else out.copy_(z)
        elif self.factor == 1.0:
            d = torch.sub(z, m, out=out)
        else:
            d = torch.add(m * -self.factor, z, alpha=self.factor, out=out)
        if self.exponent:
            scale_by_power_of_two(d, self.exponent)
        if self.clamp:
            d.clamp_(min=torch.finfo(d.dtype).min)
        return d

    def rows(self, index, out=None):
        """The shifted rows ``index`` (a slice or an index tensor)."""
        m = None if self.row_max is None else self.row_max[index].unsqueeze(-1)
        return self._apply(self.logits[index], m, out)

    def entries(self, y):
        """The shifted entry ``(i, y_i)`` of every row, shape (n,)."""
        z = self.logits.gather(1, y.view(-1, 1)).squeeze(1)
        return self._apply(z, self.row_max)

    def subset(self, index):
        """The rows ``index`` as a new source (a small copy of those logits)."""
        m = None if self.row_max is None else self.row_max[index]
        return ShiftedLogits(
            self.logits[index], m, self.factor, self.exponent, self.clamp
        )


def _as_shifted(shifted):
    return shifted if isinstance(shifted, ShiftedLogits) else ShiftedLogits(shifted)


def _weighted_median(values, weights):
    order = torch.argsort(values)
    cumulative = torch.cumsum(weights[order], dim=0)
    index = int(torch.searchsorted(cumulative, 0.5 * cumulative[-1]))
    return float(values[order][min(index, values.shape[0] - 1)])


def logit_scales(shifted, rows, weights, masked=True):
    """The logits' own scales on the given rows, in float64: ``(wide, near)``.

    ``wide`` is the weighted mean, over rows with at least two finite logits,
    of the gap between a row's maximum and the mean of its finite logits (the
    spread that the flattening side of the bracket is relative to); ``near``
    is the weighted median, over rows with a finite logit below their maximum,
    of the gap between the maximum and the next lower finite logit (the
    runner-up, which the sharpening side is relative to). Masked (``-inf``)
    entries count in neither. ``None`` where no row qualifies. ``masked=False``
    says that no entry is ``-inf`` (the same numbers, without the mask).
    """
    shifted = _as_shifted(shifted)
    wide_sum = wide_weight = 0.0
    near_values, near_weights = [], []
    for chunk in rows.split(_block_rows(shifted)):
        d = shifted.rows(chunk)
        w = weights[chunk]
        if masked:
            finite = torch.isfinite(d)
            count = finite.sum(dim=1)
            d_finite = torch.where(finite, d, 0.0)
        else:
            count = torch.full((d.shape[0],), d.shape[1], device=d.device)
            d_finite = d
        spread = -d_finite.sum(dim=1, dtype=torch.float64) / count
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


class TemperatureProblem:
    """Shifted logits, labels and weights, with the per-block pass of one step.

    ``shifted`` gives d = z - max z (at most 0, finite: masked entries at the
    dtype's lowest value): a ``ShiftedLogits`` source (the in-memory solver's,
    which shifts each block as it reads it) or a tensor already shifted. Each
    pass reads it block by block into block-sized buffers. Weights are
    normalised to sum to 1, so that every weighted sum below is a mean,
    bounded by its largest term.
    """

    def __init__(self, shifted, y, weights):
        """``weights`` (float64) is normalised in place: pass a tensor to give away."""
        self.shifted = _as_shifted(shifted)
        self.weights = weights.div_(weights.sum())
        self.block_rows = _block_rows(self.shifted)
        true_shifted = self.shifted.entries(y)
        # mean_w d_{i,y_i}, constant in beta
        self.mean_true = float((true_shifted.to(torch.float64) * self.weights).sum())
        self._buffers = None

    def _block_buffers(self):
        if self._buffers is None:
            rows = min(self.block_rows, self.shifted.shape[0])
            shape = (rows, self.shifted.shape[1])
            source = self.shifted
            self._buffers = tuple(
                torch.empty(shape, dtype=source.dtype, device=source.device)
                for _ in range(2)
            )
        return self._buffers

    def derivatives(self, beta, third=True):
        """First, second and third derivative of the weighted mean NLL at beta.

        One pass: per block, the shift (from the row maxima), x = beta d,
        e = exp(x) and the row sums of e, e x, e x^2, e x^3, each product
        formed in place on e. The third derivative (the mean third central
        moment) is nan when not asked for (``third=False``, two operations of
        eight less); it only turns Newton steps into Halley steps.
        """
        want_third = third
        first = second = third = 0.0
        n_rows = self.shifted.shape[0]
        # Entries clamped at the dtype's lowest value stay finite once scaled.
        lowest = torch.finfo(self.shifted.dtype).min if self.shifted.clamp else None
        x_buffer, e_buffer = self._block_buffers()
        for start in range(0, n_rows, self.block_rows):
            stop = min(start + self.block_rows, n_rows)
            # The moments of x = beta d: every product below is then bounded
            # (|x|^j exp(x) <= (j/e)^j), and in-place operations on one
            # block-sized buffer cost half as much as fresh outputs.
            x = self.shifted.rows(slice(start, stop), out=x_buffer[: stop - start])
            x.mul_(beta)
            if lowest is not None:
                x.clamp_(min=lowest)
            e = torch.exp(x, out=e_buffer[: stop - start])
            s0 = e.sum(dim=1).to(torch.float64)
            s1 = e.mul_(x).sum(dim=1).to(torch.float64)
            s2 = e.mul_(x).sum(dim=1).to(torch.float64)
            mean_x = s1 / s0
            mean_x2 = s2 / s0
            w = self.weights[start:stop]
            first += float((w * mean_x).sum())
            second += float((w * (mean_x2 - mean_x * mean_x)).sum())
            if want_third:
                s3 = e.mul_(x).sum(dim=1).to(torch.float64)
                skew = s3 / s0 - mean_x * (3.0 * mean_x2 - 2.0 * mean_x * mean_x)
                third += float((w * skew).sum())
        # Back from the moments of beta d to those of d, one division at a
        # time: beta**3 can underflow to 0 (beta of 1e-149 on logits scaled
        # by 2^661) where each quotient is still representable (or inf).
        first /= beta
        second = second / beta / beta
        third = third / beta / beta / beta if want_third else float("nan")
        return first - self.mean_true, second, third


def _newton_candidate(beta, g, h, h3=float("nan")):
    """Next iterate: Newton in u = log(beta) where that is locally convex.

    Far from the optimum a Newton step in beta overshoots (L' is strongly
    curved); in u the step is multiplicative and lands close from either
    side. Near the optimum both are quadratically convergent.
    d/du L = beta L'  and  d2/du2 L = beta L' + beta^2 L''.
    Within 10 % of beta, with the third derivative ``h3`` at hand and a mild
    correction, the step is Halley's (cubic convergence):
    delta / (1 + delta h3 / (2 h)), delta = -g / h the Newton step in beta.
    """
    newton = -g / h
    if abs(newton) <= 0.1 * beta and math.isfinite(h3):
        correction = newton * h3 / (2.0 * h)
        if abs(correction) <= 0.5:
            return beta + newton / (1.0 + correction)
    curvature_u = beta * g + beta * beta * h
    if curvature_u > 0:
        step_u = -beta * g / curvature_u
        return beta * math.exp(min(max(step_u, -_MAX_LOG_STEP), _MAX_LOG_STEP))
    candidate = beta + newton
    return min(
        max(candidate, beta * math.exp(-_MAX_LOG_STEP)), beta * math.exp(_MAX_LOG_STEP)
    )


def bracketed_newton(problem, beta, lo, hi, max_iter, rtol, *, floor=_NOISE_FLOOR):
    """Bracketed Newton iteration for L'(beta) = 0 on [lo, hi].

    ``lo``/``hi`` start at the allowed range; their derivative signs are
    checked only when an iterate would leave it, so an interior optimum costs
    no extra pass. ``floor`` is the relative step at which a stalled iteration
    has reached the rounding noise of the sums (:func:`noise_floor`).
    """
    lo_checked = hi_checked = False
    previous_step = float("inf")
    previous_beta = beta
    slow_steps = 0
    g = float("nan")
    for n_iter in range(1, max_iter + 1):
        # The third derivative serves the Halley step near the optimum: on
        # the first pass (after a warm start) and while steps are large.
        far = n_iter == 1 or previous_step > 1e-3 * beta
        g, h, h3 = problem.derivatives(beta, third=far)
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
        candidate = _newton_candidate(beta, g, h, h3)
        # Newton crawls linearly when the optimum is at a bound (for example
        # a separable calibration set: L' ~ -c exp(-beta gap)); two slow steps
        # in a row trigger the check of the bound the gradient points to.
        # Downwards the steps are compared relative to beta: where one row
        # far beyond the others sets L' (a mislabelled row of 1e100: L' ~ its
        # constant logit gap until beta 1e-100), the step in log(beta) stays
        # -1, so the absolute steps shrink by e each and never looked slow.
        slow = abs(candidate - beta) > max(0.5 * previous_step, floor * beta) or (
            candidate < beta
            and math.isfinite(previous_step)
            and beta - candidate > 0.5 * previous_step * candidate / previous_beta
        )
        slow_steps = slow_steps + 1 if slow else 0
        if (candidate >= hi or (slow_steps >= 2 and g < 0)) and not hi_checked:
            g_hi = problem.derivatives(hi)[0]
            if g_hi <= 0:
                return TemperatureFit(hi, n_iter + 1, "at_upper_beta", g_hi)
            hi_checked = True
        if (candidate <= lo or (slow_steps >= 2 and g > 0)) and not lo_checked:
            g_lo = problem.derivatives(lo)[0]
            if g_lo >= 0:
                return TemperatureFit(lo, n_iter + 1, "at_lower_beta", g_lo)
            lo_checked = True
        bisect = not lo < candidate < hi or (
            slow_steps >= 2 and lo_checked and hi_checked
        )
        if bisect:
            candidate = (lo * hi) ** 0.5  # bisect in log space: beta spans decades
        step = abs(candidate - beta)
        previous_beta, beta = beta, candidate
        # Converged: the step is below tolerance, or quadratic convergence
        # (error_{k+1} ~ C step_k^2, C estimated from the last two steps; the
        # Halley steps converge faster still) predicts that the step just
        # taken already lands within tolerance, the step being small or a
        # thousandth of the one before. Or the step stopped shrinking at the
        # rounding floor of the logits' dtype, where another pass has nothing
        # left to gain.
        predicted_error = step * step * step / previous_step**2
        fast = step <= floor * beta or (
            math.isfinite(previous_step) and step <= 1e-3 * previous_step
        )
        if (
            step <= rtol * beta
            or (fast and predicted_error <= rtol * beta)
            or (step <= floor * beta and step > 0.25 * previous_step)
        ):
            return TemperatureFit(beta, n_iter, "converged", g)
        # A bisection's step says nothing of Newton's convergence: the Newton
        # step after it, a thousandth of it, is no sign of convergence (one
        # row of 1e20 labelled with its largest logit set lo near 1e-22, and
        # the first step after a bisection to 1e-11 was taken as converged).
        previous_step = float("inf") if bisect else step
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
    row_max, prescale, masked = shift_params(logits)

    # The scales only set the bracket of beta: evenly spaced rows of positive
    # weight suffice, unless none of them has a runner-up logit.
    n_rows = logits.shape[0]
    # Unclamped: masked entries stay -inf, which the scales leave out.
    source = ShiftedLogits(logits, row_max, prescale)
    if bool((weights > 0).all()):
        positive = None
        sample = spaced_rows(n_rows, weights.device)
    else:
        positive = torch.nonzero(weights > 0).view(-1)
        sample = positive[spaced_rows(positive.shape[0], positive.device)]
    wide, near = logit_scales(source, sample, weights, masked)
    if near is None and sample.shape[0] < n_rows:
        every = torch.arange(n_rows, device=weights.device)
        wide, near = logit_scales(
            source, every if positive is None else positive, weights, masked
        )
    if near is None or not near / prescale > CONSTANT_SCALE:
        return TemperatureFit(1.0, 0, "constant", 0.0)

    exponent = 0
    if not COMFORT_SCALE[0] <= near <= COMFORT_SCALE[1]:
        # Runner-up gaps of ~1e-285 (or ~1e280) would make beta d and d^2
        # underflow or overflow in the derivatives. Scaling them by a power of
        # two is exact, and softmax(beta z) = softmax((beta / c) (c z)).
        exponent = -round(math.log2(near))
        wide *= 2.0**exponent
        near *= 2.0**exponent
    # -inf (masked, or a gap scaled past the dtype's range) becomes the lowest
    # finite value in every block read (see ShiftedLogits).
    source = ShiftedLogits(
        logits, row_max, prescale, exponent=exponent, clamp=masked or exponent > 0
    )
    problem = TemperatureProblem(source, y, weights)

    lowest, highest = beta_limits(logits.dtype)
    lo = max(BETA_RANGE[0] / max(wide, near), lowest)
    hi = min(BETA_RANGE[1] / near, highest)
    rtol = 1e-13 if logits.dtype == torch.float64 else 1e-10

    beta = 1.0 if lo < 1.0 < hi else (lo * hi) ** 0.5
    if n_rows > 4 * WARM_START_ROWS:
        beta = warm_start(source, y, weights, sample, beta, lo, hi, max_iter)
    result = bracketed_newton(
        problem, beta, lo, hi, max_iter, rtol, floor=noise_floor(logits.dtype)
    )
    result.beta *= 2.0**exponent * prescale
    return result


def warm_start(source, y, weights, sample, beta, lo, hi, max_iter):
    """beta solved on the rows ``sample`` (a few percent from the optimum).

    In two stages: a solve on 256 of those rows, then one step on all of
    them (each to the precision their own sampling noise allows). ``source``
    is a ``ShiftedLogits`` of the data (or of the sample rows, with ``sample``
    None).
    """
    rows = sample
    if rows is None:
        rows = torch.arange(source.shape[0], device=source.device)
    # Stage 2 is one (Halley) step from stage 1's solve: that solve is within
    # its sampling noise (a few percent), and the step lands within the
    # noise of the larger sample.
    for count, rtol, steps in ((_FIRST_WARM_ROWS, 1e-3, max_iter), (None, 1e-4, 1)):
        subset = (
            rows
            if count is None
            else rows[spaced_rows(rows.shape[0], rows.device, count)]
        )
        sub = TemperatureProblem(
            source.subset(subset), y[subset], weights[subset].clone()
        )
        if not float(sub.weights.sum()) > 0:
            return beta
        warm = bracketed_newton(sub, beta, lo, hi, steps, rtol=rtol)
        if warm.status not in ("converged", "max_iter") or steps < warm.n_iter:
            return beta
        beta = warm.beta
    return beta
