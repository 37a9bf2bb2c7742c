"""Per-sample temperatures from the logit margin: SMART and MarginTemperatureScaling.

The public names are exported by :mod:`sklearn_calib`.
"""
