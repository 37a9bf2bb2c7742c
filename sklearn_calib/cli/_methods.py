"""Calibrators by name, their settings, and the skops files of ``fit``."""

import ast
import re

from ._common import CommandError, first_line
from ._io import existing_file

# Settings ``report`` uses instead of a method's defaults, for a method too
# slow to run on the bundled data well within a minute on two CPU cores; the
# table and the HTML page say when a method ran with them. None is needed at
# present: with their defaults, every method fits the bundled CIFAR-100 set
# in a few seconds on two cores (the whole report takes about 10 s).
REPORT_PARAMS: dict[str, dict] = {}


def _normalise(name):
    return re.sub(r"[-_\s]", "", name).lower()


def calibrator_classes():
    """Public calibrators by class name, from the registry."""
    from ..utils.discovery import all_calibrators

    return dict(all_calibrators())


def resolve_method(name):
    """Calibrator class from a name.

    The class name in any case, with or without underscores or hyphens
    (``temperature_scaling``), or an unambiguous start of one (``platt``).
    """
    classes = calibrator_classes()
    wanted = _normalise(name)
    exact = [cls for key, cls in classes.items() if _normalise(key) == wanted]
    if exact:
        return exact[0]
    prefixed = [key for key in classes if wanted and _normalise(key).startswith(wanted)]
    if len(prefixed) == 1:
        return classes[prefixed[0]]
    if prefixed:
        raise CommandError(
            f"method {name!r} is ambiguous: {', '.join(sorted(prefixed))}"
        )
    raise CommandError(
        f"unknown method {name!r}; choose from {', '.join(sorted(classes))} "
        "(any case; snake_case or the start of a name works too)"
    )


def select_methods(spec):
    """``(name, class)`` pairs named by ``--methods A,B`` (all when not given).

    A given but empty ``--methods ""`` names no method: refused, as a list of
    commas is (running every method would answer another question).
    """
    classes = calibrator_classes()
    if spec is None:
        return sorted(classes.items())
    chosen = []
    for name in spec.split(","):
        name = name.strip()
        if not name:
            continue
        cls = resolve_method(name)
        if (cls.__name__, cls) not in chosen:
            chosen.append((cls.__name__, cls))
    if not chosen:
        raise CommandError(
            f"--methods {spec!r} names no method; give comma-separated names "
            "(e.g. TemperatureScaling,VectorScaling), or leave --methods out to "
            "run every method"
        )
    return chosen


def make_calibrator(cls, *, device=None, seed=None, params=None, classes=None):
    """An instance of ``cls`` with ``params``, a device, a seed and the classes
    of the logit columns where it has them.

    A seed makes the stochastic methods (SMART's initialisation, ...) give
    the same numbers on every run of the command.
    """
    estimator = cls()
    accepted = estimator.get_params()
    if classes is not None and "classes" in accepted:
        estimator.set_params(classes=classes)
    if seed is not None and "random_state" in accepted:
        estimator.set_params(random_state=seed)
    if device is not None and "device" in accepted:
        estimator.set_params(device=device)
    return estimator.set_params(**(params or {}))


def parse_params(pairs):
    """``["n_bins=20", "strategy=quantile"]`` -> ``{"n_bins": 20, ...}``."""
    params = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--param {pair!r}: expected KEY=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        params[key.strip()] = value
    return params


# What to do on the command line where the library asks for classes=.
CLASSES_HINT = (
    "On the command line: --classes index (column i holds label i), "
    "--classes 1-based (label i + 1), or --classes A,B,... (one label per column)."
)


def parse_classes(spec, n_columns):
    """The labels of the logit columns that ``--classes`` names, or None.

    ``index``: column ``i`` holds label ``i``; ``1-based``: label ``i + 1``;
    otherwise a comma-separated list of one label per column (integers when
    every item is one, else strings). A single score column stands for two
    classes.
    """
    if spec is None:
        return None
    import numpy as np

    n_classes = max(n_columns, 2)
    if spec == "index":
        return np.arange(n_classes)
    if spec == "1-based":
        return np.arange(1, n_classes + 1)
    items = [item.strip() for item in spec.split(",")]
    if len(items) != n_classes or not all(items):
        raise CommandError(
            f"--classes {spec!r}: expected 'index', '1-based' or {n_classes} "
            f"comma-separated labels (one per logit column), got {len(items)}"
        )
    try:
        return np.array([int(item) for item in items])
    except ValueError:
        return np.array(items)


def with_classes_hint(exc):
    """The message of a ValueError, with ``CLASSES_HINT`` where it asks for classes=."""
    text = first_line(exc)
    return f"{text} {CLASSES_HINT}" if "pass classes=" in text.lower() else text


def import_skops():
    """``skops.io``, or a clear error naming the extra that installs it."""
    try:
        import skops.io
    except ImportError as exc:
        raise CommandError(
            "saving and loading calibrators needs skops: python -m pip install "
            "'sklearn-calib[cli]' (or skops)"
        ) from exc
    return skops.io


def dumps_loadable(estimator):
    """The skops bytes of a fitted ``estimator``, if ``apply`` can load them.

    ``apply`` trusts only the library's types (:func:`load_calibrator`); a
    selector fitted with a scikit-learn scorer name (``--param
    scoring=accuracy``) holds scikit-learn's scorer and metric, so the file
    would be refused there. Such a fit is refused here, before anything is
    written.
    """
    sio = import_skops()
    from ..utils.persistence import skops_trusted_types

    data = sio.dumps(estimator)
    untrusted = sorted(
        set(sio.get_untrusted_types(data=data)) - set(skops_trusted_types())
    )
    if untrusted:
        raise CommandError(
            f"the fitted {type(estimator).__name__} holds types other than "
            f"sklearn-calib's ({', '.join(untrusted)}), so 'apply' would refuse "
            "its file; nothing was written. For a scorer, name one of the "
            "library's own (neg_log_loss, neg_multiclass_brier_score, "
            "neg_expected_calibration_error, ...)"
        )
    return data


def load_calibrator(path):
    """Load a calibrator saved by ``fit``, trusting only the library's types.

    Besides skops's defaults (numpy arrays, scikit-learn estimators, Python
    builtins), only the estimator classes of this library are trusted.
    """
    sio = import_skops()
    path = existing_file(path)
    from skops.io.exceptions import UntrustedTypesFoundException

    from ..base import BaseCalibrator
    from ..utils.persistence import check_skops_archive, skops_trusted_types

    try:
        check_skops_archive(path)
    except ValueError as exc:
        raise CommandError(f"{path}: refused, {first_line(exc)}") from exc
    try:
        estimator = sio.load(path, trusted=skops_trusted_types())
    except UntrustedTypesFoundException as exc:
        raise CommandError(
            f"{path}: refused, it holds types other than sklearn-calib calibrators "
            f"({first_line(exc)})"
        ) from exc
    except Exception as exc:  # skops raises zipfile/json/key errors on junk
        raise CommandError(
            f"{path}: not a calibrator saved by 'sklearn-calib fit' "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from exc
    if not isinstance(estimator, BaseCalibrator):
        raise CommandError(
            f"{path}: holds a {type(estimator).__name__}, not a calibrator of "
            "logits; save one with 'sklearn-calib fit'"
        )
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(estimator)
    except NotFittedError as exc:
        # An unfitted calibrator (skops.io.dump(TemperatureScaling())) has no
        # classes_: apply stopped with Python's AttributeError.
        raise CommandError(
            f"{path}: holds an unfitted {type(estimator).__name__}; save a "
            "fitted one (sklearn-calib fit)"
        ) from exc
    return estimator
