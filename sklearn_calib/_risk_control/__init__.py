"""Decisions with guarantees: selective classification, certified binary
thresholds and conformal risk control (public names in
:mod:`sklearn_calib.selective` and :mod:`sklearn_calib.conformal`)."""
