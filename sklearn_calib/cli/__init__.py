"""The ``sklearn-calib`` command line (also ``python -m sklearn_calib``).

Three commands, each a thin layer over the public API:

- ``report [FILE]`` (or ``--logits FILE``): fit every calibrator (or
  ``--methods``) on the val part of a logits file (by default the bundled
  CIFAR-100 set), score them on the test part (or by cross-validation when
  the file holds one split) and print a table; ``--out DIR`` adds
  reliability diagrams and a self-contained HTML page.
- ``fit --method NAME --logits FILE [--labels FILE] -o calibrator.skops``.
- ``apply calibrator.skops --logits FILE -o probs.npy``.

Input files are read without unpickling anything: ``.npy``/``.npz`` are
parsed and checked header first, ``.pt`` with
``torch.load(..., weights_only=True)``, ``.csv`` and ``.parquet`` through
pandas. Outputs never replace an input file, nor an existing file without
``--overwrite``. Bad usage or input ends with a one-line message on stderr
and exit status 2.

The package is split by concern; importing it loads neither torch nor
matplotlib:

- ``_io``: reading and writing files safely;
- ``_data``: checked logits and labels from those files;
- ``_methods``: calibrators by name, ``REPORT_PARAMS``, skops files;
- ``_evaluation``: the rows of ``report``;
- ``_tables``, ``_html``, ``_plots``: the report as text, HTML and figures;
- ``_chunked``: folders of chunks and zarr stores, read in bounded memory;
- ``_commands``: ``report``, ``fit`` and ``apply``;
- this module: argument parsing and ``main``.
"""

import argparse
import os
import sys

from ._commands import run_apply, run_fit, run_report, write_report_files
from ._common import EXIT_OK, EXIT_USAGE, CommandError, first_line
from ._data import Split, read_labels, read_logits_only, read_splits
from ._io import read_arrays
from ._methods import (
    REPORT_PARAMS,
    calibrator_classes,
    load_calibrator,
    make_calibrator,
    resolve_method,
)
from ._tables import COLUMNS, Progress, format_report

__all__ = [
    "COLUMNS",
    "EXIT_OK",
    "EXIT_USAGE",
    "REPORT_PARAMS",
    "CommandError",
    "Progress",
    "Split",
    "build_parser",
    "calibrator_classes",
    "format_report",
    "load_calibrator",
    "main",
    "make_calibrator",
    "read_arrays",
    "read_labels",
    "read_logits_only",
    "read_splits",
    "resolve_method",
    "run_apply",
    "run_fit",
    "run_report",
    "write_report_files",
]


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
    from ..datasets import list_logits

    return (
        f"methods: {names}\n"
        f"bundled sets (--dataset): {', '.join(list_logits())}\n\n"
        "input files: .npy (a logits array; labels via --labels), .npz (keys "
        "logits_val, y_val, logits_test, y_test, or logits with y or labels; "
        "fit weighs by sample_weight, or sample_weight_val, where present), "
        ".csv with a header row (logit columns, a 'label' or 'y' column, an "
        "optional 'split' column of val/test and 'sample_weight' column), "
        ".parquet (same columns; needs "
        "pyarrow), .pt (a tensor, a (logits, labels) pair or a dict with the "
        ".npz keys; loaded with weights_only=True); a folder of .npz chunks, "
        "of .npy arrays or a zarr store (the same key names) is read chunk by "
        "chunk in bounded memory (report: val/ and test/ inside, or "
        "logits_val, y_val, logits_test, y_test)\n\n"
        "outputs never replace an input file, nor an existing file unless "
        "--overwrite is given"
    )


def _add_overwrite(parser, what):
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace {what} if it exists (an input file is never replaced)",
    )


def _device(text):
    """``--device``: checked when the command line is read, as the library
    checks its ``device=``, so that a misspelt device is refused by every
    command (``apply`` with a method that predicts in numpy never looks at
    it; ``report`` recorded it as the failure of every method)."""
    from ..utils._validation import check_device

    try:
        return check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from exc


# numpy's seeds (RandomState, hence scikit-learn's folds) are 32-bit.
_MAX_SEED = 2**32 - 1


def _seed(text):
    """``--seed``: an integer numpy accepts as a seed, checked before any fit."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= _MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and 2**32 - 1 ({_MAX_SEED}), got {value}"
        )
    return value


def _add_classes(parser):
    parser.add_argument(
        "--classes",
        metavar="SPEC",
        help="the label of each logit column, where the labels cannot say it "
        "(a split that lacks label 0 or the last label, as a large vocabulary's "
        "does): 'index' (column i holds label i), '1-based' (label i + 1), or "
        "A,B,... (one label per column)",
    )


def build_parser():
    """The ``argparse`` parser of the command line."""
    from .. import __version__

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
    report.add_argument(
        "file", nargs="?", metavar="FILE", help="logits file, or folder of chunks"
    )
    report.add_argument(
        "--logits",
        dest="logits_file",
        metavar="FILE",
        help="the same as FILE (the option fit and apply take)",
    )
    report.add_argument("--labels", metavar="FILE", help="labels of a one-split FILE")
    _add_classes(report)
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
    _add_overwrite(report, "the files of --out")
    report.add_argument(
        "--n-bins", type=int, default=15, help="bins of the ECEs (default: 15)"
    )
    report.add_argument(
        "--cv", type=int, default=5, help="folds when FILE has one split (default: 5)"
    )
    report.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the folds and of stochastic methods (default: 0)",
    )
    report.add_argument(
        "--device",
        type=_device,
        help="device of torch-backed methods: auto, cpu, cuda or cuda:N "
        "(default: theirs)",
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
    fit.add_argument(
        "--logits",
        required=True,
        metavar="FILE",
        help="logits file, or folder of chunks / zarr store",
    )
    fit.add_argument("--labels", metavar="FILE", help="labels file, if FILE has none")
    _add_classes(fit)
    fit.add_argument(
        "-o", "--output", required=True, metavar="PATH", help="e.g. calibrator.skops"
    )
    _add_overwrite(fit, "PATH")
    fit.add_argument("--device", type=_device, help="device of a torch-backed method")
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
    apply.add_argument(
        "--logits",
        required=True,
        metavar="FILE",
        help="logits file, or folder of chunks / zarr store (output: .npy)",
    )
    apply.add_argument(
        "-o", "--output", required=True, metavar="PATH", help="e.g. probs.npy"
    )
    _add_overwrite(apply, "PATH")
    apply.add_argument("--device", type=_device, help="device of a torch-backed method")
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
            f"sklearn-calib {args.command}: error: {first_line(exc)}", file=sys.stderr
        )
        return EXIT_USAGE
    except MemoryError as exc:
        # Input too large for this machine: the inputs, not a bug of ours.
        print(
            f"sklearn-calib {args.command}: error: out of memory "
            f"({first_line(exc) or 'MemoryError'})",
            file=sys.stderr,
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
