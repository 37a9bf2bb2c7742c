"""Per-sample losses of the proper scoring rules: the log loss and the Brier score.

Kernels only (this module imports nothing from the rest of
:mod:`sklearn_calib.metrics`, only from :mod:`sklearn_calib.utils`): both
scores are weighted means of these per-sample losses, so the accumulators add
them chunk by chunk and, under a whole matrix of bootstrap weights at once, a
score is one matrix-vector product (:class:`MeanLoss`).
"""

import numpy as np

from ..utils._math import row_blocks

# The log loss clips the true-class probability to [LOG_LOSS_EPS, 1 - LOG_LOSS_EPS]
# in float64, whatever the dtype of the probabilities: the same predictions then
# score the same as float32 and float64 (clipping at the dtype's own epsilon, as
# scikit-learn does, puts float32 predictions' floor at 1.2e-7, not 2.2e-16).
LOG_LOSS_EPS = float(np.finfo(np.float64).eps)


def _true_class_proba(y_prob, y_codes):
    """``q_{i, y_i}`` for every sample, as float64."""
    return y_prob[np.arange(y_prob.shape[0]), y_codes].astype(np.float64)


def log_losses(y_codes, y_prob):
    """Per-sample ``-log q_{i, y_i}``, clipped at ``LOG_LOSS_EPS`` in float64."""
    proba = np.clip(_true_class_proba(y_prob, y_codes), LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
    return -np.log(proba)


def brier_losses(y_codes, y_prob):
    """Per-sample ``sum_k (q_ik - 1[y_i = k])^2 = sum_k q_ik^2 - 2 q_{i,y_i} + 1``."""
    n_samples, n_classes = y_prob.shape
    squares = np.empty(n_samples)
    for rows in row_blocks(n_samples, n_classes):
        block = y_prob[rows].astype(np.float64)
        squares[rows] = np.einsum("ij,ij->i", block, block)
    return squares - 2 * _true_class_proba(y_prob, y_codes) + 1


SAMPLE_LOSSES = {"log_loss": log_losses, "brier_score": brier_losses}


class MeanLoss:
    """A weighted mean of per-sample losses as a function of the weights.

    ``MeanLoss("log_loss", y_codes, y_prob)(W)`` is the log loss under each
    row of the weight matrix ``W`` (None: unit weights).
    """

    def __init__(self, name, y_codes, y_prob):
        self._losses = SAMPLE_LOSSES[name](y_codes, y_prob)

    def __call__(self, weights=None):
        if weights is None:
            return np.array([self._losses.mean()])
        weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return weights @ self._losses / weights.sum(axis=1)
