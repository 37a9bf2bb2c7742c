"""bootstrap_interval: a request beyond what one array holds is refused at once."""

import numpy as np
import pytest

from sklearn_calib.metrics import bootstrap_interval, brier_score


@pytest.mark.parametrize("metric", [brier_score, lambda y, p: float(np.mean(p))])
def test_bootstrap_refuses_more_resamples_than_an_array_holds(metric):
    # 10**12 resamples ran for hours on the way to a MemoryError (the
    # resampled values are one array of n_resamples floats).
    y = np.array([0, 1, 1, 0, 1])
    p = np.array([0.2, 0.7, 0.6, 0.4, 0.9])
    with pytest.raises(ValueError, match="n_resamples=1000000000000 needs"):
        bootstrap_interval(metric, y, p, n_resamples=10**12, random_state=0)
    result = bootstrap_interval(metric, y, p, n_resamples=20, random_state=0)
    assert result.resamples.shape == (20,)
