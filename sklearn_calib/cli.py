"""The ``sklearn-calib`` command line (also ``python -m sklearn_calib``).

Three commands, each a thin layer over the public API:

- ``report [FILE]``: fit every calibrator (or ``--methods``) on the val part of
  a logits file (by default the bundled CIFAR-100 set), score them on the test
  part (or by cross-validation when the file holds one split) and print a
  table; ``--out DIR`` adds reliability diagrams and a self-contained HTML page.
- ``fit --method NAME --logits FILE [--labels FILE] -o calibrator.skops``.
- ``apply calibrator.skops --logits FILE -o probs.npy``.

Input files are read without unpickling anything: ``.npy``/``.npz`` with
``allow_pickle=False``, ``.pt`` with ``torch.load(..., weights_only=True)``,
``.csv`` and ``.parquet`` through pandas. Bad usage or input ends with a
one-line message on stderr and exit status 2.
"""

import argparse
import ast
import base64
import csv
import html
import io
import json
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXIT_OK = 0
EXIT_USAGE = 2

SUFFIXES = (".npy", ".npz", ".csv", ".parquet", ".pt")
LABEL_KEYS = ("y", "labels", "label")
SPLIT_KEYS = {"val": ("logits_val", "y_val"), "test": ("logits_test", "y_test")}

# Settings ``report`` uses instead of a method's defaults, for a method too
# slow to run on the bundled data well within a minute on two CPU cores; the
# table and the HTML page say when a method ran with them. None is needed at
# present: with their defaults, every method fits the bundled CIFAR-100 set
# in a few seconds on two cores (the whole report takes about 10 s).
REPORT_PARAMS: dict[str, dict] = {}


class CommandError(Exception):
    """Bad usage or input: reported as one line on stderr, exit status 2."""


# --------------------------------------------------------------------------
# Reading inputs
# --------------------------------------------------------------------------


@dataclass
class Split:
    """Logits and (possibly missing) labels of one part of a data set."""

    logits: np.ndarray
    y: np.ndarray | None


def _check_path(path):
    path = Path(path)
    if not path.exists():
        raise CommandError(f"{path}: no such file")
    if path.is_dir():
        raise CommandError(f"{path}: is a directory, not a file")
    if path.suffix.lower() not in SUFFIXES:
        raise CommandError(
            f"{path}: unsupported file type {path.suffix or '(none)'!r}; use "
            + ", ".join(SUFFIXES)
        )
    return path


def _read_npy(path):
    try:
        return {"logits": np.load(path, allow_pickle=False)}
    except ValueError as exc:
        raise CommandError(
            f"{path}: holds an object array (pickled Python objects), which is "
            "never loaded; save a numeric array instead"
        ) from exc


def _read_npz(path):
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except ValueError as exc:
        raise CommandError(
            f"{path}: holds object arrays (pickled Python objects), which are "
            "never loaded; save numeric arrays instead"
        ) from exc


def _read_pt(path):
    try:
        import torch
    except ImportError as exc:  # torch is a dependency, but be explicit
        raise CommandError(f"{path}: reading .pt files needs torch") from exc
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ...
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CommandError(
            f"{path}: cannot be read with torch.load(weights_only=True), which "
            f"refuses arbitrary Python objects ({type(exc).__name__}: "
            f"{first_line[:120]})"
        ) from exc

    def to_array(value, key):
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if value.dtype in (torch.float16, torch.bfloat16):
                value = value.float()
            return value.cpu().numpy()
        if isinstance(value, np.ndarray):
            return value
        raise CommandError(
            f"{path}: {key} is a {type(value).__name__}, expected a tensor"
        )

    if isinstance(content, dict):
        return {str(k): to_array(v, repr(k)) for k, v in content.items()}
    if isinstance(content, (tuple, list)) and len(content) == 2:
        return {
            "logits": to_array(content[0], "item 0"),
            "y": to_array(content[1], "item 1"),
        }
    return {"logits": to_array(content, "the content")}


def _read_table(path):
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


def _label_column(frame):
    columns = {str(c).strip().lower(): c for c in frame.columns}
    return next((columns[k] for k in LABEL_KEYS if k in columns), None)


def _frame_to_arrays(frame, path):
    """Split a table into logit columns, an optional label and split column."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    label_column = _label_column(frame)
    split_column = next(
        (c for c in frame.columns if str(c).strip().lower() == "split"), None
    )
    logit_columns = [c for c in frame.columns if c not in (label_column, split_column)]
    if not logit_columns:
        raise CommandError(f"{path}: no logit columns found")
    for column in logit_columns:
        if not is_numeric_dtype(frame[column]) or is_bool_dtype(frame[column]):
            raise CommandError(
                f"{path}: column {column!r} is not numeric; logit columns must "
                "hold numbers (name the label column 'label' or 'y'; a CSV file "
                "needs a header row)"
            )
    logits = frame[logit_columns].to_numpy()
    y = frame[label_column].to_numpy() if label_column is not None else None
    if split_column is None:
        arrays = {"logits": logits}
        if y is not None:
            arrays["y"] = y
        return arrays
    split = frame[split_column].astype(str).str.strip().str.lower().to_numpy()
    unknown = sorted(set(split) - {"val", "test"})
    if unknown:
        raise CommandError(
            f"{path}: the split column holds {unknown!r}; use 'val' and 'test'"
        )
    arrays = {}
    for part, (logits_key, y_key) in SPLIT_KEYS.items():
        rows = split == part
        if rows.any():
            arrays[logits_key] = logits[rows]
            if y is not None:
                arrays[y_key] = y[rows]
    return arrays


def read_arrays(path):
    """Read a supported file into a dict of named arrays, never unpickling."""
    path = _check_path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return _read_npy(path)
        if suffix == ".npz":
            return _read_npz(path)
        if suffix == ".pt":
            return _read_pt(path)
        return _frame_to_arrays(_read_table(path), path)
    except CommandError:
        raise
    except (OSError, EOFError) as exc:
        raise CommandError(f"{path}: cannot be read ({exc})") from exc
    except ValueError as exc:
        raise CommandError(f"{path}: cannot be read ({exc})") from exc


def _as_logits(array, where):
    array = np.asarray(array)
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating)
        or np.issubdtype(array.dtype, np.integer)
    ):
        raise CommandError(
            f"{where}: logits must be a numeric array, got dtype {array.dtype}"
        )
    if array.ndim == 1:
        # One score per sample: the positive-class score of a binary problem.
        array = array[:, None]
    if array.ndim != 2:
        raise CommandError(
            f"{where}: logits must be 2-D (n_samples, n_classes), got shape "
            f"{array.shape}"
        )
    if array.shape[0] == 0:
        raise CommandError(f"{where}: logits hold no samples")
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        kind = "NaN" if np.isnan(array).any() else "infinity"
        raise CommandError(
            f"{where}: logits contain {kind} ({int(bad.sum())} values, first in "
            f"row {row})"
        )
    return array


def _as_labels(array, where, n_samples):
    array = np.asarray(array)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise CommandError(
            f"{where}: labels must be 1-D (n_samples,), got shape {array.shape}"
        )
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise CommandError(f"{where}: labels contain NaN or infinity")
    if array.dtype == object and any(v is None or v != v for v in array):
        raise CommandError(f"{where}: labels contain missing values")
    if array.shape[0] != n_samples:
        raise CommandError(
            f"{where}: {n_samples} rows of logits but {array.shape[0]} labels; "
            "they must have the same length"
        )
    return array


def _label_array(arrays, path):
    found = [k for k in LABEL_KEYS if k in arrays]
    return arrays[found[0]] if found else None


def read_labels(path):
    """Read a labels file: a 1-D array, or a table/archive with a label column."""
    path = _check_path(path)
    if path.suffix.lower() in (".csv", ".parquet"):
        try:
            frame = _read_table(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: cannot be read ({exc})") from exc
        column = _label_column(frame)
        if column is None and frame.shape[1] == 1:
            column = frame.columns[0]
        if column is None:
            raise CommandError(
                f"{path}: no labels found; expected a single column or a column "
                f"named label or y (found: {', '.join(map(str, frame.columns))})"
            )
        return frame[column].to_numpy()
    arrays = read_arrays(path)
    labels = _label_array(arrays, path)
    if labels is None and len(arrays) == 1:
        labels = next(iter(arrays.values()))
    if labels is None:
        raise CommandError(
            f"{path}: no labels found; expected one array, or a key or column "
            f"named {' / '.join(LABEL_KEYS)} (found: {', '.join(arrays)})"
        )
    return labels


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
    ``labels``, or a separate labels file) gives only ``"val"``.
    """
    arrays = read_arrays(path)
    labels = read_labels(labels_path) if labels_path is not None else None
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
            logits = _as_logits(arrays[logits_key], where)
            if y_key not in arrays:
                if need_labels:
                    raise CommandError(f"{path}: {logits_key} has no {y_key} beside it")
                splits[part] = Split(logits, None)
                continue
            y = _as_labels(arrays[y_key], f"{path} [{y_key}]", logits.shape[0])
            splits[part] = Split(logits, y)
    elif "logits" in arrays:
        logits = _as_logits(arrays["logits"], f"{path} [logits]")
        y = _label_array(arrays, path)
        if y is not None and labels is not None:
            raise CommandError(
                f"{path} already holds labels; drop --labels or remove them"
            )
        where = f"{path} [labels]"
        if labels is not None:
            y, where = labels, f"{labels_path}"
        if y is None and need_labels:
            raise CommandError(
                f"{path}: no labels; give --labels FILE or store them under "
                f"the key or column {' / '.join(LABEL_KEYS)}"
            )
        if y is not None:
            y = _as_labels(y, where, logits.shape[0])
        splits["val"] = Split(logits, y)
    elif "logits_test" in arrays and not need_labels:
        splits["val"] = Split(_as_logits(arrays["logits_test"], f"{path}"), None)
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


def read_logits_only(path):
    """Logits to calibrate: ``logits``, else ``logits_test``, else a bare array."""
    arrays = read_arrays(path)
    for key in ("logits", "logits_test"):
        if key in arrays:
            return _as_logits(arrays[key], f"{path} [{key}]")
    raise CommandError(
        f"{path}: no logits found; expected a bare array or the key logits or "
        f"logits_test (found: {', '.join(sorted(arrays)) or 'nothing'})"
    )


# --------------------------------------------------------------------------
# Calibrators
# --------------------------------------------------------------------------


def _normalise(name):
    return re.sub(r"[-_\s]", "", name).lower()


def calibrator_classes():
    """Public calibrators by class name, from the registry."""
    from .utils.discovery import all_calibrators

    return dict(all_calibrators())


def resolve_method(name):
    """Calibrator class from a name.

    The class name in any case, with or without underscores or hyphens
    (``temperature_scaling``), or an unambiguous start of one (``platt``).
    """
    classes = calibrator_classes()
    wanted = _normalise(name)
    exact = [cls for key, cls in classes.items() if _normalise(key) == wanted]
    if exact:
        return exact[0]
    prefixed = [key for key in classes if wanted and _normalise(key).startswith(wanted)]
    if len(prefixed) == 1:
        return classes[prefixed[0]]
    if prefixed:
        raise CommandError(
            f"method {name!r} is ambiguous: {', '.join(sorted(prefixed))}"
        )
    raise CommandError(
        f"unknown method {name!r}; choose from {', '.join(sorted(classes))} "
        "(any case; snake_case or the start of a name works too)"
    )


def make_calibrator(cls, *, device=None, seed=None, params=None):
    """An instance of ``cls`` with ``params``, a device and a seed where it has them.

    A seed makes the stochastic methods (SMART's initialisation, ...) give
    the same numbers on every run of the command.
    """
    estimator = cls()
    accepted = estimator.get_params()
    if seed is not None and "random_state" in accepted:
        estimator.set_params(random_state=seed)
    if device is not None and "device" in accepted:
        estimator.set_params(device=device)
    return estimator.set_params(**(params or {}))


def _import_skops():
    try:
        import skops.io
    except ImportError as exc:
        raise CommandError(
            "saving and loading calibrators needs skops: python -m pip install "
            "'sklearn-calib[cli]' (or skops)"
        ) from exc
    return skops.io


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

# (key, table header, percent?) in display order.
COLUMNS = (
    ("ece", "ECE %", True),
    ("adaptive_ece", "AdaECE %", True),
    ("classwise_ece", "cw-ECE %", True),
    ("nll", "NLL", False),
    ("brier", "Brier", False),
    ("accuracy", "Acc %", True),
    ("fit_time_s", "Fit s", False),
)
LOWER_IS_BETTER = {"ece", "adaptive_ece", "classwise_ece", "nll", "brier"}


def _score(y, proba, n_bins):
    from .metrics import calibration_report

    return calibration_report(y, proba, n_bins=n_bins, as_frame=False)["model"]


def _first_line(message):
    text = str(message).strip()
    return text.splitlines()[0] if text else ""


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total, *, stream=None, width=24):
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.width = width
        self.enabled = (
            total > 0 and hasattr(self.stream, "isatty") and self.stream.isatty()
        )

    def update(self, done, label):
        if not self.enabled:
            return
        filled = round(self.width * done / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {label[:30]:<30}")
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\r" + " " * (self.width + 40) + "\r")
            self.stream.flush()


def _fold_iterator(y, n_splits, seed):
    from sklearn.model_selection import KFold, StratifiedKFold

    _, counts = np.unique(y, return_counts=True)
    if counts.min() >= n_splits:
        return StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(y, y)
    return KFold(n_splits, shuffle=True, random_state=seed).split(y)


def _evaluate(estimator, splits, y_codes, args):
    """Fit and score one calibrator; returns (scores, test probabilities)."""
    val = splits["val"]
    started = time.perf_counter()
    if "test" in splits:
        estimator.fit(val.logits, y_codes["val"])
        fit_time = time.perf_counter() - started
        proba = estimator.predict_proba(splits["test"].logits)
        y_eval = y_codes["test"]
    else:
        from sklearn.base import clone

        proba = None
        fit_time = 0.0
        for train, held_out in _fold_iterator(y_codes["val"], args.cv, args.seed):
            fold = clone(estimator)
            started = time.perf_counter()
            fold.fit(val.logits[train], y_codes["val"][train])
            fit_time += time.perf_counter() - started
            fold_proba = fold.predict_proba(val.logits[held_out])
            if proba is None:
                proba = np.empty(
                    (val.logits.shape[0], fold_proba.shape[1]), fold_proba.dtype
                )
            proba[held_out] = fold_proba
        y_eval = y_codes["val"]
    scores = _score(y_eval, proba, args.n_bins)
    scores["fit_time_s"] = fit_time
    return scores, proba


def _run_method(name, cls, splits, y_codes, args):
    """One row of the report: scores and notes, or the reason it failed."""
    from sklearn.utils import get_tags

    params = REPORT_PARAMS.get(name)
    estimator = make_calibrator(cls, device=args.device, seed=args.seed, params=params)
    empty = dict.fromkeys(key for key, _, _ in COLUMNS)
    n_columns = max(2, splits["val"].logits.shape[1])
    if n_columns > 2 and not get_tags(estimator).classifier_tags.multi_class:
        return {"method": name, **empty, "note": "skipped: binary problems only"}, None
    notes = [f"fast settings {params}"] if params else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scores, proba = _evaluate(estimator, splits, y_codes, args)
        except (ValueError, TypeError) as exc:
            # A method that cannot handle these data gets a row saying why;
            # the others still run.
            return {
                "method": name,
                **empty,
                "note": f"failed: {_first_line(exc)}",
            }, None
    for w in caught:
        text = f"{w.category.__name__}: {_first_line(w.message)}"
        if text not in notes:
            notes.append(text)
    return {"method": name, **scores, "note": "; ".join(notes)}, proba


def _encode_labels(splits):
    """Integer codes shared by both splits, matching the logit columns."""
    from .utils._validation import resolve_classes

    parts = [p for p in ("val", "test") if p in splits]
    y_all = np.concatenate([splits[p].y for p in parts])
    n_cols = splits["val"].logits.shape[1]
    try:
        classes, codes = resolve_classes(y_all, n_cols)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    out, start = {}, 0
    for part in parts:
        n = splits[part].y.shape[0]
        out[part] = np.asarray(codes[start : start + n], dtype=np.int64)
        start += n
    return classes, out


def _uncalibrated_proba(logits):
    from .utils._math import softmax
    from .utils._validation import expand_binary_scores

    return softmax(expand_binary_scores(logits).astype(np.float64))


def _select_methods(spec):
    classes = calibrator_classes()
    if not spec:
        return sorted(classes.items())
    chosen = []
    for name in spec.split(","):
        name = name.strip()
        if not name:
            continue
        cls = resolve_method(name)
        if (cls.__name__, cls) not in chosen:
            chosen.append((cls.__name__, cls))
    if not chosen:
        raise CommandError("--methods names no method")
    return chosen


def _report_data(args):
    if args.file is not None and args.dataset is not None:
        raise CommandError("give either FILE or --dataset, not both")
    if args.file is None:
        from .datasets import list_logits, load_logits

        name = args.dataset or "c100_densenetbc100_netcal"
        if name not in list_logits():
            raise CommandError(
                f"unknown bundled set {name!r}; choose from {', '.join(list_logits())}"
            )
        if args.labels is not None:
            raise CommandError("--labels needs a FILE")
        data = load_logits(name)
        splits = {
            "val": Split(data.logits_val, data.y_val),
            "test": Split(data.logits_test, data.y_test),
        }
        return splits, f"bundled set {name}", data.DESCR
    splits = read_splits(args.file, args.labels)
    return splits, str(args.file), None


def run_report(args, out=None):
    out = out if out is not None else sys.stdout
    if args.n_bins < 1:
        raise CommandError(f"--n-bins must be a positive integer, got {args.n_bins}")
    if args.cv < 2:
        raise CommandError(f"--cv must be at least 2, got {args.cv}")
    if args.out is not None:
        _require_matplotlib()
    methods = _select_methods(args.methods)
    splits, source, description = _report_data(args)
    classes, y_codes = _encode_labels(splits)
    if "test" in splits:
        evaluation = "fit on val, scored on test"
        y_eval, logits_eval = y_codes["test"], splits["test"].logits
    else:
        evaluation = f"{args.cv}-fold cross-validation (out-of-fold predictions)"
        y_eval, logits_eval = y_codes["val"], splits["val"].logits

    raw = _uncalibrated_proba(logits_eval)
    rows = [
        {
            "method": "Uncalibrated",
            **_score(y_eval, raw, args.n_bins),
            "fit_time_s": None,
            "note": "",
        }
    ]
    # Import torch now, so that the first torch-backed method's fit time does
    # not include loading it.
    import torch  # noqa: F401

    probabilities = {"Uncalibrated": raw}
    progress = Progress(len(methods))
    try:
        for done, (name, cls) in enumerate(methods):
            progress.update(done, name)
            row, proba = _run_method(name, cls, splits, y_codes, args)
            rows.append(row)
            if proba is not None:
                probabilities[name] = proba
        progress.update(len(methods), "done")
    finally:
        progress.close()

    report = {
        "data": source,
        "evaluation": evaluation,
        "n_samples_val": int(splits["val"].logits.shape[0]),
        "n_samples_test": int(splits["test"].logits.shape[0])
        if "test" in splits
        else 0,
        "n_classes": int(len(classes)),
        "n_bins": args.n_bins,
        "results": rows,
    }
    out.write(format_report(report, args.format, stream=out))
    if args.out is not None:
        written = write_report_files(
            report, probabilities, y_eval, Path(args.out), args.n_bins, description
        )
        print(f"wrote {len(written)} files to {args.out}", file=sys.stderr)
    return EXIT_OK


# ----- formatting -----


def _cell(row, key, percent):
    value = row.get(key)
    if value is None:
        return "-"
    if percent:
        return f"{100 * value:.2f}"
    if key == "fit_time_s":
        return f"{value:.2f}"
    return f"{value:.4f}"


def _best(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values or key not in LOWER_IS_BETTER | {"accuracy"}:
        return None
    return min(values) if key in LOWER_IS_BETTER else max(values)


def _header_lines(report):
    if report["n_samples_test"]:
        sizes = f"{report['n_samples_val']} val / {report['n_samples_test']} test"
    else:
        sizes = f"{report['n_samples_val']}"
    return [
        f"data: {report['data']} ({report['n_classes']} classes; {sizes} samples)",
        f"evaluation: {report['evaluation']}; {report['n_bins']} bins",
    ]


def _notes(report):
    return [f"{r['method']}: {r['note']}" for r in report["results"] if r.get("note")]


def _text_table(report, *, pretty):
    rows = report["results"]
    headers = ["Method"] + [c[1] for c in COLUMNS]
    body = [[r["method"]] + [_cell(r, k, p) for k, _, p in COLUMNS] for r in rows]
    widths = [
        max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)
    ]
    bold = pretty and not os.environ.get("NO_COLOR")

    def fmt(cells, styles=None):
        parts = []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            text = cell.ljust(width) if i == 0 else cell.rjust(width)
            if styles and styles[i]:
                text = f"\033[1;32m{text}\033[0m"
            parts.append(text)
        return ("│ " + " │ ".join(parts) + " │") if pretty else "  ".join(parts)

    best = {k: _best(rows, k) for k, _, _ in COLUMNS}
    lines = []
    if pretty:
        lines.append("┌─" + "─┬─".join("─" * w for w in widths) + "─┐")
        header = fmt(headers)
        lines.append(f"\033[1m{header}\033[0m" if bold else header)
        lines.append("├─" + "─┼─".join("─" * w for w in widths) + "─┤")
    else:
        lines.append(fmt(headers))
        lines.append("  ".join("-" * w for w in widths))
    for r, cells in zip(rows, body, strict=True):
        styles = None
        if bold:
            styles = [False] + [
                best[k] is not None and r.get(k) == best[k] for k, _, _ in COLUMNS
            ]
        lines.append(fmt(cells, styles))
    if pretty:
        lines.append("└─" + "─┴─".join("─" * w for w in widths) + "─┘")
    return (
        "\n".join(_header_lines(report) + [""] + lines + [""] + _notes(report)) + "\n"
    )


def _markdown_table(report):
    rows = report["results"]
    headers = ["Method"] + [c[1] for c in COLUMNS]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(COLUMNS)) + "|",
    ]
    for r in rows:
        cells = [r["method"]] + [_cell(r, k, p) for k, _, p in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {n}" for n in _notes(report)]
    header = [f"{line}  " for line in _header_lines(report)]
    return "\n".join(header + [""] + lines + ([""] + notes if notes else [])) + "\n"


def _csv_table(report):
    buffer = io.StringIO()
    keys = ["method"] + [c[0] for c in COLUMNS] + ["note"]
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for r in report["results"]:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    return buffer.getvalue()


def format_report(report, fmt, *, stream=None):
    """Render the report as ``table``, ``markdown``, ``csv`` or ``json`` text.

    ``table`` is drawn with box characters and the best value of each column
    highlighted when ``stream`` is a terminal, and as plain aligned text
    otherwise.
    """
    if fmt == "markdown":
        return _markdown_table(report)
    if fmt == "csv":
        return _csv_table(report)
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    pretty = stream is not None and hasattr(stream, "isatty") and stream.isatty()
    return _text_table(report, pretty=pretty)


# ----- files written by --out -----


def _require_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise CommandError(
            "--out draws reliability diagrams and needs matplotlib: python -m pip "
            "install 'sklearn-calib[plot]'"
        ) from exc


def _slug(name):
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


def _reliability_png(path, y, proba, name, n_bins):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .display import ReliabilityDisplay

    fig, (ax, hist_ax) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(4.2, 5.2),
        layout="constrained",
        gridspec_kw={"height_ratios": [3, 1]},
    )
    ReliabilityDisplay.from_predictions(
        y, proba, n_bins=n_bins, name=name, ax=ax, hist_ax=hist_ax
    )
    ax.set_title(name)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


_HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.best { font-weight: bold; color: #1a7f37; }
.figures { display: flex; flex-wrap: wrap; gap: 1em; }
.figures figure { margin: 0; }
.figures img { width: 320px; height: auto; border: 1px solid #eee; }
pre { background: #f6f8fa; padding: 1em; white-space: pre-wrap; }
.note { color: #8a4b08; }
"""


def _html_report(report, images, description):
    rows = report["results"]
    best = {k: _best(rows, k) for k, _, _ in COLUMNS}
    head = "".join(
        f"<th>{html.escape(h)}</th>" for h in ["Method"] + [c[1] for c in COLUMNS]
    )
    body = []
    for r in rows:
        cells = [f"<td>{html.escape(r['method'])}</td>"]
        for key, _, percent in COLUMNS:
            mark = (
                ' class="best"'
                if best[key] is not None and r.get(key) == best[key]
                else ""
            )
            cells.append(f"<td{mark}>{_cell(r, key, percent)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f'<li class="note">{html.escape(n)}</li>' for n in _notes(report))
    figures = "".join(
        f'<figure><img alt="reliability diagram of {html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        "</figure>"
        for name, png in images.items()
    )
    from . import __version__

    info = "".join(f"<p>{html.escape(line)}</p>" for line in _header_lines(report))
    descr = f"<h2>Data</h2><pre>{html.escape(description)}</pre>" if description else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>sklearn-calib report</title>"
        f"<style>{_HTML_STYLE}</style></head><body>"
        "<h1>Calibration report</h1>"
        f"{info}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        "<p>ECE: top-label expected calibration error with equal-width bins; "
        "AdaECE: the same with equal-mass bins; cw-ECE: class-wise ECE; NLL: "
        "negative log-likelihood; Brier: multiclass Brier score; lower is "
        "better for all five. Best values in bold.</p>"
        f"{'<ul>' + notes + '</ul>' if notes else ''}"
        f'<h2>Reliability diagrams</h2><div class="figures">{figures}</div>'
        f"{descr}<p><small>sklearn-calib {html.escape(__version__)}</small></p>"
        "</body></html>\n"
    )


def write_report_files(report, probabilities, y, out_dir, n_bins, description):
    """Write results.csv, results.json, one PNG per method and report.html."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"{out_dir}: cannot create the folder ({exc})") from exc
    written = []
    for name, text in (
        ("results.csv", _csv_table(report)),
        ("results.json", json.dumps(report, indent=2) + "\n"),
    ):
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    images = {}
    for name, proba in probabilities.items():
        path = out_dir / f"reliability_{_slug(name)}.png"
        images[name] = _reliability_png(path, y, proba, name, n_bins)
        written.append(path)
    page = out_dir / "report.html"
    page.write_text(_html_report(report, images, description), encoding="utf-8")
    written.append(page)
    return written


# --------------------------------------------------------------------------
# fit and apply
# --------------------------------------------------------------------------


def _parse_params(pairs):
    """``["n_bins=20", "strategy=quantile"]`` -> ``{"n_bins": 20, ...}``."""
    params = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--param {pair!r}: expected KEY=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        params[key.strip()] = value
    return params


def run_fit(args, out=None):
    out = out if out is not None else sys.stdout
    cls = resolve_method(args.method)
    sio = _import_skops()
    splits = read_splits(args.logits, args.labels)
    val = splits["val"]
    estimator = make_calibrator(
        cls, device=args.device, params=_parse_params(args.param)
    )
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(val.logits, val.y)
    elapsed = time.perf_counter() - started
    for w in caught:
        print(
            f"warning: {w.category.__name__}: {_first_line(w.message)}", file=sys.stderr
        )
    try:
        sio.dump(estimator, args.output)
    except OSError as exc:
        raise CommandError(f"{args.output}: cannot write ({exc})") from exc
    n, k = val.logits.shape
    print(
        f"{cls.__name__} fitted on {n} samples x {k} logit columns in "
        f"{elapsed:.2f} s; saved to {args.output}",
        file=out,
    )
    return EXIT_OK


def load_calibrator(path):
    """Load a calibrator saved by ``fit``, trusting only the library's types.

    Besides skops's defaults (numpy arrays, scikit-learn estimators, Python
    builtins), only the estimator classes of this library are trusted.
    """
    sio = _import_skops()
    path = _check_saved(path)
    from skops.io.exceptions import UntrustedTypesFoundException

    from .base import BaseCalibrator
    from .utils.persistence import skops_trusted_types

    try:
        estimator = sio.load(path, trusted=skops_trusted_types())
    except UntrustedTypesFoundException as exc:
        raise CommandError(
            f"{path}: refused, it holds types other than sklearn-calib calibrators "
            f"({_first_line(exc)})"
        ) from exc
    except Exception as exc:  # skops raises zipfile/json/key errors on junk
        raise CommandError(
            f"{path}: not a calibrator saved by 'sklearn-calib fit' "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from exc
    if not isinstance(estimator, BaseCalibrator):
        raise CommandError(
            f"{path}: holds a {type(estimator).__name__}, not a calibrator of "
            "logits; save one with 'sklearn-calib fit'"
        )
    return estimator


def _check_saved(path):
    path = Path(path)
    if not path.exists():
        raise CommandError(f"{path}: no such file")
    if path.is_dir():
        raise CommandError(f"{path}: is a directory, not a file")
    return path


def _write_proba(path, proba, classes):
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            np.save(path, proba, allow_pickle=False)
        elif suffix == ".npz":
            np.savez(path, proba=proba, classes=np.asarray(classes).astype(str))
        else:
            import pandas as pd

            pd.DataFrame(proba, columns=[str(c) for c in classes]).to_csv(
                path, index=False
            )
    except OSError as exc:
        raise CommandError(f"{path}: cannot write ({exc})") from exc


def run_apply(args, out=None):
    out = out if out is not None else sys.stdout
    output = Path(args.output)
    if output.suffix.lower() not in (".npy", ".npz", ".csv"):
        raise CommandError(
            f"{output}: unsupported output type {output.suffix or '(none)'!r}; use "
            ".npy, .npz or .csv"
        )
    calibrator = load_calibrator(args.calibrator)
    logits = read_logits_only(args.logits)
    if args.device is not None and "device" in calibrator.get_params():
        calibrator.set_params(device=args.device)
    try:
        proba = calibrator.predict_proba(logits)
    except ValueError as exc:
        raise CommandError(f"{args.logits}: {_first_line(exc)}") from exc
    _write_proba(output, proba, calibrator.classes_)
    print(
        f"{type(calibrator).__name__}: wrote {proba.shape[0]} x {proba.shape[1]} "
        f"calibrated probabilities to {output}",
        file=out,
    )
    return EXIT_OK


# --------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line error messages (still exit status 2)."""

    def error(self, message):
        self.exit(
            EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n"
        )


def _methods_epilog():
    try:
        names = ", ".join(sorted(calibrator_classes()))
    except Exception:  # the help must show even if a calibrator fails to import
        names = "(see the documentation)"
    from .datasets import list_logits

    return (
        f"methods: {names}\n"
        f"bundled sets (--dataset): {', '.join(list_logits())}\n\n"
        "input files: .npy (a logits array; labels via --labels), .npz (keys "
        "logits_val, y_val, logits_test, y_test, or logits with y or labels), "
        ".csv with a header row (logit columns, a 'label' or 'y' column, an "
        "optional 'split' column of val/test), .parquet (same columns; needs "
        "pyarrow), .pt (a tensor, a (logits, labels) pair or a dict with the "
        ".npz keys; loaded with weights_only=True)"
    )


def build_parser():
    from . import __version__

    parser = _Parser(
        prog="sklearn-calib",
        description="Post-hoc calibration of classifier logits.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_methods_epilog(),
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    commands.required = True

    report = commands.add_parser(
        "report",
        help="fit calibrators and compare them on test data",
        description=(
            "Fit every calibrator (or --methods) on the val part of FILE and "
            "score it on the test part; a file with one split is scored by "
            "cross-validation. Without FILE, the bundled CIFAR-100 set."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_methods_epilog(),
    )
    report.add_argument("file", nargs="?", metavar="FILE", help="logits file")
    report.add_argument("--labels", metavar="FILE", help="labels of a one-split FILE")
    report.add_argument(
        "--dataset", metavar="NAME", help="a bundled set instead of FILE"
    )
    report.add_argument(
        "--methods", metavar="A,B", help="comma-separated method names (default: all)"
    )
    report.add_argument(
        "--format",
        choices=("table", "markdown", "csv", "json"),
        default="table",
        help="output format (default: table)",
    )
    report.add_argument(
        "--out",
        metavar="DIR",
        help="also write reliability diagrams (PNG), results.csv/json and report.html",
    )
    report.add_argument(
        "--n-bins", type=int, default=15, help="bins of the ECEs (default: 15)"
    )
    report.add_argument(
        "--cv", type=int, default=5, help="folds when FILE has one split (default: 5)"
    )
    report.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the folds and of stochastic methods (default: 0)",
    )
    report.add_argument(
        "--device", help="device of torch-backed methods (default: theirs)"
    )
    report.set_defaults(handler=run_report)

    fit = commands.add_parser(
        "fit",
        help="fit one calibrator and save it (skops format)",
        description=(
            "Fit a calibrator on a logits file (its 'logits' and labels, or the "
            "val part of a two-split file) and save it with skops."
        ),
    )
    fit.add_argument(
        "--method", required=True, help="calibrator name, e.g. TemperatureScaling"
    )
    fit.add_argument("--logits", required=True, metavar="FILE", help="logits file")
    fit.add_argument("--labels", metavar="FILE", help="labels file, if FILE has none")
    fit.add_argument(
        "-o", "--output", required=True, metavar="PATH", help="e.g. calibrator.skops"
    )
    fit.add_argument("--device", help="device of a torch-backed method")
    fit.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a constructor parameter, e.g. --param n_bins=20 (repeatable; "
        "values are Python literals, else strings)",
    )
    fit.set_defaults(handler=run_fit)

    apply = commands.add_parser(
        "apply",
        help="calibrate logits with a saved calibrator",
        description=(
            "Load a calibrator saved by 'fit' (only sklearn-calib calibrator types "
            "are trusted) and write calibrated probabilities of FILE's 'logits' "
            "(or 'logits_test', or a bare array) to .npy, .npz or .csv."
        ),
    )
    apply.add_argument("calibrator", metavar="CALIBRATOR", help="file written by 'fit'")
    apply.add_argument("--logits", required=True, metavar="FILE", help="logits file")
    apply.add_argument(
        "-o", "--output", required=True, metavar="PATH", help="e.g. probs.npy"
    )
    apply.add_argument("--device", help="device of a torch-backed method")
    apply.set_defaults(handler=run_apply)
    return parser


def main(argv=None):
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except CommandError as exc:
        print(f"sklearn-calib {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError) as exc:
        # The public API rejects bad input with ValueError/TypeError naming
        # the problem; on the command line that is an input error.
        print(
            f"sklearn-calib {args.command}: error: {_first_line(exc)}", file=sys.stderr
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of a pipe went away (``| head``): not an error of ours.
        # Point stdout at devnull so that the final flush does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
