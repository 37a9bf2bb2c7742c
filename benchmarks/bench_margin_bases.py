"""Margin temperature scaling over different base maps, on every public set.

Each variant is fitted on the val part and scored on the test part (ECE with
15 bins in %, NLL, Brier); the table gives the means over the sets. The
default base is a cross-validated choice between temperature scaling and ODIR
matrix scaling; the others put structured matrix scaling in or instead.

Run ``python benchmarks/bench_margin_bases.py [--quick] [--out DIR]``.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    load_set,
    machine_info,
    markdown_table,
    public_sets,
    write_results,
)
from bench_quality import QUICK_SETS, score  # noqa: E402

from sklearn_calib import (  # noqa: E402
    CalibratorSelector,
    MarginTemperatureScaling,
    MatrixScaling,
    StructuredMatrixScaling,
    TemperatureScaling,
)


def _variants():
    ts, ms = TemperatureScaling(device="cpu"), MatrixScaling(device="cpu")
    sms = StructuredMatrixScaling(device="cpu")
    return {
        "base: TS or MatrixScaling (default)": None,
        "base: StructuredMatrixScaling": sms,
        "base: TS or StructuredMatrixScaling": CalibratorSelector([ts, sms]),
        "base: TS, MatrixScaling or StructuredMatrixScaling": CalibratorSelector(
            [ts, ms, sms]
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three sets")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)
    names = [n for n in public_sets() if not args.quick or n in QUICK_SETS]
    if not names:
        print("no public sets found (../shared/data is absent)")
        return
    rows = []
    for name in names:
        data = load_set(name)
        for label, base in _variants().items():
            model = MarginTemperatureScaling(base, device="cpu")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                model.fit(data["logits_val"], data["y_val"])
                seconds = time.perf_counter() - start
            proba = model.predict_proba(data["logits_test"].astype(np.float64))
            rows.append(
                {
                    "set": name,
                    "base": label,
                    "fit_seconds": seconds,
                    **score(data["y_test"], proba),
                }
            )
            print(
                name,
                label,
                f"{rows[-1]['ECE %']:.2f} {rows[-1]['NLL']:.4f}",
                flush=True,
            )
    table = []
    for label in _variants():
        mine = [r for r in rows if r["base"] == label]
        table.append(
            [
                label,
                len(mine),
                f"{np.mean([r['ECE %'] for r in mine]):.2f}",
                f"{np.mean([r['NLL'] for r in mine]):.4f}",
                f"{np.mean([r['Brier'] for r in mine]):.4f}",
                f"{min(r['fit_seconds'] for r in mine):.1f}-"
                f"{max(r['fit_seconds'] for r in mine):.1f} s",
            ]
        )
    info = machine_info()
    markdown = (
        "# Margin temperature scaling: which base map\n\n"
        "Means over the public sets (fit on val, scored on test; ECE with 15 "
        f"bins). Machine: {info['cpu_count']} cores, torch {info['torch']}.\n\n"
        + markdown_table(
            ["base map", "sets", "mean ECE %", "mean NLL", "mean Brier", "fit time"],
            table,
        )
    )
    write_results(
        "bench_margin_bases", {"machine": info, "rows": rows}, markdown, args.out
    )


if __name__ == "__main__":
    main()
