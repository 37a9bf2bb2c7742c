"""Numerical extremes over every calibrator: weight scale, huge and tiny logits.

Driven by the registry. Each case either fits, with the numbers checked, or
raises a ValueError naming the problem; it never hangs, never crashes deep
inside, and fit and predict accept the same inputs.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils import get_tags

from sklearn_calib.utils._testing import make_fast, make_logits
from sklearn_calib.utils.discovery import all_calibrators

# Logits and weights near the float range: numpy overflows in intermediate
# results (a score difference, a square, a product of weights) that the
# calibrators handle; the tests assert finite results or named errors.
_IGNORED = [
    "ignore:overflow encountered:RuntimeWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


CALIBRATORS = dict(all_calibrators())


def n_classes_for(name, wanted):
    binary_only = not get_tags(CALIBRATORS[name]()).classifier_tags.multi_class
    return 2 if binary_only else wanted


def _quiet_fit(estimator, X, y, **fit_params):
    with warnings.catch_warnings():
        # SMART warns below 1000 samples; bound warnings are beside the point.
        warnings.simplefilter("ignore", UserWarning)
        return estimator.fit(X, y, **fit_params)


# --- the scale of sample_weight changes nothing ----------------------------------

# PlattScaling's default targets follow scikit-learn's weighted Platt priors,
# (N+ + 1) / (N+ + 2) and 1 / (N- + 2) with N+- the weight sums of each class:
# they depend on the weights' scale by definition (weights of 1e-300 make both
# targets 1/2). Without target smoothing it is scale-free like every other method.
SCALE_FREE_PARAMS = {"PlattScaling": {"smooth_targets": False}}
# Venn-Abers counts weights as numbers of samples and the test point weighs 1:
# larger weights are more data, which narrows the interval (documented).
WEIGHTS_ARE_COUNTS = {"VennAbersCalibration"}
# An iterative fit that stops at its tolerance, not at an exact optimum: the
# weights divided by their largest differ in their last bit between scales,
# which moves the stopping point of the margin network's L-BFGS by ~1e-7.
STOPS_AT_TOLERANCE = {"MarginTemperatureScaling": 1e-5}


@pytest.mark.parametrize("scale", [1e-300, 1e-5, 1e5, 1e300])
@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_multiplying_every_weight_by_a_constant_changes_nothing(name, scale):
    X, y = make_logits(n_samples=400, n_classes=n_classes_for(name, 4), seed=3)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    estimator = make_fast(CALIBRATORS[name]).set_params(
        **SCALE_FREE_PARAMS.get(name, {})
    )
    reference = _quiet_fit(clone(estimator), X, y, sample_weight=weights)
    scaled = _quiet_fit(clone(estimator), X, y, sample_weight=weights * scale)
    if name in WEIGHTS_ARE_COUNTS:
        assert not np.allclose(scaled.predict_proba(X), reference.predict_proba(X))
        return
    rtol = STOPS_AT_TOLERANCE.get(name, 1e-9)
    np.testing.assert_allclose(
        scaled.predict_proba(X), reference.predict_proba(X), rtol=rtol, atol=1e-12
    )


@pytest.mark.parametrize("weight", [1e-310, 5e-324, 1e305])
def test_equal_weights_of_any_size_are_no_weights(weight):
    # All equal weights, down to the smallest subnormal: the unweighted fit.
    X, y = make_logits(n_samples=400, n_classes=4, seed=4)
    for name in (
        "TemperatureScaling",
        "SMART",
        "IsotonicCalibration",
        "HistogramBinning",
    ):
        plain = _quiet_fit(make_fast(CALIBRATORS[name]), X, y)
        weighted = _quiet_fit(
            make_fast(CALIBRATORS[name]), X, y, sample_weight=np.full(len(y), weight)
        )
        np.testing.assert_allclose(
            weighted.predict_proba(X), plain.predict_proba(X), rtol=1e-12, atol=1e-15
        )


# --- logits near the ends of the float range ---------------------------------------

MAGNITUDES = {"float32-3e38": (np.float32, 3e38), "float64-1e308": (np.float64, 1e308)}


def _magnitude_params():
    return [
        pytest.param(name, case, id=f"{name}-{case}")
        for name in sorted(CALIBRATORS)
        for case in sorted(MAGNITUDES)
    ]


@pytest.mark.parametrize("name, case", _magnitude_params())
def test_logits_near_the_float_range_fit_or_raise_by_name(name, case):
    dtype, magnitude = MAGNITUDES[case]
    X, y = make_logits(n_samples=300, n_classes=n_classes_for(name, 4), seed=6)
    huge = (X / np.abs(X).max() * magnitude).astype(dtype)
    estimator = make_fast(CALIBRATORS[name])
    try:
        _quiet_fit(estimator, huge, y)
    except ValueError as exc:
        assert "logit" in str(exc)
        return
    proba = estimator.predict_proba(huge)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_fit_and_predict_accept_the_same_tiny_logits(name):
    # float32 logits spread by 1e-40 (subnormal): a fit that succeeds must
    # predict on its own calibration data.
    X, y = make_logits(n_samples=400, n_classes=n_classes_for(name, 4), seed=3)
    tiny = (X / np.abs(X).max() * 1e-40).astype(np.float32)
    estimator = _quiet_fit(make_fast(CALIBRATORS[name]), tiny, y)
    proba = estimator.predict_proba(tiny)
    assert proba.dtype == np.float32
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)


# --- to_torch on the same extremes ----------------------------------------------

FLOAT32_EXTREMES = {"3e38": 3e38, "spread-1e-40": 1e-40}


@pytest.mark.parametrize("case", sorted(FLOAT32_EXTREMES))
@pytest.mark.parametrize(
    "name", sorted(n for n, c in CALIBRATORS.items() if hasattr(c, "to_torch"))
)
def test_to_torch_equals_predict_proba_on_float32_extremes(name, case):
    # float32 logits near its range differ by more than float32 holds, and
    # logits spread by 1e-40 fit scales beyond it: the module must compute as
    # predict_proba does, not turn them into inf or NaN.
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=300, n_classes=n_classes_for(name, 4), seed=6)
    logits = (X / np.abs(X).max() * FLOAT32_EXTREMES[case]).astype(np.float32)
    estimator = _quiet_fit(make_fast(CALIBRATORS[name]), logits, y)
    with torch.no_grad():
        log_proba = estimator.to_torch()(torch.as_tensor(logits))
    assert log_proba.dtype == torch.float32
    expected = estimator.predict_proba(logits.astype(np.float64))
    # Platt's score z1 - z0 of float32 logits near 3e38 is rounded to float32
    # by both paths alike (6e-5 from the float64 score).
    atol = 1e-4 if name == "PlattScaling" else 1e-6
    np.testing.assert_allclose(np.exp(log_proba.numpy()), expected, atol=atol)
    np.testing.assert_allclose(estimator.predict_proba(logits), expected, atol=atol)
