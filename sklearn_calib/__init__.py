"""sklearn-calib: post-hoc calibration of classifier logits.

Calibrators are scikit-learn estimators over logit arrays; metrics live in
:mod:`sklearn_calib.metrics`. Importing this package imports neither torch nor
matplotlib: torch is loaded when a calibrator is fitted, matplotlib when a
figure is drawn.
"""

from ._binning import HistogramBinning, IsotonicCalibration
from ._composite import MarginTemperatureScaling
from ._meta import CalibratedClassifier
from ._scaling import (
    DirichletCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from ._selection import CalibratorSelector
from ._smart import SMART
from .base import BaseCalibrator

__version__ = "0.1.0"

__all__ = [
    "BaseCalibrator",
    "CalibratedClassifier",
    "CalibratorSelector",
    "HistogramBinning",
    "IsotonicCalibration",
    "DirichletCalibration",
    "MarginTemperatureScaling",
    "MatrixScaling",
    "PlattScaling",
    "SMART",
    "TemperatureScaling",
    "VectorScaling",
    "__version__",
]
