"""Saving, loading and exporting every fitted estimator of the library.

Every calibrator found by discovery, bare and inside CalibratedClassifier, makes
pickle, joblib and skops round trips that predict exactly the same; every
``to_torch`` module reproduces ``transform`` (log ``predict_proba``) and still
does once scripted (``torch.export`` is tested in ``test_export.py``); and a
calibrator fitted with ``device="cuda"`` pickles to plain numpy state that
loads and predicts in a process without CUDA (and without torch at load time).
"""

import io
import os
import pickle
import pickletools
import subprocess
import sys
import textwrap
import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.utils import get_tags

from sklearn_calib import CalibratedClassifier, TemperatureScaling
from sklearn_calib.utils._testing import make_fast, make_logits
from sklearn_calib.utils.discovery import all_calibrators
from sklearn_calib.utils.persistence import skops_trusted_types

from .conftest import torch_jit_script

CALIBRATORS = [cls for _, cls in all_calibrators()]
IDS = [name for name, _ in all_calibrators()]
WITH_TO_TORCH = [cls for cls in CALIBRATORS if hasattr(cls, "to_torch")]


def _n_classes(cls, multiclass):
    """``multiclass`` classes, or 2 for a binary-only calibrator (its tags say)."""
    return multiclass if get_tags(make_fast(cls)).classifier_tags.multi_class else 2


def _features(n_classes):
    rng = np.random.default_rng(0)
    y = rng.integers(0, n_classes, size=1500)
    X = rng.normal(size=(1500, 5)) + 1.5 * np.eye(n_classes, 5)[y]
    return X, y


def _cases(cls):
    """Unfitted (estimator, X, y): the bare calibrator on logits, and the same
    calibrator in CalibratedClassifier on features."""
    logits_y = make_logits(n_samples=600, n_classes=_n_classes(cls, 4), seed=7)
    meta = CalibratedClassifier(LogisticRegression(), make_fast(cls), cv=3)
    return [(make_fast(cls), *logits_y), (meta, *_features(_n_classes(cls, 3)))]


@pytest.fixture(scope="module")
def fitted_cases():
    """``fitted_cases(cls)``: fitted ``_cases(cls)``, fitted once per module."""
    cache = {}

    def get(cls):
        if cls not in cache:
            cache[cls] = [(est.fit(X, y), X) for est, X, y in _cases(cls)]
        return cache[cls]

    return get


def _skops_round_trip(estimator):
    sio = pytest.importorskip("skops.io")
    data = sio.dumps(estimator)
    untrusted = set(sio.get_untrusted_types(data=data))
    assert untrusted <= set(skops_trusted_types()), untrusted
    return sio.loads(data, trusted=skops_trusted_types())


def _joblib_round_trip(estimator):
    buffer = io.BytesIO()
    joblib.dump(estimator, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


ROUND_TRIPS = {
    "pickle": lambda est: pickle.loads(pickle.dumps(est)),
    "joblib": _joblib_round_trip,
    "skops": _skops_round_trip,
}


@pytest.mark.parametrize("fmt", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("cls", CALIBRATORS, ids=IDS)
def test_round_trip_predicts_the_same(cls, fmt, fitted_cases):
    for estimator, X in fitted_cases(cls):
        restored = ROUND_TRIPS[fmt](estimator)
        assert type(restored) is type(estimator)
        assert restored.get_params().keys() == estimator.get_params().keys()
        np.testing.assert_array_equal(restored.classes_, estimator.classes_)
        np.testing.assert_array_equal(
            restored.predict_proba(X), estimator.predict_proba(X)
        )
        np.testing.assert_array_equal(restored.predict(X), estimator.predict(X))


def test_skops_load_refuses_untrusted_types_by_default(fitted_cases):
    sio = pytest.importorskip("skops.io")
    from skops.io.exceptions import UntrustedTypesFoundException

    calibrator, _ = fitted_cases(TemperatureScaling)[0]
    data = sio.dumps(calibrator)
    with pytest.raises(UntrustedTypesFoundException):
        sio.loads(data)


def test_skops_file_round_trip_with_listed_trusted_types(tmp_path, fitted_cases):
    sio = pytest.importorskip("skops.io")
    clf, X = fitted_cases(TemperatureScaling)[1]
    path = tmp_path / "calibrated.skops"
    sio.dump(clf, path)
    assert set(sio.get_untrusted_types(file=path)) <= set(skops_trusted_types())
    restored = sio.load(path, trusted=skops_trusted_types())
    np.testing.assert_array_equal(restored.predict_proba(X), clf.predict_proba(X))


def test_trusted_types_list_every_public_estimator():
    trusted = skops_trusted_types()
    expected = {f"{cls.__module__}.{cls.__qualname__}" for cls in CALIBRATORS}
    expected.add("sklearn_calib._meta.CalibratedClassifier")
    assert set(trusted) == expected
    assert trusted == sorted(trusted)


# --- to_torch ---


@pytest.mark.skipif(not WITH_TO_TORCH, reason="no calibrator has to_torch")
@pytest.mark.parametrize(
    "cls", WITH_TO_TORCH, ids=[cls.__name__ for cls in WITH_TO_TORCH]
)
@pytest.mark.parametrize("n_classes", [2, 4])
def test_to_torch_equals_log_predict_proba(cls, n_classes):
    torch = pytest.importorskip("torch")
    if _n_classes(cls, n_classes) != n_classes:
        pytest.skip(f"{cls.__name__} is binary only")
    X, y = make_logits(n_samples=600, n_classes=n_classes, seed=11)
    calibrator = make_fast(cls).fit(X, y)
    module = calibrator.to_torch()
    assert isinstance(module, torch.nn.Module)
    expected = np.log(calibrator.predict_proba(X))
    # TorchScript here; torch.export (one program per dtype) in test_export.py.
    scripted = torch_jit_script(module)
    for net in (module, scripted):
        with torch.no_grad():
            out = net(torch.from_numpy(X))
        assert out.dtype == torch.float64
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-9)
        with torch.no_grad():
            out32 = net(torch.from_numpy(X.astype(np.float32)))
        assert out32.dtype == torch.float32
        np.testing.assert_allclose(out32.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not WITH_TO_TORCH, reason="no calibrator has to_torch")
@pytest.mark.parametrize(
    "cls", WITH_TO_TORCH, ids=[cls.__name__ for cls in WITH_TO_TORCH]
)
def test_to_torch_binary_score_column(cls):
    torch = pytest.importorskip("torch")
    X, y = make_logits(n_samples=600, n_classes=2, seed=12)
    score = X[:, 1:] - X[:, :1]
    calibrator = make_fast(cls).fit(score, y)
    with torch.no_grad():
        out = calibrator.to_torch()(torch.from_numpy(score))
    np.testing.assert_allclose(
        out.numpy(), np.log(calibrator.predict_proba(score)), rtol=1e-6, atol=1e-9
    )


@pytest.mark.skipif(not WITH_TO_TORCH, reason="no calibrator has to_torch")
@pytest.mark.parametrize(
    "cls", WITH_TO_TORCH, ids=[cls.__name__ for cls in WITH_TO_TORCH]
)
def test_to_torch_needs_a_fitted_calibrator(cls):
    with pytest.raises(NotFittedError):
        make_fast(cls).to_torch()


# --- fitted with device="cuda", loaded and used on a CPU-only machine ---


def _torch_objects(value, path="estimator"):
    """Paths of torch objects anywhere in an estimator's fitted state."""
    if type(value).__module__.split(".")[0] == "torch":
        return [path]
    if isinstance(value, BaseEstimator):
        items = vars(value).items()
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return []
    found = []
    for key, item in items:
        found += _torch_objects(item, f"{path}.{key}")
    return found


def _pickle_names(data):
    """Every string in a pickle stream: module and class names included."""
    return {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}


def _fit_on_cuda(estimator, X, y):
    """Fit with device="cuda": the real thing on a GPU, the CPU fallback elsewhere."""
    import torch

    devices = [k for k in estimator.get_params() if k.split("__")[-1] == "device"]
    estimator.set_params(**dict.fromkeys(devices, "cuda"))
    if torch.cuda.is_available():
        return estimator.fit(X, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "device=", UserWarning)
        return estimator.fit(X, y)


_LOAD_WITHOUT_CUDA = textwrap.dedent(
    """
    import importlib.abc, pickle, sys
    import numpy as np

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "torch":
                raise ImportError(f"loading imported {name}")

    sys.meta_path.insert(0, NoTorch())  # loading must not need torch at all
    with open(sys.argv[1], "rb") as f:
        cases = pickle.load(f)
    assert "torch" not in sys.modules
    sys.meta_path.pop(0)  # predicting may use torch, on the CPU
    import torch
    assert not torch.cuda.is_available()
    for name, estimator, X, expected in cases:
        np.testing.assert_allclose(
            estimator.predict_proba(X), expected, rtol=1e-6, atol=1e-9, err_msg=name
        )
    print("ok", len(cases))
    """
)


def _load_in_cpu_only_process(cases, tmp_path):
    path = tmp_path / "cases.pkl"
    path.write_bytes(pickle.dumps(cases))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_CUDA, str(path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", str(len(cases))]


def test_cuda_fitted_state_is_plain_numpy_and_loads_without_cuda(tmp_path):
    cases = []
    for cls in CALIBRATORS:
        for estimator, X, y in _cases(cls):
            estimator = _fit_on_cuda(estimator, X, y)
            name = f"{type(estimator).__name__}({cls.__name__})"
            assert not _torch_objects(estimator), (name, _torch_objects(estimator))
            data = pickle.dumps(estimator)
            torch_names = {n for n in _pickle_names(data) if n.startswith("torch")}
            assert not torch_names, (name, torch_names)
            cases.append((name, estimator, X, estimator.predict_proba(X)))
    _load_in_cpu_only_process(cases, tmp_path)


@pytest.mark.cuda
def test_cuda_fit_predicts_the_same_in_a_process_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cases = []
    for cls in CALIBRATORS:
        if "device" not in make_fast(cls).get_params():
            continue
        X, y = make_logits(n_samples=600, n_classes=_n_classes(cls, 4), seed=7)
        on_gpu = make_fast(cls).set_params(device="cuda").fit(X, y)
        on_cpu = make_fast(cls).set_params(device="cpu").fit(X, y)
        assert not _torch_objects(on_gpu)
        np.testing.assert_allclose(
            on_gpu.predict_proba(X), on_cpu.predict_proba(X), rtol=1e-4, atol=1e-6
        )
        cases.append((cls.__name__, on_gpu, X, on_gpu.predict_proba(X)))
    if not cases:
        pytest.skip("no torch-backed calibrator")
    _load_in_cpu_only_process(cases, tmp_path)
