"""The debiased L2 calibration error of Kumar, Liang and Ma (2019)."""

import numpy as np

from ..utils._compat import validate_params
from ..utils._validation import check_metric_inputs
from ._bin_statistics import Binning
from ._calibration import BINNED_CONSTRAINTS


@validate_params(BINNED_CONSTRAINTS, prefer_skip_nested_validation=True)
def debiased_calibration_error(
    y_true, y_prob, *, n_bins=15, strategy="uniform", sample_weight=None, labels=None
):
    r"""Debiased L2 (RMS) calibration error of the top-label prediction.

    The plug-in squared error :math:`\sum_b \frac{n_b}{n}
    (\mathrm{acc}_b - \mathrm{conf}_b)^2` is biased upwards: each bin's
    accuracy is a mean of ``n_b`` outcomes, whose sampling variance adds to
    the squared gap. Kumar, Liang and Ma subtract its unbiased estimate:

    .. math::

        \mathrm{CE}^2 = \sum_b \frac{n_b}{n} \Big[(\mathrm{acc}_b -
        \mathrm{conf}_b)^2 - \frac{\mathrm{acc}_b (1 - \mathrm{acc}_b)}
        {n_b - 1}\Big],

    bins of fewer than 2 samples contributing 0, and return
    :math:`\sqrt{\max(\mathrm{CE}^2, 0)}` (``get_calibration_error(...,
    debias=True)`` of their package ``uncertainty-calibration`` on the same
    bins). On a calibrated model its expectation is near 0, where the
    plug-in :func:`rms_calibration_error` stays of order ``sqrt(M / n)``.

    Weights are frequency weights: ``n_b`` is the bin's total weight, so
    integer weights equal repeated rows (the variance correction depends
    on the sample size, so multiplying all weights by a constant changes
    the value, as repeating every row would).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (a 1-D array: positive-class probabilities).
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins (Kumar et al. use equal mass).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative frequency weights.
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.

    Returns
    -------
    error : float
        Non-negative; lower is better.

    See Also
    --------
    rms_calibration_error : The plug-in (biased) estimate.

    References
    ----------
    .. [1] A. Kumar, P. Liang and T. Ma, "Verified Uncertainty Calibration",
       NeurIPS 2019.

    Examples
    --------
    >>> from sklearn_calib.metrics import debiased_calibration_error
    >>> # ten predictions of 0.9, half of them right: sqrt(0.4^2 - 0.25 / 9)
    >>> y_true = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    >>> round(debiased_calibration_error(y_true, [0.9] * 10), 4)
    0.3636
    """
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    binning = Binning(y_codes, y_prob, n_bins=n_bins, strategy=strategy)
    stats = binning.statistics(sample_weight)
    count = stats.count[0, 0].astype(np.float64)
    total = count.sum()
    used = count > 1
    n_b = count[used]
    accuracy = stats.hit[0, 0][used] / n_b
    confidence = stats.score[0, 0][used] / n_b
    squared = (accuracy - confidence) ** 2 - accuracy * (1 - accuracy) / (n_b - 1)
    return float(np.sqrt(max(0.0, np.sum(n_b * squared) / total)))
