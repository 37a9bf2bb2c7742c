"""Calibrate any scikit-learn classifier with any calibrator of the library."""

import warnings
from inspect import signature

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import check_cv
from sklearn.utils import get_tags, indexable
from sklearn.utils.metadata_routing import (
    MetadataRouter,
    MethodMapping,
    process_routing,
)

from ..utils._compat import (
    HasMethods,
    StrOptions,
    _check_method_params,
    _fit_context,
    _num_samples,
    _routing_enabled,
    _safe_indexing,
    check_is_fitted,
)
from ..utils._fitted_state import (
    check_state_classes,
    check_state_int,
    check_state_list,
    check_state_parameters,
    fail_state,
    get_state,
    is_fitted_state,
)
from ..utils._validation import (
    check_classification_labels,
    check_column_classes,
    check_sample_weight,
    encode_with_classes,
    match_labels,
)

# predict_proba of 0 becomes the logit log(1e-12) ~ -27.6: finite, and far enough
# below any real log-probability not to distort the calibration map.
_PROBA_FLOOR = 1e-12


def _estimator_logits(estimator, X):
    """The logits of a fitted classifier: its decision function, else log-proba.

    A binary decision function of shape (n_samples,) becomes one score column,
    which every calibrator reads as the logits (0, s).
    """
    if hasattr(estimator, "decision_function"):
        scores = np.asarray(estimator.decision_function(X))
        return scores.reshape(-1, 1) if scores.ndim == 1 else scores
    proba = np.asarray(estimator.predict_proba(X))
    return np.log(np.clip(proba, _PROBA_FLOOR, None))


class CalibratedClassifier(ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
    """Calibrate the probabilities of any classifier with any calibrator.

    Like :class:`sklearn.calibration.CalibratedClassifierCV`, but the map
    from the classifier's outputs to probabilities is any calibrator of this
    library (temperature, vector or matrix scaling, Dirichlet, isotonic,
    histogram binning, SMART, ...). The calibrator sees the classifier's
    ``decision_function`` as logits, or the log of its ``predict_proba``
    (clipped at ``1e-12``) when it has no decision function. A binary
    decision function is passed as one score column ``s``, read by every
    calibrator as the logits ``(0, s)``.

    Three ways to fit, as in scikit-learn:

    - ``ensemble=True``: for each cross-validation split, a clone of the
      estimator is fitted on the training part and a clone of the
      calibrator on the estimator's logits of the held-out part.
      :meth:`predict_proba` averages the calibrated probabilities of these
      pairs.
    - ``ensemble=False``: out-of-fold logits of every sample are collected
      over the splits, one calibrator is fitted on them, and the estimator
      is refitted on all the data.
    - a prefit estimator wrapped in :class:`sklearn.frozen.FrozenEstimator`:
      with the default ``ensemble="auto"``, it is never refitted and one
      calibrator is fitted on its logits of all of ``X``, which should then
      be data the estimator was not trained on.

    Parameters
    ----------
    estimator : estimator instance, default=None
        The classifier whose probabilities to calibrate. It needs ``fit``
        and ``decision_function`` or ``predict_proba``, and a ``classes_``
        attribute once fitted. ``None`` means
        :class:`~sklearn.linear_model.LogisticRegression`.
    calibrator : estimator instance, default=None
        The calibrator, cloned for every fit: any calibrator of this library
        (or any classifier over logits with ``fit(X, y, sample_weight)`` and
        ``predict_proba``). ``None`` means
        :class:`~sklearn_calib.TemperatureScaling`.
    cv : int, cross-validation generator or iterable, default=5
        How to split the data: the number of stratified folds, a splitter
        such as :class:`~sklearn.model_selection.GroupKFold`, or an iterable
        of ``(train, test)`` index arrays. Ignored for a
        :class:`~sklearn.frozen.FrozenEstimator` with ``ensemble=False``.
        Every training part must hold every class.
    ensemble : bool or "auto", default="auto"
        Whether to keep one (estimator, calibrator) pair per split and
        average their probabilities (``True``), or one calibrator on
        out-of-fold logits and one estimator refitted on all the data
        (``False``). ``"auto"`` is ``False`` for a
        :class:`~sklearn.frozen.FrozenEstimator` and ``True`` otherwise.
    classes : array-like of shape (n_classes,), default=None
        Every class the classifier stands for, in the column order of
        :meth:`predict_proba`. ``y`` may hold any subset of it, and so may
        the estimator's ``classes_``: a class it does not know gets
        probability 0. ``None`` uses the fitted estimator's ``classes_``.
        Set it when the training data may lack a class that predictions
        must still have a column for.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels: ``classes`` when given, else those of the fitted
        estimator.
    estimators_ : list of fitted estimators
        One per split with ``ensemble=True``; otherwise a single estimator
        (refitted on all the data, or the frozen one).
    calibrators_ : list of fitted calibrators
        The calibrator paired with each of ``estimators_``. They are fitted
        on integer class codes: code ``i`` stands for the estimator's
        ``classes_[i]``. A calibrator of this library is given
        ``classes=arange(n)`` (``n`` the estimator's number of classes, its
        own ``classes`` is overridden), so that it fits even on a calibration
        fold that holds fewer classes, a single one included.
    n_features_in_ : int
        Number of features seen by the estimator, when it records it.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Feature names seen by the estimator, when ``X`` had string column
        names.

    See Also
    --------
    sklearn.calibration.CalibratedClassifierCV : The same scheme with
        sigmoid, isotonic and temperature calibration.
    TemperatureScaling : The default calibrator.

    Notes
    -----
    Sample weights are used by every calibrator fit. Without metadata routing
    they are also passed to the estimator's ``fit`` when it accepts them (a
    warning says when it does not). With
    ``sklearn.set_config(enable_metadata_routing=True)``, they reach the
    estimator only if it requests them
    (``estimator.set_fit_request(sample_weight=True)``), and other fit
    parameters are routed to the estimator's ``fit`` and the splitter's
    ``split`` (for example ``groups``) by their requests.

    Sparse input and missing values are accepted exactly when the estimator
    accepts them: the calibrator only ever sees dense, finite logits. The
    classifier handles more than two classes when both the estimator and the
    calibrator do (``PlattScaling`` is binary only).

    References
    ----------
    .. [1] B. Zadrozny and C. Elkan, "Transforming classifier scores into
       accurate multiclass probability estimates", KDD 2002.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from sklearn.naive_bayes import GaussianNB
    >>> from sklearn_calib import CalibratedClassifier, TemperatureScaling
    >>> X, y = make_classification(n_samples=300, n_classes=3, n_informative=4,
    ...                            random_state=0)
    >>> clf = CalibratedClassifier(GaussianNB(), TemperatureScaling(device="cpu"))
    >>> clf.fit(X, y).predict_proba(X[:2]).shape
    (2, 3)
    >>> len(clf.calibrators_)
    5
    """

    _parameter_constraints: dict = {
        "estimator": [
            HasMethods(["fit", "decision_function"]),
            HasMethods(["fit", "predict_proba"]),
            None,
        ],
        "calibrator": [HasMethods(["fit", "predict_proba"]), None],
        "cv": ["cv_object"],
        "ensemble": ["boolean", StrOptions({"auto"})],
        "classes": ["array-like", None],
    }

    def __init__(
        self, estimator=None, calibrator=None, *, cv=5, ensemble="auto", classes=None
    ):
        self.estimator = estimator
        self.calibrator = calibrator
        self.cv = cv
        self.ensemble = ensemble
        self.classes = classes

    def _get_estimator(self):
        if self.estimator is not None:
            return self.estimator
        from sklearn.linear_model import LogisticRegression

        estimator = LogisticRegression()
        if _routing_enabled():
            estimator.set_fit_request(sample_weight=True)
        return estimator

    def _get_calibrator(self):
        if self.calibrator is not None:
            return self.calibrator
        from .._scaling.temperature import TemperatureScaling

        return TemperatureScaling()

    @_fit_context(
        # estimator and calibrator are validated by their own fit
        prefer_skip_nested_validation=False
    )
    def fit(self, X, y, sample_weight=None, **fit_params):
        """Fit the estimator(s) and calibrator(s).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Training data, in any form the estimator accepts.
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights, used by the calibrators and routed to the
            estimator (see Notes).
        **fit_params : dict
            Passed to the estimator's ``fit``; with metadata routing enabled,
            routed to the estimator's ``fit`` and the splitter's ``split``.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        y = check_classification_labels(self, y)
        classes = None
        if self.classes is not None:
            classes = check_column_classes(
                self.classes, None, name="classes", columns="classes"
            )
            encode_with_classes(y, classes, y_name="y", name="classes")
        n_classes = np.unique(y).shape[0] if classes is None else classes.shape[0]
        if n_classes > 2 and not get_tags(self).classifier_tags.multi_class:
            source = "y has" if classes is None else "classes lists"
            raise ValueError(
                "Only binary classification is supported. "
                f"{type(self._get_calibrator()).__name__} (or the estimator) "
                f"handles two classes, but {source} {n_classes}."
            )
        X, y = indexable(X, y)
        if sample_weight is not None:
            sample_weight = check_sample_weight(sample_weight, X)
        estimator = self._get_estimator()
        estimator_params, split_params = self._route_fit_params(
            estimator, sample_weight, fit_params
        )
        ensemble = self.ensemble
        if ensemble == "auto":
            ensemble = not isinstance(estimator, FrozenEstimator)

        if isinstance(estimator, FrozenEstimator) and not ensemble:
            # A prefit estimator is calibrated on all of X, never refitted.
            folds = [(estimator, np.arange(_num_samples(X)))]
        else:
            cv = check_cv(self.cv, y, classifier=True)
            folds = []
            for train, test in cv.split(X, y, **split_params):
                fold_params = _check_method_params(X, estimator_params, indices=train)
                fold_estimator = clone(estimator).fit(
                    _safe_indexing(X, train), y[train], **fold_params
                )
                folds.append((fold_estimator, test))
            if not folds:
                raise ValueError(
                    f"cv={self.cv!r} gives no (train, test) split: nothing to "
                    "fit the estimator and calibrator on."
                )

        estimator_classes = self._check_classes([est for est, _ in folds], y, classes)
        # The calibrators see the estimator's columns: code i is its i-th class
        # (its classes_ need not be sorted for a prefit estimator).
        codes, _ = match_labels(y, estimator_classes)
        n_codes = estimator_classes.shape[0]
        if ensemble:
            self.estimators_ = [est for est, _ in folds]
            self.calibrators_ = [
                self._fit_calibrator(
                    _estimator_logits(est, _safe_indexing(X, test)),
                    codes[test],
                    None if sample_weight is None else sample_weight[test],
                    n_codes,
                )
                for est, test in folds
            ]
        else:
            logits = self._out_of_fold_logits(X, folds)
            if isinstance(estimator, FrozenEstimator):
                final_estimator = estimator
            else:
                final_estimator = clone(estimator).fit(X, y, **estimator_params)
            self.estimators_ = [final_estimator]
            self.calibrators_ = [
                self._fit_calibrator(logits, codes, sample_weight, n_codes)
            ]
        self.classes_ = estimator_classes if classes is None else classes

        first = self.estimators_[0]
        if hasattr(first, "n_features_in_"):
            self.n_features_in_ = first.n_features_in_
        if hasattr(first, "feature_names_in_"):
            self.feature_names_in_ = first.feature_names_in_
        return self

    def _route_fit_params(self, estimator, sample_weight, fit_params):
        """Fit parameters of the estimator and of the splitter's ``split``."""
        if _routing_enabled():
            routed = process_routing(
                self, "fit", sample_weight=sample_weight, **fit_params
            )
            return routed.estimator.fit, routed.splitter.split
        estimator_params = dict(fit_params)
        if sample_weight is not None and not isinstance(estimator, FrozenEstimator):
            if "sample_weight" in signature(estimator.fit).parameters:
                estimator_params["sample_weight"] = sample_weight
            else:
                warnings.warn(
                    f"{type(estimator).__name__}.fit does not accept sample_weight; "
                    "the weights are used by the calibrator only. Enable metadata "
                    "routing to control where they go.",
                    UserWarning,
                    stacklevel=3,
                )
        return estimator_params, {}

    @staticmethod
    def _check_classes(estimators, y, classes):
        """The fitted estimators' classes: they agree, cover y and lie in classes."""
        estimator_classes = np.asarray(estimators[0].classes_)
        for est in estimators[1:]:
            other = np.asarray(est.classes_)
            if not np.array_equal(other, estimator_classes):
                raise ValueError(
                    "The estimators fitted on the training folds saw different "
                    f"classes ({estimator_classes.tolist()} and {other.tolist()}): "
                    "every class needs samples in every training fold. Use a "
                    "stratified splitter or fewer folds."
                )
        unknown = np.setdiff1d(y, estimator_classes)
        if unknown.size:
            raise ValueError(
                f"y has classes {unknown.tolist()} that the estimator did not see "
                f"in training (its classes are {estimator_classes.tolist()}): every "
                "class needs samples in every training fold."
            )
        if classes is not None:
            _, known = match_labels(estimator_classes, classes)
            if not np.all(known):
                raise ValueError(
                    "The estimator's classes "
                    f"{estimator_classes[~known].tolist()} are not in classes="
                    f"{classes.tolist()}; classes must list every class the "
                    "estimator predicts."
                )
        return estimator_classes

    @staticmethod
    def _out_of_fold_logits(X, folds):
        """Stack each fold estimator's logits of its held-out rows."""
        n_samples = _num_samples(X)
        test_counts = np.bincount(
            np.concatenate([test for _, test in folds]), minlength=n_samples
        )
        if not np.all(test_counts == 1):
            raise ValueError(
                "ensemble=False needs the cv test folds to partition the samples: "
                "every sample must be held out exactly once."
            )
        logits = None
        for est, test in folds:
            fold_logits = _estimator_logits(est, _safe_indexing(X, test))
            if logits is None:
                logits = np.empty((n_samples, fold_logits.shape[1]), fold_logits.dtype)
            logits[test] = fold_logits
        return logits

    def _fit_calibrator(self, logits, codes, sample_weight, n_codes):
        calibrator = clone(self._get_calibrator())
        if "classes" in calibrator.get_params(deep=False):
            # The class set is known from all of y: a calibration fold that
            # lacks some classes (even all but one) still fits every column.
            calibrator.set_params(classes=np.arange(n_codes))
        elif np.unique(codes).shape[0] < 2:
            raise ValueError(
                "A calibration fold holds samples of a single class, so "
                f"{type(calibrator).__name__} cannot be fitted on it: use fewer "
                "cv folds, a stratified splitter or more samples of the rarest "
                "class, or a calibrator of this library (they take the class "
                "set from all of y)."
            )
        return calibrator.fit(logits, codes, sample_weight=sample_weight)

    def _estimator_columns(self, estimator):
        """Column of ``classes_`` of each of the estimator's classes."""
        columns, _ = match_labels(np.asarray(estimator.classes_), self.classes_)
        return columns

    def predict_proba(self, X):
        """Calibrated class probabilities.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Samples, in any form the estimator accepts.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            The mean over ``calibrators_`` of their calibrated probabilities,
            columns ordered as ``classes_``.
        """
        check_is_fitted(self)
        proba = np.zeros((_num_samples(X), self.classes_.shape[0]))
        for estimator, calibrator in zip(
            self.estimators_, self.calibrators_, strict=True
        ):
            logits = _estimator_logits(estimator, X)
            # A calibrator's columns are the estimator's class codes (a
            # classifier used as calibrator may know only those of its fold);
            # they land at those classes' columns of classes_, and classes the
            # estimator does not know keep probability 0.
            columns = self._estimator_columns(estimator)
            proba[:, columns[calibrator.classes_]] += calibrator.predict_proba(logits)
        proba /= len(self.calibrators_)
        return proba

    def predict(self, X):
        """The most probable class under the calibrated probabilities.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Samples, in any form the estimator accepts.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Labels from ``classes_``. They may differ from the estimator's
            own predictions when the calibrator does not keep the argmax.
        """
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def _check_fitted_state(self):
        """Raise a ValueError if the fitted state is not one :meth:`fit` produces.

        Called when the classifier is loaded (pickle, joblib, skops); each
        calibrator of the library has checked its own state by then.
        """
        self._validate_params()
        check_state_classes(self)
        estimators = get_state(self, "estimators_")
        calibrators = get_state(self, "calibrators_")
        if not isinstance(estimators, list) or not estimators:
            fail_state(self, "estimators_", "must be a non-empty list")
        check_state_list(self, "calibrators_", length=len(estimators))
        for i, (estimator, calibrator) in enumerate(
            zip(estimators, calibrators, strict=True)
        ):
            known = np.asarray(getattr(estimator, "classes_", []))
            if known.ndim != 1 or not np.all(match_labels(known, self.classes_)[1]):
                fail_state(
                    self,
                    f"estimators_[{i}].classes_",
                    f"must be classes of classes_={self.classes_.tolist()}",
                )
            codes = np.asarray(getattr(calibrator, "classes_", []))
            if (
                codes.ndim != 1
                or codes.dtype.kind not in "iu"
                or np.unique(codes).shape[0] != codes.shape[0]
                or codes.min(initial=0) < 0
                or codes.max(initial=0) >= known.shape[0]
            ):
                fail_state(
                    self,
                    f"calibrators_[{i}].classes_",
                    "must be distinct class codes of the estimator, in "
                    f"range({known.shape[0]})",
                )
        if hasattr(self, "n_features_in_"):
            check_state_int(self, "n_features_in_", low=1)

    def __setstate__(self, state):
        # Files of an earlier version have no classes parameter.
        state.setdefault("classes", None)
        check_state_parameters(type(self), state)
        super().__setstate__(state)
        # Any fitted attribute: checked in full, classes_ deleted or not.
        if is_fitted_state(state):
            self._check_fitted_state()

    def get_metadata_routing(self):
        """Get the metadata routing of this object.

        Sample weights are consumed by the calibrators, and routed to the
        estimator's ``fit`` as it requests; other fit parameters go to the
        estimator's ``fit`` and the splitter's ``split``.

        Returns
        -------
        routing : MetadataRouter
            The routing information.
        """
        return (
            MetadataRouter(owner=self)
            .add_self_request(self)
            .add(
                estimator=self._get_estimator(),
                method_mapping=MethodMapping().add(caller="fit", callee="fit"),
            )
            .add(
                splitter=self.cv,
                method_mapping=MethodMapping().add(caller="fit", callee="split"),
            )
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        estimator_tags = get_tags(self._get_estimator())
        calibrator_tags = get_tags(self._get_calibrator())
        tags.input_tags.sparse = estimator_tags.input_tags.sparse
        tags.input_tags.allow_nan = estimator_tags.input_tags.allow_nan
        # A binary-only calibrator (Platt scaling) makes a binary-only classifier.
        tags.classifier_tags.multi_class = (
            estimator_tags.classifier_tags.multi_class
            and calibrator_tags.classifier_tags.multi_class
        )
        return tags
