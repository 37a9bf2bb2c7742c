"""Estimators built on other estimators: CalibratedClassifier, CalibratorSelector.

The public names are exported by :mod:`sklearn_calib`.
"""
