"""One table of calibration metrics for one or several models' probabilities."""

from collections.abc import Mapping

import numpy as np

from ..utils._validation import check_metric_inputs
from ._calibration import (
    adaptive_calibration_error,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    rms_calibration_error,
)
from ._debiased import debiased_calibration_error
from ._proper import brier_score, log_loss
from ._smooth import smooth_calibration_error

DEFAULT_REPORT_METRICS = (
    "ece",
    "adaptive_ece",
    "classwise_ece",
    "nll",
    "brier",
    "accuracy",
)


def _accuracy(y_true, y_prob, *, sample_weight=None, labels=None):
    """Fraction of samples whose most probable column is the true class."""
    y_codes, y_prob, sample_weight, _ = check_metric_inputs(
        y_true, y_prob, sample_weight=sample_weight, labels=labels
    )
    # argmax breaks ties towards the first column, as the top-label
    # confidence of the binned metrics does.
    return float(np.average(y_prob.argmax(axis=1) == y_codes, weights=sample_weight))


# Column name -> (metric, whether it takes n_bins). Every public metric of this
# module has a column (tests/test_metrics.py checks against the registry).
REPORT_METRICS = {
    "ece": (expected_calibration_error, True),
    "adaptive_ece": (adaptive_calibration_error, True),
    "classwise_ece": (classwise_calibration_error, True),
    "mce": (maximum_calibration_error, True),
    "rms_ce": (rms_calibration_error, True),
    "debiased_ce": (debiased_calibration_error, True),
    "smooth_ece": (smooth_calibration_error, False),
    "nll": (log_loss, False),
    "brier": (brier_score, False),
    "accuracy": (_accuracy, False),
}


def _chosen_metrics(metrics):
    if metrics is None:
        metrics = DEFAULT_REPORT_METRICS
    if isinstance(metrics, str):
        metrics = [metrics]
    metrics = list(metrics)
    for name in metrics:
        if not isinstance(name, str) or name not in REPORT_METRICS:
            raise ValueError(
                f"Unknown metric {name!r} in metrics; choose from "
                f"{sorted(REPORT_METRICS)}."
            )
    if not metrics:
        raise ValueError("metrics is empty; name at least one metric.")
    return metrics


def calibration_report(
    y_true,
    y_prob,
    *,
    metrics=None,
    n_bins=15,
    sample_weight=None,
    labels=None,
    as_frame=True,
):
    """Calibration metrics of one or several models as one table.

    Each set of probabilities is validated once and scored by every chosen
    metric of this module with the same labels, weights and number of bins,
    so the rows of the table compare like with like.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,), or mapping
        Predicted probabilities of one model, or a mapping from a model's
        name to its probabilities (for example ``{"uncalibrated": p,
        "temperature": q}``); the mapping's order is the row order.
    metrics : sequence of str, default=None
        Names of the columns, in order, from ``"ece"``
        (:func:`expected_calibration_error`), ``"adaptive_ece"``
        (:func:`adaptive_calibration_error`), ``"classwise_ece"``
        (:func:`classwise_calibration_error`), ``"mce"``
        (:func:`maximum_calibration_error`), ``"rms_ce"``
        (:func:`rms_calibration_error`), ``"smooth_ece"``
        (:func:`smooth_calibration_error`), ``"nll"`` (:func:`log_loss`),
        ``"brier"`` (:func:`brier_score`) and ``"accuracy"`` (fraction of
        samples whose most probable class is the true one). None means
        ``("ece", "adaptive_ece", "classwise_ece", "nll", "brier",
        "accuracy")``, the columns of the command line's report.
    n_bins : int, default=15
        Number of bins of the binned metrics.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights, used by every metric.
    labels : array-like of shape (n_classes,), default=None
        The class of each probability column, as in the metrics.
    as_frame : bool, default=True
        Return a :class:`pandas.DataFrame`; otherwise a dict of dicts
        ``{model: {metric: value}}``.

    Returns
    -------
    report : pandas.DataFrame or dict
        One row per model (a single array is the row ``"model"``), one column
        per metric, values as fractions (not percent). Every column but
        ``"accuracy"`` is a loss: lower is better.

    See Also
    --------
    get_scorer : The same metrics as scorers for model selection.
    bootstrap_interval : A confidence interval for one metric.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import calibration_report
    >>> y = [0, 1, 1, 0]
    >>> sharp = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.7, 0.3]])
    >>> flat = np.full((4, 2), 0.5)
    >>> report = calibration_report(y, {"sharp": sharp, "flat": flat},
    ...                             metrics=["ece", "accuracy"], n_bins=5)
    >>> report.round(3)
           ece  accuracy
    sharp  0.3      0.75
    flat   0.0      0.50
    """
    chosen = _chosen_metrics(metrics)
    if (
        isinstance(n_bins, bool)
        or not isinstance(n_bins, (int, np.integer))
        or n_bins < 1
    ):
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    is_mapping = isinstance(y_prob, Mapping)
    models = dict(y_prob) if is_mapping else {"model": y_prob}
    if not models:
        raise ValueError("y_prob is an empty mapping; give at least one model.")

    rows = {}
    for model, proba in models.items():
        try:
            y_codes, proba, weights, _ = check_metric_inputs(
                y_true, proba, sample_weight=sample_weight, labels=labels
            )
        except ValueError as exc:
            if not is_mapping:
                raise
            raise ValueError(f"y_prob[{model!r}]: {exc}") from exc
        # The codes index the validated columns, so the metrics skip the label
        # encoding (string labels, ``labels=``); each still checks the array.
        # Stated as every column's index: codes that lack some class (0
        # included) are otherwise ambiguous to the metric.
        columns = np.arange(proba.shape[1])
        scores = {}
        for name in chosen:
            metric, binned = REPORT_METRICS[name]
            options = {"n_bins": n_bins} if binned else {}
            scores[name] = metric(
                y_codes, proba, sample_weight=weights, labels=columns, **options
            )
        rows[model] = scores
    if not as_frame:
        return rows
    import pandas as pd

    return pd.DataFrame.from_dict(rows, orient="index", columns=chosen)
