"""Private torch layer: device handling, the numpy<->tensor boundary, solvers, modules.

Only this package imports torch, and only when a calibrator is fitted or
exported, so ``import sklearn_calib`` stays fast.
"""
