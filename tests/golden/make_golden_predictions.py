"""Write golden_predictions.npz: predict_proba of every public calibrator.

Run from the repository root, with one thread as under ``pytest -n 2``:
``OMP_NUM_THREADS=1 python tests/golden/make_golden_predictions.py``.
The file pins the predictions of the code as it stood before the package was
laid out by family (issue 20), so that the move can be shown to change no
number. Each calibrator is fitted with its default parameters (SMART with
``random_state=0``) on the whole validation split of two bundled sets and
predicts the first 300 test rows; the binary calibrators use the bundled
CIFAR-10 set's cat and dog rows as a two-column problem. The chunked fits
(``fit_chunks`` over four chunks) are pinned too.
"""

from importlib.metadata import version
from pathlib import Path

import numpy as np

from sklearn_calib.datasets import load_logits
from sklearn_calib.utils.discovery import all_calibrators

HERE = Path(__file__).resolve().parent
MULTICLASS_SETS = ["c10_densenet40_guo", "c100_densenetbc100_netcal"]
BINARY_ONLY = {"PlattScaling", "BetaCalibration", "QuadraticScaling"}
CHUNKED = ["TemperatureScaling", "VectorScaling", "HistogramBinning", "SMART"]
N_TEST = 300
PINNED_PACKAGES = ["torch", "numpy", "scipy", "scikit-learn"]


def build_fingerprint():
    """What besides the package versions sets the last digits of a fit.

    The same versions on another CPU (another vector instruction set, or
    the same one with other microarchitectural kernels) or with another
    thread count give other roundings: measured up to 1e-6 in probability
    for the iterative fits of the same wheels on two x86-64 machines.
    """
    import platform

    import torch

    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            names = [line for line in info if line.startswith("model name")]
        model = names[0].split(":", 1)[1].strip() if names else model
        with open("/proc/cpuinfo") as info:
            flags = [line for line in info if line.startswith("flags")]
        model += " | " + (flags[0].split(":", 1)[1].strip() if flags else "")
    except OSError:
        pass
    return {
        "machine": platform.machine(),
        "cpu": model,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": str(torch.get_num_threads()),
    }


def make_estimator(cls):
    params = {"random_state": 0} if cls.__name__ == "SMART" else {}
    if "device" in cls().get_params():
        params["device"] = "cpu"
    return cls(**params)


def binary_problem():
    data = load_logits("c10_densenet40_guo")

    def part(logits, y):
        rows = np.isin(y, [3, 5])
        return logits[rows][:, [3, 5]], (y[rows] == 5).astype(np.int64)

    return part(data.logits_val, data.y_val), part(data.logits_test, data.y_test)


def problems():
    for name in MULTICLASS_SETS:
        data = load_logits(name)
        yield name, (data.logits_val, data.y_val), (data.logits_test, data.y_test)
    yield "c10_cat_dog", *binary_problem()


# Calibrators added after the snapshot was written: nothing to pin them to
# (their own tests check them against independent solves).
AFTER_SNAPSHOT = {"BiasCorrectedTemperatureScaling"}


def golden_cases():
    """Yield (key, estimator, fit) for every pinned prediction."""
    for set_name, (X_val, y_val), (X_test, _) in problems():
        binary = X_val.shape[1] == 2
        for name, cls in all_calibrators():
            if name in AFTER_SNAPSHOT:
                continue
            if (name in BINARY_ONLY) != binary and name != "VennAbersCalibration":
                continue
            yield f"{set_name}/{name}", cls, X_val, y_val, X_test[:N_TEST], False
        if set_name == "c10_densenet40_guo":
            for name in CHUNKED:
                cls = dict(all_calibrators())[name]
                yield (
                    f"{set_name}/{name}/chunks",
                    cls,
                    X_val,
                    y_val,
                    X_test[:N_TEST],
                    True,
                )
    (X_val, y_val), (X_test, _) = binary_problem()
    cls = dict(all_calibrators())["PlattScaling"]
    yield "c10_cat_dog/PlattScaling/chunks", cls, X_val, y_val, X_test[:N_TEST], True


def predict(cls, X_val, y_val, X_test, chunked):
    estimator = make_estimator(cls)
    if chunked:
        bounds = np.linspace(0, len(y_val), 5).astype(int)
        chunks = [
            (X_val[a:b], y_val[a:b])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        estimator.fit_chunks(chunks)
    else:
        estimator.fit(X_val, y_val)
    return np.asarray(estimator.predict_proba(X_test), dtype=np.float64)


def main():
    golden = {}
    for key, cls, X_val, y_val, X_test, chunked in golden_cases():
        golden[key] = predict(cls, X_val, y_val, X_test, chunked)
        print(key, golden[key].shape, flush=True)
    for name in PINNED_PACKAGES:
        golden[f"version/{name}"] = np.array(version(name))
    for name, value in build_fingerprint().items():
        golden[f"build/{name}"] = np.array(value)
    np.savez_compressed(HERE / "golden_predictions.npz", **golden)


if __name__ == "__main__":
    main()
