"""The self-contained HTML page of ``report --out``."""

import base64
import html

from ._tables import (
    COLUMNS,
    best,
    cell,
    header_lines,
    notes,
    set_caption,
    set_headers,
    set_rows,
)
from ._validation import validation_html

_STYLE = """
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


def html_report(report, images, description):
    """The page: the table, its notes and every diagram embedded as base64 PNG.

    ``images`` maps method names to PNG bytes; ``description`` is the data
    set's description, or None. Every text from the data is escaped.
    """
    rows = report["results"]
    best_values = {k: best(rows, k) for k, _, _ in COLUMNS}
    head = "".join(
        f"<th>{html.escape(h)}</th>" for h in ["Method"] + [c[1] for c in COLUMNS]
    )
    body = []
    for r in rows:
        cells = [f"<td>{html.escape(r['method'])}</td>"]
        for key, _, percent in COLUMNS:
            mark = (
                ' class="best"'
                if best_values[key] is not None and r.get(key) == best_values[key]
                else ""
            )
            cells.append(f"<td{mark}>{cell(r, key, percent)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    listed = "".join(f'<li class="note">{html.escape(n)}</li>' for n in notes(report))
    figures = "".join(
        f'<figure><img alt="reliability diagram of {html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        "</figure>"
        for name, png in images.items()
    )
    from .. import __version__

    info = "".join(f"<p>{html.escape(line)}</p>" for line in header_lines(report))
    set_body = set_rows(report)
    sets = ""
    if set_body:
        set_head = "".join(f"<th>{html.escape(h)}</th>" for h in set_headers())
        set_cells = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
            for cells in set_body
        )
        sets = (
            f"<h2>Prediction sets</h2><p>{html.escape(set_caption(report))}</p>"
            f"<table><thead><tr>{set_head}</tr></thead><tbody>{set_cells}</tbody>"
            "</table>"
        )
    descr = f"<h2>Data</h2><pre>{html.escape(description)}</pre>" if description else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>sklearn-calib report</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>Calibration report</h1>"
        f"{info}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        "<p>ECE: top-label expected calibration error with equal-width bins; "
        "AdaECE: the same with equal-mass bins; cw-ECE: class-wise ECE; NLL: "
        "negative log-likelihood; Brier: multiclass Brier score; lower is "
        "better for all five. Best values in bold.</p>"
        f"{'<ul>' + listed + '</ul>' if listed else ''}{sets}"
        f"{validation_html(report)}"
        f'<h2>Reliability diagrams</h2><div class="figures">{figures}</div>'
        f"{descr}<p><small>sklearn-calib {html.escape(__version__)}</small></p>"
        "</body></html>\n"
    )
