"""Checks run over every calibrator found by discovery.

scikit-learn's estimator checks run with an explicit, strict expected-failure
table; our own checks cover what those skip, on correctly shaped logits.
"""

import pickle
import warnings
from functools import partial

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import (
    estimator_checks_generator,
    parametrize_with_checks,
)

from sklearn_calib import CalibratedClassifier, TemperatureScaling
from sklearn_calib.utils._testing import (
    _COMMON_EXPECTED_FAILURES,
    _NO_OPTIMUM_REASON,
    DECISION_EXPECTED_FAILED_CHECKS,
    EXPECTED_FAILED_CHECKS,
    FAST_PARAMS,
    N_FROM_WEIGHTS,
    REASON_ERRORS,
    decision_expected_failed_checks,
    expected_failed_checks,
    make_fast,
    make_logits,
)
from sklearn_calib.utils.discovery import all_calibrators, all_decision_estimators

# scikit-learn's estimator checks fit on random features with a few
# samples: no ranking information, classes without samples, separable data.
# On such data these warnings are the documented behaviour (each is asserted
# with pytest.warns in the calibrator's own tests); here they say nothing.
_IGNORED = [
    "ignore:The NLL keeps decreasing as T:UserWarning",
    "ignore:SMART was fitted on:UserWarning",
    "ignore:.*determine no finite scale:UserWarning",
    "ignore:.*no calibration sample, so their biases:UserWarning",
    "ignore:.*logits separate the calibration:UserWarning",
    "ignore:.* stopped after:sklearn.exceptions.ConvergenceWarning",
]
pytestmark = [pytest.mark.filterwarnings(f) for f in _IGNORED]


CALIBRATORS = [cls for _, cls in all_calibrators()]
IDS = [name for name, _ in all_calibrators()]


@parametrize_with_checks(
    [make_fast(cls) for cls in CALIBRATORS],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# The default configuration (LogisticRegression, TemperatureScaling, 5 folds)
# passes every check with no expected failure, as scikit-learn's own
# CalibratedClassifierCV does: a calibration fold that holds a single class
# still fits, since the class set is known from all of y.
@parametrize_with_checks([CalibratedClassifier()])
def test_default_calibrated_classifier_passes_every_check(estimator, check):
    check(estimator)


# Decision estimators (selective classification, certified binary thresholds,
# conformal risk control) are not calibrators: they run the same checks, bare
# on logits and over a real classifier, each with its own strict table. The
# checks' sets are small: certifying nothing (a warning) is right there.
DECISIONS = [cls for _, cls in all_decision_estimators()]


@pytest.mark.filterwarnings("ignore:No threshold:UserWarning")
@pytest.mark.filterwarnings("ignore:Too few calibration samples:UserWarning")
@parametrize_with_checks(
    [cls() for cls in DECISIONS] + [cls(LogisticRegression()) for cls in DECISIONS],
    expected_failed_checks=decision_expected_failed_checks,
)
def test_decision_estimators_sklearn_compatible(estimator, check):
    check(estimator)


def test_decision_registry_has_a_table_per_estimator():
    names = {name for name, _ in all_decision_estimators()}
    assert names == {
        "CertifiedThresholdClassifier",
        "ConformalRiskClassifier",
        "SelectiveClassifier",
    }
    assert {name for name, _ in DECISION_EXPECTED_FAILED_CHECKS} == names


def _check_name(check):
    """The bare name scikit-learn looks a check up by (its function's name)."""
    return check.func.__name__ if isinstance(check, partial) else check.__name__


@pytest.mark.parametrize("cls", CALIBRATORS, ids=IDS)
def test_expected_failures_are_exact(cls):
    # Every key of the table names a check that runs for this calibrator and
    # fails with the error its reason describes. (That no variant of it
    # passes is what xfail_strict enforces in test_sklearn_compatible.)
    estimator = make_fast(cls)
    table = expected_failed_checks(estimator)
    checks = {}
    for est, check in estimator_checks_generator(estimator, legacy=True, mark=None):
        checks.setdefault(_check_name(check), []).append((est, check))
    never_run = sorted(set(table) - set(checks))
    assert not never_run, f"keys that match no check of {cls.__name__}: {never_run}"
    overrides = EXPECTED_FAILED_CHECKS.get(cls.__name__, {})
    removed = [name for name, reason in overrides.items() if reason is None]
    assert set(removed) <= set(_COMMON_EXPECTED_FAILURES)
    for name, reason in sorted(table.items()):
        error, pattern = REASON_ERRORS[reason]
        for est, check in checks[name]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(error, match=pattern):
                    check(est)


# scikit-learn's check that integer weights equal repeated rows compares two
# fits to rtol 1e-7. The comparison is defined only where the fit has a finite
# optimum: on a ray (optimum at infinity) the point where a solver stops follows
# the rounding of its sums, hence the row order, the BLAS and torch builds and
# the thread count (issue 21: MatrixScaling failed on a fresh machine while its
# absent classes' unpenalised scales still ran to infinity). So every
# calibrator expected to pass the check passes it 100 times tighter, with the
# weighted rows in other orders (summed in another order, as another build or
# thread count would): its result does not hang on its last digits.
_WEIGHT_CHECK = "check_sample_weight_equivalence_on_dense_data"
_WEIGHT_CHECKED = [
    cls
    for cls in CALIBRATORS
    if _WEIGHT_CHECK not in expected_failed_checks(make_fast(cls))
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "cls", _WEIGHT_CHECKED, ids=[cls.__name__ for cls in _WEIGHT_CHECKED]
)
def test_weight_check_holds_with_margin_in_any_row_order(cls, seed, monkeypatch):
    from sklearn.utils import estimator_checks, shuffle

    # seed 0 is the check's own shuffle
    def reorder(*arrays, random_state=None):
        return shuffle(*arrays, random_state=seed)

    monkeypatch.setattr(estimator_checks, "shuffle", reorder)
    compare = estimator_checks.assert_allclose_dense_sparse
    monkeypatch.setattr(
        estimator_checks,
        "assert_allclose_dense_sparse",
        partial(compare, rtol=1e-9, atol=1e-12),
    )
    estimator = make_fast(cls)
    estimator_checks.check_sample_weight_equivalence_on_dense_data(
        cls.__name__, estimator
    )


_NO_OPTIMUM = [
    cls
    for cls in CALIBRATORS
    if expected_failed_checks(make_fast(cls)).get(_WEIGHT_CHECK) == _NO_OPTIMUM_REASON
]


@pytest.mark.parametrize("cls", _NO_OPTIMUM, ids=[cls.__name__ for cls in _NO_OPTIMUM])
def test_no_optimum_reason_holds(cls):
    # Where the table says the check's fit has no finite optimum, the fit on
    # the check's data says so itself: its calibrated logits separate the
    # samples, so where two fits stop on the ray is not a defined quantity.
    rng = np.random.RandomState(42)  # the check's data
    X = rng.rand(15, 30)
    y = rng.randint(0, 3, size=15)
    sw = rng.randint(0, 5, size=15)
    with pytest.warns(UserWarning, match="logits separate the calibration"):
        make_fast(cls).fit(X, y, sample_weight=sw)


def test_every_calibrator_has_fast_params():
    missing = [name for name, _ in all_calibrators() if name not in FAST_PARAMS]
    assert not missing, f"add FAST_PARAMS entries for {missing}"


def test_registry_is_not_empty():
    assert "TemperatureScaling" in IDS


@pytest.mark.parametrize(
    "cls", CALIBRATORS + DECISIONS, ids=[c.__name__ for c in CALIBRATORS + DECISIONS]
)
def test_numeric_parameters_refuse_booleans(cls):
    # True is an int to Python: a numeric interval must still refuse it, by
    # the parameter's name, before any fit (not deep inside numpy or torch).
    from sklearn.utils._param_validation import InvalidParameterError

    from sklearn_calib.utils._compat import Interval

    estimator = make_fast(cls) if cls in CALIBRATORS else cls()
    X, y = make_logits(n_samples=60, n_classes=2, seed=3)
    numeric = [
        name
        for name, constraints in cls._parameter_constraints.items()
        if constraints
        and all(isinstance(c, Interval) or c is None for c in constraints)
        and name in estimator.get_params(deep=False)
    ]
    for name in numeric:
        with pytest.raises(InvalidParameterError, match=f"'{name}' parameter"):
            clone(estimator).set_params(**{name: True}).fit(X, y)


@pytest.fixture(params=CALIBRATORS, ids=IDS)
def calibrator(request):
    return make_fast(request.param)


def is_binary_only(calibrator):
    return not get_tags(calibrator).classifier_tags.multi_class


def skip_if_binary_only(calibrator):
    if is_binary_only(calibrator):
        pytest.skip(f"{type(calibrator).__name__} is for binary problems only")


@pytest.fixture
def logits_y(calibrator):
    n_classes = 2 if is_binary_only(calibrator) else 4
    return make_logits(n_samples=400, n_classes=n_classes, seed=1)


NAMES = np.array(["ant", "bee", "cat", "dog"])


def test_predict_proba_on_simplex(calibrator, logits_y):
    X, y = logits_y
    proba = calibrator.fit(X, y).predict_proba(X)
    assert proba.shape == X.shape
    assert np.all(np.isfinite(proba))
    assert np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-10)


def test_transform_is_log_predict_proba(calibrator, logits_y):
    X, y = logits_y
    calibrator.fit(X, y)
    log_proba = calibrator.transform(X)
    assert np.all(np.isfinite(log_proba))
    np.testing.assert_allclose(
        np.exp(log_proba), calibrator.predict_proba(X), atol=1e-12
    )
    np.testing.assert_array_equal(
        calibrator.predict(X),
        calibrator.classes_[calibrator.predict_proba(X).argmax(1)],
    )


def test_one_pass_proba_and_log_proba_equal_the_public_methods(calibrator, logits_y):
    # The selector scores its folds from _proba_and_log_proba: the same
    # numbers, to the bit, as predict_proba and transform.
    X, y = logits_y
    calibrator.fit(X, y)
    for data in (X, X.astype(np.float32)):
        proba, log_proba = calibrator._proba_and_log_proba(data)
        np.testing.assert_array_equal(proba, calibrator.predict_proba(data))
        np.testing.assert_array_equal(log_proba, calibrator.transform(data))


def test_argmax_kept_where_promised(calibrator, logits_y):
    if not getattr(calibrator, "_preserves_argmax", False):
        pytest.skip(f"{type(calibrator).__name__} may change the argmax by design")
    X, y = logits_y
    np.testing.assert_array_equal(calibrator.fit(X, y).predict(X), X.argmax(axis=1))


def test_float32_kept(calibrator, logits_y):
    X, y = logits_y
    X32 = X.astype(np.float32)
    calibrator.fit(X32, y)
    assert calibrator.predict_proba(X32).dtype == np.float32
    assert calibrator.transform(X32).dtype == np.float32
    proba64 = clone(calibrator).fit(X, y).predict_proba(X)
    np.testing.assert_allclose(calibrator.predict_proba(X32), proba64, atol=2e-4)


def test_pickle_round_trip(calibrator, logits_y):
    X, y = logits_y
    calibrator.fit(X, y)
    restored = pickle.loads(pickle.dumps(calibrator))
    np.testing.assert_array_equal(
        restored.predict_proba(X), calibrator.predict_proba(X)
    )


def test_clone_is_unfitted_with_same_params(calibrator, logits_y):
    X, y = logits_y
    calibrator.fit(X, y)
    cloned = clone(calibrator)
    # repr, not ==: clone copies nested estimators (a selector's candidates),
    # which compare by identity; their reprs show every non-default parameter.
    assert repr(cloned.get_params()) == repr(calibrator.get_params())
    assert not hasattr(cloned, "classes_")


def test_string_labels(calibrator, logits_y):
    X, y = logits_y
    names = NAMES[: X.shape[1]]
    calibrator.fit(X, names[y])
    np.testing.assert_array_equal(calibrator.classes_, names)
    reference = clone(calibrator).fit(X, y)
    np.testing.assert_allclose(
        calibrator.predict_proba(X), reference.predict_proba(X), atol=1e-10
    )
    assert set(calibrator.predict(X)) <= set(names)


def test_sample_weight_equals_repeated_rows(calibrator, logits_y):
    X, y = logits_y
    weights = np.random.default_rng(0).integers(0, 4, size=len(y))
    if type(calibrator).__name__ in N_FROM_WEIGHTS:
        pytest.skip("weights are not counts of rows here (Kish's effective n)")
    weighted = clone(calibrator).fit(X, y, sample_weight=weights)
    repeated = clone(calibrator).fit(
        np.repeat(X, weights, axis=0), np.repeat(y, weights)
    )
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-5, atol=1e-6
    )


def test_unit_weights_equal_no_weights(calibrator, logits_y):
    X, y = logits_y
    weighted = clone(calibrator).fit(X, y, sample_weight=np.ones(len(y)))
    plain = clone(calibrator).fit(X, y)
    np.testing.assert_allclose(
        weighted.predict_proba(X), plain.predict_proba(X), rtol=1e-7, atol=1e-9
    )


def test_missing_class_in_validation_keeps_columns(calibrator):
    skip_if_binary_only(calibrator)
    X, y = make_logits(n_samples=400, n_classes=5, seed=3)
    keep = y != 2
    calibrator.fit(X[keep], y[keep])
    np.testing.assert_array_equal(calibrator.classes_, np.arange(5))
    assert calibrator.predict_proba(X).shape == (400, 5)


# --- which class each logit column stands for ------------------------------------


def _one_based(calibrator):
    """Logits of K classes and 1-based labels 1..K from which K is absent."""
    n_classes = 2 if is_binary_only(calibrator) else 4
    X, y = make_logits(n_samples=400, n_classes=n_classes, seed=5)
    keep = y != n_classes - 1
    return X[keep], y[keep] + 1, n_classes


def test_ambiguous_labels_raise_and_ask_for_classes(calibrator):
    # Labels 1..4 with no 4 in the calibration set used to give classes_ 0..3
    # and predictions off by one; now the calibrator refuses to guess.
    X, y1, _ = _one_based(calibrator)
    with pytest.raises(ValueError, match="classes="):
        calibrator.fit(X, y1)
    assert not hasattr(calibrator, "classes_")


def test_classes_states_the_label_of_each_column(calibrator):
    X, y1, n_classes = _one_based(calibrator)
    labels = np.arange(1, n_classes + 1)
    # deep=False: a composite's nested base__* parameters are not constructor
    # arguments
    params = dict(calibrator.get_params(deep=False), classes=list(labels))
    stated = type(calibrator)(**params)
    with warnings.catch_warnings():
        # a binary-only calibrator sees one class here; its fit may warn
        warnings.simplefilter("ignore", UserWarning)
        stated.fit(X, y1)
        # 0-based codes that include 0 are the column indices: the same fit
        # (a binary set lacking a class holds one label: it needs classes too)
        reference = clone(calibrator)
        if n_classes == 2:
            reference.set_params(classes=[0, 1])
        reference.fit(X, y1 - 1)
    assert stated.get_params()["classes"] == list(labels)  # stored unchanged
    np.testing.assert_array_equal(stated.classes_, labels)
    np.testing.assert_array_equal(reference.classes_, labels - 1)
    proba = stated.predict_proba(X)
    np.testing.assert_allclose(proba, reference.predict_proba(X), rtol=1e-10)
    np.testing.assert_array_equal(stated.predict(X), labels[proba.argmax(axis=1)])
    if getattr(calibrator, "_preserves_argmax", False):
        # independent of the calibrator: the logits' argmax, 1-based
        np.testing.assert_array_equal(stated.predict(X), X.argmax(axis=1) + 1)
    np.testing.assert_array_equal(stated.get_feature_names_out(), labels.astype(str))


def test_classes_attribute_is_not_the_parameter_array(calibrator, logits_y):
    # classes_ was the caller's array itself: editing it after fit relabelled
    # the fitted calibrator's predictions.
    X, y = logits_y
    names = NAMES[: X.shape[1]].copy()
    fitted = clone(calibrator).set_params(classes=names).fit(X, names[y])
    names[0] = "emu"
    np.testing.assert_array_equal(fitted.classes_, NAMES[: X.shape[1]])
    assert set(fitted.predict(X)) <= set(NAMES)


def test_classes_in_any_column_order(calibrator, logits_y):
    X, y = logits_y
    names = NAMES[: X.shape[1]]
    order = np.roll(np.arange(X.shape[1]), 1)
    # The columns hold the classes names[order], not in sorted order.
    permuted = clone(calibrator).set_params(classes=names[order])
    permuted.fit(X[:, order], names[y])
    np.testing.assert_array_equal(permuted.classes_, names[order])
    reference = clone(calibrator).fit(X, y)
    np.testing.assert_allclose(
        permuted.predict_proba(X[:, order]),
        reference.predict_proba(X)[:, order],
        rtol=1e-6,
        atol=1e-9,
    )
    # Ties (piecewise-constant maps) go to the first maximal column, which
    # depends on the order: compare the rows with a single most probable class.
    proba = reference.predict_proba(X)
    top2 = np.sort(proba, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-9
    np.testing.assert_array_equal(
        permuted.predict(X[:, order])[clear], names[reference.predict(X)][clear]
    )


def test_classes_lets_a_set_with_one_class_fit(calibrator, logits_y):
    X, y = logits_y
    rows = y == 1
    with warnings.catch_warnings():
        # One class may leave a solver at a bound; that warning is expected.
        warnings.simplefilter("ignore", UserWarning)
        fitted = (
            clone(calibrator).set_params(classes=np.unique(y)).fit(X[rows], y[rows])
        )
    np.testing.assert_array_equal(fitted.classes_, np.unique(y))
    proba = fitted.predict_proba(X)
    assert proba.shape == X.shape
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-10)
    with pytest.raises(ValueError, match="class"):
        clone(calibrator).fit(X[rows], y[rows])


BAD_CLASSES = {
    "short": (lambda n: list(range(n - 1)), "one class per column"),
    "long": (lambda n: list(range(n + 1)), "one class per column"),
    "2d": (lambda n: np.arange(n).reshape(1, n), "one class per column"),
    "duplicates": (lambda n: [0] * n, "duplicates"),
    "missing_label": (lambda n: [*range(n - 1), n + 5], r"not in classes: \[\d\]"),
    "other_type": (lambda n: list(NAMES[:n]), "not in classes"),
    "nan": (lambda n: [*np.arange(n - 1.0), np.nan], "NaN"),
}


@pytest.mark.parametrize("case", sorted(BAD_CLASSES))
def test_bad_classes_raise(calibrator, logits_y, case):
    X, y = logits_y
    make_classes, message = BAD_CLASSES[case]
    with pytest.raises(ValueError, match=message):
        clone(calibrator).set_params(classes=make_classes(X.shape[1])).fit(X, y)


def test_boolean_labels_are_their_own_classes(calibrator):
    X, y = make_logits(n_samples=400, n_classes=2, seed=6)
    fitted = clone(calibrator).fit(X, y.astype(bool))
    np.testing.assert_array_equal(fitted.classes_, [False, True])
    reference = clone(calibrator).fit(X, y)
    np.testing.assert_allclose(
        fitted.predict_proba(X), reference.predict_proba(X), rtol=1e-10
    )


def test_classes_must_be_array_like(calibrator, logits_y):
    X, y = logits_y
    with pytest.raises(ValueError, match="classes"):
        clone(calibrator).set_params(classes="abcd").fit(X, y)


def test_binary_single_score_column(calibrator):
    X, y = make_logits(n_samples=400, n_classes=2, seed=4)
    score = (X[:, 1] - X[:, 0])[:, None]
    proba = calibrator.fit(score, y).predict_proba(score)
    assert proba.shape == (400, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert calibrator.n_features_in_ == 1


def test_pandas_and_torch_inputs(calibrator, logits_y):
    pd = pytest.importorskip("pandas")
    torch = pytest.importorskip("torch")
    X, y = logits_y
    reference = clone(calibrator).fit(X, y).predict_proba(X)
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    fitted = clone(calibrator).fit(frame, pd.Series(y))
    np.testing.assert_array_equal(fitted.feature_names_in_, frame.columns)
    np.testing.assert_allclose(fitted.predict_proba(frame), reference, atol=1e-10)
    tensor_fit = clone(calibrator).fit(torch.from_numpy(X), torch.from_numpy(y))
    out = tensor_fit.predict_proba(torch.from_numpy(X))
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, reference, atol=1e-10)


def test_set_output_pandas(calibrator, logits_y):
    pytest.importorskip("pandas")
    X, y = logits_y
    names = NAMES[: X.shape[1]]
    calibrator.set_output(transform="pandas").fit(X, names[y])
    frame = calibrator.transform(X)
    assert list(frame.columns) == list(names)


# --- bad input: every calibrator rejects it with a message naming the problem ---

BAD_FIT_INPUTS = {
    "nan": (
        lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), y),
        "NaN",
    ),
    "inf": (
        lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), y),
        "infinity",
    ),
    "3d": (lambda X, y: (X[:, :, None], y), "dim 3"),
    "empty": (lambda X, y: (X[:0], y[:0]), "0 sample"),
    "one_class": (lambda X, y: (X, np.zeros_like(y)), "class"),
    "wrong_width": (lambda X, y: (X[:, :3], y), "columns"),
    "label_out_of_range": (lambda X, y: (X[:, :3], np.where(y == 3, 7, y)), "outside"),
    "length_mismatch": (lambda X, y: (X, y[:-1]), "inconsistent numbers of samples"),
}


MULTICLASS_ONLY_CASES = {"wrong_width", "label_out_of_range"}


@pytest.mark.parametrize("case", sorted(BAD_FIT_INPUTS))
def test_bad_fit_input_raises(calibrator, logits_y, case):
    if case in MULTICLASS_ONLY_CASES:
        skip_if_binary_only(calibrator)
    make_bad, message = BAD_FIT_INPUTS[case]
    X, y = make_bad(*logits_y)
    with pytest.raises((ValueError, TypeError), match=message):
        calibrator.fit(X, y)


@pytest.mark.parametrize(
    "weights, message",
    [
        (np.zeros(400), "non-zero|zero for every sample"),
        (-np.ones(400), "[Nn]egative"),
        (np.full(400, np.nan), "NaN"),
        (np.ones(3), "shape|length|inconsistent"),
        # numpy's float64 of a complex array keeps its real part: [1j, 1, ...]
        # weighed the first row 0
        (np.r_[1j, np.ones(399)], "real numbers"),
    ],
    ids=["all_zero", "negative", "nan", "wrong_length", "complex"],
)
def test_bad_sample_weight_raises(calibrator, logits_y, weights, message):
    X, y = logits_y
    with pytest.raises((ValueError, TypeError), match=message):
        calibrator.fit(X, y, sample_weight=weights)


def test_bad_predict_input_raises(calibrator, logits_y):
    X, y = logits_y
    calibrator.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        calibrator.predict_proba(X[:, :-1])
    with pytest.raises(ValueError, match="NaN"):
        calibrator.predict_proba(np.full_like(X, np.nan))


def test_unknown_device_raises(calibrator, logits_y):
    if "device" not in calibrator.get_params():
        pytest.skip("not a torch-backed calibrator")
    X, y = logits_y
    with pytest.raises(ValueError, match="device"):
        calibrator.set_params(device="gpu").fit(X, y)


def test_cuda_request_falls_back_with_warning(calibrator, logits_y):
    torch = pytest.importorskip("torch")
    if "device" not in calibrator.get_params():
        pytest.skip("not a torch-backed calibrator")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: no fallback happens")
    X, y = logits_y
    with pytest.warns(UserWarning, match="CUDA is not available"):
        calibrator.set_params(device="cuda").fit(X, y)


@pytest.mark.cuda
def test_cuda_fit_matches_cpu_and_pickles_to_numpy(calibrator, logits_y):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if "device" not in calibrator.get_params():
        pytest.skip("not a torch-backed calibrator")
    X, y = logits_y
    on_gpu = clone(calibrator).set_params(device="cuda").fit(X, y)
    on_cpu = clone(calibrator).set_params(device="cpu").fit(X, y)
    np.testing.assert_allclose(
        on_gpu.predict_proba(X), on_cpu.predict_proba(X), atol=1e-4
    )
    for value in vars(pickle.loads(pickle.dumps(on_gpu))).values():
        assert not isinstance(value, torch.Tensor)


def test_boolean_labels_for_more_columns_are_not_called_integers():
    # False, True for 3 columns: the message said "integer labels [False,
    # True] lie in [1, 2] but lack 0" (False is 0, and booleans are labels of
    # their own, never column indices).
    X, y = make_logits(n_samples=60, n_classes=3, seed=0)
    with pytest.raises(ValueError, match=r"got labels \[False, True\]") as info:
        TemperatureScaling().fit(X, y > 0)
    assert "lack 0" not in str(info.value)
