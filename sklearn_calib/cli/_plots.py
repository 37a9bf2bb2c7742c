"""The reliability diagrams of ``report --out`` (matplotlib, imported on use)."""

import io
import re

import numpy as np

from ._common import CommandError


def require_matplotlib():
    """Fail early, before any fit, when ``--out`` cannot draw its figures."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise CommandError(
            "--out draws reliability diagrams and needs matplotlib: python -m pip "
            "install 'sklearn-calib[plot]'"
        ) from exc


def slug(name):
    """A method name as part of a file name: letters, digits and ``_``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


def reliability_png(y, proba, name, n_bins):
    """A reliability diagram with its confidence histogram, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..display import ReliabilityDisplay

    fig, (ax, hist_ax) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(4.2, 5.2),
        layout="constrained",
        gridspec_kw={"height_ratios": [3, 1]},
    )
    try:
        # y holds column indices (codes): every column is a class.
        ReliabilityDisplay.from_predictions(
            y,
            proba,
            n_bins=n_bins,
            name=name,
            ax=ax,
            hist_ax=hist_ax,
            labels=np.arange(max(2, proba.shape[1])),
        )
        ax.set_title(name)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
    finally:
        plt.close(fig)
    return buffer.getvalue()
