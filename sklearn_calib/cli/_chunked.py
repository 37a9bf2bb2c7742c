"""Folders of chunks and zarr stores on the command line, in bounded memory.

A folder given where a file is expected is read chunk by chunk through
:func:`sklearn_calib.chunked.open_chunks`: a folder of ``.npz`` chunks, a
folder of ``.npy`` arrays (``logits.npy`` with ``y.npy``, or numbered pairs)
or a zarr store. The arrays carry the names of a file's keys: ``logits`` with
``y`` (or ``labels``/``label``) for one split, ``logits_val``, ``y_val``,
``logits_test``, ``y_test`` for two; ``report`` also takes a folder holding
two such folders named ``val`` and ``test``. ``fit`` fits with
``fit_chunks``, ``apply`` writes with ``apply_chunks``, ``report`` scores
with ``chunked_calibration_report``; memory holds a chunk at a time.
"""

import re
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ..utils._npy_files import npz_keys
from . import _methods
from ._common import CommandError, first_line, warning_lines
from ._io import LABEL_KEYS, label_key, refuse_both
from ._tables import COLUMNS, Progress

# What ``report`` cannot compute over chunks, said in its output.
NOT_COMPUTED = (
    "smooth ECE and prediction sets (they need every probability in memory; not "
    "available over chunks)"
)


def is_chunked(path):
    """Whether an input path names a folder (of chunks, or a zarr store)."""
    return path is not None and Path(path).is_dir()


def _is_zarr(path):
    return any((path / n).exists() for n in ("zarr.json", ".zgroup", ".zarray"))


def array_names(path):
    """The names of the arrays a chunk folder or zarr store holds.

    Nothing but the listing (a zarr group's, or the member names of the first
    ``.npz`` chunk) is read; numbered ``.npy`` chunks (``logits_003.npy``)
    count under their name without the number.
    """
    path = Path(path)
    if _is_zarr(path):
        try:
            import zarr
        except ImportError as exc:
            raise CommandError(
                f"{path}: a zarr store; reading it needs zarr: python -m pip "
                "install zarr"
            ) from exc
        try:
            return set(zarr.open_group(str(path), mode="r").array_keys())
        except Exception as exc:  # zarr raises its own errors on a bad store
            raise CommandError(
                f"{path}: cannot be read as a zarr group ({first_line(exc)})"
            ) from exc
    npz = sorted(p for p in path.iterdir() if p.suffix.lower() == ".npz")
    if npz:
        try:
            return set(npz_keys(npz[0]))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
    return {
        re.sub(r"[_-]?\d+$", "", p.stem)
        for p in path.iterdir()
        if p.suffix.lower() == ".npy"
    }


def _found(path, names):
    return (
        f"{path}: no logits found; expected arrays named logits with y or labels "
        "(one split) or logits_val, y_val, logits_test, y_test (two splits), in "
        ".npz chunks, .npy files or a zarr store; found: "
        f"{', '.join(sorted(names)) or 'nothing'}"
    )


def _open(path, logits_key, y_key, progress, weight_key="sample_weight"):
    from ..chunked import open_chunks

    try:
        return open_chunks(
            path,
            logits_key=logits_key,
            y_key=y_key,
            weight_key=weight_key,
            progress=progress,
        )
    except KeyError as exc:
        raise CommandError(str(exc.args[0]) if exc.args else str(exc)) from exc
    except (OSError, ImportError) as exc:
        raise CommandError(f"{path}: cannot be read ({first_line(exc)})") from exc


def _refuse_split_folders(path, part, option):
    """Refuse a folder holding the ``val/`` and ``test/`` folders of ``report``.

    ``fit`` and ``apply`` read one folder of chunks; say which one to give
    rather than that nothing was found.
    """
    path = Path(path)
    parts = [p for p in ("val", "test") if (path / p).is_dir()]
    if parts and not _is_zarr(path):
        folders = " and ".join(f"{p}/" for p in parts)
        raise CommandError(
            f"{path}: holds the folder{'s' if len(parts) > 1 else ''} {folders} "
            f"(the two splits report reads), no chunks of its own; give the "
            f"folder of one split, e.g. {option} {path / part}"
        )


def open_fit_data(path, progress=None):
    """Labelled chunks to fit on: ``logits`` with labels, else the val split."""
    names = array_names(path)
    if not names:
        _refuse_split_folders(path, "val", "--logits")
    refuse_both(names, path, "logits", "logits_val", "logits to fit on")
    if "logits_val" in names:
        if "y_val" not in names:
            raise CommandError(f"{path}: logits_val has no y_val beside it")
        return _open(path, "logits_val", "y_val", progress, "sample_weight_val")
    if "logits" in names:
        y_key = label_key(names, path, kind="arrays")
        if y_key is None:
            raise CommandError(
                f"{path}: no labels; store them beside the logits under the name "
                f"{' / '.join(LABEL_KEYS)} (--labels is not read with chunks)"
            )
        return _open(path, "logits", y_key, progress)
    raise CommandError(_found(path, names))


def open_apply_data(path, progress=None):
    """Chunks of logits to calibrate: ``logits``, else ``logits_test``."""
    names = array_names(path)
    if not names:
        _refuse_split_folders(path, "test", "--logits")
    refuse_both(names, path, "logits", "logits_test", "logits to calibrate")
    for key in ("logits", "logits_test"):
        if key in names:
            return _open(path, key, None, progress)
    raise CommandError(
        f"{path}: no logits found; expected arrays named logits or logits_test "
        f"(found: {', '.join(sorted(names)) or 'nothing'})"
    )


def open_report_data(path, progress):
    """``{"val": dataset, "test": dataset}``: two splits of a folder.

    Either the folder holds the two-split names (``logits_val``, ...), or
    it holds two chunk folders (or zarr stores) named ``val`` and ``test``.
    """
    path = Path(path)
    if (path / "val").is_dir() and (path / "test").is_dir() and not _is_zarr(path):
        return {
            part: open_fit_data(path / part, progress.callback(part))
            for part in ("val", "test")
        }
    names = array_names(path)
    if "logits_val" in names and "logits_test" in names:
        splits = {}
        for part in ("val", "test"):
            if f"y_{part}" not in names:
                raise CommandError(f"{path}: logits_{part} has no y_{part} beside it")
            splits[part] = _open(
                path,
                f"logits_{part}",
                f"y_{part}",
                progress.callback(part),
                f"sample_weight_{part}",
            )
        return splits
    if "logits" in names or "logits_val" in names:
        raise CommandError(
            f"{path}: report over chunks needs a val and a test split (arrays "
            "logits_val, y_val, logits_test, y_test, or two folders val/ and "
            "test/); cross-validation is not run over chunks"
        )
    raise CommandError(_found(path, names))


def check_not_inside(output, folders):
    """Refuse an output inside an input folder: it could replace a chunk."""
    resolved = Path(output).resolve()
    for folder in folders:
        if folder is not None and is_chunked(folder):
            if resolved.is_relative_to(Path(folder).resolve()):
                raise CommandError(
                    f"{output}: refusing to write inside the input folder "
                    f"{folder}; choose another output"
                )


class ChunkProgress:
    """A progress bar fed by ``open_chunks``' callback: stage, split and pass.

    Drawn by :class:`Progress`, so only when the stream is a terminal. The
    callback may run on dask's threads; a lock keeps the counts and the line
    whole.
    """

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.stage = "reading"
        self._bar = None
        self._counts = {}
        self._lock = threading.Lock()

    def set_stage(self, stage):
        """Start counting passes again, under a new label."""
        with self._lock:
            self.stage = stage
            self._counts.clear()

    def callback(self, name):
        """The ``progress(done, n_chunks)`` callable of one data set."""

        def report(done, n_chunks):
            with self._lock:
                count = self._counts.get(name, 0) + 1
                self._counts[name] = count
                passes, chunk = divmod(count - 1, n_chunks)
                if self._bar is None or self._bar.total != n_chunks:
                    self._bar = Progress(n_chunks, stream=self.stream)
                self._bar.update(chunk + 1, f"{self.stage} {name} pass {passes + 1}")

        return report

    def close(self):
        with self._lock:
            if self._bar is not None:
                self._bar.close()


def label_classes(splits, classes=None):
    """The classes of the report, from every label of both splits (one pass).

    ``classes`` (from ``--classes``) states them instead of inferring them;
    the labels are still checked against them.
    """
    from ..utils._validation import resolve_classes

    uniques = []
    for dataset in splits.values():
        for chunk in dataset:
            y = np.asarray(chunk[1])
            if y.ndim == 2 and y.shape[1] == 1:
                y = y[:, 0]
            if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
                raise CommandError("the labels contain NaN or infinity")
            uniques.append(np.unique(y))
    try:
        classes, _ = resolve_classes(
            np.unique(np.concatenate(uniques)), splits["val"].n_cols, classes
        )
    except ValueError as exc:
        raise CommandError(_methods.with_classes_hint(exc)) from exc
    return classes


def _calibrated_chunks(estimator, test):
    """A callable giving ``(probabilities, y)`` chunks: read again at each pass."""

    def chunks():
        for chunk in test:
            # An empty chunk (a shard without rows) scores nothing; the
            # estimators refuse 0 samples, as scikit-learn's do.
            if np.shape(chunk[0])[0]:
                yield estimator.predict_proba(chunk[0]), *chunk[1:]

    return chunks


def chunked_row(name, cls, splits, args, classes):
    """One row of the chunked report: fit on val chunks, score on test chunks.

    ``classes``: the labels of the logit columns, from every chunk of both
    splits (the val chunks alone may lack some).
    """
    from sklearn.utils import get_tags

    from ..chunked import fits_from_chunks
    from ..metrics import chunked_calibration_report
    from ._evaluation import failure_reason

    params = _methods.REPORT_PARAMS.get(name)
    estimator = _methods.make_calibrator(
        cls, device=args.device, seed=args.seed, params=params, classes=classes
    )
    empty = dict.fromkeys(key for key, _, _ in COLUMNS)
    if max(2, splits["val"].n_cols) > 2 and not (
        get_tags(estimator).classifier_tags.multi_class
    ):
        return {"method": name, **empty, "note": "skipped: binary problems only"}
    if not fits_from_chunks(estimator):
        return {
            "method": name,
            **empty,
            "note": "skipped: no fit from chunks (fits in memory only)",
        }
    row_notes = [f"fast settings {params}"] if params else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            started = time.perf_counter()
            estimator.fit_chunks(splits["val"])
            fit_time = time.perf_counter() - started
            scores = chunked_calibration_report(
                _calibrated_chunks(estimator, splits["test"]),
                n_bins=args.n_bins,
                labels=estimator.classes_,
                from_logits=False,
            )
        except Exception as exc:  # noqa: BLE001
            # As in memory: one method's failure is its row's reason.
            return {"method": name, **empty, "note": f"failed: {failure_reason(exc)}"}
    row_notes += warning_lines(caught)
    return {
        "method": name,
        **scores,
        "fit_time_s": fit_time,
        "note": "; ".join(row_notes),
    }
