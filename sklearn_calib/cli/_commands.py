"""The three commands: ``report``, ``fit`` and ``apply``.

Each checks its outputs first (never over an input, never over an existing
file without ``--overwrite``), so that a refused run costs no fitting and
writes nothing; then reads only the arrays it needs, does its work through
the public API, and writes its files atomically.
"""

import contextlib
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import _chunked
from ._common import EXIT_OK, CommandError, first_line, warning_lines
from ._data import (
    Split,
    check_column_names,
    check_columns_match_calibrator,
    read_logits_only,
    read_splits,
)
from ._evaluation import (
    column_labels,
    encode_labels,
    failure_reason,
    run_method,
    score,
    uncalibrated_proba,
)
from ._html import html_report
from ._io import (
    OUTPUT_SUFFIXES,
    atomic_path,
    check_output,
    check_output_folder,
    write_bytes,
    write_proba,
)
from ._methods import (
    dumps_loadable,
    import_skops,
    load_calibrator,
    make_calibrator,
    parse_classes,
    parse_params,
    resolve_method,
    select_methods,
    with_classes_hint,
)
from ._plots import reliability_png, require_matplotlib, slug
from ._tables import SET_LEVELS, SET_SCORES, Progress, csv_table, format_report
from ._validation import validation_rows

# What a calibrator may raise on extreme but valid data, besides the
# ValueError/TypeError with which the library names bad input: overflow and
# other floating-point errors, torch's RuntimeErrors (singular matrices, ...),
# running out of memory. On the command line each is a one-line error.
_NUMERIC_FAILURES = (ArithmeticError, RuntimeError, MemoryError)

BUNDLED_DEFAULT = "c100_densenetbc100_netcal"


# --------------------------------------------------------------------------
# fit and apply
# --------------------------------------------------------------------------


def run_fit(args, out=None):
    """``fit``: fit one calibrator on a file and save it with skops."""
    out = out if out is not None else sys.stdout
    output = check_output(
        args.output, inputs=(args.logits, args.labels), overwrite=args.overwrite
    )
    chunked = _chunked.is_chunked(args.logits)
    if chunked:
        if args.labels is not None:
            raise CommandError(
                f"{args.logits}: --labels is not read with a folder of chunks; "
                "store the labels beside the logits (y)"
            )
        _chunked.check_not_inside(output, [args.logits])
    cls = resolve_method(args.method)
    import_skops()  # a missing skops ends the command before any fitting
    params = parse_params(args.param)
    if args.classes is not None and "classes" in params:
        raise CommandError("give the classes as --classes or --param, not both")
    estimator = make_calibrator(cls, device=args.device, params=params)
    progress = _chunked.ChunkProgress() if chunked else None
    if chunked:
        data = _chunked.open_fit_data(args.logits, progress.callback("data"))
        progress.set_stage("fitting")
        shape, n_chunks = (data.n_samples, data.n_cols), f" ({data.n_chunks} chunks)"
    else:
        data = read_splits(args.logits, args.labels)["val"]
        shape, n_chunks = data.logits.shape, ""
    if args.classes is not None:
        estimator.set_params(classes=parse_classes(args.classes, shape[1]))
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if chunked:
                # Bounded memory: the data are read a chunk at a time, a few
                # times; a method without a chunked fit raises its TypeError.
                estimator.fit_chunks(data)
            else:
                # Weights stored beside the logits weigh the fit, as in a
                # folder of chunks (fit_chunks reads them there).
                estimator.fit(data.logits, data.y, sample_weight=data.sample_weight)
        except _NUMERIC_FAILURES as exc:
            raise CommandError(
                f"{args.logits}: {cls.__name__} failed to fit ({failure_reason(exc)})"
            ) from exc
        except ValueError as exc:
            raise CommandError(f"{args.logits}: {with_classes_hint(exc)}") from exc
        finally:
            if progress is not None:
                progress.close()
    elapsed = time.perf_counter() - started
    if args.classes is None and "classes" not in params and not chunked:
        check_column_names(data.names, estimator.classes_, args.logits)
    for line in warning_lines(caught):
        print(f"warning: {line}", file=sys.stderr)
    write_bytes(output, dumps_loadable(estimator))
    n, k = shape
    print(
        f"{cls.__name__} fitted on {n} samples x {k} logit columns{n_chunks} in "
        f"{elapsed:.2f} s; saved to {output}",
        file=out,
    )
    return EXIT_OK


def _load_for_apply(args):
    """The saved calibrator, on ``--device`` when given and it has one."""
    calibrator = load_calibrator(args.calibrator)
    if args.device is not None and "device" in calibrator.get_params():
        calibrator.set_params(device=args.device)
    return calibrator


@contextlib.contextmanager
def _calibration_failures(calibrator, logits_path):
    """A calibrator's failure on the logits of ``logits_path`` as one line."""
    try:
        yield
    except ValueError as exc:
        raise CommandError(f"{logits_path}: {first_line(exc)}") from exc
    except _NUMERIC_FAILURES as exc:
        raise CommandError(
            f"{logits_path}: {type(calibrator).__name__} failed to calibrate "
            f"({failure_reason(exc)})"
        ) from exc


def run_apply(args, out=None):
    """``apply``: calibrate a file's logits with a saved calibrator."""
    out = out if out is not None else sys.stdout
    output = Path(args.output)
    if _chunked.is_chunked(args.logits):
        return _apply_chunks(args, output, out)
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise CommandError(
            f"{output}: unsupported output type {output.suffix or '(none)'!r}; use "
            ".npy, .npz or .csv"
        )
    output = check_output(
        output, inputs=(args.calibrator, args.logits), overwrite=args.overwrite
    )
    calibrator = _load_for_apply(args)
    logits, names = read_logits_only(args.logits, with_names=True)
    check_columns_match_calibrator(names, calibrator.classes_, args.logits)
    with _calibration_failures(calibrator, args.logits):
        proba = calibrator.predict_proba(logits)
    write_proba(output, proba, calibrator.classes_)
    print(
        f"{type(calibrator).__name__}: wrote {proba.shape[0]} x {proba.shape[1]} "
        f"calibrated probabilities to {output}",
        file=out,
    )
    return EXIT_OK


def _apply_chunks(args, output, out):
    """``apply`` on a folder or zarr store: chunk by chunk into one .npy file."""
    from ..chunked import apply_chunks

    if output.suffix.lower() != ".npy":
        raise CommandError(
            f"{output}: a folder of chunks is calibrated chunk by chunk into a .npy "
            f"file; unsupported output type {output.suffix or '(none)'!r} here"
        )
    output = check_output(
        output, inputs=(args.calibrator, args.logits), overwrite=args.overwrite
    )
    _chunked.check_not_inside(output, [args.logits])
    calibrator = _load_for_apply(args)
    progress = _chunked.ChunkProgress()
    data = _chunked.open_apply_data(args.logits, progress.callback("data"))
    progress.set_stage("calibrating")
    try:
        with (
            _calibration_failures(calibrator, args.logits),
            atomic_path(output) as temporary,
        ):
            apply_chunks(calibrator, data, temporary)
    finally:
        progress.close()
    print(
        f"{type(calibrator).__name__}: wrote {data.n_samples} x "
        f"{len(calibrator.classes_)} calibrated probabilities to {output} "
        f"({data.n_chunks} chunks)",
        file=out,
    )
    return EXIT_OK


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def report_file_names(method_names):
    """Every file ``report --out`` may write for these methods."""
    figures = [f"reliability_{slug(n)}.png" for n in ["Uncalibrated", *method_names]]
    return ["results.csv", "results.json", *figures, "report.html"]


def write_report_files(report, probabilities, y, out_dir, n_bins, description):
    """Write results.csv, results.json, one PNG per method and report.html.

    Every figure is drawn before the first file is written, and each file is
    written atomically.
    """
    out_dir = Path(out_dir)
    images = {
        name: reliability_png(y, proba, name, n_bins)
        for name, proba in probabilities.items()
    }
    files = {
        "results.csv": csv_table(report).encode("utf-8"),
        "results.json": (json.dumps(report, indent=2) + "\n").encode("utf-8"),
    }
    files.update({f"reliability_{slug(name)}.png": png for name, png in images.items()})
    files["report.html"] = html_report(report, images, description).encode("utf-8")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"{out_dir}: cannot create the folder ({exc})") from exc
    written = []
    for name, data in files.items():
        write_bytes(out_dir / name, data)
        written.append(out_dir / name)
    return written


def report_data(args):
    """The splits to compare the methods on, a short source and a description."""
    if args.file is not None and args.dataset is not None:
        raise CommandError("give either FILE or --dataset, not both")
    if args.file is None:
        from ..datasets import list_logits, load_logits

        name = args.dataset or BUNDLED_DEFAULT
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
    if any(split.sample_weight is not None for split in splits.values()):
        # In memory, report's fits, scores, prediction sets and decisions
        # are unweighted: ignoring the weights would report on other data
        # than the file describes (fit and a folder of chunks weigh them).
        raise CommandError(
            f"{args.file}: holds sample weights, which report does not use on "
            "data in memory (its fits, scores, prediction sets and decisions "
            "are unweighted); give a folder of chunks (report weighs fits and "
            "metrics there), or remove the weights"
        )
    return splits, str(args.file), None


def run_report(args, out=None):
    """``report``: fit the methods, score them and print (and write) the table."""
    logits_file = getattr(args, "logits_file", None)
    if logits_file is not None:
        if args.file is not None:
            raise CommandError("give the logits as FILE or as --logits, not both")
        args.file = logits_file
    out = out if out is not None else sys.stdout
    if args.n_bins < 1:
        raise CommandError(f"--n-bins must be a positive integer, got {args.n_bins}")
    if args.cv < 2:
        raise CommandError(f"--cv must be at least 2, got {args.cv}")
    if _chunked.is_chunked(args.file):
        return _report_chunks(args, out)
    if args.out is not None:
        require_matplotlib()
    methods = select_methods(args.methods)
    if args.out is not None:
        check_output_folder(
            args.out,
            report_file_names([name for name, _ in methods]),
            inputs=(args.file, args.labels),
            overwrite=args.overwrite,
        )
    splits, source, description = report_data(args)
    classes, y_codes = encode_labels(
        splits, parse_classes(args.classes, splits["val"].logits.shape[1])
    )
    if args.classes is None:
        check_column_names(splits["val"].names, classes, source)
    if "test" in splits:
        evaluation = "fit on val, scored on test"
        y_eval, logits_eval = y_codes["test"], splits["test"].logits
    else:
        n_val = splits["val"].logits.shape[0]
        if args.cv > n_val:
            raise CommandError(
                f"--cv {args.cv} asks for more folds than {source} has samples "
                f"({n_val}); give at most --cv {n_val}"
            )
        evaluation = f"{args.cv}-fold cross-validation (out-of-fold predictions)"
        y_eval, logits_eval = y_codes["val"], splits["val"].logits

    raw = uncalibrated_proba(logits_eval)
    rows = [
        {
            "method": "Uncalibrated",
            **score(y_eval, raw, args.n_bins),
            "fit_time_s": None,
            "note": "",
        }
    ]
    # Import torch now (through the torch layer, its only importer), so that
    # the first torch-backed method's fit time does not include loading it.
    from .._torch import _device  # noqa: F401

    probabilities = {"Uncalibrated": raw}
    progress = Progress(len(methods))
    try:
        for done, (name, cls) in enumerate(methods):
            progress.update(done, name)
            row, proba = run_method(name, cls, splits, y_codes, args)
            rows.append(row)
            if proba is not None:
                probabilities[name] = proba
        progress.update(len(methods), "done")
    finally:
        progress.close()

    # Conformal sets and selective prediction from the same probabilities: the
    # evaluation samples are split at random into calibration and evaluation
    # halves (seeded), as in the conformal-prediction papers.
    from ..conformal import conformal_report
    from ._decisions import decision_protocol, decision_rows

    n_splits = 20
    binary = len(classes) == 2 and 0 < np.count_nonzero(y_eval) < len(y_eval)
    # The library's warnings on degenerate probabilities (a method predicting
    # one value: its calibration slope is NaN, ...) become "warning:" lines,
    # one per kind, as those of fit do: not Python's two lines per warning,
    # source line included, for every method.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prediction_sets = conformal_report(
            y_eval,
            probabilities,
            conformity_scores=SET_SCORES,
            confidence_levels=SET_LEVELS,
            n_splits=n_splits,
            random_state=args.seed,
            labels=column_labels(raw),
            as_frame=False,
        )
        decisions = decision_rows(y_eval, probabilities, seed=args.seed)
        # Binary data: the clinical validation statistics of each method.
        validation = validation_rows(y_eval, probabilities) if binary else None
    for line in warning_lines(caught):
        print(f"warning: {line}", file=sys.stderr)
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
        "prediction_sets": prediction_sets,
        "prediction_sets_protocol": (
            f"mean of {n_splits} random 50/50 calibration/evaluation splits of the "
            "scored samples"
        ),
        "decisions": decisions,
        "decisions_protocol": decision_protocol(len(y_eval)),
    }
    if validation is not None:
        report["validation"] = validation
    out.write(format_report(report, args.format, stream=out))
    if args.out is not None:
        written = write_report_files(
            report, probabilities, y_eval, Path(args.out), args.n_bins, description
        )
        print(f"wrote {len(written)} files to {args.out}", file=sys.stderr)
    return EXIT_OK


def _report_chunks(args, out):
    """``report`` on a folder: fit on the val chunks, score on the test chunks."""
    from ..metrics import chunked_calibration_report

    if args.dataset is not None:
        raise CommandError("give either FILE or --dataset, not both")
    if args.labels is not None:
        raise CommandError(
            f"{args.file}: --labels is not read with a folder of chunks; store the "
            "labels beside the logits (y_val, y_test)"
        )
    if args.out is not None:
        raise CommandError(
            f"{args.file}: --out (reliability diagrams and the HTML page) needs "
            "the probabilities in memory and is not available for a folder of "
            "chunks; use --format csv or json for the table"
        )
    methods = select_methods(args.methods)
    progress = _chunked.ChunkProgress()
    try:
        splits = _chunked.open_report_data(args.file, progress)
        progress.set_stage("labels")
        classes = _chunked.label_classes(
            splits, parse_classes(args.classes, splits["val"].n_cols)
        )
        progress.set_stage("Uncalibrated")
        rows = [
            {
                "method": "Uncalibrated",
                **chunked_calibration_report(
                    splits["test"], n_bins=args.n_bins, labels=classes
                ),
                "fit_time_s": None,
                "note": "",
            }
        ]
        # torch loaded now, so that no method's fit time includes it.
        from .._torch import _device  # noqa: F401

        for name, cls in methods:
            progress.set_stage(name)
            rows.append(_chunked.chunked_row(name, cls, splits, args, classes))
    finally:
        progress.close()
    report = {
        "data": str(args.file),
        "evaluation": "fit on the val chunks, scored on the test chunks",
        "n_samples_val": splits["val"].n_samples,
        "n_samples_test": splits["test"].n_samples,
        "n_classes": int(len(classes)),
        "n_bins": args.n_bins,
        "results": rows,
        "not_computed": _chunked.NOT_COMPUTED,
    }
    out.write(format_report(report, args.format, stream=out))
    if args.format == "csv":  # the table alone: say what it lacks on stderr
        print(f"not computed: {_chunked.NOT_COMPUTED}", file=sys.stderr)
    return EXIT_OK
