"""The chunked fits and metrics on a dask.distributed cluster of two processes.

The cluster is started and stopped by the test itself, on the loopback
interface, and lives for the few seconds of the test; it is skipped when
dask.distributed is not installed. Most of its time is the start of the two
worker processes and their import of torch.
"""

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling
from sklearn_calib.metrics import calibration_report, chunked_calibration_report
from sklearn_calib.utils._math import softmax

from ..conftest import load_shared

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

pytestmark = pytest.mark.distributed

METRICS = ["ece", "adaptive_ece", "classwise_ece", "mce", "rms_ce", "nll", "brier"]


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        # The newest CUDA build of torch alone takes about 850 MiB of a
        # worker's memory once imported: a 1 GB limit paused the workers and
        # the nanny killed them (CI, torch 2.15). A limit, not an allocation.
        memory_limit="4GiB",
        dashboard_address=None,
        host="127.0.0.1",
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_cluster_gives_the_in_memory_temperature_and_metrics(client):
    data = load_shared("c10_resnet50_cross_entropy_smart")
    X = np.concatenate([data["logits_val"], data["logits_test"]])
    y = np.concatenate([data["y_val"], data["y_test"]])
    # Scatter the chunks to the workers: every reduction then runs there.
    X_dask = da.from_array(X, chunks=(2000, 10)).persist()
    y_dask = da.from_array(y, chunks=2000).persist()
    assert len(client.scheduler_info()["workers"]) == 2

    expected = TemperatureScaling(device="cpu").fit(X, y)
    fitted = TemperatureScaling(device="cpu").fit(X_dask, y_dask)
    assert abs(fitted.temperature_ / expected.temperature_ - 1) <= 1e-10

    got = chunked_calibration_report(X_dask, y_dask, metrics=METRICS)
    want = calibration_report(y, softmax(X.copy()), metrics=METRICS, as_frame=False)[
        "model"
    ]
    for name in METRICS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12)

    proba = fitted.predict_proba(X_dask)
    np.testing.assert_array_equal(proba.compute(), fitted.predict_proba(X))
