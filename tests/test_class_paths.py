"""The class paths that saved files record are pinned.

pickle, joblib and skops files name each object's class (and a skops file
each trusted function) by module and name: ``sklearn_calib._scaling.
temperature.TemperatureScaling``, not ``sklearn_calib.TemperatureScaling``.
Moving a class to another private module breaks every file saved before, so
a move must be a decision: these literal tables fail on any move, and are
changed together with a note in the release notes.
"""

import importlib
import inspect
import re
from pathlib import Path

from sklearn_calib.utils.persistence import skops_trusted_types

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = [
    "sklearn_calib",
    "sklearn_calib.chunked",
    "sklearn_calib.conformal",
    "sklearn_calib.label_shift",
    "sklearn_calib.metrics",
    "sklearn_calib.selective",
]

# Public module -> {public class: the module that saved files record}. Each
# class keeps its public name, so a file records ``module.name``.
CLASS_MODULES = {
    "sklearn_calib": {
        "BaseCalibrator": "sklearn_calib.base",
        "BetaCalibration": "sklearn_calib._scaling.beta_quadratic",
        "BiasCorrectedTemperatureScaling": "sklearn_calib._scaling.bias_corrected",
        "CalibratedClassifier": "sklearn_calib._meta.calibrated_classifier",
        "CalibratorSelector": "sklearn_calib._meta.selector",
        "DirichletCalibration": "sklearn_calib._scaling.affine",
        "EnsembleTemperatureScaling": "sklearn_calib._scaling.ensemble_temperature",
        "HistogramBinning": "sklearn_calib._binning.histogram",
        "IsotonicCalibration": "sklearn_calib._binning.isotonic",
        "MarginTemperatureScaling": "sklearn_calib._margin.margin_temperature",
        "MatrixScaling": "sklearn_calib._scaling.affine",
        "PlattScaling": "sklearn_calib._scaling.affine",
        "QuadraticScaling": "sklearn_calib._scaling.beta_quadratic",
        "SMART": "sklearn_calib._margin.smart",
        "SplineCalibration": "sklearn_calib._binning.spline",
        "StructuredMatrixScaling": "sklearn_calib._scaling.structured",
        "StructuredVectorScaling": "sklearn_calib._scaling.structured",
        "TemperatureScaling": "sklearn_calib._scaling.temperature",
        "VectorScaling": "sklearn_calib._scaling.affine",
        "VennAbersCalibration": "sklearn_calib._binning.venn_abers",
    },
    "sklearn_calib.chunked": {
        "ChunkedDataset": "sklearn_calib.chunked",
    },
    "sklearn_calib.conformal": {
        "ConformalClassifier": "sklearn_calib.conformal",
        "ConformalRiskClassifier": "sklearn_calib.conformal",
    },
    "sklearn_calib.label_shift": {
        "LabelShiftAdapter": "sklearn_calib.label_shift",
    },
    "sklearn_calib.metrics": {
        "BinnedCalibrationAccumulator": "sklearn_calib.metrics._accumulators",
        "BootstrapInterval": "sklearn_calib.metrics._bootstrap",
        "BrierDecomposition": "sklearn_calib.metrics._bin_statistics",
        "CalibrationCurve": "sklearn_calib.metrics._bin_statistics",
        "CalibrationCurveInterval": "sklearn_calib.metrics._calibration",
        "CalibrationTest": "sklearn_calib.metrics._recalibration",
        "FlexibleCalibrationCurve": "sklearn_calib.metrics._smooth_curve",
        "HosmerLemeshowTest": "sklearn_calib.metrics._recalibration",
        "LogisticCalibration": "sklearn_calib.metrics._recalibration",
        "ProperScoreAccumulator": "sklearn_calib.metrics._accumulators",
        "SetSizeCoverage": "sklearn_calib.metrics._sets",
        "ValidationReport": "sklearn_calib.metrics._validation_report",
    },
    "sklearn_calib.selective": {
        "CertifiedThresholdClassifier": "sklearn_calib._risk_control._binary",
        "RiskCoverageCurve": "sklearn_calib.metrics._selective",
        "SelectiveClassifier": "sklearn_calib._risk_control._selective",
    },
}

# What skops.io.load must be told to trust: the estimators, and the scorer
# class and metric functions a fitted CalibratorSelector holds.
SKOPS_TRUSTED = [
    # the metric of "neg_log_loss": scikit-learn's, for its number (issue 25)
    "sklearn.metrics._classification.log_loss",
    "sklearn_calib._binning.histogram.HistogramBinning",
    "sklearn_calib._binning.isotonic.IsotonicCalibration",
    "sklearn_calib._binning.spline.SplineCalibration",
    "sklearn_calib._binning.venn_abers.VennAbersCalibration",
    "sklearn_calib._margin.margin_temperature.MarginTemperatureScaling",
    "sklearn_calib._margin.smart.SMART",
    "sklearn_calib._meta.calibrated_classifier.CalibratedClassifier",
    "sklearn_calib._meta.selector.CalibratorSelector",
    "sklearn_calib._scaling.affine.DirichletCalibration",
    "sklearn_calib._scaling.affine.MatrixScaling",
    "sklearn_calib._scaling.affine.PlattScaling",
    "sklearn_calib._scaling.affine.VectorScaling",
    "sklearn_calib._scaling.beta_quadratic.BetaCalibration",
    "sklearn_calib._scaling.beta_quadratic.QuadraticScaling",
    "sklearn_calib._scaling.bias_corrected.BiasCorrectedTemperatureScaling",
    "sklearn_calib._scaling.ensemble_temperature.EnsembleTemperatureScaling",
    "sklearn_calib._scaling.structured.StructuredMatrixScaling",
    "sklearn_calib._scaling.structured.StructuredVectorScaling",
    "sklearn_calib._scaling.temperature.TemperatureScaling",
    "sklearn_calib.conformal.ConformalClassifier",
    "sklearn_calib.conformal.ConformalRiskClassifier",
    "sklearn_calib.metrics._calibration.adaptive_calibration_error",
    "sklearn_calib.metrics._calibration.classwise_calibration_error",
    "sklearn_calib.metrics._calibration.expected_calibration_error",
    "sklearn_calib.metrics._calibration.maximum_calibration_error",
    "sklearn_calib.metrics._calibration.rms_calibration_error",
    "sklearn_calib.metrics._debiased.debiased_calibration_error",
    "sklearn_calib.metrics._proper.brier_score",
    "sklearn_calib.metrics._proper.log_loss",
    "sklearn_calib.metrics._scorer._ClassesScorer",
    "sklearn_calib.metrics._scorer.mean_set_size_of_sets",
    "sklearn_calib.metrics._scorer.median_set_size_of_sets",
    "sklearn_calib.metrics._selective.aurc",
    "sklearn_calib.metrics._selective.excess_aurc",
    "sklearn_calib.metrics._sets.set_coverage",
    "sklearn_calib.metrics._sets.worst_class_coverage",
    "sklearn_calib.metrics._smooth.smooth_calibration_error",
]


def recorded_modules():
    """``{public module: {class name: module recorded}}`` of every public class."""
    found = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                # A file records the qualified name: it must be the public one.
                assert obj.__qualname__ == name, (module_name, name, obj.__qualname__)
                found.setdefault(module_name, {})[name] = obj.__module__
    return found


def test_public_class_paths_are_pinned():
    assert recorded_modules() == CLASS_MODULES


def test_skops_trusted_types_are_pinned():
    assert skops_trusted_types() == SKOPS_TRUSTED


def test_pinned_paths_resolve():
    # What a loader does with a recorded path: import the module, get the name.
    pinned = [
        f"{module}.{name}"
        for classes in CLASS_MODULES.values()
        for name, module in classes.items()
    ]
    for path in [*pinned, *SKOPS_TRUSTED]:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name) is not None, path


def test_docs_hard_code_no_private_path():
    # A page that names a private module's class (to trust it in skops, say)
    # breaks when the class moves; pages use the public names and
    # skops_trusted_types() instead. Private modules of helpers that pages
    # import on purpose are listed.
    allowed = {"sklearn_calib.utils._testing"}
    private = re.compile(r"sklearn_calib(?:\.\w+)*?\._(?!_)\w+(?:\.\w+)*")
    pages = [ROOT / "README.md", *ROOT.glob("docs/**/*.rst"), *ROOT.glob("docs/*.md")]
    pages += [*ROOT.glob("examples/*.py")]
    found = []
    for page in pages:
        for match in private.finditer(page.read_text(encoding="utf-8")):
            path = match[0]
            if not any(path == a or path.startswith(a + ".") for a in allowed):
                found.append(f"{page.relative_to(ROOT)}: {path}")
    assert not found, found
