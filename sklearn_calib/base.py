"""The calibrator contract shared by every method of the library."""

from abc import abstractmethod

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin

from ._chunks.first_pass import ScannedChunks
from ._chunks.sources import (
    as_chunk_source,
    is_dask_array,
    is_out_of_core,
    map_dask_method,
)
from ._torch._threads import fit_thread_limit, limit_torch_threads
from .chunked import fits_from_chunks
from .utils._compat import _fit_context, check_is_fitted
from .utils._fitted_state import (
    check_state_array,
    check_state_classes,
    check_state_int,
    check_state_parameters,
    is_fitted_state,
)
from .utils._math import log_softmax, row_blocks, softmax
from .utils._validation import (
    check_logits,
    check_logits_and_labels,
    check_sample_weight,
    expand_binary_scores,
    resolve_classes,
    warn_columns_named_otherwise,
)


class BaseCalibrator(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Base class of the post-hoc calibrators over logit arrays.

    A calibrator is a scikit-learn classifier whose input ``X`` holds the
    logits (or any real-valued class scores) of an already trained model,
    one column per class, and whose ``predict_proba`` returns calibrated
    probabilities. A binary problem may pass a single score column ``s``,
    read as the two logits ``(0, s)``.

    The public :meth:`fit` validates the input (finite values, 2-D shape, at
    least two classes, one logit column per class, sample weights), encodes
    the labels into ``classes_`` and calls the subclass's ``_fit``.
    :meth:`predict_proba`, :meth:`predict` and :meth:`transform` all derive
    from the subclass's ``_calibrated_logits``, so they always agree.

    The mixins live on this base (rather than on each subclass) so that
    scikit-learn's ``set_output`` wraps the shared :meth:`transform`.

    **Which class each logit column stands for.** Every calibrator takes a
    ``classes`` parameter: the label of each logit column, in column order
    (two labels, negative then positive, for a single score column). With it,
    ``classes_`` is ``classes`` and ``y`` may hold any subset of it, a single
    class included. With ``classes=None`` the classes are inferred from ``y``
    by this rule, with ``U`` the distinct labels of ``y`` and ``K`` the number
    of classes (the number of columns, 2 for a single score column):

    1. integer labels whose smallest value is 0 and that all lie in
       ``range(K)`` are the column indices themselves, whether or not every
       index occurs: ``classes_ = arange(K)``;
    2. otherwise, when ``U`` has exactly ``K`` labels (of any type, strings
       too), ``classes_`` is ``U`` sorted and column ``j`` belongs to its
       ``j``-th label (scikit-learn's order);
    3. anything else raises a ``ValueError`` asking for ``classes=`` rather
       than guessing: for example 1-based labels ``1..4`` whose calibration
       set lacks label 4 (three labels for four columns, which could as well
       be 0-based labels lacking 0), or string labels of which one is absent.

    Without ``classes``, ``y`` must also hold at least two classes.

    **Fitted state on loading.** Unpickling (pickle, joblib) and
    ``skops.io.load`` restore the state through ``__setstate__``, which checks
    it with ``_check_fitted_state``: a file whose fitted attributes were
    edited into values that no fit produces (a negative temperature, NaN
    weights, shapes that disagree with ``n_features_in_`` or ``classes_``) is
    refused with a ``ValueError`` naming the attribute.

    Subclasses implement:

    - ``_fit(self, logits, y, sample_weight)``: ``logits`` is a float array
      of shape (n_samples, n_classes) (a binary score column already
      expanded), ``y`` holds integer codes in ``range(n_classes)`` and
      ``sample_weight`` is a float64 array with a positive sum (divided by
      a power of two near its largest entry unless ``_weight_scale_matters``
      says the scale matters).
    - ``_calibrated_logits(self, logits)``: calibrated logits (or
      log-probabilities) for a validated block of rows.
    - ``_check_fitted_state(self)`` (extending the base's): raise a
      ``ValueError`` naming the fitted attribute that is missing, not finite,
      out of range or of the wrong shape.

    Every subclass takes ``classes=None`` in its constructor and stores it as
    ``self.classes``.
    """

    _parameter_constraints: dict = {"classes": ["array-like", None]}

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the calibrator on held-out logits.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits of the model to calibrate, one column per class, or one
            score column for a binary problem. numpy arrays, lists, pandas
            DataFrames and torch tensors (on any device) are accepted. A dask
            array, a zarr array or a ``numpy.memmap`` is read chunk by chunk
            in bounded memory by the calibrators that support it (see
            :meth:`fit_chunks`); the others read it into memory.
        y : array-like of shape (n_samples,)
            True labels. Any labels scikit-learn accepts (strings too). With
            ``classes`` set, every label must be one of ``classes``;
            otherwise they are matched to the columns by the rule of
            :class:`BaseCalibrator` and a ``ValueError`` asks for
            ``classes=`` where that is ambiguous.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; ``None`` weighs every sample equally.

        Returns
        -------
        self : object
            The fitted calibrator.
        """
        if is_out_of_core(X) and fits_from_chunks(self):
            # Data on disk or in a dask graph: the class's own chunked fit (the
            # other calibrators read the array into memory).
            limit = fit_thread_limit(self, getattr(X, "size", None))
            with limit_torch_threads(limit):
                return self._fit_source(as_chunk_source(X, y, sample_weight))
        X, y = check_logits_and_labels(self, X, y)
        # validate_data recorded n_features_in_ (and feature_names_in_); they
        # are set again last, like classes_, so that a fit that raises leaves
        # no state that looks fitted.
        seen = {
            name: vars(self).pop(name)
            for name in ("n_features_in_", "feature_names_in_")
            if name in vars(self)
        }
        # Divided by a power of two near the largest weight (exact), unless the
        # fit depends on their scale: sums of huge weights cannot overflow.
        sample_weight = check_sample_weight(
            sample_weight, X, normalize=not self._weight_scale_matters()
        )
        classes, y_encoded = resolve_classes(y, X.shape[1], self.classes)
        if self.classes is None:
            warn_columns_named_otherwise(seen.get("feature_names_in_"), classes)
        # Small fits run torch on one thread; inside a joblib worker, torch's
        # threads are limited as joblib limits BLAS threads (_torch/_threads.py).
        with limit_torch_threads(fit_thread_limit(self, X.size)):
            self._fit(expand_binary_scores(X), y_encoded, sample_weight)
        vars(self).update(seen)
        self.classes_ = classes
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_chunks(self, chunks):
        """Fit the calibrator on data given in chunks, in bounded memory.

        The data is read a few times, one chunk at a time (or as a dask graph,
        chunks in parallel), and never held in memory as a whole. The
        calibrators with a chunked fit are those for which
        :func:`sklearn_calib.chunked.fits_from_chunks` is true (its
        documentation says how each compares with :meth:`fit`); the others
        raise a ``TypeError``.

        Parameters
        ----------
        chunks : iterable or callable
            ``(X, y)`` or ``(X, y, sample_weight)`` tuples of numpy-compatible
            arrays, as a re-iterable (a list, the result of
            :func:`sklearn_calib.chunked.open_chunks`) or a callable returning
            a new iterator at each call; a one-shot generator cannot be read
            several times and is refused. Chunks may differ in size; empty
            ones are skipped.

        Returns
        -------
        self : object
            The fitted calibrator.

        See Also
        --------
        fit : Also accepts dask, zarr and memmap arrays directly.
        sklearn_calib.chunked.fits_from_chunks : Which calibrators can.
        """
        return self._fit_source(as_chunk_source(chunks))

    def _fit_source(self, source):
        """The chunked fit: a first pass over the chunks, then the class's own.

        A calibrator that fits from chunks defines ``_fit_chunked(self, data)``
        (``data`` a :class:`~sklearn_calib._chunks.first_pass.ScannedChunks`:
        encoded chunks and what the first pass learnt) and stores its own
        fitted attributes there; ``_chunk_sample_rows`` may name rows to
        gather in the first pass. ``classes_`` and ``n_features_in_`` are set
        here, last, as in :meth:`fit`.
        """
        if not fits_from_chunks(self):
            raise TypeError(
                f"{type(self).__name__} cannot be fitted from chunks (dask, zarr "
                "or memmap arrays, or an iterable of chunks): it has no chunked "
                "fit (sklearn_calib.chunked.fits_from_chunks tells which "
                "calibrators do). Load the data into a numpy array (for example "
                "X.compute()) if it fits in memory."
            )
        data = ScannedChunks(
            source, classes=self.classes, sample_rows=self._chunk_sample_rows()
        )
        self._fit_chunked(data)
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.n_features_in_ = data.n_cols
        self.classes_ = data.classes
        return self

    def _chunk_sample_rows(self):
        """``rows(n_samples)`` the chunked fit reads besides its passes, or None."""
        return None

    def _weight_scale_matters(self):
        """Whether the fit depends on the scale of ``sample_weight``.

        False for most calibrators: multiplying every weight by a constant
        changes nothing, so :meth:`fit` hands ``_fit`` the weights divided by
        a power of two near the largest (exact, and sums cannot overflow). A
        calibrator that reads weights as numbers of samples (Platt's smoothed
        targets, Venn-Abers' test point of weight 1) or passes them on to
        nested calibrators returns True and receives them unscaled.
        """
        return False

    @abstractmethod
    def _fit(self, logits, y, sample_weight):
        """Fit on validated logits, integer codes and float64 weights."""

    @abstractmethod
    def _calibrated_logits(self, logits):
        """Calibrated logits (or log-probabilities) of validated logits."""

    def _check_fitted_state(self):
        """Raise a ValueError if the fitted state is not one a fit produces.

        The base checks what every calibrator shares: ``classes_`` (1-D,
        distinct, at least 2) and ``n_features_in_`` (1 for a binary score
        column, else the number of classes). Subclasses extend it with their
        own attributes; see :mod:`sklearn_calib.utils._fitted_state`.
        """
        # The constructor parameters travel in the same file.
        self._validate_params()
        n_classes = check_state_classes(self)
        n_features = check_state_int(self, "n_features_in_", low=1)
        if n_features != n_classes and not (n_features == 1 and n_classes == 2):
            raise ValueError(
                f"Fitted attribute n_features_in_ of {type(self).__name__} is "
                f"{n_features} but classes_ has {n_classes} classes; they must "
                "agree (1 score column for 2 classes, else one column per class)."
            )
        if hasattr(self, "feature_names_in_"):
            names = check_state_array(self, "feature_names_in_", ndim=1)
            if names.shape[0] != n_features:
                raise ValueError(
                    f"Fitted attribute feature_names_in_ of {type(self).__name__} "
                    f"has {names.shape[0]} names for n_features_in_={n_features}."
                )

    def __setstate__(self, state):
        # Files of an earlier version have no classes parameter.
        state.setdefault("classes", None)
        check_state_parameters(type(self), state)
        super().__setstate__(state)
        # A state holding any fitted attribute is checked in full: deleting
        # classes_ from a file must not skip the checks of the rest (an
        # unfitted estimator holds none; fit sets classes_ last).
        if is_fitted_state(state):
            self._check_fitted_state()

    def _check_fitted_input(self, X):
        """Validate logits at prediction time and expand a binary score column."""
        check_is_fitted(self)
        X = check_logits(self, X, reset=False)
        return expand_binary_scores(X)

    def _map_rows(self, X, finish):
        """Apply ``finish(calibrated_logits)`` row block by row block.

        Working in blocks keeps the temporaries small whatever the number of
        rows: the peak memory is the output plus a few blocks.
        """
        logits = self._check_fitted_input(X)
        out = np.empty(logits.shape, dtype=logits.dtype)
        for rows in row_blocks(*logits.shape):
            out[rows] = finish(self._calibrated_block(logits[rows], logits.dtype))
        return out

    def _calibrated_block(self, logits, dtype):
        """Calibrated logits of a block of rows, a writeable array of ``dtype``."""
        block = np.asarray(self._calibrated_logits(logits), dtype)
        if not block.flags.writeable:
            # A wrapped estimator's pandas output is a read-only view
            # (copy-on-write); the callers work in place.
            block = block.copy()
        return block

    def predict_proba(self, X):
        """Calibrated class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Rows on the probability simplex, columns ordered as ``classes_``.
            float32 logits give float32 probabilities. A dask array ``X``
            gives a dask array, computed block by block when asked.
        """
        if is_dask_array(X):
            return map_dask_method(self, X, "predict_proba")
        return self._map_rows(X, lambda block: softmax(block, out=block))

    def transform(self, X):
        """Calibrated log-probabilities, so that calibrators chain in a Pipeline.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
            ``log(predict_proba(X))``, computed stably (a dask array for a
            dask array ``X``).
        """
        if is_dask_array(X):
            return map_dask_method(self, X, "transform")
        return self._map_rows(X, lambda block: log_softmax(block, out=block))

    def _proba_and_log_proba(self, X):
        """``(predict_proba(X), transform(X))`` of a numpy ``X``, from one pass.

        The same numbers as the two public methods (both finish the same
        calibrated block), for callers that need both, as the selector's
        out-of-fold scoring does: the map runs once instead of twice.
        """
        logits = self._check_fitted_input(X)
        proba = np.empty(logits.shape, dtype=logits.dtype)
        log_proba = np.empty(logits.shape, dtype=logits.dtype)
        for rows in row_blocks(*logits.shape):
            block = self._calibrated_block(logits[rows], logits.dtype)
            proba[rows] = softmax(block.copy())
            log_proba[rows] = log_softmax(block, out=block)
        return proba, log_proba

    def predict_log_proba(self, X):
        """Calibrated log-probabilities; the same as :meth:`transform`."""
        return self.transform(X)

    def predict(self, X):
        """Most probable class under the calibrated probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Labels from ``classes_`` (a dask array for a dask array ``X``).
        """
        if is_dask_array(X):
            return map_dask_method(self, X, "predict")
        logits = self._check_fitted_input(X)
        codes = np.empty(logits.shape[0], dtype=np.intp)
        for rows in row_blocks(*logits.shape):
            # The argmax of the probabilities predict_proba returns, computed
            # the same way: calibrated logits whose top two differ in the last
            # bit can round to equal probabilities, and ties go to the first.
            block = self._calibrated_block(logits[rows], logits.dtype)
            codes[rows] = np.argmax(softmax(block, out=block), axis=1)
        return self.classes_[codes]

    def get_feature_names_out(self, input_features=None):
        """Output column names of :meth:`transform`: the class labels as strings.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Ignored; present for API consistency.

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        check_is_fitted(self)
        return np.asarray([str(c) for c in self.classes_], dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True
        tags.input_tags.allow_nan = False
        return tags
