"""Choose a calibrator by cross-validated score."""

import sys
import threading
import time
import warnings
from contextlib import contextmanager
from numbers import Integral, Real

import numpy as np
from scipy.stats import rankdata
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning
from sklearn.metrics import log_loss as sklearn_log_loss
from sklearn.utils import get_tags
from sklearn.utils.parallel import Parallel, delayed

from ..base import BaseCalibrator
from ..utils._compat import HasMethods, Interval, StrOptions, check_is_fitted
from ..utils._fitted_state import (
    check_state_array,
    check_state_calibrator,
    check_state_int,
    fail_state,
    get_state,
)
from .cross_validation import (
    cv_splits,
    partitions,
    with_code_classes,
)


def _default_calibrators():
    """The affine family: exact convex fits, fast enough to cross-validate.

    The two structured maps lower the selector's mean test NLL on the 15
    public sets from 0.4742 to 0.4727 (ECE 1.63 % to 1.54 %).
    """
    from .._scaling.affine import DirichletCalibration, MatrixScaling, VectorScaling
    from .._scaling.structured import StructuredMatrixScaling, StructuredVectorScaling
    from .._scaling.temperature import TemperatureScaling

    return [
        TemperatureScaling(),
        VectorScaling(),
        MatrixScaling(),
        DirichletCalibration(),
        StructuredVectorScaling(),
        StructuredMatrixScaling(),
    ]


def _summarise(names, scores, fit_times, score_times):
    """GridSearchCV-style results of (n_candidates, n_splits) score arrays.

    Equal mean scores share a rank; a NaN mean ranks after every number.
    """
    n_candidates, n_splits = scores.shape
    results = {"calibrator": np.asarray(names, dtype=object)}
    for s in range(n_splits):
        results[f"split{s}_test_score"] = scores[:, s]
    for key, values in [
        ("test_score", scores),
        ("fit_time", fit_times),
        ("score_time", score_times),
    ]:
        if n_splits:
            # infinite scores (a custom scorer's) have a NaN spread
            with np.errstate(invalid="ignore"):
                mean, std = values.mean(axis=1), values.std(axis=1)
        else:
            mean = std = np.full(n_candidates, np.nan)
        results[f"mean_{key}"], results[f"std_{key}"] = mean, std
        if key == "test_score":
            # rank 1 is best; method="min" gives ties the same rank. NaN
            # means share the rank after the last number, -inf included.
            scored = ~np.isnan(mean)
            ranks = np.full(n_candidates, scored.sum() + 1, dtype=np.int32)
            ranks[scored] = rankdata(-mean[scored], method="min")
            results["rank_test_score"] = ranks
    return results


def _log_proba(fitted, logits):
    """Log-probabilities of a fitted candidate, one column per class code.

    A calibrator of this library gives them by ``transform``. Another
    classifier over logits (fitted on the class codes) gives the log of its
    ``predict_proba``, whose columns are its ``classes_``: a code it never saw
    is -inf. Its ``transform``, where it has one, is no such map (linear
    discriminant analysis projects onto ``n_classes - 1`` axes).
    """
    if isinstance(fitted, BaseCalibrator):
        return fitted.transform(logits)
    proba = np.asarray(fitted.predict_proba(logits), dtype=np.float64)
    log_proba = np.full((proba.shape[0], logits.shape[1]), -np.inf)
    with np.errstate(divide="ignore"):
        log_proba[:, np.asarray(fitted.classes_, dtype=np.intp)] = np.log(proba)
    return log_proba


def _weight_kwargs(sample_weight):
    return {} if sample_weight is None else {"sample_weight": sample_weight}


# A class whose every calibration row the full fit predicts within this of its
# indicator (probability of the class above 1 - SEPARATED on its own rows,
# below SEPARATED on the others') is separated by the fitted map.
SEPARATED = 1e-2


def _separates_a_class(fitted, logits, y, sample_weight):
    """Whether ``fitted`` separates some class of ``y`` from the others.

    Such a class has no finite optimum along that direction (unless a
    penalty bounds it): the fit runs out towards certainty, its gradient
    vanishes on the way, and it stops on the gradient tolerance at a point
    that every row, the held-out ones included, pushed out. Measured before
    this check: on 60 separable rows of 3 classes, warm-started folds of
    MatrixScaling scored -1e-9 (their start already met the tolerance),
    against -1.17 fitted on the training parts alone, and were chosen over
    temperature scaling (test NLL 1.51 against 0.15).
    """
    counted = slice(None) if sample_weight is None else sample_weight > 0
    proba, codes = fitted.predict_proba(logits)[counted], y[counted]
    columns = np.arange(proba.shape[1])
    residual = np.abs((codes[:, None] == columns) - proba).max(axis=0)
    present = np.isin(columns, codes)
    return bool(np.any(residual[present] < SEPARATED))


def _warm_start_of(fitted, blocks, logits, y, sample_weight):
    """A fold fit's start from ``fitted`` (the same map on all rows), or None.

    Matrix and Dirichlet calibration fits on the folds start from the map
    fitted on all the rows, when that fit converged: their objective is
    convex, so the fold's optimum is the same from any start; only the path
    to it is shorter (4x fewer CPU seconds for the five folds of
    MatrixScaling on 200 rows x 100 classes, measured). The class blocks of
    that solution (``blocks``) precondition the fold fits in place of the
    blocks at their start, which cost most of a warm fold fit at 100 classes
    (``benchmarks/bench_margin_speed.py --part selector``). Where the full
    fit stopped at ``max_iter``, or where it separates a class
    (:func:`_separates_a_class`: an optimum at infinity, where a fit stops on
    the gradient tolerance wherever its start and all the rows put it), the
    folds start cold, so that no fold result depends on the rows it did not
    see.
    """
    from .._scaling.affine import DirichletCalibration, MatrixScaling

    if type(fitted) not in (MatrixScaling, DirichletCalibration):
        return None
    if not fitted.n_iter_ < fitted.max_iter:
        return None
    if _separates_a_class(fitted, logits, y, sample_weight):
        return None
    return fitted.coef_, fitted.intercept_, blocks


def _fold_candidate(estimator, fold_tol, warm_start):
    """``estimator`` as it is fitted on the training parts.

    An affine map of this library that starts cold stops at a gradient of
    ``fold_tol`` where its own ``tol`` is tighter: a fold fit only scores the
    candidate and predicts its held-out rows, and the last digits of its
    optimum move neither (``fold_tol=1e-6`` on five public sets: mean scores
    within 4e-7 relative of the tight fits', the same winner;
    docs/benchmarks.md, issue 21). A warm-started fold keeps the candidate's
    own ``tol``: stopped early, it would stay nearer its start, a map fitted
    with the held-out rows.
    """
    from .._scaling.affine import AffineCalibrator

    if (
        fold_tol is None
        or warm_start is not None
        or not isinstance(estimator, AffineCalibrator)
        or not estimator.tol < fold_tol
    ):
        return estimator
    return clone(estimator).set_params(tol=fold_tol)


def _fit_full(estimator, logits, y, sample_weight):
    """``estimator`` fitted on every row first, where folds can start from it.

    Returns ``(fitted, caught, blocks)``: ``fitted`` None for the other
    candidates and where the fit fails (the folds then fail or start cold, as
    without it), ``caught`` the warnings of the fit, replayed only if the
    candidate is chosen (they are then those of its refit; in a thread of
    joblib's threading backend, where they cannot be recorded, they reach the
    caller at once), ``blocks`` the class blocks of its solution that
    precondition the folds (or None).
    """
    from .._scaling.affine import DirichletCalibration, MatrixScaling

    if type(estimator) not in (MatrixScaling, DirichletCalibration):
        return None, [], None

    def fit():
        try:
            fitted = clone(estimator)
            fitted._keep_blocks = True
            fitted.fit(logits, y, **_weight_kwargs(sample_weight))
            # The blocks go to the folds, not into the fitted state.
            del fitted._keep_blocks
            return fitted, fitted.__dict__.pop("_blocks", None)
        except Exception:
            return None, None

    (fitted, blocks), caught = _recorded(fit)
    return fitted, caught, blocks


def _temperature_key(estimator):
    """The temperature scaling ``estimator`` is or starts with, as a key.

    Returns ``(key, step)``: ``step`` an unfitted :class:`TemperatureScaling`
    (the candidate itself, or the first step of a structured map, see
    ``_temperature_step``), ``key`` its parameters other than ``classes``
    (every candidate has the same codes), or ``(None, None)``.
    """
    from .._scaling.temperature import TemperatureScaling

    if hasattr(estimator, "_temperature_step"):
        step = estimator._temperature_step()
    elif type(estimator) is TemperatureScaling:
        step = estimator
    else:
        return None, None
    params = step.get_params(deep=False)
    key = tuple(sorted((k, repr(v)) for k, v in params.items() if k != "classes"))
    return key, step


def _recorded(func, *args, **kwargs):
    """``(func(*args, **kwargs), the warnings it raised)``, for the parent.

    A fold fit's warnings are raised again by the selector, in task order
    (:func:`_raise_again`): in joblib's worker processes they would
    otherwise go to the workers' stderr, out of reach of the caller's
    warning filters, and in its worker threads they would reach the caller
    in whatever order the threads ran, as errors inside a fold where the
    caller turns warnings into errors, and for candidates that are not
    chosen; with ``n_jobs=1`` the same fits' warnings are recorded and
    raised again too. Each is kept as (text, category, file, line): a
    warning object need not pickle back from a worker.
    """
    if _in_main_thread():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = func(*args, **kwargs)
        return result, [
            _as_record(w.message, w.category, w.filename, w.lineno) for w in caught
        ]
    log = _THREAD_WARNINGS.start()
    if log is None:
        # A thread this selector did not start (it runs inside another
        # threaded backend, dask's say): nothing process-wide may change.
        return func(*args, **kwargs), []
    try:
        result = func(*args, **kwargs)
    finally:
        _THREAD_WARNINGS.stop()
    return result, log


def _as_record(message, category, filename, lineno):
    return (str(message), category, filename, lineno)


def _in_main_thread():
    """Whether warnings can be recorded here without losing the caller's.

    ``warnings.catch_warnings`` swaps process-wide state: in a worker thread
    it would restore, on exit, what another thread's (or the caller's
    ``pytest.warns``) had set up meanwhile. Worker threads record through
    :data:`_THREAD_WARNINGS`, which the selector's main thread sets up.
    """
    return threading.current_thread() is threading.main_thread()


class _ThreadWarnings:
    """Warnings of joblib's worker threads, each kept for the task that raised it.

    The selector's main thread swaps the process-wide warning state once,
    around its parallel calls (:meth:`routing`): every warning is then
    shown to :meth:`_show`, which keeps it in the log of the worker thread's
    running task (:func:`_recorded`), or, raised outside a task (joblib's
    own, in the main thread), for :meth:`routing` to raise again after.
    """

    def __init__(self):
        self._local = threading.local()
        self._routing = False

    def start(self):
        """A new log for this thread's task, or None where nothing routes.

        Logs nest: a task may fit a selector of its own (the base of
        MarginTemperatureScaling), whose tasks run in the same thread.
        """
        if not self._routing:
            return None
        stack = getattr(self._local, "logs", None)
        if stack is None:
            stack = self._local.logs = []
        stack.append([])
        return stack[-1]

    def stop(self):
        self._local.logs.pop()

    def _show(self, message, category, filename, lineno, file=None, line=None):
        stack = getattr(self._local, "logs", None)
        log = stack[-1] if stack else self._stray
        log.append(_as_record(message, category, filename, lineno))

    @contextmanager
    def routing(self):
        """Route the warnings of the block's worker threads (main thread only)."""
        if not _in_main_thread() or self._routing:
            yield
            return
        self._stray = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = self._show
                self._routing = True
                try:
                    yield
                finally:
                    self._routing = False
        finally:
            stray, self._stray = self._stray, []
            _raise_again(stray)


_THREAD_WARNINGS = _ThreadWarnings()


def _parallel(n_jobs, tasks):
    """joblib's ``Parallel`` over ``tasks``, in threads unless configured otherwise.

    The fits release the GIL in their torch and numpy passes, so two
    threads use two cores without starting worker processes (which import
    torch again: a first call with ``n_jobs=2`` took longer than with
    ``n_jobs=1``). A :func:`joblib.parallel_config` backend still applies.
    """
    with _THREAD_WARNINGS.routing():
        return Parallel(n_jobs=n_jobs, prefer="threads")(tasks)


def _raise_again(caught):
    """Raise warnings recorded by :func:`_recorded` where they were raised.

    The same file, line and module as when raised directly, so the caller's
    filters (by module too: ``error::RuntimeWarning:sklearn_calib``) and the
    once-per-place registry treat them alike whatever ``n_jobs`` is.
    """
    if not caught:
        return
    modules = {
        getattr(module, "__file__", None): module
        for module in list(sys.modules.values())
        if module is not None
    }
    for text, category, filename, lineno in caught:
        module = modules.get(filename)
        if module is None:
            warnings.warn_explicit(text, category, filename, lineno)
        else:
            warnings.warn_explicit(
                text,
                category,
                filename,
                lineno,
                module=module.__name__,
                registry=vars(module).setdefault("__warningregistry__", {}),
            )


def _fit_temperature(step, logits, y, sample_weight, train):
    """``(fitted, fit_time)`` of ``step`` on ``train``, or None if it fails."""
    weight = None if sample_weight is None else sample_weight[train]
    start = time.perf_counter()
    try:
        fitted = with_code_classes(step, logits.shape[1]).fit(
            logits[train], y[train], **_weight_kwargs(weight)
        )
    except Exception:
        # The candidates then fit it themselves, and report the failure.
        return None
    return fitted, time.perf_counter() - start


def _shared_temperatures(estimators, logits, y, sample_weight, splits, n_jobs):
    """What each candidate takes, on each split, from a shared temperature fit.

    Temperature scaling and the structured maps (which start with it) with
    the same parameters compute the same temperature from the same rows: it
    is fitted once per split where two candidates or more need it. Returns,
    per candidate, per split, ``(given, shared)`` for :func:`_fit_and_score`:
    the fitted temperature scaling itself for a candidate that is one, its
    temperature for a structured map, ``({}, None)`` for the others and where
    the shared fit failed (the candidate then fits, or fails, on its own).
    """
    keys, steps = zip(*(_temperature_key(e) for e in estimators), strict=True)
    shared_keys = sorted({k for k in keys if k is not None and keys.count(k) > 1})
    tasks = [(key, s) for key in shared_keys for s in range(len(splits))]
    recorded = _parallel(
        n_jobs,
        (
            delayed(_recorded)(
                _fit_temperature,
                steps[keys.index(key)],
                logits,
                y,
                sample_weight,
                splits[s][0],
            )
            for key, s in tasks
        ),
    )
    for _, caught in recorded:
        _raise_again(caught)
    fits = dict(zip(tasks, (fit for fit, _ in recorded), strict=True))
    shares = []
    for key, step, estimator in zip(keys, steps, estimators, strict=True):
        per_split = []
        for s in range(len(splits)):
            fit = fits.get((key, s))
            if fit is None:
                per_split.append(({}, None))
            elif step is estimator:
                per_split.append(({}, fit))
            else:
                per_split.append(({"_given_temperature": fit[0].temperature_}, None))
        shares.append(per_split)
    return shares


def _fit_and_score(
    estimator,
    scorer,
    logits,
    y,
    sample_weight,
    train,
    test,
    keep_oof,
    error_score,
    given=None,
    shared=None,
    log_loss_scorer=False,
):
    """``estimator`` fitted on ``train`` and scored on ``test``.

    Returns ``(score, fit_time, score_time, oof, failure)``: ``oof`` the fit's
    log-probabilities of the ``test`` rows (with ``keep_oof``), ``failure``
    None, or why the fit or the scoring failed (the score is then
    ``error_score``; with ``error_score="raise"`` the error propagates).
    ``given``: private attributes set on the clone for its fit and removed
    after it (``_warm_start``, ``_given_temperature``). ``shared``: the
    candidate as already fitted on ``train`` with its fit time (see
    :func:`_shared_temperatures`); it is then scored, not fitted again.
    ``log_loss_scorer``: ``scorer`` is the ``"neg_log_loss"`` scorer, whose
    number (scikit-learn's log loss of ``predict_proba``) a calibrator of this
    library gives from the same pass of its map as the out-of-fold
    predictions.
    """
    train_weight = None if sample_weight is None else sample_weight[train]
    test_weight = None if sample_weight is None else sample_weight[test]
    start = time.perf_counter()
    try:
        if shared is not None:
            fitted, fit_time = shared
        else:
            fitted = clone(estimator)
            fitted.__dict__.update(given or {})
            fitted.fit(logits[train], y[train], **_weight_kwargs(train_weight))
            for name in given or {}:
                fitted.__dict__.pop(name, None)
            fit_time = time.perf_counter() - start
        start = time.perf_counter()
        n_classes = logits.shape[1]
        if (
            log_loss_scorer
            and isinstance(fitted, BaseCalibrator)
            and np.array_equal(fitted.classes_, np.arange(n_classes))
        ):
            # The scorer's number, scikit-learn's log loss of what its
            # scorers read from predict_proba (the positive column of a
            # binary problem), and the out-of-fold log-probabilities, from a
            # single pass of the map.
            proba, oof = fitted._proba_and_log_proba(logits[test])
            score = -sklearn_log_loss(
                y[test],
                proba[:, 1] if n_classes == 2 else proba,
                sample_weight=test_weight,
                labels=fitted.classes_,
            )
            oof = oof if keep_oof else None
            score_time = time.perf_counter() - start
        else:
            score = float(
                scorer(fitted, logits[test], y[test], **_weight_kwargs(test_weight))
            )
            score_time = time.perf_counter() - start
            oof = _log_proba(fitted, logits[test]) if keep_oof else None
    except Exception as error:
        if error_score == "raise":
            raise
        failure = f"{type(error).__name__}: {error}"
        return float(error_score), time.perf_counter() - start, 0.0, None, failure
    return score, fit_time, score_time, oof, None


class CalibratorSelector(BaseCalibrator):
    r"""Select a calibrator by cross-validated score, then refit it on all data.

    Every candidate calibrator is fitted on the training part and scored on
    the held-out part of each cross-validation split of the calibration
    logits; the candidate with the best mean score is refitted on all of them
    and used for prediction. The default score is the negative log-likelihood,
    a proper scoring rule: among calibrated maps it prefers the sharper one,
    where a calibration error alone cannot tell a good map from a constant
    one.

    With splits :math:`(I_s, J_s)_{s=1}^S` and the score :math:`\sigma`
    (greater is better), the candidate chosen is

    .. math::

        c^\star = \arg\max_c \frac{1}{S} \sum_{s=1}^{S}
        \sigma\big(\hat f_c^{(I_s)}, X_{J_s}, y_{J_s}\big),

    with :math:`\hat f_c^{(I)}` candidate :math:`c` fitted on the rows
    :math:`I`; ties go to the earlier candidate in ``calibrators``.

    Parameters
    ----------
    calibrators : list of estimators or of (str, estimator) tuples, default=None
        The candidates, cloned for every fit: calibrators of this library or
        any classifier over logits with ``fit(X, y, sample_weight)`` and
        ``predict_proba``. A tuple names its candidate in ``cv_results_``;
        otherwise the name is the estimator's ``repr``. ``None`` means
        ``[TemperatureScaling(), VectorScaling(), MatrixScaling(),
        DirichletCalibration(), StructuredVectorScaling(),
        StructuredMatrixScaling()]``.
    scoring : str or callable, default="neg_log_loss"
        How a fitted candidate is scored on held-out logits, greater is
        better: a name from :func:`sklearn_calib.metrics.get_scorer_names`
        (this library's calibration scorers and scikit-learn's), or a
        callable ``scorer(estimator, X, y, sample_weight=None)``.
    cv : int, cross-validation generator or iterable, default=5
        How to split the calibration logits: the number of folds of one fixed
        random permutation of the rows (``KFold(cv, shuffle=True,
        random_state=0)``, not stratified: stratified folds favour the
        candidates with per-class intercepts where classes have few rows), a
        splitter such as :class:`~sklearn.model_selection.StratifiedKFold`,
        or an iterable of ``(train, test)`` index arrays.
    n_jobs : int, default=None
        Number of jobs fitting and scoring the candidates on the splits in
        parallel (joblib; ``None`` means 1 unless in a
        :func:`joblib.parallel_config` context, ``-1`` all processors). The
        jobs run in threads (the fits release the GIL in their torch and
        numpy passes; worker processes would import torch again on every
        first call), each running torch on one thread; a
        :func:`joblib.parallel_config` backend still applies, and each of
        its worker processes runs torch on ``cpu_count() // n_jobs``
        threads, as joblib limits BLAS threads. The warnings of the fits on
        the splits are raised again in the caller's thread, in task order,
        as with ``n_jobs=1``. Where the selector itself runs in a thread
        (inside another parallel call) its fits' warnings are not recorded:
        they reach the warning filters directly, or, in a threaded worker
        elsewhere (dask's), stay in its log.
    error_score : "raise" or float, default=np.nan
        The score of a candidate whose fit or scoring fails on a split (a
        binary-only calibrator on many classes, say); a
        :class:`~sklearn.exceptions.FitFailedWarning` says why. ``"raise"``
        re-raises the error. A candidate with a NaN mean score is never
        chosen; if every candidate has one, the first is used, with a
        warning.
    fold_tol : float or None, default=1e-6
        Gradient tolerance of the fits on the training parts, for the affine
        maps of this library (vector, matrix, Dirichlet, Platt and the
        structured maps) whose own ``tol`` is tighter: they are fitted there
        with ``tol=fold_tol``. These fits only score the candidates and
        predict the held-out rows, which the last digits of the optimum do
        not move (mean scores within 4e-7 relative of the tight fits' on
        five public sets, and MarginTemperatureScaling's probabilities within
        2e-6 on the two most sensitive of them). The refit of the chosen
        candidate on all the rows, and the fits on the training parts that
        start from it (matrix and Dirichlet calibration), keep the
        candidate's own ``tol``. ``None``: every fit uses the candidate's own
        ``tol``.
    classes : array-like of shape (n_classes,), default=None
        The label of each logit column, in column order (for a single score
        column: the negative, then the positive class). Set it when the
        calibration labels may lack a class or are not 0-based indices, for
        example ``classes=[1, 2, 3, 4]``; ``y`` may then hold any subset of
        it. ``None`` infers the classes from ``y`` and raises a ``ValueError``
        where the match of labels to columns is ambiguous (the rule is in
        :class:`~sklearn_calib.BaseCalibrator`).

    Attributes
    ----------
    cv_results_ : dict of ndarray
        One entry per candidate, in the order of ``calibrators``, ready for
        ``pandas.DataFrame(cv_results_)``: ``"calibrator"`` (names),
        ``"split<i>_test_score"``, ``"mean_test_score"``,
        ``"std_test_score"``, ``"rank_test_score"`` (1 is best),
        ``"mean_fit_time"``, ``"std_fit_time"``, ``"mean_score_time"`` and
        ``"std_score_time"`` (seconds), as in
        :class:`~sklearn.model_selection.GridSearchCV`.
    best_index_ : int
        Index of the chosen candidate in ``calibrators`` and ``cv_results_``.
    best_score_ : float
        Its mean cross-validated score.
    best_estimator_ : estimator
        The chosen candidate, refitted on all the calibration logits. It sees
        them as :meth:`fit` validated them (a binary score column ``s`` as
        the two logits ``(0, s)``) and integer class codes: code ``i`` stands
        for ``classes_[i]``.
    scorer_ : callable
        The scorer used.
    n_splits_ : int
        Number of cross-validation splits.
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    sklearn.model_selection.GridSearchCV : The same selection over one
        estimator's parameters.
    CalibratedClassifier : Calibrates a classifier's outputs with any
        calibrator, this one included.

    Notes
    -----
    Sample weights are passed to every candidate's ``fit`` (training rows)
    and to the scorer (held-out rows), so a weighted calibration set is
    judged by its weighted score. Each split's score counts once in the mean
    whatever its size, as in :class:`~sklearn.model_selection.GridSearchCV`.

    The calibrators are fitted ``n_splits * n_candidates + 1`` times
    (``n_jobs`` runs these fits in parallel). Matrix and Dirichlet
    calibration are fitted on all the rows first, and their fits on the
    splits start from that map where it converged, preconditioned by its
    Hessian blocks: their objective is convex, so the same optimum is
    reached, in less time; that first fit is the refit when they are
    chosen. Where that map separates a class (every row's probability of it
    within 0.01 of 0 or 1), its optimum lies at infinity, where a fit stops
    wherever its start puts it: those fits on the splits start cold, so
    that the rows a split holds out cannot reach its score. Temperature
    scaling and the structured maps, which start with it, share one
    temperature fit per split (the number each would compute alone: their
    scores are unchanged, and the structured maps' fit times exclude it).
    The other affine maps' fits on the training parts stop at a gradient of
    ``fold_tol``. The prediction costs nothing more than the chosen
    calibrator's. The selected map is that of a calibrator fitted on
    all the data, so it keeps the argmax exactly when the chosen candidate
    does.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import (CalibratorSelector, TemperatureScaling,
    ...                            VectorScaling)
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=600)
    >>> logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(600, 3)))
    >>> logits[:, 2] += 3.0  # a class bias that one temperature cannot undo
    >>> selector = CalibratorSelector(
    ...     [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]
    ... ).fit(logits, y)
    >>> selector.cv_results_["calibrator"].tolist()
    ["TemperatureScaling(device='cpu')", "VectorScaling(device='cpu')"]
    >>> selector.cv_results_["rank_test_score"].tolist()
    [2, 1]
    >>> type(selector.best_estimator_).__name__
    'VectorScaling'
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "calibrators": [list, tuple, None],
        "scoring": [str, callable],
        "cv": ["cv_object"],
        "n_jobs": [Integral, None],
        "error_score": [StrOptions({"raise"}), Real],
        "fold_tol": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __init__(
        self,
        calibrators=None,
        *,
        scoring="neg_log_loss",
        cv=5,
        n_jobs=None,
        error_score=np.nan,
        fold_tol=1e-6,
        classes=None,
    ):
        self.calibrators = calibrators
        self.scoring = scoring
        self.cv = cv
        self.n_jobs = n_jobs
        self.error_score = error_score
        self.fold_tol = fold_tol
        self.classes = classes

    def _candidates(self):
        """(names, estimators) of the candidates, checked."""
        candidates = (
            _default_calibrators() if self.calibrators is None else self.calibrators
        )
        if len(candidates) == 0:
            raise ValueError("calibrators is empty: give at least one candidate.")
        names, estimators = [], []
        check = HasMethods(["fit", "predict_proba"])
        for i, candidate in enumerate(candidates):
            if isinstance(candidate, tuple):
                if len(candidate) != 2 or not isinstance(candidate[0], str):
                    raise ValueError(
                        f"calibrators[{i}] is a tuple but not a (str, estimator) "
                        f"pair: {candidate!r}."
                    )
                name, estimator = candidate
            else:
                name, estimator = repr(candidate), candidate
            if isinstance(estimator, type) or not check.is_satisfied_by(estimator):
                raise TypeError(
                    f"calibrators[{i}] must be an estimator with fit and "
                    f"predict_proba, got {estimator!r}."
                )
            names.append(name)
            estimators.append(estimator)
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(
                f"calibrators has several candidates named {duplicated}: name "
                "them with (name, estimator) tuples."
            )
        return names, estimators

    def _get_scorer(self):
        if callable(self.scoring):
            return self.scoring
        from ..metrics import get_scorer

        return get_scorer(self.scoring)

    def _weight_scale_matters(self):
        # The candidates receive the weights as given and normalise them
        # themselves, unless their own fit depends on the scale (Platt).
        return True

    def _fit(self, logits, y, sample_weight):
        splits = cv_splits(self.cv, logits, y)
        if (
            not splits
            and not isinstance(self.cv, Integral)
            and not getattr(self, "_keep_oof", False)
        ):
            # An integer cv on fewer than 2 rows leaves no split with a
            # warning (cv_splits), as does MarginTemperatureScaling, which
            # hands its own splits over (_fit_with_oof): the first candidate
            # is used. A cv given with no split is a mistake, as in
            # GridSearchCV.
            raise ValueError(
                f"cv={self.cv!r} gives no (train, test) split: nothing to "
                "score the candidates on."
            )
        oof = self._select(
            logits,
            y,
            sample_weight,
            splits,
            keep_oof=getattr(self, "_keep_oof", False),
        )
        if oof is not None:
            self._oof = oof

    def _fit_with_oof(self, X, y, sample_weight=None):
        """:meth:`fit`, returning the chosen candidate's out-of-fold log-probas.

        None where there are none (see ``_select``). They are handed over,
        not kept: the fitted state stays small.
        """
        self._keep_oof = True
        try:
            self.fit(X, y, sample_weight=sample_weight)
        finally:
            del self._keep_oof
        return self.__dict__.pop("_oof", None)

    def _select(self, logits, y, sample_weight, splits, *, keep_oof=False):
        """Cross-validate the candidates on ``splits``, choose one and refit it.

        With ``keep_oof``, returns the chosen candidate's out-of-fold
        log-probabilities (each row predicted by the fit that did not see it),
        or None where the splits do not hold out every row exactly once or
        the candidate failed on a split.
        """
        names, estimators = self._candidates()
        # The class set is known from all of y: a training part that lacks a
        # class (or holds a single one) still fits, column j staying code j.
        estimators = [with_code_classes(e, logits.shape[1]) for e in estimators]
        scorer = self._get_scorer()
        # Unit weights are no weights: estimators without sample_weight
        # support then still run, and scorers see the plain mean.
        weighted = not np.all(sample_weight == 1.0)
        keep_oof = keep_oof and partitions(splits, logits.shape[0])

        n_splits, n_candidates = len(splits), len(estimators)
        scores = np.empty((n_candidates, n_splits))
        fit_times = np.zeros((n_candidates, n_splits))
        score_times = np.zeros((n_candidates, n_splits))
        oof = [np.full(logits.shape, np.nan) if keep_oof else None for _ in names]
        # A candidate that failed on a split has no out-of-fold predictions
        # there, whatever number error_score gives its score.
        failed = np.zeros(n_candidates, dtype=bool)
        # Candidates whose fold fits can start from their fit on every row get
        # that fit first; it is also their refit if chosen.
        full = _parallel(
            self.n_jobs,
            (
                delayed(_fit_full)(
                    estimator, logits, y, sample_weight if weighted else None
                )
                for estimator in estimators
            ),
        )
        warm = [
            None
            if f is None
            else _warm_start_of(f, b, logits, y, sample_weight if weighted else None)
            for f, _, b in full
        ]
        on_folds = [
            _fold_candidate(e, self.fold_tol, w)
            for e, w in zip(estimators, warm, strict=True)
        ]
        shares = _shared_temperatures(
            estimators,
            logits,
            y,
            sample_weight if weighted else None,
            splits,
            self.n_jobs,
        )

        def given_and_shared(c, s):
            given, shared = shares[c][s]
            if warm[c] is not None:
                given = {**given, "_warm_start": warm[c]}
            return {"given": given, "shared": shared}

        tasks = [
            (c, s, name, estimator, train, test)
            for c, (name, estimator) in enumerate(zip(names, on_folds, strict=True))
            for s, (train, test) in enumerate(splits)
        ]
        log_loss_scorer = (
            isinstance(self.scoring, str) and self.scoring == "neg_log_loss"
        )
        # Each (candidate, split) fit is independent: joblib runs them in
        # parallel with n_jobs, in order otherwise. A failure comes back as a
        # message and is warned about here, in task order, not in a worker.
        results = _parallel(
            self.n_jobs,
            (
                delayed(_recorded)(
                    _fit_and_score,
                    estimator,
                    scorer,
                    logits,
                    y,
                    sample_weight if weighted else None,
                    train,
                    test,
                    keep_oof,
                    self.error_score,
                    log_loss_scorer=log_loss_scorer,
                    **given_and_shared(c, s),
                )
                for c, s, _, estimator, train, test in tasks
            ),
        )
        for (c, s, name, _, _, test), (result, caught) in zip(
            tasks, results, strict=True
        ):
            scores[c, s], fit_times[c, s], score_times[c, s], rows, failure = result
            _raise_again(caught)
            if failure is not None:
                failed[c] = True
                warnings.warn(
                    f"Candidate {name} failed on a cross-validation split and "
                    f"scores {self.error_score} there: {failure}",
                    FitFailedWarning,
                    stacklevel=4,
                )
            elif keep_oof:
                oof[c][test] = rows

        results = _summarise(names, scores, fit_times, score_times)
        mean = results["mean_test_score"]
        if np.all(np.isnan(mean)):
            # Nothing to compare (too few samples to split, or no candidate
            # fits a training part): the first candidate is the prior choice.
            warnings.warn(
                "No candidate could be scored by cross-validation (too few "
                "samples per class, or every candidate failed on some split; "
                f"see any FitFailedWarning): the first candidate, {names[0]}, "
                "is used.",
                UserWarning,
                stacklevel=4,
            )
        self.cv_results_ = results
        # the first of the best: ties go to the earlier candidate
        self.best_index_ = int(np.argmin(results["rank_test_score"]))
        self.best_score_ = float(mean[self.best_index_])
        self.scorer_ = scorer
        self.n_splits_ = n_splits
        self.best_estimator_, caught, _ = full[self.best_index_]
        _raise_again(caught)
        if self.best_estimator_ is None:
            self.best_estimator_ = clone(estimators[self.best_index_]).fit(
                logits, y, **_weight_kwargs(sample_weight if weighted else None)
            )
        if keep_oof and not failed[self.best_index_]:
            return oof[self.best_index_]
        return None

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_candidates = len(self._candidates()[0])
        index = check_state_int(self, "best_index_")
        if index >= n_candidates:
            fail_state(self, "best_index_", f"must be < {n_candidates}, got {index}")
        check_state_int(self, "n_splits_")
        n_classes = len(self.classes_)
        best = get_state(self, "best_estimator_")
        if isinstance(best, BaseCalibrator) or not hasattr(best, "predict_proba"):
            check_state_calibrator(self, "best_estimator_", n_features=n_classes)
        else:
            self._check_fitted_classifier(best, n_classes)
        results = get_state(self, "cv_results_")
        if not isinstance(results, dict) or "mean_test_score" not in results:
            fail_state(self, "cv_results_", "must be a dict of results")
        check_state_array(
            self,
            'cv_results_["mean_test_score"]',
            value=results["mean_test_score"],
            shape=(n_candidates,),
            numeric=True,
        )
        # NaN where no candidate was scored (fit then uses the first one), -inf
        # from a custom scorer: states that fit produces.
        best_score = get_state(self, "best_score_")
        if isinstance(best_score, (bool, np.bool_)) or not isinstance(best_score, Real):
            fail_state(
                self, "best_score_", f"must be a real number, got {best_score!r}"
            )
        mean_score = float(results["mean_test_score"][index])
        if not (
            float(best_score) == mean_score
            or (np.isnan(best_score) and np.isnan(mean_score))
        ):
            fail_state(
                self, "best_score_", "must be the mean test score of best_index_"
            )
        if not callable(get_state(self, "scorer_")):
            fail_state(self, "scorer_", "must be a callable scorer")

    def _check_fitted_classifier(self, best, n_classes):
        """A chosen classifier that is no calibrator of this library.

        Fitted on the logits and the class codes: its ``classes_`` are
        distinct codes in ``range(n_classes)``.
        """
        from sklearn.exceptions import NotFittedError

        try:
            check_is_fitted(best)
        except NotFittedError:
            fail_state(
                self, "best_estimator_", f"must be fitted, got an unfitted {best!r}"
            )
        n_seen = getattr(best, "n_features_in_", n_classes)
        codes = np.asarray(getattr(best, "classes_", []))
        if (
            n_seen != n_classes
            or codes.ndim != 1
            or codes.dtype.kind not in "iu"
            or np.unique(codes).shape[0] != codes.shape[0]
            or codes.min(initial=0) < 0
            or codes.max(initial=0) >= n_classes
        ):
            fail_state(
                self,
                "best_estimator_",
                f"must be fitted on {n_classes} logit columns and class codes in "
                f"range({n_classes})",
            )

    def _calibrated_logits(self, logits):
        # The chosen calibrator's log-probabilities are calibrated logits:
        # softmax gives back its probabilities, argmax its predictions.
        return _log_proba(self.best_estimator_, logits)

    def to_torch(self):
        """Export the chosen calibrator as a ``torch.nn.Module``.

        Returns
        -------
        module : torch.nn.Module
            ``best_estimator_.to_torch()``: logits (a binary problem as two
            logit columns) to calibrated log-probabilities.

        Raises
        ------
        AttributeError
            If the chosen calibrator has no ``to_torch``.
        """
        check_is_fitted(self)
        if not hasattr(self.best_estimator_, "to_torch"):
            raise AttributeError(
                f"The chosen calibrator {type(self.best_estimator_).__name__} has "
                "no to_torch export."
            )
        return self.best_estimator_.to_torch()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.calibrators is not None:
            estimators = [
                c[1] if isinstance(c, tuple) and len(c) == 2 else c
                for c in self.calibrators
            ]
            try:
                multi = [get_tags(e).classifier_tags.multi_class for e in estimators]
            except (AttributeError, TypeError):
                multi = [True]
            # Multiclass when some candidate is: the others then fail and
            # score error_score, and the multiclass one is chosen.
            tags.classifier_tags.multi_class = any(multi)
        return tags
