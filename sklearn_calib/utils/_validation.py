"""Input validation shared by every calibrator and metric.

All checks on logits, labels, sample weights and device strings live here, so
every estimator rejects bad input with the same messages.
"""

import re
from numbers import Integral

import numpy as np
from sklearn.utils import assert_all_finite, column_or_1d
from sklearn.utils.multiclass import check_classification_targets

from ._compat import _check_sample_weight, validate_data

_DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def is_torch_tensor(obj):
    """True for a ``torch.Tensor`` without importing torch."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach")


def to_numpy(X):
    """Turn a torch tensor (any device, any float dtype) into a numpy array.

    Anything else is returned unchanged, for scikit-learn's own validation to
    handle (lists, pandas objects, numpy arrays). float16 and bfloat16 become
    float32: numpy has no bfloat16 and float16 loses too much in a softmax.
    """
    if is_torch_tensor(X):
        X = X.detach()
        if X.dtype.is_floating_point and X.element_size() < 4:
            X = X.float()
        return X.cpu().numpy()
    if isinstance(X, np.ndarray) and X.dtype == np.float16:
        return X.astype(np.float32)
    return X


def check_device(device):
    """Validate a device string: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``."""
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise ValueError(
            f"device={device!r} is not understood; use 'auto', 'cpu', 'cuda' or "
            "'cuda:N'."
        )
    return device


def expand_binary_scores(X):
    """Map a single score column s to the two logits (0, s)."""
    if X.shape[1] != 1:
        return X
    return np.hstack([np.zeros_like(X), X])


def check_logits(estimator, X, *, reset):
    """Validate a logits array and return it as a float (n_samples, n_cols) array.

    With ``reset=True`` (in ``fit``) this records ``n_features_in_`` and
    ``feature_names_in_``; otherwise it checks the width against them.
    """
    X = to_numpy(X)
    return validate_data(
        estimator,
        X,
        reset=reset,
        dtype=[np.float64, np.float32],
        ensure_min_samples=1,
    )


def check_logits_and_labels(estimator, X, y):
    """Validate logits and labels together at fit time."""
    X = to_numpy(X)
    y = to_numpy(y)
    if y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y "
            "is None."
        )
    X, y = validate_data(
        estimator,
        X,
        y,
        reset=True,
        dtype=[np.float64, np.float32],
        ensure_min_samples=1,
    )
    check_classification_targets(y)
    return X, y


def check_classification_labels(estimator, y):
    """Validate the labels of a classifier that does not read X itself.

    For meta-estimators, whose inner estimator validates X: ``y`` must be
    given, 1-D (a column vector is raveled with a warning), a classification
    target and hold at least two classes.
    """
    y = to_numpy(y)
    if y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y "
            "is None."
        )
    y = column_or_1d(y, warn=True)
    assert_all_finite(y, input_name="y")
    check_classification_targets(y)
    n_classes = np.unique(y).shape[0]
    if n_classes < 2:
        raise ValueError(
            "Calibration needs samples of at least 2 classes; y contains only "
            f"{n_classes} class."
        )
    return y


def resolve_classes(y, n_cols):
    """Encode labels and match them to the logit columns.

    Returns ``(classes, y_encoded)``. The i-th column of the logits belongs to
    the i-th sorted class. Integer labels that all lie in ``range(n_cols)`` may
    miss some classes (a small validation set need not hold every class):
    then ``classes = arange(n_cols)`` so that column j stays class j.
    """
    classes, y_encoded = np.unique(y, return_inverse=True)
    if classes.shape[0] < 2:
        raise ValueError(
            "Calibration needs samples of at least 2 classes; y contains only 1 "
            f"class: {classes.tolist()!r}."
        )
    if n_cols == 1:
        if classes.shape[0] != 2:
            raise ValueError(
                "A single score column is only meaningful for a binary problem, but "
                f"y has {classes.shape[0]} classes."
            )
        return classes, y_encoded
    if classes.shape[0] == n_cols:
        return classes, y_encoded
    is_integer = np.issubdtype(classes.dtype, np.integer) or (
        classes.dtype == object and all(isinstance(c, Integral) for c in classes)
    )
    if is_integer:
        if classes.min() >= 0 and classes.max() < n_cols:
            full = np.arange(n_cols, dtype=np.asarray(classes).dtype)
            return full, np.asarray(y, dtype=np.int64).ravel()
        raise ValueError(
            f"y has labels outside the {n_cols} logit columns: integer labels "
            f"must lie in [0, {n_cols - 1}], got {classes.tolist()!r}."
        )
    raise ValueError(
        f"X has {n_cols} logit columns but y has {classes.shape[0]} classes; "
        "logits need one column per class (or a single score column for a "
        "binary problem)."
    )


def check_sample_weight(sample_weight, X):
    """Validate sample weights: finite, non-negative, not all zero, float64."""
    if sample_weight is None:
        return np.ones(X.shape[0], dtype=np.float64)
    sample_weight = to_numpy(sample_weight)
    sample_weight = np.asarray(sample_weight, dtype=np.float64) if not np.isscalar(
        sample_weight
    ) else sample_weight
    if not np.isscalar(sample_weight) and not np.all(np.isfinite(sample_weight)):
        raise ValueError("sample_weight contains NaN or infinity.")
    sample_weight = _check_sample_weight(
        sample_weight, X, dtype=np.float64, ensure_non_negative=True
    )
    if not np.any(sample_weight > 0):
        raise ValueError("sample_weight is zero for every sample; nothing to fit.")
    return sample_weight
