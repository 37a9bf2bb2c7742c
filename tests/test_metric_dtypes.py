"""A metric does not depend on the dtype it is handed.

The same predictions as float32 and as float64 (the float64 copy of the
float32 array, so the values are identical) must score the same, for every
public metric. Scikit-learn's ``log_loss`` clips at the dtype's epsilon and so
scores float32 predictions with tiny true-class probabilities differently;
ours clips at one documented floor in float64.
"""

import numpy as np
import pytest
from scipy.special import softmax

from sklearn_calib.metrics import log_loss
from sklearn_calib.metrics._sample_losses import LOG_LOSS_EPS
from sklearn_calib.utils.discovery import all_metrics


def _predictions(seed=0, n=3000, k=10, scale=12.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=scale, size=(n, k))
    y = rng.integers(0, k, size=n)
    proba32 = softmax(logits, axis=1).astype(np.float32)
    proba32 /= proba32.sum(axis=1, keepdims=True, dtype=np.float32)
    return y, proba32


@pytest.mark.parametrize(
    "name, metric", all_metrics(), ids=[n for n, _ in all_metrics()]
)
def test_metric_is_the_same_for_float32_and_float64(name, metric):
    y, proba32 = _predictions()
    # Confident, often wrong predictions: many true-class probabilities fall
    # below float32's epsilon, where a dtype-dependent clip would show.
    assert np.mean(proba32[np.arange(len(y)), y] < np.finfo(np.float32).eps) > 0.2
    value32 = metric(y, proba32)
    value64 = metric(y, proba32.astype(np.float64))
    assert value32 == pytest.approx(value64, rel=1e-6, abs=1e-9)


def test_log_loss_floor_is_documented_float64_epsilon():
    y = np.array([0, 1])
    proba = np.array([[0.0, 1.0], [0.0, 1.0]], dtype=np.float32)
    # Sample 0 has probability 0 on its true class: -log(eps64); sample 1
    # probability 1 on its class, clipped to 1 - eps64.
    expected = (-np.log(LOG_LOSS_EPS) - np.log1p(-LOG_LOSS_EPS)) / 2
    assert log_loss(y, proba) == pytest.approx(expected, rel=1e-12)
    assert log_loss(y, proba.astype(np.float64)) == pytest.approx(expected, rel=1e-12)
    assert LOG_LOSS_EPS == np.finfo(np.float64).eps


def test_log_loss_equals_scikit_learn_on_float64():
    from sklearn.metrics import log_loss as sklearn_log_loss

    y, proba32 = _predictions(seed=1)
    proba64 = proba32.astype(np.float64)
    proba64 /= proba64.sum(axis=1, keepdims=True)
    assert log_loss(y, proba64) == pytest.approx(
        sklearn_log_loss(y, proba64, labels=np.arange(10)), rel=1e-12
    )
