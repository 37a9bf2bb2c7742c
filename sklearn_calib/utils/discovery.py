"""Registries of the public calibrators and metrics, for tests and tools.

Like scikit-learn's ``all_estimators``: a calibrator added to the public API is
found here and so covered by the common tests the day it is added.
"""

import inspect


def all_calibrators():
    """Every public calibrator of the library.

    Returns
    -------
    calibrators : list of (name, class) tuples
        Sorted by name; includes only concrete subclasses of
        :class:`~sklearn_calib.BaseCalibrator` exported by ``sklearn_calib``.
    """
    import sklearn_calib
    from sklearn_calib.base import BaseCalibrator

    found = []
    for name in sklearn_calib.__all__:
        obj = getattr(sklearn_calib, name)
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseCalibrator)
            and obj is not BaseCalibrator
        ):
            found.append((name, obj))
    return sorted(found)


def all_decision_estimators():
    """Every public decision estimator (they act on probabilities; not calibrators).

    Returns
    -------
    estimators : list of (name, class) tuples
        Sorted by name: the estimators of :mod:`sklearn_calib.selective` and
        :mod:`sklearn_calib.conformal` built on certified thresholds
        (selective classification, binary thresholds, conformal risk control).
    """
    from sklearn.base import BaseEstimator

    from sklearn_calib import conformal, selective

    found = {}
    for module in (selective, conformal):
        for name in module.__all__:
            obj = getattr(module, name)
            # ConformalClassifier has its own checks (tests/test_conformal.py).
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseEstimator)
                and obj is not conformal.ConformalClassifier
            ):
                found[name] = obj
    return sorted(found.items())


def all_metrics():
    """Every public calibration metric (functions of ``(y_true, y_prob)``).

    Returns
    -------
    metrics : list of (name, function) tuples
        Public functions of :mod:`sklearn_calib.metrics` whose names end in
        ``_error``, ``_loss`` or ``_score``, sorted by name.
    """
    from sklearn_calib import metrics

    found = []
    for name in getattr(metrics, "__all__", []):
        obj = getattr(metrics, name)
        if inspect.isfunction(obj) and name.endswith(("_error", "_loss", "_score")):
            found.append((name, obj))
    return sorted(found)
