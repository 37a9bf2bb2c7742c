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
import re
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

# SMART on a few hundred samples (enough for the persistence tests) warns
# that its temperatures are noisy there (asserted in test_smart.py).
_IGNORED = [
    "ignore:SMART was fitted on:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


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
    expected.add("sklearn_calib._meta.calibrated_classifier.CalibratedClassifier")
    expected.add("sklearn_calib.conformal.ConformalClassifier")
    expected.add("sklearn_calib.conformal.ConformalRiskClassifier")
    # What a CalibratorSelector's scorer_ holds: the scorer class and the
    # metric of each of the library's scorers.
    metrics = "sklearn_calib.metrics."
    expected.add(metrics + "_scorer._ClassesScorer")
    expected |= {
        metrics + "_calibration." + name
        for name in (
            "adaptive_calibration_error",
            "classwise_calibration_error",
            "expected_calibration_error",
            "maximum_calibration_error",
            "rms_calibration_error",
        )
    }
    expected |= {
        metrics + "_debiased.debiased_calibration_error",
        metrics + "_proper.brier_score",
        metrics + "_proper.log_loss",
        metrics + "_selective.aurc",
        metrics + "_selective.excess_aurc",
        metrics + "_scorer.mean_set_size_of_sets",
        metrics + "_scorer.median_set_size_of_sets",
        metrics + "_sets.set_coverage",
        metrics + "_sets.worst_class_coverage",
        metrics + "_smooth.smooth_calibration_error",
        # the metric of "neg_log_loss": scikit-learn's, for its number
        "sklearn.metrics._classification.log_loss",
    }
    assert set(trusted) == expected
    assert trusted == sorted(trusted)


def test_skops_scorers_of_predict_proba_load_as_themselves(fitted_cases):
    # Each scorer a CalibratorSelector can use: trusted by the list, and the
    # loaded scorer (its metric found by name) gives the same score.
    sio = pytest.importorskip("skops.io")
    from sklearn_calib.metrics._scorer import SCORERS

    calibrator, X = fitted_cases(TemperatureScaling)[0]
    y = calibrator.predict(X)
    y[::3] = calibrator.classes_[0]
    for name, scorer in SCORERS.items():
        if scorer._response_method != "predict_proba":
            continue
        data = sio.dumps(scorer)
        assert set(sio.get_untrusted_types(data=data)) <= set(skops_trusted_types())
        restored = sio.loads(data, trusted=skops_trusted_types())
        assert restored._score_func is scorer._score_func, name
        assert restored(calibrator, X, y) == scorer(calibrator, X, y), name


def _custom_scorer(estimator, X, y, sample_weight=None):
    from sklearn_calib.metrics import log_loss

    return -log_loss(y, estimator.predict_proba(X), labels=estimator.classes_)


def test_skops_selector_with_a_custom_scorer_is_not_trusted(fitted_cases):
    # A callable of the user's is not the library's to trust: loading it
    # stays refused until the caller names it.
    sio = pytest.importorskip("skops.io")
    from skops.io.exceptions import UntrustedTypesFoundException

    from sklearn_calib import CalibratorSelector

    X, y = make_logits(n_samples=300, n_classes=3, seed=5)
    selector = (
        make_fast(CalibratorSelector).set_params(scoring=_custom_scorer).fit(X, y)
    )
    data = sio.dumps(selector)
    untrusted = set(sio.get_untrusted_types(data=data)) - set(skops_trusted_types())
    assert untrusted == {f"{__name__}._custom_scorer"}
    with pytest.raises(UntrustedTypesFoundException):
        sio.loads(data, trusted=skops_trusted_types())


# --- a loaded fitted state is checked -------------------------------------------


def _nan_at_first(array):
    array = np.array(array, dtype=np.float64)
    array.flat[0] = np.nan
    return array


def _set_item(name, index, value):
    def edit(est):
        items = list(getattr(est, name))
        items[index] = value(items[index]) if callable(value) else value
        setattr(est, name, items)

    return edit


def _set(name, value):
    def edit(est):
        setattr(est, name, value(getattr(est, name)) if callable(value) else value)

    return edit


def _fitted_on_other_classes():
    """A fitted calibrator of 3 logit columns (the fitted cases have 2 or 4)."""
    return TemperatureScaling(device="cpu").fit(
        *make_logits(n_samples=90, n_classes=3, seed=3)
    )


def _with_duplicate_classes(calibrator):
    import copy

    edited = copy.copy(calibrator)  # not deepcopy: setstate is not called
    edited.__dict__ = dict(calibrator.__dict__)
    edited.classes_ = np.r_[edited.classes_[:-1], edited.classes_[0]]
    return edited


def _spline_point_at_certainty(spline):
    """A last table point at log(1 - p) = -inf, consistent in all three arrays."""
    spline.log_complements_ = np.r_[spline.log_complements_, -np.inf]
    spline.confidences_ = np.r_[spline.confidences_, 1.0]
    spline.calibrated_ = np.r_[spline.calibrated_, 1.0]


# Per calibrator: (attribute named in the error, edit of a fitted calibrator),
# each an edit that no fit produces and that would change predictions.
STATE_EDITS = {
    "TemperatureScaling": [
        ("temperature_", _set("temperature_", -1.0)),  # reverses the ranking
        ("temperature_", _set("temperature_", 0.0)),
        ("temperature_", _set("temperature_", np.nan)),
        ("temperature_", _set("temperature_", "2.0")),
    ],
    "BiasCorrectedTemperatureScaling": [
        ("temperature_", _set("temperature_", -1.0)),
        ("intercept_", _set("intercept_", _nan_at_first)),
        ("intercept_", _set("intercept_", lambda a: a[:-1])),
    ],
    "VectorScaling": [
        ("coef_", _set("coef_", _nan_at_first)),
        ("intercept_", _set("intercept_", lambda a: a[:-1])),
        ("coef_", _set("coef_", np.diag)),
    ],
    "MatrixScaling": [
        ("coef_", _set("coef_", np.diag)),
        ("intercept_", _set("intercept_", lambda a: a + np.inf)),
    ],
    "DirichletCalibration": [
        ("coef_", _set("coef_", _nan_at_first)),
        ("intercept_", _set("intercept_", lambda a: a[None])),
    ],
    "PlattScaling": [
        ("coef_", _set("coef_", lambda a: np.r_[a, a])),
        ("intercept_", _set("intercept_", _nan_at_first)),
    ],
    "IsotonicCalibration": [
        ("X_thresholds_[0]", _set_item("X_thresholds_", 0, lambda a: a[::-1])),
        ("y_thresholds_[1]", _set_item("y_thresholds_", 1, lambda a: a + 2.0)),
        ("y_thresholds_[2]", _set_item("y_thresholds_", 2, lambda a: a[:-1])),
        ("X_thresholds_", _set("X_thresholds_", lambda a: a[:-1])),
        ("mode", _set("mode", "ovo")),
    ],
    "HistogramBinning": [
        ("bin_values_", _set("bin_values_", lambda a: a - 0.5)),
        ("bin_edges_", _set("bin_edges_", lambda a: a[:, ::-1])),
        ("bin_counts_", _set("bin_counts_", lambda a: a[:, :-1])),
        ("bin_values_", _set("bin_values_", _nan_at_first)),
    ],
    "SMART": [
        ("margin_std_", _set("margin_std_", 0.0)),
        ("margin_mean_", _set("margin_mean_", np.inf)),
        ("coefs_[0]", _set_item("coefs_", 0, lambda a: a.T)),
        ("intercepts_[1]", _set_item("intercepts_", 1, _nan_at_first)),
        ("coefs_", _set("coefs_", lambda a: a[:1])),
    ],
    "BetaCalibration": [
        ("coef_", _set("coef_", np.array([-1.0, 1.0]))),  # a decreasing map
        ("coef_", _set("coef_", lambda a: a[:1])),
        ("intercept_", _set("intercept_", _nan_at_first)),
        ("intercept_", _set("intercept_", lambda a: np.r_[a, a])),
    ],
    "QuadraticScaling": [
        ("score_scale_", _set("score_scale_", 0.0)),
        ("score_scale_", _set("score_scale_", lambda s: -s)),
        ("scaled_coef_", _set("scaled_coef_", _nan_at_first)),
        ("scaled_coef_", _set("scaled_coef_", lambda a: -a)),  # coef_ disagrees
        ("intercept_", _set("intercept_", lambda a: a + np.inf)),
    ],
    "EnsembleTemperatureScaling": [
        ("temperature_", _set("temperature_", -1.0)),
        ("weights_", _set("weights_", lambda w: 2.0 * w)),  # off the simplex
        ("weights_", _set("weights_", np.array([1.5, -0.5, 0.0]))),
        ("weights_", _set("weights_", np.array([0.0, 0.0, 1.0]))),  # ties all
        ("weights_", _set("weights_", lambda w: w[:2])),
    ],
    "StructuredVectorScaling": [
        ("temperature_", _set("temperature_", -1.0)),
        ("mix_weight_", _set("mix_weight_", 0.7)),  # more uniform than data
        ("coef_", _set("coef_", _nan_at_first)),
        ("intercept_", _set("intercept_", lambda a: a[:-1])),
    ],
    "StructuredMatrixScaling": [
        ("mix_weight_", _set("mix_weight_", -0.1)),
        ("coef_", _set("coef_", np.diag)),
        ("intercept_", _set("intercept_", lambda a: a + np.inf)),
    ],
    "SplineCalibration": [
        ("log_complements_", _spline_point_at_certainty),  # NaN predictions
        ("log_complements_", _set("log_complements_", lambda a: a[::-1])),
        ("log_complements_", _set("log_complements_", lambda a: a + 1.0)),
        ("confidences_", _set("confidences_", lambda a: a[::-1])),
        ("confidences_", _set("confidences_", lambda a: a + 1.0)),
        ("calibrated_", _set("calibrated_", lambda a: a - 1.0)),
        ("calibrated_", _set("calibrated_", lambda a: a[:-1])),
        ("calibrated_", _set("calibrated_", lambda a: a[::-1])),  # decreasing
    ],
    "VennAbersCalibration": [
        ("problems_", _set("problems_", lambda a: a[:, ::-1])),
        ("offsets_", _set("offsets_", lambda a: a[::-1])),
        ("thresholds_", _set("thresholds_", lambda a: a[::-1])),
        ("p0_", _set("p0_", lambda a: a + 2.0)),
        ("p0_", _set("p0_", lambda a: a[:-1])),
        ("p1_", _set("p1_", lambda a: 0.0 * a)),  # below p0_
    ],
    "MarginTemperatureScaling": [
        ("knots_", _set("knots_", lambda a: a[::-1])),
        ("log_inverse_temperature_", _set("log_inverse_temperature_", _nan_at_first)),
        ("log_inverse_temperature_", _set("log_inverse_temperature_", lambda a: a[1:])),
        ("base_", _set("base_", "TemperatureScaling")),
        ("base_", _set("base_", lambda _: _fitted_on_other_classes())),
    ],
    "CalibratorSelector": [
        ("best_index_", _set("best_index_", 99)),
        ("best_estimator_", _set("best_estimator_", None)),
        (
            "best_estimator_",
            _set("best_estimator_", lambda _: _fitted_on_other_classes()),
        ),
        ("best_estimator_", _set("best_estimator_", TemperatureScaling())),  # unfitted
        # The nested calibrator's own state is checked as it is loaded.
        ("classes_", _set("best_estimator_", _with_duplicate_classes)),
    ],
}
# A fitted attribute of each calibrator, the first found deleted.
_DELETED = (
    "temperature_",
    "coef_",
    "X_thresholds_",
    "bin_edges_",
    "margin_mean_",
    "confidences_",
    "p0_",
    "knots_",
    "best_estimator_",
)
COMMON_STATE_EDITS = [
    ("classes_", _set("classes_", lambda a: np.r_[a[:-1], a[0]])),  # duplicate
    ("classes_", _set("classes_", lambda a: a[:1])),
    ("n_features_in_", _set("n_features_in_", lambda n: n + 3)),
    ("|".join(_DELETED), None),  # deleted
]


def _delete_a_fitted_attribute(est):
    for name in _DELETED:
        if hasattr(est, name):
            delattr(est, name)
            return
    raise AssertionError(f"no known fitted attribute on {type(est).__name__}")


def test_every_calibrator_has_state_edits():
    assert set(STATE_EDITS) == set(IDS)


@pytest.mark.parametrize("fmt", ["pickle", "skops"])
@pytest.mark.parametrize("cls", CALIBRATORS, ids=IDS)
def test_loading_an_edited_state_raises_naming_the_attribute(cls, fmt, fitted_cases):
    import copy

    calibrator, _ = fitted_cases(cls)[0]
    edits = STATE_EDITS[cls.__name__] + COMMON_STATE_EDITS
    for attribute, edit in edits:
        edited = copy.copy(calibrator)  # a shallow copy: setstate is not called
        edited.__dict__ = dict(calibrator.__dict__)
        (edit or _delete_a_fitted_attribute)(edited)
        data = pickle.dumps(edited) if fmt == "pickle" else None
        name = attribute if "|" in attribute else re.escape(attribute)
        # "Fitted attribute coef_ of ..." or "The 'mode' parameter of ..."
        with pytest.raises(ValueError, match=rf"(Fitted attribute |')({name})[ ']"):
            if fmt == "pickle":
                pickle.loads(data)
            else:
                _skops_round_trip(edited)


def test_loaded_negative_temperature_is_refused_not_applied(tmp_path, fitted_cases):
    # The case of issue 11: a trusted type with edited state, in a skops file.
    sio = pytest.importorskip("skops.io")
    ts, X = fitted_cases(TemperatureScaling)[0]
    path = tmp_path / "edited.skops"
    edited = pickle.loads(pickle.dumps(ts))
    edited.temperature_ = -1.0
    # What loading used to apply: every row's ranking reversed.
    assert np.all(edited.predict(X) == ts.classes_[X.argmin(axis=1)])
    sio.dump(edited, path)
    with pytest.raises(
        ValueError, match="temperature_ of TemperatureScaling must be > 0"
    ):
        sio.load(path, trusted=skops_trusted_types())


def test_a_state_of_another_class_is_refused_by_name(fitted_cases):
    # Found: a skops file of BiasCorrectedTemperatureScaling with the class
    # name edited to TemperatureScaling loaded and predicted without its
    # biases (4.4e-2 off), and one of TemperatureScaling read as vector
    # scaling failed with Python's AttributeError ('no attribute tol').
    import json
    import zipfile

    from sklearn_calib import BiasCorrectedTemperatureScaling, VectorScaling

    sio = pytest.importorskip("skops.io")
    bcts, _ = fitted_cases(BiasCorrectedTemperatureScaling)[0]
    ts, _ = fitted_cases(TemperatureScaling)[0]

    def renamed(estimator, cls):
        source = io.BytesIO(sio.dumps(estimator))
        target = io.BytesIO()
        with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
            for item in zin.infolist():
                data = zin.read(item.filename)
                if item.filename == "schema.json":
                    schema = json.loads(data)
                    schema["__class__"] = cls.__name__
                    schema["__module__"] = cls.__module__
                    data = json.dumps(schema).encode()
                zout.writestr(item, data)
        return target.getvalue()

    with pytest.raises(ValueError, match=r"TemperatureScaling holds \['tol'\]"):
        sio.loads(renamed(bcts, TemperatureScaling), trusted=skops_trusted_types())
    with pytest.raises(ValueError, match=r"VectorScaling lacks its parameters \['tol'"):
        sio.loads(renamed(ts, VectorScaling), trusted=skops_trusted_types())
    edited = pickle.loads(pickle.dumps(ts))
    del edited.device
    with pytest.raises(ValueError, match=r"lacks its parameters \['device'\]"):
        pickle.loads(pickle.dumps(edited))
    # Private attributes and the fitted ones are not parameters.
    edited = pickle.loads(pickle.dumps(ts))
    edited._cache = 1
    pickle.loads(pickle.dumps(edited))


def test_wrappers_of_another_class_are_refused_by_name(fitted_cases):
    # Found: a CalibratedClassifier or ConformalClassifier state lacking a
    # parameter failed with Python's AttributeError from get_params.
    from sklearn_calib.conformal import ConformalClassifier

    clf, X = fitted_cases(TemperatureScaling)[1]
    logits, y = make_logits(n_samples=300, n_classes=3, seed=2)
    for estimator in (clf, ConformalClassifier().fit(logits, y)):
        edited = pickle.loads(pickle.dumps(estimator))
        del edited.calibrator
        with pytest.raises(ValueError, match=r"lacks its parameters \['calibrator'\]"):
            pickle.loads(pickle.dumps(edited))
        edited = pickle.loads(pickle.dumps(estimator))
        edited.device = "cpu"
        with pytest.raises(ValueError, match=r"holds \['device'\], which are not"):
            pickle.loads(pickle.dumps(edited))


def test_loading_an_edited_calibrated_classifier_raises(fitted_cases):
    clf, _ = fitted_cases(TemperatureScaling)[1]
    edited = pickle.loads(pickle.dumps(clf))
    edited.calibrators_[0].classes_ = np.array([0, 7, 2])
    with pytest.raises(ValueError, match=r"calibrators_\[0\]\.classes_"):
        _skops_round_trip(edited)
    edited = pickle.loads(pickle.dumps(clf))
    edited.calibrators_ = edited.calibrators_[:-1]
    with pytest.raises(ValueError, match="calibrators_ .*must have 3 items"):
        pickle.loads(pickle.dumps(edited))
    edited = pickle.loads(pickle.dumps(clf))
    edited.calibrators_[1].temperature_ = np.nan
    with pytest.raises(ValueError, match="temperature_ of TemperatureScaling"):
        _skops_round_trip(edited)


def test_unfitted_and_older_files_still_load():
    unfitted = pickle.loads(pickle.dumps(TemperatureScaling(device="cpu")))
    assert unfitted.get_params()["device"] == "cpu"
    # A file written before the classes parameter existed.
    X, y = make_logits(n_samples=300, n_classes=3, seed=2)
    ts = TemperatureScaling(device="cpu").fit(X, y)
    del ts.classes
    restored = pickle.loads(pickle.dumps(ts))
    assert restored.get_params()["classes"] is None
    np.testing.assert_array_equal(restored.predict_proba(X), ts.predict_proba(X))


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
def test_to_torch_is_frozen(cls):
    torch = pytest.importorskip("torch")
    n_classes = _n_classes(cls, 4)
    X, y = make_logits(n_samples=600, n_classes=n_classes, seed=13)
    calibrator = make_fast(cls).fit(X, y)
    module = calibrator.to_torch()
    assert not [name for name, p in module.named_parameters() if p.requires_grad]
    # The calibrator behind a trainable layer, as when fine-tuning a network
    # with its calibration head; requires_grad_(True) on the parent is what
    # "unfreeze everything" code does.
    features = torch.from_numpy(X)
    layer = torch.nn.Linear(n_classes, n_classes, dtype=torch.float64)
    parent = torch.nn.Sequential(layer, module)
    parent.requires_grad_(True)
    assert not [name for name, p in module.named_parameters() if p.requires_grad]
    with torch.no_grad():
        before = module(features).clone()
    weight_before = layer.weight.detach().clone()
    optimizer = torch.optim.SGD(parent.parameters(), lr=0.5, weight_decay=0.1)
    loss = torch.nn.functional.nll_loss(parent(features), torch.from_numpy(y))
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = module(features)
    assert not torch.equal(layer.weight, weight_before)  # the step did happen
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    np.testing.assert_allclose(
        after.numpy(), np.log(calibrator.predict_proba(X)), rtol=1e-6, atol=1e-9
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


def test_skops_set_scorers_load_as_themselves():
    # The prediction-set scorers: trusted by the list, their metric found
    # again by name, and the loaded scorer gives the same score.
    sio = pytest.importorskip("skops.io")
    from sklearn_calib.conformal import ConformalClassifier
    from sklearn_calib.metrics._scorer import SCORERS

    X, y = make_logits(n_samples=400, n_classes=4, seed=5)
    conformal = ConformalClassifier(TemperatureScaling()).fit(X[:200], y[:200])
    set_scorers = {
        name: scorer
        for name, scorer in SCORERS.items()
        if scorer._response_method == ["predict_set"]
    }
    assert len(set_scorers) == 4
    for name, scorer in set_scorers.items():
        data = sio.dumps(scorer)
        assert set(sio.get_untrusted_types(data=data)) <= set(skops_trusted_types())
        restored = sio.loads(data, trusted=skops_trusted_types())
        assert restored._score_func is scorer._score_func, name
        assert restored(conformal, X[200:], y[200:]) == scorer(
            conformal, X[200:], y[200:]
        ), name


# --- ConformalClassifier --------------------------------------------------------


def _conformal_cases():
    from sklearn_calib.conformal import ConformalClassifier

    X, y = make_logits(n_samples=500, n_classes=4, seed=11)
    return [
        (ConformalClassifier(), X, y),
        (ConformalClassifier(conformity_score="aps", randomized=True), X, y),
        (ConformalClassifier(TemperatureScaling(), conditional="class"), X, y),
    ]


@pytest.mark.parametrize("fmt", sorted(ROUND_TRIPS))
def test_conformal_classifier_round_trip_gives_the_same_sets(fmt):
    for estimator, X, y in _conformal_cases():
        estimator.fit(X[:300], y[:300])
        restored = ROUND_TRIPS[fmt](estimator)
        for level in (None, 0.8):
            np.testing.assert_array_equal(
                restored.predict_set(X[300:], level),
                estimator.predict_set(X[300:], level),
            )
        np.testing.assert_array_equal(restored.quantile_, estimator.quantile_)


def _shift_scores(state):
    state["_group_scores"] = [s[::-1] for s in state["_group_scores"]]


def _conformal_edits():
    def set_state(name, value):
        def edit(state):
            state[name] = value(state[name]) if callable(value) else value

        return edit

    return [
        ("quantile_", set_state("quantile_", lambda q: q * 0.5)),  # smaller sets
        ("_group_scores", _shift_scores),  # unsorted
        ("_group_scores", set_state("_group_scores", lambda g: g * 2)),  # 2 groups
        (
            "_group_cum_weights",
            set_state("_group_cum_weights", lambda g: [-w for w in g]),
        ),
        ("_conditional", set_state("_conditional", "global")),
        ("_scoring", set_state("_scoring", lambda d: {**d, "conformity_score": "x"})),
        ("conformity_scores_", set_state("conformity_scores_", lambda a: a * np.nan)),
        ("classes_", set_state("classes_", lambda a: a[:1])),
    ]


@pytest.mark.parametrize("fmt", ["pickle", "skops"])
def test_conformal_classifier_edited_state_is_refused_by_name(fmt):
    import copy

    estimator, X, y = _conformal_cases()[0]
    estimator.fit(X, y)
    for attribute, edit in _conformal_edits():
        state = estimator.__getstate__()
        edit(state)
        edited = copy.copy(estimator)  # a shallow copy: setstate is not called
        edited.__dict__ = state  # the groups as saved: plain arrays
        data = pickle.dumps(edited) if fmt == "pickle" else None
        match = rf"Fitted attribute {re.escape(attribute)}"
        with pytest.raises(ValueError, match=match):
            if fmt == "pickle":
                pickle.loads(data)
            else:
                _skops_round_trip(edited)


def test_grid_search_over_conformal_sets_loads_with_skops():
    # The documented way to tune prediction sets: GridSearchCV with a set
    # scorer. Its file holds the library's types (all in the trusted list)
    # and scikit-learn's own splitter, which skops 0.16 leaves to the caller
    # (0.11, the floor, trusts it by default).
    sio = pytest.importorskip("skops.io")
    from sklearn.model_selection import GridSearchCV

    from sklearn_calib.conformal import ConformalClassifier
    from sklearn_calib.metrics import get_scorer

    X, y = make_logits(n_samples=600, n_classes=4, seed=1)
    search = GridSearchCV(
        ConformalClassifier(),
        {"conformity_score": ["lac", "aps"]},
        scoring=get_scorer("neg_mean_set_size"),
        cv=3,
    ).fit(X, y)
    data = sio.dumps(search)
    untrusted = set(sio.get_untrusted_types(data=data)) - set(skops_trusted_types())
    assert untrusted <= {"sklearn.model_selection._split.StratifiedKFold"}
    restored = sio.loads(data, trusted=skops_trusted_types() + sorted(untrusted))
    np.testing.assert_array_equal(
        restored.best_estimator_.predict_set(X), search.best_estimator_.predict_set(X)
    )
    assert restored.score(X, y) == search.score(X, y)
