"""From the arrays of input files to checked logits and labels.

A command asks for what it needs (``read_splits`` for ``report`` and ``fit``,
``read_logits_only`` for ``apply``) and only those arrays are read from the
file. Keys and columns are matched by name, and a file in which two names
could play the same part is refused rather than guessed at.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..utils._validation import as_float_2d, check_labels_per_row
from ._common import CommandError
from ._io import (
    LABEL_KEYS,
    SPLIT_KEYS,
    WEIGHT_KEY,
    check_input_path,
    label_column,
    label_key,
    read_arrays,
    refuse_both,
)
from ._io import read_table as _read_table


@dataclass
class Split:
    """Logits and (possibly missing) labels of one part of a data set."""

    logits: np.ndarray
    y: np.ndarray | None
    # The logit columns' names, where a table (.csv, .parquet) gave them.
    names: list | None = None
    # Sample weights stored beside the logits (WEIGHT_KEY), if any.
    sample_weight: np.ndarray | None = None


def as_logits(array, where):
    """A checked 2-D float array of logits.

    ``-inf`` marks a masked class (probability 0); NaN and ``+inf`` are
    errors, and so is a row in which every class is masked.
    """
    try:
        # One score per sample (1-D) is the positive-class score of a binary
        # problem.
        array = as_float_2d(array, input_name="logits")
    except (TypeError, ValueError) as exc:
        raise CommandError(f"{where}: {exc}") from exc
    if array.shape[0] == 0:
        raise CommandError(f"{where}: logits hold no samples")
    for bad, kind in ((np.isnan(array), "NaN"), (array == np.inf, "infinity")):
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            extra = " (+inf; only -inf is accepted, for a masked class)"
            raise CommandError(
                f"{where}: logits contain {kind} ({int(bad.sum())} values, first "
                f"in row {row}){extra if kind == 'infinity' else ''}"
            )
    if array.shape[1] > 1:
        masked = np.all(array == -np.inf, axis=1)
        if masked.any():
            raise CommandError(
                f"{where}: {int(masked.sum())} rows have no finite logit (every "
                f"class masked with -inf), first row {int(np.argmax(masked))}"
            )
    return array


def _is_missing(value):
    """Whether a label is missing: None, NaN, or pandas' NA (or NaT)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:  # pd.NA: its comparisons are NA, of no truth value
        return True


def as_labels(array, where, n_samples):
    """A checked 1-D array of ``n_samples`` labels."""
    array = np.asarray(array)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise CommandError(
            f"{where}: labels must be 1-D (n_samples,), got shape {array.shape}"
        )
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise CommandError(f"{where}: labels contain NaN or infinity")
    if array.dtype == object and any(map(_is_missing, array)):
        raise CommandError(f"{where}: labels contain missing values")
    if array.shape[0] != n_samples:
        raise CommandError(
            f"{where}: {n_samples} rows of logits but {array.shape[0]} labels; "
            "they must have the same length"
        )
    return array


def _columns_named_otherwise(names, classes):
    """The first logit column named after another class, or None.

    Only where the names are exactly the classes (as text) in another order:
    the header then says which column is which, and it is not the order in
    which the columns would be read.
    """
    if names is None or classes is None:
        return None
    labels = [str(label) for label in classes]
    if names == labels or sorted(names) != sorted(labels):
        return None
    if len(set(labels)) != len(labels):
        return None
    return next(j for j in range(len(names)) if names[j] != labels[j])


def check_column_names(names, classes, path):
    """Refuse logit columns named after the classes in another order.

    ``classes``: the labels the columns would be read as (the sorted labels,
    or column indices) when ``--classes`` is not given. The Python API warns
    on such a data frame; the command line stops rather than fit or score
    each column as another class than its header says.
    """
    j = _columns_named_otherwise(names, classes)
    if j is None:
        return
    labels = [str(label) for label in classes]
    raise CommandError(
        f"{path}: the logit columns are named after the classes but in another "
        f"order: column {j} is named {names[j]!r}, yet it would be read as class "
        f"{labels[j]!r} (without --classes, column j holds the j-th of "
        f"{', '.join(labels)}); pass --classes {','.join(names)} if the names "
        f"are the columns' classes, or --classes {','.join(labels)} to read "
        "them in that order"
    )


def check_columns_match_calibrator(names, classes, path):
    """Refuse logit columns named after a calibrator's classes in another order."""
    j = _columns_named_otherwise(names, classes)
    if j is None:
        return
    labels = [str(label) for label in classes]
    raise CommandError(
        f"{path}: the logit columns are named after the calibrator's classes but "
        f"in another order: column {j} is named {names[j]!r}, yet the calibrator "
        f"reads it as class {labels[j]!r}; put the columns in the calibrator's "
        f"order ({', '.join(labels)})"
    )


def _refuse_beside_labels(names, path, kind):
    """Refuse sample weights or a split column in a ``--labels`` file.

    They belong beside the logits, where they are read; in a labels file
    they would be dropped without a word (a fit unweighted, or on every
    row instead of the val rows).
    """
    for name in names:
        text = str(name).strip().lower()
        if text.startswith(WEIGHT_KEY) or text == "split":
            raise CommandError(
                f"{path}: a --labels file holds the labels only; its {kind} "
                f"{str(name)!r} would not be read: store sample weights and the "
                "split in the logits file, beside the logits"
            )


def read_labels(path):
    """Read a labels file: a 1-D array, or a table/archive with a label column."""
    path = check_input_path(path)
    if path.suffix.lower() in (".csv", ".parquet"):
        try:
            frame = _read_table(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: cannot be read ({exc})") from exc
        _refuse_beside_labels(frame.columns, path, "column")
        column = label_column(frame, path)
        if column is None and frame.shape[1] == 1:
            column = frame.columns[0]
        if column is None:
            raise CommandError(
                f"{path}: no labels found; expected a single column or a column "
                f"named label or y (found: {', '.join(map(str, frame.columns))})"
            )
        return frame[column].to_numpy()
    arrays = read_arrays(path)
    _refuse_beside_labels(arrays, path, "array")
    key = label_key(arrays, path)
    if key is None and len(arrays) == 1:
        key = next(iter(arrays))
    if key is None:
        raise CommandError(
            f"{path}: no labels found; expected one array, or a key or column "
            f"named {' / '.join(LABEL_KEYS)} (found: {', '.join(arrays)})"
        )
    return arrays[key]


def _sample_weight(arrays, path, key, n_samples, *, layout):
    """The 1-D weights stored under ``key``, or None; ``layout`` names the
    other weight keys, which belong to the other layout (one or two splits)."""
    for other in layout:
        if other in arrays:
            raise CommandError(
                f"{path}: holds {other}, but its logits are "
                + (
                    f"one split (logits): name the weights {WEIGHT_KEY}"
                    if key == WEIGHT_KEY
                    else f"two splits (logits_val, logits_test): name the "
                    f"weights {WEIGHT_KEY}_val and {WEIGHT_KEY}_test"
                )
            )
    if key not in arrays:
        return None
    try:
        return check_labels_per_row(
            np.asarray(arrays[key]), n_samples, name="sample weights", rows_of="logits"
        )
    except ValueError as exc:
        raise CommandError(f"{path} [{key}]: {exc}") from exc


def _keys_message(path, arrays):
    return (
        f"{path}: no logits found; expected the keys logits_val, y_val, "
        "logits_test, y_test (two splits) or logits with y or labels (one "
        f"split); found: {', '.join(sorted(arrays)) or 'nothing'}"
    )


def read_splits(path, labels_path=None, *, need_labels=True):
    """Read a logits file into ``{"val": Split, "test": Split}`` (test optional).

    A file with ``logits_val`` / ``y_val`` (and optionally ``logits_test`` /
    ``y_test``) gives two splits; a file with ``logits`` (and ``y`` or
    ``labels``, or a separate labels file) gives only ``"val"``. Only these
    arrays are read.
    """
    arrays = read_arrays(path)
    names = getattr(arrays, "logit_names", None)
    labels = read_labels(labels_path) if labels_path is not None else None
    refuse_both(arrays, path, "logits", "logits_val", "logits to fit on")
    splits = {}
    if "logits_val" in arrays:
        if labels is not None:
            raise CommandError(
                f"{path} holds val/test splits with their own labels; --labels "
                "applies only to a file of one split"
            )
        for part, (logits_key, y_key) in SPLIT_KEYS.items():
            if logits_key not in arrays:
                continue
            where = f"{path} [{logits_key}]"
            logits = as_logits(arrays[logits_key], where)
            if y_key not in arrays:
                if need_labels:
                    raise CommandError(f"{path}: {logits_key} has no {y_key} beside it")
                splits[part] = Split(logits, None, names)
                continue
            y = as_labels(arrays[y_key], f"{path} [{y_key}]", logits.shape[0])
            weights = _sample_weight(
                arrays,
                path,
                f"{WEIGHT_KEY}_{part}",
                logits.shape[0],
                layout=(WEIGHT_KEY,),
            )
            splits[part] = Split(logits, y, names, weights)
    elif "logits" in arrays:
        logits = as_logits(arrays["logits"], f"{path} [logits]")
        key = label_key(arrays, path)
        if key is not None and labels is not None:
            raise CommandError(
                f"{path} already holds labels; drop --labels or remove them"
            )
        y, where = (arrays[key], f"{path} [{key}]") if key is not None else (None, "")
        if labels is not None:
            y, where = labels, str(labels_path)
        if y is None and need_labels:
            table = Path(path).suffix.lower() in (".csv", ".parquet")
            raise CommandError(
                f"{path}: no labels; give --labels FILE or store them under "
                f"the key or column {' / '.join(LABEL_KEYS)}"
                + (
                    " (a table's label column is named label, labels or y in "
                    "its header row)"
                    if table
                    else ""
                )
            )
        if y is not None:
            y = as_labels(y, where, logits.shape[0])
        weights = _sample_weight(
            arrays,
            path,
            WEIGHT_KEY,
            logits.shape[0],
            layout=(f"{WEIGHT_KEY}_val", f"{WEIGHT_KEY}_test"),
        )
        splits["val"] = Split(logits, y, names, weights)
    elif "logits_test" in arrays and not need_labels:
        splits["val"] = Split(as_logits(arrays["logits_test"], f"{path}"), None)
    else:
        raise CommandError(_keys_message(path, arrays))
    if (
        "test" in splits
        and splits["test"].logits.shape[1] != splits["val"].logits.shape[1]
    ):
        raise CommandError(
            f"{path}: logits_val has {splits['val'].logits.shape[1]} columns but "
            f"logits_test has {splits['test'].logits.shape[1]}"
        )
    return splits


def read_logits_only(path, *, with_names=False):
    """Logits to calibrate: ``logits``, else ``logits_test``, else a bare array.

    ``with_names``: return ``(logits, names)``, with the logit columns' names
    where a table gave them (else None).
    """
    arrays = read_arrays(path)
    refuse_both(arrays, Path(path), "logits", "logits_test", "logits to calibrate")
    for key in ("logits", "logits_test"):
        if key in arrays:
            logits = as_logits(arrays[key], f"{path} [{key}]")
            if with_names:
                return logits, getattr(arrays, "logit_names", None)
            return logits
    raise CommandError(
        f"{path}: no logits found; expected a bare array or the key logits or "
        f"logits_test (found: {', '.join(sorted(arrays)) or 'nothing'})"
    )
