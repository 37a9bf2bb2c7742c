"""Input validation shared by every calibrator and metric.

All checks on logits, labels, sample weights and device strings live here, so
every estimator rejects bad input with the same messages.
"""

import re
import warnings
from numbers import Integral

import numpy as np
from sklearn.utils import assert_all_finite, column_or_1d
from sklearn.utils.multiclass import check_classification_targets, type_of_target

from ._compat import _num_samples, validate_data
from ._fitted_state import excerpt
from ._math import row_blocks

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


def as_numpy_array(values):
    """``values`` (a torch tensor, a pandas object, any array-like) as a numpy array."""
    values = to_numpy(values)
    if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
        values = values.to_numpy()
    return np.asarray(values)


def check_true_labels(y_true, n_samples, *, rows_of="y_prob"):
    """``y_true`` as a 1-D array of one label per row of ``rows_of``.

    A column vector is flattened; any other shape, or another number of
    labels than ``n_samples``, raises a ``ValueError``.
    """
    y_true = as_numpy_array(y_true)
    if y_true.ndim == 2 and y_true.shape[1] == 1:
        y_true = y_true[:, 0]
    if y_true.ndim != 1:
        raise ValueError(
            f"y_true must be 1-D (one label per sample); got shape {y_true.shape}."
        )
    if y_true.shape[0] != n_samples:
        raise ValueError(
            f"y_true and {rows_of} have inconsistent numbers of samples: "
            f"{y_true.shape[0]} and {n_samples}."
        )
    return y_true


def computed_dtype(dtype):
    """The float dtype in which logits of ``dtype`` are calibrated.

    float32 stays float32 and float16 becomes float32 (see :func:`to_numpy`);
    every other dtype (float64, integers) is computed in float64. Lazy (dask)
    output declares this dtype, and chunk writers promote to it.
    """
    dtype = np.dtype(dtype)
    return np.dtype(np.float32 if dtype in (np.float16, np.float32) else np.float64)


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


def check_masked_logits(X, *, input_name="X", of=""):
    """Check the values of a float logits array; ``-inf`` marks a masked class.

    Language models and many classification heads mask classes with ``-inf``
    logits: such a class has probability exactly 0. NaN and ``+inf`` have no
    meaning as logits, and every row needs at least one finite logit (the
    class it can predict); a single score column s stands for the logits
    (0, s), so there s = -inf is valid (the positive class is masked). One
    pass over the data: the row maximum is NaN when the row holds a NaN,
    ``+inf`` when it holds ``+inf`` and ``-inf`` when every entry is masked.
    ``of`` follows the row number in the message (``" of a chunk"`` where
    ``X`` is one chunk, whose rows are numbered from 0).
    """
    if X.size == 0:
        return X
    top = X.max(axis=1)
    if np.isfinite(top).all():
        return X
    if np.isnan(top).any():
        raise ValueError(
            f"Input {input_name} contains NaN; logits must be numbers (-inf marks a "
            "masked class)."
        )
    if np.isposinf(top).any():
        raise ValueError(
            f"Input {input_name} contains +infinity; logits must be finite or -inf "
            "(a masked class)."
        )
    if X.shape[1] == 1:
        # A single score column s stands for the logits (0, s): s = -inf masks
        # the positive class and leaves the (finite) negative one.
        return X
    row = int(np.flatnonzero(np.isneginf(top))[0])
    raise ValueError(
        f"Input {input_name} has rows where every logit is -inf (row {row}{of}): a row "
        "needs at least one finite logit, the classes it can predict."
    )


def as_float_2d(X, *, input_name="X", what="logits"):
    """A numeric array as a float32 or float64 2-D array (1-D: one column).

    The one coercion of an array of numbers (logits, probabilities, a chunk
    of either) into the 2-D float array the kernels read: float32 and float64
    are kept, other numbers (integers, booleans) become float64. A
    ``TypeError`` names an array that does not hold numbers, a ``ValueError``
    one with more than two dimensions. ``what`` says what the numbers are,
    for the messages.
    """
    X = as_numpy_array(X)
    if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise TypeError(
            f"{input_name} must hold numbers ({what}), got an array of dtype {X.dtype}."
        )
    if np.issubdtype(X.dtype, np.complexfloating):
        # A cast would drop the imaginary parts with only a ComplexWarning.
        raise ValueError(
            f"{input_name} holds complex numbers ({X.dtype}); {what} must be real."
        )
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(
            f"{input_name} must be 2-D (n_samples, n_classes), or 1-D for one "
            f"score per sample; got an array with {X.ndim} dimensions."
        )
    return X


def check_chunk(X, y, sample_weight, *, check_values=True):
    """One chunk of a chunked fit as validated numpy arrays.

    Returns ``(X, y, sample_weight)``: ``X`` a float32 or float64 2-D array of
    logits (-inf marks a masked class, checked by
    :func:`check_masked_logits`), ``y`` one label per row, ``sample_weight``
    None or a float64 array of one finite non-negative weight per row. The
    messages are those of the in-memory checks. ``check_values=False`` checks
    only types and shapes, for a chunk whose values a first pass checked.
    """
    X = as_float_2d(X)
    if check_values:
        check_masked_logits(X, of=" of a chunk")
    y = check_labels_per_row(np.asarray(to_numpy(y)), X.shape[0])
    if check_values and y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")
    if sample_weight is not None:
        sample_weight = np.asarray(to_numpy(sample_weight), dtype=np.float64)
        if sample_weight.ndim != 1 or sample_weight.shape[0] != X.shape[0]:
            raise ValueError(
                f"sample_weight.shape == {sample_weight.shape}, expected "
                f"({X.shape[0]},)!"
            )
        if check_values and not np.all(np.isfinite(sample_weight)):
            raise ValueError("sample_weight contains NaN or infinity.")
        if check_values and sample_weight.shape[0] and sample_weight.min() < 0:
            raise ValueError("Negative values in data passed to `sample_weight`.")
    return X, y, sample_weight


def check_true_class_unmasked(logits, y, sample_weight=None, *, classes=None, of=""):
    """ValueError when a sample of positive weight has its true class masked.

    The likelihood fits (temperature, affine maps, SMART's ``"nll"`` loss)
    cannot give a probability above 0 to a class whose logit is ``-inf``, so
    such a sample has an infinite NLL. ``logits`` is (n_samples, n_classes)
    (a binary score column already expanded), or the boolean mask of its
    ``-inf`` entries; ``y`` holds column indices,
    ``classes`` (optional) the label of each column for the message, and
    ``of`` follows the sample number (``" of a chunk"`` for the chunked
    fits, which check chunk by chunk).
    """
    if logits.shape[0] == 0:
        return
    true = logits[np.arange(logits.shape[0]), y]
    masked_true = true.copy() if true.dtype == bool else np.isneginf(true)
    if sample_weight is not None:
        masked_true &= np.asarray(sample_weight) > 0
    if not masked_true.any():
        return
    row = int(np.flatnonzero(masked_true)[0])
    code = y[row]
    label = f"{_label(classes[code])!r}" if classes is not None else f"column {code}"
    raise ValueError(
        f"Sample {row}{of} is labelled with a class whose logit is -inf (masked): "
        f"its true class {label} has probability 0 under every calibration map, "
        f"so the negative log-likelihood is infinite ({int(masked_true.sum())} "
        "such samples). Unmask the class, or drop those samples (or give them "
        "sample_weight 0)."
    )


def _label(value):
    """A class label for a message: numpy scalars as plain Python values."""
    return value.item() if isinstance(value, np.generic) else value


def mask_of(logits):
    """Boolean array of the -inf (masked) entries, or None when there are none."""
    if logits.size == 0 or not np.isneginf(logits.min()):
        return None
    return np.isneginf(logits)


def zero_masked(logits, mask):
    """``logits`` with 0 at the masked entries, the input of a scaling map.

    ``-inf`` times a scale could give ``+inf`` or NaN; a finite stand-in keeps
    the map finite, and :func:`keep_masked` restores ``-inf`` after it.
    ``mask`` is :func:`mask_of` the logits (None: ``logits`` itself).
    """
    return logits if mask is None else np.where(mask, 0, logits)


def keep_masked(out, mask):
    """``out`` (a map of the logits) with the masked entries ``-inf`` again.

    A masked class keeps probability exactly 0 whatever the map; ``mask`` is
    :func:`mask_of` the logits (None: nothing to restore). In place.
    """
    if mask is not None:
        out[mask] = -np.inf
    return out


def check_logits(estimator, X, *, reset):
    """Validate a logits array and return it as a float (n_samples, n_cols) array.

    With ``reset=True`` (in ``fit``) this records ``n_features_in_`` and
    ``feature_names_in_``; otherwise it checks the width against them.
    Entries may be ``-inf`` (masked classes, see :func:`check_masked_logits`).
    """
    X = to_numpy(X)
    X = validate_data(
        estimator,
        X,
        reset=reset,
        dtype=[np.float64, np.float32],
        ensure_min_samples=1,
        ensure_all_finite=False,
    )
    return check_masked_logits(X)


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
        ensure_all_finite=False,
    )
    assert_all_finite(y, input_name="y")
    check_logit_labels(y)
    return check_masked_logits(X), y


def check_label_types(y, *, name="y"):
    """Refuse labels that mix strings and numbers (``1`` and ``"1"``).

    numpy sorts such an object array only with a bare "'<' not supported";
    and merging chunks of int labels with chunks of str labels would sort
    them as strings ('10' before '2'). Either way the classes would be wrong.
    """
    y = np.asarray(y)
    if y.dtype != object or y.size == 0:
        return y
    is_none = np.fromiter((v is None for v in y.ravel()), bool, y.size)
    if is_none.any():
        # A missing label (pandas' None in an object column): the chunked fit's
        # np.unique failed on it with a bare "'<' not supported".
        raise ValueError(
            f"{name} contains None (a missing label) at position "
            f"{int(np.flatnonzero(is_none)[0])} ({int(is_none.sum())} in all); "
            "every sample needs its class."
        )
    is_text = np.fromiter((isinstance(v, str) for v in y.ravel()), bool, y.size)
    if is_text.any() and not is_text.all():
        text = y.ravel()[is_text][0]
        other = y.ravel()[~is_text][0]
        raise ValueError(
            f"{name} mixes strings and other labels (for example {text!r} and "
            f"{other!r}); give labels of one type: the same class written as 1 "
            "and '1' would otherwise be two classes."
        )
    return y


# The label types scikit-learn's check_classification_targets accepts.
_CLASSIFICATION_TARGETS = (
    "binary",
    "multiclass",
    "multiclass-multioutput",
    "multilabel-indicator",
    "multilabel-sequences",
)


def check_logit_labels(y):
    """Classification labels, without scikit-learn's "regression" hint.

    A calibration set often holds few samples of many classes (200 tokens of
    a 50,000-word vocabulary), which scikit-learn's target-type heuristic
    reads as regression. Here the labels index logit columns, so that hint
    cannot apply and is not shown; continuous labels are still refused.
    """
    check_label_types(y)
    # scikit-learn's check_classification_targets without its warning: a
    # warning filter set here would swap process-wide state, which fits in
    # worker threads (the selector's folds) would race on.
    y_type = type_of_target(y, input_name="y")
    if y_type not in _CLASSIFICATION_TARGETS:
        raise ValueError(
            f"Unknown label type: {y_type}. Maybe you are trying to fit a "
            "classifier, which expects discrete classes on a "
            "regression target with continuous values."
        )


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


# --- labels: which class each logit or probability column stands for ----------

# The rule shared by the calibrators (``classes=None``) and the metrics
# (``labels=None``), with ``U`` the distinct labels of ``y`` and ``K`` the
# number of columns (2 for a single binary score column):
#
# 1. integer (or boolean) labels whose smallest value is 0 and that all lie in
#    ``range(K)`` are the column indices themselves: label ``j`` is column
#    ``j``, whether or not every index occurs (a small validation set need not
#    hold every class);
# 2. otherwise, when ``U`` has exactly ``K`` labels, column ``j`` is the
#    ``j``-th smallest label (scikit-learn's order of ``classes_``);
# 3. anything else is ambiguous and raises a ValueError asking for the classes:
#    for example 1-based labels 1..4 whose validation set lacks label 4 hold 3
#    labels for 4 columns and could as well be 0-based labels lacking 0.
#
# An explicit list of classes (``classes=`` of a calibrator, ``labels=`` of a
# metric) always wins: ``classes[j]`` is the label of column ``j``.


def _is_integer_labels(labels):
    """True for an integer or boolean array, or an object array of integers."""
    if labels.dtype == bool or np.issubdtype(labels.dtype, np.integer):
        return True
    return labels.dtype == object and all(
        isinstance(c, Integral) for c in labels.tolist()
    )


def check_column_classes(classes, n_classes, *, name, columns):
    """Validate an explicit list of the classes of ``n_classes`` columns.

    Parameters
    ----------
    classes : array-like of shape (n_classes,)
        ``classes[j]`` is the label of column ``j``.
    n_classes : int or None
        The number of columns; None accepts any number from 2.
    name : str
        The argument's name for the messages (``"classes"``, ``"labels"``).
    columns : str
        What the columns are, for the messages (``"logit columns of X"``).

    Returns
    -------
    classes : ndarray of shape (n_classes,)
    """
    # A copy: the fitted classes_ must not share memory with the parameter
    # (an edit of the caller's array, or tensor, would relabel a fitted model).
    classes = np.array(to_numpy(classes))
    if n_classes is None:
        if classes.ndim != 1 or classes.shape[0] < 2:
            raise ValueError(
                f"{name} must be a 1-D list of at least 2 classes, got shape "
                f"{classes.shape}."
            )
    elif classes.ndim != 1 or classes.shape[0] != n_classes:
        raise ValueError(
            f"{name} must list one class per column: there are {n_classes} "
            f"{columns}, but {name} has shape {classes.shape}."
        )
    if classes.dtype.kind == "f" and not np.all(np.isfinite(classes)):
        raise ValueError(f"{name} contains NaN or infinity: {excerpt(classes)}.")
    try:
        ordered = np.sort(classes, kind="stable")
    except TypeError as exc:
        raise TypeError(
            f"{name} mixes label types that cannot be compared ({exc})."
        ) from None
    if np.any(ordered[1:] == ordered[:-1]):
        duplicated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
        raise ValueError(f"{name} contains duplicates: {excerpt(duplicated)}.")
    return classes


def match_labels(y, classes):
    """Index in ``classes`` of every label of ``y``, and whether it was found.

    Returns ``(codes, known)``; ``codes[i]`` is meaningful where ``known[i]``.
    Sorting-based, so that millions of labels cost no Python loop.
    """
    sorter = np.argsort(classes, kind="stable")
    ordered = classes[sorter]
    text = {np.asarray(y).dtype.kind in "US", classes.dtype.kind in "US"}
    if len(text) == 2 and "O" not in (np.asarray(y).dtype.kind, classes.dtype.kind):
        # Strings against numbers match nothing (older numpy compares them
        # with a FutureWarning and a scalar instead of raising).
        return np.zeros(y.shape[0], dtype=np.intp), np.zeros(y.shape[0], dtype=bool)
    try:
        where = np.minimum(np.searchsorted(ordered, y), ordered.shape[0] - 1)
        known = np.asarray(ordered[where] == y, dtype=bool)
    except (TypeError, ValueError):
        # Labels that cannot be compared with the classes match none of them.
        return np.zeros(y.shape[0], dtype=np.intp), np.zeros(y.shape[0], dtype=bool)
    if known.shape != y.shape:  # an elementwise comparison numpy refused
        known = np.zeros(y.shape[0], dtype=bool)
    return sorter[where].astype(np.intp, copy=False), known


def encode_with_classes(y, classes, *, y_name, name):
    """Index in ``classes`` of every label of ``y``; a ValueError names the others."""
    codes, known = match_labels(y, classes)
    if not np.all(known):
        unknown = np.unique(y[~known])[:5]
        raise ValueError(
            f"{y_name} contains labels that are not in {name}: "
            f"{unknown.tolist()!r} ({name}: {excerpt(classes)})."
        )
    return codes


def _ambiguous_labels_message(
    distinct, n_classes, *, y_name, columns, name, example="in column order"
):
    """Why the labels cannot be matched to the columns without an explicit list."""
    found = distinct.tolist()
    shown = found if len(found) <= 10 else found[:10] + ["..."]
    # Booleans are labels of their own (False, True), not column indices.
    integer = distinct.dtype != bool and _is_integer_labels(distinct)
    if distinct.shape[0] > n_classes:
        outside = ""
        if integer:
            beyond = distinct[(distinct < 0) | (distinct >= n_classes)].tolist()
            outside = f" Integer labels outside [0, {n_classes - 1}]: {beyond[:10]!r}."
        return (
            f"{y_name} has {distinct.shape[0]} distinct labels but there are only "
            f"{n_classes} {columns}; logits need one column per class (or a "
            f"single score column for a binary problem). Got labels {shown!r}."
            + outside
        )
    if integer and (distinct.min() < 0 or distinct.max() >= n_classes):
        where = (
            f"integer labels that are column indices must lie in "
            f"[0, {n_classes - 1}], and these lie outside: {shown!r}"
        )
    elif integer:
        where = (
            f"integer labels {shown!r} lie in [1, {n_classes - 1}] but lack 0: they "
            "could be 1-based labels with some class absent as well as 0-based "
            "column indices"
        )
    else:
        where = f"got labels {shown!r}"
    return (
        f"{y_name} has {distinct.shape[0]} distinct labels for {n_classes} "
        f"{columns}, so which column stands for which label is ambiguous "
        f"({where}); pass {name}= (the class of each column, {example}) "
        "instead of relying on a guess."
    )


def resolve_classes(y, n_cols, classes=None):
    """Encode labels and match them to the logit columns.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Validated labels.
    n_cols : int
        The number of logit columns; 1 is a single binary score column,
        read as the logits ``(0, s)`` of two classes.
    classes : array-like of shape (n_classes,) or None
        The calibrator's ``classes`` parameter: the label of each column
        (two labels, negative then positive, for a single score column).
        When given, ``y`` may hold any non-empty subset of it, one class
        included.

    Returns
    -------
    classes : ndarray of shape (n_classes,)
        The label of each column: ``classes`` itself when given; otherwise
        ``arange(n_classes)`` for integer labels that include 0 and lie in
        ``range(n_classes)`` (they are the column indices), else the sorted
        distinct labels, which must then be exactly ``n_classes``.
    y_encoded : ndarray of shape (n_samples,)
        Column index of every sample's label.

    Raises
    ------
    ValueError
        When ``classes`` is invalid or misses labels of ``y``; and, without
        ``classes``, when ``y`` holds a single class or when its labels cannot
        be matched to the columns unambiguously (the message says to pass
        ``classes=``).
    """
    n_classes = 2 if n_cols == 1 else n_cols
    columns = "classes of a single score column" if n_cols == 1 else "logit columns"
    if classes is not None:
        classes = check_column_classes(
            classes, n_classes, name="classes", columns=columns
        )
        return classes, encode_with_classes(y, classes, y_name="y", name="classes")

    distinct, y_encoded = np.unique(y, return_inverse=True)
    y_encoded = y_encoded.ravel()
    if distinct.shape[0] < 2:
        raise ValueError(
            "Calibration needs samples of at least 2 classes; y contains only 1 "
            f"class: {excerpt(distinct)}. Pass classes= (the label of each "
            "logit column) to fit on a set that holds fewer classes."
        )
    if (
        distinct.dtype != bool
        and _is_integer_labels(distinct)
        and distinct.min() == 0
        and distinct.max() < n_classes
    ):
        # Integer labels starting at 0 are the column indices themselves
        # (booleans are labels of their own: False, True, sorted).
        full = np.arange(n_classes, dtype=np.asarray(distinct).dtype)
        if distinct.dtype == object:
            full = full.astype(np.int64)
        return full, distinct[y_encoded].astype(np.intp)
    if distinct.shape[0] == n_classes:
        return distinct, y_encoded
    raise ValueError(
        _ambiguous_labels_message(
            distinct, n_classes, y_name="y", columns=columns, name="classes"
        )
    )


def warn_columns_named_otherwise(feature_names, classes):
    """UserWarning where X's columns are named after the classes, in another order.

    Without ``classes=``, column ``j`` is the ``j``-th class of the inferred
    ``classes_`` (sorted labels, or integer indices), whatever the columns
    are called. A frame whose column names are exactly the class labels in
    another order (the pandas output of a calibrator fitted with unsorted
    ``classes=``, next in a Pipeline) would be calibrated with its columns
    read as the wrong classes, silently.
    """
    if feature_names is None:
        return
    names = [str(name) for name in feature_names]
    labels = [str(label) for label in classes]
    if names == labels or sorted(names) != sorted(labels):
        return
    if len(set(labels)) != len(labels):
        return
    column = next(j for j in range(len(names)) if names[j] != labels[j])
    warnings.warn(
        f"The columns of X are named after the classes but in another order: "
        f"column {column} is named {names[column]!r}, yet it is read as class "
        f"{labels[column]!r} (without classes=, column j is the j-th class of "
        f"{excerpt(np.asarray(classes))}). Pass classes= (the class of each "
        "column, in column order) if the names are the columns' classes.",
        UserWarning,
        stacklevel=3,
    )


def check_labels_per_row(y, n_rows, *, name="y", rows_of="X"):
    """``y`` as one entry per row: a column vector is flattened.

    Works on numpy and dask arrays alike. A ``ValueError`` names any other
    shape.
    """
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(
            f"{name} must have shape ({n_rows},), one entry per row of {rows_of}; "
            f"got shape {y.shape}."
        )
    return y


def check_weight_values(sample_weight, n_samples, *, name="sample_weight"):
    """Weights of ``n_samples`` rows as a float64 array: finite, non-negative.

    The one check of weight values, shared by the in-memory fits, the chunks
    of a chunked fit and the metric accumulators (where a chunk may weigh
    every row zero). A scalar weighs every row the same and is checked like
    an array: ``inf`` and ``nan`` are refused, not expanded. One message per
    problem: NaN, infinity, negative values, wrong shape.
    """
    weights = to_numpy(sample_weight)
    if hasattr(weights, "to_numpy") and not isinstance(weights, np.ndarray):
        weights = weights.to_numpy()
    got = type(sample_weight).__name__
    try:
        weights = np.asarray(weights)
        if weights.dtype.kind == "c":
            # float64 of a complex array keeps the real part, with a warning
            # at most: weights [1j, 1, 1] weighed the first row 0.
            got = "complex values"
            raise TypeError(got)
        weights = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must hold real numbers (one non-negative weight per sample); "
            f"got {got}."
        ) from None
    if weights.ndim == 0:
        weights = np.full(n_samples, weights[()])
    elif weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    if weights.ndim != 1 or weights.shape[0] != n_samples:
        raise ValueError(
            f"{name} must have shape ({n_samples},), one weight per sample; got "
            f"shape {weights.shape}."
        )
    if n_samples:
        lowest, highest = weights.min(), weights.max()
        if not (np.isfinite(lowest) and np.isfinite(highest)):
            if np.isnan(weights).any():
                raise ValueError(f"{name} contains NaN.")
            raise ValueError(f"{name} contains infinity; weights must be finite.")
        if lowest < 0:
            raise ValueError(
                f"{name} contains negative values (min {lowest:.6g}); weights "
                "must be non-negative."
            )
    return weights


def check_loss_counts(k, n, alpha=None):
    """Losses ``k`` among ``n`` samples (and a risk ``alpha``), broadcast, float64.

    The arguments of the risk bounds: ``0 <= k <= n``, all finite, and
    ``alpha`` in (0, 1). Out of range, the binomial tail and the beta
    quantile return NaN or a bound of 1 that certifies nothing, silently.
    """
    arrays = [k, n] if alpha is None else [k, n, alpha]
    try:
        arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    except (TypeError, ValueError):
        raise TypeError("k, n and alpha must be real numbers.") from None
    arrays = np.broadcast_arrays(*arrays)
    k, n = arrays[0], arrays[1]
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(n))):
        raise ValueError("k and n must be finite.")
    if np.any(k < 0) or np.any(k > n):
        raise ValueError(
            "k (the losses) must lie in [0, n] (the samples they were observed on)."
        )
    if alpha is not None and not np.all((arrays[2] > 0) & (arrays[2] < 1)):
        raise ValueError("alpha (the target risk) must lie in (0, 1).")
    return arrays


def weight_scale(sample_weight):
    """The power of two nearest below the largest weight (1.0 without weights).

    Dividing by it is exact in floating point (unless a weight is more than
    about 1e300 times smaller than the largest, where it underflows as it
    would anyway) and brings the largest weight into [1, 2): sums of
    millions of weights then stay far from overflow, whatever the scale the
    caller chose. Multiplying every weight by a constant must change nothing.
    """
    if sample_weight is None or sample_weight.size == 0:
        return 1.0
    largest = float(np.max(sample_weight))
    if not largest > 0:
        return 1.0
    return float(np.ldexp(1.0, np.frexp(largest)[1] - 1))


def scale_free_weights(sample_weight):
    """Checked weights divided by :func:`weight_scale` (None stays None).

    For values that depend on the weights' ratios only (the binned errors,
    the proper scores, the smooth ECE): the division is exact, so ordinary
    weights give bit-identical results, and their sums cannot overflow
    (400 weights of 1e307 summed to inf: NaN, or a smooth ECE of 0).
    """
    if sample_weight is None:
        return None
    return sample_weight / weight_scale(sample_weight)


# The most entries one bin or grid array of a metric may hold (2**24 float64
# values: 128 MiB; class-wise bins of a 128k-token vocabulary at 128 bins
# fit). A parameter asking for more (n_bins=10**9 on 50 rows asked numpy for
# 7.5 GiB per array, bandwidth=1e-9 for 149 GiB) is refused by name rather
# than failing with numpy's MemoryError.
MAX_GRID_ENTRIES = 2**24
# The entries of the arrays that batched work (bootstrap resamples binned
# together, spectra of several rows) fills at once: a memory bound, not a cap.
GRID_BLOCK_ENTRIES = 2**22


def _count_text(entries):
    entries = float(entries)
    return f"{entries:,.0f}" if entries < 1e15 else f"{entries:.3g}"


def check_grid_entries(parameter, value, entries, what="bins", hint="smaller"):
    """Refuse a ``parameter`` whose array of ``entries`` exceeds the cap.

    ``entries`` counts the values of the largest array the parameter sizes
    (bins times groups, grid points times channels); ``hint`` says which
    way to move the parameter.
    """
    if entries > MAX_GRID_ENTRIES:
        raise ValueError(
            f"{parameter}={value!r} needs {_count_text(entries)} {what} in one array, "
            f"more than the {MAX_GRID_ENTRIES:,} a metric allocates; choose a {hint} "
            f"{parameter}."
        )


# The largest value unit_weight returns.
UNIT_WEIGHT_CAP = 2.0**1000


def unit_weight(scale):
    """The weight 1 on the scale of weights divided by ``scale``: ``1 / scale``.

    Capped at ``UNIT_WEIGHT_CAP`` (2**1000): for weights more than about
    1e308 times smaller than 1, ``1 / scale`` overflows. Divided by
    :func:`weight_scale`, every weight is below 2, so no sum of them reaches
    2**-900 of the cap, far below float64's precision: the cap changes no
    result and keeps sums of a few such weights finite.
    """
    return float(np.ldexp(1.0, min(-np.frexp(scale)[1] + 1, 1000)))


def check_sample_weight(sample_weight, X, *, normalize=False):
    """Validate sample weights: finite, non-negative, not all zero, float64.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,), scalar or None
        None weighs every sample 1; a scalar weighs every sample the same.
    X : array-like
        The data, for the number of samples.
    normalize : bool, default=False
        Divide the weights by :func:`weight_scale` (exact: a power of two),
        for a fit whose result does not depend on the scale of the weights:
        its sums then never overflow (2,000 weights of 1e306 fit as 2,000
        weights of 1).

    Returns
    -------
    sample_weight : ndarray of shape (n_samples,) of float64
    """
    n_samples = _num_samples(X)
    if sample_weight is None:
        return np.ones(n_samples, dtype=np.float64)
    sample_weight = check_weight_values(sample_weight, n_samples)
    if not np.any(sample_weight > 0):
        raise ValueError("sample_weight is zero for every sample; nothing to fit.")
    if normalize:
        sample_weight = sample_weight / weight_scale(sample_weight)
    return sample_weight


# --- metrics: predicted probabilities and true labels ---------------------------

# Rows of predicted probabilities must sum to 1 within this absolute tolerance.
# Loose enough for float32 softmax outputs (and float64 copies of them) over
# thousands of classes, tight enough to catch logits or unnormalised scores.
PROBA_SUM_TOL = 1e-3


def check_probabilities(y_prob, *, input_name="y_prob"):
    """Validate predicted probabilities and return them as a 2-D float array.

    A 1-D array (or a single column) holds the positive-class probabilities
    of a binary problem and becomes the two columns ``(1 - p, p)``. float32
    stays float32 and a valid array is not copied. Every entry must be finite
    and non-negative, and every row must sum to 1 within ``PROBA_SUM_TOL``.

    Parameters
    ----------
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities; numpy arrays, lists, pandas objects and
        torch tensors (any device) are accepted.
    input_name : str, default="y_prob"
        Name of the argument, for the error messages.

    Returns
    -------
    y_prob : ndarray of shape (n_samples, n_classes)
        float32 or float64, with ``n_classes >= 2``.
    """
    y_prob = as_float_2d(y_prob, input_name=input_name, what="predicted probabilities")
    if y_prob.shape[0] == 0:
        raise ValueError(f"{input_name} has 0 samples; at least 1 is required.")
    if y_prob.shape[1] == 1:
        positive = y_prob[:, 0]
        _check_probability_values(y_prob, input_name, binary=True)
        return np.column_stack([1 - positive, positive])
    _check_probability_values(y_prob, input_name, binary=False)
    return y_prob


def _check_probability_values(y_prob, input_name, *, binary):
    """Finite, non-negative entries whose rows sum to 1 (or lie in [0, 1])."""
    # The min catches negatives and NaN, the row sums (a BLAS product) catch
    # infinities and rows off the simplex. Blocks of rows keep the temporaries
    # small: large fresh arrays cost more in page faults than in arithmetic.
    n_samples, n_classes = y_prob.shape
    ones = np.ones(n_classes, y_prob.dtype)
    lowest, worst = [], []
    for rows in row_blocks(n_samples, n_classes):
        block = y_prob[rows]
        lowest.append(block.min())
        if binary:
            row_sum = block[:, 0]
        else:
            # The values are checked below. A BLAS product of finite numbers
            # can leave the invalid flag set (numpy 2.4.6, once in CI's newest
            # stage, on float32 probabilities): a spurious RuntimeWarning, an
            # error under warnings-as-errors, for valid input.
            with np.errstate(invalid="ignore", over="ignore"):
                row_sum = block @ ones
        # A binary column only has to stay below 1.
        excess = row_sum - 1 if binary else np.abs(row_sum - 1)
        worst.append(excess.max())
    lowest, worst = np.min(lowest), np.max(worst)
    if np.isfinite(lowest) and lowest >= 0 and worst <= PROBA_SUM_TOL:
        return
    if not np.all(np.isfinite(y_prob)):
        raise ValueError(f"{input_name} contains NaN or infinity.")
    if lowest < 0:
        raise ValueError(
            f"{input_name} contains negative values (min {float(lowest):.6g}); "
            "pass probabilities, not logits or scores."
        )
    if binary:
        raise ValueError(
            f"{input_name} holds positive-class probabilities above 1 (max "
            f"{float(y_prob.max()):.6g}); pass probabilities, not scores."
        )
    row = int(np.argmax(np.abs(y_prob.sum(axis=1, dtype=np.float64) - 1)))
    raise ValueError(
        f"{input_name} rows must sum to 1 (within {PROBA_SUM_TOL}); row {row} "
        f"sums to {float(y_prob[row].sum(dtype=np.float64)):.6g}. Pass "
        "probabilities (for example softmax(logits)), not logits or scores."
    )


def encode_metric_labels(y_true, n_classes, labels=None):
    """Integer codes of the true labels in the column order of ``y_prob``.

    Parameters
    ----------
    y_true : ndarray of shape (n_samples,)
        True labels, of any type scikit-learn accepts.
    n_classes : int
        Number of probability columns.
    labels : array-like of shape (n_classes,) or None
        ``labels[k]`` is the class of column ``k`` (scikit-learn's ``labels=``
        convention); every label of ``y_true`` must be among them. When None:
        boolean labels, and integer labels whose smallest value is 0 and that
        lie in ``range(n_classes)``, are the column indices themselves;
        otherwise the sorted distinct labels of ``y_true`` must be exactly
        ``n_classes`` (scikit-learn's order of ``classes_``). Anything else
        (for example 1-based labels 1..4 of which 4 is absent, for 4 columns)
        is ambiguous and raises a ValueError asking for ``labels=``.

    Returns
    -------
    y_codes : ndarray of shape (n_samples,) of intp
    classes : ndarray of shape (n_classes,)
    """
    if labels is not None:
        classes = check_column_classes(
            labels, n_classes, name="labels", columns="columns of y_prob"
        )
        codes = encode_with_classes(y_true, classes, y_name="y_true", name="labels")
        return codes, classes

    if y_true.dtype == bool:
        return y_true.astype(np.intp), np.arange(n_classes)
    if np.issubdtype(y_true.dtype, np.integer):
        # Fast path without np.unique (a sort): integer labels that start at
        # 0 and lie in range(K) are the column indices, as for classes_.
        if y_true.min() == 0 and y_true.max() < n_classes:
            return y_true.astype(np.intp, copy=False), np.arange(n_classes)
    if np.issubdtype(y_true.dtype, np.floating) and not np.all(np.isfinite(y_true)):
        raise ValueError("y_true contains NaN or infinity.")
    try:
        classes, y_codes = np.unique(y_true, return_inverse=True)
    except TypeError as exc:
        raise TypeError(
            f"y_true mixes label types that cannot be sorted ({exc}); pass labels=."
        ) from None
    y_codes = y_codes.ravel()
    if (
        y_true.dtype == object
        and _is_integer_labels(classes)
        and classes.min() == 0
        and classes.max() < n_classes
    ):
        return classes[y_codes].astype(np.intp), np.arange(n_classes)
    if classes.shape[0] != n_classes:
        raise ValueError(
            _ambiguous_labels_message(
                classes,
                n_classes,
                y_name="y_true",
                columns="columns of y_prob",
                name="labels",
                example="for example the estimator's classes_",
            )
        )
    return y_codes.astype(np.intp, copy=False), classes


def check_metric_inputs(y_true, y_prob, *, sample_weight=None, labels=None):
    """Validate the inputs of a calibration metric.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities (see :func:`check_probabilities`).
    sample_weight : array-like of shape (n_samples,) or None
        Non-negative, finite weights, not all zero.
    labels : array-like of shape (n_classes,) or None
        Class of each probability column (see :func:`encode_metric_labels`).

    Returns
    -------
    y_codes : ndarray of shape (n_samples,) of intp
        Column index of each sample's true class.
    y_prob : ndarray of shape (n_samples, n_classes)
        float32 or float64 probabilities (a binary column expanded).
    sample_weight : ndarray of shape (n_samples,) of float64, or None
    classes : ndarray of shape (n_classes,)
    """
    y_prob = check_probabilities(y_prob)
    y_true = check_true_labels(y_true, y_prob.shape[0])
    y_codes, classes = encode_metric_labels(y_true, y_prob.shape[1], labels)
    if sample_weight is not None:
        sample_weight = check_sample_weight(sample_weight, y_prob)
    return y_codes, y_prob, sample_weight, classes
