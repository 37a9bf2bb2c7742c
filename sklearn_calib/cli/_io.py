"""Reading and writing the command line's files, trusting none of them.

Nothing read is ever unpickled. ``.npy`` files and the members of ``.npz``
archives are read by :mod:`sklearn_calib.utils._npy_files`: the header first,
then its dtype (numbers, booleans or strings; never objects) and its declared
size against the bytes actually present, and only then is memory allocated and
the data read, exactly the declared number of bytes. A damaged or crafted file
thus ends in a message naming what is wrong instead of a misleading one, a
huge allocation or an archive member inflating without bound. An ``.npz`` is
read lazily: a command loads only the members it uses. ``.pt`` goes through
``torch.load(weights_only=True)`` and tables through pandas.

Outputs are written to a temporary file beside the target and renamed over it
once complete, so that a failed write leaves nothing behind; they never
replace an input file, nor an existing file unless ``--overwrite`` is given.
"""

import contextlib
import os
import re
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..utils import _npy_files
from ..utils._validation import is_torch_tensor, to_numpy
from ._common import CommandError, first_line

SUFFIXES = (".npy", ".npz", ".csv", ".parquet", ".pt")
OUTPUT_SUFFIXES = (".npy", ".npz", ".csv")
# Names of a label key (.npz, .pt) or column (.csv, .parquet), any case.
LABEL_KEYS = ("y", "labels", "label")
SPLIT_KEYS = {"val": ("logits_val", "y_val"), "test": ("logits_test", "y_test")}
# Sample weights: this key (.npz, .pt) or column (.csv, .parquet, any case)
# for one split, WEIGHT_KEY + "_val" / "_test" for two, as in a folder of
# chunks.
WEIGHT_KEY = "sample_weight"


def label_key(names, path, *, kind="keys"):
    """Which of ``names`` (a file's keys, a folder's arrays) holds the labels.

    One of ``LABEL_KEYS``, or None; two of them are ambiguous.
    """
    found = [key for key in LABEL_KEYS if key in names]
    if len(found) > 1:
        raise CommandError(
            f"{path}: ambiguous labels: the {kind} {', '.join(found)} could each "
            "be the labels; keep one"
        )
    return found[0] if found else None


def refuse_both(names, path, first, second, what):
    """Refuse ``names`` holding both ``first`` and ``second`` (e.g. two logits)."""
    if first in names and second in names:
        raise CommandError(
            f"{path}: holds both {first} and {second}; which {what} is ambiguous "
            "(keep one)"
        )


def existing_file(path):
    """``path`` as a Path, if it names an existing file (not a folder)."""
    path = Path(path)
    if not path.exists():
        raise CommandError(f"{path}: no such file")
    if path.is_dir():
        raise CommandError(f"{path}: is a directory, not a file")
    return path


def check_input_path(path):
    """``path`` as a Path, if it names an existing file of a supported type."""
    path = existing_file(path)
    if path.suffix.lower() not in SUFFIXES:
        raise CommandError(
            f"{path}: unsupported file type {path.suffix or '(none)'!r}; use "
            + ", ".join(SUFFIXES)
        )
    return path


# --------------------------------------------------------------------------
# .npy and .npz, parsed without numpy.load
# --------------------------------------------------------------------------


def read_npy(path):
    """The array of a .npy file, checked before any allocation."""
    try:
        return _npy_files.read_npy(path)
    except (ValueError, MemoryError) as exc:
        raise CommandError(str(exc)) from exc


class NpzArrays(Mapping):
    """The arrays of an ``.npz`` archive, each read and checked on first use.

    Opening lists the members; ``archive[key]`` reads one, with the checks of
    :func:`sklearn_calib.utils._npy_files.read_npz_member`: no member inflates
    beyond its declared shape.
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            self._keys = _npy_files.npz_keys(self.path)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self._cache = {}

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._cache:
            self._cache[key] = self._read(key)
        return self._cache[key]

    def _read(self, key):
        where = f"{self.path} [{key}]"
        try:
            return _npy_files.read_npz_member(self.path, key)
        except (ValueError, MemoryError) as exc:
            raise CommandError(str(exc)) from exc
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise CommandError(
                f"{where}: damaged archive member ({type(exc).__name__}: "
                f"{first_line(exc)})"
            ) from exc
        except OSError as exc:  # the file went away or became unreadable
            raise CommandError(f"{where}: cannot be read ({exc})") from exc


# --------------------------------------------------------------------------
# .pt and tables
# --------------------------------------------------------------------------


def read_pt(path):
    """The tensors of a .pt file, loaded with ``weights_only=True``."""
    from .._torch._files import load_weights_only

    # torch warns while it reads (a pickle protocol it did not write, ...):
    # held back, so that a refused file gives one line that names the
    # problem, and shown after a load that succeeds.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            content = load_weights_only(path)
        except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ...
            raise CommandError(
                f"{path}: cannot be read with torch.load(weights_only=True), "
                f"which refuses arbitrary Python objects: {_pt_refusal(exc)}"
            ) from exc
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    if isinstance(content, dict):
        # Converted on use, as the members of an .npz: other entries (an
        # epoch number, a name) are never read.
        return _PtArrays(path, {str(k): (v, repr(k)) for k, v in content.items()})
    if isinstance(content, (tuple, list)) and len(content) == 2:
        return {
            "logits": _pt_array(path, content[0], "item 0"),
            "y": _pt_array(path, content[1], "item 1"),
        }
    return {"logits": _pt_array(path, content, "the content")}


def _pt_array(path, value, key):
    """One value of a ``.pt`` file as a numpy array, or a message naming it."""
    if is_torch_tensor(value) or isinstance(value, np.ndarray):
        try:
            # float16 and bfloat16 become float32, as everywhere else.
            return to_numpy(value)
        except (TypeError, RuntimeError) as exc:  # a sparse or quantized tensor
            raise CommandError(
                f"{path}: {key} cannot be read as an array ({first_line(exc)})"
            ) from exc
    raise CommandError(f"{path}: {key} is a {type(value).__name__}, expected a tensor")


class _PtArrays(Mapping):
    """The entries of a ``.pt`` dict, each converted to an array on first use."""

    def __init__(self, path, entries):
        self._path = path
        self._entries = entries

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __getitem__(self, key):
        value, shown = self._entries[key]
        return _pt_array(self._path, value, shown)


def _pt_refusal(exc):
    """What torch refused in a ``.pt`` file, in one short phrase.

    torch's message is several lines of advice (with terminal escape codes);
    the problem is one of them: the global it does not allow, or a pickle
    opcode it does not know (a file not written by ``torch.save``).
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    # Recent torch says "Unsupported global: GLOBAL name", torch 2.2
    # "Unsupported class name" (seen in CI's floors stage).
    found = re.search(r"Unsupported (?:global: GLOBAL|class) ([\w.]+)", text)
    if found:
        return (
            f"it needs {found.group(1)}, which torch does not allow (store "
            "tensors, numbers, strings and containers of them; a numpy array "
            "as torch.from_numpy(array))"
        )
    found = re.search(r"Unsupported operand (\d+)", text)
    if found:
        return (
            f"pickle opcode {found.group(1)} is not allowed; the file was not "
            "written by torch.save (a plain pickle, or not a pickle at all)"
        )
    return f"{type(exc).__name__}: {' '.join(text.split())[:200]}"


def read_table(path):
    """A .csv or .parquet file as a pandas DataFrame."""
    import pandas as pd

    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise CommandError(
                f"{path}: reading .parquet files needs pyarrow: "
                "python -m pip install pyarrow"
            ) from exc
        return pd.read_parquet(path)
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise CommandError(f"{path}: not a readable CSV file ({exc})") from exc


def _named_column(frame, names, path, what):
    """The one column whose name (any case) is in ``names``, or None."""
    found = [c for c in frame.columns if str(c).strip().lower() in names]
    if len(found) > 1:
        raise CommandError(
            f"{path}: ambiguous {what}: the columns "
            f"{', '.join(repr(str(c)) for c in found)} could each be it; keep one "
            "(or rename the others)"
        )
    return found[0] if found else None


def label_column(frame, path):
    """The label column of a table (named label, labels or y), or None."""
    return _named_column(frame, LABEL_KEYS, path, "label column")


def _is_number_not_name(name):
    """Whether a column name reads as data: a number, but not a plain count.

    ``0``, ``1``, ``2`` name columns (the classes, as ``apply`` writes them);
    ``-0.4213`` or ``2.5e-3`` are values of a first data row that was read as
    the header.
    """
    text = str(name).strip()
    if text.isdigit():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_table_shape(frame, path):
    """Refuse a CSV without a header row, and a table without data rows."""
    if path.suffix.lower() == ".csv":
        numbers = [str(c) for c in frame.columns if _is_number_not_name(c)]
        if numbers:
            shown = ", ".join(numbers[:3]) + (", ..." if len(numbers) > 3 else "")
            raise CommandError(
                f"{path}: the first row holds numbers ({shown}), not column "
                "names; a CSV file needs a header row naming its columns (the "
                "logit columns, and 'label' or 'y' for the labels), e.g. "
                "a,b,c,label"
            )
        # pandas names an empty header cell "Unnamed: i": the row numbers
        # that DataFrame.to_csv writes first by default, which would be read
        # as one more logit column (one more class) without a word.
        unnamed = [
            i
            for i, c in enumerate(frame.columns)
            if re.fullmatch(r"Unnamed: \d+(\.\d+)?", str(c))
        ]
        if unnamed:
            raise CommandError(
                f"{path}: column {unnamed[0]} has no name in the header row (the "
                "row numbers that pandas' to_csv writes unless index=False?); "
                "every column needs a name: drop that column or name it"
            )
    if frame.shape[0] == 0:
        raise CommandError(
            f"{path}: no data rows (the columns "
            f"{', '.join(repr(str(c)) for c in frame.columns[:5])}"
            f"{', ...' if frame.shape[1] > 5 else ''} hold no values)"
        )


class TableArrays(dict):
    """The arrays of a table, with the names of its logit columns."""

    logit_names = None


def _logit_block(block):
    """The logit columns as a float array; a missing value becomes NaN.

    Columns of pandas' nullable dtypes (``Float64``, ``Int64``, ..., read
    from parquet files written with them) would give an object array, with
    ``pd.NA`` where a value is missing: they are converted to floats here, so
    that NaN is reported as such (and a column without missing values is
    read at all).
    """
    if all(isinstance(dtype, np.dtype) for dtype in block.dtypes):
        return block.to_numpy()
    dtype = np.result_type(
        np.float32,
        *(getattr(d, "numpy_dtype", np.dtype(np.float64)) for d in block.dtypes),
    )
    return block.to_numpy(dtype=dtype, na_value=np.nan)


def frame_to_arrays(frame, path):
    """Split a table into logit columns, an optional label and split column.

    The result's ``logit_names`` are the logit columns' names, as text.
    """
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    check_table_shape(frame, path)
    labels = label_column(frame, path)
    split_column = _named_column(frame, ("split",), path, "split column")
    weights = _named_column(frame, (WEIGHT_KEY,), path, "weight column")
    logit_columns = [
        c for c in frame.columns if c not in (labels, split_column, weights)
    ]
    if not logit_columns:
        raise CommandError(f"{path}: no logit columns found")
    for column in logit_columns:
        if not is_numeric_dtype(frame[column]) or is_bool_dtype(frame[column]):
            raise CommandError(
                f"{path}: column {column!r} is not numeric; logit columns must "
                "hold numbers (name the label column 'label' or 'y'; a CSV file "
                "needs a header row)"
            )
    logits = _logit_block(frame[logit_columns])
    y = frame[labels].to_numpy() if labels is not None else None
    w = frame[weights].to_numpy() if weights is not None else None
    arrays = TableArrays()
    arrays.logit_names = [str(c).strip() for c in logit_columns]
    if split_column is None:
        arrays["logits"] = logits
        if y is not None:
            arrays["y"] = y
        if w is not None:
            arrays[WEIGHT_KEY] = w
        return arrays
    split = frame[split_column].astype(str).str.strip().str.lower().to_numpy()
    unknown = sorted(set(split) - {"val", "test"})
    if unknown:
        raise CommandError(
            f"{path}: the split column holds {unknown!r}; use 'val' and 'test'"
        )
    for part, (logits_key, y_key) in SPLIT_KEYS.items():
        rows = split == part
        if rows.any():
            arrays[logits_key] = logits[rows]
            if y is not None:
                arrays[y_key] = y[rows]
            if w is not None:
                arrays[f"{WEIGHT_KEY}_{part}"] = w[rows]
    return arrays


def read_arrays(path):
    """A supported file as a mapping of named arrays, never unpickling.

    An ``.npz`` archive gives a lazy mapping that reads a member when it is
    first looked up; the other types are read whole.
    """
    path = check_input_path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return {"logits": read_npy(path)}
        if suffix == ".npz":
            return NpzArrays(path)
        if suffix == ".pt":
            return read_pt(path)
        return frame_to_arrays(read_table(path), path)
    except CommandError:
        raise
    except (OSError, EOFError, ValueError) as exc:
        raise CommandError(f"{path}: cannot be read ({first_line(exc)})") from exc


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return Path(a).resolve() == Path(b).resolve()


def check_output(path, *, inputs=(), overwrite=False, folder_may_be_created=False):
    """Check, before any work, that ``path`` may be written; returns it as a Path.

    Never an input file (compared as files, so a symlink or another spelling
    of the same path counts), a folder or a device; an existing file only
    with ``overwrite``; and the folder must exist and be writable (unless it
    is one that the command will create).
    """
    path = Path(path)
    for source in inputs:
        if source is not None and _same_file(path, source):
            shown = "" if str(source) == str(path) else f" ({source})"
            raise CommandError(
                f"{path}: refusing to write over an input file{shown}; choose "
                "another output"
            )
    if path.is_dir():
        raise CommandError(f"{path}: is a directory; give a file name")
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise CommandError(
                f"{path}: already exists; pass --overwrite to replace it"
            )
        if not path.is_file():
            raise CommandError(f"{path}: exists and is not a regular file")
    if not folder_may_be_created:
        folder = path.parent
        if not folder.is_dir():
            raise CommandError(f"{path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CommandError(f"{path}: cannot write in the folder {folder}")
    return path


def check_output_folder(folder, names, *, inputs=(), overwrite=False):
    """Check that the files ``names`` may be written in ``folder`` (maybe new)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"{folder}: exists and is not a folder")
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CommandError(f"{folder}: cannot create the folder: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CommandError(f"{folder}: cannot write in {existing}")
    return [
        check_output(
            folder / name,
            inputs=inputs,
            overwrite=overwrite,
            folder_may_be_created=True,
        )
        for name in names
    ]


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(path):
    """A binary file that becomes ``path`` only once written completely.

    The data go to a temporary file in the same folder (:func:`atomic_path`),
    renamed over ``path`` at the end; on any error the temporary file is
    removed and ``path`` is left as it was.
    """
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        yield handle


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` that becomes ``path`` once written.

    For writers that take a file name rather than a handle (``apply_chunks``);
    on any error the temporary file is removed and ``path`` left as it was.
    """
    path = Path(path)
    try:
        fd, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".part"
        )
    except OSError as exc:
        raise CommandError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    os.close(fd)
    try:
        yield Path(temporary)
        # mkstemp creates the file readable by its owner only; give it the
        # permissions any new file of the user gets.
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise CommandError(f"{path}: cannot write ({exc.strerror or exc})") from exc
        raise


def write_bytes(path, data):
    """Write ``data`` to ``path`` atomically."""
    with atomic_writer(path) as handle:
        handle.write(data)


def write_proba(path, proba, classes):
    """Write probabilities as .npy, .npz (``proba``, ``classes``) or .csv.

    The format follows the suffix in any case, and the file is written at
    exactly ``path`` (``numpy.save`` given a name would append ``.npy`` to
    ``P.NPY``).
    """
    suffix = path.suffix.lower()
    with atomic_writer(path) as handle:
        if suffix == ".npy":
            np.save(handle, proba, allow_pickle=False)
        elif suffix == ".npz":
            np.savez(handle, proba=proba, classes=np.asarray(classes).astype(str))
        else:
            import pandas as pd

            pd.DataFrame(proba, columns=[str(c) for c in classes]).to_csv(
                handle, index=False
            )
