"""Matrix maps with classes that have no calibration sample (issue 21).

The diagonal of W is never penalised, so an absent class has no finite W_kk;
it keeps its temperature-scaling row and the fit is defined: weighted and
repeated rows agree, whatever the number of torch threads.
"""

import numpy as np
import pytest

from sklearn_calib import DirichletCalibration, MatrixScaling, TemperatureScaling

torch = pytest.importorskip("torch")


def _check_data():
    # scikit-learn's check_sample_weight_equivalence data: 15 rows, 30 logit
    # columns, labels in {0, 1, 2}, integer weights (some zero).
    rng = np.random.RandomState(42)
    X = rng.rand(15, 30)
    y = rng.randint(0, 3, size=15)
    sw = rng.randint(0, 5, size=15)
    return X, y, sw


def _fit(cls, X, y, sw=None, threads=None):
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with pytest.warns(UserWarning, match="27 have no calibration sample"):
            return cls(device="cpu").fit(X, y, sample_weight=sw)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cls", [MatrixScaling, DirichletCalibration])
def test_absent_classes_keep_the_temperature_row(cls):
    X, y, sw = _check_data()
    fitted = _fit(cls, X, y, sw)
    # Independent: the temperature solve of the same weighted data.
    ts = TemperatureScaling(device="cpu").fit(X, y, sample_weight=sw)
    absent = np.arange(3, 30)
    np.testing.assert_allclose(
        np.diag(fitted.coef_)[absent], 1.0 / ts.temperature_, rtol=1e-8
    )
    off = fitted.coef_[absent].copy()
    off[np.arange(27), absent] = 0.0
    assert not off.any()
    assert not fitted.intercept_[absent].any()
    # The present classes' calibrated logits stay within a few units of the
    # absent ones' (left free they sat thousands below).
    out = fitted.transform(X)
    assert np.isfinite(out).all() and out.min() > -50


@pytest.mark.parametrize("cls", [MatrixScaling, DirichletCalibration])
def test_weights_equal_repeated_rows_under_any_thread_count(cls):
    X, y, sw = _check_data()
    reference = _fit(cls, X.repeat(sw, axis=0), y.repeat(sw), threads=1)
    for threads in (1, 2, 3):
        weighted = _fit(cls, X, y, sw, threads=threads)
        np.testing.assert_allclose(
            weighted.transform(X), reference.transform(X), rtol=1e-9, atol=1e-9
        )
