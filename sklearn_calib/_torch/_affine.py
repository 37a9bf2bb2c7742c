"""Affine calibration maps: the solver of the weighted NLL (+ ODIR penalty).

The objective (model, loss, gradient, Hessian, masked classes, one evaluation
per pass) lives in :mod:`sklearn_calib._torch._affine_objective`; this module
holds the optimiser: the start, Newton, L-BFGS with its preconditioners, the
line search and the stopping rules.

Scale. The solve runs on the features multiplied by an exact power of two c
when their typical spread (the median gap between each row's two largest
unmasked features) or their typical magnitude (the median row maximum) lies
far outside [2**-32, 2**32], or when their largest row maximum exceeds
2**480 (whose square the Hessian must hold): the
map is the same with theta_coef / c, and the off-diagonal penalty becomes
rho c^2 (also a power of two), so the rescaled problem is exactly the stated
one. Logits of 1e155 and beyond would otherwise square to infinity in the
Hessian; logits of 1e-300 would leave every gradient below any tolerance.
The calibrators' tol applies to that rescaled problem.

Start. theta = (beta * identity, 0), beta the exact temperature-scaling
solution of the same (masked) problem: a bracketed Newton iteration in
log(beta) along that ray, warm-started on evenly spaced rows.

Classes without a finite optimum (vector map). The NLL has no minimiser in
(w_k, b_k) when class k has no calibration sample (its probability should go
to 0) or when its own logit separates its samples from all others (a
threshold on z_k; its scale should go to infinity). With few samples per class
(large vocabularies) most classes are of this kind, and an unbounded solve
crawls for ever towards infinity. Those classes are found exactly, in one
pass, and kept at the start (w_k = beta, b_k = 0); the solve runs over the
other classes. Frozen classes whose probability is exactly 0 on every row
(masked, or a sentinel far below the row maximum) are dropped from the passes
altogether: they cannot change any other class's probability.

Solvers, both ending on the largest absolute gradient entry <= tol:

  Newton     when the exact Hessian is cheap (at most _NEWTON_PARAMS free
             parameters: binary problems, vector scaling up to 64 classes,
             matrix scaling up to 10). Quadratic convergence in a handful of
             passes, in float64. The directions softmax cannot see are removed
             exactly (not by a ridge), and the solve also continues while the
             Newton decrement -g.d predicts a decrease of the loss above
             max(tol / 100, its rounding error): in a long flat valley the
             gradient can be tiny while the optimum is still far.
  L-BFGS     otherwise, with a strong-Wolfe line search, preconditioned by the
             Hessian block of each class: 2 x 2 for the vector map, exact and
             recomputed at every point (three more column sums in the same
             pass); (K+1) x (K+1) for the matrix map at the start, on a
             subsample of rows (their diagonals beyond _BLOCK_CLASSES classes).
             The first step is then close to a Newton step and step 1 is
             usually accepted. Every pass costs O(N K) (vector) or O(N K^2)
             (matrix), and nothing else grows faster than the parameters.

Unregularised, softmax(W z + b) is unchanged by adding a constant to every entry
of b, or the same row vector to every row of W. The exact gradient is orthogonal
to those directions and every step is projected off them, so iterates started
at (I / T, 0) keep the component they start with: the fitted map is the optimum
nearest to that start (the biases of vector scaling sum to zero when no class
is frozen).

Chunks. ``fit_affine_chunks`` runs this solver (start, frozen classes, Newton,
L-BFGS, stopping rules) on the vector map's objective summed over chunks
(:mod:`sklearn_calib._torch._affine_chunks`): vector and Platt scaling over
chunks are the in-memory problem, one pass over the data per evaluation, in
float64 and without the power-of-two rescaling (chunk features are taken as
they come).

Every loop is bounded (iterations, line-search trials, ridge increases); a
non-finite loss or gradient at the start raises FloatingPointError, which the
estimators turn into a ValueError naming the input.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._affine_objective import (
    CPU_BLOCK_ELEMENTS,
    AffineObjective,
    Penalty,
    spaced_rows,
    times_power_of_two,
)
from ._device import to_tensor

# Newton when the free parameters are few (vector scaling up to 64 classes,
# matrix scaling up to 10) and one Hessian costs at most _NEWTON_WORK
# multiply-adds (rows times parameters squared). Beyond that, preconditioned
# L-BFGS is faster on the bundled real logits, while Newton stays far more
# robust on small unregularised matrix problems (hundreds of L-BFGS iterations
# there).
_NEWTON_WORK = 2**29
_NEWTON_PARAMS = 128
# Curvatures below this fraction of the largest one are floored: a class with
# no calibration samples and vanishing probability has (almost) no curvature.
_CURVATURE_FLOOR = 1e-9
# Largest change of a class's calibrated logits that the vector map's
# preconditioner proposes in one step.
_MAX_CLASS_STEP = 4.0
# Newton's ridge, on the Hessian scaled to a unit diagonal, starts at _RIDGE
# (the exact null directions are handled without it) and grows by 100 at most
# _RIDGE_TRIES times; past that the step is a plain gradient step.
_RIDGE = 1e-12
_RIDGE_TRIES = 8
# Newton also continues while the decrement predicts a decrease of the loss
# above _DECREASE * tol: in a long flat valley (unregularised matrix scaling
# on CIFAR-10 ResNet-56) the gradient falls below tol while the loss is still
# 7e-4 above its optimum, and Newton then converges only linearly.
_DECREASE = 1e-2
_HISTORY = 10
_BLOCK_CLASSES = 256
# Strong-Wolfe constants (sufficient decrease, curvature).
_C1 = 1e-4
_C2 = 0.9
_MAX_LINE_SEARCH = 30
# Stall detection: stalled when, for _PATIENCE iterations, the gradient norm has
# not fallen below _PROGRESS times its best value and the loss has not fallen by
# more than its rounding error.
_PROGRESS = 0.5
_PATIENCE = 10
# The matrix map's block preconditioner is built at the start, but where the
# optimum lies far out (a class whose own samples have log-probabilities near
# 0: its W_kk grows to 30-2,000, its curvature falls by orders of magnitude)
# it goes stale and L-BFGS crawls (Dirichlet and matrix scaling on 200
# CIFAR-100 rows stopped at max_iter 1000). When the gradient has not halved
# for _REFRESH_PATIENCE iterations the blocks are rebuilt at the current
# point, at most _REFRESH_LIMIT times until it halves (a rebuild costs about
# K passes over the rows). The optimum is the same; only the path to it
# changes. An earlier rule undid a rebuild after which the gradient did not
# halve within as many iterations, and stopped after 3 such: three of four
# random 200-row draws of CIFAR-100 ResNet-56 then took 1,005-1,390
# iterations, against 113-194 with every rebuild kept.
_REFRESH_PATIENCE = 7
_REFRESH_LIMIT = 3
# float32 passes give gradients good to about 1e-8 to 1e-7, and L-BFGS can
# slow down well before that floor: below _FLOAT64_SWITCH * tol, once the
# gradient norm has not halved for _SWITCH_PATIENCE iterations, the last decade
# is finished on float64 blocks (12 fewer iterations on matrix scaling 10k x
# 100; where float32 keeps converging fast, its cheaper passes are kept).
_FLOAT64_SWITCH = 10.0
_SWITCH_PATIENCE = 3
# Features whose typical spread lies outside this range (or whose typical row
# maximum exceeds _MAX_OFFSET times the spread) are rescaled by a power of two
# first. A few rows far beyond the rest (one row of logits near 1e100) do not
# set the scale: the rest would shrink towards 0 and their gradients below any
# tol. They only bound it: no feature beyond 2**_MAX_FEATURE_LOG2, whose
# squares (the Hessian's) stay finite. float32 features beyond
# 2**_MAX_FLOAT32_LOG2 are solved in float64, where their squares fit.
_SAFE_SCALE_LOG2 = 32
_MAX_OFFSET_LOG2 = 40
_MAX_FEATURE_LOG2 = 480
_MAX_FLOAT32_LOG2 = 60
# The start: beta within [1e-4, 1e4] / spread, at most _START_ITER Newton
# iterations, warm-started on _WARM_START_ROWS evenly spaced rows.
_BETA_RANGE = (1e-4, 1e4)
_START_ITER = 60
_WARM_START_ROWS = 2048
_MAX_LOG_STEP = 3.0


@dataclass
class AffineFit:
    coef: np.ndarray  # (K,) for vector, (K, K) for matrix
    intercept: np.ndarray  # (K,)
    loss: float  # final objective (mean weighted NLL + penalty)
    gradient: float  # largest absolute gradient entry at the solution
    n_iter: int  # solver iterations (the start's, when solver is "none")
    n_evals: int  # passes over the data (loss-and-gradient evaluations)
    solver: str  # "newton", "lbfgs" or "none" (every class kept at the start)
    status: str  # "converged", "max_iter" or "stalled"
    start: float  # inverse temperature of the start, in the input's units
    scale: float  # the power of two the features were multiplied by
    decrement: float = 0.0  # Newton decrement -g.d at the last Newton point
    n_absent: int = 0  # classes without calibration samples, kept at the start
    n_separable: int = 0  # classes their own logit separates, kept at the start
    # With keep_blocks: the matrix map's class blocks at the solution, in the
    # input's units (see fit_affine), for fits of related problems.
    blocks: np.ndarray | None = None


def _top_two(x):
    """The largest and second-largest entry of each row (equal on a tie).

    What ``x.topk(2, dim=1).values`` gives, in three reductions: 1.2 ms
    against topk's 3.7 ms on 4,000 x 100 float32 on one CPU thread, paid
    by every affine fit.
    """
    first = x.amax(dim=1, keepdim=True)
    at_top = x == first
    second = x.masked_fill(at_top, float("-inf")).amax(dim=1)
    tied = at_top.sum(dim=1) >= 2
    first = first.squeeze(1)
    return first, torch.where(tied, first, second)


def _spread_log2(features, mask):
    """log2 of the features' typical spread, typical and largest row maximum.

    The spread is the median, over rows with two unmasked entries, of the gap
    between the two largest: a mask sentinel (-1e9, finfo.min) is never one
    of them unless its row has a single real class, so it does not inflate
    the scale. The typical row maximum is the median of their magnitudes.
    Each value is None when undefined (constant features, all zero).
    """
    n_rows, n_classes = features.shape
    if n_classes < 2:
        return None, None, None
    step = max(1, CPU_BLOCK_ELEMENTS // n_classes)
    gaps, tops = [], []
    for start in range(0, n_rows, step):
        x = features[start : start + step]
        if mask is not None:
            x = x.masked_fill(mask[start : start + step], float("-inf"))
        first, second = (v.to(torch.float64) for v in _top_two(x))
        # Halves: the difference of two halved float64 numbers cannot overflow.
        gaps.append(first * 0.5 - second * 0.5)
        tops.append(first.abs())
    gap = torch.cat(gaps)
    gap = gap[torch.isfinite(gap) & (gap > 0)]
    spread = None
    if gap.numel():
        spread = math.log2(float(gap.median())) + 1.0
    tops = torch.cat(tops)
    tops = tops[torch.isfinite(tops)]

    def log2(value):
        return math.log2(value) if value > 0 else None

    if not tops.numel():
        return spread, None, None
    return spread, log2(float(tops.median())), log2(float(tops.max()))


def _rescale_exponent(spread, typical, top):
    """Exponent e such that features * 2**e have a spread near 1 (0: leave).

    ``spread``, ``typical`` and ``top`` are the log2 values of
    :func:`_spread_log2`.
    """
    candidates = [
        spread,
        None if typical is None else typical - _MAX_OFFSET_LOG2,
        None if top is None else top - _MAX_FEATURE_LOG2,
    ]
    candidates = [v for v in candidates if v is not None]
    if not candidates:
        return 0
    level = max(candidates)
    if spread is not None and -_SAFE_SCALE_LOG2 <= level <= _SAFE_SCALE_LOG2:
        return 0
    if spread is None and level <= _SAFE_SCALE_LOG2:
        return 0
    return -round(level)


class _DiagonalPreconditioner:
    """Inverse of the Hessian diagonal (matrix map with many classes)."""

    def __init__(self, diagonal, rho):
        diagonal = diagonal + rho
        floor = _CURVATURE_FLOOR * float(diagonal.max().clamp(min=1e-300))
        self.inverse = 1.0 / diagonal.clamp(min=floor)

    def __call__(self, g):
        return g * self.inverse


class _VectorPreconditioner:
    """Inverse of the 2 x 2 Hessian blocks (w_k, b_k) of the vector map.

    Given the gradient, each block is also scaled down where its Newton step
    would move that class's calibrated logits by more than _MAX_CLASS_STEP
    (a trust region per class; the blocks stay positive definite). Far from
    the optimum a class with one sample has a tiny curvature and a large
    gradient: its Newton step alone would make the shared line search cut
    every class's step a hundredfold.
    """

    def __init__(self, curv, grad=None, rho=None):
        h_ww, h_wb, h_bb = curv[:, 0], curv[:, 1], curv[:, 2]
        if rho is not None:
            h_ww, h_bb = h_ww + rho[:, 0], h_bb + rho[:, 1]
        floor = _CURVATURE_FLOOR * float(torch.clamp(h_bb.max(), min=1e-300))
        h_bb = h_bb.clamp(min=floor)
        h_ww = h_ww.clamp(min=floor)
        # Keep each block safely positive definite.
        det = torch.maximum(h_ww * h_bb - h_wb * h_wb, 1e-3 * h_ww * h_bb)
        self.a = h_bb / det
        self.b = -h_wb / det
        self.c = h_ww / det
        if grad is not None:
            step_w = self.a * grad[:, 0] + self.b * grad[:, 1]
            step_b = self.b * grad[:, 0] + self.c * grad[:, 1]
            # sqrt(h_ww / h_bb): the probability-weighted RMS of the logits.
            change = step_w.abs() * (h_ww / h_bb).sqrt() + step_b.abs()
            shrink = (_MAX_CLASS_STEP / change.clamp(min=1e-300)).clamp(max=1.0)
            self.a, self.b, self.c = self.a * shrink, self.b * shrink, self.c * shrink

    def __call__(self, g):
        """P g for g of shape (K, 2) or (m, K, 2)."""
        out = torch.empty_like(g)
        out[..., 0] = self.a * g[..., 0] + self.b * g[..., 1]
        out[..., 1] = self.b * g[..., 0] + self.c * g[..., 1]
        return out


class _BlockPreconditioner:
    """Inverse of the (K+1) x (K+1) Hessian block of each class (matrix map)."""

    def __init__(self, blocks, rho):
        p = blocks.shape[1]
        blocks = blocks + torch.diag_embed(rho)
        scale = float(blocks.diagonal(dim1=1, dim2=2).max().clamp(min=1e-300))
        eye = torch.eye(p, dtype=blocks.dtype, device=blocks.device)
        factor = torch.linalg.cholesky(blocks + _CURVATURE_FLOOR * scale * eye)
        # Applying the explicit inverse is one batched matrix product, far
        # cheaper than triangular solves, applied to all the vectors at once.
        # It stays in float64: unregularised blocks can have condition numbers
        # near 1 / _CURVATURE_FLOOR, and a float32 inverse of those is no
        # longer positive definite (P g would not be a descent direction).
        self.inverse = torch.cholesky_inverse(factor)

    def __call__(self, g):
        """P g for g of shape (K, P) or (m, K, P)."""
        # Rows times the symmetric inverse (g^T P rather than P g): the batched
        # product then streams P row-major, several times faster.
        rows = g.reshape(-1, *g.shape[-2:]).transpose(0, 1).contiguous()
        out = torch.bmm(rows, self.inverse).transpose(0, 1)
        return out.reshape(g.shape)


def _newton_direction(objective, theta, grad):
    """-H^{-1} g over the free parameters, or None where H is unusable.

    H is first scaled to a unit diagonal (the Newton direction does not
    change): penalties and curvatures can differ by hundreds of orders of
    magnitude (an ODIR penalty on rescaled tiny logits), and a ridge relative
    to the largest entry would swamp the others. The directions softmax cannot
    see, and those held with frozen classes, are handled exactly: H is
    solved on their complement, with the identity on them. What remains
    near-singular gets a small relative ridge, raised at most _RIDGE_TRIES
    times.
    """
    hessian = objective.hessian(theta)
    if not bool(torch.isfinite(hessian).all()):
        return None
    free = objective.free
    g = (grad if free is None else grad[free]).reshape(-1, 1)
    diagonal = hessian.diagonal()
    root = torch.where(diagonal > 0, diagonal.sqrt(), torch.ones_like(diagonal))
    hessian = hessian / root[:, None] / root[None, :]
    eye = torch.eye(hessian.shape[0], dtype=hessian.dtype, device=hessian.device)
    scaled_g = g / root[:, None]
    basis = objective.null_basis()
    if basis is not None:
        # The step keeps B^T s = 0 (the directions that project() removes):
        # the scaled step root * s is orthogonal to B / root. H is
        # solved on that complement, with the identity on the basis: the
        # constrained Newton step, exact for held directions (the loss sees
        # them: a frozen class's odds), and for null ones (H v = 0) the step
        # of H + v v^T once projected.
        basis, _ = torch.linalg.qr(basis / root[:, None])
        complement = eye - basis @ basis.T
        hessian = complement @ hessian @ complement + basis @ basis.T
        scaled_g = complement @ scaled_g
    ridge = _RIDGE
    for _ in range(_RIDGE_TRIES):
        factor, info = torch.linalg.cholesky_ex(hessian + ridge * eye)
        if int(info) == 0:
            step = torch.cholesky_solve(scaled_g, factor) / root[:, None]
            if bool(torch.isfinite(step).all()):
                break
        ridge *= 100.0
    else:
        return None
    direction = torch.zeros_like(grad)
    if free is None:
        direction[:] = -step.reshape(grad.shape)
    else:
        direction[free] = -step.reshape(-1, grad.shape[1])
    return objective.project(direction)


def _ray_newton(objective, beta, lo, hi, rows, rtol):
    """Bracketed Newton iteration in log(beta) for L'(beta) = 0 on [lo, hi].

    Returns (beta, status, iterations) with status "converged", "at_bound"
    (the loss keeps falling towards lo or hi: a separable or uninformative
    calibration set) or "flat" (no curvature: constant features, or every row
    certain).
    """
    lo_checked = hi_checked = False
    previous = float("inf")
    for iteration in range(1, _START_ITER + 1):
        g, h = objective.ray_derivatives(beta, rows)
        if not (math.isfinite(g) and math.isfinite(h)):
            raise FloatingPointError("non-finite derivative along the start ray")
        if g > 0:
            hi, hi_checked = beta, True
        else:
            lo, lo_checked = beta, True
        if g == 0.0:
            return beta, "converged", iteration
        if h <= 0.0:
            return beta, "flat", iteration
        curvature_u = beta * g + beta * beta * h
        if curvature_u > 0:
            step_u = -beta * g / curvature_u
        else:
            step_u = -math.copysign(_MAX_LOG_STEP, g)
        candidate = beta * math.exp(min(max(step_u, -_MAX_LOG_STEP), _MAX_LOG_STEP))
        # An optimum at a bound: Newton would crawl towards it; one look at
        # the bound's derivative settles it.
        if candidate >= hi and not hi_checked:
            g_hi, _ = objective.ray_derivatives(hi, rows)
            if g_hi <= 0:
                return hi, "at_bound", iteration
            hi_checked = True
        if candidate <= lo and not lo_checked:
            g_lo, _ = objective.ray_derivatives(lo, rows)
            if g_lo >= 0:
                return lo, "at_bound", iteration
            lo_checked = True
        if not lo < candidate < hi:
            candidate = math.sqrt(lo * hi)  # bisect in log space
        change = abs(math.log(candidate / beta))
        beta = candidate
        # Converged: the step is below tolerance, or quadratic convergence
        # (next step ~ step^2 / previous) predicts that it lands within it,
        # or the step stopped shrinking at the rounding floor.
        if (
            change <= rtol
            or (previous < 1e-2 and change**3 <= rtol * previous**2)
            or (change <= 1e-6 and change > 0.5 * previous)
        ):
            return beta, "converged", iteration
        previous = change
    return beta, "converged", _START_ITER


def _ray_start(objective, log2_spread, beta=None):
    """beta of the exact temperature solution of the (masked) problem.

    The search starts at ``beta`` where given (inside the bracket), else at
    the inverse of the features' typical spread. Returns (beta, iterations on
    the full data).
    """
    spread = 2.0 ** (log2_spread if log2_spread is not None else 0.0)
    lo, hi = _BETA_RANGE[0] / spread, _BETA_RANGE[1] / spread
    if beta is None or not lo < beta < hi:
        beta = 1.0 / spread
    n_rows = objective.features.shape[0]
    if n_rows > 4 * _WARM_START_ROWS:
        rows = spaced_rows(n_rows, _WARM_START_ROWS, objective.features.device)
        if float(objective.weights64[rows].sum()) > 0:
            beta, _, _ = _ray_newton(objective, beta, lo, hi, rows, rtol=1e-6)
    rtol = 1e-12 if objective.features.dtype == torch.float64 else 1e-9
    beta, _, iterations = _ray_newton(objective, beta, lo, hi, None, rtol=rtol)
    return beta, iterations


def _line_search(objective, theta, loss, grad, direction, loss_noise):
    """Step along ``direction`` satisfying the strong Wolfe conditions.

    Nocedal and Wright's bracketing and zoom (Algorithms 3.5 and 3.6), adapted
    to rounding: near the optimum the loss changes by less than its own rounding
    error (float32 logits), while the directional derivative phi' stays
    accurate. The objective is convex, so phi'(step) <= 0 already proves that
    the loss decreased on [0, step]; a step is therefore also accepted under
    Hager and Zhang's approximate Wolfe conditions,
    c2 phi'(0) <= phi'(step) <= (1 - 2 c1) |phi'(0)| with a loss within
    ``loss_noise`` of the start, and the bracket is narrowed on the sign of phi'
    (its root is the minimiser), stepping to the secant root of phi'.

    Returns (theta, loss, grad) at the accepted step, or None when none was found.
    """
    slope0 = float(torch.sum(grad * direction))
    lo_step, lo_slope = 0.0, slope0
    hi_step = hi_slope = None
    previous_width = math.inf
    step = 1.0
    for _ in range(_MAX_LINE_SEARCH):
        trial = objective.snap(theta + step * direction)
        if torch.equal(trial, theta):
            break
        new_loss, new_grad, _ = objective.evaluate(trial)
        slope = float(torch.sum(new_grad * direction))
        finite = math.isfinite(new_loss) and math.isfinite(slope)
        decrease = finite and new_loss <= loss + _C1 * step * slope0
        if finite:
            wolfe = decrease and abs(slope) <= -_C2 * slope0
            approximate = (
                new_loss <= loss + loss_noise
                and _C2 * slope0 <= slope <= -(1 - 2 * _C1) * slope0
            )
            if wolfe or approximate:
                return trial, new_loss, new_grad
        if finite and slope < 0 and (decrease or new_loss <= loss + loss_noise):
            lo_step, lo_slope = step, slope
        else:
            hi_step, hi_slope = step, (slope if finite else None)
        if hi_step is None:
            step *= 4.0
            continue
        width = hi_step - lo_step
        if width <= 1e-12 * hi_step:
            break
        step = lo_step + 0.5 * width
        # The secant step, unless the last one did not halve the bracket: a
        # secant clamped at an end shrinks it by a tenth only, and a
        # minimiser 1e-7 of the first step away (a mislabelled row of logits
        # near 1e6) then took some 150 trials instead of 25.
        if hi_slope is not None and hi_slope > lo_slope and width <= 0.5 * (
            previous_width
        ):
            secant = lo_step - lo_slope * width / (hi_slope - lo_slope)
            step = min(max(secant, lo_step + 0.1 * width), hi_step - 0.1 * width)
        previous_width = width
    return None


def _lbfgs_direction(grad, history, precondition):
    """Two-loop recursion with the initial inverse Hessian gamma * P.

    gamma = s'y / y'P y on the newest pair rescales P to the curvature seen
    along the last step; it matters where the curvature drifts far from the
    starting point's (an unregularised fit whose optimum lies at infinity).
    """
    q = grad.clone()
    alphas = []
    for s, y, rho in reversed(history):
        alpha = rho * float(torch.sum(s * q))
        q -= alpha * y
        alphas.append(alpha)
    if not history:
        return -precondition(q)
    s, y, _ = history[-1]
    r, p_y = precondition(torch.stack([q, y]))
    r *= float(torch.sum(s * y)) / float(torch.sum(y * p_y))
    for (s, y, rho), alpha in zip(history, reversed(alphas), strict=True):
        beta = rho * float(torch.sum(y * r))
        r += (alpha - beta) * s
    return -r


def _uses_blocks(objective):
    """Whether L-BFGS on the matrix map is preconditioned by class blocks."""
    coupled = not bool((objective.rho > 0).all())
    return (
        objective.kind == "matrix" and coupled and objective.n_classes <= _BLOCK_CLASSES
    )


def _unit_scale(factor, n_rows, device):
    """The diagonal (factor, ..., factor, 1): features ``(x, 1)`` rescaled."""
    scale = torch.full((n_rows,), float(factor), dtype=torch.float64, device=device)
    scale[-1] = 1.0
    return scale


def _preconditioner(objective, theta, curv, grad, blocks=None):
    """The L-BFGS preconditioner at the start, finite whatever the data.

    ``blocks``: the class blocks of a related fit's solution (a warm start),
    used instead of the blocks at theta where the blocks would be.
    """
    if objective.kind == "vector":
        if bool(torch.isfinite(curv).all()):
            return _VectorPreconditioner(curv, grad, objective.rho)
    else:
        # The class blocks pay where some entries have no ridge (matrix
        # scaling; ODIR's unpenalised diagonal, whose scales run far out).
        # Where every entry has one (the structured matrix map), the diagonal
        # preconditioner takes more iterations but less time (the blocks cost
        # rows * K^3): 0.9 s against 1.25 s over 18 fits on 9 public sets, 4
        # times faster at 300 x 100 (benchmarks/bench_structured_preconditioner.py).
        if _uses_blocks(objective):
            if blocks is None:
                blocks = objective.class_blocks(theta)
            if bool(torch.isfinite(blocks).all()):
                try:
                    return _BlockPreconditioner(blocks, objective.rho)
                except torch.linalg.LinAlgError:
                    pass
        diagonal = objective.class_diagonals(theta)
        if bool(torch.isfinite(diagonal).all()):
            return _DiagonalPreconditioner(diagonal, objective.rho)
    return lambda g: g


def _use_newton(objective):
    n_free = objective.n_classes if objective.free is None else len(objective.free)
    n_params = n_free * objective.shape[1]
    n_rows = objective.features.shape[0]
    return n_params <= _NEWTON_PARAMS and n_rows * n_params**2 <= _NEWTON_WORK


def _select_columns(features, mask, y, weights, keep):
    """The problem restricted to the columns ``keep`` (bool, (K,)).

    Rows labelled with a dropped class carry no weight (the caller checks),
    and are relabelled 0.
    """
    index = torch.nonzero(keep).squeeze(1)
    position = torch.cumsum(keep.to(torch.int64), 0) - 1
    y_new = torch.where(keep[y], position[y], torch.zeros_like(y))
    weights = torch.where(keep[y], weights, torch.zeros_like(weights))
    features = features[:, index]
    mask = None if mask is None else mask[:, index]
    if mask is not None and not bool(mask.any()):
        mask = None
    return features, mask, y_new, weights, index


def fit_affine(
    features,
    y,
    weights,
    *,
    kind,
    mask=None,
    reg_lambda=0.0,
    reg_mu=0.0,
    penalty=None,
    max_iter=1000,
    tol=1e-7,
    solver="auto",
    warm_start=None,
    ray_start=None,
    keep_blocks=False,
):
    """Minimise the weighted NLL (+ ODIR penalty) of softmax(affine(features)).

    Parameters
    ----------
    features : Tensor (n, k), float32 or float64, finite
        Logits (vector and matrix scaling) or log-probabilities (Dirichlet),
        with a finite stand-in where ``mask`` is set.
    y : Tensor (n,), int64 class codes
    weights : Tensor (n,), non-negative with a positive sum (any scale)
    kind : {"vector", "matrix"}
    mask : Tensor (n, k) of bool, or None
        Masked entries: their calibrated logit is -inf. A row's true class
        must not be masked where its weight is positive.
    reg_lambda, reg_mu : float
        ODIR penalty strengths (matrix only), for the ``k`` columns given.
    penalty : Penalty or None
        Any other ridge penalty (replaces ``reg_lambda`` and ``reg_mu``), in
        the units of the features given.
    max_iter : int
        Newton or L-BFGS iterations.
    tol : float
        Converged when the largest absolute gradient entry (of the problem
        on rescaled features, see the module docstring) is <= tol.
    solver : {"auto", "newton", "lbfgs"}
    warm_start : (coef, intercept) or (coef, intercept, blocks) or None
        Matrix map only: start from this map (in the input's columns and
        units; a fit of a related problem, such as the same calibrator on
        all the rows of a cross-validation) instead of the temperature-scaling
        ray, when its loss is lower there. ``blocks``, that fit's
        ``AffineFit.blocks``, then also precondition L-BFGS in place of the
        blocks at the start (a pass over ``rows * K^3`` that is most of a
        warm-started fit's time at 100 classes). The optimum is the same (the
        objective is strictly convex with the penalty); only the path to it
        is shorter.
    ray_start : float or None
        Where the search for the start on the temperature ray (theta = beta
        * identity) begins, as an inverse temperature in the input's units;
        None: the inverse of the features' typical spread. Features that are
        already calibrated log-probabilities (the structured maps') have
        their ray optimum near 1. The start found is the same either way.
    keep_blocks : bool
        Return the matrix map's class blocks at the solution (``blocks``),
        where L-BFGS ran with them, for ``warm_start``.

    Returns
    -------
    AffineFit
    """
    n_classes_in = features.shape[1]
    device = features.device
    weights = weights.to(torch.float64)
    weights = weights / weights.max()
    if mask is not None and not bool(mask.any()):
        mask = None
    if penalty is None:
        penalty = Penalty()
        if kind == "matrix" and n_classes_in > 1:
            penalty = Penalty(
                off_diagonal=2.0 * reg_lambda / (n_classes_in * (n_classes_in - 1)),
                bias=2.0 * reg_mu / n_classes_in,
            )

    # Columns masked in every row say nothing and are left out exactly.
    columns = torch.arange(n_classes_in, device=device)
    empty = None
    # Their scale's optimum: the penalty's centre where it has one.
    empty_scale = penalty.centre if penalty.diagonal > 0 else None
    if mask is not None:
        empty = mask.all(dim=0)
        if bool(empty.any()):
            features, mask, y, weights, columns = _select_columns(
                features, mask, y, weights, ~empty
            )

    log2_spread, log2_typical, log2_top = _spread_log2(features, mask)
    exponent = _rescale_exponent(log2_spread, log2_typical, log2_top)
    if (
        features.dtype != torch.float64
        and log2_top is not None
        and log2_top + exponent > _MAX_FLOAT32_LOG2
    ):
        features = features.to(torch.float64)
    if exponent:
        features = times_power_of_two(features, exponent)
        if not bool(torch.isfinite(features).all()):
            raise FloatingPointError(
                "the features span too wide a range to bring their spread near 1"
            )
        penalty = penalty.rescaled(exponent)
        if log2_spread is not None:
            log2_spread += exponent
    if exponent > 1000:
        # Features whose spread is subnormal: the map in the input's units
        # would need scales beyond float64's range.
        raise FloatingPointError(
            f"the features differ by at most 2**{-exponent} (subnormal numbers), "
            "too little for a scale that float64 can hold"
        )
    factor = math.ldexp(1.0, exponent)

    objective = AffineObjective(features, y, weights, kind, penalty, mask)
    beta, start_iterations = _ray_start(
        objective, log2_spread, None if ray_start is None else ray_start / factor
    )

    theta = torch.zeros(objective.shape, dtype=torch.float64, device=device)
    if kind == "vector":
        theta[:, 0] = beta
    else:
        theta[:, :-1].fill_diagonal_(beta)

    n_absent = n_separable = 0
    frozen = None
    # A ridge on both the scale and the bias gives every class a finite optimum.
    if kind == "vector" and not (penalty.diagonal > 0 and penalty.bias > 0):
        absent, separable = objective.unidentified_classes()
        n_absent, n_separable = int(absent.sum()), int(separable.sum())
        frozen = absent | separable
        if bool(frozen.any()) and not bool(frozen.all()):
            # A frozen class with probability exactly 0 on every row changes
            # no other class's probability: drop it from the passes.
            silent = frozen & (objective.class_mass(theta) == 0)
            if bool(silent.any()):
                features, mask, y, weights, kept = _select_columns(
                    features, mask, y, weights, ~silent
                )
                columns = columns[kept]
                frozen = frozen[kept]
                objective = AffineObjective(features, y, weights, kind, penalty, mask)
                theta = theta[kept]
        objective.freeze(frozen, hold_bias_mean=not bool(separable.any()))
    elif kind == "matrix" and not bool((objective.rho > 0).all()):
        # A class without a calibration sample has no finite row where some of
        # its entries have no penalty: its probability should go to 0 on
        # every row (ODIR never penalises the diagonal, and W_kk runs to
        # -infinity wherever its logits share a sign; an unpenalised bias
        # runs to -infinity), so its calibrated logits would sit wherever the
        # solver stops, their digits set by rounding and the thread count.
        # Such a class keeps its temperature-scaling row (W_kk = beta, 0,
        # b_k = 0), as in the vector map, and the free rows' mean is held in
        # each column that no penalty bounds on them (the bias column
        # included): moving it moves every free class against the held ones.
        mass = torch.zeros(objective.n_classes, dtype=torch.float64, device=device)
        mass.scatter_add_(0, objective.y, objective.weights64)
        absent = mass == 0
        n_absent = int(absent.sum())
        if n_absent and not bool(absent.all()):
            frozen = absent
            held = ~(objective.rho[~absent] > 0).any(dim=0)
            objective.freeze(frozen, held_columns=held)

    # With every class kept at the start, the fit is the temperature solve.
    solver_name = "none"
    status = "converged"
    n_iter = start_iterations
    decrement = 0.0
    solve = frozen is None or not bool(frozen.all())
    newton = solve and (
        solver == "newton" or (solver == "auto" and _use_newton(objective))
    )
    if newton:
        # The problem is small: float64 throughout costs little.
        objective.use_float64()
    theta = objective.snap(theta)
    loss, grad, curv = objective.evaluate(theta, curvature=kind == "vector")
    warm_blocks = None
    if warm_start is not None and kind == "matrix" and frozen is None:
        theta, loss, grad, curv, warm_blocks = _warm_theta(
            objective, theta, loss, grad, curv, warm_start, columns, factor
        )
    grad_norm = _finite_start(loss, grad)
    blocks = None
    if solve:
        solver_name, theta, loss, grad, status, n_iter, decrement = _run_solver(
            objective, theta, loss, grad, curv, newton, max_iter, tol, warm_blocks
        )
        grad_norm = float(grad.abs().max())
        if keep_blocks and solver_name == "lbfgs" and _uses_blocks(objective):
            blocks = _blocks_in_input_units(objective, theta, n_classes_in, factor)

    # Back to the columns and units of the input.
    start = beta * factor
    if kind == "vector":
        coef = torch.full((n_classes_in,), start, dtype=torch.float64)
        coef[columns.cpu()] = theta[:, 0].cpu() * factor
    else:
        coef = torch.eye(n_classes_in, dtype=torch.float64) * start
        index = columns.cpu()
        coef[index[:, None], index[None, :]] = theta[:, :-1].cpu() * factor
    if empty_scale is not None and empty is not None and bool(empty.any()):
        # The loss never sees a column masked in every row: its parameters
        # minimise their penalty alone (scale at the centre, the rest 0).
        index = torch.nonzero(empty).squeeze(1).cpu()
        if kind == "vector":
            coef[index] = empty_scale
        else:
            coef[index, index] = empty_scale
    intercept = torch.zeros(n_classes_in, dtype=torch.float64)
    intercept[columns.cpu()] = theta[:, -1].cpu()
    return AffineFit(
        coef=coef.numpy().copy(),
        intercept=intercept.numpy().copy(),
        loss=loss,
        gradient=grad_norm,
        n_iter=n_iter,
        n_evals=objective.n_evals,
        solver=solver_name,
        status=status,
        start=start,
        scale=factor,
        decrement=decrement,
        n_absent=n_absent,
        n_separable=n_separable,
        blocks=blocks,
    )


def _blocks_in_input_units(objective, theta, n_classes_in, factor):
    """The class blocks at theta for the input's features ``(x, 1)``, or None.

    The solver's features are ``factor * x``: its blocks are ``D B D`` with
    ``D = diag(factor, ..., factor, 1)``. None where columns were left out
    or classes frozen.
    """
    if objective.n_classes != n_classes_in or objective.free is not None:
        return None
    blocks = objective.class_blocks(theta)
    if not bool(torch.isfinite(blocks).all()):
        return None
    scale = _unit_scale(1.0 / factor, blocks.shape[1], blocks.device)
    return (blocks * scale[:, None] * scale[None, :]).cpu().numpy()


def fit_affine_chunks(
    reduce,
    prepare,
    n_classes,
    *,
    beta,
    frozen=None,
    hold_bias_mean=False,
    max_iter=1000,
    tol=1e-7,
    start_iterations=0,
):
    """The vector map from sums over chunks: ``fit_affine``'s solver, unchanged.

    Parameters
    ----------
    reduce, prepare : callables
        The chunk source's reduction and the calibrator's map from a chunk to
        the problem's rows (see :mod:`sklearn_calib._torch._affine_chunks`).
    n_classes : int
        Columns of the prepared features.
    beta : float
        The start's inverse temperature: theta = (beta, 0) for every class
        (``fit_affine`` starts in memory on the temperature ray's optimum;
        vector scaling over chunks passes the chunked temperature fit's).
        Features are taken as they come: no power-of-two rescaling.
    frozen : bool array (n_classes,) or None
        Classes kept at the start (no finite optimum; see ``fit_affine``),
        with ``hold_bias_mean`` as in ``AffineObjective.freeze``.
    max_iter, tol : as ``fit_affine``.
    start_iterations : int
        Iterations of the solve that gave ``beta``: the fit's ``n_iter`` when
        every class is frozen (as in memory, where it is the ray search's).

    Returns
    -------
    AffineFit
    """
    from ._affine_chunks import ChunkedAffineObjective

    objective = ChunkedAffineObjective(reduce, prepare, n_classes)
    theta = torch.zeros(objective.shape, dtype=torch.float64)
    theta[:, 0] = beta
    frozen = None if frozen is None else torch.as_tensor(frozen, dtype=torch.bool)
    solve = frozen is None or not bool(frozen.all())
    if solve:
        objective.freeze(frozen, hold_bias_mean=hold_bias_mean)
    n_free = n_classes if objective.free is None else int(objective.free.numel())
    newton = solve and 2 * n_free <= _NEWTON_PARAMS
    objective.with_hessian = newton
    loss, grad, curv = objective.evaluate(theta, curvature=not newton)
    grad_norm = _finite_start(loss, grad)
    solver_name, status, decrement = "none", "converged", 0.0
    n_iter = start_iterations
    if solve:
        solver_name, theta, loss, grad, status, n_iter, decrement = _run_solver(
            objective, theta, loss, grad, curv, newton, max_iter, tol
        )
        grad_norm = float(grad.abs().max())
    return AffineFit(
        coef=theta[:, 0].numpy().copy(),
        intercept=theta[:, 1].numpy().copy(),
        loss=loss,
        gradient=grad_norm,
        n_iter=n_iter,
        n_evals=objective.n_evals,
        solver=solver_name,
        status=status,
        start=beta,
        scale=1.0,
        decrement=decrement,
    )


def _finite_start(loss, grad):
    """The start's largest gradient entry; FloatingPointError where not finite."""
    grad_norm = float(grad.abs().max())
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise FloatingPointError("non-finite loss or gradient at the start")
    return grad_norm


def _run_solver(
    objective, theta, loss, grad, curv, newton, max_iter, tol, blocks=None
):
    """Newton, or L-BFGS preconditioned at the start, from theta.

    ``blocks``: see :func:`_preconditioner`. Returns (solver name, theta,
    loss, grad, status, n_iter, decrement).
    """
    precondition = None
    if not newton:
        precondition = _preconditioner(objective, theta, curv, grad, blocks)
    # Blocks rebuilt on the way replace those of a far-off start; blocks
    # given from a related problem's solution are already near this one's
    # (rebuilding them cost a matrix or Dirichlet fold fit at 100 classes
    # 0.1-0.2 s each and saved no iteration, benchmarks/bench_margin_speed.py).
    result = _minimise(
        objective,
        theta,
        loss,
        grad,
        newton,
        precondition,
        max_iter,
        tol,
        rebuild=blocks is None,
    )
    return ("newton" if newton else "lbfgs", *result)


def _refreshed(objective, theta, precondition):
    """The block preconditioner rebuilt at theta, or None where it fails."""
    if not isinstance(precondition, _BlockPreconditioner):
        return None
    blocks = objective.class_blocks(theta)
    if not bool(torch.isfinite(blocks).all()):
        return None
    try:
        return _BlockPreconditioner(blocks, objective.rho)
    except torch.linalg.LinAlgError:
        return None


def _warm_theta(objective, theta, loss, grad, curv, warm_start, columns, factor):
    """The warm start in the solver's columns and units, where it is better.

    Returns ``(theta, loss, grad, curv, blocks)``: ``blocks`` the warm
    start's class blocks in the solver's units where it has them and is used
    (every column kept), else None.
    """
    # joblib hands a worker its larger arrays (the blocks) as read-only
    # memmaps, on which torch.as_tensor warns: to_tensor copies nothing and
    # says nothing (none of them is written to).
    coef, intercept = (
        to_tensor(np.asarray(a, dtype=np.float64), torch.device("cpu"))
        for a in warm_start[:2]
    )
    index = columns.cpu()
    warm = torch.empty(objective.shape, dtype=torch.float64)
    warm[:, :-1] = coef[index[:, None], index[None, :]] / factor
    warm[:, -1] = intercept[index]
    warm = objective.snap(warm.to(theta.device))
    warm_loss, warm_grad, warm_curv = objective.evaluate(warm)
    if math.isfinite(warm_loss) and bool(torch.isfinite(warm_grad).all()):
        if warm_loss < loss:
            blocks = warm_start[2] if len(warm_start) > 2 else None
            if blocks is not None and blocks.shape[0] == objective.n_classes:
                blocks = np.asarray(blocks, dtype=np.float64)
                blocks = to_tensor(blocks, theta.device)
                scale = _unit_scale(factor, blocks.shape[1], blocks.device)
                blocks = blocks * scale[:, None] * scale[None, :]
            else:
                blocks = None
            return warm, warm_loss, warm_grad, warm_curv, blocks
    return theta, loss, grad, curv, None


def _minimise(
    objective, theta, loss, grad, newton, precondition, max_iter, tol, rebuild=True
):
    """Newton or preconditioned L-BFGS from theta; returns the final state.

    ``rebuild``: whether class blocks may be rebuilt where progress stalls.
    """
    history = []
    status = "max_iter"
    n_iter = 0
    decrement = 0.0
    # The vector map's 2 x 2 blocks come with the same pass (three more
    # column sums): refreshed at every point, they follow curvatures that
    # change by orders of magnitude on the way (a class with one sample: 10x
    # fewer iterations, and half as many on well-posed problems).
    objective.track_curvature = isinstance(precondition, _VectorPreconditioner)
    grad_norm = float(grad.abs().max())
    best_norm, since_best = grad_norm, 0
    recent_losses = [loss]
    # Rebuilds only where the penalty bounds every direction but the diagonal
    # scales (ODIR): unpenalised fits that separate the samples run to
    # infinity, and there the start's blocks led faster to the gradient
    # tolerance (matrix scaling on 5,000 CIFAR-100 rows: 47 iterations, and
    # max_iter with rebuilds).
    refresh = (
        rebuild
        and isinstance(precondition, _BlockPreconditioner)
        and int((objective.rho == 0).sum()) <= objective.n_classes
    )
    rebuilds = 0  # since the gradient last halved
    while True:
        in_float32 = objective.dtype != torch.float64
        direction = None
        if newton and status != "stalled":
            direction = _newton_direction(objective, theta, grad)
            if direction is not None:
                decrement = -float(torch.sum(grad * direction))
            done = grad_norm <= tol and (
                direction is None
                or decrement
                <= 2 * max(_DECREASE * tol, objective.loss_noise * abs(loss))
            )
        else:
            done = grad_norm <= tol
        if (
            done
            or status == "stalled"
            or (
                in_float32
                and grad_norm <= _FLOAT64_SWITCH * tol
                and since_best >= _SWITCH_PATIENCE
            )
        ):
            if not in_float32:
                if done:
                    status = "converged"
                break
            # float32 got as far as its rounding usefully allows: confirm (and
            # where needed finish) in float64, a pass or a few near the optimum.
            objective.use_float64()
            loss, grad, _ = objective.evaluate(theta)
            grad_norm = float(grad.abs().max())
            history.clear()
            status = "max_iter"
            best_norm, since_best = grad_norm, 0
            recent_losses = [loss]
            continue
        if n_iter >= max_iter:
            break
        n_iter += 1
        if newton:
            if direction is None:
                # The Hessian is unusable (non-finite, or not positive
                # definite even with the largest ridge): a gradient step.
                direction = -grad
        else:
            direction = objective.project(_lbfgs_direction(grad, history, precondition))
            if float(torch.sum(grad * direction)) >= 0:
                # Not a descent direction (rounding in the memory): restart
                # from the preconditioned gradient, or the gradient itself.
                history.clear()
                direction = objective.project(-precondition(grad))
                if float(torch.sum(grad * direction)) >= 0:
                    direction = -grad
        result = _line_search(
            objective, theta, loss, grad, direction, objective.loss_noise * abs(loss)
        )
        if result is None:
            status = "stalled"
            continue
        new_theta, new_loss, new_grad = result
        if not newton:
            s = new_theta - theta
            y_diff = new_grad - grad
            sy = float(torch.sum(s * y_diff))
            if sy > 1e-10 * float(torch.linalg.vector_norm(s)) * float(
                torch.linalg.vector_norm(y_diff)
            ):
                history.append((s, y_diff, 1.0 / sy))
                if len(history) > _HISTORY:
                    history.pop(0)
        theta, loss, grad = new_theta, new_loss, new_grad
        if objective.track_curvature and objective.last_curvature is not None:
            curv = objective.last_curvature
            if bool(torch.isfinite(curv).all()):
                precondition = _VectorPreconditioner(curv, grad, objective.rho)
        grad_norm = float(grad.abs().max())
        # At the rounding floor the steps only shuffle noise although every
        # line search succeeds: the gradient stops shrinking and the loss
        # stops falling by more than its rounding error.
        if grad_norm < _PROGRESS * best_norm:
            best_norm, since_best, rebuilds = grad_norm, 0, 0
        else:
            since_best += 1
            if (
                refresh
                and since_best % _REFRESH_PATIENCE == 0
                and rebuilds < _REFRESH_LIMIT
            ):
                rebuilds += 1
                fresh = _refreshed(objective, theta, precondition)
                if fresh is not None:
                    precondition = fresh
        recent_losses = (recent_losses + [loss])[-(_PATIENCE + 1) :]
        if since_best >= _PATIENCE and recent_losses[
            0
        ] - loss <= objective.loss_noise * abs(loss):
            status = "stalled"
    return theta, loss, grad, status, n_iter, decrement
