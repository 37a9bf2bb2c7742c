"""Every ``to_torch`` module exports with ``torch.export``.

``torch.export`` is the deployment path torch supports going forward
(TorchScript is deprecated from torch 2.14). For every calibrator with
``to_torch`` found by discovery, the fitted module is exported with a dynamic
batch dimension, and the exported program must give what the eager module
gives and what ``predict_proba`` gives (log of it), on the real CIFAR-10 logits
bundled with the package. An exported program is specialised to the dtype of
its example input, so float32 and float64 are each exported and checked.
"""

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import get_tags

from sklearn_calib.datasets import load_logits
from sklearn_calib.utils._testing import make_fast
from sklearn_calib.utils.discovery import all_calibrators

from .conftest import torch_jit_script

torch = pytest.importorskip("torch")

WITH_TO_TORCH = [(n, c) for n, c in all_calibrators() if hasattr(c, "to_torch")]
DTYPES = {
    "float32": (np.float32, torch.float32),
    "float64": (np.float64, torch.float64),
}
# float64 exports run the same kernels as the eager module; float32 leaves
# room for a reordered reduction.
TOLERANCE = {
    "float32": {"rtol": 1e-5, "atol": 1e-5},
    "float64": {"rtol": 1e-12, "atol": 1e-12},
}


def _is_multiclass(cls):
    return get_tags(make_fast(cls)).classifier_tags.multi_class


@pytest.fixture(scope="module")
def fitted():
    """``fitted(cls, layout)``: (calibrator, test logits), fitted once per module.

    ``layout`` is ``"columns"`` (the 10 logit columns of a CIFAR-10
    DenseNet-40; the rows of classes 0 and 1 and their two columns for a
    binary-only calibrator) or ``"score"`` (those rows' single score column
    z_1 - z_0).
    """
    data = load_logits("c10_densenet40_guo")
    cache = {}

    def get(cls, layout):
        key = (cls, layout)
        if key not in cache:
            if layout == "columns" and _is_multiclass(cls):
                X, y = data.logits_val[:2000], data.y_val[:2000]
                X_test = data.logits_test[:3000]
            else:
                # ~2,000 test rows hold classes 0 and 1 (~1,000 validation
                # rows, fewer than SMART wants): fit there, check on the rest.
                val, test = data.y_val < 2, data.y_test < 2
                X, y = data.logits_test[test][:, :2], data.y_test[test]
                X_test = data.logits_val[val][:, :2]
                if layout == "score":
                    X, X_test = X[:, 1:] - X[:, :1], X_test[:, 1:] - X_test[:, :1]
            with warnings.catch_warnings():
                # The export must equal the module whatever the fitted values;
                # MarginTemperatureScaling's margin fit on the two-class score
                # rows ends at its objective's float64 rounding, a gradient of
                # 1.7e-10 against tol=1e-10 (L-BFGS-B: ABNORMAL line search).
                warnings.filterwarnings(
                    "ignore",
                    "MarginTemperatureScaling stopped after",
                    ConvergenceWarning,
                )
                calibrator = make_fast(cls).fit(X.astype(np.float64), y)
            cache[key] = calibrator, X_test
        return cache[key]

    return get


def _export(module, example):
    batch = torch.export.Dim("batch")
    return torch.export.export(module, (example,), dynamic_shapes=({0: batch},))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("layout", ["columns", "score"])
@pytest.mark.parametrize(
    "cls", [c for _, c in WITH_TO_TORCH], ids=[n for n, _ in WITH_TO_TORCH]
)
def test_exported_program_equals_module_and_predict_proba(fitted, cls, layout, dtype):
    calibrator, X_test = fitted(cls, layout)
    np_dtype, torch_dtype = DTYPES[dtype]
    X = X_test.astype(np_dtype)
    module = calibrator.to_torch()
    program = _export(module, torch.from_numpy(X[:64]))
    exported = program.module()

    # Batch sizes other than the example's, down to a single row.
    for rows in (slice(None), slice(0, 7), slice(5, 6)):
        logits = torch.from_numpy(X[rows])
        with torch.no_grad():
            out, eager = exported(logits), module(logits)
        assert out.dtype == torch_dtype
        assert out.shape == (len(X[rows]), max(X.shape[1], 2))
        np.testing.assert_allclose(out.numpy(), eager.numpy(), **TOLERANCE[dtype])

    with torch.no_grad():
        out = exported(torch.from_numpy(X)).numpy()
    proba = calibrator.predict_proba(X)
    np.testing.assert_allclose(np.exp(out), proba, **TOLERANCE[dtype])
    # log predict_proba wherever it is representable (not underflowed to 0);
    # float32 rounding of a probability near 1 shows as ~1e-7 in its log.
    shown = proba > np.finfo(np_dtype).tiny
    log_tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == "float32" else {}
    np.testing.assert_allclose(
        out[shown], np.log(proba[shown]), **(log_tolerance or TOLERANCE[dtype])
    )


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize(
    "cls", [c for _, c in WITH_TO_TORCH], ids=[n for n, _ in WITH_TO_TORCH]
)
def test_exported_program_saves_and_loads(fitted, cls, dtype, tmp_path):
    calibrator, X_test = fitted(cls, "columns")
    X = torch.from_numpy(X_test.astype(DTYPES[dtype][0]))
    program = _export(calibrator.to_torch(), X[:64])
    path = tmp_path / "calibrator.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path).module()
    with torch.no_grad():
        np.testing.assert_array_equal(loaded(X).numpy(), program.module()(X).numpy())


def _guide_snippet():
    """The user guide's code block that saves an exported program."""
    text = (
        Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "classifier.rst"
    ).read_text(encoding="utf-8")
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)", text)
    found = [b for b in blocks if "torch.export.save" in b]
    assert len(found) == 1, "docs/user_guide/classifier.rst: one export snippet"
    return textwrap.dedent(found[0])


def test_user_guide_export_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(_guide_snippet(), "classifier.rst", "exec"), namespace)
    data, ts = namespace["data"], namespace["ts"]
    np.testing.assert_allclose(
        namespace["log_proba"].numpy(),
        ts.transform(data.logits_test),
        rtol=1e-5,
        atol=1e-5,
    )
    # The saved program loads in a process where sklearn_calib cannot be imported.
    script = (
        "import sys, torch\n"
        "sys.modules['sklearn_calib'] = None\n"
        "program = torch.export.load('calibrator.pt2').module()\n"
        "print(program(torch.zeros(3, 10)).shape)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch.Size([3, 10])"


def test_torch_jit_script_helper_ignores_only_the_deprecation(monkeypatch):
    # The TorchScript tests ignore torch 2.14's deprecation notice and nothing
    # else: any other FutureWarning from scripting stays an error.
    module = torch.nn.Identity()

    def deprecated(m):
        warnings.warn(
            "`torch.jit.script` is deprecated. Please switch to `torch.compile` "
            "or `torch.export`.",
            FutureWarning,
            stacklevel=2,
        )
        return m

    def other_warning(m):
        warnings.warn("some other change", FutureWarning, stacklevel=2)
        return m

    monkeypatch.setattr(torch.jit, "script", deprecated)
    assert torch_jit_script(module) is module
    monkeypatch.setattr(torch.jit, "script", other_warning)
    with pytest.raises(FutureWarning, match="some other change"):
        torch_jit_script(module)


def test_tests_script_modules_only_through_the_helper():
    # A direct torch.jit.script call passes with torch 2.13 and fails with the
    # newest torch (its deprecation FutureWarning is an error here).
    from pathlib import Path

    here = Path(__file__).parent
    direct = [
        str(path.relative_to(here))
        for path in sorted(here.rglob("*.py"))
        if path.name != "conftest.py"
        and path != Path(__file__)
        and "torch.jit.script(" in path.read_text()
    ]
    assert not direct, f"use conftest.torch_jit_script in {direct}"


@pytest.mark.parametrize(
    "cls", [c for _, c in WITH_TO_TORCH], ids=[n for n, _ in WITH_TO_TORCH]
)
def test_half_precision_logits_give_what_predict_proba_gives(cls):
    # Fitted on under-confident logits, the scales exceed 1: logits in the
    # thousands overflow half precision's 65504 once scaled, and inf - inf
    # made the modules' output NaN. They compute half precision in float32,
    # as predict_proba does, and return it in the input's dtype.
    from sklearn_calib.utils._testing import make_logits

    n_classes = 3 if _is_multiclass(cls) else 2
    X, y = make_logits(n_samples=600, n_classes=n_classes, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-sample advice of SMART
        calibrator = make_fast(cls).fit(0.05 * X, y)
    z = np.array([[2e4, 0.0, -2e4], [1.5e4, 1.499e4, 0.0], [1.5, 0.2, -3.0]])
    z = z[:, :n_classes].astype(np.float16)
    with torch.no_grad():
        out = calibrator.to_torch()(torch.from_numpy(z))
    assert out.dtype == torch.float16
    assert not torch.isnan(out).any()
    np.testing.assert_allclose(
        np.exp(out.double().numpy()), calibrator.predict_proba(z), atol=2e-3
    )


@pytest.mark.parametrize("name", ["BetaCalibration", "QuadraticScaling"])
def test_binary_feature_modules_clip_as_transform_on_float32_extremes(name):
    # Scores near float32's range: transform clips the calibrated logit at a
    # quarter of float32's largest value; the module clipped at float64's and
    # its float32 output held -inf, the mark of a masked class.
    import sklearn_calib

    rng = np.random.default_rng(10)
    y = rng.integers(0, 2, size=300)
    s = (3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=300))[:, None]
    calibrator = getattr(sklearn_calib, name)().fit(s, y)
    z = np.array([[3e38], [-3e38], [1.5]], dtype=np.float32)
    with torch.no_grad():
        out = calibrator.to_torch()(torch.from_numpy(z)).numpy()
    expected = calibrator.transform(z)
    assert out.dtype == np.float32 and np.isfinite(out).all()
    np.testing.assert_allclose(out, expected, rtol=1e-6)
