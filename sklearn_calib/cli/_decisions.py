"""The decision section of ``report``: a certified abstention rule per method.

For each method's probabilities on the scored samples, a seeded random half
certifies a :class:`~sklearn_calib.selective.SelectiveClassifier` (error rate
among accepted samples at most 5 % with 90 % confidence) and the other half
measures it. Five lines of Python give the same rule::

    clf = SelectiveClassifier(risk=0.05, confidence_level=0.9)
    clf.fit(np.log(proba[certify]), y[certify])
    clf.threshold_, clf.risk_upper_bound_, clf.coverage_
"""

import math
import warnings

import numpy as np
from sklearn.model_selection import train_test_split

DECISION_RISK = 0.05
DECISION_CONFIDENCE = 0.9


def decision_rows(y, probabilities, *, seed):
    """One certified rule per method: threshold, bound, coverage, held-out figures."""
    from ..selective import SelectiveClassifier

    certify, held_out = train_test_split(
        np.arange(len(y)), train_size=0.5, random_state=seed
    )
    rows = []
    for method, proba in probabilities.items():
        proba = np.asarray(proba, dtype=np.float64)
        with np.errstate(divide="ignore"):
            logits = np.log(proba)  # probability 0: a masked class
        clf = SelectiveClassifier(
            risk=DECISION_RISK,
            confidence_level=DECISION_CONFIDENCE,
            classes=np.arange(proba.shape[1]),
        )
        with warnings.catch_warnings():
            # no certified threshold is reported in the row itself
            warnings.simplefilter("ignore", UserWarning)
            clf.fit(logits[certify], y[certify])
        accepted = clf.accept(logits[held_out])
        wrong = clf.predict(logits[held_out])[accepted] != y[held_out][accepted]
        rows.append(
            {
                "model": method,
                "certified": bool(clf.certified_),
                "threshold": clf.threshold_ if clf.certified_ else None,
                "risk_upper_bound": None
                if math.isnan(clf.risk_upper_bound_)
                else clf.risk_upper_bound_,
                "coverage": clf.coverage_,
                "held_out_coverage": float(accepted.mean()),
                "held_out_risk": float(wrong.mean()) if accepted.any() else None,
            }
        )
    return rows


def decision_protocol(n_samples):
    return (
        f"selective classification at risk {100 * DECISION_RISK:g} % with "
        f"{100 * DECISION_CONFIDENCE:g} % confidence, certified on a random half "
        f"of the {n_samples} scored samples, measured on the other half"
    )


def decision_section(report, *, render):
    """Lines of the decision table (empty without decisions).

    ``render(headers, body)`` gives the table's lines (markdown or aligned
    text, see ``_tables.table_lines``).
    """
    entries = report.get("decisions", [])
    if not entries:
        return []
    headers = [
        "Method",
        "Threshold",
        "Certified risk <=",
        "Coverage %",
        "Held-out coverage %",
        "Held-out risk %",
    ]
    body = []
    for e in entries:
        if not e["certified"]:
            body.append([e["model"], "not certified", "-", "0.0", "0.0", "-"])
            continue
        body.append(
            [
                e["model"],
                f"{e['threshold']:.4f}",
                f"{100 * e['risk_upper_bound']:.2f} %",
                f"{100 * e['coverage']:.1f}",
                f"{100 * e['held_out_coverage']:.1f}",
                "-"
                if e["held_out_risk"] is None
                else f"{100 * e['held_out_risk']:.2f}",
            ]
        )
    caption = (
        f"Decisions ({report.get('decisions_protocol', '')}): the confidence "
        "threshold above which the top class is given, the upper confidence "
        "bound of the error rate among accepted samples, and the accepted "
        "fraction."
    )
    return ["", caption, ""] + render(headers, body)
