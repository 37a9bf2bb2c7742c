"""Exact temperature scaling: a bracketed Newton method on beta = 1 / T.

L(beta) = mean_w( logsumexp(beta z_i) - beta z_{i,y_i} ) is convex with
  L'(beta)  = mean_w( E_q[z_i] - z_{i,y_i} ),
  L''(beta) = mean_w( Var_q[z_i] ),      q_i = softmax(beta z_i).
Every Newton iteration is one pass over the logits, row block by row block, so
that the temporaries stay small and in cache. Inside a block the logits are
shifted by the row maximum, d = z - max z <= 0: exp(beta d) never overflows and
the variance E[d^2] - E[d]^2 loses little to cancellation. Row sums are taken
in the logits' dtype and every mean over rows in float64.
"""

import math
from dataclasses import dataclass

import torch

# Calibrated logits z / T keep a spread within [1e-4, 1e4]: beta is bounded
# relative to the logits' own scale.
BETA_RANGE = (1e-4, 1e4)
WARM_START_ROWS = 2048
# A Newton step below this relative size that no longer shrinks quadratically
# has hit the rounding noise of float32 row sums.
_NOISE_FLOOR = 1e-6
_MAX_LOG_STEP = 3.0
_CPU_BLOCK_ELEMENTS = 2**19
_CUDA_BLOCK_ELEMENTS = 2**27
# Logit scales (mean gap between a row's maximum and mean) solved as given;
# others are first brought to about 1 by an exact power-of-two scaling.
_SAFE_SCALE = (2.0**-64, 2.0**64)
# Below this scale (about 1e-289) the logits are constant for all purposes: the
# temperature that would make them matter, ~scale, has no finite inverse 1/T
# to multiply them by.
_CONSTANT_SCALE = 2.0**-960


@dataclass
class TemperatureFit:
    beta: float
    n_iter: int
    status: str  # "converged", "max_iter", "at_upper_beta", "at_lower_beta", "constant"
    gradient: float


def _spaced_rows(n_rows, device):
    """Up to WARM_START_ROWS evenly spaced row indices (all rows when fewer)."""
    if n_rows <= WARM_START_ROWS:
        return torch.arange(n_rows, device=device)
    rows = torch.linspace(0, n_rows - 1, WARM_START_ROWS, device=device)
    return rows.round().long()


class _Problem:
    """Logits, labels and weights, with the per-block pass of one Newton step.

    The shifted logits d = z - max z are formed once (one extra copy of the
    logits, the only N x K allocation of the fit); each Newton pass then reads
    them block by block with block-sized temporaries.
    """

    def __init__(self, logits, y, weights):
        self.weights = weights.to(torch.float64)
        self.total_weight = float(self.weights.sum())
        limit = _CUDA_BLOCK_ELEMENTS if logits.is_cuda else _CPU_BLOCK_ELEMENTS
        self.block_rows = max(1, limit // logits.shape[1])
        row_max = logits.amax(dim=1, keepdim=True)
        self.shifted = logits - row_max
        true_shifted = self.shifted.gather(1, y.view(-1, 1)).squeeze(1)
        # sum_i w_i d_{i,y_i}, constant in beta
        self.weighted_true = float(
            (true_shifted.to(torch.float64) * self.weights).sum()
        )
        # Mean gap between each row's maximum and mean: the logits' own scale,
        # which only sets the bounds of beta, so evenly spaced rows suffice.
        rows = _spaced_rows(logits.shape[0], logits.device)
        gap = -self.shifted[rows].mean(dim=1, dtype=torch.float64)
        self.scale = float((gap * self.weights[rows]).sum()) / max(
            float(self.weights[rows].sum()), 1e-300
        )

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
        first = (first - self.weighted_true) / self.total_weight
        second = second / self.total_weight
        return first, second


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
    y : Tensor (n,), int64 class codes
    weights : Tensor (n,)
    max_iter : int, Newton iterations on the full data

    Returns
    -------
    TemperatureFit
    """
    problem = _Problem(logits, y, weights)
    if not problem.scale > _CONSTANT_SCALE:
        return TemperatureFit(1.0, 0, "constant", 0.0)
    if not _SAFE_SCALE[0] <= problem.scale <= _SAFE_SCALE[1]:
        # Logits spread over ~1e-285 (or ~1e280) would make beta * d and d^2
        # underflow or overflow in the derivatives. Scaling them by a power of
        # two is exact, and softmax(beta z) = softmax((beta / c) (c z)).
        factor = 2.0 ** -round(math.log2(problem.scale))
        del problem
        result = fit_inverse_temperature(logits * factor, y, weights, max_iter=max_iter)
        result.beta *= factor
        return result
    lo, hi = BETA_RANGE[0] / problem.scale, BETA_RANGE[1] / problem.scale
    rtol = 1e-13 if logits.dtype == torch.float64 else 1e-10

    beta = 1.0 if lo < 1.0 < hi else (lo * hi) ** 0.5
    n_rows = logits.shape[0]
    if n_rows > 4 * WARM_START_ROWS:
        # A solve on evenly spaced rows lands within a few percent of the
        # optimum, so the full data needs only the last quadratic steps.
        rows = _spaced_rows(n_rows, logits.device)
        sub = _Problem(logits[rows], y[rows], weights[rows])
        if sub.total_weight > 0 and sub.scale > 0:
            warm = _newton(sub, beta, lo, hi, max_iter, rtol=1e-6)
            if warm.status == "converged":
                beta = warm.beta
    return _newton(problem, beta, lo, hi, max_iter, rtol)
