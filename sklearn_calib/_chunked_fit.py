"""Fitting calibrators from data in chunks, in memory bounded by the chunk size.

:meth:`BaseCalibrator.fit` sends dask, zarr and memmap arrays here, and
:meth:`BaseCalibrator.fit_chunks` sends iterables of chunks. A fit is a few
reductions over the chunks (see :mod:`sklearn_calib._chunks`): a first pass
validates every chunk and collects the labels, the weights and the width of
the logits; then each method makes the passes its statistics need.

- TemperatureScaling: exact. The in-memory bracketed Newton iteration on the
  sums of the derivatives of the NLL in 1/T, one pass per iteration
  (``sklearn_calib._torch._chunked``).
- VectorScaling, PlattScaling: exact. Newton's method on the NLL, whose value,
  gradient and Hessian are sums over samples (one pass per iteration, plus a
  pass per halved step), or L-BFGS on value and gradient for more than 64
  classes; stopped on the same gradient tolerance as in memory.
- HistogramBinning: exact. Bin counts are sums; equal-mass edges are selected
  exactly by radix selection (a few passes).
- SMART: mini-batch Adam, one step per chunk; see :func:`_fit_smart`.

Masked logits (``-inf``) follow the in-memory rules: the first pass checks
every chunk with ``check_masked_logits``, the likelihood fits refuse a masked
true class chunk by chunk, and a masked entry adds exactly 0 to every sum.

Every chunk function below is a module-level callable (a ``functools.partial``
of one), so that dask can ship it to the worker processes of a cluster.
"""

import functools

import numpy as np
from sklearn.utils.multiclass import type_of_target

from ._scaling import _check_true_class_unmasked, _mask_of
from .metrics._accumulators import (
    BinnedCalibrationAccumulator,
    _EqualMassSelection,
    digit_bits_for,
)
from .metrics._bin_statistics import block_top_label, row_blocks, uniform_bin_index
from .utils._math import softmax
from .utils._validation import (
    check_device,
    check_labels_per_row,
    check_masked_logits,
    resolve_classes,
)

# Rows per block inside a chunk for the float64 work of the affine fits.
_BLOCK_ELEMENTS = 2**18
# Newton for the affine maps up to this many parameters (vector scaling up to
# 64 classes, Platt always), as the in-memory solver; L-BFGS beyond.
_NEWTON_PARAMS = 128
_ARMIJO = 1e-4
_MAX_HALVINGS = 40
# At most about this many evaluations of SMART's full-data loss per fit.
_SMART_EVALUATIONS = 100
# Chunks prepared for SMART's steps are kept when all of them take at most
# this much memory (small data split into chunks); larger data is re-read.
_SMART_CACHE_BYTES = 2**28


# --- the first pass: validation, labels, weights ---------------------------------


def _chunk_arrays(X, y, w):
    """One chunk as validated numpy arrays (logits float32/64, 1-D labels, weights)."""
    X = np.asarray(X)
    if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise TypeError(f"X must hold numbers (logits); got dtype {X.dtype}.")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_classes); got {X.ndim} dims.")
    y = check_labels_per_row(np.asarray(y), X.shape[0])
    if w is not None:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or w.shape[0] != X.shape[0]:
            raise ValueError(
                f"sample_weight must have shape ({X.shape[0]},); got {w.shape}."
            )
    return X, y, w


def _scan_chunk(X, y, w):
    X, y, w = _chunk_arrays(X, y, w)
    # -inf marks a masked class, as in memory; NaN, +inf and rows without a
    # finite logit are refused by the same check.
    check_masked_logits(X)
    if w is not None and w.shape[0]:
        if not np.all(np.isfinite(w)):
            raise ValueError("sample_weight contains NaN or infinity.")
        if w.min() < 0:
            raise ValueError("Negative values in data passed to sample_weight")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError("Input y contains NaN or infinity.")
    labels, inverse = np.unique(y, return_inverse=True)
    label_weight = np.bincount(
        inverse.ravel(), weights=w, minlength=labels.shape[0]
    ).astype(np.float64)
    square = float(X.shape[0]) if w is None else float(w @ w)
    # Masked (-inf) entries: the weight of the rows where each class is open
    # (the binning methods fit a class on those rows), and per label the
    # weight of the rows without any masked entry (Platt's counts).
    weights = np.ones(X.shape[0]) if w is None else w
    n_classes = 2 if X.shape[1] == 1 else X.shape[1]
    mask = _mask_of(X)
    if mask is None:
        open_weight = np.full(n_classes, weights.sum())
        open_label_weight = label_weight.copy()
    else:
        if X.shape[1] == 1:
            # One score column s stands for (0, s): s = -inf masks class 1.
            mask = np.hstack([np.zeros_like(mask), mask])
        open_weight = weights @ ~mask
        open_rows = ~mask.any(axis=1)
        open_label_weight = np.bincount(
            inverse.ravel()[open_rows],
            weights=weights[open_rows],
            minlength=labels.shape[0],
        ).astype(np.float64)
    return {
        "n_chunks": 1,
        "n_samples": X.shape[0],
        "n_cols": X.shape[1],
        "dtypes": {X.dtype.str},
        "labels": labels,
        "label_weight": label_weight,
        "open_label_weight": open_label_weight,
        "open_weight": open_weight,
        "weight_squares": square,
    }


def _merge_scans(a, b):
    if a["n_cols"] != b["n_cols"] and a["n_samples"] and b["n_samples"]:
        raise ValueError(
            f"The chunks have different numbers of logit columns: {a['n_cols']} "
            f"and {b['n_cols']}."
        )
    labels = np.union1d(a["labels"], b["labels"])
    weight = np.zeros(labels.shape[0])
    open_label_weight = np.zeros(labels.shape[0])
    for part in (a, b):
        where = np.searchsorted(labels, part["labels"])
        weight[where] += part["label_weight"]
        open_label_weight[where] += part["open_label_weight"]
    # An empty chunk may have any width: its (zero) open weights are dropped.
    if not b["n_samples"]:
        open_weight = a["open_weight"]
    elif not a["n_samples"]:
        open_weight = b["open_weight"]
    else:
        open_weight = a["open_weight"] + b["open_weight"]
    return {
        "n_chunks": a["n_chunks"] + b["n_chunks"],
        "n_samples": a["n_samples"] + b["n_samples"],
        "n_cols": a["n_cols"] if a["n_samples"] else b["n_cols"],
        "dtypes": a["dtypes"] | b["dtypes"],
        "labels": labels,
        "label_weight": weight,
        "open_label_weight": open_label_weight,
        "open_weight": open_weight,
        "weight_squares": a["weight_squares"] + b["weight_squares"],
    }


class ChunkedData:
    """A validated chunk source and what the first pass learnt about it."""

    def __init__(self, estimator, source, *, sample_rows=None):
        # ``sample_rows(n_samples)``: rows to gather, in the first pass when
        # the number of rows is known before reading (dask arrays, files).
        self.sample = None
        if sample_rows is not None and source.n_samples is not None:
            scan, raw = source.reduce(
                _scan_chunk, _merge_scans, gather=sample_rows(source.n_samples)
            )
            self._raw_sample = raw
        else:
            scan = source.reduce(_scan_chunk, _merge_scans)
            self._raw_sample = None
        if scan["n_samples"] == 0:
            raise ValueError(
                "Found array with 0 sample(s) while a minimum of 1 is required."
            )
        target_type = type_of_target(scan["labels"])
        if target_type not in ("binary", "multiclass"):
            raise ValueError(
                f"Unknown label type: {target_type}. Calibrators need class labels."
            )
        self.source = source
        self.n_chunks = int(scan["n_chunks"])
        self.n_samples = int(scan["n_samples"])
        self.n_cols = int(scan["n_cols"])
        # Mixed dtypes across chunks compute in float64, as np.concatenate would.
        dtypes = {np.dtype(d) for d in scan["dtypes"]}
        self.dtype = (
            np.dtype(np.float32)
            if dtypes == {np.dtype(np.float32)}
            else (np.dtype(np.float64))
        )
        # The estimator's classes= states the label of each column (in column
        # order, not necessarily sorted) where the labels cannot say it.
        classes, _ = resolve_classes(
            scan["labels"], self.n_cols, getattr(estimator, "classes", None)
        )
        self.classes = classes
        self.label_codes = _LabelCodes(classes)
        self.n_classes = 2 if self.n_cols == 1 else self.n_cols
        self.total_weight = float(scan["label_weight"].sum())
        if not self.total_weight > 0:
            raise ValueError("sample_weight is zero for every sample; nothing to fit.")
        # Weight of each class, in the order of classes.
        class_weight = np.zeros(classes.shape[0])
        where = self.label_codes(scan["labels"])
        class_weight[where] = scan["label_weight"]
        self.class_weight = class_weight
        # Weight of each class over the rows without a masked entry, and of
        # the rows where each class is open (see _scan_chunk).
        open_class_weight = np.zeros(classes.shape[0])
        open_class_weight[where] = scan["open_label_weight"]
        self.open_class_weight = open_class_weight
        self.open_weight = np.asarray(scan["open_weight"], dtype=np.float64)
        self.weight_squares = float(scan["weight_squares"])
        self.weighted = source.weighted
        if sample_rows is not None:
            raw = self._raw_sample
            if raw is None:
                raw = source.gather(sample_rows(self.n_samples))
            self.sample = self.encode(*raw)
        estimator.classes_ = classes
        estimator.n_features_in_ = self.n_cols
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_

    def reduce(self, func, combine=None):
        """Reduce ``func(logits, codes, weights)`` over validated, encoded chunks."""
        task = functools.partial(
            _encoded_call, func=func, label_codes=self.label_codes, dtype=self.dtype
        )
        if combine is None:
            return self.source.reduce(task)
        return self.source.reduce(task, combine)

    def encode(self, X, y, w):
        return _encode_chunk(X, y, w, self.label_codes, self.dtype)

    def gather(self, rows):
        return self.encode(*self.source.gather(rows))


class _LabelCodes:
    """Labels to column indices, for classes in column order (sorted or not)."""

    def __init__(self, classes):
        self.order = np.argsort(classes, kind="stable")
        self.sorted = np.asarray(classes)[self.order]

    def __call__(self, labels):
        return self.order[np.searchsorted(self.sorted, labels)].astype(np.intp)


def _encode_chunk(X, y, w, label_codes, dtype):
    X, y, w = _chunk_arrays(X, y, w)
    logits = X.astype(dtype, copy=False)
    if logits.shape[1] == 1:
        logits = np.hstack([np.zeros_like(logits), logits])
    codes = label_codes(y)
    weights = np.ones(X.shape[0]) if w is None else w
    return logits, codes, weights


def _encoded_call(X, y, w, *, func, label_codes, dtype):
    return func(*_encode_chunk(X, y, w, label_codes, dtype))


def _check_true_class_open(logits, codes, weights):
    """The in-memory rule of the likelihood fits, for one chunk: no row with a
    positive weight may have its true class masked (its NLL is infinite)."""
    if logits.shape[0] == 0:
        return
    true = logits[np.arange(logits.shape[0]), codes]
    _check_true_class_unmasked(
        None, codes, np.isneginf(true) & (weights > 0), where="a chunk of X"
    )


# --- temperature scaling ---


def _temperature_sums(logits, codes, weights, *, beta, exponent):
    from ._torch._chunked import temperature_chunk_sums

    _check_true_class_open(logits, codes, weights)
    return temperature_chunk_sums(logits, codes, weights, beta, exponent)


def fit_temperature_chunks(data, max_iter=100):
    """The exact temperature solve over chunks: a ``TemperatureFit``."""
    from ._torch._chunked import fit_inverse_temperature_chunked, spaced_row_indices

    def reduce(beta, exponent):
        return data.reduce(
            functools.partial(_temperature_sums, beta=beta, exponent=exponent)
        )

    # The in-memory solver reads the logit scale and runs its warm start on
    # evenly spaced rows; gathering the same rows gives the same start.
    sample = data.sample
    if sample is None:
        sample = data.gather(spaced_row_indices(data.n_samples))
    result, _ = fit_inverse_temperature_chunked(
        sample, reduce, data.n_samples, max_iter=max_iter
    )
    return result


def _fit_temperature(estimator, data):
    estimator._store_temperature_fit(
        fit_temperature_chunks(data, max_iter=estimator.max_iter)
    )
    return estimator


# --- vector and Platt scaling: Newton / L-BFGS on sums ------------------------------


def _vector_sums(logits, codes, weights, *, coef, intercept, hessian):
    """``[W, sum w nll, grad (2K), Hessian (2K x 2K) if asked]`` of one chunk.

    Unnormalised sums over the rows; the NLL of ``softmax(coef * z + b)``.
    """
    n_classes = logits.shape[1]
    blocks = hessian == "blocks"
    size = 2 + 2 * n_classes
    if blocks:
        size += 3 * n_classes
    elif hessian:
        size += 4 * n_classes**2
    out = np.zeros(size)
    if logits.shape[0] == 0:
        return out
    _check_true_class_open(logits, codes, weights)
    g_w, g_b = np.zeros(n_classes), np.zeros(n_classes)
    if blocks:
        h = np.zeros((3, n_classes))
    elif hessian:
        h = np.zeros((2 * n_classes, 2 * n_classes))
    step = max(1, _BLOCK_ELEMENTS // n_classes)
    for start in range(0, logits.shape[0], step):
        rows = slice(start, start + step)
        z = logits[rows].astype(np.float64)
        w = weights[rows]
        y = codes[rows]
        mask = _mask_of(z)
        if mask is not None:
            # A masked entry has calibrated logit -inf whatever (w_k, b_k), as
            # in memory: feature 0 (so that -inf * 0 never makes a NaN in the
            # sums of z q) and output -inf (q = 0: no term in any sum).
            z[mask] = 0.0
        f = z * coef + intercept
        if mask is not None:
            f[mask] = -np.inf
        top = f.max(axis=1, keepdims=True)
        f -= top
        q = np.exp(f)
        norm = q.sum(axis=1, keepdims=True)
        q /= norm
        index = np.arange(z.shape[0])
        out[0] += w.sum()
        out[1] += w @ (np.log(norm[:, 0]) - f[index, y])
        residual = q.copy()
        residual[index, y] -= 1.0
        residual *= w[:, None]
        g_w += np.einsum("ij,ij->j", residual, z)
        g_b += residual.sum(axis=0)
        if blocks:
            # The 2 x 2 Hessian block (w_k, b_k) of every class.
            curvature = q * (1.0 - q) * w[:, None]
            h[0] += np.einsum("ij,ij->j", curvature * z, z)
            h[1] += np.einsum("ij,ij->j", curvature, z)
            h[2] += curvature.sum(axis=0)
        elif hessian:
            wq = q * w[:, None]
            qz = q * z
            wqz = wq * z
            k = n_classes
            h[:k, :k] += np.diag(np.einsum("ij,ij->j", wqz, z)) - wqz.T @ qz
            cross = np.diag(wqz.sum(axis=0)) - wqz.T @ q
            h[:k, k:] += cross
            h[k:, :k] += cross.T
            h[k:, k:] += np.diag(wq.sum(axis=0)) - wq.T @ q
    out[2 : 2 + n_classes] = g_w
    out[2 + n_classes : 2 + 2 * n_classes] = g_b
    if hessian:
        out[2 + 2 * n_classes :] = h.ravel()
    return out


def _platt_sums(logits, codes, weights, *, slope, intercept, targets, hessian):
    """``[W, sum w nll, grad (2), Hessian (2 x 2)]`` of the logistic map of one chunk.

    Soft targets ``t`` per class (Platt's, or 0/1): the loss of a row is
    ``softplus(u) - t u`` with ``u = a s + c``, ``s = z_1 - z_0``.
    """
    out = np.zeros(8)
    if logits.shape[0] == 0:
        return out
    s = logits[:, 1].astype(np.float64) - logits[:, 0]
    fixed = ~np.isfinite(s)
    if fixed.any():
        # As in memory: a masked class fixes the row's probability whatever
        # (a, c), so the row is left out of the fit, unless its label is the
        # masked class (an infinite NLL: a ValueError).
        _check_true_class_open(logits, codes, weights)
        keep = ~fixed
        s, codes, weights = s[keep], codes[keep], weights[keep]
    t = targets[codes]
    u = slope * s + intercept
    softplus = np.logaddexp(0.0, u)
    p = np.exp(u - softplus)  # sigmoid(u), stable for both signs
    out[0] = weights.sum()
    out[1] = weights @ (softplus - t * u)
    r = weights * (p - t)
    out[2], out[3] = r @ s, r.sum()
    if hessian:
        c = weights * p * (1.0 - p)
        out[4], out[5], out[7] = c @ (s * s), c @ s, c.sum()
        out[6] = out[5]
    return out


class _NewtonResult:
    def __init__(self, theta, n_iter, status, gradient, solver):
        self.theta = theta
        self.n_iter = n_iter
        self.status = status
        self.gradient = gradient
        self.solver = solver


def _newton_over_chunks(evaluate, theta, *, tol, max_iter, gauge=None):
    """Damped Newton on a convex loss whose value, gradient and Hessian are sums.

    ``evaluate(theta, hessian)`` returns the mean loss, gradient and Hessian
    (one pass over the chunks). Steps are Newton steps on the Hessian plus the
    gauge projector (directions that change nothing), solved by least squares
    so that directions without curvature keep their start value; a step that
    does not decrease the loss enough is halved (Armijo). Stops when the
    largest gradient entry is at most ``tol``.
    """
    loss, grad, hess = evaluate(theta, True)
    for n_iter in range(1, max_iter + 1):
        if np.max(np.abs(grad)) <= tol:
            return _NewtonResult(
                theta, n_iter - 1, "converged", np.max(np.abs(grad)), "Newton"
            )
        system = hess if gauge is None else hess + np.outer(gauge, gauge)
        direction = np.linalg.lstsq(system, -grad, rcond=None)[0]
        slope = grad @ direction
        if not slope < 0:
            direction, slope = -grad, -(grad @ grad)
        step = 1.0
        noise = 1e-13 * max(1.0, abs(loss))
        for _ in range(_MAX_HALVINGS):
            candidate = theta + step * direction
            new_loss, new_grad, new_hess = evaluate(candidate, True)
            if new_loss <= loss + _ARMIJO * step * slope + noise:
                break
            step *= 0.5
        else:
            return _NewtonResult(
                theta, n_iter, "stalled", np.max(np.abs(grad)), "Newton"
            )
        theta, loss, grad, hess = candidate, new_loss, new_grad, new_hess
    status = "converged" if np.max(np.abs(grad)) <= tol else "max_iter"
    return _NewtonResult(theta, max_iter, status, np.max(np.abs(grad)), "Newton")


def _block_preconditioner(blocks, n_classes):
    """``L^-T`` of the per-class 2 x 2 Hessian blocks ``L L^T``, as a function.

    Curvatures below a tiny fraction of the largest are floored, as in memory:
    a class without samples has (almost) none.
    """
    a, b, c = blocks
    floor = 1e-9 * max(float(np.max(a)), float(np.max(c)), 1e-300)
    a = np.maximum(a, floor)
    c = np.maximum(c, floor)
    # Cholesky of [[a, b], [b, c]]: l11 = sqrt(a), l21 = b / l11, l22 = sqrt(c - l21^2)
    l11 = np.sqrt(a)
    l21 = b / l11
    l22 = np.sqrt(np.maximum(c - l21**2, floor))

    def to_theta(phi):
        """theta offset = L^-T phi, class by class."""
        u, v = phi[:n_classes], phi[n_classes:]
        y2 = v / l22
        y1 = (u - l21 * y2) / l11
        return np.concatenate([y1, y2])

    def to_phi_grad(grad):
        """d/dphi = L^-1 d/dtheta."""
        gu, gv = grad[:n_classes], grad[n_classes:]
        x1 = gu / l11
        x2 = (gv - l21 * x1) / l22
        return np.concatenate([x1, x2])

    return to_theta, to_phi_grad


def _lbfgs_over_chunks(evaluate, theta, *, tol, max_iter, preconditioner=None):
    """L-BFGS (scipy) on value and gradient, one pass per evaluation.

    With a ``preconditioner`` ``(to_theta, to_phi_grad)``, the solve runs in
    the variables ``phi`` of ``theta = theta0 + to_theta(phi)``, where the
    per-class Hessian blocks at the start are the identity. It stops when the
    largest gradient entry in ``theta`` is at most ``tol``.
    """
    from scipy.optimize import minimize

    if preconditioner is None:
        preconditioner = (lambda phi: phi, lambda grad: grad)
    to_theta, to_phi_grad = preconditioner
    start = theta.copy()
    seen = {}

    def fun(phi):
        loss, grad, _ = evaluate(start + to_theta(phi), False)
        seen[phi.tobytes()] = float(np.max(np.abs(grad)))
        return loss, to_phi_grad(grad)

    iterations = [0]
    stopped = {}

    class _Converged(Exception):
        pass

    def callback(xk):
        # The current point as a plain array: scipy < 1.11 passes only that
        # (and lets no StopIteration end the solve), so stopping goes through
        # an exception of our own on every version.
        iterations[0] += 1
        if seen.get(np.asarray(xk).tobytes(), np.inf) <= tol:
            stopped["x"] = np.array(xk, dtype=np.float64)
            raise _Converged

    n = theta.shape[0]
    try:
        solution = minimize(
            fun,
            np.zeros(n),
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options={"maxiter": max_iter, "gtol": 0.0, "ftol": 0.0, "maxcor": 10},
        )
        phi, n_iter = solution.x, solution.nit
    except _Converged:
        phi, n_iter = stopped["x"], iterations[0]
    theta = start + to_theta(phi)
    gradient = seen.get(phi.tobytes())
    if gradient is None:
        gradient = float(np.max(np.abs(evaluate(theta, False)[1])))
    if gradient <= tol:
        status = "converged"
    elif n_iter >= max_iter:
        status = "max_iter"
    else:
        status = "stalled"
    return _NewtonResult(theta, n_iter, status, gradient, "L-BFGS")


class _AffineChunkedFit:
    """What ``_AffineCalibrator._check_affine_result`` reads of a solve."""

    def __init__(self, coef, intercept, newton):
        self.coef = coef
        self.intercept = intercept
        self.n_iter = newton.n_iter
        self.status = newton.status
        self.gradient = newton.gradient
        self.solver = newton.solver


def _separation_extremes(logits, codes, weights):
    """Per class: the extremes of its logit on its own rows and on the others.

    ``(own_min, own_max, other_min, other_max)`` concatenated, over rows of
    positive weight, masked entries left out; combined by min and max.
    """
    k = logits.shape[1]
    counted = weights > 0
    x = np.asarray(logits[counted], dtype=np.float64)
    y = codes[counted]
    extremes = np.concatenate([np.full(k, np.inf), np.full(k, -np.inf)] * 2)
    if not y.shape[0]:
        return extremes
    rows = np.arange(y.shape[0])
    true = x[rows, y]
    np.minimum.at(extremes[:k], y, true)
    np.maximum.at(extremes[k : 2 * k], y, true)
    masked = np.isneginf(x)
    x[rows, y] = -np.inf  # masked entries are -inf already
    extremes[3 * k :] = x.max(axis=0)
    x[masked] = np.inf
    x[rows, y] = np.inf
    extremes[2 * k : 3 * k] = x.min(axis=0)
    return extremes


def _combine_extremes(a, b):
    k = a.shape[0] // 4
    return np.concatenate(
        [np.minimum(a[:k], b[:k]), np.maximum(a[k : 2 * k], b[k : 2 * k])]
        + [np.minimum(a[2 * k : 3 * k], b[2 * k : 3 * k])]
        + [np.maximum(a[3 * k :], b[3 * k :])]
    )


def _unidentified_classes(data):
    """Classes whose vector-scaling (w_k, b_k) have no finite optimum.

    The rule of the in-memory solver, from one pass of per-class extremes:
    absent (no sample of positive weight), or separable (a threshold on the
    class's own logit puts its rows on one side and every other row on the
    other, unless all of them are equal, or no other row sees the class).
    Returns (absent, separable), boolean arrays of shape (n_classes,).
    """
    from ._torch._affine import unidentified_from_extremes

    extremes = data.reduce(_separation_extremes, _combine_extremes)
    return unidentified_from_extremes(*np.split(extremes, 4))


def _fit_vector(estimator, data):
    check_device(estimator.device)
    n_classes = data.n_classes
    start = fit_temperature_chunks(data)
    theta = np.concatenate([np.full(n_classes, start.beta), np.zeros(n_classes)])
    # A class without a calibration sample, or one that its own logit
    # separates, has no finite scale and bias (the NLL keeps falling along a
    # ray): as in memory, it keeps the temperature map, and the solve runs
    # over the other classes' parameters.
    absent, separable = _unidentified_classes(data)
    frozen = absent | separable
    if frozen.all():
        frozen[:] = False  # nothing to solve for: the rays, as before
    free_classes = np.flatnonzero(~frozen)
    free = np.concatenate([free_classes, n_classes + free_classes])
    n_free = free_classes.shape[0]
    # When every frozen class lacks samples, a common shift of the free biases
    # is a ray (the frozen classes' probabilities fall for ever): their mean
    # is held at 0, as in memory (see _torch._affine._Objective.freeze).
    hold_bias_mean = bool(frozen.any()) and not bool((separable & frozen).any())

    def project(vector):
        if hold_bias_mean:
            vector = vector.copy()
            vector[n_free:] -= vector[n_free:].mean()
        return vector

    def evaluate(theta_free, hessian):
        full = theta.copy()
        full[free] = theta_free
        sums = data.reduce(
            functools.partial(
                _vector_sums,
                coef=full[:n_classes],
                intercept=full[n_classes:],
                hessian=hessian,
            )
        )
        total = sums[0]
        grad = project((sums[2 : 2 + 2 * n_classes] / total)[free])
        hess = None
        if hessian:
            hess = sums[2 + 2 * n_classes :].reshape(2 * n_classes, -1) / total
            hess = hess[np.ix_(free, free)]
            if hold_bias_mean:  # P H P, P centring the bias block
                hess[n_free:, :] -= hess[n_free:, :].mean(axis=0)
                hess[:, n_free:] -= hess[:, n_free:].mean(axis=1, keepdims=True)
        return sums[1] / total, grad, hess

    # The Hessian pass costs (2K)^2 per row whatever is frozen.
    if 2 * n_classes <= _NEWTON_PARAMS:
        gauge = None
        if hold_bias_mean or not frozen.any():
            # Adding a constant to every bias changes nothing (or is held),
            # unless some biases are held fixed.
            gauge = np.concatenate([np.zeros(n_free), np.ones(n_free)])
            gauge /= np.sqrt(n_free)
        result = _newton_over_chunks(
            evaluate,
            theta[free],
            tol=estimator.tol,
            max_iter=estimator.max_iter,
            gauge=gauge,
        )
    else:
        blocks = data.reduce(
            functools.partial(
                _vector_sums,
                coef=theta[:n_classes],
                intercept=theta[n_classes:],
                hessian="blocks",
            )
        )
        blocks = blocks[2 + 2 * n_classes :].reshape(3, n_classes) / blocks[0]
        to_theta, to_phi_grad = _block_preconditioner(blocks[:, free_classes], n_free)
        result = _lbfgs_over_chunks(
            evaluate,
            theta[free],
            tol=estimator.tol,
            max_iter=estimator.max_iter,
            # Steps stay where the bias mean is held (P is its own adjoint).
            preconditioner=(
                lambda phi: project(to_theta(phi)),
                lambda grad: to_phi_grad(project(grad)),
            ),
        )
    fitted = theta.copy()
    fitted[free] = result.theta
    coef = fitted[:n_classes].copy()
    intercept = fitted[n_classes:] - fitted[n_classes:].mean()
    summary = _AffineChunkedFit(coef, intercept, result)
    summary.n_absent = int((absent & frozen).sum())
    summary.n_separable = int((separable & frozen).sum())
    summary.start = start.beta
    estimator._check_affine_result(summary, n_classes=len(intercept))
    estimator.coef_ = coef
    estimator.intercept_ = intercept
    return estimator


def _fit_platt(estimator, data):
    check_device(estimator.device)
    if data.n_classes != 2:
        raise ValueError(
            "Only binary classification is supported. PlattScaling calibrates "
            "one score column or two logit columns, but X has "
            f"{data.n_classes} logit columns (classes); use VectorScaling, "
            "MatrixScaling or TemperatureScaling for multiclass logits."
        )
    if not data.open_class_weight.sum() > 0:
        raise ValueError(
            "PlattScaling needs samples with a finite score: every row "
            "with a positive weight has a masked (-inf) class."
        )
    if estimator.smooth_targets:
        # Platt's counts leave out the rows with a masked class, as in memory.
        n_negative, n_positive = data.open_class_weight
        targets = np.array([1 / (n_negative + 2), (n_positive + 1) / (n_positive + 2)])
    else:
        targets = np.array([0.0, 1.0])

    def evaluate(theta, hessian):
        sums = data.reduce(
            functools.partial(
                _platt_sums,
                slope=theta[0],
                intercept=theta[1],
                targets=targets,
                hessian=hessian,
            )
        )
        total = sums[0]
        return sums[1] / total, sums[2:4] / total, sums[4:].reshape(2, 2) / total

    result = _newton_over_chunks(
        evaluate, np.array([1.0, 0.0]), tol=estimator.tol, max_iter=estimator.max_iter
    )
    coef, intercept = result.theta[:1].copy(), result.theta[1:].copy()
    estimator._check_affine_result(
        _AffineChunkedFit(coef, intercept, result), n_classes=2
    )
    estimator.coef_ = coef
    estimator.intercept_ = intercept
    return estimator


# --- histogram binning ---


def _histogram_groups(logits, codes, mode):
    """The binned scores of histogram binning: float64 softmax, top label or columns."""
    proba = softmax(logits.astype(np.float64))
    if mode == "top_label":
        confidence = np.empty(proba.shape[0])
        for rows in row_blocks(*proba.shape):
            confidence[rows] = block_top_label(proba, rows, codes[rows])[0]
        return proba, [confidence]
    return proba, [proba[:, k] for k in range(proba.shape[1])]


def _histogram_sums(logits, codes, weights, *, mode, n_bins, bin_edges):
    multiclass = "top-label" if mode == "top_label" else "classwise"
    state = BinnedCalibrationAccumulator(
        n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
    )
    proba = softmax(logits.astype(np.float64)) if logits.shape[0] else logits
    mask = _mask_of(logits) if mode != "top_label" else None
    if mask is None:
        state._update_validated(codes, proba.astype(np.float64), weights)
    else:
        state._update_validated(codes, proba[:0], weights[:0])
        _add_open_classwise_sums(state, codes, proba, weights, mask)
    return state.to_vector()


def _add_open_classwise_sums(state, codes, proba, weights, mask):
    """Class-wise bin counts and hits over the rows where each class is open.

    In memory, class k's histogram is fitted on the rows where k is not
    masked: a masked entry enters here with weight 0 (adding 0.0 changes no
    sum), and so does a row's hit when its own class is masked.
    """
    n_rows, n_classes = proba.shape
    n_bins = state.n_bins
    edges = state._group_edges()[:, 1:-1]
    offsets = n_bins * np.arange(n_classes)
    # Flat views: class k's bin b is entry k * n_bins + b.
    count, hit = state.count.reshape(-1), state.hit.reshape(-1)
    for rows in row_blocks(n_rows, n_classes):
        block = proba[rows]
        if state.bin_edges is None:
            index = uniform_bin_index(block, n_bins)
        else:
            index = np.column_stack(
                [
                    np.searchsorted(edges[k], block[:, k], side="left")
                    for k in range(n_classes)
                ]
            )
        index += offsets
        open_weight = np.where(mask[rows], 0.0, weights[rows, None])
        count += np.bincount(index.ravel(), open_weight.ravel(), count.shape[0])
        rows_index = np.arange(block.shape[0])
        truth = codes[rows]
        hit += np.bincount(
            index[rows_index, truth], open_weight[rows_index, truth], hit.shape[0]
        )
    state.n_samples = n_rows


def _selection_histograms(logits, codes, weights, *, selection, mode):
    _, groups = _histogram_groups(logits, codes, mode)
    mask = _mask_of(logits) if mode != "top_label" else None
    if mask is not None:
        # Class k's edges are those of the rows where k is open.
        weights = [np.where(mask[:, k], 0.0, weights) for k in range(len(groups))]
    return selection.pass_histograms(groups, weights).ravel()


def _fit_histogram(estimator, data):
    n_bins = estimator.n_bins
    multiclass = "top-label" if estimator.mode == "top_label" else "classwise"
    n_maps = 1 if estimator.mode == "top_label" else data.n_classes
    bin_edges = None
    if estimator.strategy == "quantile":
        # The in-memory edges: smallest score whose cumulative weight reaches
        # W * b / M * (1 - 1e-12) (HistogramBinning._edges); W is the weight
        # of the rows where the class is open (masked entries are left out).
        if estimator.mode == "top_label":
            mass = np.array([data.total_weight])
        else:
            mass = data.open_weight
        fractions = np.arange(1, n_bins) / n_bins * (1 - 1e-12)
        targets = mass[:, None] * fractions
        if n_bins == 1:
            bin_edges = np.tile([0.0, 1.0], (n_maps, 1))
        else:
            selection = _EqualMassSelection(
                targets, np.uint64, digit_bits_for(targets.size)
            )
            while not selection.done:
                _, bits = selection.digit_range()
                hist = data.reduce(
                    functools.partial(
                        _selection_histograms,
                        selection=selection,
                        mode=estimator.mode,
                    )
                )
                selection.advance(hist.reshape(n_maps, n_bins - 1, 1 << bits))
            bin_edges = selection.edges()
            # A class masked in every row has no data: equal-width edges, as
            # in memory.
            bin_edges[~(mass > 0)] = np.linspace(0.0, 1.0, n_bins + 1)
    template = BinnedCalibrationAccumulator(
        n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
    )
    vector = data.reduce(
        functools.partial(
            _histogram_sums, mode=estimator.mode, n_bins=n_bins, bin_edges=bin_edges
        )
    )
    state = template.from_vector(vector, data.n_classes)
    edges = np.array(state._group_edges())
    mass, hits = state.count, state.hit
    midpoints = 0.5 * (edges[:, :-1] + edges[:, 1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(mass > 0, hits / mass, midpoints)
    estimator.bin_edges_ = edges
    estimator.bin_values_ = values
    estimator.bin_counts_ = mass.copy()
    return estimator


# --- SMART by mini-batches ---


def _smart_arrays(logits, codes, weights, loss):
    """Rows with a positive weight, their margins, correctness and true gaps.

    Checked and computed as in memory (``SMART._fit``): masked entries give
    infinite margins (rows with one finite logit) and true gaps of -inf
    (a masked true class, valid for the calibration-error losses).
    """
    from ._smart import check_smart_rows

    keep = weights > 0
    if not keep.all():
        logits, codes, weights = logits[keep], codes[keep], weights[keep]
    if logits.shape[0] == 0:
        empty = np.empty(0)
        return logits, codes, weights, empty, empty, empty
    margins, true_logit = check_smart_rows(logits, codes, loss, of=" of a chunk")
    rows = np.arange(logits.shape[0])
    top = logits.argmax(axis=1)
    correct = (top == codes).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        true_gap = true_logit.astype(np.float64) - logits[rows, top]
    true_gap = np.maximum(true_gap, np.finfo(np.float64).min)  # -inf: masked
    return logits, codes, weights, margins, correct, true_gap


def _margin_moments(logits, codes, weights, *, loss):
    """``(W, mean, M2)`` of the weighted finite margins of one chunk.

    A row with a single finite logit (infinite margin) is one-hot at every
    temperature and stays out of the standardisation, as in memory.
    """
    _, _, weights, margins, _, _ = _smart_arrays(logits, codes, weights, loss)
    finite = np.isfinite(margins)
    if not finite.all():
        margins, weights = margins[finite], weights[finite]
    total = float(weights.sum())
    if not total > 0:
        return (0.0, 0.0, 0.0)
    mean = float(weights @ margins / total)
    return (total, mean, float(weights @ (margins - mean) ** 2))


def _merge_moments(a, b):
    """Chan et al.'s pairwise update of weighted means and squared deviations."""
    w_a, mean_a, m2_a = a
    w_b, mean_b, m2_b = b
    total = w_a + w_b
    if total == 0:
        return (0.0, 0.0, 0.0)
    delta = mean_b - mean_a
    mean = mean_a + delta * w_b / total
    return (total, mean, m2_a + m2_b + delta * delta * w_a * w_b / total)


def _smart_problem(logits, codes, weights, *, mean, std, device, loss):
    from ._smart import _standardise
    from ._torch._chunked import smart_chunk_problem

    logits, codes, weights, margins, correct, true_gap = _smart_arrays(
        logits, codes, weights, loss
    )
    if logits.shape[0] == 0:
        return None, 0.0
    total = float(weights.sum())
    problem = smart_chunk_problem(
        logits, correct, weights, _standardise(margins, mean, std), true_gap, device
    )
    return problem, total


def _smart_loss_sums(
    logits, codes, weights, *, mean, std, coefs, intercepts, loss, n_bins, sigma, delta
):
    import torch

    from ._torch._chunked import smart_chunk_sums

    size = 1 if loss == "nll" else 2 * n_bins
    problem, total = _smart_problem(
        logits,
        codes,
        weights,
        mean=mean,
        std=std,
        device=torch.device("cpu"),
        loss=loss,
    )
    if problem is None:
        return np.zeros(size)
    return smart_chunk_sums(
        problem,
        total,
        coefs,
        intercepts,
        loss=loss,
        n_bins=n_bins,
        sigma=sigma,
        delta=delta,
    )


def _dask_block(data, index):
    import dask

    source = data.source
    parts = [source.X.blocks[index], source.y.blocks[index]]
    if source.sample_weight is not None:
        parts.append(source.sample_weight.blocks[index])
    values = dask.compute(*parts)
    return data.encode(*values, *([None] * (3 - len(values))))


def _smart_chunk_order(data, rng):
    """Chunks for the Adam steps: shuffled each epoch where the source allows."""
    source = data.source
    if hasattr(source, "X") and hasattr(source.X, "blocks"):
        while True:
            for index in rng.permutation(source.n_chunks):
                yield _dask_block(data, index)
    while True:
        for chunk in source.chunks():
            yield data.encode(*chunk)


def _all_chunks(data):
    """Every encoded chunk once, in order."""
    source = data.source
    if hasattr(source, "X") and hasattr(source.X, "blocks"):
        for index in range(source.n_chunks):
            yield _dask_block(data, index)
    else:
        for chunk in source.chunks():
            yield data.encode(*chunk)


def _fit_smart(estimator, data):
    """SMART by mini-batch Adam over the chunks.

    What changes against the full-batch fit: each Adam step sees one chunk
    (its own soft-binned loss, weights normalised within the chunk), so the
    gradient is that of a mini-batch, not of the whole calibration set; chunks
    are visited in a shuffled order each epoch (dask sources; iterables in
    their own order); the parameters kept are those with the lowest exact
    full-data loss among the epoch boundaries (one extra pass each, at most
    about ``_SMART_EVALUATIONS`` in all), not the best of every step. The
    margin standardisation is exact. With a single chunk, the fit is the
    full-batch one.
    """
    import torch
    from sklearn.utils import check_random_state

    from ._smart import MARGIN_STD_FLOOR, _check_hidden_sizes
    from ._torch._chunked import (
        SmartMiniBatchTrainer,
        smart_chunk_sums,
        smart_loss_from_sums,
    )
    from ._torch._device import resolve_device
    from ._torch._smart import _one_cpu_thread, initial_parameters, seeded_generator

    hidden_sizes = _check_hidden_sizes(estimator.hidden_sizes)
    device = resolve_device(check_device(estimator.device))
    n_chunks = data.n_chunks
    if n_chunks == 1:
        logits, codes, weights = data.gather(np.arange(data.n_samples))
        estimator._fit(logits, codes, weights)
        return estimator
    estimator._warn_effective_samples(data.total_weight**2 / data.weight_squares)
    total, mean, m2 = data.reduce(
        functools.partial(_margin_moments, loss=estimator.loss), _merge_moments
    )
    if not total > 0:
        # Every row has a single finite logit: as in memory, no standardisation.
        mean, m2, total = 0.0, 1.0, 1.0
    estimator.margin_mean_ = mean
    estimator.margin_std_ = max((m2 / total) ** 0.5, MARGIN_STD_FLOOR)
    std = estimator.margin_std_

    coefs, intercepts = initial_parameters(
        hidden_sizes, seeded_generator(estimator.random_state)
    )
    trainer = SmartMiniBatchTrainer(
        coefs,
        intercepts,
        loss=estimator.loss,
        n_bins=estimator.n_bins,
        sigma=estimator.sigma,
        delta=estimator.delta,
        lr=estimator.lr,
        dtype=torch.float64 if data.dtype == np.float64 else torch.float32,
        device=device,
    )

    loss_options = {
        "loss": estimator.loss,
        "n_bins": estimator.n_bins,
        "sigma": estimator.sigma,
        "delta": estimator.delta,
    }
    rng = check_random_state(estimator.random_state)
    order_rng = np.random.default_rng(rng.randint(2**31 - 1))
    # One torch thread for the whole training, as in memory: the per-chunk
    # operations are small, and on a busy machine more threads cost far more
    # in synchronisation than they gain.
    with _one_cpu_thread(device):
        problem_bytes = 2 * data.n_samples * data.n_classes * data.dtype.itemsize
        if problem_bytes <= _SMART_CACHE_BYTES:
            # Small data: every chunk is prepared once and kept (the
            # mini-batches are the same; only the re-reading is saved).
            cached = [
                prepared
                for chunk in _all_chunks(data)
                for prepared in [
                    _smart_problem(
                        *chunk,
                        mean=mean,
                        std=std,
                        device=device,
                        loss=estimator.loss,
                    )
                ]
                if prepared[0] is not None
            ]

            def problems():
                while True:
                    for index in order_rng.permutation(len(cached)):
                        yield cached[index][0]

            def full_loss():
                coefs, intercepts = trainer.parameters()
                sums = sum(
                    smart_chunk_sums(problem, total, coefs, intercepts, **loss_options)
                    for problem, total in cached
                )
                return smart_loss_from_sums(
                    sums, data.total_weight, estimator.loss, estimator.delta
                )

        else:

            def problems():
                for chunk in _smart_chunk_order(data, order_rng):
                    problem, _ = _smart_problem(
                        *chunk,
                        mean=mean,
                        std=std,
                        device=device,
                        loss=estimator.loss,
                    )
                    if problem is not None:
                        yield problem

            def full_loss():
                coefs, intercepts = trainer.parameters()
                sums = data.reduce(
                    functools.partial(
                        _smart_loss_sums,
                        mean=mean,
                        std=std,
                        coefs=coefs,
                        intercepts=intercepts,
                        **loss_options,
                    )
                )
                return smart_loss_from_sums(
                    sums, data.total_weight, estimator.loss, estimator.delta
                )

        fit = _train_smart(estimator, trainer, problems(), full_loss, n_chunks)
    estimator.coefs_ = fit.coefs
    estimator.intercepts_ = fit.intercepts
    estimator.loss_curve_ = fit.loss_curve
    estimator.best_loss_ = fit.best_loss
    estimator.n_iter_ = fit.n_iter
    return estimator


def _train_smart(estimator, trainer, problems, full_loss, n_chunks):
    """Adam steps over the chunks, the exact loss at (some) epoch boundaries."""
    # The full-data loss is evaluated at epoch boundaries, every few epochs
    # when there are many (few chunks), so that the evaluations stay a
    # fraction of the training's passes.
    n_epochs = -(-estimator.max_iter // n_chunks)
    every = n_chunks * max(1, -(-n_epochs // _SMART_EVALUATIONS))
    epoch_losses = [full_loss()]
    trainer.offer(epoch_losses[0])
    best, best_step = epoch_losses[0], 0
    for step in range(estimator.max_iter):
        if step and step % every == 0:
            epoch_losses.append(full_loss())
            trainer.offer(epoch_losses[-1])
            if epoch_losses[-1] < best - estimator.tol:
                best, best_step = epoch_losses[-1], step
            if estimator.early_stopping and step - best_step >= max(
                estimator.n_iter_no_change, every
            ):
                break
        trainer.step(next(problems))
    epoch_losses.append(full_loss())
    trainer.offer(epoch_losses[-1])
    fit = trainer.result(epoch_losses)
    if not np.isfinite(fit.best_loss):
        raise FloatingPointError("the SMART loss is not finite at any epoch boundary")
    return fit


# --- dispatch ---


def _registry():
    from ._binning import HistogramBinning
    from ._scaling import PlattScaling, TemperatureScaling, VectorScaling
    from ._smart import SMART

    return {
        TemperatureScaling: _fit_temperature,
        VectorScaling: _fit_vector,
        PlattScaling: _fit_platt,
        HistogramBinning: _fit_histogram,
        SMART: _fit_smart,
    }


def chunked_fitter(estimator):
    """The chunked fit of ``estimator``'s class, or None."""
    registry = _registry()
    for cls in type(estimator).__mro__:
        if cls in registry:
            return registry[cls]
    return None


def _sample_rows(estimator):
    """Rows that a fit reads besides its passes: temperature's warm start."""
    from ._scaling import TemperatureScaling, VectorScaling

    if isinstance(estimator, TemperatureScaling | VectorScaling):
        from ._torch._chunked import spaced_row_indices

        return spaced_row_indices
    return None


def fit_source(estimator, source):
    """Fit ``estimator`` on a chunk source; the entry of ``fit`` and ``fit_chunks``."""
    fitter = chunked_fitter(estimator)
    if fitter is None:
        supported = sorted(cls.__name__ for cls in _registry())
        raise TypeError(
            f"{type(estimator).__name__} cannot be fitted from chunks (dask, zarr or "
            "memmap arrays, or an iterable of chunks); the calibrators that can "
            f"are {', '.join(supported)}. Load the data into a numpy array (for "
            "example X.compute()) if it fits in memory."
        )
    data = ChunkedData(estimator, source, sample_rows=_sample_rows(estimator))
    fitter(estimator, data)
    return estimator
