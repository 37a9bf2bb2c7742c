"""sklearn-calib: post-hoc calibration of classifier logits.

Calibrators are scikit-learn estimators over logit arrays; metrics live in
:mod:`sklearn_calib.metrics`. Importing this package imports neither torch nor
matplotlib: torch is loaded when a calibrator is fitted, matplotlib when a
figure is drawn.
"""

from ._binning.histogram import HistogramBinning
from ._binning.isotonic import IsotonicCalibration
from ._binning.spline import SplineCalibration
from ._binning.venn_abers import VennAbersCalibration
from ._margin.margin_temperature import MarginTemperatureScaling
from ._margin.smart import SMART
from ._meta.calibrated_classifier import CalibratedClassifier
from ._meta.selector import CalibratorSelector
from ._scaling.affine import (
    DirichletCalibration,
    MatrixScaling,
    PlattScaling,
    VectorScaling,
)
from ._scaling.beta_quadratic import BetaCalibration, QuadraticScaling
from ._scaling.bias_corrected import BiasCorrectedTemperatureScaling
from ._scaling.ensemble_temperature import EnsembleTemperatureScaling
from ._scaling.structured import StructuredMatrixScaling, StructuredVectorScaling
from ._scaling.temperature import TemperatureScaling
from .base import BaseCalibrator

__version__ = "0.1.0"

__all__ = [
    "BaseCalibrator",
    "BetaCalibration",
    "BiasCorrectedTemperatureScaling",
    "CalibratedClassifier",
    "CalibratorSelector",
    "EnsembleTemperatureScaling",
    "HistogramBinning",
    "IsotonicCalibration",
    "DirichletCalibration",
    "MarginTemperatureScaling",
    "MatrixScaling",
    "PlattScaling",
    "QuadraticScaling",
    "SMART",
    "SplineCalibration",
    "StructuredMatrixScaling",
    "StructuredVectorScaling",
    "TemperatureScaling",
    "VectorScaling",
    "VennAbersCalibration",
    "__version__",
]
