"""Label-shift adaptation of calibrated probabilities.

Under label shift the class priors change between the source (where the model
was calibrated) and the target (where it is used), ``p_t(y) != p_s(y)``, while
the class-conditional distributions stay put, ``p_t(x | y) = p_s(x | y)``.
Then the target posterior is the source posterior reweighted by the ratio of
the priors (Saerens, Latinne and Decaestecker 2002):

    p_t(y = k | x)  proportional to  w_k p_s(y = k | x),    w_k = pi_t,k / pi_s,k.

:class:`LabelShiftAdapter` fits a calibrator on labelled source logits,
estimates the target priors ``pi_t`` from unlabelled target logits
(:meth:`LabelShiftAdapter.adapt`) and returns the reweighted probabilities.

Estimators of ``pi_t`` (``method``):

- ``"em"``: maximum likelihood by expectation-maximisation (Saerens et al.
  2002): E-step ``q_ik = w_k p_ik / sum_j w_j p_ij``, M-step ``pi_t = mean_i
  q_i``. Each step is a sum over target rows, so a target larger than memory
  is adapted chunk by chunk.
- ``"bbse-hard"`` / ``"bbse-soft"``: black-box shift estimation (Lipton, Wang
  and Smola 2018): ``C w = mu`` with ``C_jk = P_s(yhat = j, y = k)`` and ``mu_j
  = P_t(yhat = j)`` (soft: probabilities in place of the one-hot prediction);
  the weights are clipped at 0.
- ``"rlls"``: regularised learning under label shift (Azizzadenesheli,
  Liu, Yang and Anandkumar 2019): ``theta = w - 1`` minimises ``||C theta -
  (mu - C 1)||_2 + Delta ||theta||_2`` subject to ``theta >= -1``.

The label-free estimate of the target calibration error
(:func:`estimated_target_calibration_error`) reweights labelled source rows of
class ``k`` by ``w_k``, which under label shift turns source averages into
target averages.
"""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ._chunks.sources import is_dask_array, is_zarr_array
from ._scaling.bias_corrected import BiasCorrectedTemperatureScaling
from .base import BaseCalibrator
from .metrics import expected_calibration_error, log_loss
from .utils._compat import Interval, StrOptions, check_is_fitted
from .utils._fitted_state import check_state_array
from .utils._math import row_blocks
from .utils._validation import (
    check_true_labels,
    check_weight_values,
    encode_with_classes,
)

__all__ = [
    "LabelShiftAdapter",
    "estimated_target_calibration_error",
    "label_shift_report",
]

_METHODS = ("em", "bbse-hard", "bbse-soft", "rlls")
# A confusion matrix whose smallest singular value is below this fraction of
# its largest cannot be inverted meaningfully (BBSE, RLLS).
_SINGULAR = 1e-10
# Rows per block of the in-memory target (the same blocks as a chunked one).
_BLOCK_ELEMENTS = 2**18


def _em_priors(blocks, source_priors, *, max_iter, tol):
    """Saerens et al.'s EM over blocks of (probabilities, weights).

    ``blocks()`` returns a new iterator of ``(P, w)`` at each call: each EM
    iteration is one pass. Returns (priors, n_iter, converged, change,
    log_likelihood) with ``log_likelihood`` the weighted mean of ``log
    sum_k w_k p_ik`` at the returned priors' previous iterate.
    """
    priors = source_priors.copy()
    weights = np.ones_like(priors)
    change = np.inf
    log_likelihood = np.nan
    for n_iter in range(1, max_iter + 1):
        total = np.zeros_like(priors)
        mass = 0.0
        log_likelihood = 0.0
        for proba, row_weight in blocks():
            if not row_weight.all():
                # A row of weight 0 counts for nothing, but its norm below is
                # 0 once every class it can be has prior 0 (a masked row of a
                # class absent from the rest of the target), and 0 * NaN made
                # every prior NaN for max_iter iterations.
                positive = row_weight > 0
                proba, row_weight = proba[positive], row_weight[positive]
            adapted = proba * weights
            norm = adapted.sum(axis=1, keepdims=True)
            adapted /= norm
            total += row_weight @ adapted
            mass += row_weight.sum()
            log_likelihood += row_weight @ np.log(norm[:, 0])
        new = total / mass
        change = float(np.abs(new - priors).max())
        priors = new
        weights = priors / source_priors
        if change <= tol:
            return priors, n_iter, True, change, log_likelihood / mass
    return priors, max_iter, False, change, log_likelihood / mass


def _check_confusion(confusion, name):
    singular = np.linalg.svd(confusion, compute_uv=False)
    if singular[-1] <= _SINGULAR * singular[0]:
        never = np.flatnonzero(confusion.sum(axis=1) == 0)
        detail = (
            f" (classes at columns {never.tolist()} are never predicted on the "
            "source data)"
            if never.size
            else ""
        )
        raise ValueError(
            f"The source confusion matrix of {name} is singular (smallest "
            f"singular value {singular[-1]:.3g}, largest {singular[0]:.3g})"
            f"{detail}: the target priors are not identifiable from the "
            "predictions. Use method='em', or more source samples."
        )


def _weights_to_priors(weights, source_priors):
    weights = np.clip(weights, 0.0, None)
    priors = weights * source_priors
    total = priors.sum()
    if not total > 0:
        raise ValueError(
            "Every estimated importance weight is 0 after clipping: the target "
            "predictions are inconsistent with the source confusion matrix."
        )
    return priors / total


def rlls_strength(n_classes, n_source, alpha, delta=0.05):
    """RLLS's regularisation ``alpha * 3 Delta_C`` for ``n_source`` source rows.

    ``Delta_C = 2 log(2K / delta) / (3 n) + sqrt(2 log(2K / delta) / n)`` is
    the confidence radius of the confusion matrix in the RLLS paper; its
    authors' code multiplies three of them by ``alpha = 0.01``.
    """
    log_term = math.log(2 * n_classes / delta)
    radius = 2 * log_term / (3 * n_source) + math.sqrt(2 * log_term / n_source)
    return alpha * 3.0 * radius


def _rlls_weights(confusion, target_mean, strength):
    k = confusion.shape[0]
    b = target_mean - confusion.sum(axis=1)
    # theta = 0 (no shift) is optimal when 0 is a subgradient there:
    # ||C^T b|| / ||b|| <= strength. The objective has a kink at 0, where
    # L-BFGS-B's line search fails and reports no convergence at the optimum.
    norm_b = math.sqrt(float(b @ b))
    if norm_b == 0.0 or math.sqrt(float(np.sum((confusion.T @ b) ** 2))) <= (
        strength * norm_b
    ):
        return np.ones(k), 0, True

    def objective(theta):
        residual = confusion @ theta - b
        norm_r = math.sqrt(float(residual @ residual) + 1e-300)
        norm_t = math.sqrt(float(theta @ theta) + 1e-300)
        value = norm_r + strength * norm_t
        grad = confusion.T @ residual / norm_r + strength * theta / norm_t
        return value, grad

    result = minimize(
        objective,
        np.zeros(k),
        jac=True,
        method="L-BFGS-B",
        bounds=[(-1.0, None)] * k,
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-12},
    )
    return 1.0 + result.x, int(result.nit), bool(result.success)


class LabelShiftAdapter(BaseCalibrator):
    r"""Calibrated probabilities adapted to new class priors (label shift).

    :meth:`fit` calibrates the logits of a labelled source set (the
    validation set) with ``calibrator``; :meth:`adapt` then estimates the
    class priors of an unlabelled target set from its logits alone, and
    :meth:`predict_proba` returns the probabilities for the target
    distribution, ``p_t(k | x) proportional to w_k p_s(k | x)`` with ``w_k =
    pi_t,k / pi_s,k`` (Saerens et al. 2002). Before :meth:`adapt` (or after
    ``adapt`` on source-like data) the weights are 1 and the adapter predicts
    what its calibrator predicts.

    Label shift means that the class frequencies change while what each class
    looks like does not (``p(x | y)`` fixed): a disease's prevalence between
    hospitals, a long-tailed training set meeting balanced data. It does not
    cover covariate shift (new kinds of inputs) nor classes the source never
    saw.

    Parameters
    ----------
    calibrator : BaseCalibrator, default=None
        Any calibrator of the library, cloned and fitted on the source
        logits. ``None`` uses :class:`~sklearn_calib.BiasCorrectedTemperatureScaling`,
        with which maximum likelihood was hard to beat in Alexandari et al.
    method : {"em", "bbse-hard", "bbse-soft", "rlls"}, default="em"
        How the target priors are estimated: maximum likelihood by EM, black-box
        shift estimation with hard or soft predictions, or regularised
        learning under label shift (hard predictions; see the module
        docstring).
    max_iter : int, default=10000
        Maximum number of EM iterations (each a pass over the target rows). A
        :class:`~sklearn.exceptions.ConvergenceWarning` is raised if reached.
    tol : float, default=1e-8
        EM stops when no prior changes by more than ``tol`` in an iteration.
    rlls_alpha : float, default=0.01
        RLLS's regularisation constant: the penalty is ``rlls_alpha`` times
        three confidence radii of the source confusion matrix (the RLLS
        authors' setting).
    n_bootstrap : int, default=0
        Bootstrap replicates of the target rows for :attr:`priors_interval_`
        (0: no interval). The source fit is held fixed; the interval covers
        the sampling of the target only. Needs the target in memory.
    confidence_level : float, default=0.95
        Level of the percentile bootstrap interval.
    random_state : int, RandomState instance or None, default=None
        Seeds the bootstrap.
    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, as for every calibrator (see
        :class:`~sklearn_calib.BaseCalibrator`). Every class must occur in
        the source labels: the prior ratio of a class the source never saw
        is not defined (``ValueError``).

    Attributes
    ----------
    calibrator_ : BaseCalibrator
        The fitted calibrator of the source logits.
    source_priors_ : ndarray of shape (n_classes,)
        The (weighted) class frequencies of the source labels, ``pi_s``.
    confusion_matrix_ : ndarray of shape (n_classes, n_classes)
        ``P_s(yhat = j, y = k)`` of the calibrated source predictions (rows:
        predicted class, columns: true class), summing to 1.
    soft_confusion_matrix_ : ndarray of shape (n_classes, n_classes)
        The same with the calibrated probabilities in place of the one-hot
        predictions.
    priors_ : ndarray of shape (n_classes,)
        The estimated target priors ``pi_t`` (``source_priors_`` until
        :meth:`adapt`).
    weights_ : ndarray of shape (n_classes,)
        The importance weights ``pi_t / pi_s`` (ones until :meth:`adapt`).
    priors_interval_ : ndarray of shape (2, n_classes) or None
        Lower and upper percentile bootstrap bounds of ``priors_`` (None
        without bootstrap or before :meth:`adapt`).
    weights_interval_ : ndarray of shape (2, n_classes) or None
        The same for ``weights_``.
    convergence_ : dict
        After :meth:`adapt`: ``method``, ``n_iter`` (EM iterations or
        optimiser iterations; 0 for BBSE), ``converged``, ``change`` (EM: the
        largest prior change of the last iteration), ``log_likelihood`` (EM:
        mean log-likelihood of the target logits under the mixture), and
        ``n_target`` (rows adapted to).
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_source_ : float
        Effective number of source rows, ``(sum w)^2 / sum w^2`` (RLLS's
        regularisation shrinks with it).
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.

    See Also
    --------
    sklearn_calib.BiasCorrectedTemperatureScaling : The default calibrator.
    estimated_target_calibration_error : Target calibration error without
        target labels.
    label_shift_report : Accuracy, NLL and ECE before and after adaptation.

    Notes
    -----
    **Why a separate** :meth:`adapt` **method** rather than scikit-learn's
    semi-supervised convention (``-1`` marking unlabelled rows in ``fit``): the
    labels here may be strings, or integers of which ``-1`` is one; the target
    set is usually met after the source fit, is often larger than memory and
    may change (one adaptation per site or per month, each a cheap
    :meth:`adapt` of the same fitted calibrator); and model selection by
    cross-validation over ``fit`` must not mix target rows into the source
    folds. ``fit(X, y)`` stays a plain supervised fit, so the adapter works in
    a :class:`~sklearn.pipeline.Pipeline` and with ``clone``, and ``adapt``
    follows ``partial_fit``'s habit of updating a fitted estimator.

    **Identifiability.** A class absent from the source labels raises a
    ``ValueError`` in :meth:`fit`. BBSE and RLLS need an invertible
    confusion matrix: a numerically singular one (a class never predicted)
    raises a ``ValueError`` in :meth:`adapt`. EM always returns priors, but
    classes the calibrated model cannot tell apart share their mass
    arbitrarily; the bootstrap interval shows it.

    **Masked classes.** ``-inf`` logits keep probability exactly 0 before and
    after adaptation.

    References
    ----------
    .. [1] M. Saerens, P. Latinne and C. Decaestecker, "Adjusting the Outputs
       of a Classifier to New a Priori Probabilities: A Simple Procedure",
       Neural Computation 14(1), 2002.
    .. [2] Z. C. Lipton, Y.-X. Wang and A. J. Smola, "Detecting and Correcting
       for Label Shift with Black Box Predictors", ICML 2018.
    .. [3] K. Azizzadenesheli, A. Liu, F. Yang and A. Anandkumar,
       "Regularized Learning for Domain Adaptation under Label Shifts",
       ICLR 2019.
    .. [4] A. Alexandari, A. Kundaje and A. Shrikumar, "Maximum Likelihood
       with Bias-Corrected Calibration is Hard-To-Beat at Label Shift
       Adaptation", ICML 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.label_shift import LabelShiftAdapter
    >>> rng = np.random.default_rng(0)
    >>> def draw(n, priors):
    ...     y = rng.choice(3, size=n, p=priors)
    ...     return 2.0 * np.eye(3)[y] + rng.normal(size=(n, 3)), y
    >>> X_source, y_source = draw(3000, [1 / 3, 1 / 3, 1 / 3])
    >>> X_target, y_target = draw(3000, [0.7, 0.2, 0.1])
    >>> adapter = LabelShiftAdapter().fit(X_source, y_source)
    >>> adapter = adapter.adapt(X_target)
    >>> np.round(adapter.priors_, 2)
    array([0.69, 0.21, 0.1 ])
    >>> proba = adapter.predict_proba(X_target)
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        # The adapter reweights the calibrator's transform (its log-probabilities).
        "calibrator": [BaseCalibrator, None],
        "method": [StrOptions(set(_METHODS))],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "rlls_alpha": [Interval(Real, 0, None, closed="left")],
        "n_bootstrap": [Interval(Integral, 0, None, closed="left")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        calibrator=None,
        *,
        method="em",
        max_iter=10_000,
        tol=1e-8,
        rlls_alpha=0.01,
        n_bootstrap=0,
        confidence_level=0.95,
        random_state=None,
        classes=None,
    ):
        self.calibrator = calibrator
        self.method = method
        self.max_iter = max_iter
        self.tol = tol
        self.rlls_alpha = rlls_alpha
        self.n_bootstrap = n_bootstrap
        self.confidence_level = confidence_level
        self.random_state = random_state
        self.classes = classes

    # -- source fit --------------------------------------------------------

    def _fit(self, logits, y, sample_weight):
        n_classes = logits.shape[1]
        mass = np.bincount(y, weights=sample_weight, minlength=n_classes)
        absent = np.flatnonzero(mass <= 0)
        if absent.size:
            raise ValueError(
                f"LabelShiftAdapter: the classes at columns {absent.tolist()} have "
                "no source sample, so their target/source prior ratio is not "
                "identifiable. Label shift assumes that every target class "
                "occurs in the source; drop those columns or add source samples."
            )
        calibrator = (
            BiasCorrectedTemperatureScaling()
            if self.calibrator is None
            else clone(self.calibrator)
        )
        if "classes" in calibrator.get_params():
            calibrator.set_params(classes=np.arange(n_classes))
        calibrator.fit(logits, y, sample_weight=sample_weight)
        proba = np.asarray(calibrator.predict_proba(logits), dtype=np.float64)
        w = sample_weight / sample_weight.sum()
        onehot_true = np.zeros((len(y), n_classes))
        onehot_true[np.arange(len(y)), y] = w
        predicted = np.zeros_like(proba)
        predicted[np.arange(len(y)), proba.argmax(axis=1)] = 1.0
        self.calibrator_ = calibrator
        self.source_priors_ = mass / mass.sum()
        self.confusion_matrix_ = predicted.T @ onehot_true
        self.soft_confusion_matrix_ = proba.T @ onehot_true
        self.n_source_ = float(
            sample_weight.sum() ** 2 / np.dot(sample_weight, sample_weight)
        )
        self.priors_ = self.source_priors_.copy()
        self.weights_ = np.ones(n_classes)
        self.priors_interval_ = None
        self.weights_interval_ = None
        self.convergence_ = {}

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_classes = len(self.classes_)
        for name in ("source_priors_", "priors_", "weights_"):
            check_state_array(self, name, shape=(n_classes,), finite=True)
        for name in ("confusion_matrix_", "soft_confusion_matrix_"):
            check_state_array(self, name, shape=(n_classes, n_classes), finite=True)
        if not isinstance(self.calibrator_, BaseCalibrator):
            raise ValueError(
                "Fitted attribute calibrator_ of LabelShiftAdapter must be a "
                f"fitted calibrator, got {type(self.calibrator_).__name__}."
            )

    def _calibrated_logits(self, logits):
        log_proba = np.asarray(self.calibrator_.transform(logits), dtype=np.float64)
        # A weight clipped to 0 (BBSE) must not leave a row without any class.
        with np.errstate(divide="ignore"):
            log_weights = np.log(np.maximum(self.weights_, 1e-300))
        return (log_proba + log_weights).astype(logits.dtype, copy=False)

    def _source_proba(self, X):
        """The calibrator's (unadapted) probabilities of validated logits."""
        logits = self._check_fitted_input(X)
        return np.asarray(self.calibrator_.predict_proba(logits), dtype=np.float64)

    # -- target adaptation ---------------------------------------------------

    def _target_blocks(self, X, sample_weight):
        """A callable returning a new iterator of (probabilities, weights).

        In-memory targets are calibrated once and cut into row blocks;
        out-of-core ones (dask, zarr, memmap, an iterable of chunks) are
        read and calibrated block by block at every pass. Returns
        (blocks, n_rows, in_memory).
        """
        n_cols = self.n_features_in_
        proba_of = self._source_proba

        if is_dask_array(X) or is_zarr_array(X) or isinstance(X, np.memmap):
            if sample_weight is not None:
                raise ValueError(
                    "sample_weight with an out-of-core target is not supported: "
                    "pass chunks of (X, sample_weight) instead."
                )
            if is_dask_array(X):
                bounds = np.cumsum((0,) + tuple(X.chunks[0]))
            else:
                step = max(1, _BLOCK_ELEMENTS // max(1, n_cols))
                bounds = np.r_[np.arange(0, X.shape[0], step), X.shape[0]]
            slices = [
                slice(a, b)
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
                if b > a
            ]

            def read(rows):
                block = X[rows]
                if is_dask_array(block):
                    block = block.compute()
                return np.asarray(block)

            def blocks():
                for rows in slices:
                    proba = proba_of(read(rows))
                    yield proba, np.ones(len(proba))

            return blocks, int(X.shape[0]), False

        if isinstance(X, np.ndarray) or hasattr(X, "shape"):
            proba = proba_of(X)
            weights = (
                np.ones(len(proba))
                if sample_weight is None
                else _target_weights(sample_weight, len(proba))
            )
            step = max(1, _BLOCK_ELEMENTS // max(1, proba.shape[1]))
            slices = list(row_blocks(*proba.shape, max_elements=step * proba.shape[1]))

            def blocks():
                for rows in slices:
                    yield proba[rows], weights[rows]

            blocks.proba, blocks.weights = proba, weights
            return blocks, len(proba), True

        if isinstance(X, (list, tuple)) and X and _is_chunk(X[0]):
            chunks = X
        elif hasattr(X, "__iter__") and not isinstance(X, (list, tuple, str)):
            chunks = X
            if iter(chunks) is chunks:
                raise TypeError(
                    "A one-shot iterator cannot be read once per EM iteration: "
                    "pass a re-iterable (a list, or the result of "
                    "sklearn_calib.chunked.open_chunks(path, y_key=None))."
                )
        else:
            return self._target_blocks(np.asarray(X), sample_weight)
        if sample_weight is not None:
            raise ValueError(
                "sample_weight with a chunked target is not supported: give "
                "chunks of (X, sample_weight) instead."
            )

        def blocks():
            for chunk in chunks:
                if isinstance(chunk, tuple):
                    block, weights = chunk[0], chunk[-1] if len(chunk) > 1 else None
                else:
                    block, weights = chunk, None
                block = np.asarray(block)
                if block.ndim and block.shape[0] == 0:
                    continue
                proba = proba_of(block)
                weights = (
                    np.ones(len(proba))
                    if weights is None
                    # one chunk may weigh every row 0; the total may not
                    else check_weight_values(weights, len(proba))
                )
                yield proba, weights

        n_rows, mass = 0, 0.0
        for proba, weights in blocks():
            n_rows += len(proba)
            mass += float(weights.sum())
        if n_rows and not mass > 0:
            raise ValueError(
                "sample_weight is zero for every target row of the chunks; "
                "nothing to adapt to."
            )
        return blocks, n_rows, False

    def _estimate(self, blocks):
        """Target priors from the blocks: (priors, report)."""
        method = self.method
        source = self.source_priors_
        if method == "em":
            priors, n_iter, converged, change, log_lik = _em_priors(
                blocks, source, max_iter=self.max_iter, tol=self.tol
            )
            return priors, {
                "method": method,
                "n_iter": n_iter,
                "converged": converged,
                "change": change,
                "log_likelihood": float(log_lik),
            }
        hard = method in ("bbse-hard", "rlls")
        confusion = self.confusion_matrix_ if hard else self.soft_confusion_matrix_
        _check_confusion(confusion, method)
        total = np.zeros_like(source)
        mass = 0.0
        for proba, row_weight in blocks():
            if hard:
                predicted = np.zeros_like(proba)
                predicted[np.arange(len(proba)), proba.argmax(axis=1)] = 1.0
                proba = predicted
            total += row_weight @ proba
            mass += row_weight.sum()
        target_mean = total / mass
        if method == "rlls":
            strength = rlls_strength(len(source), self.n_source_, self.rlls_alpha)
            weights, n_iter, converged = _rlls_weights(confusion, target_mean, strength)
        else:
            weights = np.linalg.solve(confusion, target_mean)
            n_iter, converged = 0, True
        return _weights_to_priors(weights, source), {
            "method": method,
            "n_iter": n_iter,
            "converged": converged,
            "change": np.nan,
            "log_likelihood": np.nan,
        }

    def adapt(self, X, sample_weight=None):
        """Estimate the target priors from unlabelled target logits.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes), or chunks
            Target logits, as in :meth:`fit` (numpy, pandas, torch). A dask
            or zarr array, a ``numpy.memmap``, or a re-iterable of logit
            chunks (a list of arrays, or
            :func:`sklearn_calib.chunked.open_chunks` with ``y_key=None``;
            chunks may be ``(X, sample_weight)`` tuples) is read block by
            block at every EM iteration, in bounded memory.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the target rows (in-memory targets).

        Returns
        -------
        self : object
            The adapter, with ``priors_``, ``weights_``, ``convergence_`` and
            (with ``n_bootstrap``) ``priors_interval_`` set.
        """
        check_is_fitted(self)
        blocks, n_rows, in_memory = self._target_blocks(X, sample_weight)
        if n_rows == 0:
            raise ValueError("adapt needs at least one target row, got 0.")
        priors, report = self._estimate(blocks)
        report["n_target"] = n_rows
        if self.method == "em" and not report["converged"]:
            warnings.warn(
                f"LabelShiftAdapter: EM did not converge in max_iter={self.max_iter} "
                f"iterations (last change of a prior {report['change']:.3e} > "
                f"tol={self.tol:g}); increase max_iter. Priors that tend to 0 "
                "converge slowly.",
                ConvergenceWarning,
                stacklevel=2,
            )
        priors_interval = weights_interval = None
        if self.n_bootstrap:
            if not in_memory:
                raise ValueError(
                    "n_bootstrap > 0 resamples the target rows and needs them in "
                    "memory; set n_bootstrap=0 for an out-of-core target."
                )
            priors_interval = self._bootstrap(blocks.proba, blocks.weights)
            weights_interval = priors_interval / self.source_priors_
        self.priors_ = priors
        self.weights_ = priors / self.source_priors_
        self.priors_interval_ = priors_interval
        self.weights_interval_ = weights_interval
        self.convergence_ = report
        return self

    def _bootstrap(self, proba, weights):
        rng = check_random_state(self.random_state)
        n = len(proba)
        draws = np.empty((self.n_bootstrap, proba.shape[1]))
        with warnings.catch_warnings():
            # A replicate's convergence is not the fit's; the interval is
            # what is reported.
            warnings.simplefilter("ignore", ConvergenceWarning)
            for b in range(self.n_bootstrap):
                rows = rng.randint(0, n, size=n)
                sample_p, sample_w = proba[rows], weights[rows]
                if not sample_w.sum() > 0:
                    # only zero-weight rows drawn: no target to estimate from
                    # (EM ran max_iter NaN iterations, RLLS returned the
                    # source priors, BBSE NaN; all with a RuntimeWarning)
                    draws[b] = np.nan
                    continue

                def blocks(p=sample_p, w=sample_w):
                    yield p, w

                try:
                    draws[b], _ = self._estimate(blocks)
                except ValueError:
                    draws[b] = np.nan
        alpha = 1.0 - self.confidence_level
        if np.isnan(draws).all():
            return np.full((2, proba.shape[1]), np.nan)
        return np.nanquantile(draws, [alpha / 2, 1 - alpha / 2], axis=0)


def _is_chunk(item):
    """Whether an item of a target list is a chunk rather than one row.

    A chunk is a 2-D block of logits or a ``(logits, sample_weight)`` tuple
    (``np.ndim`` of such a ragged tuple fails); a row is 1-D.
    """
    if isinstance(item, tuple):
        return bool(item) and np.ndim(item[0]) == 2
    return np.ndim(item) == 2


def _target_weights(sample_weight, n_rows):
    from .utils._validation import check_sample_weight

    weights = check_sample_weight(sample_weight, np.empty((n_rows, 1)))
    return np.asarray(weights, dtype=np.float64)


def estimated_target_calibration_error(
    adapter, X_source, y_source, *, n_bins=15, strategy="uniform"
):
    """Target ECE of an adapted model estimated without target labels.

    Under label shift, a target average of any function of ``(x, y)`` is the
    source average with each row of class ``k`` weighted by ``w_k = pi_t,k /
    pi_s,k``. Applied to the binned calibration error of the adapted
    probabilities, labelled *source* rows stand in for the unlabelled target.

    Assumptions: exact label shift (``p(x | y)`` unchanged); the estimated
    weights ``adapter.weights_`` close to the true ratios; ``X_source`` held
    out from the calibrator's fit (on the fitting rows the estimate is
    optimistic); enough source rows of the classes the target favours (the
    effective sample size of the weights is what counts).

    Parameters
    ----------
    adapter : LabelShiftAdapter
        An adapter after :meth:`LabelShiftAdapter.adapt`.
    X_source : array-like of shape (n_samples, n_classes)
        Labelled source logits, ideally not those the adapter was fitted on.
    y_source : array-like of shape (n_samples,)
        Their labels, from ``adapter.classes_``.
    n_bins : int, default=15
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Binning of :func:`~sklearn_calib.metrics.expected_calibration_error`.

    Returns
    -------
    ece : float
        The importance-weighted top-label ECE.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.label_shift import (
    ...     LabelShiftAdapter, estimated_target_calibration_error)
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=2000)
    >>> X = 2.0 * np.eye(3)[y] + rng.normal(size=(2000, 3))
    >>> adapter = LabelShiftAdapter().fit(X[:1000], y[:1000]).adapt(X[1000:])
    >>> ece = estimated_target_calibration_error(adapter, X[1000:], y[1000:])
    >>> bool(0.0 <= ece < 0.1)
    True
    """
    check_is_fitted(adapter)
    y_source = np.asarray(y_source)
    # classes_ is in column order, not necessarily sorted.
    if y_source.ndim != 1:
        raise ValueError(
            f"y_source must be 1-D, one label per row; got shape {y_source.shape}."
        )
    codes = encode_with_classes(
        y_source, adapter.classes_, y_name="y_source", name="adapter.classes_"
    )
    proba = adapter.predict_proba(X_source)
    return expected_calibration_error(
        y_source,
        proba,
        n_bins=n_bins,
        strategy=strategy,
        sample_weight=adapter.weights_[codes],
        labels=adapter.classes_,
    )


def label_shift_report(adapter, X_target, y_target, *, n_bins=15):
    """Accuracy, NLL and ECE on labelled target data, before and after adaptation.

    Parameters
    ----------
    adapter : LabelShiftAdapter
        An adapter after :meth:`LabelShiftAdapter.adapt`.
    X_target : array-like of shape (n_samples, n_classes)
        Target logits.
    y_target : array-like of shape (n_samples,)
        Their true labels (from ``adapter.classes_``).
    n_bins : int, default=15
        Bins of the top-label ECE.

    Returns
    -------
    report : dict
        ``{"unadapted": {...}, "adapted": {...}}``, each with ``accuracy``,
        ``nll`` and ``ece``: the calibrator alone and the adapter.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.label_shift import LabelShiftAdapter, label_shift_report
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=1000)
    >>> X = 2.0 * np.eye(3)[y] + rng.normal(size=(1000, 3))
    >>> y_t = rng.choice(3, size=1000, p=[0.8, 0.1, 0.1])
    >>> X_t = 2.0 * np.eye(3)[y_t] + rng.normal(size=(1000, 3))
    >>> adapter = LabelShiftAdapter().fit(X, y).adapt(X_t)
    >>> report = label_shift_report(adapter, X_t, y_t)
    >>> bool(report["adapted"]["nll"] < report["unadapted"]["nll"])
    True
    """
    check_is_fitted(adapter)
    probabilities = (
        ("unadapted", adapter._source_proba(X_target)),
        ("adapted", adapter.predict_proba(X_target)),
    )
    y_target = check_true_labels(
        y_target, probabilities[0][1].shape[0], rows_of="X_target"
    )
    report = {}
    for name, proba in probabilities:
        predicted = adapter.classes_[np.argmax(proba, axis=1)]
        report[name] = {
            "accuracy": float(np.mean(predicted == y_target)),
            "nll": log_loss(y_target, proba, labels=adapter.classes_),
            "ece": expected_calibration_error(
                y_target, proba, n_bins=n_bins, labels=adapter.classes_
            ),
        }
    return report
