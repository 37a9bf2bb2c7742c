"""Calibration metrics: time and value against torchmetrics, netcal and relplot.

1. ECE with 15 bins on 1M x 10 and 1M x 100 float32 probabilities:
   ``sklearn_calib.metrics.expected_calibration_error`` (validation included)
   against torchmetrics' ``multiclass_calibration_error``, netcal's ``ECE`` and
   relplot's ``binnedECE`` (relplot has no multiclass entry point, so the
   numpy top-label pass its users need is timed with it). Values are compared
   with ours.
2. The binning convention on the case of METHODS.md: predictions [0.95, 1.0],
   targets [1, 0], 10 bins; the right answer is 0.475.
3. Smooth ECE against ``relplot.smECE`` (given precomputed confidences, so the
   peer is spared the top-label pass that ours includes) at equal value.
4. Our other metrics and a 1000-resample bootstrap interval, for scale.

Peers are optional imports: a missing one is reported, not fatal. Times are
the best of several calls.

Run ``python benchmarks/bench_metrics.py [--quick] [--out DIR]``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, machine_info, markdown_table, write_results  # noqa: E402

from sklearn_calib.metrics import (  # noqa: E402
    adaptive_calibration_error,
    bootstrap_interval,
    brier_score,
    classwise_calibration_error,
    expected_calibration_error,
    log_loss,
    maximum_calibration_error,
    smooth_calibration_error,
)
from sklearn_calib.metrics._bin_statistics import top_label  # noqa: E402


def synthetic(n_samples, n_classes, *, scale=3.0, seed=0, dtype=np.float32):
    """Over-confident softmax probabilities; labels from a softened softmax."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n_samples, n_classes)).astype(np.float32) * scale
    z -= z.max(axis=1, keepdims=True)
    proba = np.exp(z)
    proba /= proba.sum(axis=1, keepdims=True)
    softer = np.exp(z / 2)
    softer /= softer.sum(axis=1, keepdims=True)
    u = rng.random((n_samples, 1), dtype=np.float32)
    y = np.minimum((u > np.cumsum(softer, axis=1)).sum(axis=1), n_classes - 1)
    return proba.astype(dtype), y.astype(np.int64)


def _peers_ece(proba, y, n_bins):
    """{name: callable() -> float} for the peers that import."""
    peers = {}
    notes = {}
    try:
        import torch
        from torchmetrics.functional.classification import (
            multiclass_calibration_error,
        )

        preds, target = torch.from_numpy(proba), torch.from_numpy(y)
        peers["torchmetrics"] = lambda: float(
            multiclass_calibration_error(
                preds, target, num_classes=proba.shape[1], n_bins=n_bins
            )
        )
    except ImportError as exc:
        notes["torchmetrics"] = f"missing ({exc.name})"
    try:
        from netcal.metrics import ECE

        peers["netcal"] = lambda: float(ECE(bins=n_bins).measure(proba, y))
    except ImportError as exc:
        notes["netcal"] = f"missing ({exc.name})"
    try:
        from relplot.metrics import binnedECE

        def relplot_ece():
            # relplot has no multiclass entry point: its users take the
            # top-label confidences with numpy first, so that pass is timed too.
            confidence = proba.max(axis=1).astype(np.float64)
            correct = (proba.argmax(axis=1) == y).astype(np.float64)
            return float(binnedECE(confidence, correct, nbins=n_bins))

        peers["relplot (binnedECE + numpy top-label)"] = relplot_ece
    except ImportError as exc:
        notes["relplot"] = f"missing ({exc.name})"
    return peers, notes


def bench_ece(sizes, repeat, peer_repeat):
    rows, records = [], []
    for n_samples, n_classes in sizes:
        proba, y = synthetic(n_samples, n_classes)
        ours_time, ours = best_time(
            lambda proba=proba, y=y: expected_calibration_error(y, proba), repeat=repeat
        )
        record = {
            "n_samples": n_samples,
            "n_classes": n_classes,
            "dtype": "float32",
            "ours": {"seconds": ours_time, "value": ours},
            "peers": {},
        }
        rows.append(
            [
                f"{n_samples:,} x {n_classes}",
                "sklearn-calib",
                f"{ours_time * 1e3:.1f}",
                f"{ours:.6f}",
                "-",
                "-",
            ]
        )
        peers, notes = _peers_ece(proba, y, 15)
        for name, run in peers.items():
            seconds, value = best_time(run, repeat=peer_repeat)
            record["peers"][name] = {"seconds": seconds, "value": value}
            rows.append(
                [
                    f"{n_samples:,} x {n_classes}",
                    name,
                    f"{seconds * 1e3:.1f}",
                    f"{value:.6f}",
                    f"{abs(value - ours):.1e}",
                    f"{seconds / ours_time:.1f}x",
                ]
            )
        for name, note in notes.items():
            record["peers"][name] = {"note": note}
            rows.append([f"{n_samples:,} x {n_classes}", name, note, "", "", ""])
        records.append(record)
    table = markdown_table(
        [
            "probabilities",
            "implementation",
            "ms",
            "ECE-15",
            "|diff| vs ours",
            "time vs ours",
        ],
        rows,
    )
    return records, table


def bench_convention():
    y_prob = np.array([[0.05, 0.95], [0.0, 1.0]], dtype=np.float32)
    y = np.array([1, 0])
    values = {"sklearn-calib": expected_calibration_error(y, y_prob, n_bins=10)}
    peers, notes = _peers_ece(y_prob, y, 10)
    for name, run in peers.items():
        values[name] = run()
    rows = [[name, f"{value:.4f}"] for name, value in values.items()]
    rows += [[name, note] for name, note in notes.items()]
    table = markdown_table(["implementation", "ECE (correct: 0.4750)"], rows)
    return values, table


def bench_smooth(sizes, repeat):
    try:
        import relplot
    except ImportError:
        return [], "relplot is not installed: smooth ECE not compared.\n"
    rows, records = [], []
    for n_samples, n_classes in sizes:
        proba, y = synthetic(n_samples, n_classes, dtype=np.float64)
        confidence, correct = top_label(proba, y)
        confidence = confidence.astype(np.float64)
        correct = correct.astype(np.float64)
        ours_time, ours = best_time(
            lambda proba=proba, y=y: smooth_calibration_error(y, proba), repeat=repeat
        )
        peer_time, peer = best_time(
            lambda f=confidence, a=correct: relplot.smECE(f, a),
            repeat=max(1, repeat // 3),
        )
        records.append(
            {
                "n_samples": n_samples,
                "n_classes": n_classes,
                "ours": {"seconds": ours_time, "value": ours},
                "relplot": {"seconds": peer_time, "value": peer},
                "speedup": peer_time / ours_time,
            }
        )
        rows.append(
            [
                f"{n_samples:,} x {n_classes}",
                f"{ours_time * 1e3:.1f}",
                f"{peer_time * 1e3:.1f}",
                f"{peer_time / ours_time:.1f}x",
                f"{ours:.6f}",
                f"{abs(ours - peer):.1e}",
            ]
        )
    table = markdown_table(
        ["probabilities", "ours ms", "relplot.smECE ms", "speed-up", "smECE", "|diff|"],
        rows,
    )
    return records, table


def bench_others(n_samples, n_classes, repeat, n_resamples):
    proba, y = synthetic(n_samples, n_classes)
    metrics = {
        "maximum_calibration_error": maximum_calibration_error,
        "adaptive_calibration_error": adaptive_calibration_error,
        "classwise_calibration_error": classwise_calibration_error,
        "smooth_calibration_error": smooth_calibration_error,
        "log_loss": log_loss,
        "brier_score": brier_score,
    }
    rows, records = [], {}
    for name, metric in metrics.items():
        seconds, value = best_time(
            lambda metric=metric: metric(y, proba), repeat=repeat
        )
        records[name] = {"seconds": seconds, "value": value}
        rows.append([name, f"{seconds * 1e3:.1f}", f"{value:.6f}"])
    small, y_small = synthetic(10_000, n_classes)
    seconds, ci = best_time(
        lambda: bootstrap_interval(
            expected_calibration_error,
            y_small,
            small,
            n_resamples=n_resamples,
            random_state=0,
        ),
        repeat=1,
    )
    records["bootstrap_ece_10k"] = {
        "seconds": seconds,
        "n_resamples": n_resamples,
        "value": ci.value,
        "low": ci.low,
        "high": ci.high,
    }
    rows.append(
        [
            f"bootstrap_interval(ECE), 10,000 x {n_classes}, {n_resamples} resamples",
            f"{seconds * 1e3:.1f}",
            f"{ci.value:.4f} [{ci.low:.4f}, {ci.high:.4f}]",
        ]
    )
    table = markdown_table(
        [f"metric ({n_samples:,} x {n_classes} float32)", "ms", "value"], rows
    )
    return records, table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast subset")
    parser.add_argument("--out", default=None, help="output folder")
    args = parser.parse_args(argv)

    if args.quick:
        ece_sizes, smooth_sizes = [(100_000, 10)], [(5_000, 10), (100_000, 10)]
        repeat, peer_repeat, others_n, n_resamples = 3, 1, 100_000, 200
    else:
        ece_sizes = [(1_000_000, 10), (1_000_000, 100)]
        smooth_sizes = [(5_000, 10), (100_000, 10), (1_000_000, 10)]
        repeat, peer_repeat, others_n, n_resamples = 15, 3, 1_000_000, 1000

    ece_records, ece_table = bench_ece(ece_sizes, repeat, peer_repeat)
    convention, convention_table = bench_convention()
    smooth_records, smooth_table = bench_smooth(smooth_sizes, repeat)
    other_records, other_table = bench_others(
        others_n, 10, max(3, repeat // 3), n_resamples
    )
    payload = {
        "machine": machine_info(),
        "quick": args.quick,
        "ece15": ece_records,
        "convention_case": convention,
        "smooth_ece": smooth_records,
        "other_metrics": other_records,
    }
    markdown = (
        "## ECE, 15 bins, float32 probabilities\n\n"
        + ece_table
        + "\n## Binning convention: preds [0.95, 1.0], targets [1, 0], 10 bins\n\n"
        + convention_table
        + "\n## Smooth ECE against relplot\n\n"
        + smooth_table
        + "\n## Other metrics\n\n"
        + other_table
    )
    write_results("bench_metrics", payload, markdown, args.out)


if __name__ == "__main__":
    main()
