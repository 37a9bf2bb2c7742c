"""Helpers to save and load fitted estimators of the library safely.

pickle and joblib work on every estimator (their fitted state is plain numpy
arrays and Python numbers, never torch tensors). `skops <https://skops.readthedocs.io>`_
loads files without executing arbitrary code, provided the caller names the
types it trusts: :func:`skops_trusted_types` lists this library's.
"""

import inspect


def skops_trusted_types():
    """Fully qualified names of the library's estimators, for ``skops.io.load``.

    skops refuses to load a type it does not trust. scikit-learn's estimators
    and numpy's arrays are trusted by default; the estimators of this library
    are not, so pass this list as ``trusted``. It is built from the public
    API, so it covers every calibrator and :class:`~sklearn_calib.CalibratedClassifier`.

    Returns
    -------
    trusted : list of str
        Sorted names such as ``"sklearn_calib._scaling.TemperatureScaling"``.

    See Also
    --------
    skops.io.get_untrusted_types : The types of a file that are not trusted by
        default; check them against this list before loading a file of
        unknown origin.

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

    trusted = []
    for name in sklearn_calib.__all__:
        obj = getattr(sklearn_calib, name)
        # Base classes are never fitted, so never saved.
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseEstimator)
            and not name.startswith("Base")
        ):
            trusted.append(f"{obj.__module__}.{obj.__qualname__}")
    return sorted(trusted)
