"""Masked classes: ``-inf`` logits have probability exactly 0, everywhere.

Language models and many classification heads mask classes (vocabulary entries,
invalid answers) with ``-inf``, with ``np.finfo(dtype).min`` or with a sentinel
such as ``-1e9``. Driven by the registries: every calibrator must accept
``-inf`` entries and give them probability exactly 0 (log-probability ``-inf``);
where it holds mathematically, adding a masked column must leave the fit and the
other columns' probabilities unchanged. ``MASKED_EQUALITY`` states, for every
calibrator, whether that equality holds and why (or why not); a calibrator
missing from it fails ``test_table_covers_every_calibrator``.
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils import get_tags

from sklearn_calib.utils._testing import make_fast, make_logits
from sklearn_calib.utils.discovery import all_calibrators, all_metrics

CALIBRATORS = dict(all_calibrators())


@dataclass(frozen=True)
class MaskedEquality:
    """Does adding a masked column leave a calibrator's fit unchanged, and why.

    ``fitted(estimator, real)`` returns the fitted arrays that must agree, for
    the indices ``real`` of the unmasked columns among the estimator's columns.
    """

    holds: bool
    reason: str
    fitted: Callable | None = None


def _temperature(est, real):
    return [est.temperature_]


def _ensemble(est, real):
    return [est.temperature_, est.weights_]


def _spline(est, real):
    return [est.knot_values_]


def _smart(est, real):
    return [est.margin_mean_, est.margin_std_, *est.coefs_, *est.intercepts_]


def _isotonic(est, real):
    maps = range(len(est.X_thresholds_)) if est.mode == "top_label" else real
    return [a for m in maps for a in (est.X_thresholds_[m], est.y_thresholds_[m])]


def _histogram(est, real):
    maps = [0] if est.mode == "top_label" else real
    return [est.bin_edges_[maps], est.bin_values_[maps], est.bin_counts_[maps]]


def _vector(est, real):
    # The biases are defined up to a constant (returned summing to zero): the
    # masked class's bias has no data, so compare the others' differences.
    intercept = est.intercept_[real]
    return [est.coef_[real], intercept - intercept.mean()]


MASKED_EQUALITY = {
    "TemperatureScaling": MaskedEquality(
        True,
        "one temperature: a masked class adds exp(beta * -inf) = 0 to every sum "
        "of the NLL and of its derivatives, and -inf entries do not enter the "
        "bracket of beta (a finite fill only widens its flattening side)",
        _temperature,
    ),
    "SMART": MaskedEquality(
        True,
        "the margin is the gap between the two largest logits, never a masked "
        "one, and a masked class adds exactly 0 to every confidence's normaliser",
        _smart,
    ),
    "IsotonicCalibration": MaskedEquality(
        True,
        "one-vs-rest maps are fitted class by class (a masked class's own map is "
        "left out); the top-label confidence and its correctness do not change",
        _isotonic,
    ),
    "HistogramBinning": MaskedEquality(
        True,
        "one-vs-rest histograms are fitted class by class (a masked class's own "
        "histogram is left out); the top-label confidence does not change",
        _histogram,
    ),
    "VectorScaling": MaskedEquality(
        True,
        "softmax(w z + b): a masked column gives w_k (-inf) + b_k = -inf for any "
        "w_k > 0, adds nothing to the NLL and a zero gradient to its own (w_k, "
        "b_k), so the other classes' (w, b) solve the same problem",
        _vector,
    ),
    "BiasCorrectedTemperatureScaling": MaskedEquality(
        False,
        "a column masked on every calibration row is a class without a sample: "
        "its bias is held at 0 with a warning that vector scaling does not give "
        "(it reads such a column as masked), so the fit warns where the "
        "unmasked fit does not; the masked class still gets probability 0",
    ),
    "PlattScaling": MaskedEquality(
        False,
        "binary only: a third (masked) column makes the problem multiclass; rows "
        "with one of the two classes masked are covered by the probability-0 test",
    ),
    "MatrixScaling": MaskedEquality(
        False,
        "W z mixes the columns: a -inf input reaches every output through W "
        "unless its column of W is exactly 0, so a masked column is not the "
        "same as no column; the masked class still gets probability 0",
    ),
    "DirichletCalibration": MaskedEquality(
        False,
        "W log softmax(z) + b mixes the columns like matrix scaling (log 0 = "
        "-inf reaches every output); the masked class still gets probability 0",
    ),
    "EnsembleTemperatureScaling": MaskedEquality(
        True,
        "the temperature is fitted as temperature scaling; the mixture's uniform "
        "component is spread over the open classes of each row, so a masked "
        "column changes no term of the mixture's NLL",
        _ensemble,
    ),
    "SplineCalibration": MaskedEquality(
        True,
        "the spline maps the top-label confidence, which a masked column (zero "
        "probability, never the argmax) leaves unchanged",
        _spline,
    ),
    "BetaCalibration": MaskedEquality(
        False,
        "binary only: a third (masked) column makes the problem multiclass; rows "
        "with one of the two classes masked are covered by the probability-0 test",
    ),
    "QuadraticScaling": MaskedEquality(
        False,
        "binary only: a third (masked) column makes the problem multiclass; rows "
        "with one of the two classes masked are covered by the probability-0 test",
    ),
    "VennAbersCalibration": MaskedEquality(
        False,
        "one-vs-rest isotonic maps are fitted on every row, and a masked class's "
        "own map is one more problem whose output renormalisation divides by; "
        "the masked class still gets probability 0",
    ),
    "MarginTemperatureScaling": MaskedEquality(
        False,
        "its base is chosen by cross-validation among affine maps, and matrix "
        "scaling mixes the columns; the masked class still gets probability 0",
    ),
    "StructuredVectorScaling": MaskedEquality(
        False,
        "its penalty strengths grow with the number of columns (K^rho), and a "
        "finite sentinel column takes its share e / K of the uniform mixture; "
        "with -inf and rho=0 the fit of the other classes is unchanged "
        "(tests/scaling/test_structured.py)",
    ),
    "StructuredMatrixScaling": MaskedEquality(
        False,
        "W mixes the columns like matrix scaling, and its penalty strengths grow "
        "with the number of columns; the masked class still gets probability 0",
    ),
    "CalibratorSelector": MaskedEquality(
        False,
        "it chooses among candidates whose fits need not be unchanged (matrix "
        "scaling mixes the columns); the masked class still gets probability 0",
    ),
}

# Per-class affine maps: a column filled with a finite sentinel is an unseen
# class whose own parameters have no finite optimum, which they warn about.
WARNS_ON_FINITE_FILL = {"VectorScaling"}


def _params(names):
    return [pytest.param(name, id=name) for name in names]


def is_binary_only(name):
    return not get_tags(CALIBRATORS[name]()).classifier_tags.multi_class


def test_table_covers_every_calibrator():
    assert set(MASKED_EQUALITY) == set(CALIBRATORS), (
        "every calibrator needs a MASKED_EQUALITY entry stating whether a masked "
        "column leaves its fit unchanged"
    )
    for name, entry in MASKED_EQUALITY.items():
        assert entry.reason, name
        assert (entry.fitted is not None) == entry.holds, name


# --- a masked column leaves the fit unchanged -----------------------------------

FILLS = {
    "-inf": lambda dtype: -np.inf,
    "finfo.min": lambda dtype: np.finfo(dtype).min,
    "-1e9": lambda dtype: -1e9,
}
# Columns 1 and 5 of the masked data are masked; the others are the real ones.
MASKED_AT = (1, 5)
REAL = np.array([0, 2, 3, 4])


def _with_masked_columns(X, fill):
    out = np.empty((X.shape[0], X.shape[1] + len(MASKED_AT)), dtype=X.dtype)
    out[:, REAL] = X
    out[:, list(MASKED_AT)] = fill
    return out


def _fit_recording_warnings(estimator, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X, y)
    return sorted((w.category.__name__, str(w.message)) for w in caught)


def _equality_variants():
    for name in sorted(MASKED_EQUALITY):
        if not MASKED_EQUALITY[name].holds:
            continue
        variants = [{}]
        if name in ("IsotonicCalibration", "HistogramBinning"):
            variants.append({"mode": "top_label"})
        if name == "HistogramBinning":
            variants.append({"strategy": "quantile"})
        for params in variants:
            suffix = "-" + "-".join(params.values()) if params else ""
            yield pytest.param(name, params, id=name + suffix)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("name, params", list(_equality_variants()))
def test_masked_column_leaves_the_fit_unchanged(name, params, fill, dtype):
    X, y = make_logits(n_samples=1200, n_classes=len(REAL), seed=5, dtype=dtype)
    y = REAL[y]  # labels name the columns of the masked data
    masked = _with_masked_columns(X, FILLS[fill](dtype))
    estimator = make_fast(CALIBRATORS[name]).set_params(**params)
    # The reference sees the real columns only; its labels are their indices.
    reference = clone(estimator)
    expected_warnings = _fit_recording_warnings(reference, X, np.searchsorted(REAL, y))
    caught = _fit_recording_warnings(estimator, masked, y)
    if name in WARNS_ON_FINITE_FILL and fill != "-inf":
        # A finite fill is a class without samples whose own scale and bias
        # have no finite optimum: the fit says so and keeps its start.
        extra = [w for w in caught if "determine no finite scale" in w[1]]
        assert len(extra) == 1, caught
        caught.remove(extra[0])
    assert caught == expected_warnings

    # float32 sums over more columns round differently (SMART trains on them
    # for hundreds of steps); float64 agrees to the last bits.
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    extract = MASKED_EQUALITY[name].fitted
    for ours, theirs in zip(
        extract(estimator, REAL), extract(reference, np.arange(len(REAL))), strict=True
    ):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * 1e-3)

    proba = estimator.predict_proba(masked)
    np.testing.assert_allclose(
        proba[:, REAL], reference.predict_proba(X), rtol=rtol, atol=rtol * 1e-3
    )
    if fill == "-inf":
        assert np.all(proba[:, list(MASKED_AT)] == 0)
        assert np.all(np.isneginf(estimator.transform(masked)[:, list(MASKED_AT)]))
    else:
        # A finite fill is a logit: its probability underflows (the binning
        # methods floor every finite logit's probability at 1e-12).
        assert np.all(proba[:, list(MASKED_AT)] <= 1e-11)


# --- every calibrator: masked entries have probability exactly 0 ------------------


def llm_like_masks(n_samples, n_classes, y, seed):
    """Random masks that never hide the label; a tenth of the rows keep only it."""
    rng = np.random.default_rng(seed)
    masked = rng.random((n_samples, n_classes)) < 0.4
    only_label = rng.random(n_samples) < 0.1
    masked[only_label] = True
    masked[np.arange(n_samples), y] = False
    return masked


def masked_data(name, *, n_samples=600, seed=0, dtype=np.float64):
    n_classes = 2 if is_binary_only(name) else 6
    X, y = make_logits(n_samples=n_samples, n_classes=n_classes, seed=seed, dtype=dtype)
    masked = llm_like_masks(n_samples, n_classes, y, seed)
    X[masked] = -np.inf
    return X, y, masked


def _check_masked_proba(proba, masked):
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(proba[masked] == 0)
    single = (~masked).sum(axis=1) == 1
    np.testing.assert_array_equal(proba[single][~masked[single]], 1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", _params(sorted(CALIBRATORS)))
def test_masked_entries_have_probability_zero(name, dtype):
    X, y, masked = masked_data(name, dtype=dtype)
    estimator = make_fast(CALIBRATORS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SMART's small-sample warning
        estimator.fit(X, y)
    proba = estimator.predict_proba(X)
    assert proba.dtype == dtype
    _check_masked_proba(proba, masked)
    log_proba = estimator.transform(X)
    assert np.all(np.isneginf(log_proba[masked]))
    assert np.all(np.isfinite(log_proba[~masked]))
    # classes_ is range(n_classes): the predicted labels are column indices.
    predicted = estimator.predict(X)
    assert not np.any(masked[np.arange(len(y)), predicted])


@pytest.mark.parametrize(
    "name",
    _params(sorted(n for n, c in CALIBRATORS.items() if hasattr(c, "to_torch"))),
)
def test_to_torch_gives_masked_classes_probability_zero(name):
    torch = pytest.importorskip("torch")
    X, y, masked = masked_data(name, seed=1)
    estimator = make_fast(CALIBRATORS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        estimator.fit(X, y)
    module = estimator.to_torch()
    with torch.no_grad():
        log_proba = module(torch.from_numpy(X)).numpy()
    assert np.all(np.isneginf(log_proba[masked]))
    _check_masked_proba(np.exp(log_proba), masked)
    np.testing.assert_allclose(
        np.exp(log_proba), estimator.predict_proba(X), rtol=1e-9, atol=1e-12
    )


# --- metrics and the display: probabilities with exact zeros ---------------------

# The class-wise error is the mean of one error per class: a masked class adds
# a term of 0 (every probability 0, never the label), scaling the mean by
# K / (K + 1). Every other metric reads the true class's probability, the
# top-label confidence or sums over classes, to which a zero column adds 0.
MEAN_OVER_CLASSES = {"classwise_calibration_error"}


@pytest.mark.parametrize(
    "name, metric", all_metrics(), ids=[n for n, _ in all_metrics()]
)
def test_metrics_accept_exact_zero_columns(name, metric):
    from sklearn_calib.utils._math import softmax

    X, y = make_logits(n_samples=800, n_classes=4, seed=2)
    proba = softmax(X)
    with_zero = _with_masked_columns(proba, 0.0)
    expected = metric(y, proba)
    value = metric(REAL[y], with_zero)
    if name in MEAN_OVER_CLASSES:
        expected *= len(REAL) / with_zero.shape[1]
    assert np.isfinite(value)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "name, metric", all_metrics(), ids=[n for n, _ in all_metrics()]
)
def test_metrics_of_masked_calibrated_probabilities_are_finite(name, metric):
    X, y, masked = masked_data("TemperatureScaling", seed=3)
    proba = make_fast(CALIBRATORS["TemperatureScaling"]).fit(X, y).predict_proba(X)
    assert np.isfinite(metric(y, proba))


def test_reliability_display_with_masked_logits():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sklearn_calib.display import ReliabilityDisplay

    X, y, masked = masked_data("TemperatureScaling", seed=4)
    ts = make_fast(CALIBRATORS["TemperatureScaling"]).fit(X, y)
    try:
        display = ReliabilityDisplay.from_estimator(ts, X, y, n_bins=10)
        reference = ReliabilityDisplay.from_predictions(
            y, ts.predict_proba(X), n_bins=10
        )
        for attribute in ("accuracy", "confidence", "count"):
            values = np.asarray(getattr(display, attribute), dtype=float)
            assert np.all(np.isfinite(values[~np.isnan(values)]))
            np.testing.assert_array_equal(values, getattr(reference, attribute))
        classwise = ReliabilityDisplay.from_estimator(
            ts, X, y, n_bins=10, multiclass="classwise"
        )
        assert np.isfinite(classwise.ece)
    finally:
        plt.close("all")


def test_user_guide_masked_snippet_runs():
    # The snippet of docs/user_guide/logits.rst ("Masked classes") as written.
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "logits.rst"
    section = page.read_text(encoding="utf-8").split("Masked classes\n---", 1)[1]
    block = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", section)
    code = "\n".join(line[4:] for line in block[1].splitlines())
    printed = []
    exec(compile(code, str(page), "exec"), {"print": printed.append})
    temperatures = [
        float(t) for line in printed for t in re.findall(r"T = ([\d.]+)", line)
    ]
    alone = float(re.search(r"answers alone: ([\d.]+)", printed[0])[1])
    assert temperatures == [alone, alone]
