import os
import warnings
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist every worker is one process per core: torch's and
    # BLAS's own thread pools would then fight over the same cores.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    # numpy is imported before this file in a worker (by a plugin), so its
    # BLAS has already read the environment: it kept two threads, and the
    # golden predictions of matrix and Dirichlet scaling (written on one
    # thread, as the workers run torch) moved by 1.8e-7. Limit it here too.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)

import numpy as np
import pytest
from hypothesis import settings

# Property tests draw the same examples on every run, so a test run (and CI)
# is reproducible; HYPOTHESIS_PROFILE=explore draws new ones each time, to hunt
# for counterexamples (add what it finds as a plain regression test).
settings.register_profile("reproducible", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

SHARED_DATA = Path(
    os.environ.get(
        "SKLEARN_CALIB_SHARED_DATA",
        Path(__file__).resolve().parents[2] / "shared" / "data",
    )
)

PUBLIC_SETS = (
    sorted(p.stem for p in SHARED_DATA.glob("*.npz")) if SHARED_DATA.is_dir() else []
)


def load_shared(name):
    """Real logits from ../shared/data, or skip where the folder is absent."""
    path = SHARED_DATA / f"{name}.npz"
    if not path.is_file():
        pytest.skip(
            f"{path} not found: the real-logit sets live in ../shared/data beside "
            "the project checkout (not in a user's clone)."
        )
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture
def shared_data():
    return load_shared


def torch_jit_script(module):
    """``torch.jit.script(module)``, ignoring only torch's deprecation notice.

    torch 2.14 deprecates TorchScript: every ``torch.jit.script`` call emits a
    FutureWarning ("`torch.jit.script` is deprecated. Please switch to
    `torch.compile` or `torch.export`"), which the pytest configuration turns
    into an error. The modules still compile and run there, and users who
    deploy with TorchScript depend on that, so the tests keep scripting them
    and ignore exactly this message; any other warning stays an error.
    ``torch.export``, the supported path, is tested in ``test_export.py``.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`torch\.jit\.script` is deprecated",
            category=FutureWarning,
        )
        return torch.jit.script(module)
