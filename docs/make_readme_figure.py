"""Draw docs/images/reliability.png, the reliability diagram shown in README.md.

The bundled CIFAR-100 DenseNet-BC-100 logits (the set ``sklearn-calib report``
uses by default), before and after temperature scaling fitted on the
validation part. Run from the repository root::

    python docs/make_readme_figure.py
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from scipy.special import softmax  # noqa: E402

from sklearn_calib import TemperatureScaling  # noqa: E402
from sklearn_calib.datasets import load_logits  # noqa: E402
from sklearn_calib.display import ReliabilityDisplay  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "images" / "reliability.png"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PNG to write")
    args = parser.parse_args(argv)

    data = load_logits("c100_densenetbc100_netcal")
    ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
    panels = [
        ("uncalibrated", "raw", softmax(data.logits_test.astype("float64"), axis=1)),
        (
            f"temperature scaling, T = {ts.temperature_:.2f}",
            "TS",
            ts.predict_proba(data.logits_test),
        ),
    ]
    fig, axes = plt.subplots(
        2,
        2,
        figsize=(8.4, 5.6),
        layout="constrained",
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1]},
    )
    for column, (title, name, proba) in enumerate(panels):
        ReliabilityDisplay.from_predictions(
            data.y_test,
            proba,
            ax=axes[0, column],
            hist_ax=axes[1, column],
            name=name,
            gap=True,
        )
        axes[0, column].set_title(title, fontsize="medium")
    fig.suptitle(
        "DenseNet-BC-100 on CIFAR-100 (bundled logits): test set, 15 bins",
        fontsize="medium",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    plt.close(fig)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
