"""Checks of a fitted state restored from a file (pickle, joblib, skops).

A skops file names the types it holds, so a user can trust the library's
calibrators and still load state that no fit produced: ``skops`` restores
``temperature_ = -1`` as readily as ``temperature_ = 1.5``, and the calibrator
would then write reversed probabilities. Every calibrator checks its state
when it is restored (``__setstate__`` calls ``_check_fitted_state``) with the
helpers below, which raise a ``ValueError`` naming the attribute and the
problem. numpy only: loading must not import torch.
"""

from numbers import Integral, Real

import numpy as np


def excerpt(values, limit=10):
    """``repr`` of at most ``limit`` items of an array or list, and how many more.

    Error messages show what is wrong without printing a whole array: a file
    of 78 KB may hold millions of labels.
    """
    items = np.asarray(values).ravel()[: limit + 1].tolist()
    total = np.size(values)
    if total <= limit:
        return repr(items)
    return f"{items[:limit]!r} (and {total - limit:,} more)"


def is_fitted_state(state):
    """Whether a saved ``__dict__`` holds any fitted attribute.

    The names scikit-learn's ``check_is_fitted`` counts (a trailing
    underscore, not a dunder): a state is checked whenever any of them is
    present, so deleting ``classes_`` cannot skip the checks of the rest.
    """
    return any(
        isinstance(key, str) and key.endswith("_") and not key.startswith("__")
        for key in state
    )


def check_state_parameters(estimator_class, state):
    """A saved ``__dict__`` holds exactly the constructor parameters of the class.

    A file whose class name was edited (or written by another class) holds
    the parameters of that other class: a missing one failed later with
    Python's ``AttributeError`` (``get_params``), and one the class does not
    take was carried silently with the fitted attributes of the other class
    (a bias-corrected temperature state loaded as temperature scaling
    predicted without its biases). Keys ending in ``_`` (fitted attributes)
    or starting with ``_`` (private ones) are not parameters.
    """
    params = set(estimator_class._get_param_names())
    names = [key for key in state if isinstance(key, str)]
    missing = sorted(params.difference(names))
    foreign = sorted(
        key
        for key in names
        if not key.endswith("_") and not key.startswith("_") and key not in params
    )
    problems = []
    if missing:
        problems.append(f"lacks its parameters {missing}")
    if foreign:
        problems.append(f"holds {foreign}, which are not its parameters")
    if problems:
        raise ValueError(
            f"The saved state of {estimator_class.__name__} "
            f"{' and '.join(problems)}; it was written by another class or "
            "edited (check the class name in the file). Refit the estimator "
            "instead of loading it."
        )


def _fail(estimator, name, problem):
    raise ValueError(
        f"Fitted attribute {name} of {type(estimator).__name__} {problem}; this "
        "state was not produced by fit (the file may have been edited or "
        "corrupted). Refit the estimator instead of loading it."
    )


def get_state(estimator, name):
    """The attribute ``name``, or a ValueError saying that it is missing."""
    try:
        return getattr(estimator, name)
    except AttributeError:
        _fail(estimator, name, "is missing")


def check_state_float(estimator, name, *, low=None, low_open=False, high=None):
    """A finite real number, optionally bounded; returned as float."""
    value = get_state(estimator, name)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        _fail(estimator, name, f"must be a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        _fail(estimator, name, f"must be finite, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        bound = ">" if low_open else ">="
        _fail(estimator, name, f"must be {bound} {low:g}, got {value!r}")
    if high is not None and value > high:
        _fail(estimator, name, f"must be <= {high:g}, got {value!r}")
    return value


def check_state_int(estimator, name, *, low=0):
    """An integer of at least ``low``; returned as int."""
    value = get_state(estimator, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
        _fail(estimator, name, f"must be an integer, got {value!r}")
    if value < low:
        _fail(estimator, name, f"must be >= {low}, got {value!r}")
    return int(value)


def check_state_array(
    estimator,
    name,
    *,
    value=None,
    ndim=None,
    shape=None,
    finite=False,
    low=None,
    high=None,
    numeric=False,
):
    """A numpy array of the given dimensions and shape, optionally finite and bounded.

    ``value`` checks an item of a list attribute (``name`` then says which, for
    example ``"coefs_[1]"``) instead of the attribute ``name`` itself.
    """
    if value is None:
        value = get_state(estimator, name)
    if not isinstance(value, np.ndarray):
        _fail(estimator, name, f"must be a numpy array, got {type(value).__name__}")
    if ndim is not None and value.ndim != ndim:
        _fail(estimator, name, f"must have {ndim} dimensions, got shape {value.shape}")
    if shape is not None and value.shape != tuple(shape):
        _fail(
            estimator, name, f"must have shape {tuple(shape)}, got shape {value.shape}"
        )
    if numeric or finite or low is not None or high is not None:
        if value.dtype.kind not in "iuf":
            _fail(estimator, name, f"must hold real numbers, got dtype {value.dtype}")
    if finite and not np.all(np.isfinite(value)):
        _fail(estimator, name, "must be finite but contains NaN or infinity")
    if (low is not None or high is not None) and np.any(np.isnan(value)):
        _fail(estimator, name, "contains NaN")
    if low is not None and value.size and np.min(value) < low:
        _fail(estimator, name, f"must be >= {low:g}, got min {np.min(value)!r}")
    if high is not None and value.size and np.max(value) > high:
        _fail(estimator, name, f"must be <= {high:g}, got max {np.max(value)!r}")
    return value


def check_state_list(estimator, name, *, length):
    """A list (or tuple) of ``length`` items; returned as list."""
    value = get_state(estimator, name)
    if not isinstance(value, (list, tuple)):
        _fail(estimator, name, f"must be a list, got {type(value).__name__}")
    if len(value) != length:
        _fail(estimator, name, f"must have {length} items, got {len(value)}")
    return list(value)


def check_state_classes(estimator, name="classes_", *, min_classes=2):
    """Distinct class labels in a 1-D array; returns their number."""
    classes = check_state_array(estimator, name, ndim=1)
    if classes.shape[0] < min_classes:
        _fail(
            estimator,
            name,
            f"must hold at least {min_classes} classes, got {excerpt(classes)}",
        )
    if classes.dtype.kind == "f" and not np.all(np.isfinite(classes)):
        _fail(estimator, name, "contains NaN or infinity")
    try:
        ordered = np.sort(classes, kind="stable")
    except TypeError:
        _fail(estimator, name, "mixes labels that cannot be compared")
    if np.any(ordered[1:] == ordered[:-1]):
        duplicated = ordered[1:][ordered[1:] == ordered[:-1]]
        _fail(
            estimator,
            name,
            f"contains duplicates: {excerpt(np.unique(duplicated))} among "
            f"{classes.shape[0]:,} classes",
        )
    return classes.shape[0]


def fail_state(estimator, name, problem):
    """Raise the ValueError of a bad fitted attribute (for custom checks)."""
    _fail(estimator, name, problem)


def check_state_calibrator(estimator, name, *, n_features):
    """A fitted nested calibrator over ``n_features`` logit columns; returned.

    A composite calibrator (a selector's chosen candidate, a base map) hands
    its logits, one column per class, to the nested one: a nested calibrator
    fitted on another number of columns would fail or misread them.
    """
    from sklearn.exceptions import NotFittedError

    from ._compat import check_is_fitted

    value = get_state(estimator, name)
    if not (hasattr(value, "fit") and hasattr(value, "transform")):
        _fail(
            estimator, name, f"must be a fitted calibrator, got {type(value).__name__}"
        )
    try:
        check_is_fitted(value)
    except NotFittedError:
        _fail(
            estimator, name, f"must be fitted, got an unfitted {type(value).__name__}"
        )
    n_seen = getattr(value, "n_features_in_", None)
    if n_seen is not None and n_seen != n_features:
        _fail(
            estimator,
            name,
            f"was fitted on {n_seen} logit columns, but classes_ has {n_features} "
            "classes",
        )
    return value
