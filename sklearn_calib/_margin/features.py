"""Margin features: the gap between the two largest logits, standardised.

SMART's temperature network and MarginTemperatureScaling's piecewise-linear
temperature both read the margin of each row; a row with a single finite logit
(every other class masked) has an infinite margin.
"""

import numpy as np

MARGIN_STD_FLOOR = 1e-8


def logit_margins(logits, *, top2=None):
    """Largest minus second-largest logit of every row, in float64.

    ``inf`` for a row with a single finite logit (every other class masked
    with ``-inf``), and where the gap exceeds float64's range. ``top2``, the
    two largest logits of every row (second-largest first), may be given.
    """
    if top2 is None:
        top2 = np.partition(logits, -2, axis=1)[:, -2:]
    with np.errstate(over="ignore"):
        return top2[:, 1].astype(np.float64) - top2[:, 0].astype(np.float64)


def margin_statistics(margins, weights):
    """Weighted mean and population standard deviation of finite margins.

    ``weights`` sum to 1 over the rows given; the mean is then a convex
    combination and cannot overflow, and the deviations are scaled by their
    largest before squaring, so that margins up to float64's range keep a
    finite standard deviation (floored at ``MARGIN_STD_FLOOR``).
    """
    mean = float(np.dot(weights, margins))
    deviation = margins - mean
    largest = float(np.max(np.abs(deviation))) if deviation.size else 0.0
    if not largest > 0:
        return mean, MARGIN_STD_FLOOR
    std = largest * float(np.dot(weights, (deviation / largest) ** 2)) ** 0.5
    return mean, max(std, MARGIN_STD_FLOOR)


def standardise(margins, mean, std):
    """Standardised margins; 0 (the mean margin) where the margin is infinite.

    A row with a single finite logit has a one-hot softmax at every
    temperature, so its temperature has no effect; it is given the
    temperature of the mean margin rather than the network's limit at an
    infinite input (which may be infinite itself).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        standardised = (margins - mean) / std
    return np.where(np.isfinite(standardised), standardised, 0.0)
