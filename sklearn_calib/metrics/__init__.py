"""Calibration metrics, their scorers and bootstrap confidence intervals.

Every metric takes ``(y_true, y_prob, *, ..., sample_weight=None, labels=None)``
in scikit-learn's vocabulary, returns a Python float and is a loss (lower is
better). The binned metrics share one binning implementation and convention
(``docs/user_guide/binning.rst``); their scorers are named ``neg_<metric>``
(the multiclass Brier score's is ``neg_multiclass_brier_score``, since
``neg_brier_score`` is scikit-learn's halved binary definition).

scikit-learn does not know the scorer names: pass scorer objects as
``scoring=`` (``get_scorer(name)``, or ``get_scorers()`` for a dict of all of
them), not the strings.

The metrics of prediction sets (``set_coverage``, ``mean_set_size``, ...) take
the boolean sets of a conformal classifier instead of probabilities; their
names end in neither ``_error`` nor ``_loss``, as they are not calibration
losses.
"""

from ._accumulators import BinnedCalibrationAccumulator, ProperScoreAccumulator
from ._bin_statistics import BrierDecomposition, CalibrationCurve
from ._binomial import binomial_interval
from ._bootstrap import BootstrapInterval, bootstrap_interval
from ._calibration import (
    CalibrationCurveInterval,
    adaptive_calibration_error,
    calibration_curve,
    classwise_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    rms_calibration_error,
)
from ._chunked import chunked_calibration_report, equal_mass_bin_edges
from ._debiased import debiased_calibration_error
from ._proper import (
    brier_score,
    brier_score_decomposition,
    log_loss,
)
from ._recalibration import (
    CalibrationTest,
    HosmerLemeshowTest,
    LogisticCalibration,
    cox_calibration_test,
    hosmer_lemeshow_test,
    logistic_calibration,
    spiegelhalter_test,
)
from ._report import calibration_report
from ._scorer import (
    get_scorer,
    get_scorer_names,
    get_scorers,
    neg_adaptive_calibration_error,
    neg_aurc,
    neg_classwise_calibration_error,
    neg_debiased_calibration_error,
    neg_excess_aurc,
    neg_expected_calibration_error,
    neg_log_loss,
    neg_maximum_calibration_error,
    neg_mean_set_size,
    neg_median_set_size,
    neg_multiclass_brier_score,
    neg_rms_calibration_error,
    neg_smooth_calibration_error,
)
from ._sets import (
    SetSizeCoverage,
    classwise_coverage,
    mean_set_size,
    median_set_size,
    set_coverage,
    size_stratified_coverage,
    worst_class_coverage,
)
from ._smooth import smooth_calibration_error
from ._smooth_curve import FlexibleCalibrationCurve, flexible_calibration_curve
from ._validation_report import ValidationReport, validation_report

__all__ = [
    "BinnedCalibrationAccumulator",
    "BootstrapInterval",
    "BrierDecomposition",
    "CalibrationCurve",
    "CalibrationCurveInterval",
    "CalibrationTest",
    "FlexibleCalibrationCurve",
    "HosmerLemeshowTest",
    "LogisticCalibration",
    "ValidationReport",
    "ProperScoreAccumulator",
    "SetSizeCoverage",
    "adaptive_calibration_error",
    "binomial_interval",
    "bootstrap_interval",
    "brier_score",
    "brier_score_decomposition",
    "calibration_curve",
    "calibration_report",
    "chunked_calibration_report",
    "classwise_calibration_error",
    "classwise_coverage",
    "cox_calibration_test",
    "debiased_calibration_error",
    "equal_mass_bin_edges",
    "expected_calibration_error",
    "get_scorer",
    "get_scorer_names",
    "flexible_calibration_curve",
    "get_scorers",
    "hosmer_lemeshow_test",
    "log_loss",
    "logistic_calibration",
    "maximum_calibration_error",
    "mean_set_size",
    "median_set_size",
    "neg_adaptive_calibration_error",
    "neg_classwise_calibration_error",
    "neg_debiased_calibration_error",
    "neg_expected_calibration_error",
    "neg_aurc",
    "neg_excess_aurc",
    "neg_log_loss",
    "neg_maximum_calibration_error",
    "neg_mean_set_size",
    "neg_median_set_size",
    "neg_multiclass_brier_score",
    "neg_rms_calibration_error",
    "neg_smooth_calibration_error",
    "rms_calibration_error",
    "set_coverage",
    "size_stratified_coverage",
    "smooth_calibration_error",
    "spiegelhalter_test",
    "validation_report",
    "worst_class_coverage",
]
