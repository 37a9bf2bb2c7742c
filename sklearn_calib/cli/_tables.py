"""The report as text: terminal table, markdown, CSV, JSON; the progress bar."""

import csv
import functools
import io
import json
import os
import sys

from ._decisions import decision_section
from ._validation import validation_text

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


def cell(row, key, percent):
    """One value of the table as text; ``-`` where a method has none."""
    value = row.get(key)
    if value is None:
        return "-"
    if percent:
        return f"{100 * value:.2f}"
    if key == "fit_time_s":
        return f"{value:.2f}"
    return f"{value:.4f}"


def best(rows, key):
    """The best value of a column, or None for a column without a best."""
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values or key not in LOWER_IS_BETTER | {"accuracy"}:
        return None
    return min(values) if key in LOWER_IS_BETTER else max(values)


def header_lines(report):
    """The lines describing the data and the protocol above every table."""
    if report["n_samples_test"]:
        sizes = f"{report['n_samples_val']} val / {report['n_samples_test']} test"
    else:
        sizes = f"{report['n_samples_val']}"
    lines = [
        f"data: {report['data']} ({report['n_classes']} classes; {sizes} samples)",
        f"evaluation: {report['evaluation']}; {report['n_bins']} bins",
    ]
    if report.get("not_computed"):
        lines.append(f"not computed: {report['not_computed']}")
    return lines


# The prediction-set section: conformal sets at these coverage targets.
SET_SCORES = ("lac", "aps", "raps")
SET_LEVELS = (0.9, 0.95)


def set_headers():
    """Headers of the prediction-set table: AURC, then coverage and mean size."""
    return ["Method", "AURC"] + [
        f"{score.upper()} {round(100 * level)}%"
        for level in SET_LEVELS
        for score in SET_SCORES
    ]


def set_rows(report):
    """One row of cells per method of the prediction-set section.

    A cell reads ``coverage% / mean set size``; methods without probabilities
    (skipped or failed) have no row.
    """
    by_method = {}
    for entry in report.get("prediction_sets", []):
        by_method.setdefault(entry["model"], {})[
            (entry["conformity_score"], entry["confidence_level"])
        ] = entry
    rows = []
    for method, entries in by_method.items():
        any_entry = next(iter(entries.values()))
        cells = [method, f"{any_entry['aurc']:.4f}"]
        for level in SET_LEVELS:
            for score in SET_SCORES:
                entry = entries.get((score, level))
                cells.append(
                    "-"
                    if entry is None
                    else f"{100 * entry['coverage']:.1f} / {entry['mean_set_size']:.2f}"
                )
        rows.append(cells)
    return rows


def set_caption(report):
    """What the prediction-set table shows."""
    protocol = report.get("prediction_sets_protocol", "")
    return (
        "Prediction sets (split conformal, "
        f"{protocol}): coverage % / mean set size at each target; AURC: area "
        "under the risk-coverage curve of the confidence (lower is better)."
    )


def _aligned(headers, body, separator="  "):
    widths = [
        max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)
    ]
    lines = [
        separator.join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        ),
        separator.join("-" * w for w in widths),
    ]
    for cells in body:
        lines.append(
            separator.join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    return lines


def table_lines(headers, body, *, markdown):
    """A table's lines: markdown (first column left, the others right) or aligned."""
    if not markdown:
        return _aligned(headers, body)
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|",
    ] + ["| " + " | ".join(cells) + " |" for cells in body]


def _set_section(report, *, markdown):
    body = set_rows(report)
    if not body:
        return []
    lines = table_lines(set_headers(), body, markdown=markdown)
    return ["", set_caption(report), ""] + lines


def notes(report):
    """``method: note`` for each row with a note (skipped, failed, warnings)."""
    return [f"{r['method']}: {r['note']}" for r in report["results"] if r.get("note")]


def _text_table(report, *, pretty):
    rows = report["results"]
    headers = ["Method"] + [c[1] for c in COLUMNS]
    body = [[r["method"]] + [cell(r, k, p) for k, _, p in COLUMNS] for r in rows]
    widths = [
        max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)
    ]
    bold = pretty and not os.environ.get("NO_COLOR")

    def fmt(cells, styles=None):
        parts = []
        for i, (text, width) in enumerate(zip(cells, widths, strict=True)):
            text = text.ljust(width) if i == 0 else text.rjust(width)
            if styles and styles[i]:
                text = f"\033[1;32m{text}\033[0m"
            parts.append(text)
        return ("│ " + " │ ".join(parts) + " │") if pretty else "  ".join(parts)

    best_values = {k: best(rows, k) for k, _, _ in COLUMNS}
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
                best_values[k] is not None and r.get(k) == best_values[k]
                for k, _, _ in COLUMNS
            ]
        lines.append(fmt(cells, styles))
    if pretty:
        lines.append("└─" + "─┴─".join("─" * w for w in widths) + "─┘")
    return (
        "\n".join(
            header_lines(report)
            + [""]
            + lines
            + [""]
            + notes(report)
            + _set_section(report, markdown=False)
            + decision_section(
                report, render=functools.partial(table_lines, markdown=False)
            )
            + validation_text(report)
        )
        + "\n"
    )


def _markdown_table(report):
    rows = report["results"]
    headers = ["Method"] + [c[1] for c in COLUMNS]
    body = [[r["method"]] + [cell(r, k, p) for k, _, p in COLUMNS] for r in rows]
    lines = table_lines(headers, body, markdown=True)
    listed = [f"- {n}" for n in notes(report)]
    header = [f"{line}  " for line in header_lines(report)]
    sets = _set_section(report, markdown=True) + decision_section(
        report, render=functools.partial(table_lines, markdown=True)
    )
    return (
        "\n".join(header + [""] + lines + ([""] + listed if listed else []) + sets)
        + "\n"
    )


def csv_table(report):
    """The raw values (fractions, not percent), one row per method."""
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
        return csv_table(report)
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    pretty = stream is not None and hasattr(stream, "isatty") and stream.isatty()
    return _text_table(report, pretty=pretty)


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
