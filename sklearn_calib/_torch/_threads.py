"""How many CPU threads torch may use during a fit, threadpoolctl-style.

scikit-learn's parallel workers limit the BLAS and OpenMP threads of the
libraries they call: joblib's process workers (loky) start with
``OMP_NUM_THREADS`` and friends set to ``cpu_count() // n_jobs``, so that
``n_jobs`` workers with their inner threads fill the cores once. torch keeps
its own intra-op thread count; a fit running in a joblib worker thread (the
``threading`` backend) would otherwise start as many torch threads as there
are cores in each worker, and ``n_jobs`` workers would oversubscribe the
cores ``n_jobs`` times (on 2 shared cores, OpenMP's spinning threads made
fits many times slower, measured in issue 21).

:func:`limit_torch_threads` sets ``torch.set_num_threads`` for the duration of
a fit and restores the previous setting after:

- inside a joblib worker (joblib's nesting level is 1 or more: a process
  worker of ``GridSearchCV(n_jobs=...)``, ``cross_validate(n_jobs=...)``, the
  selector's folds, or a worker thread), to the ``OMP_NUM_THREADS`` that
  joblib gave the worker process, or to 1 in a worker thread;
- for a fit on fewer than ``SMALL_FIT_ELEMENTS`` logits (rows times
  classes), to one thread: the passes of such a fit are too short to gain from
  a second thread, and on cores shared with other processes OpenMP's waiting
  threads made them 10 to 20 times slower in wall time (2 cores under a load
  of 14, 200 to 5,000 rows x 100 classes: MatrixScaling 15.5-17.4 s with two
  threads, 1.4-1.5 s with one; VectorScaling 1.6-3.2 s and 0.2-0.25 s;
  ``benchmarks/bench_margin_speed.py --part threads``);
- wherever the caller asks for ``n_threads``.

It never raises the thread count. torch's OpenMP backend keeps the count per
calling thread, so worker threads do not undo each other's setting. Outside
workers, ``threadpoolctl.threadpool_limits(limits=1)`` also limits torch's
OpenMP threads (it finds the same OpenMP runtime). This module imports torch
only when a limit applies and torch is loaded: a fit that does not use torch
never loads it.
"""

import os
import sys
import threading
from contextlib import contextmanager

# Below this many logits (rows x classes) a fit runs torch on one CPU thread.
SMALL_FIT_ELEMENTS = 2**20


def _omp_threads():
    """``OMP_NUM_THREADS`` as a positive integer, or None."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def worker_thread_limit():
    """torch threads for a fit here: None outside joblib workers.

    In a joblib worker process, the ``OMP_NUM_THREADS`` joblib set for it
    (``cpu_count() // n_jobs``, at least 1); in a worker thread, or a worker
    process without that variable, 1.
    """
    try:
        from joblib.parallel import get_active_backend
    except ImportError:  # pragma: no cover - joblib comes with scikit-learn
        return None
    backend, _ = get_active_backend()
    if getattr(backend, "nesting_level", 0) < 1:
        return None
    if threading.current_thread() is threading.main_thread():
        return _omp_threads() or 1
    return 1


def task_thread_limit():
    """torch threads for one chunk's task: 1 off the main thread, else None.

    dask's threaded scheduler and ``dask.distributed`` workers run the tasks
    of a pass on a pool of about as many threads as cores; each task's torch
    kernels with torch's default thread count would put cores x cores
    threads on the cores (a fit from a 4e6 x 10 memmap: 2.2-2.8 s for
    temperature scaling with torch's 2 threads per task, 1.6 s with 1, on 2
    cores). On the main thread (a sequential pass) nothing changes.
    """
    if threading.current_thread() is threading.main_thread():
        return worker_thread_limit()
    return 1


def fit_thread_limit(estimator, n_elements):
    """torch threads for ``estimator``'s fit on ``n_elements`` logits, or None.

    One thread below ``SMALL_FIT_ELEMENTS`` (``n_elements`` None: unknown,
    no such limit), else :func:`worker_thread_limit`. torch is imported here
    for an estimator with a ``device`` parameter (one that trains with torch),
    so that the limit applies to the first fit of a process too.
    """
    if "device" in estimator.get_params(deep=False):
        import torch  # noqa: F401
    limit = worker_thread_limit()
    if n_elements is not None and n_elements < SMALL_FIT_ELEMENTS:
        return 1
    return limit


@contextmanager
def limit_torch_threads(n_threads=None):
    """Run the block with at most ``n_threads`` torch CPU threads.

    ``None`` applies :func:`worker_thread_limit`. The previous count is
    restored on exit, also when the block raises.
    """
    limit = worker_thread_limit() if n_threads is None else int(n_threads)
    torch = sys.modules.get("torch")
    if limit is None or torch is None:
        yield
        return
    previous = torch.get_num_threads()
    if previous <= max(limit, 1):
        yield
        return
    torch.set_num_threads(max(limit, 1))
    try:
        yield
    finally:
        torch.set_num_threads(previous)
