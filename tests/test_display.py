"""ReliabilityDisplay: the artists it draws and the values behind them."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling
from sklearn_calib.metrics import (
    calibration_curve,
    classwise_calibration_error,
    expected_calibration_error,
)
from sklearn_calib.utils._testing import make_logits

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sklearn_calib.display import ReliabilityDisplay  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def data():
    logits, y = make_logits(n_samples=1500, n_classes=4, seed=0)
    proba = np.exp(logits - logits.max(axis=1, keepdims=True))
    proba /= proba.sum(axis=1, keepdims=True)
    return logits, y, proba


def test_top_label_artists_hold_the_curve(data):
    _, y, proba = data
    disp = ReliabilityDisplay.from_predictions(y, proba, n_bins=10, name="raw")
    curve = calibration_curve(y, proba, n_bins=10)
    shown = curve.count > 0
    np.testing.assert_allclose(disp.line_.get_xdata(), curve.confidence[shown])
    np.testing.assert_allclose(disp.line_.get_ydata(), curve.accuracy[shown])
    np.testing.assert_array_equal(disp.ref_line_.get_xdata(), [0, 1])
    np.testing.assert_array_equal(disp.ref_line_.get_ydata(), [0, 1])
    # The histogram below: fraction of samples per bin on the bin edges.
    np.testing.assert_allclose(disp.hist_.get_data().values, curve.count / len(y))
    np.testing.assert_allclose(disp.hist_.get_data().edges, curve.bin_edges)
    assert disp.hist_ax_ is not disp.ax_ and disp.figure_ is disp.ax_.figure
    assert disp.ece == pytest.approx(expected_calibration_error(y, proba, n_bins=10))
    labels = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert labels == ["Perfectly calibrated", f"raw, ECE {100 * disp.ece:.2f}%"]
    assert disp.band_ is None and disp.gap_ is None
    assert disp.ax_.get_ylabel() == "Accuracy"
    assert disp.hist_ax_.get_xlabel() == "Confidence"


def test_empty_bins_are_not_drawn():
    y_prob = np.array([[0.95, 0.05], [0.92, 0.08], [0.6, 0.4]])
    disp = ReliabilityDisplay.from_predictions([0, 1, 0], y_prob, n_bins=10)
    assert len(disp.line_.get_xdata()) == 2


def test_classwise_draws_one_curve_per_class(data):
    _, y, proba = data
    names = np.array(["ant", "bee", "cat", "dog"])
    disp = ReliabilityDisplay.from_predictions(
        names[y], proba, multiclass="classwise", n_bins=8
    )
    curve = calibration_curve(y, proba, n_bins=8, multiclass="classwise")
    assert len(disp.line_) == 4 and len(disp.hist_) == 4
    for k, line in enumerate(disp.line_):
        shown = curve.count[k] > 0
        np.testing.assert_allclose(line.get_ydata(), curve.accuracy[k][shown])
        assert line.get_label() == f"class {names[k]}"
    assert disp.ece == pytest.approx(classwise_calibration_error(y, proba, n_bins=8))
    assert disp.ax_.get_ylabel() == "Observed frequency"


def test_bootstrap_bands_surround_the_curve(data):
    _, y, proba = data
    disp = ReliabilityDisplay.from_predictions(
        y, proba, n_bins=5, n_bootstraps=200, random_state=0
    )
    assert disp.band_ is not None
    shown = disp.count > 0
    low, high = disp.accuracy_low[shown], disp.accuracy_high[shown]
    assert np.all(low <= high)
    # Percentile intervals of well-filled bins contain the full-data accuracy.
    full = disp.count[shown] > 50
    acc = disp.accuracy[shown]
    assert np.all((low[full] <= acc[full]) & (acc[full] <= high[full]))
    again = ReliabilityDisplay.from_predictions(
        y, proba, n_bins=5, n_bootstraps=200, random_state=0
    )
    np.testing.assert_array_equal(again.accuracy_low, disp.accuracy_low)


def test_several_calibrators_on_one_axes(data):
    logits, y, proba = data
    raw = ReliabilityDisplay.from_predictions(y, proba, name="raw")
    model = TemperatureScaling(device="cpu").fit(logits, y)
    ts = ReliabilityDisplay.from_estimator(
        model, logits, y, ax=raw.ax_, hist_ax=raw.hist_ax_, gap=True
    )
    assert ts.ax_ is raw.ax_ and ts.figure_ is raw.figure_
    assert ts.ref_line_ is None  # the diagonal is drawn once
    lines = raw.ax_.get_lines()
    assert len(lines) == 3
    assert ts.line_.get_label().startswith("TemperatureScaling")
    assert len(raw.hist_ax_.patches) == 2
    assert ts.ece < raw.ece
    assert len(ts.gap_.get_segments()) == np.count_nonzero(ts.count)


def test_from_estimator_uses_classes(data):
    logits, y, _ = data
    names = np.array(["ant", "bee", "cat", "dog"])
    model = TemperatureScaling(device="cpu").fit(logits, names[y])
    disp = ReliabilityDisplay.from_estimator(model, logits, names[y], n_bins=10)
    reference = calibration_curve(y, model.predict_proba(logits), n_bins=10)
    np.testing.assert_allclose(disp.accuracy, reference.accuracy)


def test_plot_without_histogram_and_on_given_axes(data):
    _, y, proba = data
    disp = ReliabilityDisplay.from_predictions(y, proba, histogram=False)
    assert disp.hist_ax_ is None and disp.hist_ is None
    assert len(disp.figure_.axes) == 1
    fig, ax = plt.subplots()
    again = disp.plot(ax=ax, name="again")
    assert again is disp and disp.ax_ is ax and disp.hist_ is None
    assert disp.ax_.get_xlabel() == "Confidence"


def test_renders_png(data, tmp_path):
    logits, y, proba = data
    disp = ReliabilityDisplay.from_predictions(
        y, proba, n_bootstraps=50, random_state=0, name="raw", gap=True
    )
    path = tmp_path / "reliability.png"
    disp.figure_.savefig(path, dpi=60)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    # Not a blank canvas: the curve, band and histogram leave coloured pixels.
    assert np.std(image[..., :3]) > 0.05


def test_bad_arguments_raise(data):
    logits, y, proba = data
    with pytest.raises(ValueError, match="multiclass"):
        ReliabilityDisplay.from_predictions(y, proba, multiclass="ovr")
    with pytest.raises(ValueError, match="n_bins"):
        ReliabilityDisplay.from_predictions(y, proba, n_bins=0)
    with pytest.raises(ValueError, match="not logits"):
        ReliabilityDisplay.from_predictions(y, logits)
    with pytest.raises(Exception, match="not fitted"):
        ReliabilityDisplay.from_estimator(TemperatureScaling(), logits, y)
    # Booleans are not counts (True drew one bootstrap resample), and a
    # level that is not a number failed on a comparison inside the check.
    with pytest.raises(ValueError, match="n_bootstraps"):
        ReliabilityDisplay.from_predictions(y, proba, n_bootstraps=True)
    with pytest.raises(ValueError, match="confidence_level"):
        ReliabilityDisplay.from_predictions(
            y, proba, interval="wilson", confidence_level="0.9"
        )


def test_importing_display_does_not_import_matplotlib():
    code = "import sys, sklearn_calib.display; print('matplotlib' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("interval", ["bootstrap", "wilson"])
@pytest.mark.parametrize("multiclass", ["top-label", "classwise"])
def test_scaling_every_weight_changes_nothing(data, multiclass, interval):
    # Weights near 1e307 summed to inf: the ECE, accuracies and bands were
    # NaN (wilson raised), the histogram NaN.
    _, y, proba = data
    y, proba = y[:300], proba[:300]
    weights = np.random.default_rng(0).integers(1, 5, len(y)).astype(float)
    kwargs = dict(
        multiclass=multiclass, interval=interval, n_bootstraps=20, random_state=0
    )
    ref = ReliabilityDisplay.from_predictions(y, proba, sample_weight=weights, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        big = ReliabilityDisplay.from_predictions(
            y, proba, sample_weight=weights * 2.0**1020, **kwargs
        )
    assert big.ece == ref.ece
    for name in ("accuracy", "confidence", "accuracy_low", "accuracy_high"):
        np.testing.assert_array_equal(getattr(big, name), getattr(ref, name))
    hists = zip(np.atleast_1d(big.hist_), np.atleast_1d(ref.hist_), strict=True)
    for hist_big, hist_ref in hists:
        np.testing.assert_array_equal(
            hist_big.get_data().values, hist_ref.get_data().values
        )
    # The counts in the caller's scale: inf only where the sum overflows.
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(big.count, ref.count * 2.0**1020)


def test_bootstrap_band_bins_resamples_in_blocks_of_bounded_size(data, monkeypatch):
    # A slab of resamples was binned at once: (rows, groups, n_bins) per array.
    from .test_metrics import spy_on_binned_blocks

    _, y, proba = data
    kwargs = dict(n_bins=40, n_bootstraps=50, random_state=0)
    whole = ReliabilityDisplay.from_predictions(y[:60], proba[:60], **kwargs)
    shapes = spy_on_binned_blocks(monkeypatch, 41 * 8)
    blocks = ReliabilityDisplay.from_predictions(y[:60], proba[:60], **kwargs)
    np.testing.assert_array_equal(blocks.accuracy_low, whole.accuracy_low)
    np.testing.assert_array_equal(blocks.accuracy_high, whole.accuracy_high)
    assert max(shape[0] for shape in shapes if len(shape) == 2) <= 8
