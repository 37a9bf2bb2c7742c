"""Helpers to save and load fitted estimators of the library safely.

pickle and joblib work on every estimator (their fitted state is plain numpy
arrays and Python numbers, never torch tensors). `skops <https://skops.readthedocs.io>`_
loads files without executing arbitrary code, provided the caller names the
types it trusts: :func:`skops_trusted_types` lists this library's (its
estimators, and the scorer class and metric functions a fitted
:class:`~sklearn_calib.CalibratorSelector` holds).
"""

import inspect


def _qualified_name(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def _resolves_to_itself(func):
    """Whether ``func`` is found again by its module and name, as skops loads it."""
    import importlib

    try:
        module = importlib.import_module(func.__module__)
    except ImportError:
        return False
    return getattr(module, func.__qualname__, None) is func


def _scorer_types():
    """Types and metric functions of the library's named scorers.

    :class:`~sklearn_calib.CalibratorSelector` keeps its scorer as
    ``scorer_``; with a scorer of this library (the default
    ``"neg_log_loss"`` included) a file holds the scorer's class and its
    metric function, both by name. A metric function that is not found again
    by its name (a wrapper made at import time) is left out: skops would
    load another function in its place.
    """
    from ..metrics._scorer import _SCORERS

    names = set()
    for scorer in _SCORERS.values():
        names.add(_qualified_name(type(scorer)))
        func = getattr(scorer, "_score_func", None)
        if func is not None and _resolves_to_itself(func):
            names.add(_qualified_name(func))
    return names


def skops_trusted_types():
    """Fully qualified names of the library's types, for ``skops.io.load``.

    skops refuses to load a type it does not trust. scikit-learn's estimators
    and numpy's arrays are trusted by default; the estimators of this library
    are not, so pass this list as ``trusted``. It is built from the public
    API, so it covers every calibrator, :class:`~sklearn_calib.CalibratedClassifier`
    and :class:`~sklearn_calib.conformal.ConformalClassifier`,
    and from the scorer table of :func:`sklearn_calib.metrics.get_scorer`:
    the scorer class and metric functions of the library's named scorers,
    which a fitted :class:`~sklearn_calib.CalibratorSelector` holds as
    ``scorer_``. skops restores every one of them from its name and data,
    without unpickling anything.

    Returns
    -------
    trusted : list of str
        Sorted names such as ``"sklearn_calib._scaling.affine.TemperatureScaling"``
        or ``"sklearn_calib.metrics._proper.log_loss"``.

    See Also
    --------
    skops.io.get_untrusted_types : The types of a file that are not trusted by
        default; check them against this list before loading a file of
        unknown origin.

    Notes
    -----
    A selector fitted with a scikit-learn scorer name (``scoring="accuracy"``)
    holds scikit-learn's scorer class and metric, which skops does not trust
    by default either; one fitted with a callable of your own holds that
    callable. Check such names with :func:`skops.io.get_untrusted_types` and
    add them to ``trusted`` only if you trust them.

    Examples
    --------
    >>> import numpy as np
    >>> import skops.io as sio
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.utils.persistence import skops_trusted_types
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=200)
    >>> logits = 3.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(200, 3))
    >>> ts = TemperatureScaling(device="cpu").fit(logits, y)
    >>> data = sio.dumps(ts)
    >>> set(sio.get_untrusted_types(data=data)) <= set(skops_trusted_types())
    True
    >>> restored = sio.loads(data, trusted=skops_trusted_types())
    >>> restored.temperature_ == ts.temperature_
    True
    """
    from sklearn.base import BaseEstimator

    import sklearn_calib
    from sklearn_calib import conformal

    trusted = _scorer_types()
    public = [getattr(sklearn_calib, name) for name in sklearn_calib.__all__]
    public += [getattr(conformal, name) for name in conformal.__all__]
    for obj in public:
        name = getattr(obj, "__name__", "")
        # Base classes are never fitted, so never saved.
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseEstimator)
            and not name.startswith("Base")
        ):
            trusted.add(_qualified_name(obj))
    return sorted(trusted)
