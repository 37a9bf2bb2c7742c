"""StructuredMatrixScaling with the class-block and the diagonal preconditioner.

The affine solver preconditions the matrix map's L-BFGS with per-class Hessian
blocks only where some entry has no ridge; this compares both on the
structured matrix map (every entry penalised): its diagonal preconditioner,
and the class blocks forced in its place (float64, as the solver builds them).
Process CPU seconds, best of 2, on each set's full val split and its first
300 rows; the objective is printed to show both reach the same optimum.

Run ``python benchmarks/bench_structured_preconditioner.py``.
"""

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_set, machine_info, public_sets  # noqa: E402

import sklearn_calib._torch._affine as affine  # noqa: E402
from sklearn_calib import StructuredMatrixScaling, TemperatureScaling  # noqa: E402

SETS = [
    "c100_densenetbc100_netcal",
    "c100_wrn16-4_netcal",
    "c100_resnet20_chenyaofo",
    "c10_resnet56_chenyaofo",
    "c10_lenet5_netcal",
    "llmub_falcon7b_emotion",
    "agnews_gpt2_0shot",
    "imdb_fasttext_labelerrors",
    "beans_mlp_trained_here",
]


def cpu_seconds(func, repeat=2):
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.process_time()
        out = func()
        best = min(best, time.process_time() - start)
    return best, out


def _forced_blocks(objective, theta, curv, grad):
    if objective.kind == "matrix":
        return affine._BlockPreconditioner(objective.class_blocks(theta), objective.rho)
    return _DEFAULT(objective, theta, curv, grad)


_DEFAULT = affine._preconditioner


def main():
    print(machine_info())
    available = set(public_sets())
    # the first torch fit in a process pays a one-off start-up cost
    TemperatureScaling(device="cpu").fit(np.eye(3), np.arange(3))
    totals = {"blocks": 0.0, "diagonal": 0.0}
    print(
        "| set | rows x classes | blocks CPU s / iterations "
        "| diagonal CPU s / iterations | objective |"
    )
    print("|---|---|---|---|---|")
    for name in SETS:
        if name not in available:
            continue
        data = load_set(name)
        for n in [data["y_val"].shape[0], 300]:
            z, y = data["logits_val"][:n], data["y_val"][:n]
            cells, objectives = [], []
            for label, choice in [("blocks", _forced_blocks), ("diagonal", _DEFAULT)]:
                affine._preconditioner = choice
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    seconds, fitted = cpu_seconds(
                        lambda z=z, y=y: StructuredMatrixScaling(device="cpu").fit(z, y)
                    )
                totals[label] += seconds
                cells.append(f"{seconds:.3f} / {fitted.n_iter_}")
                objectives.append(f"{fitted.objective_:.10f}")
            size = f"{z.shape[0]} x {z.shape[1]}"
            objective = " / ".join(objectives)
            print(f"| {name} | {size} | {cells[0]} | {cells[1]} | {objective} |")
    affine._preconditioner = _DEFAULT
    blocks, diagonal = totals["blocks"], totals["diagonal"]
    print(f"\ntotal CPU s: blocks {blocks:.2f}, diagonal {diagonal:.2f}")


if __name__ == "__main__":
    main()
