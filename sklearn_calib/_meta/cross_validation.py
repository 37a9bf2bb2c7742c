"""Cross-validation helpers shared by the estimators built on calibrators."""

import warnings
from numbers import Integral

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import check_cv


def cv_splits(cv, logits, y):
    """The (train, test) splits of ``cv``; too few samples for them leave none.

    An integer ``cv`` asks for stratified folds, which need at least as many
    samples as folds in some class: with fewer (a small calibration fold
    inside another cross-validation), as many folds as the most frequent
    class allows are used, with a warning, and none below two.
    """
    if isinstance(cv, Integral):
        largest = int(np.bincount(y).max())
        if largest < cv:
            warnings.warn(
                f"cv={cv} stratified folds need {cv} samples of some class, "
                f"but the most frequent class has {largest}: "
                f"{'no cross-validation' if largest < 2 else f'cv={largest}'} "
                "is used.",
                UserWarning,
                stacklevel=5,
            )
            if largest < 2:
                return []
            cv = largest
    return list(check_cv(cv, y, classifier=True).split(logits, y))


def partitions(splits, n_samples):
    """Whether the test parts hold out every row exactly once."""
    if not splits:
        return False
    held_out = np.concatenate([test for _, test in splits])
    return bool(np.all(np.bincount(held_out, minlength=n_samples) == 1))


def with_code_classes(estimator, n_classes):
    """A clone told that its columns are the codes 0..n_classes-1, if it can be."""
    estimator = clone(estimator)
    if "classes" in estimator.get_params(deep=False):
        estimator.set_params(classes=np.arange(n_classes))
    return estimator
