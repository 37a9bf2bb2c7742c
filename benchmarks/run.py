"""Run every benchmark and collect the results into docs/benchmarks.md.

``python benchmarks/run.py`` runs the full suite: well over an hour on 2 cores
(the eight benchmarks in ``results/run_times.json`` took 21 minutes together;
bench_scale, which writes 4 GB twice, takes about an hour more, and
bench_large_n minutes); ``--quick`` a subset that finishes in a few minutes.
Each benchmark writes JSON and markdown to ``benchmarks/results`` (or
``--out``); this script concatenates the markdown tables into
``collected.md`` there (``--docs`` names another page). ``docs/benchmarks.md``
is written by hand from these results, with the analyses of each issue: a
page that this script did not write is never overwritten unless ``--force``
says so.
"""

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The first line of every page this script writes: a page without it was
# written by hand and is not overwritten unasked.
MARKER = "<!-- collected by benchmarks/run.py: rewritten on every run -->"

# Page sections for the benchmarks whose markdown has no title of its own.
TITLES = {
    "bench_smart": "SMART benchmark",
    "bench_metrics": "Metrics benchmark",
    "bench_classifier": "Calibrating scikit-learn classifiers",
    "bench_scale": "Data larger than memory",
    "bench_smart_chunked": "SMART by mini-batches over chunks",
}

BENCHMARKS = [
    "bench_temperature",
    "bench_large_n",
    "bench_scaling",
    "bench_smart",
    "bench_metrics",
    "bench_classifier",
    "bench_quality",
    "bench_structured",
    "bench_memory",
    "bench_conformal",
    # Writes 4 GB to /tmp and reads it about 15 times (about an hour on 2
    # busy cores); --quick writes 0.3 GB.
    "bench_scale",
    "bench_smart_chunked",
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fast subset of every benchmark"
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument(
        "--docs",
        default=None,
        help="markdown page to (re)write (default: collected.md in --out); "
        "'' to skip",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite --docs even where this script did not write it",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated subset of benchmarks"
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="only rebuild the docs page from the results already written",
    )
    args = parser.parse_args(argv)
    if args.docs is None:
        args.docs = str(Path(args.out) / "collected.md")
    page = Path(args.docs) if args.docs else None
    if page is not None and page.is_file() and not args.force:
        with page.open() as handle:
            first = handle.readline().rstrip("\n")
        if first != MARKER:
            # Checked before any benchmark runs, not after an hour of them.
            parser.error(
                f"{page} was not written by this script (hand-written analyses "
                "would be lost); pass --force to overwrite it, or another --docs"
            )

    chosen = [b for b in BENCHMARKS if not args.only or b in args.only.split(",")]
    # Run times survive a --collect: each benchmark's latest one is kept here.
    times_path = Path(args.out) / "run_times.json"
    timings = json.loads(times_path.read_text()) if times_path.is_file() else {}
    for name in [] if args.collect else chosen:
        module = importlib.import_module(name)
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        module.main((["--quick"] if args.quick else []) + ["--out", args.out])
        timings[name] = time.perf_counter() - start
        times_path.write_text(json.dumps(timings, indent=1) + "\n")

    if page is not None:
        parts = [
            MARKER,
            "# Benchmarks\n",
            "Regenerate with `python benchmarks/run.py"
            f"{' --quick' if args.quick else ''}` (results also as JSON in "
            "`benchmarks/results/`). Timings are wall-clock on the machine named in "
            "each section; nothing here is asserted by the tests.\n",
        ]
        for name in chosen:
            md = Path(args.out) / f"{name}.md"
            if md.is_file():
                text = md.read_text()
                if not text.startswith("# "):
                    text = f"# {TITLES.get(name, name)}\n\n{text}"
                # demote the benchmark's own headings by one level
                parts.append(
                    "\n".join(
                        "#" + line if line.startswith("#") else line
                        for line in text.splitlines()
                    )
                )
        shown = {n: timings[n] for n in chosen if n in timings}
        if shown:
            parts.append(
                "\nLatest run time of each benchmark: "
                + ", ".join(f"{n} {t:.0f} s" for n, t in shown.items())
                + f" ({sum(shown.values()) / 60:.1f} min in all).\n"
            )
        page.write_text("\n".join(parts))
        print(f"wrote {page}")


if __name__ == "__main__":
    main()
