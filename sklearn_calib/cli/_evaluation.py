"""The rows of ``report``: fit each calibrator, score it, or say why it could not."""

import time
import warnings

import numpy as np

from . import _methods
from ._common import CommandError, first_line, warning_lines
from ._tables import COLUMNS


def column_labels(proba):
    """The report's labels are column indices: every column's, stated, so that
    labels that lack some class (code 0 included) are never ambiguous."""
    return np.arange(max(2, np.shape(proba)[1]))


def score(y, proba, n_bins):
    """The report's metrics of probabilities ``proba`` against label codes ``y``."""
    from ..metrics import calibration_report

    report = calibration_report(
        y, proba, n_bins=n_bins, labels=column_labels(proba), as_frame=False
    )
    return report["model"]


def fold_iterator(y, n_splits, seed):
    """Stratified shuffled folds when every class allows them, else plain ones."""
    from sklearn.model_selection import KFold, StratifiedKFold

    _, counts = np.unique(y, return_counts=True)
    if counts.min() >= n_splits:
        return StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(y, y)
    return KFold(n_splits, shuffle=True, random_state=seed).split(y)


def evaluate(estimator, splits, y_codes, args):
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
        for train, held_out in fold_iterator(y_codes["val"], args.cv, args.seed):
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
    scores = score(y_eval, proba, args.n_bins)
    scores["fit_time_s"] = fit_time
    return scores, proba


def failure_reason(exc):
    """The reason of a failed method, as one line.

    The library rejects bad input with a ValueError or TypeError naming the
    problem: its message is the reason. Anything else (an overflow, a
    singular matrix, a torch error, a bug) keeps its type name, which says
    what kind of failure it was.
    """
    text = first_line(exc)
    if type(exc) in (ValueError, TypeError) and text:
        return text
    # torch names its public LinAlgError ``_LinAlgError``: show the public name.
    kind = type(exc).__name__.lstrip("_")
    return f"{kind}: {text}" if text else kind


def run_method(name, cls, splits, y_codes, args):
    """One row of the report: scores and notes, or the reason it failed."""
    from sklearn.utils import get_tags

    # Looked up at each call, so that tests and callers can swap the table.
    params = _methods.REPORT_PARAMS.get(name)
    n_columns = max(2, splits["val"].logits.shape[1])
    # The labels are already column indices: say so, so that a val split or
    # a fold without some class (code 0 included) is not ambiguous.
    estimator = _methods.make_calibrator(
        cls,
        device=args.device,
        seed=args.seed,
        params=params,
        classes=np.arange(n_columns),
    )
    empty = dict.fromkeys(key for key, _, _ in COLUMNS)
    if n_columns > 2 and not get_tags(estimator).classifier_tags.multi_class:
        return {"method": name, **empty, "note": "skipped: binary problems only"}, None
    row_notes = [f"fast settings {params}"] if params else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scores, proba = evaluate(estimator, splits, y_codes, args)
        except Exception as exc:  # noqa: BLE001
            # Whatever one method raises on these data (ValueError,
            # FloatingPointError, a torch error, ...) becomes its row's
            # reason; the other methods still run and the report is written.
            return {
                "method": name,
                **empty,
                "note": f"failed: {failure_reason(exc)}",
            }, None
    row_notes += warning_lines(caught)
    return {"method": name, **scores, "note": "; ".join(row_notes)}, proba


def encode_labels(splits, classes=None):
    """Integer codes shared by both splits, matching the logit columns.

    ``classes``: the label of each column (``--classes``), or None to infer
    them from the labels where that is unambiguous.
    """
    from ..utils._validation import resolve_classes

    parts = [p for p in ("val", "test") if p in splits]
    y_all = np.concatenate([splits[p].y for p in parts])
    n_cols = splits["val"].logits.shape[1]
    try:
        classes, codes = resolve_classes(y_all, n_cols, classes)
    except ValueError as exc:
        raise CommandError(_methods.with_classes_hint(exc)) from exc
    out, start = {}, 0
    for part in parts:
        n = splits[part].y.shape[0]
        out[part] = np.asarray(codes[start : start + n], dtype=np.int64)
        start += n
    return classes, out


def uncalibrated_proba(logits):
    """The softmax of the logits themselves: the report's baseline row."""
    from ..utils._math import softmax
    from ..utils._validation import expand_binary_scores

    return softmax(expand_binary_scores(logits).astype(np.float64))
