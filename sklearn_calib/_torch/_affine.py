"""Affine calibration maps: the weighted NLL (+ ODIR penalty), solved exactly.

Model. Class k gets the calibrated logit f_ik = theta_k . x_ik, where theta is a
(K, P) array whose last column is the bias:

  vector   P = 2      x_ik = (z_ik, 1)   f_i = w * z_i + b
  matrix   P = K + 1  x_ik = (z_i, 1)    f_i = W z_i + b

Objective (convex in theta), with the weights w_i normalised to sum to 1:

  L(theta) = sum_i w_i [ logsumexp(f_i) - f_{i,y_i} ] + 1/2 sum_kp rho_kp theta_kp^2
  G_k      = sum_i w_i (q_ik - 1[y_i = k]) x_ik + rho_k * theta_k,   q_i = softmax(f_i)
  H        = sum_i w_i J_i^T (diag(q_i) - q_i q_i^T) J_i + diag(rho)

The ODIR penalty of Kull et al. (2019), lambda/(K(K-1)) sum_{j!=k} W_jk^2 +
mu/K sum_k b_k^2, is rho = 2 lambda/(K(K-1)) on the off-diagonal of W and 2 mu/K
on b. The label part sum_{i: y_i = k} w_i x_ik of the gradient (and of the loss)
does not depend on theta and is computed once.

One evaluation (loss and gradient) is one pass over the features, row block by
row block, into preallocated block buffers: the affine map, the row maximum,
exp, the row sums, then the gradient as a matrix product (matrix) or column sums
(vector). Per-row work runs in the features' dtype; every sum over rows ends in
float64, and the parameters, the gradient and the solver state are float64.
float32 features get the speed of float32 until the gradient reaches float32's
rounding floor; the last iterations then run on row blocks converted to float64,
so the result is as exact as a float64 solve, without a float64 copy of the data.

Solvers, both started from the exact temperature solution (W = I / T, b = 0)
and both ending on the largest absolute gradient entry <= tol:

  Newton     when the exact Hessian is cheap (at most _NEWTON_PARAMS parameters:
             binary problems, vector scaling up to 64 classes, matrix scaling
             up to 10). Quadratic convergence in a handful of passes, in float64.
  L-BFGS     otherwise, with a strong-Wolfe line search, preconditioned by the
             Hessian block of each class at the start (2 x 2 for the vector map,
             (K+1) x (K+1) for the matrix map on a subsample of rows, their
             diagonals beyond _BLOCK_CLASSES classes), so that the first step
             is close to a Newton step and step 1 is usually accepted.

Unregularised, softmax(W z + b) is unchanged by adding a constant to every entry
of b, or the same row vector to every row of W. The exact gradient is orthogonal
to those directions and every step is projected off them, so iterates started
at (I / T, 0) keep the component they start with: the fitted map is the optimum
nearest to that start (the biases of vector scaling sum to zero).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._temperature import fit_inverse_temperature

_CPU_BLOCK_ELEMENTS = 2**20
_CUDA_BLOCK_ELEMENTS = 2**27
# Newton when the parameters are few (vector scaling up to 64 classes, matrix
# scaling up to 10) and one Hessian costs at most _NEWTON_WORK multiply-adds
# (rows times parameters squared). Beyond that, preconditioned L-BFGS is faster
# on the bundled real logits, while Newton stays far more robust on small
# unregularised matrix problems (hundreds of L-BFGS iterations there).
_NEWTON_WORK = 2**29
_NEWTON_PARAMS = 128
# Curvatures below this fraction of the largest one are floored: a class with
# no calibration samples and vanishing probability has (almost) no curvature.
_CURVATURE_FLOOR = 1e-9
_HISTORY = 10
# Rows used for the Hessian blocks that precondition L-BFGS on the matrix map,
# and the number of classes up to which the blocks are affordable (they cost
# rows * K * (K + 1)^2); beyond it, their diagonals.
_PRECONDITIONER_ROWS = 1024
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
# float32 passes give gradients good to about 1e-8 to 1e-7, and L-BFGS can
# slow down well before that floor: below _FLOAT64_SWITCH * tol, once the
# gradient norm has not halved for _SWITCH_PATIENCE iterations, the last decade
# is finished on float64 blocks (12 fewer iterations on matrix scaling 10k x
# 100; where float32 keeps converging fast, its cheaper passes are kept).
_FLOAT64_SWITCH = 10.0
_SWITCH_PATIENCE = 3


@dataclass
class AffineFit:
    coef: np.ndarray  # (K,) for vector, (K, K) for matrix
    intercept: np.ndarray  # (K,)
    loss: float  # final objective (mean weighted NLL + penalty)
    gradient: float  # largest absolute gradient entry at the solution
    n_iter: int
    n_evals: int  # passes over the data (loss-and-gradient evaluations)
    solver: str  # "newton" or "lbfgs"
    status: str  # "converged", "max_iter" or "stalled"


class _Objective:
    """Weighted NLL (+ penalty) of softmax of an affine map, with derivatives."""

    def __init__(self, features, y, weights, kind, reg_lambda=0.0, reg_mu=0.0):
        n_rows, n_classes = features.shape
        device = features.device
        self.features = features
        self.kind = kind
        self.n_classes = n_classes
        self.dtype = features.dtype
        weights = weights.to(torch.float64)
        self.weights64 = weights / weights.sum()
        limit = _CUDA_BLOCK_ELEMENTS if features.is_cuda else _CPU_BLOCK_ELEMENTS
        self.block_rows = max(1, min(n_rows, limit // n_classes))
        self._buffers = {}
        self.shape = (n_classes, 2 if kind == "vector" else n_classes + 1)
        self.n_evals = 0

        label = torch.zeros(self.shape, dtype=torch.float64, device=device)
        label[:, -1].index_add_(0, y, self.weights64)
        for rows in self._blocks():
            x = features[rows].to(torch.float64)
            w = self.weights64[rows]
            y_block = y[rows]
            if kind == "vector":
                true_x = x.gather(1, y_block.view(-1, 1)).squeeze(1)
                label[:, 0].index_add_(0, y_block, w * true_x)
            else:
                label[:, :-1].index_add_(0, y_block, x * w[:, None])
        self.label = label

        rho = torch.zeros(self.shape, dtype=torch.float64, device=device)
        if kind == "matrix" and n_classes > 1:
            rho[:, :-1] = 2.0 * reg_lambda / (n_classes * (n_classes - 1))
            rho[:, :-1].fill_diagonal_(0.0)
            rho[:, -1] = 2.0 * reg_mu / n_classes
        self.rho = rho
        # Without an off-diagonal penalty, adding the same row vector to every
        # row of W changes nothing; adding a constant to every bias never does.
        self.free_rows = kind == "matrix" and reg_lambda == 0

    def project(self, direction):
        """Remove the components along which softmax(f) cannot change.

        The exact gradient has none; rounding has a little, which a Newton
        step with a small ridge would otherwise amplify.
        """
        direction = direction.clone()
        direction[:, -1] -= direction[:, -1].mean()
        if self.free_rows:
            direction[:, :-1] -= direction[:, :-1].mean(dim=0, keepdim=True)
        return direction

    @property
    def loss_noise(self):
        """Relative rounding error of the loss in the working dtype."""
        return 64 * torch.finfo(self.dtype).eps

    def use_float64(self):
        """Work in float64 from now on (row blocks are converted on the fly)."""
        self.dtype = torch.float64

    def snap(self, theta):
        """theta rounded to the working dtype, so that the point evaluated is theta.

        Without this, steps below float32's resolution would be evaluated at
        the same rounded point and corrupt the line search and the L-BFGS pairs.
        """
        if self.dtype == torch.float64:
            return theta
        return theta.to(self.dtype).to(torch.float64)

    def _blocks(self, rows_per_block=None):
        n_rows = self.features.shape[0]
        step = rows_per_block or self.block_rows
        for start in range(0, n_rows, step):
            yield slice(start, min(start + step, n_rows))

    def _buffers_for(self, dtype):
        """Preallocated block buffers: the logits block and a converted copy."""
        if dtype not in self._buffers:
            shape = (self.block_rows, self.n_classes)
            device = self.features.device
            out = torch.empty(shape, dtype=dtype, device=device)
            converted = None
            if dtype != self.features.dtype:
                converted = torch.empty(shape, dtype=dtype, device=device)
            self._buffers[dtype] = (out, converted, self.weights64.to(dtype))
        return self._buffers[dtype]

    def _affine(self, theta, x, out=None):
        coef = theta[:, :-1].to(x.dtype)
        bias = theta[:, -1].to(x.dtype)
        if self.kind == "vector":
            return torch.addcmul(bias, x, coef.squeeze(1), out=out)
        return torch.addmm(bias, x, coef.T, out=out)

    def evaluate(self, theta, *, curvature=False):
        """Loss, gradient and (vector map, optionally) the 2 x 2 Hessian blocks.

        The blocks are sum_i w_i q_ik (1 - q_ik) times (z_ik^2, z_ik, 1).
        """
        self.n_evals += 1
        dtype = self.dtype
        buffer, converted, weights = self._buffers_for(dtype)
        # Shifted logits below the floor add nothing that a row sum of at least
        # 1 can hold, and exp is many times slower where it underflows.
        exp_floor = -80.0 if dtype == torch.float32 else -700.0
        loss = torch.zeros((), dtype=torch.float64, device=theta.device)
        grad = torch.zeros_like(theta)
        curv = None
        if curvature:
            curv = torch.zeros(
                (self.n_classes, 3), dtype=torch.float64, device=theta.device
            )
        for rows in self._blocks():
            x = self.features[rows]
            if converted is not None:
                x = converted[: x.shape[0]].copy_(x)
            w = weights[rows]
            out = self._affine(theta, x, out=buffer[: x.shape[0]])
            row_max = out.amax(dim=1, keepdim=True)
            out.sub_(row_max).clamp_(min=exp_floor).exp_()
            row_sum = out.sum(dim=1, keepdim=True)
            log_norm = row_sum.log().add_(row_max).squeeze(1)
            loss += torch.dot(self.weights64[rows], log_norm.to(torch.float64))
            # out becomes w_i q_ik, the weighted probabilities.
            out.mul_(w[:, None] / row_sum)
            grad[:, -1] += out.sum(dim=0).to(torch.float64)
            if curvature:
                # w q (1 - q) = w q - (w q)^2 / w, on rows with w > 0.
                safe_w = torch.where(w > 0, w, torch.ones_like(w))
                c = out - out * out / safe_w[:, None]
                curv[:, 2] += c.sum(dim=0).to(torch.float64)
                curv[:, 1] += c.mul_(x).sum(dim=0).to(torch.float64)
                curv[:, 0] += c.mul_(x).sum(dim=0).to(torch.float64)
            if self.kind == "vector":
                grad[:, 0] += out.mul_(x).sum(dim=0).to(torch.float64)
            else:
                grad[:, :-1] += (out.T @ x).to(torch.float64)
        penalty = 0.5 * torch.sum(self.rho * theta * theta)
        loss = float(loss - torch.sum(self.label * theta) + penalty)
        grad -= self.label
        grad += self.rho * theta
        return loss, grad, curv

    def _probabilities(self, theta, rows):
        """float64 features and softmax probabilities of one block of rows."""
        x = self.features[rows].to(torch.float64)
        return x, torch.softmax(self._affine(theta, x), dim=1)

    def hessian(self, theta):
        """The exact Hessian, (K P, K P) in float64, for the Newton solver."""
        k, p = self.shape
        n_params = k * p
        hessian = torch.zeros(
            (n_params, n_params), dtype=torch.float64, device=theta.device
        )
        diagonal_blocks = torch.zeros(
            (k, p, p), dtype=torch.float64, device=theta.device
        )
        rows_per_block = max(1, 2**20 // n_params)
        for rows in self._blocks(rows_per_block):
            x, q = self._probabilities(theta, rows)
            w = self.weights64[rows]
            if self.kind == "vector":
                xk = torch.stack([x, torch.ones_like(x)], dim=2)  # (n, K, 2)
            else:
                xa = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
                xk = xa[:, None, :].expand(-1, k, -1)  # (n, K, K+1)
            v = (q[:, :, None] * xk).reshape(-1, n_params)
            hessian -= v.T @ (v * w[:, None])
            wq = (w[:, None] * q)[:, :, None] * xk
            diagonal_blocks += torch.einsum("nkp,nkr->kpr", wq, xk)
        for j in range(k):
            hessian[j * p : (j + 1) * p, j * p : (j + 1) * p] += diagonal_blocks[j]
        hessian.diagonal().add_(self.rho.reshape(-1))
        return hessian

    def _preconditioner_rows(self, theta):
        """float64 features, weights and q (1 - q) on evenly spaced rows."""
        n_rows = self.features.shape[0]
        rows = torch.linspace(
            0, n_rows - 1, min(n_rows, _PRECONDITIONER_ROWS), device=theta.device
        )
        rows = rows.round().long()
        x = self.features[rows].to(torch.float64)
        q = torch.softmax(self._affine(theta, x), dim=1)
        w = self.weights64[rows]
        w = w / w.sum().clamp(min=1e-300)
        xa = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        return xa, q * (1 - q) * w[:, None]

    def class_diagonals(self, theta):
        """Diagonals sum_i w_i q_ik (1 - q_ik) x_ij^2 of the matrix map's blocks."""
        xa, c = self._preconditioner_rows(theta)
        return c.T @ (xa * xa)

    def class_blocks(self, theta):
        """Hessian blocks sum_i w_i q_ik (1 - q_ik) x_i x_i^T of the matrix map.

        They only precondition, so at most _PRECONDITIONER_ROWS evenly spaced
        rows are used: the blocks cost rows * K * (K + 1)^2 multiply-adds.
        """
        k = self.n_classes
        xa, c = self._preconditioner_rows(theta)
        root_c = c.sqrt().T  # (K, m)
        blocks = torch.empty(
            (k, k + 1, k + 1), dtype=torch.float64, device=theta.device
        )
        # Classes in groups keep the (group, m, K + 1) temporary small.
        group = max(1, 2**22 // (xa.shape[0] * xa.shape[1]))
        for start in range(0, k, group):
            scaled = root_c[start : start + group, :, None] * xa
            blocks[start : start + group] = scaled.transpose(1, 2) @ scaled
        return blocks


class _DiagonalPreconditioner:
    """Inverse of the Hessian diagonal (matrix map with many classes)."""

    def __init__(self, diagonal, rho):
        diagonal = diagonal + rho
        floor = _CURVATURE_FLOOR * float(diagonal.max().clamp(min=1e-300))
        self.inverse = 1.0 / diagonal.clamp(min=floor)

    def __call__(self, g):
        return g * self.inverse


class _VectorPreconditioner:
    """Inverse of the 2 x 2 Hessian blocks (w_k, b_k) of the vector map."""

    def __init__(self, curv):
        h_ww, h_wb, h_bb = curv[:, 0], curv[:, 1], curv[:, 2]
        floor = _CURVATURE_FLOOR * float(torch.clamp(h_bb.max(), min=1e-300))
        h_bb = h_bb.clamp(min=floor)
        h_ww = h_ww.clamp(min=floor)
        # Keep each block safely positive definite.
        det = torch.maximum(h_ww * h_bb - h_wb * h_wb, 1e-3 * h_ww * h_bb)
        self.a = h_bb / det
        self.b = -h_wb / det
        self.c = h_ww / det

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


def _newton_direction(hessian, grad):
    """-H^{-1} g, with a relative ridge for the directions softmax cannot see."""
    scale = float(hessian.diagonal().max().clamp(min=1e-300))
    ridge = _CURVATURE_FLOOR * scale
    eye = torch.eye(hessian.shape[0], dtype=hessian.dtype, device=hessian.device)
    factor, info = torch.linalg.cholesky_ex(hessian + ridge * eye)
    while int(info) != 0:
        ridge *= 100.0
        factor, info = torch.linalg.cholesky_ex(hessian + ridge * eye)
    step = torch.cholesky_solve(grad.reshape(-1, 1), factor)
    return -step.reshape(grad.shape)


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
        if hi_slope is not None and hi_slope > lo_slope:
            secant = lo_step - lo_slope * width / (hi_slope - lo_slope)
            step = min(max(secant, lo_step + 0.1 * width), hi_step - 0.1 * width)
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


def _use_newton(objective):
    n_params = objective.shape[0] * objective.shape[1]
    n_rows = objective.features.shape[0]
    return n_params <= _NEWTON_PARAMS and n_rows * n_params**2 <= _NEWTON_WORK


def fit_affine(
    features,
    y,
    weights,
    *,
    kind,
    reg_lambda=0.0,
    reg_mu=0.0,
    max_iter=1000,
    tol=1e-7,
    solver="auto",
):
    """Minimise the weighted NLL (+ ODIR penalty) of softmax(affine(features)).

    Parameters
    ----------
    features : Tensor (n, k), float32 or float64
        Logits (vector and matrix scaling) or log-probabilities (Dirichlet).
    y : Tensor (n,), int64 class codes
    weights : Tensor (n,), non-negative with a positive sum
    kind : {"vector", "matrix"}
    reg_lambda, reg_mu : float
        ODIR penalty strengths (matrix only).
    max_iter : int
        Newton or L-BFGS iterations.
    tol : float
        Converged when the largest absolute gradient entry is <= tol.
    solver : {"auto", "newton", "lbfgs"}

    Returns
    -------
    AffineFit
    """
    beta = 1.0
    start = fit_inverse_temperature(features, y, weights)
    if start.status == "converged" and math.isfinite(start.beta):
        beta = start.beta
    objective = _Objective(features, y, weights, kind, reg_lambda, reg_mu)
    theta = torch.zeros(objective.shape, dtype=torch.float64, device=features.device)
    if kind == "vector":
        theta[:, 0] = beta
    else:
        theta[:, :-1].fill_diagonal_(beta)

    newton = solver == "newton" or (solver == "auto" and _use_newton(objective))
    if newton:
        # The problem is small: float64 throughout costs little.
        objective.use_float64()
    theta = objective.snap(theta)
    loss, grad, curv = objective.evaluate(theta, curvature=kind == "vector")
    precondition = None
    if not newton:
        if kind == "vector":
            precondition = _VectorPreconditioner(curv)
        elif objective.n_classes <= _BLOCK_CLASSES:
            precondition = _BlockPreconditioner(
                objective.class_blocks(theta), objective.rho
            )
        else:
            precondition = _DiagonalPreconditioner(
                objective.class_diagonals(theta), objective.rho
            )

    history = []
    status = "max_iter"
    n_iter = 0
    grad_norm = float(grad.abs().max())
    best_norm, since_best = grad_norm, 0
    recent_losses = [loss]
    while True:
        in_float32 = objective.dtype != torch.float64
        if (
            grad_norm <= tol
            or status == "stalled"
            or (
                in_float32
                and grad_norm <= _FLOAT64_SWITCH * tol
                and since_best >= _SWITCH_PATIENCE
            )
        ):
            if not in_float32:
                if grad_norm <= tol:
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
            direction = objective.project(
                _newton_direction(objective.hessian(theta), grad)
            )
        else:
            direction = objective.project(_lbfgs_direction(grad, history, precondition))
            if float(torch.sum(grad * direction)) >= 0:
                # Not a descent direction (rounding in the memory): restart
                # from the preconditioned gradient, or the gradient itself.
                history.clear()
                direction = objective.project(-precondition(grad))
                if float(torch.sum(grad * direction)) >= 0:
                    direction = objective.project(-grad)
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
        grad_norm = float(grad.abs().max())
        # At the rounding floor the steps only shuffle noise although every
        # line search succeeds: the gradient stops shrinking and the loss
        # stops falling by more than its rounding error.
        if grad_norm < _PROGRESS * best_norm:
            best_norm, since_best = grad_norm, 0
        else:
            since_best += 1
        recent_losses = (recent_losses + [loss])[-(_PATIENCE + 1) :]
        if since_best >= _PATIENCE and recent_losses[
            0
        ] - loss <= objective.loss_noise * abs(loss):
            status = "stalled"

    coef = theta[:, 0] if kind == "vector" else theta[:, :-1]
    return AffineFit(
        coef=coef.cpu().numpy().copy(),
        intercept=theta[:, -1].cpu().numpy().copy(),
        loss=loss,
        gradient=grad_norm,
        n_iter=n_iter,
        n_evals=objective.n_evals,
        solver="newton" if newton else "lbfgs",
        status=status,
    )
