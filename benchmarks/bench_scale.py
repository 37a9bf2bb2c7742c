"""Calibration of data larger than memory: metrics and a temperature fit on disk.

Writes synthetic over-confident float32 logits (and int16 labels) to ``.npy``
files chunk by chunk (10^8 x 10 by default: 4 GB; never in memory as a
whole), optionally a zarr store of the same data, then times, with the peak
memory of the process:

1. the floor: one sequential read of the files, chunk by chunk
   (``numpy.fromfile``, the reader of ``open_chunks``);
2. ``chunked_calibration_report`` with ECE, class-wise ECE, NLL and Brier
   (one pass over the data through a dask graph on the local threads);
3. the adaptive ECE (exact equal-mass bins: four passes for float32);
4. ``TemperatureScaling().fit_chunks``, exact (one pass plus one per Newton
   iteration);

and reports each as time per 10^8 logits and as a multiple of the floor. The
peak memory is the kernel's high-water mark of the resident set (``VmHWM``,
reset before each step through ``/proc/self/clear_refs``) and the largest
anonymous resident memory sampled every 10 ms (``RssAnon``: memory the
process allocated, without file pages). The files are read through the page
cache: the first read after writing them is as warm as the next ones, and the
floor is measured the same way. ``--quick`` checks every value against the
in-memory functions on a small size.

Run ``python benchmarks/bench_scale.py [--quick] [--rows N] [--classes K]
[--dir DIR] [--zarr] [--keep] [--out DIR]``. Check the free disk first
(``df -h /tmp``): the script refuses to start with less than 1.5 times the
data size free.
"""

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, markdown_table, write_results  # noqa: E402

from sklearn_calib import TemperatureScaling  # noqa: E402
from sklearn_calib.chunked import open_chunks  # noqa: E402
from sklearn_calib.metrics import chunked_calibration_report  # noqa: E402

GENERATION_ROWS = 2**20
ONE_PASS_METRICS = ["ece", "classwise_ece", "nll", "brier"]


# --- memory ------------------------------------------------------------------------


def _status():
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    return values


class PeakMemory:
    """Peak resident memory of this process during a ``with`` block."""

    def __enter__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.peak_anon = _status()["RssAnon"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.01):
            self.peak_anon = max(self.peak_anon, _status()["RssAnon"])

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        status = _status()
        self.peak_anon = max(self.peak_anon, status["RssAnon"])
        self.peak_rss = status["VmHWM"] if self.hwm_reset else None
        return False


def timed(func):
    gc.collect()
    with PeakMemory() as memory:
        start = time.perf_counter()
        result = func()
        seconds = time.perf_counter() - start
    return result, seconds, memory


# --- data --------------------------------------------------------------------------


def _write_header(f, shape, dtype):
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": shape,
    }
    np.lib.format.write_array_header_1_0(f, header)


def write_data(folder, n_rows, n_classes, seed=0):
    """Over-confident logits z (float32) and labels drawn from softmax(z / 2)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with open(folder / "logits.npy", "wb") as fx, open(folder / "y.npy", "wb") as fy:
        _write_header(fx, (n_rows, n_classes), np.float32)
        _write_header(fy, (n_rows,), np.int16)
        for start in range(0, n_rows, GENERATION_ROWS):
            n = min(GENERATION_ROWS, n_rows - start)
            z = rng.standard_normal((n, n_classes), dtype=np.float32)
            z *= 3.0
            soft = np.exp(0.5 * (z - z.max(axis=1, keepdims=True)))
            np.cumsum(soft, axis=1, out=soft)
            u = rng.random(n, dtype=np.float32) * soft[:, -1]
            y = (soft < u[:, None]).sum(axis=1).astype(np.int16)
            z.tofile(fx)
            np.minimum(y, n_classes - 1).tofile(fy)


def write_zarr(folder, data):
    import zarr

    store = folder / "data.zarr"
    group = zarr.open_group(str(store), mode="w")
    rows = data._pieces[0][2] - data._pieces[0][1]
    logits = group.create_array(
        "logits",
        shape=(data.n_samples, data.n_cols),
        chunks=(rows, data.n_cols),
        dtype=np.float32,
    )
    labels = group.create_array(
        "y", shape=(data.n_samples,), chunks=(rows,), dtype=np.int16
    )
    start = 0
    for X, y in data:
        logits[start : start + X.shape[0]] = X
        labels[start : start + X.shape[0]] = y
        start += X.shape[0]
    return store


def sequential_read(data):
    """The floor: every chunk read once, in order, by this thread."""
    total = 0
    for chunk in data:
        total += chunk[0].shape[0]
    return total


# --- the measured steps, each in a fresh process -------------------------------------


def run_step(step, path):
    """One measured step on the data at ``path``; a JSON-able record.

    The imports a process pays once (dask, and torch for the fit) are made
    before the clock starts; their memory is in the peak.
    """
    import dask.array  # noqa: F401

    if step == "ts":
        import torch  # noqa: F401
    data = open_chunks(path)
    if step == "floor":
        _, seconds, memory = timed(lambda: sequential_read(data))
        passes, values = 1, None
    elif step == "metrics":
        values, seconds, memory = timed(
            lambda: chunked_calibration_report(data, metrics=ONE_PASS_METRICS)
        )
        passes = 1
    elif step == "adaptive":
        values, seconds, memory = timed(
            lambda: chunked_calibration_report(data, metrics=["adaptive_ece"])
        )
        passes = 4 if data.dtype == np.float32 else 6
    else:
        ts, seconds, memory = timed(
            lambda: TemperatureScaling(device="cpu").fit_chunks(data)
        )
        passes = 1 + ts.n_iter_
        values = {"temperature": ts.temperature_, "n_iter": ts.n_iter_}
    return {
        "seconds": seconds,
        "passes": passes,
        "peak_rss_bytes": memory.peak_rss,
        "peak_anon_bytes": memory.peak_anon,
        "values": values,
    }


STEPS = {
    "floor": "sequential read (floor)",
    "metrics": "ECE, class-wise ECE, NLL, Brier",
    "adaptive": "adaptive ECE (exact edges)",
    "ts": "TemperatureScaling.fit_chunks",
}


def measure(step, path):
    """``run_step`` in a fresh interpreter, so that no step inherits memory."""
    completed = subprocess.run(
        [sys.executable, __file__, "--step", step, "--dir", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"step {step} failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def bench_config(folder, n_rows, n_classes, *, use_zarr, check):
    data_bytes = n_rows * n_classes * 4 + n_rows * 2
    free = shutil.disk_usage(folder.parent if folder.parent.exists() else "/").free
    if free < 1.5 * data_bytes * (2 if use_zarr else 1):
        raise SystemExit(
            f"Not enough free disk in {folder.parent}: {free / 2**30:.1f} GiB free, "
            f"the data needs {data_bytes / 2**30:.1f} GiB (x2 with --zarr)."
        )
    start = time.perf_counter()
    write_data(folder, n_rows, n_classes)
    write_seconds = time.perf_counter() - start
    print(f"wrote {data_bytes / 2**30:.2f} GiB in {write_seconds:.0f} s", flush=True)
    paths = {"npy": folder}
    if use_zarr:
        try:
            start = time.perf_counter()
            paths["zarr"] = write_zarr(folder, open_chunks(folder))
            print(f"wrote zarr in {time.perf_counter() - start:.0f} s", flush=True)
        except ImportError:
            print("zarr is not installed: skipped", flush=True)
    per_1e8 = 1e8 / (n_rows * n_classes)
    records = []
    for kind, path in paths.items():
        floor = None
        for step, name in STEPS.items():
            record = measure(step, path)
            floor = floor or record["seconds"]
            record.update(
                storage=kind,
                step=name,
                seconds_per_1e8_logits=record["seconds"] * per_1e8,
                times_floor=record["seconds"] / floor,
            )
            records.append(record)
            rss = record["peak_rss_bytes"]
            print(
                f"{kind} {name}: {record['seconds']:.1f} s "
                f"({record['times_floor']:.1f}x floor), peak RSS "
                f"{rss / 2**20 if rss else float('nan'):.0f} MiB, anon "
                f"{record['peak_anon_bytes'] / 2**20:.0f} MiB, {record['values']}",
                flush=True,
            )
        if check:
            check_against_memory(open_chunks(path), records[-4:])
    return {
        "n_rows": n_rows,
        "n_classes": n_classes,
        "bytes": data_bytes,
        "write_seconds": write_seconds,
        "steps": records,
    }


def check_against_memory(data, records):
    """--quick: every value equals the in-memory function's."""
    from sklearn_calib.metrics import calibration_report
    from sklearn_calib.utils._math import softmax

    X = np.concatenate([chunk[0] for chunk in data])
    y = np.concatenate([chunk[1] for chunk in data]).astype(np.int64)
    expected = calibration_report(
        y,
        softmax(X.copy()),
        metrics=ONE_PASS_METRICS + ["adaptive_ece"],
        as_frame=False,
    )["model"]
    values = {**records[1]["values"], **records[2]["values"]}
    for name, value in values.items():
        assert abs(value / expected[name] - 1) <= 1e-12, (name, value, expected[name])
    memory_t = TemperatureScaling(device="cpu").fit(X, y).temperature_
    chunked_t = records[3]["values"]["temperature"]
    assert abs(chunked_t / memory_t - 1) <= 1e-10, (chunked_t, memory_t)
    print("checked against the in-memory functions", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, checked")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--classes", type=int, default=None)
    parser.add_argument("--dir", default="/tmp/sklearn_calib_scale")
    parser.add_argument("--zarr", action="store_true", help="also a zarr store")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(run_step(args.step, Path(args.dir))))
        return

    if args.rows and args.classes:
        configs = [(args.rows, args.classes)]
    elif args.quick:
        configs = [(2_000_000, 10), (50_000, 1000)]
    else:
        # 10^8 x 10 and, at the same 4 GB, 10^6 x 1000 (10^7 x 1000 would be
        # 40 GB: pass --rows 10000000 --classes 1000 where disk and time allow).
        configs = [(100_000_000, 10), (1_000_000, 1000)]
    root = Path(args.dir)
    results = []
    try:
        for n_rows, n_classes in configs:
            folder = root / f"{n_rows}x{n_classes}"
            results.append(
                bench_config(
                    folder, n_rows, n_classes, use_zarr=args.zarr, check=args.quick
                )
            )
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    rows = []
    for config in results:
        for step in config["steps"]:
            rss = step["peak_rss_bytes"]
            rows.append(
                [
                    f"{config['n_rows']:,} x {config['n_classes']}",
                    step["storage"],
                    step["step"],
                    str(step["passes"]),
                    f"{step['seconds']:.1f}",
                    f"{step['seconds_per_1e8_logits']:.2f}",
                    f"{step['times_floor']:.1f}x",
                    f"{rss / 2**20:.0f}" if rss else "n/a",
                    f"{step['peak_anon_bytes'] / 2**20:.0f}",
                ]
            )
    table = markdown_table(
        [
            "logits (float32)",
            "storage",
            "step",
            "passes",
            "s",
            "s per 1e8 logits",
            "vs floor",
            "peak RSS MiB",
            "peak anon MiB",
        ],
        rows,
    )
    payload = {"machine": machine_info(), "quick": args.quick, "configs": results}
    write_results(
        "bench_scale" + ("_quick" if args.quick else ""), payload, table, args.out
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
