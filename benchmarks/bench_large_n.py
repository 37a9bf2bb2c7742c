"""Temperature scaling on 20 million rows: token-level language-model calibration sets.

Calibrating a language model token by token gives calibration sets of tens of
millions of rows. This benchmark fits ``TemperatureScaling`` on 2e7 x 10 and
2e7 x 2 float32 logits (more rows than float32 counts exactly, 2^24), held in
memory and memory-mapped from an ``.npy`` file, and records for each case:

- the fit time (one fit, in a fresh process);
- the peak resident memory of the fit, and how much of it comes on top of the
  resident memory before the fit (Linux's ``VmHWM``, reset before the fit);
- the optimality of the result: the float64 NLL derivative at the fitted
  ``beta = 1 / T``, relative to ``beta`` times the second derivative (the
  relative error of ``beta`` that a Newton step would still correct), computed
  by an independent numpy pass.

Run ``python benchmarks/bench_large_n.py [--quick] [--out DIR]``; ``--quick``
fits 2^24 + 1 rows of 2 logits only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import machine_info, markdown_table, write_results  # noqa: E402

CASES = [(20_000_000, 10), (20_000_000, 2)]
QUICK_CASES = [(2**24 + 1, 2)]
CHUNK_ROWS = 1_000_000


def fill_logits(out, labels, seed=0):
    """Over-confident synthetic float32 logits (T ~ 2.5), chunk by chunk."""
    rng = np.random.default_rng(seed)
    n, k = out.shape
    for start in range(0, n, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, n - start)
        true_logits = rng.normal(size=(rows, k))
        true_logits[np.arange(rows), rng.integers(0, k, rows)] += 3.0
        gumbel = -np.log(-np.log(rng.random((rows, k))))
        labels[start : start + rows] = np.argmax(true_logits + gumbel, axis=1)
        out[start : start + rows] = 2.5 * true_logits


def nll_derivatives(X, y, beta):
    """float64 L'(beta) and L''(beta) of the mean NLL, in numpy, by chunks."""
    first = second = 0.0
    for start in range(0, X.shape[0], CHUNK_ROWS):
        d = X[start : start + CHUNK_ROWS].astype(np.float64)
        d -= d.max(axis=1, keepdims=True)
        true = d[np.arange(d.shape[0]), y[start : start + CHUNK_ROWS]]
        e = np.exp(beta * d)
        s0 = e.sum(axis=1)
        mean = (e * d).sum(axis=1) / s0
        first += np.sum(mean - true)
        second += np.sum((e * d * d).sum(axis=1) / s0 - mean * mean)
    return first / X.shape[0], second / X.shape[0]


def _resident_peak_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def _resident_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def _reset_peak():
    """Reset VmHWM to the current resident size (Linux >= 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def child(n, k, path):
    """One case in this (fresh) process; prints a JSON record."""
    import torch

    from sklearn_calib import TemperatureScaling

    labels_path = path + ".labels.npy" if path else None
    if path:
        X = np.load(path, mmap_mode="r")
        y = np.load(labels_path)
    else:
        X = np.empty((n, k), dtype=np.float32)
        y = np.empty(n, dtype=np.int64)
        fill_logits(X, y)
    before = _resident_bytes()
    exact_peak = _reset_peak()
    start = time.perf_counter()
    ts = TemperatureScaling(device="cpu").fit(X, y)
    seconds = time.perf_counter() - start
    peak = _resident_peak_bytes()
    beta = 1.0 / ts.temperature_
    first, second = nll_derivatives(X, y, beta)
    print(
        json.dumps(
            {
                "rows": n,
                "classes": k,
                "storage": "memmap" if path else "in memory",
                "fit_seconds": seconds,
                "temperature": ts.temperature_,
                "n_iter": ts.n_iter_,
                "relative_newton_correction": abs(first / (beta * second)),
                "logits_bytes": X.nbytes,
                "rss_before_fit": before,
                "peak_rss_fit": peak,
                "peak_is_of_fit_only": exact_peak,
                "torch_threads": torch.get_num_threads(),
            }
        )
    )


def run_case(n, k, directory):
    path = ""
    if directory is not None:
        path = str(Path(directory) / f"logits_{n}x{k}.npy")
        X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, k))
        y = np.empty(n, dtype=np.int64)
        fill_logits(X, y)
        X.flush()
        del X
        np.save(path + ".labels.npy", y)
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); "
        f"from bench_large_n import child; child({n}, {k}, {path!r})"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if result.returncode != 0:
        return {"rows": n, "classes": k, "status": result.stderr.strip()[-300:]}
    record = json.loads(result.stdout.strip().splitlines()[-1])
    record["status"] = "ok"
    return record


def to_markdown(records, info):
    header = [
        "rows x classes",
        "storage",
        "fit time",
        "T",
        "Newton iterations",
        "relative correction left",
        "logits",
        "peak RSS of the fit",
        "peak above RSS before fit",
    ]
    rows = []
    for r in records:
        if r["status"] != "ok":
            rows.append([f"{r['rows']:,} x {r['classes']}", "", r["status"], *[""] * 6])
            continue
        gib = 2.0**30
        rows.append(
            [
                f"{r['rows']:,} x {r['classes']}",
                r["storage"],
                f"{r['fit_seconds']:.1f} s",
                f"{r['temperature']:.6f}",
                str(r["n_iter"]),
                f"{r['relative_newton_correction']:.1e}",
                f"{r['logits_bytes'] / gib:.2f} GiB",
                f"{r['peak_rss_fit'] / gib:.2f} GiB",
                f"{(r['peak_rss_fit'] - r['rss_before_fit']) / gib:.2f} GiB",
            ]
        )
    intro = (
        "# Temperature scaling on 20 million rows\n\n"
        f"Machine: {info['cpu_count']} cores, torch {info['torch']} "
        f"({info['torch_threads']} threads), Python {info['python']}. One fit per "
        "case, each in a fresh process, on synthetic over-confident float32 "
        "logits (T ~ 2.5). 'Relative correction left' is |L'(beta)| / "
        "(beta L''(beta)) in float64 at the fitted beta = 1 / T: the relative "
        "change of beta that one more exact Newton step would make. Peak RSS is "
        "Linux's VmHWM, reset just before the fit; for memory-mapped logits it "
        "includes the file's pages read during the fit (reclaimable page "
        "cache). The fit keeps one shifted copy of the logits, as large as "
        "the logits.\n\n"
    )
    return intro + markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2^24 + 1 rows of 2 logits"
    )
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)

    records = []
    with tempfile.TemporaryDirectory() as directory:
        for n, k in QUICK_CASES if args.quick else CASES:
            for storage in (None, directory):
                record = run_case(n, k, storage)
                print(record, flush=True)
                records.append(record)
                for leftover in Path(directory).glob("*"):
                    leftover.unlink()
    info = machine_info()
    write_results(
        "bench_large_n",
        {"machine": info, "cases": records},
        to_markdown(records, info),
        args.out,
    )


if __name__ == "__main__":
    main()
