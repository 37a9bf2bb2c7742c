"""Calibration metrics, their scorers and bootstrap confidence intervals.

Every metric takes ``(y_true, y_prob, *, ..., sample_weight=None, labels=None)``
in scikit-learn's vocabulary, returns a Python float and is a loss (lower is
better). The binned metrics share one binning implementation and convention
(``docs/user_guide/binning.rst``); their scorers are named ``neg_<metric>``.
"""

from ._accumulators import BinnedCalibrationAccumulator, ProperScoreAccumulator
from ._bootstrap import BootstrapInterval, bootstrap_interval
from ._calibration import (
    CalibrationCurve,
    adaptive_calibration_error,
    calibration_curve,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    rms_calibration_error,
)
from ._chunked import chunked_calibration_report, equal_mass_bin_edges
from ._proper import (
    BrierDecomposition,
    brier_score,
    brier_score_decomposition,
    log_loss,
)
from ._report import calibration_report
from ._scorer import (
    get_scorer,
    get_scorer_names,
    neg_adaptive_calibration_error,
    neg_brier_score,
    neg_classwise_calibration_error,
    neg_expected_calibration_error,
    neg_log_loss,
    neg_maximum_calibration_error,
    neg_rms_calibration_error,
    neg_smooth_calibration_error,
)
from ._smooth import smooth_calibration_error

__all__ = [
    "BinnedCalibrationAccumulator",
    "BootstrapInterval",
    "BrierDecomposition",
    "CalibrationCurve",
    "ProperScoreAccumulator",
    "adaptive_calibration_error",
    "bootstrap_interval",
    "brier_score",
    "brier_score_decomposition",
    "calibration_curve",
    "calibration_report",
    "chunked_calibration_report",
    "classwise_calibration_error",
    "equal_mass_bin_edges",
    "expected_calibration_error",
    "get_scorer",
    "get_scorer_names",
    "log_loss",
    "maximum_calibration_error",
    "neg_adaptive_calibration_error",
    "neg_brier_score",
    "neg_classwise_calibration_error",
    "neg_expected_calibration_error",
    "neg_log_loss",
    "neg_maximum_calibration_error",
    "neg_rms_calibration_error",
    "neg_smooth_calibration_error",
    "rms_calibration_error",
    "smooth_calibration_error",
]
