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


def test_huge_weights_change_nothing_where_scale_is_free(calibrator, logits_y):
    """2,000-style weights of 1e306 (whose sum overflows) fit as unit weights."""
    X, y = logits_y
    if calibrator._weight_scale_matters():
        pytest.skip("this fit depends on the scale of the weights (documented)")
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 1.5, size=y.shape[0])
    expected = calibrator.fit(X, y, sample_weight=weights).predict_proba(X)
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
    if calibrator._weight_scale_matters():
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
