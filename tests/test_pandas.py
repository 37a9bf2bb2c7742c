"""pandas in and out: DataFrame logits and features, set_output, metric tables.

Feature-name handling is scikit-learn's own (validate_data), so the references
are scikit-learn's documented behaviour: names recorded from string columns,
a ValueError for other names at prediction, a UserWarning for a frame/array
mix-up; and set_output(transform="pandas") names the columns after
get_feature_names_out, here the class labels.
"""

import warnings

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.utils import get_tags

from sklearn_calib import CalibratedClassifier, TemperatureScaling
from sklearn_calib.utils._testing import make_fast, make_logits
from sklearn_calib.utils.discovery import all_calibrators, all_metrics

pd = pytest.importorskip("pandas")

# SMART on a few hundred samples (enough for the container tests) warns
# that its temperatures are noisy there (asserted in test_smart.py).
_IGNORED = [
    "ignore:SMART was fitted on:UserWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


CALIBRATORS = [cls for _, cls in all_calibrators()]
IDS = [name for name, _ in all_calibrators()]
CLASS_NAMES = np.array(["ant", "bee", "cat", "dog"])


def _n_classes(estimator, multiclass):
    """``multiclass`` classes, or 2 for a binary-only calibrator (its tags say)."""
    return multiclass if get_tags(estimator).classifier_tags.multi_class else 2


@pytest.fixture(params=CALIBRATORS, ids=IDS)
def calibrator(request):
    return make_fast(request.param)


@pytest.fixture
def names(calibrator):
    """The class names of ``frame_y``."""
    return CLASS_NAMES[: _n_classes(calibrator, 4)]


@pytest.fixture
def frame_y(names):
    X, y = make_logits(n_samples=600, n_classes=len(names), seed=5)
    index = pd.Index(np.arange(1000, 1600), name="image_id")
    frame = pd.DataFrame(X, columns=[f"logit_{c}" for c in names], index=index)
    return frame, pd.Series(names[y], index=index, name="label")


# --- DataFrame logits in ---


def test_feature_names_recorded_and_checked(calibrator, frame_y):
    frame, y = frame_y
    calibrator.fit(frame, y)
    np.testing.assert_array_equal(calibrator.feature_names_in_, frame.columns)
    assert calibrator.n_features_in_ == frame.shape[1]
    expected = (
        clone(calibrator)
        .fit(frame.to_numpy(), y.to_numpy())
        .predict_proba(frame.to_numpy())
    )
    np.testing.assert_allclose(calibrator.predict_proba(frame), expected, atol=1e-10)
    renamed = frame.rename(columns={"logit_ant": "logit_ape"})
    with pytest.raises(ValueError, match="feature names should match"):
        calibrator.predict_proba(renamed)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        calibrator.predict_proba(frame.to_numpy())


def test_no_feature_names_from_arrays_or_integer_columns(calibrator, frame_y):
    frame, y = frame_y
    calibrator.fit(frame.to_numpy(), y)
    assert not hasattr(calibrator, "feature_names_in_")
    with pytest.warns(UserWarning, match="fitted without feature names"):
        calibrator.predict_proba(frame)
    integer_columns = pd.DataFrame(frame.to_numpy())
    calibrator.fit(integer_columns, y)
    assert not hasattr(calibrator, "feature_names_in_")


def test_labels_from_categorical_series(calibrator, frame_y, names):
    frame, y = frame_y
    categorical = y.astype(pd.CategoricalDtype(categories=list(names)))
    calibrator.fit(frame, categorical)
    np.testing.assert_array_equal(calibrator.classes_, names)
    plain = clone(calibrator).fit(frame, y.to_numpy())
    np.testing.assert_allclose(
        calibrator.predict_proba(frame), plain.predict_proba(frame), atol=1e-10
    )


# --- set_output(transform="pandas") out ---


def test_set_output_pandas_names_columns_after_classes(calibrator, frame_y, names):
    frame, y = frame_y
    reference = clone(calibrator).fit(frame, y).transform(frame)
    calibrator.set_output(transform="pandas").fit(frame, y)
    out = calibrator.transform(frame)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(names)
    pd.testing.assert_index_equal(out.index, frame.index)
    np.testing.assert_allclose(out.to_numpy(), reference, atol=1e-12)
    np.testing.assert_allclose(
        np.exp(out).sum(axis=1).to_numpy(), np.ones(len(frame)), rtol=1e-10
    )


def test_global_transform_output_and_integer_classes(calibrator):
    n_classes = _n_classes(calibrator, 3)
    X, y = make_logits(n_samples=600, n_classes=n_classes, seed=6)
    with sklearn.config_context(transform_output="pandas"):
        out = calibrator.fit(X, y).transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == [str(k) for k in range(n_classes)]
    assert out.dtypes.unique().tolist() == [np.float64]


def test_binary_score_column_frame_gives_two_class_columns(calibrator):
    X, y = make_logits(n_samples=600, n_classes=2, seed=8)
    score = pd.DataFrame({"score": X[:, 1] - X[:, 0]})
    labels = np.array(["neg", "pos"])[y]
    out = calibrator.set_output(transform="pandas").fit(score, labels).transform(score)
    assert list(out.columns) == ["neg", "pos"]
    assert out.shape == (600, 2)


def test_pipeline_passes_class_names_downstream(calibrator, frame_y, names):
    frame, y = frame_y
    pipe = make_pipeline(calibrator, LogisticRegression()).set_output(
        transform="pandas"
    )
    pipe.fit(frame, y)
    np.testing.assert_array_equal(pipe[-1].feature_names_in_, names)
    np.testing.assert_array_equal(pipe[0].feature_names_in_, frame.columns)


def test_columns_named_after_the_classes_in_another_order_warn(calibrator, names):
    # A calibrator fitted with unsorted classes= hands the next one a frame
    # whose columns are the classes in that order; without classes= the next
    # one read column j as the j-th sorted class, silently (test accuracy
    # 0.74 -> 0.46 for vector scaling after temperature scaling).
    X, y = make_logits(n_samples=600, n_classes=len(names), seed=5)
    order = names[::-1]
    first = TemperatureScaling(classes=order).set_output(transform="pandas")
    log_proba = first.fit(X, order[y]).transform(X)
    assert list(log_proba.columns) == list(order)
    # Read as the wrong classes, the columns rank them against the labels: the
    # temperature maps also warn there that T was clamped (recorded too).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clone(calibrator).fit(log_proba, order[y])
    messages = [str(w.message) for w in caught if w.category is UserWarning]
    assert any("named after the classes but in another" in m for m in messages)
    stated = clone(calibrator).set_params(classes=order)
    in_order = log_proba[sorted(order)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="The columns of X are named")
        stated.fit(log_proba, order[y])  # classes= says which column is which
        clone(calibrator).fit(in_order, order[y])  # the names agree


def test_float32_frame_stays_float32(calibrator, frame_y):
    frame, y = frame_y
    frame32 = frame.astype(np.float32)
    out = calibrator.set_output(transform="pandas").fit(frame32, y).transform(frame32)
    assert out.dtypes.unique().tolist() == [np.float32]


# --- CalibratedClassifier on DataFrame features ---


@pytest.mark.parametrize("cls", CALIBRATORS, ids=IDS)
def test_calibrated_classifier_records_estimator_feature_names(cls):
    labels_of = np.array(["x", "y", "z"])[: _n_classes(make_fast(cls), 3)]
    rng = np.random.default_rng(0)
    y = rng.integers(0, len(labels_of), size=1500)
    frame = pd.DataFrame(
        rng.normal(size=(1500, 4)) + np.eye(3, 4)[y], columns=["a", "b", "c", "d"]
    )
    labels = pd.Series(labels_of[y])
    clf = CalibratedClassifier(LogisticRegression(), make_fast(cls), cv=3)
    clf.fit(frame, labels)
    np.testing.assert_array_equal(clf.feature_names_in_, frame.columns)
    assert clf.n_features_in_ == 4
    for estimator in clf.estimators_:
        np.testing.assert_array_equal(estimator.feature_names_in_, frame.columns)
    np.testing.assert_array_equal(clf.classes_, labels_of)
    array_fit = clone(clf).fit(frame.to_numpy(), labels.to_numpy())
    np.testing.assert_allclose(
        clf.predict_proba(frame), array_fit.predict_proba(frame.to_numpy()), atol=1e-10
    )
    with pytest.raises(ValueError, match="feature names should match"):
        clf.predict_proba(frame[["d", "c", "b", "a"]])


# --- metrics take pandas and their results tabulate ---

try:
    METRICS = all_metrics()
except ImportError:  # the metrics package may not be importable yet
    METRICS = []


@pytest.mark.parametrize(
    "metric", [m for _, m in METRICS], ids=[name for name, _ in METRICS]
)
def test_metrics_accept_pandas(metric):
    X, y = make_logits(n_samples=300, n_classes=4, seed=9)
    proba = np.exp(X - X.max(axis=1, keepdims=True))
    proba /= proba.sum(axis=1, keepdims=True)
    frame = pd.DataFrame(proba, columns=CLASS_NAMES, index=np.arange(300)[::-1])
    series = pd.Series(y, index=frame.index)
    expected = metric(y, proba)
    assert metric(series, frame) == pytest.approx(expected, rel=1e-12)


def _calibration_scorers():
    """Names ``neg_<metric>`` of the library's scorers with their metric."""
    try:
        from sklearn_calib import metrics
    except ImportError:
        return []
    if not hasattr(metrics, "get_scorer_names"):
        return []
    # Scorers of predicted probabilities only: the prediction-set scorers call
    # predict_set, which a calibrator does not have.
    return [
        name
        for name in metrics.get_scorer_names()
        if name.startswith("neg_")
        and hasattr(metrics, name[4:])
        and metrics.get_scorer(name)._response_method == "predict_proba"
    ]


@pytest.mark.parametrize("scorer_name", _calibration_scorers())
def test_cross_validated_scores_tabulate_as_a_dataframe(scorer_name):
    from sklearn_calib import metrics

    X, y = make_logits(n_samples=800, n_classes=4, seed=10)
    calibrator = TemperatureScaling(device="cpu")
    cv = KFold(4, shuffle=True, random_state=0)
    scoring = {scorer_name: metrics.get_scorer(scorer_name)}
    table = pd.DataFrame(cross_validate(calibrator, X, y, cv=cv, scoring=scoring))
    assert list(table.index) == [0, 1, 2, 3]
    metric = getattr(metrics, scorer_name[4:])
    for fold, (train, test) in enumerate(cv.split(X, y)):
        proba = clone(calibrator).fit(X[train], y[train]).predict_proba(X[test])
        assert table.loc[fold, f"test_{scorer_name}"] == pytest.approx(
            -metric(y[test], proba), rel=1e-10
        )
