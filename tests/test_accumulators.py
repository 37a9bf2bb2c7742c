"""Mergeable metric accumulators against the in-memory metrics.

Every accumulator, fed chunks of random sizes (one-row and empty chunks
included) and merged in random order, must give the in-memory function's value
to 1e-12 relative in float64.
"""

import copy
import warnings

import numpy as np
import pytest

from sklearn_calib.metrics import (
    BinnedCalibrationAccumulator,
    ProperScoreAccumulator,
    adaptive_calibration_error,
    brier_score,
    brier_score_decomposition,
    calibration_curve,
    calibration_report,
    chunked_calibration_report,
    classwise_calibration_error,
    equal_mass_bin_edges,
    expected_calibration_error,
    log_loss,
    maximum_calibration_error,
    rms_calibration_error,
)
from sklearn_calib.utils._math import softmax

from .conftest import load_shared

RTOL = 1e-12


def random_logits(n_samples=3000, n_classes=5, *, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_samples)
    logits = 2.5 * np.eye(n_classes)[y] + rng.normal(
        scale=2.0, size=(n_samples, n_classes)
    )
    return logits.astype(dtype), y


def random_splits(n_samples, rng):
    """Boundaries with empty and one-row chunks among random sizes."""
    cuts = np.sort(rng.integers(0, n_samples + 1, size=12))
    cuts = np.concatenate([[0, 0, 1, 1, 2], cuts, [n_samples, n_samples]])
    cuts = np.sort(cuts)
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def accumulate(make, y, proba, weights, rng, *, logits=False):
    """One accumulator per chunk, merged in random order (with + and merge)."""
    states = []
    for rows in random_splits(y.shape[0], rng):
        state = make()
        w = None if weights is None else weights[rows]
        if logits:
            state.update_logits(y[rows], proba[rows], w)
        else:
            state.update(y[rows], proba[rows], w)
        states.append(state)
    order = rng.permutation(len(states))
    total = make()
    for i, index in enumerate(order):
        if i % 2:
            total = total + states[index]
        else:
            total.merge(states[index])
    return total


def assert_close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_binned_top_label_equals_in_memory(dtype, weighted):
    rng = np.random.default_rng(1)
    logits, y = random_logits(dtype=dtype)
    proba = softmax(logits.copy())
    weights = rng.random(y.shape[0]) * 3 if weighted else None
    for n_bins in (1, 10, 15):
        state = accumulate(
            lambda n_bins=n_bins: BinnedCalibrationAccumulator(n_bins=n_bins),
            y,
            proba,
            weights,
            rng,
        )
        options = {"n_bins": n_bins, "sample_weight": weights}
        assert_close(
            state.expected_calibration_error(),
            expected_calibration_error(y, proba, **options),
        )
        assert_close(
            state.maximum_calibration_error(),
            maximum_calibration_error(y, proba, **options),
        )
        assert_close(
            state.rms_calibration_error(), rms_calibration_error(y, proba, **options)
        )
        curve = calibration_curve(y, proba, **options)
        for got, want in zip(state.calibration_curve(), curve, strict=True):
            assert_close(got, want)
        accuracy = np.average(proba.argmax(axis=1) == y, weights=weights)
        assert_close(state.accuracy(), accuracy)
        assert state.n_samples == y.shape[0]


@pytest.mark.parametrize("weighted", [False, True])
def test_binned_classwise_equals_in_memory(weighted):
    rng = np.random.default_rng(2)
    logits, y = random_logits(n_classes=7, seed=3)
    proba = softmax(logits.copy())
    weights = rng.random(y.shape[0]) if weighted else None
    state = accumulate(
        lambda: BinnedCalibrationAccumulator(n_bins=12, multiclass="classwise"),
        y,
        proba,
        weights,
        rng,
    )
    options = {"n_bins": 12, "sample_weight": weights}
    assert_close(
        state.classwise_calibration_error(),
        classwise_calibration_error(y, proba, **options),
    )
    assert_close(
        state.brier_score_decomposition(),
        brier_score_decomposition(y, proba, **options),
    )
    curve = calibration_curve(y, proba, multiclass="classwise", **options)
    for got, want in zip(state.calibration_curve(), curve, strict=True):
        assert_close(got, want)


@pytest.mark.parametrize("weighted", [False, True])
def test_proper_scores_equal_in_memory(weighted):
    rng = np.random.default_rng(4)
    logits, y = random_logits(n_classes=4, seed=5, dtype=np.float32)
    proba = softmax(logits.copy())
    weights = rng.random(y.shape[0]) if weighted else None
    state = accumulate(ProperScoreAccumulator, y, proba, weights, rng)
    assert_close(state.log_loss(), log_loss(y, proba, sample_weight=weights))
    assert_close(state.brier_score(), brier_score(y, proba, sample_weight=weights))
    assert set(state.result()) == {"log_loss", "brier_score"}


def test_update_logits_equals_update_of_softmax():
    rng = np.random.default_rng(6)
    logits, y = random_logits(seed=7, dtype=np.float32)
    proba = softmax(logits.copy())
    for make in (
        BinnedCalibrationAccumulator,
        lambda: BinnedCalibrationAccumulator(multiclass="classwise"),
        ProperScoreAccumulator,
    ):
        from_logits = accumulate(make, y, logits, None, rng, logits=True)
        from_proba = make().update(y, proba)
        for name, value in from_proba.result().items():
            got = from_logits.result()[name]
            if isinstance(value, tuple):  # a curve or a decomposition
                for a, b in zip(got, value, strict=True):
                    assert_close(a, b)
            else:
                assert_close(got, value)


def test_masked_logits_score_probability_zero():
    # -inf logits are masked classes: probability exactly 0.
    logits = np.array([[2.0, -np.inf, 0.0], [0.0, 1.0, -np.inf]])
    y = np.array([0, 1])
    state = ProperScoreAccumulator().update_logits(y, logits)
    assert_close(state.log_loss(), log_loss(y, softmax(logits.copy())))


@pytest.mark.parametrize(
    "name", ["c10_resnet50_cross_entropy_smart", "c100_densenetbc100_netcal"]
)
def test_accumulators_on_real_logits(name):
    data = load_shared(name)
    logits, y = data["logits_test"], data["y_test"]
    proba = softmax(logits.copy())
    rng = np.random.default_rng(8)
    top = accumulate(BinnedCalibrationAccumulator, y, logits, None, rng, logits=True)
    classwise = accumulate(
        lambda: BinnedCalibrationAccumulator(multiclass="classwise"),
        y,
        logits,
        None,
        rng,
        logits=True,
    )
    proper = accumulate(ProperScoreAccumulator, y, logits, None, rng, logits=True)
    assert_close(top.expected_calibration_error(), expected_calibration_error(y, proba))
    assert_close(top.maximum_calibration_error(), maximum_calibration_error(y, proba))
    assert_close(
        classwise.classwise_calibration_error(), classwise_calibration_error(y, proba)
    )
    assert_close(proper.log_loss(), log_loss(y, proba))
    assert_close(proper.brier_score(), brier_score(y, proba))


def test_string_labels_need_labels_and_then_match():
    rng = np.random.default_rng(9)
    logits, codes = random_logits(n_classes=3, seed=10)
    proba = softmax(logits.copy())
    names = np.array(["cat", "dog", "emu"])
    y = names[codes]
    with pytest.raises(ValueError, match="labels="):
        BinnedCalibrationAccumulator().update(y[:10], proba[:10])
    state = accumulate(
        lambda: BinnedCalibrationAccumulator(labels=names), y, proba, None, rng
    )
    assert_close(
        state.expected_calibration_error(), expected_calibration_error(y, proba)
    )


def test_binary_positive_column():
    rng = np.random.default_rng(11)
    positive = rng.random(500)
    y = (rng.random(500) < positive**1.5).astype(int)
    state = accumulate(ProperScoreAccumulator, y, positive, None, rng)
    assert_close(state.log_loss(), log_loss(y, positive))
    binned = accumulate(BinnedCalibrationAccumulator, y, positive, None, rng)
    assert_close(
        binned.expected_calibration_error(), expected_calibration_error(y, positive)
    )


def test_integer_weights_equal_repeated_rows():
    rng = np.random.default_rng(12)
    logits, y = random_logits(n_samples=400, seed=13)
    proba = softmax(logits.copy())
    counts = rng.integers(0, 4, size=400)
    weighted = BinnedCalibrationAccumulator().update(y, proba, counts)
    repeated = BinnedCalibrationAccumulator().update(
        np.repeat(y, counts), np.repeat(proba, counts, axis=0)
    )
    assert_close(
        weighted.expected_calibration_error(), repeated.expected_calibration_error()
    )


def test_empty_state_and_zero_weights_raise():
    with pytest.raises(ValueError, match="no sample"):
        BinnedCalibrationAccumulator().expected_calibration_error()
    state = ProperScoreAccumulator().update([0, 1], [[0.5, 0.5], [0.2, 0.8]], [0, 0])
    with pytest.raises(ValueError, match="no sample"):
        state.log_loss()
    # An empty chunk adds nothing and needs no labels.
    state = BinnedCalibrationAccumulator().update([], np.empty((0, 3)))
    assert state.n_samples == 0


@pytest.mark.parametrize("make", [BinnedCalibrationAccumulator, ProperScoreAccumulator])
def test_empty_list_chunk_fixes_no_width(make):
    # [] says nothing about the number of classes: it fixed 2 columns (a
    # binary column) and the next chunk of 3 was refused.
    logits, y = random_logits(40, 3)
    proba = softmax(logits)
    state = make().update([], []).update(y, proba)
    assert state.n_samples == 40
    np.testing.assert_array_equal(
        state.to_vector(), make().update(y, proba).to_vector()
    )
    state = make().update_logits([], np.empty(0)).update_logits(y, logits)
    assert state.n_samples == 40 and state.n_classes == 3
    merged = make().update(y, proba) + make().update([], [])
    assert merged.n_samples == 40
    # Once the width is known, [] is an empty chunk of it (it was refused).
    assert make().update(y, proba).update([], []).n_samples == 40
    with pytest.raises(ValueError, match="shape"):
        make().update([0], [])


def test_vector_of_a_fresh_binned_state_raises():
    # Its sums are not allocated before the number of classes is known: the
    # vector was an object array [None, None, None, 0.0].
    with pytest.raises(ValueError, match="vector_size"):
        BinnedCalibrationAccumulator().to_vector()
    np.testing.assert_array_equal(ProperScoreAccumulator().to_vector(), np.zeros(4))


def test_merge_checks_compatibility():
    a = BinnedCalibrationAccumulator(n_bins=10).update([0], [[0.7, 0.3]])
    with pytest.raises(ValueError, match="different n_bins"):
        a.merge(BinnedCalibrationAccumulator(n_bins=15))
    with pytest.raises(TypeError, match="Cannot merge"):
        a.merge(ProperScoreAccumulator())
    b = BinnedCalibrationAccumulator(n_bins=10).update([0], [[0.7, 0.2, 0.1]])
    with pytest.raises(ValueError, match="2 and 3 classes"):
        a.merge(b)
    with pytest.raises(ValueError, match="3 probability columns"):
        a.update([0], [[0.7, 0.2, 0.1]])
    with pytest.raises(ValueError, match="needs an accumulator"):
        a.classwise_calibration_error()
    # sum() starts from 0; the operands are left unchanged.
    before = copy.deepcopy(a.count)
    total = sum([a, a, a])
    assert total.n_samples == 3 and np.array_equal(a.count, before)


def test_bad_chunks_raise():
    state = ProperScoreAccumulator()
    with pytest.raises(ValueError, match="sum to 1"):
        state.update([0, 1], [[0.5, 0.6], [0.5, 0.5]])
    with pytest.raises(ValueError, match="negative"):
        state.update([0, 1], [[0.5, 0.5], [0.5, 0.5]], [1.0, -1.0])
    with pytest.raises(ValueError, match="NaN"):
        state.update_logits([0], [[np.nan, 1.0]])
    with pytest.raises(ValueError, match="inconsistent"):
        state.update([0, 1, 1], [[0.5, 0.5], [0.5, 0.5]])


# --- equal-mass edges and the chunked report -----------------------------------


def _chunks(logits, y, weights, rng):
    out = []
    for rows in random_splits(y.shape[0], rng):
        if weights is None:
            out.append((logits[rows], y[rows]))
        else:
            out.append((logits[rows], y[rows], weights[rows]))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weights", [None, "integer", "scaled integer", "real"])
def test_equal_mass_edges_are_exact(dtype, weights):
    rng = np.random.default_rng(14)
    logits, y = random_logits(n_samples=800, n_classes=4, seed=15, dtype=dtype)
    # Ties: repeated rows make equal confidences straddle the quantiles.
    logits[::7] = logits[0]
    proba = softmax(logits.copy())
    if weights in ("integer", "scaled integer"):
        # Integer weights put cumulative weights exactly on the quantile
        # targets; scaled by 1e-6, rounding must not move an edge.
        scale = 1e-6 if weights == "scaled integer" else 1.0
        weights = rng.integers(0, 3, size=y.shape[0]) * scale
    elif weights == "real":
        weights = rng.random(y.shape[0])
    for n_bins in (1, 15):
        edges = equal_mass_bin_edges(_chunks(logits, y, weights, rng), n_bins=n_bins)
        curve = calibration_curve(
            y, proba, n_bins=n_bins, strategy="quantile", sample_weight=weights
        )
        np.testing.assert_array_equal(edges, curve.bin_edges)
    classwise = equal_mass_bin_edges(
        _chunks(logits, y, weights, rng), n_bins=10, multiclass="classwise"
    )
    curve = calibration_curve(
        y,
        proba,
        n_bins=10,
        strategy="quantile",
        multiclass="classwise",
        sample_weight=weights,
    )
    np.testing.assert_array_equal(classwise, curve.bin_edges)
    state = BinnedCalibrationAccumulator(bin_edges=edges)
    for X, yy, *w in _chunks(logits, y, weights, rng):
        state.update_logits(yy, X, *w)
    assert_close(
        state.expected_calibration_error(),
        adaptive_calibration_error(y, proba, n_bins=15, sample_weight=weights),
    )
    if weights is not None:
        for n_bins in (3, 15):
            scaled = equal_mass_bin_edges(
                _chunks(logits, y, weights * 1e6, rng), n_bins=n_bins
            )
            unscaled = equal_mass_bin_edges(
                _chunks(logits, y, weights, rng), n_bins=n_bins
            )
            np.testing.assert_array_equal(scaled, unscaled)


REPORT = [
    "ece",
    "adaptive_ece",
    "classwise_ece",
    "mce",
    "rms_ce",
    "nll",
    "brier",
    "accuracy",
]


@pytest.mark.parametrize("weighted", [False, True])
def test_chunked_report_equals_calibration_report(weighted):
    rng = np.random.default_rng(16)
    logits, y = random_logits(n_samples=2500, n_classes=6, seed=17, dtype=np.float32)
    weights = rng.random(y.shape[0]) if weighted else None
    proba = softmax(logits.copy())
    expected = calibration_report(
        y, proba, metrics=REPORT, sample_weight=weights, as_frame=False
    )["model"]
    chunks = _chunks(logits, y, weights, rng)
    got = chunked_calibration_report(chunks, metrics=REPORT)
    assert list(got) == REPORT
    for name in REPORT:
        assert_close(got[name], expected[name])
    # Probabilities, one numpy array split into chunks of 300 rows.
    got = chunked_calibration_report(
        proba, y, sample_weight=weights, metrics=REPORT, from_logits=False
    )
    for name in REPORT:
        assert_close(got[name], expected[name])


def test_chunked_report_on_dask_array():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(18)
    logits, y = random_logits(n_samples=3000, seed=19, dtype=np.float32)
    weights = rng.random(y.shape[0])
    X = da.from_array(logits, chunks=((0, 1, 999, 1000, 1000), (5,)))
    got = chunked_calibration_report(
        X, da.from_array(y, chunks=700), sample_weight=weights, metrics=REPORT
    )
    expected = calibration_report(
        y,
        softmax(logits.copy()),
        metrics=REPORT,
        sample_weight=weights,
        as_frame=False,
    )["model"]
    for name in REPORT:
        assert_close(got[name], expected[name])


def test_chunked_report_errors():
    logits, y = random_logits(n_samples=50)
    chunks = [(logits, y)]
    with pytest.raises(ValueError, match="not a sum over bins"):
        chunked_calibration_report(chunks, metrics=["smooth_ece"])
    with pytest.raises(ValueError, match="Unknown|not available"):
        chunked_calibration_report(chunks, metrics=["f1"])
    with pytest.raises(TypeError, match="one-shot iterator"):
        chunked_calibration_report(iter(chunks))
    with pytest.raises(TypeError, match=r"tuple \(X, y\)"):
        chunked_calibration_report([logits])
    with pytest.raises(ValueError, match="n_bins"):
        chunked_calibration_report(chunks, n_bins=0)
    # A callable that returns a new iterator each time is re-iterable.
    report = chunked_calibration_report(lambda: iter(chunks), metrics=["nll"])
    assert_close(report["nll"], log_loss(y, softmax(logits.copy())))


@pytest.mark.parametrize(
    "make", [BinnedCalibrationAccumulator, ProperScoreAccumulator], ids=["b", "p"]
)
def test_sums_beyond_float64_are_refused_and_leave_the_state(make):
    # Weights near 1e307 overflowed the sums: every metric was NaN, with
    # numpy's RuntimeWarnings only.
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), 200)
    y = rng.integers(0, 3, 200)
    twice = [0, 0]
    big = [2.0**1022, 2.0**1022]
    state = make().update(y[twice], proba[twice], big)
    before = state.to_vector()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="exceed float64's range"):
            state.update(y, proba, rng.integers(1, 5, 200) * 2.0**1020)
        np.testing.assert_array_equal(state.to_vector(), before)
        with pytest.raises(ValueError, match="exceed float64's range"):
            state.merge(make().update(y[twice], proba[twice], big))
        np.testing.assert_array_equal(state.to_vector(), before)
        assert state.n_samples == 2
        with pytest.raises(ValueError, match="NaN or infinity"):
            make().from_vector(np.full_like(before, np.inf), 3)


@pytest.mark.parametrize(
    "edges", [[0.2, 0.5, 0.8], [0.0, 0.5], [[0.0, 0.5, 1.0], [0.1, 0.5, 1.0]]]
)
def test_bin_edges_must_span_zero_to_one(edges):
    # Edges short of 0 or 1 were taken: the scores outside them were counted
    # in the first or last bin, whose reported edges did not hold them (a
    # confidence of 0.9 in the bin (0.5, 0.8]).
    multiclass = "classwise" if np.ndim(edges) == 2 else "top-label"
    with pytest.raises(ValueError, match="start at 0 and end at 1"):
        BinnedCalibrationAccumulator(bin_edges=edges, multiclass=multiclass)
