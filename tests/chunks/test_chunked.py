"""Fitting and predicting from data in chunks: dask, memmap, zarr, iterables.

The exact fits must reach the in-memory solution: temperature scaling to 1e-10
relative in T, vector and Platt scaling to the solver tolerance, histogram
binning bin for bin. SMART trains by mini-batches; with one chunk it is the
full-batch fit.
"""

import pickle
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from sklearn_calib import (
    SMART,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from sklearn_calib.chunked import apply_chunks, fits_from_chunks, open_chunks
from sklearn_calib.metrics import (
    chunked_calibration_report,
    expected_calibration_error,
    log_loss,
)
from sklearn_calib.utils._math import softmax

from ..conftest import load_shared

# Vector scaling on toy data whose rare classes have no finite optimum, in
# memory and over chunks alike: the warning is asserted in
# test_affine_robustness.py; these tests compare the two fits.
_IGNORED = [
    "ignore:.*determine no finite scale:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


def random_chunks(X, y, w=None, *, seed=0, n_cuts=8):
    """Chunks of random sizes, with an empty and a one-row chunk among them."""
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    cuts = np.sort(np.concatenate([[0, 0, 1], rng.integers(1, n, size=n_cuts), [n]]))
    out = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        out.append((X[a:b], y[a:b]) if w is None else (X[a:b], y[a:b], w[a:b]))
    return out


def toy_logits(n_samples=3000, n_classes=4, *, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_samples)
    X = 3.0 * np.eye(n_classes)[y] + rng.normal(scale=2.0, size=(n_samples, n_classes))
    return X.astype(dtype), y


def relative(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


# --- temperature scaling: exact ---


@pytest.mark.parametrize(
    "name",
    [
        "c10_resnet50_cross_entropy_smart",
        "c100_densenetbc100_netcal",
        "imdb_fasttext_labelerrors",
        "beans_hgb_trained_here",
    ],
)
def test_temperature_from_chunks_equals_in_memory(name):
    data = load_shared(name)
    # val + test: more rows than the warm start's threshold (4 * 2048)
    X = np.concatenate([data["logits_val"], data["logits_test"]])
    y = np.concatenate([data["y_val"], data["y_test"]])
    expected = TemperatureScaling(device="cpu").fit(X, y).temperature_
    fitted = TemperatureScaling(device="cpu").fit_chunks(random_chunks(X, y))
    assert relative(fitted.temperature_, expected) <= 1e-10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_temperature_weighted_and_float64(dtype):
    X, y = toy_logits(n_samples=9000, dtype=dtype)
    w = np.random.default_rng(1).random(X.shape[0])
    expected = TemperatureScaling(device="cpu").fit(X, y, sample_weight=w)
    fitted = TemperatureScaling(device="cpu").fit_chunks(random_chunks(X, y, w))
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10
    np.testing.assert_array_equal(fitted.classes_, expected.classes_)
    assert fitted.n_features_in_ == 4


def test_temperature_from_dask_memmap_and_zarr(tmp_path):
    da = pytest.importorskip("dask.array")
    data = load_shared("c10_densenet40_guo")
    X, y = data["logits_val"], data["y_val"]
    expected = TemperatureScaling(device="cpu").fit(X, y).temperature_
    dask_fit = TemperatureScaling(device="cpu").fit(da.from_array(X, chunks=700), y)
    assert relative(dask_fit.temperature_, expected) <= 1e-10
    np.save(tmp_path / "logits.npy", X)
    mapped = np.load(tmp_path / "logits.npy", mmap_mode="r")
    memmap_fit = TemperatureScaling(device="cpu").fit(mapped, y)
    assert relative(memmap_fit.temperature_, expected) <= 1e-10
    zarr = pytest.importorskip("zarr")
    stored = zarr.create_array(
        str(tmp_path / "x.zarr"), shape=X.shape, chunks=(512, 10), dtype=X.dtype
    )
    stored[:] = X
    zarr_fit = TemperatureScaling(device="cpu").fit(stored, y)
    assert relative(zarr_fit.temperature_, expected) <= 1e-10


def test_temperature_at_a_bound_warns_as_in_memory():
    # Every sample correct and separable: T -> 0, clamped with a warning.
    y = np.arange(200) % 3
    X = 5.0 * np.eye(3)[y]
    with pytest.warns(UserWarning, match="T -> 0"):
        expected = TemperatureScaling(device="cpu").fit(X, y)
    with pytest.warns(UserWarning, match="T -> 0"):
        fitted = TemperatureScaling(device="cpu").fit_chunks(random_chunks(X, y))
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10


# --- vector and Platt scaling: the same optimum ---


def vector_nll(estimator, X, y):
    return log_loss(y, estimator.predict_proba(X.astype(np.float64)))


@pytest.mark.parametrize(
    "name", ["c10_resnet50_cross_entropy_smart", "c10_lenet5_netcal"]
)
def test_vector_scaling_from_chunks(name):
    data = load_shared(name)
    X, y = data["logits_val"], data["y_val"]
    params = {"device": "cpu", "tol": 1e-10}
    expected = VectorScaling(**params).fit(X, y)
    fitted = VectorScaling(**params).fit_chunks(random_chunks(X, y))
    # Both stop at a gradient below 1e-10: the solutions agree to ~1e-8.
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-6)
    np.testing.assert_allclose(fitted.intercept_, expected.intercept_, atol=1e-6)
    assert abs(fitted.intercept_.sum()) < 1e-10


def test_vector_scaling_separable_class_is_frozen_as_in_memory():
    # Class 2 of this set is separated perfectly: the NLL keeps falling along a
    # ray. Both fits find it (in memory on the rows, over chunks from one pass
    # of per-class extremes), keep it at the temperature map with the same
    # warning, and solve the other classes with the same solver.
    data = load_shared("beans_mlp_trained_here")
    X, y = data["logits_val"], data["y_val"]
    with pytest.warns(UserWarning, match="1 of the 7 classes"):
        expected = VectorScaling(device="cpu", tol=1e-10).fit(X, y)
    with pytest.warns(UserWarning, match="1 of the 7 classes"):
        fitted = VectorScaling(device="cpu", tol=1e-10).fit_chunks(random_chunks(X, y))
    assert abs(vector_nll(expected, X, y) - vector_nll(fitted, X, y)) < 1e-9
    # 2.4e-7 measured (float32 probabilities).
    np.testing.assert_allclose(
        fitted.predict_proba(X), expected.predict_proba(X), atol=2e-6
    )


def test_vector_scaling_from_chunks_counts_the_start_when_every_class_is_frozen():
    # Every class separated: no solve, and n_iter_ is documented as the
    # temperature start's iterations (as in memory); over chunks it was 0.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, size=200)
    X = 5.0 * np.eye(4)[y] + rng.normal(scale=0.3, size=(200, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        start = TemperatureScaling(device="cpu").fit_chunks(random_chunks(X, y))
        fitted = VectorScaling(device="cpu").fit_chunks(random_chunks(X, y))
        in_memory = VectorScaling(device="cpu").fit(X, y)
    np.testing.assert_array_equal(fitted.coef_, np.full(4, 1 / start.temperature_))
    assert fitted.n_iter_ == start.n_iter_ > 0
    assert in_memory.n_iter_ > 0


def test_vector_scaling_many_classes_uses_lbfgs():
    data = load_shared("c100_resnet20_chenyaofo")
    X, y = data["logits_val"][:2000], data["y_val"][:2000]
    expected = VectorScaling(device="cpu").fit(X, y)
    fitted = VectorScaling(device="cpu").fit_chunks(random_chunks(X, y, n_cuts=3))
    # 200 parameters: the in-memory L-BFGS, preconditioned by the per-class
    # Hessian blocks; 23 iterations both ways (measured).
    assert fitted.n_iter_ <= expected.n_iter_ + 5
    np.testing.assert_allclose(
        fitted.predict_proba(X), expected.predict_proba(X), atol=2e-5
    )


@pytest.mark.parametrize("smooth_targets", [True, False])
def test_platt_from_chunks(smooth_targets):
    data = load_shared("imdb_fasttext_labelerrors")
    X, y = data["logits_val"], data["y_val"]
    w = np.random.default_rng(2).random(y.shape[0])
    params = {"device": "cpu", "tol": 1e-10, "smooth_targets": smooth_targets}
    expected = PlattScaling(**params).fit(X, y, sample_weight=w)
    fitted = PlattScaling(**params).fit_chunks(random_chunks(X, y, w))
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-8)
    np.testing.assert_allclose(fitted.intercept_, expected.intercept_, atol=1e-8)


def test_platt_single_score_column_and_multiclass_error():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, size=800)
    score = (3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=800))[:, None]
    expected = PlattScaling(device="cpu", tol=1e-10).fit(score, y)
    fitted = PlattScaling(device="cpu", tol=1e-10).fit_chunks(random_chunks(score, y))
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-8)
    X, y3 = toy_logits(n_samples=100, n_classes=3)
    with pytest.raises(ValueError, match="Only binary"):
        PlattScaling(device="cpu").fit_chunks([(X, y3)])


# --- histogram binning: the same bins ---


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("mode", ["ovr", "top_label"])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_binning_from_chunks(strategy, mode, weighted):
    X, y = toy_logits(n_samples=2000, seed=4, dtype=np.float32)
    w = np.random.default_rng(5).integers(0, 3, size=2000) * 1.0 if weighted else None
    params = {"n_bins": 12, "strategy": strategy, "mode": mode}
    expected = HistogramBinning(**params).fit(X, y, sample_weight=w)
    fitted = HistogramBinning(**params).fit_chunks(random_chunks(X, y, w))
    np.testing.assert_array_equal(fitted.bin_edges_, expected.bin_edges_)
    np.testing.assert_allclose(fitted.bin_values_, expected.bin_values_, rtol=1e-12)
    np.testing.assert_allclose(fitted.bin_counts_, expected.bin_counts_, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_histogram_top_label_from_chunks_counts_tied_tops_as_in_memory(strategy):
    # A row whose top ties between t columns counts 1 / t correct when the
    # label is among them (HistogramBinning's fit); the chunks' bin sums
    # counted the first tied column's correctness.
    X, y = toy_logits(n_samples=2000, seed=4)
    rng = np.random.default_rng(6)
    rows = np.flatnonzero(rng.random(2000) < 0.3)
    top = X[rows].argmax(axis=1)
    X[rows, (top + 1 + rng.integers(0, 3, rows.size)) % 4] = X[rows, top]
    params = {"n_bins": 12, "strategy": strategy, "mode": "top_label"}
    expected = HistogramBinning(**params).fit(X, y)
    fitted = HistogramBinning(**params).fit_chunks(random_chunks(X, y))
    np.testing.assert_array_equal(fitted.bin_edges_, expected.bin_edges_)
    np.testing.assert_allclose(fitted.bin_values_, expected.bin_values_, rtol=1e-12)
    np.testing.assert_allclose(fitted.bin_counts_, expected.bin_counts_, rtol=1e-12)


@pytest.mark.parametrize("mode", ["ovr", "top_label"])
def test_histogram_quantile_from_chunks_in_any_column_order(mode):
    # Integer logits: rows holding the same logits in another order have the
    # same probabilities, which the column-order softmax sums set an ulp
    # apart. The bins in memory and from chunks are those of the sorted
    # sums, whatever the order of the classes.
    rng = np.random.default_rng(3)
    X = rng.integers(-3, 4, size=(3000, 5)) * 0.37
    y = rng.integers(0, 5, size=3000)
    w = rng.integers(0, 3, size=3000) * 1.0
    order = np.array([2, 0, 4, 3, 1])
    params = {"n_bins": 13, "strategy": "quantile", "mode": mode}
    expected = HistogramBinning(**params).fit(X, y, sample_weight=w)
    fitted = HistogramBinning(**params).fit_chunks(random_chunks(X, y, w))
    permuted = HistogramBinning(**params).fit_chunks(
        random_chunks(X[:, order], np.argsort(order)[y], w)
    )
    maps = order if mode == "ovr" else [0]
    for other, at in ((fitted, slice(None)), (permuted, maps)):
        np.testing.assert_array_equal(other.bin_edges_, expected.bin_edges_[at])
        np.testing.assert_allclose(
            other.bin_values_, expected.bin_values_[at], rtol=1e-12
        )
        np.testing.assert_allclose(
            other.bin_counts_, expected.bin_counts_[at], rtol=1e-12
        )


# --- SMART: mini-batches ---


def test_smart_single_chunk_is_the_full_batch_fit():
    X, y = toy_logits(n_samples=1500, n_classes=3, seed=6, dtype=np.float32)
    params = {"device": "cpu", "random_state": 0, "max_iter": 50}
    expected = SMART(**params).fit(X, y)
    fitted = SMART(**params).fit_chunks([(X, y)])
    for a, b in zip(fitted.coefs_, expected.coefs_, strict=True):
        np.testing.assert_array_equal(a, b)
    assert fitted.best_loss_ == expected.best_loss_


def test_smart_mini_batches_calibrate_real_logits():
    data = load_shared("c10_resnet50_cross_entropy_smart")
    X, y = data["logits_val"], data["y_val"]
    X_test, y_test = data["logits_test"], data["y_test"]
    chunks = [(X[i : i + 2500], y[i : i + 2500]) for i in range(0, 5000, 2500)]
    smart = SMART(device="cpu", random_state=0, max_iter=200).fit_chunks(chunks)
    raw = expected_calibration_error(y_test, softmax(X_test.copy()))
    calibrated = expected_calibration_error(y_test, smart.predict_proba(X_test))
    assert calibrated < raw / 2
    assert smart.n_iter_ == 200 and smart.loss_curve_.shape == (200,)
    assert np.isfinite(smart.best_loss_) and smart.margin_std_ > 0
    # The margin statistics are exact: the weighted mean and population std.
    top2 = np.sort(X, axis=1)[:, -2:].astype(np.float64)
    margins = top2[:, 1] - top2[:, 0]
    np.testing.assert_allclose(smart.margin_mean_, margins.mean(), rtol=1e-12)
    np.testing.assert_allclose(smart.margin_std_, margins.std(), rtol=1e-12)


def test_smart_chunked_margin_statistics_of_huge_margins_are_finite():
    # margins near 1e200 square beyond float64: the chunked standard deviation
    # was inf (in memory 1.3e200), a state the fitted-state check refuses
    X, y = toy_logits(n_samples=400, n_classes=3, seed=10)
    X = X * 1e200
    params = {"device": "cpu", "random_state": 0, "max_iter": 5}
    chunks = [(X[i : i + 100], y[i : i + 100]) for i in range(0, 400, 100)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-sample advice
        expected = SMART(**params).fit(X, y)
        fitted = SMART(**params).fit_chunks(chunks)
    assert fitted.margin_std_ == pytest.approx(expected.margin_std_, rel=1e-12)
    assert fitted.margin_mean_ == pytest.approx(expected.margin_mean_, rel=1e-12)
    pickle.loads(pickle.dumps(fitted))


# --- prediction on dask arrays ---


def test_predict_on_dask_arrays_is_lazy_and_equal():
    da = pytest.importorskip("dask.array")
    X, y = toy_logits(n_samples=1000, seed=7, dtype=np.float32)
    names = np.array(["a", "b", "c", "d"])
    ts = TemperatureScaling(device="cpu").fit(X, names[y])
    lazy = da.from_array(X, chunks=(300, 2))
    proba = ts.predict_proba(lazy)
    assert isinstance(proba, da.Array) and proba.chunks[0] == lazy.chunks[0]
    np.testing.assert_array_equal(proba.compute(), ts.predict_proba(X))
    assert proba.dtype == np.float32
    np.testing.assert_array_equal(ts.transform(lazy).compute(), ts.transform(X))
    np.testing.assert_array_equal(ts.predict(lazy).compute(), ts.predict(X))
    with pytest.raises(ValueError, match="expecting 4 features"):
        ts.predict_proba(lazy[:, :3])


def test_predict_on_dask_arrays_refuses_unfitted_and_3d():
    # The numpy path's errors: NotFittedError (the graph was built from the
    # missing classes_: an AttributeError), and a ValueError naming the
    # dimensions (dask's own, about chunks, before).
    da = pytest.importorskip("dask.array")
    X, y = toy_logits(n_samples=100, seed=7)
    lazy = da.from_array(X, chunks=(30, 4))
    for method in ("predict_proba", "transform", "predict"):
        with pytest.raises(NotFittedError):
            getattr(TemperatureScaling(device="cpu"), method)(lazy)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="2-D array of logits; got 3 dimensions"):
        ts.predict_proba(lazy[:, :, None])


def test_dask_dataframes_are_read_as_array_likes():
    # A dask DataFrame or Series is a dask collection but not an array: it
    # went down the dask-array paths and failed inside dask ("no attribute
    # 'rechunk'", a lazy scalar in a boolean test). Read like a pandas frame,
    # computed, as scikit-learn and the metrics read it.
    pytest.importorskip("dask.array")
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X, y = toy_logits(n_samples=200, seed=7)
    frame = pd.DataFrame(X, columns=list("abcd"))
    lazy = dd.from_pandas(frame, npartitions=3)
    labels = dd.from_pandas(pd.Series(y), npartitions=2)
    for cls in (TemperatureScaling, IsotonicCalibration):
        expected = cls().fit(X, y).predict_proba(X)
        fitted = cls().fit(lazy, labels)
        np.testing.assert_allclose(fitted.predict_proba(lazy), expected, atol=1e-12)
        np.testing.assert_allclose(fitted.predict_proba(X), expected, atol=1e-12)


# --- inputs and errors ---


def test_string_labels_and_classes_missing_from_chunks():
    X, y = toy_logits(n_samples=600, n_classes=3, seed=8)
    names = np.array(["ant", "bee", "cow"])[y]
    order = np.argsort(y, kind="stable")  # each chunk sees one or two classes
    chunks = [(X[order][i : i + 200], names[order][i : i + 200]) for i in (0, 200, 400)]
    fitted = TemperatureScaling(device="cpu").fit_chunks(chunks)
    expected = TemperatureScaling(device="cpu").fit(X, names)
    np.testing.assert_array_equal(fitted.classes_, ["ant", "bee", "cow"])
    assert relative(fitted.temperature_, expected.temperature_) <= 1e-10


@pytest.mark.parametrize(
    "cls, classes",
    [
        (TemperatureScaling, np.arange(6)),  # 0-based, label 0 absent
        (VectorScaling, np.arange(1, 7)),  # 1-based, the last label absent
        (HistogramBinning, np.array(["f", "e", "d", "c", "b", "a"])),  # unsorted
    ],
)
def test_classes_parameter_states_the_columns_from_chunks(cls, classes):
    # The labels cannot say which column is which (the first or last class is
    # absent): classes= says it, from chunks as in memory.
    X, y = toy_logits(n_samples=900, n_classes=6, seed=9)
    keep = y != (0 if classes[0] == 0 else 5)
    X, labels = X[keep], classes[y[keep]]
    with pytest.raises(ValueError, match="ambiguous|classes="):
        if classes.dtype.kind != "U":
            cls(device="cpu").fit_chunks(random_chunks(X, labels))
        else:
            raise ValueError("string labels lacking a class: classes= needed")
    params = {"device": "cpu"} if "device" in cls().get_params() else {}
    fitted = cls(classes=classes, **params).fit_chunks(random_chunks(X, labels))
    expected = cls(classes=classes, **params).fit(X, labels)
    np.testing.assert_array_equal(fitted.classes_, classes)
    # Vector scaling's absent class keeps its temperature-scaling odds against
    # the mean class in both fits (the bias mean is held): they agree to the
    # solvers' tolerance.
    rtol = 1e-5 if cls is VectorScaling else 1e-9
    np.testing.assert_allclose(
        fitted.predict_proba(X), expected.predict_proba(X), rtol=rtol, atol=1e-9
    )


def test_vector_scaling_from_chunks_freezes_classes_as_in_memory():
    # Many classes, few samples (a vocabulary): most classes are absent or
    # separated by their own logit. The chunked fit finds the same classes,
    # keeps them at the temperature map with the same warning, and gives the
    # in-memory probabilities instead of following their rays.
    rng = np.random.default_rng(4)
    n, k = 300, 200
    y = rng.integers(0, k, size=n)
    X = rng.normal(size=(n, k))
    X[np.arange(n), y] += 3.0
    params = {"device": "cpu", "classes": np.arange(k)}
    with pytest.warns(UserWarning, match="no finite scale and bias") as memory:
        expected = VectorScaling(**params).fit(X, y)
    with pytest.warns(UserWarning, match="no finite scale and bias") as chunks:
        fitted = VectorScaling(**params).fit_chunks(random_chunks(X, y))
    counts = [
        re.search(r"\((\d+) have no .*?, (\d+) are", str(w[0].message))
        for w in (memory, chunks)
    ]
    assert counts[0].groups() == counts[1].groups()
    assert int(counts[0].group(1)) > 0 and int(counts[0].group(2)) > 0
    np.testing.assert_allclose(
        fitted.predict_proba(X), expected.predict_proba(X), atol=1e-4
    )


def test_chunk_errors():
    X, y = toy_logits(n_samples=100)
    with pytest.raises(TypeError, match="one-shot iterator"):
        TemperatureScaling(device="cpu").fit_chunks(iter([(X, y)]))
    with pytest.raises(TypeError, match="cannot be fitted from chunks"):
        MatrixScaling(device="cpu").fit_chunks([(X, y)])
    with pytest.raises(TypeError, match="cannot be fitted from chunks"):
        IsotonicCalibration().fit_chunks([(X, y)])
    with pytest.raises(ValueError, match="different numbers of logit columns"):
        TemperatureScaling(device="cpu").fit_chunks([(X, y), (X[:, :3], y)])
    bad = X.copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        TemperatureScaling(device="cpu").fit_chunks([(X, y), (bad, y)])
    with pytest.raises(ValueError, match="zero for every sample"):
        TemperatureScaling(device="cpu").fit_chunks([(X, y, np.zeros(100))])
    with pytest.raises(ValueError, match="at least 2 classes"):
        TemperatureScaling(device="cpu").fit_chunks([(X, np.zeros(100, int))])
    with pytest.raises(ValueError, match="0 sample"):
        TemperatureScaling(device="cpu").fit_chunks([(X[:0], y[:0])])


def test_a_chunked_fit_that_raises_leaves_no_fitted_state():
    # The first pass succeeds (three classes, three columns); PlattScaling's
    # own fit then refuses a multiclass problem. Nothing may look fitted.
    X, y = toy_logits(n_samples=100, n_classes=3)
    platt = PlattScaling(device="cpu")
    with pytest.raises(ValueError, match="Only binary"):
        platt.fit_chunks([(X[:50], y[:50]), (X[50:], y[50:])])
    for attribute in ("classes_", "n_features_in_", "coef_", "intercept_"):
        assert not hasattr(platt, attribute)
    with pytest.raises(NotFittedError):
        check_is_fitted(platt)
    # The same in memory: n_features_in_ is set last there too.
    with pytest.raises(ValueError, match="Only binary"):
        platt.fit(X, y)
    with pytest.raises(NotFittedError):
        check_is_fitted(platt)


def test_fits_from_chunks_names_the_calibrators_with_a_chunked_fit():
    from sklearn_calib.utils.discovery import all_calibrators

    streaming = {name for name, cls in all_calibrators() if fits_from_chunks(cls())}
    assert streaming == {
        "HistogramBinning",
        "PlattScaling",
        "SMART",
        "TemperatureScaling",
        "VectorScaling",
    }
    X, y = toy_logits(n_samples=100, n_classes=3)
    for name, cls in all_calibrators():
        if name not in streaming:
            with pytest.raises(TypeError, match="cannot be fitted from chunks"):
                cls().fit_chunks([(X, y)])


def test_unsupported_calibrators_read_a_memmap_into_memory(tmp_path):
    X, y = toy_logits(n_samples=300, n_classes=3, seed=9)
    np.save(tmp_path / "x.npy", X)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    fitted = MatrixScaling(device="cpu").fit(mapped, y)
    expected = MatrixScaling(device="cpu").fit(X, y)
    np.testing.assert_array_equal(fitted.coef_, expected.coef_)


# --- open_chunks ---


def test_open_chunks_layouts(tmp_path):
    X, y = toy_logits(n_samples=1000, seed=10, dtype=np.float32)
    w = np.random.default_rng(11).random(1000)
    expected = TemperatureScaling(device="cpu").fit(X, y, sample_weight=w)

    npz = tmp_path / "npz"
    npz.mkdir()
    for i, (a, b) in enumerate([(0, 300), (300, 301), (301, 1000)]):
        np.savez(
            npz / f"part{i:02d}.npz", logits=X[a:b], y=y[a:b], sample_weight=w[a:b]
        )
    big = tmp_path / "npy"
    big.mkdir()
    np.save(big / "logits.npy", X)
    np.save(big / "y.npy", y)
    np.save(big / "sample_weight.npy", w)
    numbered = tmp_path / "numbered"
    numbered.mkdir()
    for i, (a, b) in enumerate([(0, 500), (500, 1000)]):
        np.save(numbered / f"logits_{i}.npy", X[a:b])
        np.save(numbered / f"y_{i}.npy", y[a:b])
        np.save(numbered / f"sample_weight_{i}.npy", w[a:b])
    for folder, n_chunks, chunk_rows in (
        (npz, 3, None),
        (big, 4, 256),
        (numbered, 2, None),
    ):
        data = open_chunks(folder, chunk_rows=chunk_rows)
        assert data.n_samples == 1000 and data.n_chunks == n_chunks
        assert data.n_cols == 4 and data.dtype == np.float32 and data.weighted
        stacked = np.concatenate([chunk[0] for chunk in data])
        np.testing.assert_array_equal(stacked, X)
        fitted = TemperatureScaling(device="cpu").fit_chunks(data)
        assert relative(fitted.temperature_, expected.temperature_) <= 1e-10


def test_open_chunks_logits_alone(tmp_path):
    """y_key=None reads unlabelled logits: arrays, for apply_chunks."""
    X, y = toy_logits(n_samples=600, seed=13)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    npz = tmp_path / "npz"
    npz.mkdir()
    for i, (a, b) in enumerate([(0, 250), (250, 251), (251, 600)]):
        np.savez(npz / f"part{i}.npz", logits=X[a:b])  # no labels at all
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "logits.npy", X)
    np.save(npy / "y.npy", y)  # present, but not read
    for folder in (npz, npy):
        data = open_chunks(folder, y_key=None, chunk_rows=200)
        chunks = list(data)
        assert all(isinstance(c, np.ndarray) for c in chunks)
        np.testing.assert_array_equal(np.concatenate(chunks), X)
        assert not data.weighted and data.to_dask()[1] is None
        out = apply_chunks(ts, data, tmp_path / f"{folder.name}.npy")
        np.testing.assert_allclose(np.load(out), ts.predict_proba(X), rtol=1e-12)
    with pytest.raises(KeyError, match="no array 'y'"):
        open_chunks(npz)  # labels are needed unless y_key=None


def test_open_chunks_dask_and_zarr(tmp_path):
    pytest.importorskip("dask.array")
    zarr = pytest.importorskip("zarr")
    X, y = toy_logits(n_samples=1200, seed=12, dtype=np.float32)
    group = zarr.open_group(str(tmp_path / "store.zarr"), mode="w")
    group.create_array("logits", shape=X.shape, chunks=(250, 4), dtype=X.dtype)[:] = X
    group.create_array("y", shape=y.shape, chunks=(250,), dtype=y.dtype)[:] = y
    data = open_chunks(tmp_path / "store.zarr")
    assert data.n_chunks == 5 and not data.weighted
    dask_X, dask_y, dask_w = data.to_dask()
    assert dask_w is None
    np.testing.assert_array_equal(dask_X.compute(), X)
    report = chunked_calibration_report(data, metrics=["ece", "nll"])
    proba = softmax(X.copy())
    np.testing.assert_allclose(
        report["ece"], expected_calibration_error(y, proba), rtol=1e-12
    )
    np.testing.assert_allclose(report["nll"], log_loss(y, proba), rtol=1e-12)


def test_open_chunks_refuses_objects_and_bad_layouts(tmp_path):
    folder = tmp_path / "objects"
    folder.mkdir()
    np.save(
        folder / "logits.npy", np.array([[1.0, "a"]], dtype=object), allow_pickle=True
    )
    np.save(folder / "y.npy", np.array([0]))
    with pytest.raises(ValueError, match="never loaded"):
        open_chunks(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="found no"):
        open_chunks(empty)
    with pytest.raises(FileNotFoundError):
        open_chunks(tmp_path / "missing")
    npz = tmp_path / "keys"
    npz.mkdir()
    np.savez(npz / "a.npz", X=np.zeros((2, 2)), target=np.zeros(2))
    with pytest.raises(KeyError, match="logits_key"):
        open_chunks(npz)
    data = open_chunks(npz, logits_key="X", y_key="target")
    assert data.n_samples == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(data)) == 1


def test_everything_but_dask_arrays_works_without_dask(tmp_path):
    # A fresh interpreter in which dask cannot be imported (histogram binning:
    # no torch either, so the interpreter starts fast).
    code = """
import sys
sys.modules["dask"] = None
sys.modules["distributed"] = None
import numpy as np
from sklearn_calib import HistogramBinning
from sklearn_calib.metrics import chunked_calibration_report
rng = np.random.default_rng(0)
y = rng.integers(0, 3, size=900)
X = 3 * np.eye(3)[y] + rng.normal(size=(900, 3))
np.save(sys.argv[1], X)
mapped = np.load(sys.argv[1], mmap_mode="r")
chunks = [(X[:400], y[:400]), (X[400:], y[400:])]
expected = HistogramBinning(strategy="quantile").fit(X, y).bin_values_
for fitted in (
    HistogramBinning(strategy="quantile").fit_chunks(chunks),
    HistogramBinning(strategy="quantile").fit(mapped, y),
):
    np.testing.assert_allclose(fitted.bin_values_, expected, rtol=1e-12)
report = chunked_calibration_report(chunks, metrics=["ece", "adaptive_ece"])
assert not [m for m in sys.modules if m.startswith("dask") and sys.modules[m]]
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.npy")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_apply_chunks_and_progress(tmp_path):
    X, y = toy_logits(n_samples=700, n_classes=3, seed=13, dtype=np.float32)
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, (a, b) in enumerate([(0, 0), (0, 300), (300, 700)]):
        np.savez(folder / f"p{i}.npz", logits=X[a:b], y=y[a:b])
    seen = []
    data = open_chunks(folder, progress=lambda done, total: seen.append((done, total)))
    ts = TemperatureScaling(device="cpu").fit(X, y)
    out = apply_chunks(ts, data, tmp_path / "proba.npy")
    np.testing.assert_array_equal(np.load(out), ts.predict_proba(X))
    assert seen == [(1, 3), (2, 3), (3, 3)]
    # A plain list of arrays, the labels and the log-probabilities.
    labels = apply_chunks(ts, [X[:10], X[10:]], tmp_path / "y.npy", method="predict")
    np.testing.assert_array_equal(np.load(labels), ts.predict(X))
    with pytest.raises(ValueError, match="method must be"):
        apply_chunks(ts, [X], tmp_path / "z.npy", method="fit")


def test_smart_streamed_and_cached_chunks_take_the_same_steps(monkeypatch):
    da = pytest.importorskip("dask.array")
    import sklearn_calib._margin.smart as smart_module

    X, y = toy_logits(n_samples=3000, n_classes=5, seed=14, dtype=np.float64)
    X_dask = da.from_array(X, chunks=(1000, 5))
    params = {"device": "cpu", "random_state": 3, "max_iter": 60}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few samples
        cached = SMART(**params).fit(X_dask, y)
        # Data too large to keep: every step reads its chunk again.
        monkeypatch.setattr(smart_module, "_SMART_CACHE_BYTES", 0)
        streamed = SMART(**params).fit(X_dask, y)
    np.testing.assert_allclose(streamed.loss_curve_, cached.loss_curve_, rtol=1e-12)
    for a, b in zip(streamed.coefs_, cached.coefs_, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert streamed.best_loss_ == pytest.approx(cached.best_loss_, rel=1e-12)


def test_smart_chunked_fit_warns_when_the_loss_stops_being_finite():
    # as the in-memory fit does: a step of lr=1e300 sends the float32 work
    # copy of the parameters to inf, and every later loss is NaN (silent)
    from sklearn.exceptions import ConvergenceWarning

    X, y = toy_logits(n_samples=1200, n_classes=3, seed=12, dtype=np.float32)
    chunks = [(X[i : i + 400], y[i : i + 400]) for i in range(0, 1200, 400)]
    smart = SMART(device="cpu", random_state=0, max_iter=30, lr=1e300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        smart.fit_chunks(chunks)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("NaN or infinite at step 1 of 30" in m for m in messages)
    assert not np.all(np.isfinite(smart.loss_curve_))
    assert np.isfinite(smart.best_loss_)
    assert np.all(np.isfinite(smart.predict_proba(X)))


def test_smart_iterable_chunks_take_their_own_order_cached_or_streamed(monkeypatch):
    # The docstring's "iterables in their own order": the cached path (data
    # under 256 MiB) shuffled a list's chunks each epoch, the streamed path
    # did not, so the fit depended on the data's size (probabilities 5.5e-3
    # apart here). A chunk of zero weights is skipped in its place by both.
    import sklearn_calib._margin.smart as smart_module

    X, y = toy_logits(n_samples=3000, n_classes=5, seed=14, dtype=np.float64)
    weights = np.ones(3000)
    weights[1000:1500] = 0.0
    chunks = [
        (X[i : i + 500], y[i : i + 500], weights[i : i + 500])
        for i in range(0, 3000, 500)
    ]
    params = {"device": "cpu", "random_state": 3, "max_iter": 60}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few samples
        cached = SMART(**params).fit_chunks(chunks)
        monkeypatch.setattr(smart_module, "_SMART_CACHE_BYTES", 0)
        streamed = SMART(**params).fit_chunks(chunks)
    np.testing.assert_allclose(streamed.loss_curve_, cached.loss_curve_, rtol=1e-12)
    for a, b in zip(streamed.coefs_, cached.coefs_, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_reduction_graph_is_linear_in_the_number_of_chunks():
    # A dask array concatenated from one from_delayed array per chunk has a
    # graph layer per chunk. Wrapping each chunk's task in its own
    # dask.delayed call copied that layer table into every task's graph:
    # memory quadratic in the number of chunks (about 1 GB of graph for the
    # 2,385 chunks of 10^7 x 1000 float32 logits).
    import tracemalloc
    from operator import add

    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    from sklearn_calib._chunks.sources import DaskSource

    n_chunks = 400
    blocks = [
        da.from_delayed(
            dask.delayed(np.full)((2, 3), float(i)), shape=(2, 3), dtype=np.float64
        )
        for i in range(n_chunks)
    ]
    X = da.concatenate(blocks)
    y = da.zeros(2 * n_chunks, chunks=2, dtype=np.int64)
    source = DaskSource(X, y)
    inputs = set(source.X.dask.layers) | set(source.y.dask.layers)
    tracemalloc.start()
    try:
        root = source._reduction(lambda X, y, w: X.sum(), add)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One layer added to the inputs' layers, whatever the number of chunks,
    # and a graph of a few bytes per chunk (the per-chunk delayed calls took
    # 23 MB here).
    assert set(root.dask.layers) - inputs == {root._layer}
    assert peak < 2**21
    assert root.compute() == 6 * sum(range(n_chunks))


def test_chunked_dataset_to_dask_is_one_layer_per_array(tmp_path):
    pytest.importorskip("dask.array")
    X, y = toy_logits(n_samples=700, seed=13)
    w = np.random.default_rng(13).random(700)
    folder = tmp_path / "npz"
    folder.mkdir()
    cuts = [0, 100, 101, 350, 700]
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        # float32 and float64 chunks: promoted to float64, as numpy would.
        dtype = np.float32 if i % 2 else np.float64
        np.savez(
            folder / f"part{i}.npz", logits=X[a:b].astype(dtype), y=y[a:b], w=w[a:b]
        )
    data = open_chunks(folder, weight_key="w")
    dask_X, dask_y, dask_w = data.to_dask()
    for array, expected in ((dask_X, X), (dask_y, y), (dask_w, w)):
        assert len(array.dask.layers) == 1
        assert array.chunks[0] == (100, 1, 249, 350)
        assert array.dtype == expected.dtype
    expected_X = np.concatenate([c[0] for c in data])
    np.testing.assert_array_equal(dask_X.compute(), expected_X)
    np.testing.assert_array_equal(dask_y.compute(), y)
    np.testing.assert_array_equal(dask_w.compute(), w)
    report = chunked_calibration_report(data, metrics=["ece"])
    np.testing.assert_allclose(
        report["ece"],
        expected_calibration_error(y, softmax(expected_X.copy()), sample_weight=w),
        rtol=1e-12,
    )


@pytest.mark.parametrize("name", ["VectorScaling", "PlattScaling"])
def test_affine_chunked_fits_run_the_in_memory_solver(monkeypatch, name):
    # One solver per problem (issue 20): the chunked fits of the affine maps
    # minimise through the in-memory optimiser, fed by sums over chunks.
    from sklearn_calib._torch import _affine

    calls = []
    minimise = _affine._minimise

    def counted(objective, *args, **kwargs):
        calls.append(type(objective).__name__)
        return minimise(objective, *args, **kwargs)

    monkeypatch.setattr(_affine, "_minimise", counted)
    n_classes = 2 if name == "PlattScaling" else 4
    X, y = toy_logits(n_samples=600, n_classes=n_classes)
    estimator = VectorScaling if name == "VectorScaling" else PlattScaling
    estimator(device="cpu").fit_chunks(random_chunks(X, y))
    assert calls == ["ChunkedAffineObjective"]
    estimator(device="cpu").fit(X, y)
    assert calls == ["ChunkedAffineObjective", "AffineObjective"]


def test_platt_separable_scores_from_chunks_equal_in_memory():
    # Hard targets on separated scores: no finite slope, so where a solve
    # stops on the ray is not defined (it follows the rounding of the loss).
    # What is defined: both fits find the separated class and say so with
    # the same warning, and both separate the calibration rows.
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, size=400)
    score = np.where(y == 1, 1.0, -1.0) * (1.0 + rng.random(400))
    X = np.column_stack([np.zeros(400), score])
    params = {"device": "cpu", "smooth_targets": False}
    with pytest.warns(UserWarning) as expected_warnings:
        expected = PlattScaling(**params).fit(X, y)
    with pytest.warns(UserWarning) as fitted_warnings:
        fitted = PlattScaling(**params).fit_chunks(random_chunks(X, y))
    for record in (expected_warnings, fitted_warnings):
        messages = " | ".join(str(w.message) for w in record)
        assert "1 are separated from every other" in messages
        assert "logits separate the calibration samples" in messages
    for estimator in (expected, fitted):
        true_class = estimator.predict_proba(X)[np.arange(400), y]
        assert true_class.min() > 1 - 1e-6
        assert estimator.coef_[0] > 10


@pytest.mark.parametrize("loss", ["charbonnier_soft_ece", "soft_ece", "nll"])
def test_smart_full_loss_in_row_blocks_matches_a_numpy_loss(monkeypatch, loss):
    # The exact full-data loss of the chunked fit sums each chunk in blocks of
    # rows (bounded memory on every dask thread); the blocks must add up to
    # the loss of the predicted temperatures, written out here in numpy.
    import sklearn_calib._margin.smart as smart_module
    from sklearn_calib._torch._chunked import smart_loss_from_sums

    X, y = toy_logits(n_samples=503, n_classes=4, seed=21, dtype=np.float64)
    rng = np.random.default_rng(21)
    w = rng.uniform(0.5, 3.0, size=y.shape[0])
    w[rng.random(y.shape[0]) < 0.1] = 0.0
    params = {"device": "cpu", "random_state": 1, "max_iter": 30, "loss": loss}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few samples
        model = SMART(**params).fit(X, y)
    options = model._loss_options()

    def full_loss():
        sums = smart_module._smart_loss_sums(
            X,
            y,
            w,
            mean=model.margin_mean_,
            std=model.margin_std_,
            coefs=model.coefs_,
            intercepts=model.intercepts_,
            **options,
        )
        return smart_loss_from_sums(sums, w.sum(), loss, model.delta)

    whole = full_loss()
    # About 13 rows a block: 39 blocks, the last one short.
    row_bytes = 8 * X.shape[1] + 24 * model.n_bins
    monkeypatch.setattr(smart_module, "_SMART_SUM_BLOCK_BYTES", 13 * row_bytes)
    blocks = full_loss()

    s = w / w.sum()
    proba = softmax(X / model.predict_temperature(X)[:, None])
    if loss == "nll":
        expected = -np.sum(s * np.log(proba[np.arange(y.size), y]))
    else:
        p = proba.max(axis=1)
        correct = (X.argmax(axis=1) == y).astype(float)
        centres = (np.arange(model.n_bins) + 0.5) / model.n_bins
        kernel = np.exp(-((p[:, None] - centres) ** 2) / (2 * model.sigma**2))
        kernel /= kernel.sum(axis=1, keepdims=True)
        mass = s @ kernel
        gap = (s * (p - correct)) @ kernel
        if loss == "soft_ece":
            expected = np.abs(gap).sum()
        else:
            expected = np.sqrt(gap**2 + (model.delta * mass) ** 2).sum()
    assert whole == pytest.approx(expected, rel=1e-9)
    assert blocks == pytest.approx(expected, rel=1e-9)
