"""Temperature scaling against its floor: passes over the logits, and peers.

For float32 logits of 20,000 x 1,000 and 50,000 x 1,000 (over-confident by
2.5, labels drawn from the softened model), in one run: the time of one
``torch.logsumexp(dim=1)`` over the logits (the floor: a pass that reads every
logit and takes its exp), ``TemperatureScaling().fit`` (best of 5), the passes
the fit makes (full-data passes with exp, and the rows of the warm start in
units of the data), scikit-learn's ``_TemperatureScaling`` (the
``method="temperature"`` model of ``CalibratedClassifierCV``; one run), and the
ratios. Also the first fit in a fresh process, split into ``import torch``
and the fit itself.

Run ``python benchmarks/bench_temperature_floor.py [--threads N] [--clock process]``.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

SIZES = [(20_000, 1000), (50_000, 1000)]


def synthetic(n, k, seed=0):
    rng = np.random.default_rng(seed)
    true_logits = rng.normal(size=(n, k)).astype(np.float32)
    true_logits[np.arange(n), rng.integers(0, k, n)] += 3.0
    gumbel = -np.log(-np.log(rng.random((n, k)) + 1e-300))
    y = np.argmax(true_logits + gumbel, axis=1)
    return (2.5 * true_logits).astype(np.float32), y


CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def best_of(function, repeat, clock=time.perf_counter):
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        function()
        best = min(best, clock() - start)
    return best


def count_passes(n_rows):
    """Wrap the solver's pass with a counter of full-data passes and rows."""
    from sklearn_calib._torch import _temperature

    counter = {"full": 0, "rows": 0}
    original = _temperature.TemperatureProblem.derivatives

    def derivatives(self, beta, third=True):
        rows = self.shifted.shape[0]
        counter["rows"] += rows
        counter["full"] += rows == n_rows
        return original(self, beta, third)

    _temperature.TemperatureProblem.derivatives = derivatives
    return counter


FIRST_FIT = """
import time, numpy as np
t0 = time.perf_counter()
import sklearn_calib
from sklearn_calib import TemperatureScaling
t1 = time.perf_counter()
import torch
t2 = time.perf_counter()
X = np.random.default_rng(0).normal(size=(1000, 10)); y = np.arange(1000) % 10
TemperatureScaling(device="cpu").fit(X, y)
t3 = time.perf_counter()
TemperatureScaling(device="cpu").fit(X, y)
t4 = time.perf_counter()
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {t3 - t2:.3f} {t4 - t3:.3f}")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="process: CPU time of this process (with --threads 1, robust to "
        "other jobs on the machine)",
    )
    args = parser.parse_args()

    import torch
    from sklearn.calibration import _TemperatureScaling

    from sklearn_calib import TemperatureScaling

    if args.threads:
        torch.set_num_threads(args.threads)
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.clock} clock; "
        f"load average at the start {load}"
    )
    print(
        "| N x K | logsumexp | fit | fit / logsumexp | full passes | warm-start "
        "rows / N | scikit-learn | scikit-learn / fit | T | scikit-learn T |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, k in SIZES:
        X, y = synthetic(n, k)
        tensor = torch.from_numpy(X)
        counter = count_passes(n)
        TemperatureScaling(device="cpu").fit(X, y)  # warm-up
        clock = CLOCKS[args.clock]
        lse = best_of(lambda t=tensor: torch.logsumexp(t, dim=1), args.repeat, clock)
        counter.update(full=0, rows=0)
        fit = best_of(
            lambda X=X, y=y: TemperatureScaling(device="cpu").fit(X, y),
            args.repeat,
            clock,
        )
        full = counter["full"] / args.repeat
        warm_rows = (counter["rows"] / args.repeat - full * n) / n
        ts = TemperatureScaling(device="cpu").fit(X, y)
        start = clock()
        theirs = _TemperatureScaling().fit(X, y)
        sk = clock() - start
        print(
            f"| {n:,} x {k:,} | {lse * 1e3:.0f} ms | {fit * 1e3:.0f} ms | "
            f"{fit / lse:.2f} | {full:g} | {warm_rows:.2f} | {sk * 1e3:.0f} ms | "
            f"{sk / fit:.0f} | {ts.temperature_:.6f} | {1 / theirs.beta_:.6f} |",
            flush=True,
        )
    out = subprocess.run(
        [sys.executable, "-c", FIRST_FIT], capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"first fit in a fresh process: import sklearn_calib {out[0]} s, "
        f"import torch {out[1]} s, first fit {out[2]} s, second fit {out[3]} s"
    )


if __name__ == "__main__":
    main()
