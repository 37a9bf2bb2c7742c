"""Test helpers: fast parameters, expected check failures and synthetic logits.

Every public calibrator must have an entry in ``FAST_PARAMS`` (a test enforces
it), so that a new calibrator cannot slip into the registry without being
considered for the common tests.
"""

import numpy as np

from .._binning.isotonic import IsotonicCalibration
from .._scaling.temperature import TemperatureScaling

# Constructor parameters that keep the common tests fast. An empty dict means
# the defaults are already fast.
FAST_PARAMS = {
    "BetaCalibration": {},
    "BiasCorrectedTemperatureScaling": {"device": "cpu"},
    "EnsembleTemperatureScaling": {"device": "cpu"},
    # Two fast candidates (one torch, one numpy) and three splits keep the seven
    # fits per check cheap.
    "CalibratorSelector": {
        "calibrators": [TemperatureScaling(device="cpu"), IsotonicCalibration()],
        "cv": 3,
    },
    "HistogramBinning": {},
    # A temperature base fitted once keeps the checks fast (the default base
    # cross-validates matrix scaling; tests/margin/test_composite.py covers cv), and
    # weighted and repeated rows then share their folds; tight tol for the
    # weight checks.
    # A fixed alpha: "auto" scales with the effective number of rows, which
    # integer weights and repeated rows do not share (as the structured maps).
    "MarginTemperatureScaling": {
        "base": TemperatureScaling(device="cpu"),
        "alpha": 1e-2,
        "cv": None,
        "device": "cpu",
        "tol": 1e-10,
    },
    "IsotonicCalibration": {},
    # The affine maps stop at a gradient tolerance; scikit-learn's check that
    # weights equal repeated rows compares probabilities to rtol 1e-7, which
    # the default tol=1e-7 meets only to about 5e-7, so the checks solve tighter.
    # That comparison needs a finite optimum (on a ray, where a fit stops
    # follows the rounding of its sums: thread count, BLAS, torch build). On
    # the check's data (15 rows, 30 columns, 3 labels) matrix and Dirichlet
    # scaling have one: the "auto" ODIR penalises the off-diagonal entries and
    # the biases, the 27 absent classes keep the temperature row, and no
    # present class is separated by its own logit, which bounds the unpenalised
    # diagonal. Vector scaling has no penalty and its 3 free classes separate
    # the rows jointly: an expected failure (_NO_OPTIMUM_REASON). The
    # temperature-based fits have one free scale the data bound; the
    # structured maps fail the check on another ground; the binary-only maps
    # never reach the comparison; the rest are exact, not iterative.
    # tests/test_common.py holds each passing fit to rtol 1e-9 in three row
    # orders, and each _NO_OPTIMUM_REASON fit to its separation warning.
    "DirichletCalibration": {"device": "cpu", "tol": 1e-10},
    "MatrixScaling": {"device": "cpu", "tol": 1e-10},
    "PlattScaling": {"device": "cpu", "tol": 1e-10},
    "QuadraticScaling": {},
    "SMART": {"max_iter": 30, "device": "cpu", "random_state": 0},
    "SplineCalibration": {},
    "StructuredMatrixScaling": {"device": "cpu", "tol": 1e-10},
    "StructuredVectorScaling": {"device": "cpu", "tol": 1e-10},
    "TemperatureScaling": {"device": "cpu"},
    "VectorScaling": {"device": "cpu", "tol": 1e-10},
    "VennAbersCalibration": {},
}

# scikit-learn's estimator checks feed feature matrices whose width has nothing
# to do with the number of classes. A logit calibrator needs one column per
# class, so these checks fail by design; the same calibrators wrapped in
# CalibratedClassifier over a real classifier pass every check.
#
# The keys are bare check names: scikit-learn looks a check up by its
# function's name, so one key covers every variant of a check (for example
# check_classifiers_train with readonly_memmap=True and X_dtype="float32").
# tests/test_common.py checks that every key names a check that runs, and that
# it fails with the error its reason describes (REASON_ERRORS); xfail_strict
# makes any variant that passes an error.
_WIDTH_REASON = (
    "feeds X whose width differs from the number of classes (for example 3 "
    "labels for 2 columns, or 2 labels for 5 columns); a logit calibrator needs "
    "one column per class and refuses labels it cannot match to the columns"
)
_ACCURACY_REASON = (
    "expects a classifier that learns from features: the check's binary blobs, "
    "read as 2 logit columns, rank the classes the wrong way round (argmax "
    "accuracy 0.11); TemperatureScaling, SMART, EnsembleTemperatureScaling "
    "and SplineCalibration keep the argmax, the increasing maps of "
    "IsotonicCalibration and VennAbersCalibration cannot reverse it, and "
    "BiasCorrectedTemperatureScaling keeps its temperature positive (at its "
    "bound its biases give the class frequencies), so training accuracy stays "
    "below the check's 0.83"
)
_COMMON_EXPECTED_FAILURES = {
    "check_estimators_overwrite_params": _WIDTH_REASON,
    "check_estimators_fit_returns_self": _WIDTH_REASON,
    "check_readonly_memmap_input": _WIDTH_REASON,
    "check_estimators_nan_inf": _WIDTH_REASON,
    "check_estimators_dtypes": _WIDTH_REASON,
    "check_classifiers_classes": _WIDTH_REASON,
    # Passes the binary part (the scale and bias learn it), then fails on the
    # 3-class blobs of 2 columns.
    "check_classifiers_train": _WIDTH_REASON,
}

_NO_OPTIMUM_REASON = (
    "the check's 15 samples hold 3 of the 30 logit columns' classes; the 27 "
    "absent classes are kept at the temperature map, but the 3 others' scales "
    "and biases separate the 15 samples jointly (the NLL falls to about 1e-12 "
    "as they grow), so weighted and repeated fits stop at different points of "
    "that ray"
)
# Calibrators whose fit depends on the number of samples n, read from the
# weights as Kish's effective sample size (sum w)^2 / sum w^2: scale-free, but
# integer weights are not repeated rows.
N_FROM_WEIGHTS = {"StructuredMatrixScaling", "StructuredVectorScaling"}
_EFFECTIVE_SIZE_REASON = (
    "the penalties and the uniform mixture depend on the number of samples n, "
    "which these calibrators read as Kish's effective sample size (sum w)^2 / "
    "sum w^2 so that the scale of the weights changes nothing: a row of weight "
    "2 is not two samples, and repeated rows are more samples"
)
_BINARY_WIDTH_REASON = (
    "feeds binary y with X of 3 or more columns; a binary logit calibrator takes "
    "one score column or two logit columns"
)
_PLATT_WIDTH_CHECKS = [
    "check_fit_score_takes_y",
    "check_dont_overwrite_parameters",
    "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
    "check_estimators_dtypes",
    "check_sample_weights_list",
    "check_sample_weight_equivalence_on_dense_data",
    "check_dtype_object",
    "check_pipeline_consistency",
    "check_estimators_pickle",
    "check_f_contiguous_array_estimator",
    "check_supervised_y_2d",
    "check_non_transformer_estimators_n_iter",
    "check_transformer_data_not_an_array",
    "check_transformer_general",
    "check_transformer_preserve_dtypes",
    "check_transformer_n_iter",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_dict_unchanged",
    "check_fit2d_predict1d",
]

_MONOTONE_REVERSED_REASON = (
    "a beta map is non-decreasing in the score s = X[:, 1] - X[:, 0] (a, b >= 0); "
    "the check's blob features are not logits and s ranks its two classes in "
    "reverse (ROC AUC 0.01), so the best monotone map is constant (accuracy 0.5 "
    "< 0.83)"
)
# A binary-only calibrator fails the checks that feed 3-class data, and passes
# those that the multiclass calibrators fail on width (the checks give it
# binary data of the right width).
_BINARY_ONLY_TABLE = {
    **dict.fromkeys(_PLATT_WIDTH_CHECKS, _BINARY_WIDTH_REASON),
    "check_estimators_overwrite_params": None,
    "check_estimators_fit_returns_self": None,
    "check_readonly_memmap_input": None,
    "check_classifiers_classes": None,
    "check_classifiers_train": None,
}

# Extra expected failures of single calibrators, each with its reason. A None
# reason removes a common expected failure that the calibrator passes (a
# binary-only classifier gets binary data of the right width in those checks).
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str | None]] = {
    "VectorScaling": {
        "check_sample_weight_equivalence_on_dense_data": _NO_OPTIMUM_REASON
    },
    # These fail on the binary part, before the 3-class one.
    "IsotonicCalibration": {"check_classifiers_train": _ACCURACY_REASON},
    "SMART": {"check_classifiers_train": _ACCURACY_REASON},
    "TemperatureScaling": {"check_classifiers_train": _ACCURACY_REASON},
    "BiasCorrectedTemperatureScaling": {
        "check_classifiers_train": _ACCURACY_REASON
    },
    "EnsembleTemperatureScaling": {"check_classifiers_train": _ACCURACY_REASON},
    "SplineCalibration": {"check_classifiers_train": _ACCURACY_REASON},
    "VennAbersCalibration": {"check_classifiers_train": _ACCURACY_REASON},
    # Their fast parameters choose between temperature scaling and isotonic
    # calibration, or put a positive temperature on temperature scaling.
    "CalibratorSelector": {"check_classifiers_train": _ACCURACY_REASON},
    "MarginTemperatureScaling": {"check_classifiers_train": _ACCURACY_REASON},
    "PlattScaling": _BINARY_ONLY_TABLE,
    "BetaCalibration": {
        **_BINARY_ONLY_TABLE,
        "check_classifiers_train": _MONOTONE_REVERSED_REASON,
    },
    "QuadraticScaling": _BINARY_ONLY_TABLE,
    "StructuredMatrixScaling": {
        "check_sample_weight_equivalence_on_dense_data": _EFFECTIVE_SIZE_REASON,
        "check_classifiers_train": _ACCURACY_REASON,
    },
    "StructuredVectorScaling": {
        "check_sample_weight_equivalence_on_dense_data": _EFFECTIVE_SIZE_REASON,
        "check_classifiers_train": _ACCURACY_REASON,
    },
}

# What the failure of each reason looks like: (exception type, pattern of its
# message), so that a test can tell a check failing for its stated reason from
# one failing for another.
REASON_ERRORS = {
    _WIDTH_REASON: (ValueError, r"logit columns"),
    _BINARY_WIDTH_REASON: (
        (ValueError, AssertionError),
        r"Only binary classification|logit columns|raised ValueError unexpectedly",
    ),
    # check_classifiers_train's bare `assert accuracy > 0.83`
    _ACCURACY_REASON: (AssertionError, r"^$"),
    _MONOTONE_REVERSED_REASON: (AssertionError, r"^$"),
    _NO_OPTIMUM_REASON: (AssertionError, r"fitting with `sample_weight` is not"),
    _EFFECTIVE_SIZE_REASON: (
        AssertionError,
        r"fitting with `sample_weight` is not",
    ),
}


# --- decision estimators (utils.discovery.all_decision_estimators) ------------------

_ABSTAIN_REASON = (
    "abstains where it cannot certify the risk: predict returns the abstention "
    "label -1 for some of the check's samples, which the check compares with "
    "the true labels"
)
_STRING_ABSTAIN_REASON = (
    "string classes need a user-chosen abstain_label (the default -1 is for "
    "numeric classes), and the check fits string labels with default parameters"
)
_UNCERTIFIED_REASON = (
    "on the check's small binary set no threshold certifies precision 0.9 at "
    "90 % confidence, so the classifier falls back to predicting no positive "
    "(accuracy about 0.5 < 0.83) rather than returning an uncertified threshold"
)
_BINARY_DECISION_WIDTH = dict.fromkeys(
    [
        "check_fit_score_takes_y",
        "check_dont_overwrite_parameters",
        "check_n_features_in_after_fitting",
        "check_positive_only_tag_during_fit",
        "check_estimators_dtypes",
        "check_dtype_object",
        "check_pipeline_consistency",
        "check_estimators_nan_inf",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_supervised_y_2d",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_dict_unchanged",
        "check_fit2d_predict1d",
    ],
    _BINARY_WIDTH_REASON,
)
# Keyed by (class name, whether a calibrator is given): bare, X is logits and
# the width failures of the calibrators apply; over a real classifier only
# the failures that follow from the decision itself remain.
DECISION_EXPECTED_FAILED_CHECKS = {
    ("SelectiveClassifier", False): {
        **_COMMON_EXPECTED_FAILURES,
        "check_classifiers_classes": _STRING_ABSTAIN_REASON,
        "check_classifiers_train": _ACCURACY_REASON,
    },
    ("SelectiveClassifier", True): {
        "check_classifiers_classes": _STRING_ABSTAIN_REASON,
        "check_classifiers_train": _ABSTAIN_REASON,
    },
    ("CertifiedThresholdClassifier", False): {
        **_BINARY_DECISION_WIDTH,
        "check_classifiers_train": _UNCERTIFIED_REASON,
    },
    ("CertifiedThresholdClassifier", True): {
        "check_classifiers_train": _UNCERTIFIED_REASON,
    },
    ("ConformalRiskClassifier", False): {
        **_COMMON_EXPECTED_FAILURES,
        "check_classifiers_train": _ACCURACY_REASON,
    },
    ("ConformalRiskClassifier", True): {},
}


def decision_expected_failed_checks(estimator):
    """The expected-failure table of a decision estimator of the registry."""
    key = (type(estimator).__name__, estimator.calibrator is not None)
    return DECISION_EXPECTED_FAILED_CHECKS[key]


def expected_failed_checks(estimator):
    """The expected-failure table for scikit-learn's checks on ``estimator``."""
    name = type(estimator).__name__
    table = {**_COMMON_EXPECTED_FAILURES, **EXPECTED_FAILED_CHECKS.get(name, {})}
    return {check: reason for check, reason in table.items() if reason is not None}


def make_fast(estimator_class):
    """An instance of ``estimator_class`` with its fast test parameters.

    Estimator-valued parameters are cloned: a test that sets a nested
    parameter (``base__device="cuda"``) must not change the shared table for
    the tests that run after it in the same process.
    """
    from sklearn.base import clone

    params = FAST_PARAMS[estimator_class.__name__]
    return estimator_class(**{k: clone(v, safe=False) for k, v in params.items()})


def make_logits(
    n_samples=600, n_classes=4, *, overconfidence=2.5, seed=0, dtype=np.float64
):
    """Synthetic miscalibrated logits with known-calibrated ground truth.

    True logits ``t`` define the label distribution ``y ~ softmax(t)``; the
    returned logits are ``overconfidence * t``, so temperature scaling should
    recover ``T ~= overconfidence``.

    Returns
    -------
    logits : ndarray of shape (n_samples, n_classes)
    y : ndarray of shape (n_samples,) of int
    """
    rng = np.random.default_rng(seed)
    true_logits = rng.normal(scale=2.0, size=(n_samples, n_classes))
    proba = np.exp(true_logits - true_logits.max(axis=1, keepdims=True))
    proba /= proba.sum(axis=1, keepdims=True)
    cumulative = proba.cumsum(axis=1)
    y = (rng.random((n_samples, 1)) > cumulative).sum(axis=1)
    y = np.minimum(y, n_classes - 1)
    return (overconfidence * true_logits).astype(dtype), y
