"""Shared helpers of the benchmark scripts (not collected by pytest)."""

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(
    os.environ.get("SKLEARN_CALIB_SHARED_DATA", REPO.parent / "shared" / "data")
)
RESULTS = REPO / "benchmarks" / "results"


def public_sets():
    """Names of the real-logit sets in ../shared/data (empty when absent)."""
    if not SHARED_DATA.is_dir():
        return []
    return sorted(p.stem for p in SHARED_DATA.glob("*.npz"))


def load_set(name):
    with np.load(SHARED_DATA / f"{name}.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def random_subsets(n_rows, sizes, draws):
    """``(size, draw, rows)`` for every size below ``n_rows`` and every draw.

    Rows drawn without replacement, seeded by ``(size, draw)``: the small-set
    benchmarks share their subsets.
    """
    for size in sizes:
        if size >= n_rows:
            continue
        for draw in range(draws):
            rng = np.random.default_rng([size, draw])
            yield size, draw, rng.choice(n_rows, size=size, replace=False)


def best_time(func, *, repeat=3, min_time=0.0):
    """Best wall-clock time of ``func()`` over ``repeat`` calls, and its last result."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - start)
    return best, result


def machine_info():
    import torch

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def write_results(name, payload, markdown, out_dir=None):
    out = Path(out_dir) if out_dir else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2, default=float))
    (out / f"{name}.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out / name}.json and .md")


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
