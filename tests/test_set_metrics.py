"""Metrics of prediction sets: coverage, sizes, strata, classes."""

import warnings

import numpy as np
import pytest

from sklearn_calib.metrics import (
    classwise_coverage,
    mean_set_size,
    median_set_size,
    set_coverage,
    size_stratified_coverage,
    worst_class_coverage,
)
from sklearn_calib.utils.discovery import all_metrics

SETS = np.array(
    [
        [True, False, False],
        [True, True, False],
        [False, True, True],
        [True, True, True],
        [False, False, False],
    ]
)
Y = np.array([0, 2, 2, 1, 0])


def test_hand_computed_values():
    # covered: yes, no, yes, yes, no; sizes 1, 2, 2, 3, 0
    assert set_coverage(Y, SETS) == pytest.approx(3 / 5)
    assert mean_set_size(SETS) == pytest.approx(8 / 5)
    assert median_set_size(SETS) == 2.0
    np.testing.assert_allclose(classwise_coverage(Y, SETS), [1 / 2, 1, 1 / 2])
    assert worst_class_coverage(Y, SETS) == 0.5
    strata = size_stratified_coverage(Y, SETS)
    np.testing.assert_array_equal(strata.set_size, [0, 1, 2, 3])
    np.testing.assert_allclose(strata.coverage, [0, 1, 1 / 2, 1])
    np.testing.assert_allclose(strata.weight, [1, 1, 2, 1])


def test_stratum_edges():
    strata = size_stratified_coverage(Y, SETS, bins=[0, 2, 3])
    # [0, 2) holds sizes 0 and 1; [2, 3] holds 2, 2 and 3.
    np.testing.assert_array_equal(strata.set_size, [0, 2])
    np.testing.assert_allclose(strata.coverage, [1 / 2, 2 / 3])
    np.testing.assert_allclose(strata.weight, [2, 3])
    # Sizes outside every stratum are left out; an empty stratum is NaN.
    strata = size_stratified_coverage(Y, SETS, bins=[1, 2, 5, 9])
    np.testing.assert_allclose(strata.weight, [1, 3, 0])
    assert np.isnan(strata.coverage[2])


def test_class_without_samples_is_nan_and_ignored_by_the_worst():
    coverage = classwise_coverage([0, 0, 2], SETS[:3])
    assert np.isnan(coverage[1])
    assert worst_class_coverage([0, 0, 2], SETS[:3]) == 1.0


def test_median_is_the_lower_weighted_median():
    sets = np.zeros((4, 5), dtype=bool)
    for i, size in enumerate([1, 2, 4, 5]):
        sets[i, :size] = True
    assert median_set_size(sets) == 2.0  # lower median of an even count
    assert median_set_size(sets, sample_weight=[1, 1, 3, 1]) == 4.0
    assert median_set_size(sets, sample_weight=[0.5, 1, 1, 1.5]) == 4.0


def test_labels_and_string_classes():
    names = np.array(["ant", "bee", "cat"])
    assert set_coverage(names[Y], SETS) == set_coverage(Y, SETS)
    # Columns in another order: labels says which class each column holds.
    order = [2, 0, 1]
    assert set_coverage(Y, SETS[:, order], labels=order) == set_coverage(Y, SETS)
    np.testing.assert_allclose(
        classwise_coverage(Y, SETS[:, order], labels=order),
        classwise_coverage(Y, SETS)[order],
    )


SET_METRICS = [
    lambda y, s, **kw: set_coverage(y, s, **kw),
    lambda y, s, **kw: mean_set_size(s, **kw),
    lambda y, s, **kw: median_set_size(s, **kw),
    lambda y, s, **kw: worst_class_coverage(y, s, **kw),
    lambda y, s, **kw: classwise_coverage(y, s, **kw),
    lambda y, s, **kw: size_stratified_coverage(y, s, **kw).coverage,
]


@pytest.mark.parametrize("metric", SET_METRICS)
def test_weights_lists_and_row_order(metric):
    rng = np.random.default_rng(0)
    sets = rng.random((300, 6)) < 0.3
    y = rng.integers(0, 6, size=300)
    weights = rng.integers(0, 4, size=300)
    value = np.asarray(metric(y, sets))
    np.testing.assert_allclose(metric(y, sets, sample_weight=np.ones(300)), value)
    np.testing.assert_allclose(
        metric(y, sets, sample_weight=weights),
        metric(np.repeat(y, weights), np.repeat(sets, weights, axis=0)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(metric(y.tolist(), sets.astype(int).tolist()), value)
    order = rng.permutation(300)
    np.testing.assert_allclose(metric(y[order], sets[order]), value, rtol=1e-12)


@pytest.mark.parametrize("metric", SET_METRICS)
@pytest.mark.parametrize("scale", [1e-320, 2.0**-1000, 2.0**1000, 1e307])
def test_weights_scale_free(metric, scale):
    # Only the weights' ratios count: sums of weights of 1e307 overflowed
    # (NaN coverages and sizes), subnormal ones lost their bits.
    rng = np.random.default_rng(1)
    sets = rng.random((400, 4)) < 0.4
    y = rng.integers(0, 4, size=400)
    weights = rng.integers(0, 3, size=400).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = metric(y, sets, sample_weight=weights * scale)
    np.testing.assert_allclose(
        scaled, metric(y, sets, sample_weight=weights), rtol=1e-12
    )


def test_stratum_weights_keep_the_callers_scale():
    weights = np.array([1.0, 2.0, 3.0, 4.0, 5.0]) * 2.0**-1000
    strata = size_stratified_coverage(Y, SETS, sample_weight=weights)
    np.testing.assert_array_equal(strata.weight, np.array([5, 1, 5, 4]) * 2.0**-1000)


def test_not_calibration_losses():
    # Set metrics take sets, not probabilities: they stay out of the registry
    # of calibration metrics (and its probability-based checks).
    names = {name for name, _ in all_metrics()}
    assert not names & {
        "set_coverage",
        "mean_set_size",
        "median_set_size",
        "worst_class_coverage",
    }


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: set_coverage([0, 1], [True, False]), "2-D"),
        (lambda: set_coverage([0, 1], [[0.5, 0.5], [1, 0]]), "booleans"),
        (lambda: set_coverage([0, 1, 1], [[1, 0], [0, 1]]), "inconsistent"),
        (lambda: set_coverage([0, 1, 3], [[1, 0], [0, 1], [1, 1]]), "distinct labels"),
        (lambda: mean_set_size(np.zeros((0, 3), bool)), "0 samples"),
        (
            lambda: mean_set_size([[1, 0], [0, 1]], sample_weight=[-1, 1]),
            "[Nn]egative",
        ),
        (
            lambda: size_stratified_coverage([0, 1], [[1, 0], [0, 1]], bins=[2, 1]),
            "bins",
        ),
        (
            # NaN compares false: it passed the increasing-edges check and
            # gave one stratum [1, nan] holding every size.
            lambda: size_stratified_coverage(
                [0, 1], [[1, 0], [0, 1]], bins=[1, np.nan]
            ),
            "bins",
        ),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_sparse_and_nullable_boolean_sets():
    # A scipy.sparse matrix was read as a 0-d object array ("got an array with
    # 0 dimension(s)"), and pandas' nullable "boolean" columns as objects
    # ("must hold booleans"); both now give the dense values.
    sparse = pytest.importorskip("scipy.sparse")
    pd = pytest.importorskip("pandas")
    for sets in (
        sparse.csr_matrix(SETS),
        sparse.coo_array(SETS.astype(int)),
        pd.DataFrame(SETS).astype("boolean"),
    ):
        assert set_coverage(Y, sets) == pytest.approx(3 / 5)
        assert mean_set_size(sets) == pytest.approx(8 / 5)
        np.testing.assert_allclose(classwise_coverage(Y, sets), [1 / 2, 1, 1 / 2])
    missing = pd.DataFrame(SETS).astype("boolean")
    missing.iloc[0, 0] = pd.NA
    with pytest.raises(ValueError, match="must hold booleans"):
        mean_set_size(missing)
