"""Helpers to save and load fitted estimators of the library safely.

pickle and joblib work on every estimator (their fitted state is plain numpy
arrays and Python numbers, never torch tensors). `skops <https://skops.readthedocs.io>`_
loads files without executing arbitrary code, provided the caller names the
types it trusts: :func:`skops_trusted_types` lists this library's (its
estimators, and the scorer class and metric functions a fitted
:class:`~sklearn_calib.CalibratorSelector` holds).
"""

import inspect
import zipfile

# A skops file is a zip archive of a JSON schema and one .npy member per
# array. Fitted arrays of floats hardly compress, so a member that expands
# more than this many times, beyond MAX_COMPRESSED_MEMBER bytes, is not a
# fitted state but padding (10**8 zeros deflate to 778 KB and expand to
# 800 MB): it is refused before it is expanded.
MAX_EXPANSION = 100
MAX_COMPRESSED_MEMBER = 16 * 2**20
# No calibrator's state comes near this in total.
MAX_ARCHIVE_BYTES = 2**31


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
    from ..metrics._proper import log_loss
    from ..metrics._scorer import SCORERS

    # The library's log_loss was the metric of "neg_log_loss" until that
    # scorer took scikit-learn's (its number): files written before hold it.
    names = {_qualified_name(log_loss)}
    for scorer in SCORERS.values():
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


def check_skops_archive(file):
    """Refuse a skops file whose members expand far beyond a fitted state.

    Reads only the archive's directory (the sizes it declares), never the
    members themselves, so a small file that would expand to gigabytes is
    refused before :func:`skops.io.load` expands it. A fitted calibrator's
    arrays (parameters, thresholds, calibration scores) are numbers that
    hardly compress; a member that expands more than ``MAX_EXPANSION`` times
    beyond ``MAX_COMPRESSED_MEMBER`` bytes, or an archive of more than
    ``MAX_ARCHIVE_BYTES`` in all, is padding, not a state a fit produces.

    Parameters
    ----------
    file : str, path or file-like
        The skops file.

    Raises
    ------
    ValueError
        Naming the member and its sizes. A file that is not a zip archive is
        left to skops, which names the problem itself.

    See Also
    --------
    skops_trusted_types : The types to trust when loading the file.

    Examples
    --------
    >>> import io, zipfile
    >>> from sklearn_calib.utils.persistence import check_skops_archive
    >>> padded = io.BytesIO()
    >>> with zipfile.ZipFile(padded, "w", zipfile.ZIP_DEFLATED) as archive:
    ...     archive.writestr("a.npy", bytes(20 * 2**20))
    >>> check_skops_archive(padded)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: The saved state's member 'a.npy' expands from ... bytes: ...
    """
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError):
        return
    with archive:
        total = 0
        for info in archive.infolist():
            total += info.file_size
            if info.file_size > MAX_COMPRESSED_MEMBER and info.file_size > (
                MAX_EXPANSION * max(info.compress_size, 1)
            ):
                raise ValueError(
                    f"The saved state's member {info.filename!r} expands from "
                    f"{info.compress_size:,} to {info.file_size:,} bytes: far "
                    "more than any fitted state needs (its arrays of numbers "
                    "hardly compress); the file was not written by a fit and "
                    "is refused before it is expanded."
                )
        if total > MAX_ARCHIVE_BYTES:
            raise ValueError(
                f"The saved state expands to {total:,} bytes, more than any "
                "fitted calibrator needs; refused before it is expanded."
            )
