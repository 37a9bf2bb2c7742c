"""Numerically stable softmax helpers on numpy arrays (log-sum-exp shifted)."""

import numpy as np


def softmax(logits, *, out=None):
    """Row-wise softmax of a 2-D array, shifted by the row maximum.

    ``out`` may be ``logits`` itself to work in place.
    """
    out = np.subtract(logits, logits.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def log_softmax(logits, *, out=None):
    """Row-wise log-softmax of a 2-D array, shifted by the row maximum."""
    out = np.subtract(logits, logits.max(axis=1, keepdims=True), out=out)
    out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
    return out


def row_chunks(n_rows, n_cols, *, max_elements=2**18):
    """Yield slices of rows holding at most about ``max_elements`` values.

    Prediction works chunk by chunk so that the temporaries of a large
    ``(n_samples, n_classes)`` problem stay a small fraction of the output.
    """
    step = max(1, max_elements // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))
