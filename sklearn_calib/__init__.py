"""sklearn-calib: post-hoc calibration of classifier logits.

Calibrators are scikit-learn estimators over logit arrays; metrics live in
:mod:`sklearn_calib.metrics`. Importing this package imports neither torch nor
matplotlib: torch is loaded when a calibrator is fitted, matplotlib when a
figure is drawn.
"""

from ._bias_corrected import BiasCorrectedTemperatureScaling
from ._binning import HistogramBinning, IsotonicCalibration
from ._composite import MarginTemperatureScaling
from ._ensemble import EnsembleTemperatureScaling
from ._meta import CalibratedClassifier
from ._parametric_binary import BetaCalibration, QuadraticScaling
from ._scaling import (
    DirichletCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from ._selection import CalibratorSelector
from ._smart import SMART
from ._spline import SplineCalibration
from ._structured import StructuredMatrixScaling, StructuredVectorScaling
from ._venn_abers import VennAbersCalibration
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
