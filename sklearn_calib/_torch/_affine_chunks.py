"""The vector map's objective summed over chunks, for the one affine solver.

A chunked fit evaluates the same objective as the in-memory fit
(:class:`~sklearn_calib._torch._affine_objective.AffineObjective`), one chunk
at a time: each chunk's weighted means times its total weight are summed by
the chunk source's reduction (one pass over the data per evaluation), then
divided by the total weight. The sums are linear in the rows, so the total is
the in-memory objective; the projections, frozen classes and null directions
are applied once to the total (:class:`AffineConstraints`), and the optimiser
of :mod:`sklearn_calib._torch._affine` runs on it unchanged.

Chunks are evaluated in float64 (the sums of every pass ending in float64
whatever the logits' dtype), so the chunked solve has no float32 stage.

``prepare(logits, codes, weights)`` is the calibrator's own map from a chunk
to the problem's rows: ``(features, y, weights, mask)`` as numpy arrays, the
features finite, ``mask`` the entries whose calibrated logit is -inf (or
None). It runs where the chunk is (a dask worker), so it must be picklable.
"""

import functools

import numpy as np
import torch

from ._affine_objective import AffineConstraints, AffineObjective, Penalty

# What one chunk contributes: the pieces of a pass, in order after its weight.
_GRADIENT = "gradient"
_CURVATURE = "curvature"
_HESSIAN = "hessian"
_GRADIENT_HESSIAN = "gradient_hessian"


def _chunk_objective(prepared):
    features, y, weights, mask = prepared
    return AffineObjective(
        torch.from_numpy(np.ascontiguousarray(features, dtype=np.float64)),
        torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float64)),
        "vector",
        Penalty(),
        None if mask is None else torch.from_numpy(np.ascontiguousarray(mask)),
    )


def affine_chunk_sums(
    logits,
    codes,
    weights,
    *,
    prepare,
    n_classes,
    what,
    theta,
    frozen=None,
):
    """``[W, W * (the objective's means of one chunk)]``, W its total weight.

    ``what``: "gradient" (loss, gradient), "curvature" (and the 2 x 2 class
    blocks), "hessian" (the Hessian over the classes not ``frozen``),
    or "gradient_hessian" (loss, gradient and that Hessian).
    """
    prepared = prepare(logits, codes, weights)
    size = _sizes(n_classes, what, frozen)
    out = np.zeros(1 + size)
    total = float(np.sum(prepared[2]))
    if not total > 0:
        return out
    objective = _chunk_objective(prepared)
    out[0] = total
    if what == _HESSIAN:
        objective.freeze(None if frozen is None else torch.from_numpy(frozen))
        out[1:] = objective.hessian(torch.from_numpy(theta)).reshape(-1).numpy()
    else:
        loss, grad, curv = objective.sums(
            torch.from_numpy(theta), curvature=what == _CURVATURE
        )
        out[1] = loss
        out[2 : 2 + grad.numel()] = grad.reshape(-1).numpy()
        if curv is not None:
            out[2 + grad.numel() :] = curv.reshape(-1).numpy()
        if what == _GRADIENT_HESSIAN:
            objective.freeze(None if frozen is None else torch.from_numpy(frozen))
            hessian = objective.hessian(torch.from_numpy(theta))
            out[2 + grad.numel() :] = hessian.reshape(-1).numpy()
    out[1:] *= total
    return out


def _sizes(n_classes, what, frozen):
    n_free = n_classes if frozen is None else int((~frozen).sum())
    if what == _HESSIAN:
        return (2 * n_free) ** 2
    if what == _GRADIENT_HESSIAN:
        return 1 + 2 * n_classes + (2 * n_free) ** 2
    return 1 + 2 * n_classes + (3 * n_classes if what == _CURVATURE else 0)


class ChunkedAffineObjective(AffineConstraints):
    """The vector map's weighted NLL as sums over chunks (the solver's interface).

    Parameters
    ----------
    reduce : callable
        ``reduce(func)``: the sum of ``func(logits, codes, weights)`` over
        every chunk (one pass).
    prepare : callable
        A chunk to the problem's rows (see the module docstring).
    n_classes : int
        Columns of the prepared features.

    Attributes
    ----------
    with_hessian : bool, default False
        Set by the solver for Newton: every evaluation then also sums the
        Hessian, which ``hessian`` returns for the same point without another
        pass (a Newton step needs both at the point the line search accepted).
    """

    kind = "vector"
    dtype = torch.float64

    def __init__(self, reduce, prepare, n_classes):
        self.reduce = reduce
        self.with_hessian = False
        self._last_hessian = None
        self.prepare = prepare
        self.n_classes = n_classes
        self.shape = (n_classes, 2)
        self.device = torch.device("cpu")
        self.rho = torch.zeros(self.shape, dtype=torch.float64)
        self.n_evals = 0
        self.track_curvature = False
        self.last_curvature = None

    def _pass(self, what, **params):
        sums = self.reduce(
            functools.partial(
                affine_chunk_sums,
                prepare=self.prepare,
                n_classes=self.n_classes,
                what=what,
                **params,
            )
        )
        if not sums[0] > 0:
            raise FloatingPointError("the chunks hold no row with a positive weight")
        return sums[1:] / sums[0]

    def evaluate(self, theta, *, curvature=False):
        """Loss, projected gradient and (optionally) the 2 x 2 class blocks."""
        self.n_evals += 1
        curvature = curvature or self.track_curvature
        k = self.n_classes
        if self.with_hessian and not curvature:
            sums = self._pass(
                _GRADIENT_HESSIAN, theta=theta.cpu().numpy(), frozen=self._frozen()
            )
            self._last_hessian = (theta.clone(), self._square(sums[1 + 2 * k :]))
        else:
            sums = self._pass(
                _CURVATURE if curvature else _GRADIENT, theta=theta.cpu().numpy()
            )
        grad = torch.from_numpy(sums[1 : 1 + 2 * k].reshape(k, 2).copy())
        curv = None
        if curvature:
            curv = torch.from_numpy(sums[1 + 2 * k :].reshape(k, 3).copy())
        self.last_curvature = curv
        return float(sums[0]), self.project(grad), curv

    def hessian(self, theta):
        """The exact Hessian over the free classes, (F P, F P) in float64."""
        if self._last_hessian is not None and torch.equal(self._last_hessian[0], theta):
            return self._last_hessian[1]
        sums = self._pass(_HESSIAN, theta=theta.cpu().numpy(), frozen=self._frozen())
        return self._square(sums)

    def _frozen(self):
        return None if self.frozen is None else self.frozen.cpu().numpy()

    @staticmethod
    def _square(flat):
        n = int(round(np.sqrt(flat.shape[0])))
        return torch.from_numpy(flat.reshape(n, n).copy())
