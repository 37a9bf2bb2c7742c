"""The shared softmax helpers against scipy, and their overflow behaviour."""

import numpy as np
import pytest
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import softmax as scipy_softmax

from sklearn_calib.utils._math import (
    log_softmax,
    row_blocks,
    scale_logits,
    softmax,
    top_label_correctness,
)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_log_softmax_match_scipy(dtype):
    z = (np.random.default_rng(0).normal(size=(50, 7)) * 30).astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(softmax(z), scipy_softmax(z, axis=1), rtol=rtol)
    np.testing.assert_allclose(
        log_softmax(z), scipy_log_softmax(z, axis=1), rtol=rtol, atol=1e-6
    )


def test_non_finite_calibrated_logits_are_refused_by_name():
    block = np.array([[0.0, 1.0], [np.inf, 1.0], [np.nan, 0.0]])
    for helper in (softmax, log_softmax):
        with pytest.raises(ValueError, match="2 row\\(s\\) overflowed"):
            helper(block)


def test_scale_logits_is_a_temperature_without_overflow():
    z = np.array([[1e300, 0.0, -1e300], [5e299, 1e300, 0.0], [1.0, 2.0, 3.0]])
    scaled = scale_logits(z, 1e10)
    assert not np.isposinf(scaled).any() and not np.isnan(scaled).any()
    np.testing.assert_array_equal(softmax(scaled)[:2], [[1, 0, 0], [0, 1, 0]])
    # Every factor takes the shifted product where the shift is finite.
    np.testing.assert_array_equal(scale_logits(z[2:], 0.5), (z[2:] - 3.0) * 0.5)
    # Rows spanning more than float64's range overflow in the shift: a factor
    # up to 1 then scales first, which keeps the finite entries finite.
    wide = np.array([[1.5e308, 0.0, -1.5e308]])
    np.testing.assert_array_equal(scale_logits(wide, 0.5), wide * 0.5)
    np.testing.assert_allclose(
        softmax(scale_logits(z[2:], 4.0)), scipy_softmax(4.0 * z[2:], axis=1)
    )
    per_row = np.array([[0.5], [2.0], [1.0]])
    np.testing.assert_allclose(
        softmax(scale_logits(z[2:].repeat(3, axis=0), per_row)),
        scipy_softmax(z[2:].repeat(3, axis=0) * per_row, axis=1),
    )


def test_row_blocks_cover_every_row_once():
    rows = list(row_blocks(1000, 30, max_elements=300))
    assert all(r.stop - r.start <= 10 for r in rows)
    covered = np.concatenate([np.arange(1000)[r] for r in rows])
    np.testing.assert_array_equal(covered, np.arange(1000))


def test_scale_logits_beyond_the_dtype_range_and_with_masked_entries():
    # float32 logits spread by 1e-40 are calibrated by 1 / T ~ 1e40, beyond
    # float32's range: applied in two representable factors.
    z = np.array([[1e-40, 0.0, -2e-40, -np.inf]], dtype=np.float32)
    scaled = scale_logits(z, 2e40)
    assert scaled.dtype == np.float32
    exact = (z.astype(np.float64) - z.max()) * 2e40
    np.testing.assert_allclose(scaled[:, :3], exact[:, :3], rtol=1e-6)
    assert np.isneginf(scaled[0, 3])
    for factor in (0.5, 4.0):  # both branches keep -inf (probability 0)
        assert np.isneginf(scale_logits(z, factor)[0, 3])
    np.testing.assert_array_equal(softmax(z)[0, 3], 0.0)
    np.testing.assert_array_equal(log_softmax(z)[0, 3], -np.inf)


@pytest.mark.parametrize("factor", [0.3, 1.0, 3.7])
def test_scale_logits_is_exact_far_from_zero(factor):
    # Logits offset by 1e15 (spacing 0.125) keep their exact differences; a
    # product taken before the shift would round them to the spacing of
    # 1e15 * factor and move the probabilities by up to 1e-2.
    z = np.random.default_rng(0).normal(size=(200, 5)) * 3 + 1e15
    exact = scipy_softmax((z - z.max(axis=1, keepdims=True)) * factor, axis=1)
    np.testing.assert_allclose(softmax(scale_logits(z, factor)), exact, rtol=1e-12)


def test_top_label_correctness_shares_tied_top_classes():
    scores = np.array(
        [
            [2.0, 1.0, 0.0],  # one top class, the label
            [2.0, 2.0, 0.0],  # two tied, the label among them
            [2.0, 2.0, 0.0],  # two tied, the label not among them
            [1.0, 1.0, 1.0],  # three tied
            [-np.inf, 0.5, 0.5],  # masked entry, two tied
            [0.0, 3.0, 1.0],  # one top class, not the label
        ]
    )
    codes = np.array([0, 1, 2, 2, 2, 0])
    np.testing.assert_array_equal(
        top_label_correctness(scores, codes), [1.0, 0.5, 0.0, 1 / 3, 0.5, 0.0]
    )
    # independent of the column order
    order = np.array([2, 0, 1])
    position = np.argsort(order)
    np.testing.assert_array_equal(
        top_label_correctness(scores[:, order], position[codes]),
        top_label_correctness(scores, codes),
    )
