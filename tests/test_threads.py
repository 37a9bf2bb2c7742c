"""torch's intra-op threads inside joblib workers and where the caller asks."""

import numpy as np
import pytest
from joblib import Parallel, delayed

from sklearn_calib import TemperatureScaling

torch = pytest.importorskip("torch")

from sklearn_calib._torch._threads import (  # noqa: E402
    limit_torch_threads,
    worker_thread_limit,
)


def _threads_in_block(n_threads=None):
    with limit_torch_threads(n_threads):
        return torch.get_num_threads()


def _default_threads_of_a_new_thread():
    return Parallel(n_jobs=1, backend="threading")(
        delayed(torch.get_num_threads)() for _ in range(1)
    )[0]


def test_no_limit_outside_workers():
    assert worker_thread_limit() is None
    before = torch.get_num_threads()
    assert _threads_in_block() == before
    assert torch.get_num_threads() == before


def test_caller_limit_is_applied_and_restored():
    before = torch.get_num_threads()
    assert _threads_in_block(1) == 1
    assert torch.get_num_threads() == before
    # A limit above the current count never raises it.
    assert _threads_in_block(before + 3) == before
    with pytest.raises(RuntimeError, match="boom"):
        with limit_torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


@pytest.mark.skipif(
    torch.get_num_threads() < 2, reason="torch runs on one thread here anyway"
)
def test_worker_threads_run_torch_on_one_thread(monkeypatch):
    # A fit in a joblib worker thread: every fit sees one torch thread, and
    # the worker threads' own setting is back to its default afterwards.
    seen = []
    original = TemperatureScaling._fit

    def spy(self, *args):
        seen.append(torch.get_num_threads())
        return original(self, *args)

    monkeypatch.setattr(TemperatureScaling, "_fit", spy)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=300)
    X = 2.0 * np.eye(3)[y] + rng.normal(size=(300, 3))
    fitted = Parallel(n_jobs=2, backend="threading")(
        delayed(TemperatureScaling(device="cpu").fit)(X, y) for _ in range(4)
    )
    assert seen == [1, 1, 1, 1]
    assert len({float(f.temperature_) for f in fitted}) == 1
    assert _default_threads_of_a_new_thread() >= 2


def test_worker_process_uses_joblib_thread_budget():
    # loky gives each of its n_jobs processes cpu_count // n_jobs threads.
    limits = Parallel(n_jobs=2, backend="loky")(
        delayed(worker_thread_limit)() for _ in range(2)
    )
    from joblib import cpu_count

    assert limits == [max(cpu_count() // 2, 1)] * 2


@pytest.mark.skipif(
    torch.get_num_threads() < 2, reason="torch runs on one thread here anyway"
)
def test_small_fits_run_torch_on_one_thread(monkeypatch):
    from sklearn_calib._torch._threads import SMALL_FIT_ELEMENTS

    seen = []
    original = TemperatureScaling._fit

    def spy(self, *args):
        seen.append(torch.get_num_threads())
        return original(self, *args)

    monkeypatch.setattr(TemperatureScaling, "_fit", spy)
    before = torch.get_num_threads()
    rng = np.random.default_rng(0)
    for n_rows in [50, SMALL_FIT_ELEMENTS // 4]:
        y = rng.integers(0, 4, size=n_rows)
        X = (2.0 * np.eye(4)[y] + rng.normal(size=(n_rows, 4))).astype(np.float32)
        TemperatureScaling(device="cpu").fit(X, y)
    assert seen == [1, before]
    assert torch.get_num_threads() == before


def test_chunk_tasks_off_the_main_thread_run_torch_on_one_thread():
    # A pass run by dask's threaded scheduler: each chunk's task sees one
    # torch thread (dask's pool already has about one thread per core); a
    # sequential pass on the main thread keeps the caller's count.
    import threading

    from sklearn_calib._chunks.first_pass import _counted_call

    seen = {}

    def record(logits, codes, weights):
        seen[threading.current_thread() is threading.main_thread()] = (
            torch.get_num_threads()
        )
        return 0.0

    X, y = np.zeros((4, 3)), np.array([0, 1, 2, 0])
    call = dict(func=record, label_codes=lambda y: y, dtype=np.float64, unit=1.0)
    _counted_call(X, y, None, **call)
    worker = threading.Thread(target=_counted_call, args=(X, y, None), kwargs=call)
    worker.start()
    worker.join()
    assert seen[True] == torch.get_num_threads()
    assert seen[False] == 1
