"""Decisions with guarantees: selective classification and certified binary
thresholds (public names in :mod:`sklearn_calib.selective`). Conformal risk
control lives beside the sets it controls, in :mod:`sklearn_calib.conformal`."""
