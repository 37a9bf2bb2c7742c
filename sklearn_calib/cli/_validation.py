"""The clinical validation section of ``report`` for binary data (issue 24).

A thin layer over :func:`sklearn_calib.metrics.validation_report`: one table
of calibration intercept and slope with intervals, tests and loess distances
per method, for the text output and the HTML page.
"""

import html
import math

# The statistics shown, in order, and their short column names.
VALIDATION_COLUMNS = (
    ("calibration intercept (slope fixed at 1)", "Intercept [95% CI]", True),
    ("calibration slope", "Slope [95% CI]", True),
    ("Spiegelhalter z", "Spiegelhalter p", False),
    ("ICI", "ICI", False),
    ("E90", "E90", False),
    ("Emax", "Emax", False),
    ("C (ROC)", "C", False),
)


def validation_rows(y, probabilities):
    """``{method: rows of validation_report}``, JSON-ready (NaN as None)."""
    from ..metrics import validation_report

    out = {}
    for name, proba in probabilities.items():
        rows = validation_report(y, proba).rows
        out[name] = [
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in row.items()
            }
            for row in rows
        ]
    return out


def _cell(row, with_interval, statistic):
    if statistic == "Spiegelhalter z":
        return "" if row["pvalue"] is None else f"{row['pvalue']:.3f}"
    if row["value"] is None:
        return ""
    text = f"{row['value']:.3f}"
    if with_interval and row["low"] is not None and row["high"] is not None:
        text += f" [{row['low']:.3f}, {row['high']:.3f}]"
    return text


def validation_table(report):
    """Headers and body cells of the validation section, or None."""
    validation = report.get("validation")
    if not validation:
        return None
    headers = ["Method"] + [short for _, short, _ in VALIDATION_COLUMNS]
    body = []
    for method, rows in validation.items():
        by_name = {row["statistic"]: row for row in rows}
        body.append(
            [method]
            + [
                _cell(by_name[name], with_interval, name)
                for name, _, with_interval in VALIDATION_COLUMNS
            ]
        )
    return headers, body


CAPTION = (
    "Clinical validation (positive class): calibration intercept with the "
    "slope fixed at 1 (ideal 0) and calibration slope (ideal 1), profile-"
    "likelihood 95% CIs; Spiegelhalter's test; ICI, E90, Emax of the loess "
    "calibration curve (span 0.75); C: area under the ROC curve. Full table: "
    "sklearn_calib.metrics.validation_report."
)


def validation_text(report):
    """Lines of the plain-text section (empty when there is none)."""
    table = validation_table(report)
    if table is None:
        return []
    headers, body = table
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]

    def fmt(cells):
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return ["", CAPTION, "", fmt(headers), "  ".join("-" * w for w in widths)] + [
        fmt(r) for r in body
    ]


def validation_html(report):
    """The HTML section (empty string when there is none)."""
    table = validation_table(report)
    if table is None:
        return ""
    headers, body = table
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
        for r in body
    )
    return (
        f"<h2>Clinical validation</h2><p>{html.escape(CAPTION)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    )
