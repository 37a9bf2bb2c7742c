"""The objective of the affine maps: the weighted NLL (+ ODIR penalty).

The solver (:mod:`sklearn_calib._torch._affine`) minimises it; this module owns
the loss, its gradient, Hessian and per-class curvature blocks.

Model. Class k gets the calibrated logit f_ik = theta_k . x_ik, where theta is a
(K, P) array whose last column is the bias:

  vector   P = 2      x_ik = (z_ik, 1)   f_i = w * z_i + b
  matrix   P = K + 1  x_ik = (z_i, 1)    f_i = W z_i + b

Objective (convex in theta), with the weights w_i normalised to sum to 1:

  L(theta) = sum_i w_i [ logsumexp(f_i) - f_{i,y_i} ]
             + 1/2 sum_kp rho_kp (theta_kp - m_kp)^2
  G_k      = sum_i w_i (q_ik - 1[y_i = k]) x_ik + rho_k * (theta_k - m_k),
  q_i      = softmax(f_i)
  H        = sum_i w_i J_i^T (diag(q_i) - q_i q_i^T) J_i + diag(rho)

The centre m is 0 except on the scales (diagonal of W, w of the vector map),
where it is the ``Penalty``'s centre. The ODIR penalty of Kull et al. (2019),
lambda/(K(K-1)) sum_{j!=k} W_jk^2 + mu/K sum_k b_k^2, is rho = 2 lambda/(K(K-1))
on the off-diagonal of W and 2 mu/K on b. Structured matrix scaling (Berta et
al. 2026) penalises the diagonal's distance from 1 too, each part with its own
rho. Each row's loss and gradient are formed before the sum over rows (the
label's part subtracted row by row, not as one label sum): a row of logits
near 1e20 whose label is its maximum adds ~0, not 1e20 * eps of rounding.
Normalising the weights makes the fit independent of their scale, and the
penalty's weight relative to the NLL with it.

Masked classes. An optional boolean mask marks entries whose logit is -inf:
their calibrated logit is -inf whatever theta (probability exactly 0), and the
features hold a finite stand-in there (the caller's convention: 0 for the
vector map, the row's lowest unmasked feature for the matrix map) so that every
product stays finite. Columns masked in every row are left out of the solve.

One evaluation (loss and gradient) is one pass over the features, row block by
row block, into preallocated block buffers: the affine map, the row maximum,
exp, the row sums, then the gradient as a matrix product (matrix) or column sums
(vector). Per-row work runs in the features' dtype; every sum over rows ends in
float64, and the parameters, the gradient and the solver state are float64.
float32 features get the speed of float32 until the gradient reaches float32's
rounding floor; the last iterations then run on row blocks converted to float64,
so the result is as exact as a float64 solve, without a float64 copy of the data.
"""

import math
from dataclasses import dataclass

import torch

CPU_BLOCK_ELEMENTS = 2**20


_CUDA_BLOCK_ELEMENTS = 2**27


# Rows used for the Hessian blocks that precondition L-BFGS on the matrix map,
# and the number of classes up to which the blocks are affordable (they cost
# rows * K * (K + 1)^2); beyond it, their diagonals.
_PRECONDITIONER_ROWS = 1024


@dataclass(frozen=True)
class Penalty:
    """The penalty 1/2 rho (theta - centre)^2 summed over the parameters.

    ``diagonal``: rho of the scales (diagonal of W, or w of the vector map),
    pulled towards ``centre``; ``off_diagonal``: rho of the other entries of W;
    ``bias``: rho of the biases. Both pulled towards 0.
    """

    diagonal: float = 0.0
    off_diagonal: float = 0.0
    bias: float = 0.0
    centre: float = 0.0

    def rescaled(self, exponent):
        """The same penalty on theta for features times 2**exponent.

        W x = (W / c) (c x): rho (W - m)^2 = rho c^2 (W / c - m / c)^2, with
        rho c^2 clamped where c^2 leaves float64's range (far from any data).
        """
        if not exponent:
            return self

        def times_c2(rho):
            return min(math.ldexp(rho, min(2 * exponent, 1023)), 1e300)

        return Penalty(
            diagonal=times_c2(self.diagonal),
            off_diagonal=times_c2(self.off_diagonal),
            bias=self.bias,
            centre=math.ldexp(self.centre, -exponent),
        )


def spaced_rows(n_rows, count, device):
    """Up to ``count`` evenly spaced row indices, in exact integer arithmetic.

    (A float32 ``linspace`` rounds indices beyond 2**24 rows, up to n_rows.)
    """
    if n_rows <= count:
        return torch.arange(n_rows, device=device)
    steps = torch.arange(count, device=device, dtype=torch.int64)
    return steps * (n_rows - 1) // (count - 1)


def _exp_below_max_(shifted, exp_floor):
    """exp of row-max-shifted values in place; below ``exp_floor`` exactly 0.

    exp is many times slower where it underflows, hence the clamp; the clamped
    entries then become exactly 0 rather than exp(exp_floor), so that a huge
    finite logit (a mask sentinel such as -1e38) times its probability is 0,
    not a large number.
    """
    shifted.clamp_(min=exp_floor).exp_()
    return torch.nn.functional.threshold_(shifted, math.exp(exp_floor + 0.01), 0.0)


def _exp_floor(dtype):
    # Shifted logits below the floor add nothing that a row sum of at least 1
    # can hold.
    return -80.0 if dtype in (torch.float32, torch.float16, torch.bfloat16) else -700.0


def times_power_of_two(tensor, exponent):
    """tensor * 2**exponent, in two factors so that neither overflows."""
    half = exponent // 2
    return tensor * (2.0**half) * (2.0 ** (exponent - half))


def unidentified_from_extremes(own_min, own_max, other_min, other_max):
    """(absent, separable) from each class's logit extremes (see
    ``AffineObjective.unidentified_classes``); numpy arrays or tensors alike.

    ``own_*`` over the class's own rows (``inf``/``-inf`` where it has none),
    ``other_*`` over every other row where the class is not masked.
    """
    has_own = own_min < float("inf")
    has_other = other_max > float("-inf")
    # max(own_max, other_max) > min(own_min, other_min), with operators only.
    varies = (
        (own_max > own_min)
        | (own_max > other_min)
        | (other_max > own_min)
        | (other_max > other_min)
    )
    threshold = (other_max <= own_min) | (own_max <= other_min)
    separable = has_own & (~has_other | (threshold & varies))
    return ~has_own, separable


class AffineConstraints:
    """The parameter constraints of an affine objective, whatever computes its sums.

    Shared by the in-memory objective and the one summed over chunks
    (:mod:`sklearn_calib._torch._affine_chunks`), so that the solver sees the
    same frozen classes, projections and null directions from both. Needs
    ``n_classes``, ``shape``, ``dtype`` and ``device``; ``freeze`` sets
    ``frozen``, ``free`` and ``hold_bias_mean``.
    """

    frozen = None
    free = None
    hold_bias_mean = False
    held = None
    free_rows = False

    def freeze(self, frozen, *, hold_bias_mean=False, held_columns=None):
        """Keep the classes marked in ``frozen`` (bool, (K,)) where they are.

        ``hold_bias_mean``: also keep the mean bias of the free classes (0, the
        start). When every frozen class lacks samples, a common shift of the
        free biases is a ray: it lowers the frozen classes' probabilities for
        ever, to wherever the solver stops. Held, they keep their
        temperature-scaling odds against the mean free class, and the fit is
        the one of those classes' biases tied to the free mean. (A frozen
        class with samples bounds that shift by itself: its own rows lose.)

        ``held_columns`` (matrix map; bool, (P,)): also hold, in each marked
        column of theta, the sum of the free rows' entries off the diagonal
        (0, the start), and the mean bias when the bias column is marked
        (then ``hold_bias_mean`` is read from it). Adding ``c`` to column
        ``j`` of every free row adds ``c x_ij`` to every free class's logit
        alike: where no penalty bounds that shift, it is a ray against the
        frozen classes wherever ``x_ij`` keeps a sign (always for
        log-probabilities). Holding the off-diagonal sum fixes that shift
        (with two free classes or more) and keeps every diagonal map of the
        free rows, the vector map's, feasible.
        """
        self.hold_bias_mean = False
        self.held = None
        if frozen is None or not bool(frozen.any()):
            self.frozen = self.free = None
            return
        self.frozen = frozen
        self.free = torch.nonzero(~frozen).squeeze(1)
        # A common shift of the free rows of W moves them against the frozen
        # ones: no longer invisible.
        self.free_rows = False
        if held_columns is not None:
            hold_bias_mean = bool(held_columns[-1])
            # held[i, j] = 1 on the entries whose sum column j holds: the
            # free rows, off the diagonal.
            k = self.n_classes
            held = torch.zeros((k, k), dtype=torch.float64, device=self.device)
            held[:, held_columns[:-1]] = 1.0
            held[frozen] = 0.0
            held.fill_diagonal_(0.0)
            if bool(held.any()):
                self.held = held
        self.hold_bias_mean = hold_bias_mean

    def project(self, direction):
        """Remove the components along which the objective cannot change.

        The exact gradient has none; rounding has a little, which a Newton
        step would otherwise amplify. Frozen classes do not move. With a
        frozen class (whose bias stays put) a shift of the other biases is
        no longer invisible, so then the biases are left alone, unless their
        mean is held (see ``freeze``; so are the held columns' sums).
        """
        direction = direction.clone()
        if self.frozen is not None:
            direction[self.frozen] = 0.0
            if self.hold_bias_mean:
                free_bias = direction[self.free, -1]
                direction[self.free, -1] = free_bias - free_bias.mean()
            if self.held is not None:
                count = self.held.sum(dim=0).clamp(min=1.0)
                coef = direction[:, :-1]
                mean = (coef * self.held).sum(dim=0) / count
                direction[:, :-1] = coef - self.held * mean
        else:
            direction[:, -1] -= direction[:, -1].mean()
        if self.free_rows:
            direction[:, :-1] -= direction[:, :-1].mean(dim=0, keepdim=True)
        return direction

    def null_basis(self):
        """Orthonormal basis of the projected-out directions, over free parameters.

        Columns of a (F P, m) matrix in the layout of theta[free].reshape(-1),
        or None.
        """
        n_free = self.n_classes if self.free is None else int(self.free.numel())
        p = self.shape[1]
        columns = []
        if self.frozen is None or self.hold_bias_mean:
            bias = torch.zeros((n_free, p), dtype=torch.float64)
            bias[:, -1] = 1.0 / math.sqrt(n_free)
            columns.append(bias.reshape(-1))
        if self.free_rows:
            for j in range(p - 1):
                shift = torch.zeros((n_free, p), dtype=torch.float64)
                shift[:, j] = 1.0 / math.sqrt(n_free)
                columns.append(shift.reshape(-1))
        elif self.held is not None:
            held = self.held[self.free].cpu()
            for j in torch.nonzero(held.any(dim=0)).squeeze(1).tolist():
                shift = torch.zeros((n_free, p), dtype=torch.float64)
                shift[:, j] = held[:, j] / math.sqrt(float(held[:, j].sum()))
                columns.append(shift.reshape(-1))
        if not columns:
            return None
        return torch.stack(columns, dim=1).to(self.device)

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


class AffineObjective(AffineConstraints):
    """Weighted NLL (+ penalty) of softmax of an affine map, with derivatives.

    ``frozen`` (vector map) marks classes whose parameters stay at the start;
    ``project`` zeroes their directions, and ``free`` indexes the others.
    """

    def __init__(self, features, y, weights, kind, penalty, mask=None):
        n_rows, n_classes = features.shape
        device = features.device
        self.features = features
        self.device = device
        self.mask = mask
        self.y = y
        self.kind = kind
        self.n_classes = n_classes
        self.dtype = features.dtype
        weights = weights.to(torch.float64)
        self.weights64 = weights / weights.sum()
        limit = _CUDA_BLOCK_ELEMENTS if features.is_cuda else CPU_BLOCK_ELEMENTS
        self.block_rows = max(1, min(n_rows, limit // n_classes))
        self._buffers = {}
        self.shape = (n_classes, 2 if kind == "vector" else n_classes + 1)
        self.n_evals = 0
        self.frozen = None
        self.free = None
        self.hold_bias_mean = False
        self.held = None
        self.track_curvature = False
        self.last_curvature = None

        # The penalty 1/2 rho (theta - centre)^2, entry by entry: the diagonal
        # scales (column 0 of the vector map) pulled towards centre, the
        # off-diagonal entries and the biases towards 0.
        rho = torch.zeros(self.shape, dtype=torch.float64, device=device)
        centre = torch.zeros(self.shape, dtype=torch.float64, device=device)
        rho[:, -1] = penalty.bias
        if kind == "vector":
            rho[:, 0] = penalty.diagonal
            centre[:, 0] = penalty.centre
        elif n_classes > 1:
            rho[:, :-1] = penalty.off_diagonal
            rho[:, :-1].fill_diagonal_(penalty.diagonal)
            centre[:, :-1].fill_diagonal_(penalty.centre)
        else:
            rho[:, 0] = penalty.diagonal
            centre[:, 0] = penalty.centre
        self.rho = rho
        self.centre = centre
        self.penalised = bool(rho.any())
        # Without a penalty on W, adding the same row vector to every row of W
        # changes nothing; adding a constant to every bias never changes the
        # NLL, and a penalty equal on every bias is lowest at mean 0.
        self.free_rows = kind == "matrix" and not bool(rho[:, :-1].any())

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

    def _spare_for(self, dtype):
        """A second preallocated block, for the curvature of the vector map."""
        key = ("spare", dtype)
        if key not in self._buffers:
            shape = (self.block_rows, self.n_classes)
            device = self.features.device
            self._buffers[key] = torch.empty(shape, dtype=dtype, device=device)
        return self._buffers[key]

    def _affine(self, theta, x, out=None):
        coef = theta[:, :-1].to(x.dtype)
        bias = theta[:, -1].to(x.dtype)
        if self.kind == "vector":
            return torch.addcmul(bias, x, coef.squeeze(1), out=out)
        return torch.addmm(bias, x, coef.T, out=out)

    def _masked(self, out, rows):
        """Masked entries of a block of calibrated logits become -inf."""
        if self.mask is not None:
            out.masked_fill_(self.mask[rows], float("-inf"))
        return out

    def evaluate(self, theta, *, curvature=False):
        """Loss, projected gradient and (vector map, optionally) 2 x 2 blocks.

        The blocks are sum_i w_i q_ik (1 - q_ik) times (z_ik^2, z_ik, 1).
        With ``track_curvature`` set they are computed on every evaluation
        and kept as ``last_curvature``.
        """
        loss, grad, curv = self.sums(theta, curvature=curvature)
        return loss, self.project(grad), curv

    def sums(self, theta, *, curvature=False):
        """``evaluate`` before the projection: the plain weighted means.

        Means over rows are linear in the rows, so the chunked objective adds
        these (times each chunk's weight) and projects the total.
        """
        self.n_evals += 1
        curvature = curvature or self.track_curvature
        dtype = self.dtype
        buffer, converted, weights = self._buffers_for(dtype)
        spare = self._spare_for(dtype) if curvature else None
        exp_floor = _exp_floor(dtype)
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
            out = self._masked(self._affine(theta, x, out=buffer[: x.shape[0]]), rows)
            row_max = out.amax(dim=1, keepdim=True)
            out.sub_(row_max)
            # Each row's loss log(sum exp(f - max)) - (f_y - max) and gradient
            # w (q - 1[y]) x are formed row by row: a row of logits near 1e20
            # whose label is its maximum contributes ~0 exactly, where sums
            # over rows minus a label sum lose every digit below 1e20 * eps.
            y_block = self.y[rows].view(-1, 1)
            true_shifted = out.gather(1, y_block).squeeze(1)
            if self.mask is not None:
                # a masked label only on rows of zero weight: 0 * finite
                true_shifted.clamp_(min=torch.finfo(true_shifted.dtype).min)
            _exp_below_max_(out, exp_floor)
            row_sum = out.sum(dim=1, keepdim=True)
            row_loss = row_sum.squeeze(1).log().sub_(true_shifted)
            loss += torch.dot(self.weights64[rows], row_loss.to(torch.float64))
            # out becomes w_i q_ik, the weighted probabilities.
            out.mul_(w[:, None] / row_sum)
            if curvature:
                # w q (1 - q) = w q - (w q)^2 / w, on rows with w > 0, in a
                # preallocated block (this runs on every pass).
                safe_w = torch.where(w > 0, w, torch.ones_like(w))
                c = torch.mul(out, out, out=spare[: x.shape[0]])
                c.div_(safe_w[:, None])
                torch.sub(out, c, out=c)
                curv[:, 2] += c.sum(dim=0).to(torch.float64)
                curv[:, 1] += c.mul_(x).sum(dim=0).to(torch.float64)
                curv[:, 0] += c.mul_(x).sum(dim=0).to(torch.float64)
            # out becomes w_i (q_ik - 1[y_i = k]).
            out.scatter_add_(1, y_block, -w[:, None])
            grad[:, -1] += out.sum(dim=0).to(torch.float64)
            if self.kind == "vector":
                grad[:, 0] += out.mul_(x).sum(dim=0).to(torch.float64)
            else:
                grad[:, :-1] += (out.T @ x).to(torch.float64)
        offset = theta - self.centre if self.penalised else theta
        penalty = 0.5 * torch.sum(self.rho * offset * offset)
        loss = float(loss + penalty)
        grad += self.rho * offset
        self.last_curvature = curv
        return loss, grad, curv

    def class_mass(self, theta):
        """sum_i w_i q_ik for every class k (float64, exact zeros kept)."""
        mass = torch.zeros(self.n_classes, dtype=torch.float64, device=theta.device)
        for rows in self._blocks(max(1, CPU_BLOCK_ELEMENTS // self.n_classes)):
            _, q = self._probabilities(theta, rows)
            mass += self.weights64[rows] @ q
        return mass

    def ray_derivatives(self, beta, rows=None):
        """L'(beta), L''(beta) along theta = (beta * identity, 0).

        There f_i = beta x_i (masked entries -inf), the temperature-scaling
        problem: L' = mean_w(E_q[x] - x_y), L'' = mean_w(Var_q[x]). Per row,
        the features are shifted by their maximum (d <= 0), so exp never
        overflows and the variance loses little to cancellation. ``rows``: an
        index tensor of a subsample (with its weights renormalised).
        """
        if rows is None:
            features, mask, y, w = self.features, self.mask, self.y, self.weights64
        else:
            features, y, w = self.features[rows], self.y[rows], self.weights64[rows]
            mask = None if self.mask is None else self.mask[rows]
            w = w / w.sum().clamp(min=1e-300)
        exp_floor = _exp_floor(features.dtype)
        first = second = 0.0
        n_rows = features.shape[0]
        step = max(1, CPU_BLOCK_ELEMENTS // self.n_classes)
        for start in range(0, n_rows, step):
            block = slice(start, start + step)
            d = features[block]
            if mask is not None:
                d = d.masked_fill(mask[block], float("-inf"))
            d = d - d.amax(dim=1, keepdim=True)
            e = _exp_below_max_(d * beta, exp_floor)
            if mask is not None:
                d.masked_fill_(mask[block], 0.0)
            s0 = e.sum(dim=1).to(torch.float64)
            e.mul_(d)
            s1 = e.sum(dim=1).to(torch.float64)
            s2 = torch.linalg.vecdot(e, d).to(torch.float64)
            mean = s1 / s0
            true = d.gather(1, y[block].view(-1, 1)).squeeze(1).to(torch.float64)
            wb = w[block]
            first += float((wb * (mean - true)).sum())
            second += float((wb * (s2 / s0 - mean * mean)).sum())
        return first, second

    def _probabilities(self, theta, rows, complement=False):
        """float64 features and softmax probabilities of one block of rows.

        With ``complement``, also ``1 - q`` without its cancellation at the
        row's most likely class: there it is the other classes' sum.
        """
        x = self.features[rows].to(torch.float64)
        out = self._affine(theta, x)
        if self.mask is not None:
            out = out.masked_fill(self.mask[rows], float("-inf"))
        if not complement:
            return x, torch.softmax(out, dim=1)
        top = out.argmax(dim=1, keepdim=True)
        e = out.sub_(out.gather(1, top)).exp_()
        total = e.sum(dim=1, keepdim=True)
        others = e.scatter(1, top, 0.0).sum(dim=1, keepdim=True)
        q = e.div_(total)
        rest = (1.0 - q).scatter_(1, top, others / total)
        return x, q, rest

    def hessian(self, theta):
        """The exact Hessian over the free classes, (F P, F P) in float64."""
        k, p = self.shape
        free = self.free
        n_free = k if free is None else int(free.numel())
        n_params = n_free * p
        hessian = torch.zeros(
            (n_params, n_params), dtype=torch.float64, device=theta.device
        )
        diagonal_blocks = torch.zeros(
            (n_free, p, p), dtype=torch.float64, device=theta.device
        )
        rows_per_block = max(1, 2**20 // max(n_params, k))
        for rows in self._blocks(rows_per_block):
            x, q, rest = self._probabilities(theta, rows, complement=True)
            w = self.weights64[rows]
            if self.kind == "vector":
                if free is not None:
                    x, q, rest = x[:, free], q[:, free], rest[:, free]
                xk = torch.stack([x, torch.ones_like(x)], dim=2)  # (n, F, 2)
            else:
                if free is not None:
                    q, rest = q[:, free], rest[:, free]
                xa = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
                xk = xa[:, None, :].expand(-1, n_free, -1)  # (n, F, K+1)
            # Off the diagonal blocks, -sum w q_k q_j x_k x_j^T. The diagonal
            # blocks are summed as w q (1 - q) x x^T, not as w q x x^T minus
            # (w q x)(q x)^T: the two sums over rows would cancel, leaving the
            # rounding of a row of logits near 1e20 (1e40 * eps) for its ~0.
            v = (q[:, :, None] * xk).reshape(-1, n_params)
            hessian -= v.T @ (v * w[:, None])
            wq = (w[:, None] * q * rest)[:, :, None] * xk
            diagonal_blocks += torch.einsum("nkp,nkr->kpr", wq, xk)
        for j in range(n_free):
            hessian[j * p : (j + 1) * p, j * p : (j + 1) * p] = diagonal_blocks[j]
        rho = self.rho if free is None else self.rho[free]
        hessian.diagonal().add_(rho.reshape(-1))
        return hessian

    def _preconditioner_rows(self, theta):
        """float64 features, weights and q (1 - q) on evenly spaced rows."""
        n_rows = self.features.shape[0]
        rows = spaced_rows(n_rows, _PRECONDITIONER_ROWS, theta.device)
        x = self.features[rows].to(torch.float64)
        out = self._affine(theta, x)
        if self.mask is not None:
            out = out.masked_fill(self.mask[rows], float("-inf"))
        q = torch.softmax(out, dim=1)
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
        # float64: the blocks precondition fits with unpenalised directions,
        # which a float32 block can make useless.
        root_c = c.sqrt().T.to(torch.float64)  # (K, m)
        xa = xa.to(torch.float64)
        blocks = torch.empty(
            (k, k + 1, k + 1), dtype=torch.float64, device=theta.device
        )
        # Classes in groups keep the (group, m, K + 1) temporary small.
        group = max(1, 2**22 // (xa.shape[0] * xa.shape[1]))
        for start in range(0, k, group):
            scaled = root_c[start : start + group, :, None] * xa
            blocks[start : start + group] = scaled.transpose(1, 2) @ scaled
        return blocks

    def unidentified_classes(self):
        """Classes whose (w_k, b_k) have no finite optimum (vector map), exactly.

        Returns (absent, separable), boolean (K,). Absent: no sample with
        positive weight. Separable: some (dw, db) != 0 has dw x_ik + db >= 0
        on the class's own rows and <= 0 on every other row where x_ik is not
        masked, strictly somewhere; moving (w_k, b_k) that way lowers every
        row's NLL, for ever. In one dimension that is a threshold: the largest
        x_ik of the other rows at most the smallest of the own rows (or the
        reverse), unless all of them are equal, or no other row.
        """
        k = self.n_classes
        device = self.features.device
        dtype = self.features.dtype  # comparisons are exact in any dtype
        inf = float("inf")
        own_min = torch.full((k,), inf, dtype=dtype, device=device)
        own_max = torch.full((k,), -inf, dtype=dtype, device=device)
        other_min = own_min.clone()
        other_max = own_max.clone()
        # One pass, with small blocks: it makes two masked copies of each.
        for rows in self._blocks(max(1, CPU_BLOCK_ELEMENTS // k)):
            x = self.features[rows]
            y = self.y[rows]
            counted = self.weights64[rows] > 0
            true = x.gather(1, y.view(-1, 1)).squeeze(1)
            own_min.scatter_reduce_(0, y[counted], true[counted], "amin")
            own_max.scatter_reduce_(0, y[counted], true[counted], "amax")
            # One copy: the entries that are not "other rows" go to -inf for
            # the maximum, then to +inf for the minimum.
            ignored = None if self.mask is None else self.mask[rows]
            if not bool(counted.all()):
                unweighted = (~counted)[:, None].expand_as(x)
                ignored = unweighted if ignored is None else ignored | unweighted
            own = y.view(-1, 1)
            work = x.clone()
            if ignored is not None:
                work.masked_fill_(ignored, -inf)
            other_max = torch.maximum(other_max, work.scatter_(1, own, -inf).amax(0))
            if ignored is not None:
                work.masked_fill_(ignored, inf)
            other_min = torch.minimum(other_min, work.scatter_(1, own, inf).amin(0))
        return unidentified_from_extremes(own_min, own_max, other_min, other_max)
