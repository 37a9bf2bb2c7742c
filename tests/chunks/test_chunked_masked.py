"""Masked logits (``-inf``) over chunks: the in-memory rules and results.

Token-level language-model data, the reason for fitting out of memory, always
masks vocabulary entries with ``-inf``. Every chunked fit, metric accumulator
and lazy prediction must accept them with the validation rules of the
in-memory path (tests/test_masked.py) and give the in-memory result on the
same data: the references below are the in-memory fits and metrics.
"""

import warnings

import numpy as np
import pytest

from sklearn_calib import (
    SMART,
    HistogramBinning,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.metrics import (
    BinnedCalibrationAccumulator,
    ProperScoreAccumulator,
    calibration_report,
    chunked_calibration_report,
)
from sklearn_calib.metrics._chunked import CHUNKED_METRICS
from sklearn_calib.utils._math import softmax

from ..test_masked import llm_like_masks
from .test_chunked import random_chunks, relative, toy_logits

# Vector scaling on masked toy data whose rare classes have no finite
# optimum, in memory and over chunks alike: the warning is asserted in
# test_affine_robustness.py; these tests compare the two fits.
_IGNORED = [
    "ignore:.*determine no finite scale:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


def masked_logits(n_samples, n_classes, *, seed, dtype=np.float64, dead=True):
    """LLM-like masks: a random 40% of the entries are -inf, never the label; a
    tenth of the rows keep only their label; with ``dead``, the last class is
    masked in every row (a vocabulary entry no calibration row allows)."""
    X, y = toy_logits(n_samples, n_classes, seed=seed, dtype=dtype)
    if dead:
        y[y == n_classes - 1] = 0
    masked = llm_like_masks(n_samples, n_classes, y, seed)
    if dead:
        masked[:, -1] = True
    X[masked] = -np.inf
    return X, y, masked


def weights_for(y, weighted, seed=1):
    return np.random.default_rng(seed).random(y.shape[0]) if weighted else None


def chunked(X, y, w=None, *, seed=0):
    """Random chunk sizes, an empty and a one-row chunk among them."""
    chunks = random_chunks(X, y, w, seed=seed)
    assert min(len(c[1]) for c in chunks) == 0
    assert 1 in {len(c[1]) for c in chunks}
    return chunks


def fit_quietly(estimator, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SMART's small-sample note
        return estimator.fit(*args, **kwargs)


def fit_chunks_quietly(estimator, chunks):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return estimator.fit_chunks(chunks)


# --- fits: the in-memory result ----------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_temperature_masked_chunks_equal_in_memory(dtype, weighted):
    X, y, _ = masked_logits(2000, 6, seed=0, dtype=dtype)
    w = weights_for(y, weighted)
    expected = TemperatureScaling(device="cpu").fit(X, y, sample_weight=w)
    fitted = TemperatureScaling(device="cpu").fit_chunks(chunked(X, y, w))
    assert np.isfinite(fitted.temperature_)
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10
    proba = fitted.predict_proba(X)
    assert np.all(proba[np.isneginf(X)] == 0)


def test_temperature_masked_from_dask_and_memmap(tmp_path):
    da = pytest.importorskip("dask.array")
    X, y, _ = masked_logits(1500, 5, seed=1)
    expected = TemperatureScaling(device="cpu").fit(X, y)
    lazy = da.from_array(X, chunks=(400, 5))
    fitted = TemperatureScaling(device="cpu").fit(lazy, da.from_array(y, chunks=400))
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10
    path = tmp_path / "logits.npy"
    np.save(path, X)
    mapped = np.load(path, mmap_mode="r")
    fitted = TemperatureScaling(device="cpu").fit(mapped, y)
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10


@pytest.mark.parametrize("weighted", [False, True])
def test_vector_scaling_masked_chunks_equal_in_memory(weighted):
    # A class masked in every row has a zero gradient and no curvature: it
    # keeps its start in both fits, the others solve the same problem.
    X, y, _ = masked_logits(2000, 6, seed=2)
    w = weights_for(y, weighted)
    params = {"device": "cpu", "tol": 1e-10}
    expected = VectorScaling(**params).fit(X, y, sample_weight=w)
    fitted = VectorScaling(**params).fit_chunks(chunked(X, y, w))
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-8)
    np.testing.assert_allclose(fitted.intercept_, expected.intercept_, atol=1e-8)
    proba = fitted.predict_proba(X)
    assert np.all(proba[np.isneginf(X)] == 0)
    np.testing.assert_allclose(proba, expected.predict_proba(X), atol=1e-9)


def test_vector_scaling_many_masked_classes_uses_lbfgs():
    X, y, _ = masked_logits(1500, 70, seed=3)
    expected = VectorScaling(device="cpu").fit(X, y)
    fitted = VectorScaling(device="cpu").fit_chunks(chunked(X, y))
    assert fitted.n_iter_ < 200
    proba = fitted.predict_proba(X)
    assert np.all(proba[np.isneginf(X)] == 0)
    np.testing.assert_allclose(proba, expected.predict_proba(X), atol=2e-5)


@pytest.mark.parametrize("smooth_targets", [True, False])
@pytest.mark.parametrize("columns", [1, 2])
def test_platt_masked_chunks_equal_in_memory(columns, smooth_targets):
    # Rows with a masked class have a fixed probability: both fits leave them
    # out of the solve and of Platt's counts.
    rng = np.random.default_rng(4)
    X, y = toy_logits(1500, 2, seed=4)
    masked = (rng.random(X.shape) < 0.15) & (np.arange(2) != y[:, None])
    X[masked] = -np.inf
    if columns == 1:
        X = (X[:, 1] - X[:, 0])[:, None]  # -inf: the positive class masked
        X[np.isposinf(X)] = 0.0  # a score column cannot mask class 0
        assert np.isneginf(X).any()
    w = weights_for(y, True)
    params = {"device": "cpu", "tol": 1e-10, "smooth_targets": smooth_targets}
    expected = PlattScaling(**params).fit(X, y, sample_weight=w)
    fitted = PlattScaling(**params).fit_chunks(chunked(X, y, w))
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-8)
    np.testing.assert_allclose(fitted.intercept_, expected.intercept_, atol=1e-8)
    proba = fitted.predict_proba(X)
    np.testing.assert_array_equal(proba == 0, expected.predict_proba(X) == 0)
    if columns == 1:
        masked = np.column_stack([np.zeros(len(y), bool), np.isneginf(X[:, 0])])
    assert np.all(proba[masked] == 0)


def test_platt_every_row_masked_is_the_in_memory_error():
    X, y = toy_logits(200, 2, seed=5)
    X[y == 0, 1] = -np.inf
    X[y == 1, 0] = -np.inf
    with pytest.raises(ValueError, match="needs samples with a finite score"):
        PlattScaling(device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="needs samples with a finite score"):
        PlattScaling(device="cpu").fit_chunks(chunked(X, y))


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("mode", ["ovr", "top_label"])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_binning_masked_chunks_equal_in_memory(strategy, mode, weighted):
    # One-vs-rest: class k's bins are fitted on the rows where k is open (a
    # class masked everywhere keeps equal-width bins at their mid-points).
    # Histogram binning accepts a masked true class, as in memory.
    X, y, masked = masked_logits(2000, 5, seed=6, dtype=np.float32)
    true_masked = np.flatnonzero((y != 0) & ~masked[:, 0])[:10]
    X[true_masked, y[true_masked]] = -np.inf
    w = weights_for(y, weighted)
    params = {"n_bins": 12, "strategy": strategy, "mode": mode}
    expected = HistogramBinning(**params).fit(X, y, sample_weight=w)
    fitted = HistogramBinning(**params).fit_chunks(chunked(X, y, w))
    np.testing.assert_array_equal(fitted.bin_edges_, expected.bin_edges_)
    np.testing.assert_allclose(fitted.bin_values_, expected.bin_values_, rtol=1e-12)
    np.testing.assert_allclose(fitted.bin_counts_, expected.bin_counts_, rtol=1e-12)
    assert np.all(fitted.predict_proba(X)[np.isneginf(X)] == 0)


@pytest.mark.parametrize("loss", ["charbonnier_soft_ece", "nll"])
def test_smart_masked_chunks(loss):
    X, y, masked = masked_logits(1500, 5, seed=7, dtype=np.float32)
    params = {"device": "cpu", "random_state": 0, "max_iter": 30, "loss": loss}
    expected = fit_quietly(SMART(**params), X, y)
    # One chunk: the full-batch fit itself.
    single = fit_chunks_quietly(SMART(**params), [(X, y)])
    for a, b in zip(single.coefs_, expected.coefs_, strict=True):
        np.testing.assert_array_equal(a, b)
    # Mini-batches: the margin standardisation is exact (rows with a single
    # open class stay out of it), the training finite.
    fitted = fit_chunks_quietly(SMART(**params), chunked(X, y))
    np.testing.assert_allclose(fitted.margin_mean_, expected.margin_mean_, rtol=1e-12)
    np.testing.assert_allclose(fitted.margin_std_, expected.margin_std_, rtol=1e-12)
    assert np.isfinite(fitted.best_loss_)
    proba = fitted.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.all(proba[masked] == 0)


# --- metrics and lazy prediction ---------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
def test_accumulators_update_logits_with_masks_equal_in_memory(weighted):
    X, y, _ = masked_logits(1500, 6, seed=8)
    w = weights_for(y, weighted)
    proba = softmax(X.copy())
    assert np.any(proba == 0)
    top = BinnedCalibrationAccumulator(n_bins=10)
    classwise = BinnedCalibrationAccumulator(n_bins=10, multiclass="classwise")
    proper = ProperScoreAccumulator()
    for chunk_X, chunk_y, chunk_w in chunked(X, y, w if weighted else np.ones(len(y))):
        for state in (top, classwise, proper):
            state.update_logits(chunk_y, chunk_X, chunk_w if weighted else None)
    exact_top = BinnedCalibrationAccumulator(n_bins=10).update(y, proba, w)
    exact_classwise = BinnedCalibrationAccumulator(
        n_bins=10, multiclass="classwise"
    ).update(y, proba, w)
    exact_proper = ProperScoreAccumulator().update(y, proba, w)
    for ours, theirs, names in [
        (top, exact_top, ["expected_calibration_error", "accuracy"]),
        (classwise, exact_classwise, ["classwise_calibration_error"]),
        (proper, exact_proper, ["log_loss", "brier_score"]),
    ]:
        for name in names:
            value = getattr(ours, name)()
            assert np.isfinite(value)
            np.testing.assert_allclose(value, getattr(theirs, name)(), rtol=1e-12)


@pytest.mark.parametrize("source", ["chunks", "dask"])
def test_chunked_report_with_masks_equals_in_memory_report(source):
    X, y, _ = masked_logits(1500, 6, seed=9)
    w = weights_for(y, True)
    metrics = list(CHUNKED_METRICS)
    if source == "dask":
        da = pytest.importorskip("dask.array")
        report = chunked_calibration_report(
            da.from_array(X, chunks=(350, 6)),
            da.from_array(y, chunks=350),
            sample_weight=da.from_array(w, chunks=350),
            metrics=metrics,
        )
    else:
        report = chunked_calibration_report(chunked(X, y, w), metrics=metrics)
    expected = calibration_report(
        y, softmax(X.copy()), metrics=metrics, sample_weight=w, as_frame=False
    )
    (expected,) = expected.values()
    for name in metrics:
        assert np.isfinite(report[name]), name
        np.testing.assert_allclose(report[name], expected[name], rtol=1e-12)


def test_lazy_predict_on_dask_with_masks():
    da = pytest.importorskip("dask.array")
    X, y, masked = masked_logits(1000, 5, seed=10, dtype=np.float32)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    lazy = da.from_array(X, chunks=(300, 5))
    proba = ts.predict_proba(lazy).compute()
    np.testing.assert_array_equal(proba, ts.predict_proba(X))
    assert np.all(proba[masked] == 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    log_proba = ts.transform(lazy).compute()
    assert np.all(np.isneginf(log_proba[masked]))
    assert not np.any(masked[np.arange(len(y)), ts.predict(lazy).compute()])


# --- errors: the in-memory rules, from chunks --------------------------------------

LIKELIHOOD_FITS = {
    "TemperatureScaling": lambda: TemperatureScaling(device="cpu"),
    "VectorScaling": lambda: VectorScaling(device="cpu"),
    "PlattScaling": lambda: PlattScaling(device="cpu"),
    "SMART-nll": lambda: SMART(device="cpu", loss="nll", max_iter=5),
}
ALL_FITS = {
    **LIKELIHOOD_FITS,
    "HistogramBinning": lambda: HistogramBinning(),
    "HistogramBinning-quantile": lambda: HistogramBinning(strategy="quantile"),
    "SMART": lambda: SMART(device="cpu", max_iter=5),
}


def _bad_chunks(name, value, where):
    n_classes = 2 if name == "PlattScaling" else 4
    X, y = toy_logits(300, n_classes, seed=11)
    X[y != 1, 1] = -np.inf  # valid masks everywhere else
    X[where] = value
    return [(X[:100], y[:100]), (X[100:250], y[100:250]), (X[250:], y[250:])]


@pytest.mark.parametrize("name", sorted(ALL_FITS))
@pytest.mark.parametrize(
    "value, match",
    [
        (np.nan, "contains NaN"),
        (np.inf, r"contains \+infinity"),
    ],
)
def test_nan_and_posinf_are_errors_from_chunks(name, value, match):
    chunks = _bad_chunks(name, value, (180, 0))
    with pytest.raises(ValueError, match=match):
        fit_chunks_quietly(ALL_FITS[name](), chunks)
    with pytest.raises(ValueError, match=match):
        chunked_calibration_report(chunks, metrics=["ece"])
    with pytest.raises(ValueError, match=match):
        ProperScoreAccumulator().update_logits(chunks[1][1], chunks[1][0])


@pytest.mark.parametrize("name", sorted(ALL_FITS))
def test_row_without_finite_logit_is_an_error_from_chunks(name):
    chunks = _bad_chunks(name, -np.inf, (270, slice(None)))
    # Row 270 is row 20 of the third chunk (the message said "row 20").
    with pytest.raises(ValueError, match=r"every logit is -inf \(row 20 of a chunk\)"):
        fit_chunks_quietly(ALL_FITS[name](), chunks)
    with pytest.raises(ValueError, match="every logit is -inf"):
        BinnedCalibrationAccumulator().update_logits(chunks[2][1], chunks[2][0])


@pytest.mark.parametrize("name", sorted(LIKELIHOOD_FITS))
def test_masked_true_class_is_an_error_from_chunks(name):
    chunks = _bad_chunks(name, 0.0, (0, 0))
    X, y = chunks[1]
    row = int(np.flatnonzero(y == 1)[3])
    X[row, 1] = -np.inf  # row 100 + row of the data: its label is masked
    data = (
        np.concatenate([c[0] for c in chunks]),
        np.concatenate([c[1] for c in chunks]),
    )
    # The in-memory fit refuses it; so does every chunked fit, naming the
    # chunk's row.
    with pytest.raises(ValueError, match="-inf.*masked"):
        fit_quietly(LIKELIHOOD_FITS[name](), *data)
    with pytest.raises(ValueError, match=rf"{row} (of a chunk )?.*-inf.*masked"):
        fit_chunks_quietly(LIKELIHOOD_FITS[name](), chunks)
