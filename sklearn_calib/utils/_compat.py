"""The only module that imports private scikit-learn API.

Everything else in the package imports these names from here, so a change in
scikit-learn's internals is mended in one place.
"""

import numpy as np
from sklearn.base import _fit_context
from sklearn.metrics._scorer import _Scorer
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import (
    HasMethods,
    Options,
    StrOptions,
    validate_params,
)
from sklearn.utils._param_validation import Interval as _Interval
from sklearn.utils.metadata_routing import _routing_enabled
from sklearn.utils.validation import (
    _check_method_params,
    _check_sample_weight,
    _num_samples,
    check_is_fitted,
    validate_data,
)

__all__ = [
    "HasMethods",
    "Interval",
    "Options",
    "ScorerSubclass",
    "StrOptions",
    "_Scorer",
    "_check_method_params",
    "_check_sample_weight",
    "_fit_context",
    "_num_samples",
    "_routing_enabled",
    "_safe_indexing",
    "check_is_fitted",
    "validate_data",
    "validate_params",
]


class Interval(_Interval):
    """scikit-learn's numeric interval constraint, without booleans.

    ``True`` is an ``Integral`` (and a ``Real``) in Python, so scikit-learn's
    ``Interval`` lets ``n_bins=True`` or ``max_iter=True`` through, and the
    fit then fails deep inside numpy or torch with a message that names
    neither. A parameter that takes booleans says so with ``"boolean"``.
    """

    def is_satisfied_by(self, val):
        if isinstance(val, (bool, np.bool_)):
            return False
        return super().is_satisfied_by(val)


class ScorerSubclass(_Scorer):
    """Base of the package's scorers: a ``_Scorer`` with its own ``_score``.

    :meth:`from_scorer` gives a scorer made by
    :func:`sklearn.metrics.make_scorer` the subclass's type, keeping its
    state (private to scikit-learn, hence here).
    """

    @classmethod
    def from_scorer(cls, scorer):
        new = cls.__new__(cls)
        new.__dict__.update(vars(scorer))
        return new
