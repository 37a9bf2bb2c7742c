"""Hostile input across the registry (issue 25): weights, saved states, outputs.

Each test is one family of the issue's cases, run over every calibrator of
``utils.discovery.all_calibrators()`` where it concerns them all, so that a
calibrator added to the library is covered the day it lands.
"""

import numpy as np
import pytest
from sklearn.utils import get_tags

from sklearn_calib import PlattScaling, VennAbersCalibration
from sklearn_calib.utils._testing import make_fast, make_logits
from sklearn_calib.utils.discovery import all_calibrators

CALIBRATORS = [cls for _, cls in all_calibrators()]
IDS = [name for name, _ in all_calibrators()]

# The fast settings fit SMART on a few hundred samples, which it warns about
# (its own tests assert that warning); these tests are about other things.
pytestmark = pytest.mark.filterwarnings(
    "ignore:SMART was fitted on .* calibration samples:UserWarning"
)


@pytest.fixture(params=CALIBRATORS, ids=IDS)
def calibrator(request):
    return make_fast(request.param)


def n_classes_of(calibrator):
    return 3 if get_tags(calibrator).classifier_tags.multi_class else 2


@pytest.fixture
def logits_y(calibrator):
    return make_logits(n_samples=300, n_classes=n_classes_of(calibrator), seed=3)


# --- 2, 3: sample weights -------------------------------------------------------

# The fits that read weights as numbers of samples (the methods guide says
# so): every other calibrator must give the same fit for weights c * w.
SCALE_DEPENDENT = {"PlattScaling", "VennAbersCalibration"}


def test_huge_weights_change_nothing_where_scale_is_free(calibrator, logits_y):
    """2,000-style weights of 1e306 (whose sum overflows) fit as unit weights."""
    X, y = logits_y
    if type(calibrator).__name__ in SCALE_DEPENDENT:
        pytest.skip("this fit depends on the scale of the weights (documented)")
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 1.5, size=y.shape[0])
    expected = calibrator.fit(X, y, sample_weight=weights).predict_proba(X)
    with np.errstate(over="ignore"):  # the overflow is the point
        assert np.isinf(np.sum(weights * 1e306))
    got = calibrator.fit(X, y, sample_weight=weights * 1e306).predict_proba(X)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "weight, message",
    [
        (np.inf, "sample_weight contains infinity"),
        (-np.inf, "sample_weight contains infinity"),
        (np.nan, "sample_weight contains NaN"),
        (-1.0, "sample_weight contains negative values"),
        (0.0, "zero for every sample"),
    ],
)
def test_scalar_weight_is_validated_like_an_array(
    calibrator, logits_y, weight, message
):
    X, y = logits_y
    with pytest.raises(ValueError, match=message):
        calibrator.fit(X, y, sample_weight=weight)
    with pytest.raises(ValueError, match=message):
        calibrator.fit(X, y, sample_weight=np.full(y.shape[0], weight))


def test_scalar_weight_is_unit_weight(calibrator, logits_y):
    X, y = logits_y
    expected = calibrator.fit(X, y).predict_proba(X)
    got = calibrator.fit(X, y, sample_weight=7.0).predict_proba(X)
    if type(calibrator).__name__ in SCALE_DEPENDENT:
        got = calibrator.fit(X, y, sample_weight=1.0).predict_proba(X)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)


def test_platt_huge_weights_reach_the_limit_of_its_targets():
    # Counts of 1e309 overflow float64: the smoothed targets are then their
    # limits 1 and 0, the plain logistic fit (before: non-finite targets).
    X, y = make_logits(n_samples=300, n_classes=2, seed=4)
    weights = np.full(y.shape[0], 1e306)
    got = PlattScaling(device="cpu", tol=1e-10).fit(X, y, sample_weight=weights)
    plain = PlattScaling(device="cpu", tol=1e-10, smooth_targets=False).fit(X, y)
    np.testing.assert_allclose(got.predict_proba(X), plain.predict_proba(X), atol=1e-7)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_venn_abers_huge_weights_reach_the_limit(n_classes):
    # The test point weighs 1 against weights of 1e306: its pull vanishes, as
    # it already nearly does at 1e12 (before: NaN/overflow from 1e200 on).
    X, y = make_logits(n_samples=300, n_classes=n_classes, seed=5)
    rng = np.random.default_rng(1)
    weights = rng.uniform(0.5, 1.5, size=y.shape[0])
    large = VennAbersCalibration().fit(X, y, sample_weight=weights * 1e12)
    huge = VennAbersCalibration().fit(X, y, sample_weight=weights * 1e306)
    np.testing.assert_allclose(
        huge.predict_proba(X), large.predict_proba(X), rtol=0, atol=1e-9
    )
    # Ordinary weights: the scale still counts as more data (documented).
    small = VennAbersCalibration().fit(X, y, sample_weight=weights)
    assert np.abs(small.predict_proba(X) - large.predict_proba(X)).max() > 1e-4


def test_aurc_counts_huge_frequency_weights_without_overflow():
    # Frequency weights: the scale counts (weight 2 = the row twice), and
    # huge weights reach the many-samples limit instead of NaN.
    from scipy.special import softmax

    from sklearn_calib.selective import aurc, excess_aurc

    X, y = make_logits(n_samples=500, n_classes=3, seed=6)
    proba = softmax(X, axis=1)
    weights = np.random.default_rng(2).uniform(0.5, 1.5, size=y.shape[0])
    for metric in (aurc, excess_aurc):
        limit = metric(y, proba, sample_weight=weights * 1e12)
        huge = metric(y, proba, sample_weight=weights * 1e306)
        assert np.isfinite(huge)
        assert huge == pytest.approx(limit, rel=1e-9)
        # Integer weights are repeated rows, at any scale of counts.
        twice = metric(y, proba, sample_weight=np.full(y.shape[0], 2.0))
        repeated = metric(np.r_[y, y], np.r_[proba, proba])
        assert twice == pytest.approx(repeated, rel=1e-12)


# --- 2, 6, 9, 10: ConformalClassifier -----------------------------------------


def test_conformal_huge_weights_reach_the_many_samples_limit():
    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=2000, n_classes=4, seed=7)
    weights = np.random.default_rng(3).uniform(0.5, 1.5, size=y.shape[0])
    large = ConformalClassifier().fit(X, y, sample_weight=weights * 1e12)
    huge = ConformalClassifier().fit(X, y, sample_weight=weights * 1e306)
    assert huge.quantile_ == large.quantile_
    # Before: the cumulative weights overflowed and the threshold was the
    # smallest score (coverage 8 % at level 0.9).
    covered = huge.predict_set(X)[np.arange(y.shape[0]), y].mean()
    assert covered > 0.85


@pytest.mark.parametrize("conformity_score", ["lac", "aps", "top_k"])
def test_conformal_with_calibrator_never_holds_a_masked_class(conformity_score):
    from sklearn_calib import TemperatureScaling
    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=600, n_classes=4, seed=8)
    X[:300, 3] = -np.inf
    y = np.where((y == 3) & (np.arange(600) < 300), 0, y)
    for n_cal in (3, 300):  # an infinite threshold, a finite one
        clf = ConformalClassifier(
            TemperatureScaling(device="cpu"), conformity_score=conformity_score
        )
        with pytest.warns(UserWarning, match="Too few") if n_cal == 3 else _nothing():
            clf.fit(X[300 - n_cal : 300 + n_cal], y[300 - n_cal : 300 + n_cal])
        sets = clf.predict_set(X)
        assert not sets[:300, 3].any()
        if n_cal == 3:
            assert sets[300:].all()


def _nothing():
    import contextlib

    return contextlib.nullcontext()


class _NaNCalibrator:
    """A fitted classifier whose probabilities hold NaN for one class."""

    def fit(self, X, y, sample_weight=None):
        self.classes_ = np.arange(X.shape[1])
        return self

    def predict_proba(self, X):
        from scipy.special import softmax

        proba = softmax(np.asarray(X, dtype=np.float64), axis=1)
        proba[:, 1] = np.nan
        return proba

    def get_params(self, deep=True):
        return {}

    def set_params(self, **params):
        return self


def test_conformal_refuses_nan_probabilities_of_a_calibrator():
    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=200, n_classes=3, seed=9)
    with pytest.raises(ValueError, match="predict_proba returned nan"):
        ConformalClassifier(_NaNCalibrator()).fit(X, y)


def test_conformal_calibrator_without_classes_is_named():
    from sklearn_calib.conformal import ConformalClassifier

    class NoClasses(_NaNCalibrator):
        def fit(self, X, y, sample_weight=None):
            return self

    X, y = make_logits(n_samples=200, n_classes=3, seed=9)
    with pytest.raises(TypeError, match="NoClasses has no classes_"):
        ConformalClassifier(NoClasses()).fit(X, y)


@pytest.mark.parametrize("fmt", ["pickle", "skops"])
def test_conformal_set_params_level_after_fit_round_trips(fmt):
    import pickle

    from sklearn_calib.conformal import ConformalClassifier
    from sklearn_calib.utils.persistence import skops_trusted_types

    X, y = make_logits(n_samples=1000, n_classes=4, seed=10)
    clf = ConformalClassifier().fit(X[:500], y[:500])
    fitted_sets = clf.predict_set(X[500:], 0.5)
    clf.set_params(confidence_level=0.5)
    # quantile_ is the threshold predict_set uses, at the current level.
    assert clf.quantile_ == clf._thresholds(0.5, warn=False)
    np.testing.assert_array_equal(clf.predict_set(X[500:]), fitted_sets)
    if fmt == "pickle":
        restored = pickle.loads(pickle.dumps(clf))
    else:
        sio = pytest.importorskip("skops.io")
        restored = sio.loads(sio.dumps(clf), trusted=skops_trusted_types())
    assert restored.quantile_ == clf.quantile_
    np.testing.assert_array_equal(restored.predict_set(X[500:]), fitted_sets)


def _edited_conformal(edit, **params):
    import copy
    import pickle

    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=1000, n_classes=4, seed=11)
    clf = ConformalClassifier(**params).fit(X, y)
    state = clf.__getstate__()
    edit(state)
    edited = copy.copy(clf)
    edited.__dict__ = state
    return pickle.dumps(edited)


def test_conformal_group_scores_must_be_the_conformity_scores():
    import pickle

    def shrink(state):
        # Smaller scores and a quantile_ adjusted to match (coverage 0.42).
        state["_group_scores"] = [g * 0.3 for g in state["_group_scores"]]
        state["quantile_"] = state["quantile_"] * 0.3

    with pytest.raises(ValueError, match="Fitted attribute _group_scores.*exactly"):
        pickle.loads(_edited_conformal(shrink))


@pytest.mark.parametrize(
    "fitted, relabelled, params",
    [
        ("lac", "top_k", {}),  # fractions are not ranks
        ("top_k", "lac", {}),  # ranks above 1 are not LAC scores
        ("top_k", "aps", {}),
    ],
)
def test_conformal_scores_must_lie_in_the_range_of_their_score(
    fitted, relabelled, params
):
    import pickle

    def relabel(state):
        state["_scoring"] = {**state["_scoring"], "conformity_score": relabelled}

    data = _edited_conformal(relabel, conformity_score=fitted, **params)
    with pytest.raises(ValueError, match="Fitted attribute conformity_scores_"):
        pickle.loads(data)


# --- 8, 11: saved states --------------------------------------------------------

# Attributes a loader may rebuild from an earlier file format: deleting them
# gives a valid (older) state, not an edited one.
REBUILT_ON_LOADING = {"SplineCalibration": {"log_complements_"}}


def _pickled_with(estimator, state):
    import copy
    import pickle

    edited = copy.copy(estimator)  # a shallow copy: setstate is not called
    edited.__dict__ = state
    return pickle.dumps(edited)


def test_deleting_any_fitted_attribute_is_refused(calibrator, logits_y):
    import pickle

    X, y = logits_y
    calibrator.fit(X, y)
    state = calibrator.__getstate__()
    fitted = [k for k in state if k.endswith("_") and not k.startswith("__")]
    assert "classes_" in fitted
    rebuilt = REBUILT_ON_LOADING.get(type(calibrator).__name__, set())
    for name in fitted:
        if name in rebuilt:
            continue
        edited = {k: v for k, v in state.items() if k != name}
        with pytest.raises(ValueError, match="Fitted attribute"):
            pickle.loads(_pickled_with(calibrator, edited))


def test_state_without_classes_is_still_checked():
    # The case: no classes_ and a negative temperature loaded and
    # returned reversed probabilities.
    import pickle

    from sklearn_calib import TemperatureScaling

    X, y = make_logits(n_samples=300, n_classes=3, seed=12)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    state = ts.__getstate__()
    del state["classes_"]
    state["temperature_"] = -2.5
    with pytest.raises(ValueError, match="Fitted attribute (classes_|temperature_)"):
        pickle.loads(_pickled_with(ts, state))


def test_wrappers_without_classes_are_still_checked():
    import pickle

    from sklearn.linear_model import LogisticRegression

    from sklearn_calib import CalibratedClassifier, TemperatureScaling
    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=300, n_classes=3, seed=13)
    for estimator in (
        CalibratedClassifier(LogisticRegression(), TemperatureScaling(device="cpu")),
        ConformalClassifier(),
    ):
        estimator.fit(X, y)
        state = estimator.__getstate__()
        del state["classes_"]
        with pytest.raises(ValueError, match="Fitted attribute"):
            pickle.loads(_pickled_with(estimator, state))


def test_error_messages_quote_a_bounded_excerpt():
    import pickle

    from sklearn_calib import TemperatureScaling

    X, y = make_logits(n_samples=300, n_classes=3, seed=14)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    state = ts.__getstate__()
    state["classes_"] = np.zeros(1_000_000, dtype=np.int64)  # all duplicates
    state["n_features_in_"] = 1_000_000
    with pytest.raises(ValueError, match="duplicates") as info:
        pickle.loads(_pickled_with(ts, state))
    assert len(str(info.value)) < 1000
    # The same bound on the messages about labels.
    with pytest.raises(ValueError) as info:
        TemperatureScaling(classes=np.zeros(3)).fit(X, y)
    with pytest.raises(ValueError, match="not in classes") as info:
        TemperatureScaling(classes=np.arange(3) + 10**6).fit(
            np.zeros((3, 3)), np.arange(3)
        )
    many = np.arange(100_000)
    with pytest.raises(ValueError, match="duplicates") as info:
        TemperatureScaling(classes=np.r_[many, many]).fit(
            np.zeros((3, 200_000)), np.arange(3)
        )
    assert len(str(info.value)) < 1000


def test_padded_skops_file_is_refused_before_expansion(tmp_path):
    import zipfile

    sio = pytest.importorskip("skops.io")

    from sklearn_calib import TemperatureScaling
    from sklearn_calib.utils.persistence import check_skops_archive

    X, y = make_logits(n_samples=300, n_classes=3, seed=15)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    path = tmp_path / "ts.skops"
    sio.dump(ts, path)
    check_skops_archive(path)  # a fitted state passes
    padded = tmp_path / "padded.skops"
    with (
        zipfile.ZipFile(path) as src,
        zipfile.ZipFile(padded, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("padding.npy", bytes(64 * 2**20))
    assert padded.stat().st_size < 2**20
    with pytest.raises(ValueError, match="'padding.npy' expands from"):
        check_skops_archive(padded)


# --- 1: writers -----------------------------------------------------------------


def _mixed_dtype_folder(folder, X, y):
    folder.mkdir()
    half = X.shape[0] // 2
    np.savez(folder / "a.npz", logits=X[:half].astype(np.float32), y=y[:half])
    np.savez(folder / "b.npz", logits=X[half:], y=y[half:])
    return folder


def test_apply_chunks_writes_mixed_dtype_chunks_faithfully(tmp_path):
    from sklearn_calib import TemperatureScaling
    from sklearn_calib.chunked import apply_chunks, open_chunks

    X, y = make_logits(n_samples=2000, n_classes=4, seed=16)
    folder = _mixed_dtype_folder(tmp_path / "chunks", X, y)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    expected = ts.predict_proba(X)
    dataset = open_chunks(folder)
    assert dataset.dtype == np.float64  # promoted, as numpy.concatenate would
    for chunks in (dataset, [X[:1000].astype(np.float32), X[1000:]]):
        path = apply_chunks(ts, chunks, tmp_path / "p.npy")
        proba = np.load(path)
        # The header's dtype and size match what was written.
        assert path.stat().st_size == 128 + proba.nbytes
        assert proba.dtype == np.float64
        np.testing.assert_allclose(proba, expected, atol=1e-6)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)


def test_apply_chunks_refuses_output_it_cannot_write_exactly(tmp_path):
    from sklearn.base import BaseEstimator

    from sklearn_calib.chunked import apply_chunks

    class Switching(BaseEstimator):
        """A fitted estimator whose output dtype changes from chunk to chunk."""

        classes_ = np.arange(2)
        calls = 0

        def fit(self, X, y=None):
            return self

        def __sklearn_is_fitted__(self):
            return True

        def predict_proba(self, X):
            type(self).calls += 1
            dtype = np.float32 if type(self).calls == 1 else np.complex128
            return np.full((len(X), 2), 0.5, dtype=dtype)

    chunks = [np.zeros((3, 2)), np.zeros((2, 2))]
    with pytest.raises(TypeError, match="cannot hold it exactly"):
        apply_chunks(Switching(), chunks, tmp_path / "p.npy")
    assert not (tmp_path / "p.npy").exists()


# --- 7: lazy (dask) prediction declares the dtype it computes -------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_lazy_prediction_declares_the_dtype_it_computes(calibrator, logits_y, dtype):
    da = pytest.importorskip("dask.array")
    X, y = logits_y
    calibrator.fit(X, y)
    lazy_X = da.from_array(np.round(X).astype(dtype), chunks=(100, -1))
    for method in ("predict_proba", "transform"):
        lazy = getattr(calibrator, method)(lazy_X)
        computed = lazy.compute()
        assert lazy.dtype == computed.dtype == lazy._meta.dtype
        eager = getattr(calibrator, method)(np.round(X).astype(dtype))
        assert computed.dtype == eager.dtype


# --- 2, 4, 5: chunked fits ------------------------------------------------------

CHUNKED = ["TemperatureScaling", "VectorScaling", "HistogramBinning"]


@pytest.mark.parametrize("name", CHUNKED)
def test_chunked_fit_with_huge_weights_equals_the_in_memory_fit(name):
    da = pytest.importorskip("dask.array")
    cls = dict(all_calibrators())[name]
    X, y = make_logits(n_samples=2000, n_classes=3, seed=17)
    weights = np.random.default_rng(4).uniform(0.5, 1.5, size=y.shape[0])
    expected = make_fast(cls).fit(X, y, sample_weight=weights).predict_proba(X)
    lazy = make_fast(cls).fit(
        da.from_array(X, chunks=(500, -1)),
        da.from_array(y, chunks=500),
        sample_weight=da.from_array(weights * 1e306, chunks=500),
    )
    np.testing.assert_allclose(lazy.predict_proba(X), expected, atol=1e-8)


class _ChangingChunks:
    """Chunks that change after the first pass, as a careless reader's might."""

    def __init__(self, X, y, change):
        self.X, self.y, self.change, self.calls = X, y, change, 0

    def __call__(self):
        self.calls += 1
        y = self.y.copy()
        if self.calls > 1 and self.change in ("below", "above"):
            y[:10] = -3 if self.change == "below" else 7
        half = self.X.shape[0] // 2
        parts = [(self.X[:half], y[:half]), (self.X[half:], y[half:])]
        if self.calls > 1 and self.change == "drop":
            parts = parts[:1]
        if self.calls > 1 and self.change == "reweigh":
            parts = [(X, y, np.full(len(y), 2.0)) for X, y in parts]
        return iter(parts)


@pytest.mark.parametrize("name", CHUNKED)
@pytest.mark.parametrize("change", ["below", "above", "drop", "reweigh"])
def test_chunked_fit_refuses_data_that_change_between_passes(name, change):
    cls = dict(all_calibrators())[name]
    X, y = make_logits(n_samples=1000, n_classes=3, seed=18)
    with pytest.raises(ValueError, match="changed between"):
        make_fast(cls).fit_chunks(_ChangingChunks(X, y, change))


def test_int_and_str_labels_across_chunks_are_refused():
    from sklearn_calib import TemperatureScaling

    X, y = make_logits(n_samples=1000, n_classes=12, seed=19)
    chunks = [(X[:500], y[:500]), (X[500:], y[500:].astype(str))]
    with pytest.raises(ValueError, match="mix numbers and strings"):
        TemperatureScaling(device="cpu").fit_chunks(chunks)


def test_mixed_label_types_in_one_array_are_named(calibrator, logits_y):
    X, y = logits_y
    mixed = y.astype(object)
    mixed[:5] = mixed[:5].astype(str)
    with pytest.raises(ValueError, match="mixes strings and other labels"):
        calibrator.fit(X, mixed)


def test_missing_labels_are_named_in_memory_and_in_chunks():
    # None among the labels: scikit-learn's "Unknown label type: unknown" in
    # memory, numpy's "'<' not supported between 'NoneType' and 'int'" over
    # chunks; one message naming the missing label for both.
    from sklearn_calib import TemperatureScaling

    X, y = make_logits(n_samples=300, n_classes=3, seed=20)
    missing = y.astype(object)
    missing[7] = None
    with pytest.raises(ValueError, match=r"y contains None .* position 7"):
        TemperatureScaling(device="cpu").fit(X, missing)
    with pytest.raises(ValueError, match=r"y contains None .* position 7"):
        TemperatureScaling(device="cpu").fit_chunks([(X[:150], missing[:150])])
    strings = np.array(["a", "b", "c"], dtype=object)[y]
    strings[7] = None
    with pytest.raises(ValueError, match="y contains None"):
        TemperatureScaling(device="cpu").fit(X, strings)


def test_apply_chunks_failing_midway_leaves_the_previous_file(tmp_path):
    from sklearn_calib import TemperatureScaling
    from sklearn_calib.chunked import apply_chunks

    rng = np.random.default_rng(8)
    logits = rng.normal(size=(300, 3))
    y = rng.integers(0, 3, size=300)
    ts = TemperatureScaling(device="cpu").fit(logits, y)
    path = tmp_path / "out.npy"
    np.save(path, np.arange(5.0))
    bad = logits.copy()
    bad[250, 1] = np.nan  # in the second chunk: the first is already written
    with pytest.raises(ValueError, match="NaN"):
        apply_chunks(ts, [bad[:200], bad[200:]], path)
    np.testing.assert_array_equal(np.load(path), np.arange(5.0))
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]
    # A complete run replaces it.
    apply_chunks(ts, [logits[:200], logits[200:]], path)
    np.testing.assert_allclose(np.load(path), ts.predict_proba(logits), atol=1e-12)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]
