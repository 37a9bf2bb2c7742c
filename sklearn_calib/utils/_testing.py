"""Test helpers: fast parameters, expected check failures and synthetic logits.

Every public calibrator must have an entry in ``FAST_PARAMS`` (a test enforces
it), so that a new calibrator cannot slip into the registry without being
considered for the common tests.
"""

import numpy as np

# Constructor parameters that keep the common tests fast. An empty dict means
# the defaults are already fast.
FAST_PARAMS = {
    "HistogramBinning": {},
    "IsotonicCalibration": {},
    "SMART": {"max_iter": 30, "device": "cpu", "random_state": 0},
    "TemperatureScaling": {"device": "cpu"},
}

# scikit-learn's estimator checks feed feature matrices whose width has nothing
# to do with the number of classes. A logit calibrator needs one column per
# class, so these checks fail by design; the same calibrators wrapped in
# CalibratedClassifier over a real classifier pass every check.
_WIDTH_REASON = (
    "feeds X whose width differs from the number of classes; a logit calibrator "
    "needs one column per class"
)
_ACCURACY_REASON = (
    "expects a classifier that learns from features; a calibrator only rescales "
    "the given logits, so its accuracy is the argmax accuracy of X"
)
_COMMON_EXPECTED_FAILURES = {
    "check_estimators_overwrite_params": _WIDTH_REASON,
    "check_estimators_fit_returns_self": _WIDTH_REASON,
    "check_readonly_memmap_input": _WIDTH_REASON,
    "check_estimators_nan_inf": _WIDTH_REASON,
    "check_classifiers_classes": _WIDTH_REASON,
    "check_classifiers_train": _ACCURACY_REASON,
    "check_classifiers_train(readonly_memmap=True)": _ACCURACY_REASON,
    "check_classifiers_train(readonly_memmap=True,X_dtype=float32)": _ACCURACY_REASON,
}

# Extra expected failures of single calibrators, each with its reason.
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {}


def expected_failed_checks(estimator):
    """The expected-failure table for scikit-learn's checks on ``estimator``."""
    name = type(estimator).__name__
    return {**_COMMON_EXPECTED_FAILURES, **EXPECTED_FAILED_CHECKS.get(name, {})}


def make_fast(estimator_class):
    """An instance of ``estimator_class`` with its fast test parameters."""
    return estimator_class(**FAST_PARAMS[estimator_class.__name__])


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
