"""What the decision estimators share: probabilities from logits or a calibrator.

A decision estimator reads ``X`` as logits (their masked softmax, ``-inf`` a
class of probability 0) or hands it to a calibrator. A calibrator is either
cloned and fitted on its own random part of the data given to ``fit``
(``calibrator_fraction``), the rest certifying the decision, or used as it is
when wrapped in :class:`~sklearn.frozen.FrozenEstimator` (fitted on other
data), all of the data then certifying. Either way the samples that certify a
threshold were not used to fit the probabilities, which the guarantee needs.
"""

import math
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split
from sklearn.utils import indexable
from sklearn.utils.validation import assert_all_finite, column_or_1d

from ..conformal import calibrator_input_tags, masked_softmax
from ..utils._compat import (
    HasMethods,
    Interval,
    _num_samples,
    _safe_indexing,
    check_is_fitted,
)
from ..utils._validation import (
    check_logit_labels,
    check_logits,
    check_logits_and_labels,
    encode_with_classes,
    expand_binary_scores,
    resolve_classes,
    to_numpy,
)


def check_labels(y):
    """1-D finite classification labels (a column vector warns, as in sklearn)."""
    y = column_or_1d(np.asarray(to_numpy(y)), warn=True)
    if y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")
    check_logit_labels(y)
    return y


class DecisionEstimator(ClassifierMixin, BaseEstimator):
    """Base of the decision estimators: probabilities, classes and the split.

    Subclasses declare their own parameters (merging these constraints) and
    call :meth:`_fit_probabilities` in ``fit``.
    """

    _parameter_constraints: dict = {
        "calibrator": [HasMethods(["fit", "predict_proba"]), None],
        "calibrator_fraction": [Interval(Real, 0, 1, closed="neither")],
        "random_state": ["random_state"],
        "classes": ["array-like", None],
    }

    def _fit_probabilities(self, X, y):
        """Fit the calibrator and return the certification part.

        Returns
        -------
        proba : ndarray of shape (n_certify, n_classes)
            float64 probabilities of the samples that certify.
        y_codes : ndarray of shape (n_certify,)
            Column index of their labels.
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None."
            )
        if self.calibrator is None:
            self.calibrator_ = None
            X, y = check_logits_and_labels(self, X, y)
            X = expand_binary_scores(X)
            classes, y_codes = resolve_classes(y, X.shape[1], self.classes)
            self.classes_ = classes
            return masked_softmax(X), y_codes
        if self.classes is not None:
            raise ValueError(
                "classes= is for calibrator=None; a calibrator states its own "
                "classes: pass classes= to the calibrator instead."
            )
        y = check_labels(y)
        (X,) = indexable(to_numpy(X))
        n_samples = _num_samples(X)
        if n_samples != y.shape[0]:
            raise ValueError(
                "X and y have inconsistent numbers of samples: "
                f"{n_samples} and {y.shape[0]}."
            )
        if isinstance(self.calibrator, FrozenEstimator):
            self.calibrator_ = self.calibrator
            X_certify, y_certify = X, y
        else:
            # train_test_split's own message named its train_size, not ours
            n_fit = math.floor(self.calibrator_fraction * n_samples)
            if not 0 < n_fit < n_samples:
                raise ValueError(
                    f"calibrator_fraction={self.calibrator_fraction:g} of "
                    f"{n_samples} samples leaves {n_fit} to fit the calibrator "
                    f"and {n_samples - n_fit} to certify; each part needs at "
                    "least one sample."
                )
            fit_rows, certify_rows = train_test_split(
                np.arange(n_samples),
                train_size=self.calibrator_fraction,
                random_state=self.random_state,
                stratify=_stratify(y, self.calibrator_fraction),
            )
            self.calibrator_ = clone(self.calibrator).fit(
                _safe_indexing(X, fit_rows), y[fit_rows]
            )
            X_certify = _safe_indexing(X, certify_rows)
            y_certify = y[certify_rows]
        self.classes_ = np.asarray(self.calibrator_.classes_)
        y_codes = encode_with_classes(
            y_certify, self.classes_, y_name="y", name="the calibrator's classes_"
        )
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(self.calibrator_, name):
                setattr(self, name, getattr(self.calibrator_, name))
        return self._probabilities(X_certify), y_codes

    def _probabilities(self, X):
        """float64 probabilities of ``X`` (validated here or by the calibrator)."""
        if self.calibrator_ is None:
            return masked_softmax(
                expand_binary_scores(check_logits(self, X, reset=False))
            )
        proba = np.asarray(self.calibrator_.predict_proba(X), dtype=np.float64)
        if proba.ndim != 2 or proba.shape[1] != len(self.classes_):
            raise ValueError(
                f"The calibrator's predict_proba returned shape {proba.shape}; "
                f"expected (n_samples, {len(self.classes_)})."
            )
        return proba

    def predict_proba(self, X):
        """Class probabilities: the calibrator's, or the softmax of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits (what the calibrator takes).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns ordered as ``classes_``; masked classes get exactly 0.
        """
        check_is_fitted(self)
        if self.calibrator_ is not None:
            return self.calibrator_.predict_proba(X)
        return self._probabilities(X)

    def __sklearn_tags__(self):
        return calibrator_input_tags(super().__sklearn_tags__(), self.calibrator)


def _stratify(y, train_fraction):
    """``y`` where a stratified split can give both parts every class, else None.

    A random split can leave a class out of the calibrator's part, whose
    ``classes_`` then miss a label of the certification part. Stratifying keeps
    each class in both parts whenever every class has two samples and each part
    has room for one sample per class.
    """
    _, counts = np.unique(y, return_counts=True)
    n_fit = int(np.floor(train_fraction * y.shape[0]))
    n_certify = y.shape[0] - n_fit
    if counts.min() >= 2 and min(n_fit, n_certify) >= counts.size:
        return y
    return None
