"""Split-conformal prediction sets over logits.

A :class:`ConformalClassifier` turns the probabilities of a (calibrated)
classifier into sets of labels that contain the true label with a guaranteed
probability: fitted on a calibration split of ``n`` exchangeable samples, its
set for a new sample misses the truth with probability at most
``alpha = 1 - confidence_level``.

Every score function is one formula, ``s(x, y) = A(r) + U * w(r)``, where
``r`` is the rank of ``y`` when the classes are sorted by decreasing
probability (ties: the lower column first), ``A(r)`` is the mass of the
classes ranked before ``y`` (plus a penalty for RAPS), ``w(r)`` the mass of
``y`` itself and ``U`` a uniform draw (randomised sets) or 0 (deterministic
sets). A label enters a set when its score is at most the finite-sample
quantile of the calibration scores; the same code computes the scores at
calibration and at prediction, so the two always agree.
"""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils import check_random_state, get_tags

from .utils._compat import (
    HasMethods,
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)
from .utils._fitted_state import (
    check_state_array,
    check_state_classes,
    check_state_int,
    check_state_parameters,
    fail_state,
    get_state,
    is_fitted_state,
)
from .utils._math import order_free_row_sums, row_blocks
from .utils._validation import (
    UNIT_WEIGHT_CAP,
    check_logit_labels,
    check_sample_weight,
    expand_binary_scores,
    resolve_classes,
    to_numpy,
    unit_weight,
    weight_scale,
)

__all__ = ["ConformalClassifier", "ConformalRiskClassifier", "conformal_report"]

CONFORMITY_SCORES = ("lac", "aps", "raps", "saps", "top_k")

# (n + 1) * confidence_level is rounded in floating point; a relative slack of
# this size keeps a product that is an integer in exact arithmetic (0.9 * 1000)
# from being rounded up to the next order statistic.
_LEVEL_RTOL = 1e-12

# The largest RAPS penalty term: far below float64's maximum, so that the
# masses and the draw added to it stay finite.
_SCORE_CAP = np.finfo(np.float64).max / 4


# --- the score functions --------------------------------------------------------


def _masked_softmax(logits):
    """Softmax of logits that may hold ``-inf`` (masked classes), in float64.

    Returns the probabilities and the boolean mask of the ``-inf`` entries,
    or None when there are none. A row without any finite logit has no
    distribution and is an error.
    """
    logits = np.asarray(logits, dtype=np.float64)
    masked = np.isneginf(logits)
    top = logits.max(axis=1, keepdims=True)
    if not np.all(np.isfinite(top)):
        row = int(np.flatnonzero(~np.isfinite(top[:, 0]))[0])
        raise ValueError(
            f"Row {row} of X has no finite logit: every class is masked (-inf), "
            "so it has no probability distribution."
        )
    with np.errstate(over="ignore"):
        # logits - top <= 0 overflows only to -inf (a logit of -1e308 under
        # one of 1e308), whose exp is 0: numpy's RuntimeWarning said nothing
        # the caller must act on.
        proba = np.exp(logits - top)
    # The same logits in any column order: the same quantile and thresholds.
    proba /= order_free_row_sums(proba)
    return proba, (masked if masked.any() else None)


def masked_softmax(logits, *, dtype=np.float64):
    """:func:`_masked_softmax` of validated logits, block by block, in ``dtype``.

    The float64 work stays within one block of rows; ``-inf`` gives 0.
    """
    out = np.empty(logits.shape, dtype=dtype)
    for rows in row_blocks(*logits.shape):
        out[rows] = _masked_softmax(logits[rows])[0]
    return out


def _masked_columns(X, proba):
    """Where logits ``X`` handed to a calibrator mask a class (``-inf``), or None.

    A calibrator maps a masked class to probability exactly 0, as
    ``calibrator=None`` does, and such a class never enters a set, even one
    made full by an infinite threshold. The mask is read from ``X`` itself
    (a probability that merely underflows to 0 is an ordinary class): logits
    of one column per class, or a single binary score column whose ``-inf``
    masks the positive class, where ``proba`` is exactly 0. Input of another
    shape (features of a wrapped classifier) masks nothing, nor does a
    ``-inf`` feature of a classifier with as many features as classes: its
    class keeps the probability the classifier gives it (read as a mask, a
    class of probability 0.99 never entered a set).
    """
    shape = proba.shape
    try:
        logits = np.asarray(to_numpy(X))
    except (TypeError, ValueError):
        return None
    if logits.dtype.kind != "f" or logits.ndim != 2 or logits.shape[0] != shape[0]:
        return None
    if logits.shape[1] == 1 and shape[1] == 2:
        logits = expand_binary_scores(logits)
    if logits.shape[1] != shape[1]:
        return None
    masked = np.isneginf(logits) & (proba == 0)
    return masked if masked.any() else None


def _rank(proba):
    """Columns by decreasing probability, ties broken towards the lower column.

    The rule is the same at calibration and at prediction. numpy's stable
    sort is about three times slower than its default one, so rows are sorted
    with the default sort and only rows holding a tie are sorted again stably.
    """
    order = np.argsort(proba, axis=1)[:, ::-1]
    ranked = np.take_along_axis(proba, order, axis=1)
    tied = np.flatnonzero((ranked[:, 1:] == ranked[:, :-1]).any(axis=1))
    if tied.size:
        order = np.ascontiguousarray(order)
        order[tied] = np.argsort(-proba[tied], axis=1, kind="stable")
        ranked[tied] = np.take_along_axis(proba[tied], order[tied], axis=1)
    return order, ranked


def _score_matrix(
    proba, conformity_score, u=None, *, raps_penalty, raps_k_reg, saps_weight
):
    """Conformity score of every (sample, label) pair.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        float64 probabilities.
    conformity_score : str
        One of ``CONFORMITY_SCORES``.
    u : ndarray of shape (n_samples,) or None
        Uniform draws of the randomised scores; None for deterministic ones
        (``U = 0``). Ignored by ``"lac"``, whose score is already continuous.

    Returns
    -------
    scores : ndarray of shape (n_samples, n_classes)
        In the column order of ``proba``; a label is in the set at threshold
        ``q`` iff its score is at most ``q``.
    """
    if conformity_score == "lac":
        return 1.0 - proba
    n_samples, n_classes = proba.shape
    order, ranked = _rank(proba)
    if conformity_score == "top_k":
        mass = np.ones_like(ranked)
    elif conformity_score == "saps":
        # SAPS keeps the top probability and gives every later rank the same
        # mass, so only the rank (not the tail probabilities) matters.
        mass = np.full_like(ranked, saps_weight)
        mass[:, 0] = ranked[:, 0]
    else:  # aps, raps
        mass = ranked
    before = np.zeros_like(ranked)
    np.cumsum(mass[:, :-1], axis=1, out=before[:, 1:])
    if conformity_score == "raps":
        rank = np.arange(1, n_classes + 1, dtype=np.float64)
        with np.errstate(over="ignore"):
            penalty = raps_penalty * np.maximum(rank - raps_k_reg, 0.0)
        # A penalty past float64's range would be inf, the score of a masked
        # class (never in a set, and counted as masked at calibration):
        # capped, the ranks beyond it tie and enter sets together.
        before += np.minimum(penalty, _SCORE_CAP)
    if u is not None:
        before += u[:, None] * mass
    scores = np.empty_like(before)
    np.put_along_axis(scores, order, before, axis=1)
    return scores


def _splitmix64(h):
    """SplitMix64's finaliser on a uint64 array, in place (wrapping arithmetic)."""
    h += np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


def _row_draws(proba, seed):
    """The draws ``U`` of randomised scores: one uniform on [0, 1) per row.

    A hash of ``seed`` and the row's sorted probabilities, so a row gets
    the same draw in any batch, at any position and in any column order,
    while different rows get draws that look independent.
    The same function gives the draws at calibration and at prediction:
    for a given seed the randomised score is one function of the sample,
    so the coverage holds for every seed, also for rows predicted one at a
    time (one stream of draws by position gave every single-row call the
    same draw).
    """
    n_samples, n_classes = proba.shape
    # + 0.0 turns -0.0 into 0.0: equal probabilities, equal bits.
    bits = np.ascontiguousarray(np.sort(proba, axis=1), dtype=np.float64) + 0.0
    bits = bits.view(np.uint64)
    keys = np.arange(n_classes, dtype=np.uint64)
    keys ^= np.uint64(int(seed) % 2**32) << np.uint64(32)
    mixed = _splitmix64(bits ^ _splitmix64(keys))
    h = mixed.sum(axis=1, dtype=np.uint64)
    h ^= np.uint64(int(seed) % 2**32)
    h = _splitmix64(h)
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _accepts_sample_weight(estimator):
    from inspect import Parameter, signature

    parameters = signature(estimator.fit).parameters
    return "sample_weight" in parameters or any(
        p.kind is Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _true_label_scores(scores, y_codes):
    return np.take_along_axis(scores, y_codes[:, None], axis=1)[:, 0]


class _SortedScores:
    """Calibration scores of one group, sorted, with cumulative weights."""

    def __init__(self, scores, weights, test_weight=1.0):
        order = np.argsort(scores, kind="stable")
        self._set(scores[order], np.cumsum(weights[order]), test_weight)

    @classmethod
    def from_sorted(cls, scores, cum_weights, test_weight=1.0):
        """The group of already sorted scores and their cumulative weights."""
        group = cls.__new__(cls)
        group._set(scores, cum_weights, test_weight)
        return group

    def _set(self, scores, cum_weights, test_weight):
        self.scores = scores
        self.cum_weights = cum_weights
        # The new sample's weight on the scale of the stored weights (which
        # are divided by a power of two near the largest, so that their sums
        # cannot overflow): 1 for weights of at most 1.
        self.test_weight = test_weight
        self.total = float(cum_weights[-1]) if len(scores) else 0.0

    def quantile(self, confidence_level):
        """The finite-sample conformal quantile, ``inf`` when too few samples.

        With unit weights this is the ``ceil((n + 1) * confidence_level)``-th
        smallest score. Weights count as repetitions of a row and the new
        sample counts once: the smallest score whose cumulative weight
        reaches ``confidence_level * (W + 1)``, ``W`` the total weight.
        """
        target = confidence_level * (self.total + self.test_weight)
        target *= 1.0 - _LEVEL_RTOL
        if target > self.total:
            return math.inf
        index = int(np.searchsorted(self.cum_weights, target, side="left"))
        return float(self.scores[min(index, len(self.scores) - 1)])


def calibrator_input_tags(tags, calibrator):
    """``tags`` of an estimator reading ``X`` as logits or handing it to ``calibrator``.

    With ``calibrator=None`` the logits may not hold NaN; otherwise the
    calibrator's input tags (sparse, NaN) and multi-class tag are the
    estimator's. Returns ``tags``, updated in place.
    """
    if calibrator is None:
        tags.input_tags.allow_nan = False
    else:
        inner = get_tags(calibrator)
        tags.input_tags.sparse = inner.input_tags.sparse
        tags.input_tags.allow_nan = inner.input_tags.allow_nan
        tags.classifier_tags.multi_class = inner.classifier_tags.multi_class
    return tags


def _minimum_samples(confidence_level):
    """Fewest unit-weight samples that give a finite quantile."""
    return math.ceil(confidence_level / (1.0 - confidence_level) * (1 - _LEVEL_RTOL))


def _check_confidence_level(confidence_level):
    if (
        isinstance(confidence_level, bool)
        or not isinstance(confidence_level, Real)
        or not 0 < confidence_level < 1
    ):
        raise ValueError(
            f"confidence_level must be a float in (0, 1), got {confidence_level!r}."
        )
    return float(confidence_level)


# --- the estimator -------------------------------------------------------------


class ConformalClassifier(ClassifierMixin, BaseEstimator):
    """Split-conformal prediction sets over logits, after any calibrator.

    Fitted on a calibration split (logits and true labels that the model
    did not train on), the classifier returns for each new sample a set of
    labels that contains the true label with probability at least
    ``confidence_level``, whatever the model and its calibration, as long as
    the calibration and new samples are exchangeable. Better probabilities
    give smaller sets, not better coverage.

    Parameters
    ----------
    calibrator : estimator with ``fit`` and ``predict_proba``, default=None
        Maps ``X`` to the probabilities the sets are built from. None:
        ``X`` holds logits (or log-probabilities) and the probabilities are
        their softmax. A calibrator of this library (``TemperatureScaling()``)
        is cloned and fitted on the calibration split in :meth:`fit`; a
        :class:`~sklearn.frozen.FrozenEstimator` around a calibrator (or any
        classifier) fitted on other data is used as it is. See Notes for
        which of the two keeps the guarantee exact.
    conformity_score : {"lac", "aps", "raps", "saps", "top_k"}, default="lac"
        How a label is scored, with ``p`` the probabilities, ``r`` the rank of
        the label by decreasing probability and ``U`` the randomisation:

        - ``"lac"`` (least ambiguous set-valued classifier): ``1 - p_y``;
          the smallest sets on average; may be empty.
        - ``"aps"`` (adaptive prediction sets): the mass of the labels
          ranked before ``y`` plus ``U * p_y``; larger sets for harder samples.
        - ``"raps"`` (regularised APS): APS plus
          ``raps_penalty * max(r - raps_k_reg, 0)``, which stops long tails of
          tiny probabilities from entering the sets.
        - ``"saps"`` (sorted APS): the top probability, then
          ``saps_weight`` per further rank; uses the ranks, not the tail
          probabilities.
        - ``"top_k"``: the rank itself, ``r - 1 + U``; the same size for
          every sample (deterministic).

    confidence_level : float in (0, 1), default=0.9
        Target probability that a set holds the true label, ``1 - alpha``.
        :meth:`predict_set` may ask for another level.
    randomized : bool, default=False
        Randomise the cumulative scores (``U`` uniform on [0, 1], one draw
        per sample, at calibration and at prediction, a hash of the seed and
        the sample's probabilities: a sample gets the same draw in any batch
        and at any position, so rows predicted one at a time are not all
        given one draw): the coverage is then
        ``1 - alpha`` up to ``1/(n + 1)`` rather than at least ``1 - alpha``,
        at the price of sets that depend on the draw (and may be empty).
        ``False`` uses ``U = 0``: the label whose cumulative mass crosses the
        threshold is kept, so the cumulative scores never give an empty set.
        ``"lac"`` has a continuous score and ignores it.
    conditional : {"marginal", "class"}, default="marginal"
        ``"marginal"``: one threshold; coverage on average over samples.
        ``"class"`` (Mondrian, label-conditional): one threshold per class
        from that class's calibration samples, so the coverage holds for
        every true class separately; needs enough calibration samples of
        every class.
    raps_penalty : float >= 0, default=0.01
        RAPS's penalty per rank beyond ``raps_k_reg`` (lambda).
    raps_k_reg : int >= 0, default=1
        Ranks up to this one are not penalised by RAPS (k_reg).
    saps_weight : float > 0, default=0.1
        SAPS's mass of every rank after the first (lambda).
    random_state : int, RandomState instance or None, default=None
        Seeds the draws ``U`` when ``randomized=True``: :meth:`fit` takes
        from it the seed of the hash that gives the draws at calibration and
        in :meth:`predict_set` (so a fitted classifier returns the same set
        for the same row, whatever rows come with it).
    classes : array-like of shape (n_classes,), default=None
        With ``calibrator=None``, the class of each logit column, in column
        order; needed when the labels cannot be matched to the columns
        unambiguously (for instance integer labels that lack 0, as a small
        calibration split of many classes often does). A calibrator states
        its own ``classes``, so setting both is an error.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels, the columns of :meth:`predict_set` and
        :meth:`predict_proba`.
    calibrator_ : estimator or None
        The fitted calibrator (None when ``calibrator`` is None).
    conformity_scores_ : ndarray of shape (n_samples,)
        Score of each calibration sample's true label; ``inf`` where that
        label was masked (a ``-inf`` logit).
    quantile_ : float or ndarray of shape (n_classes,)
        Threshold at ``confidence_level`` (one per class when
        ``conditional="class"``); ``inf`` where there are too few samples.
        Computed from the stored scores at the current ``confidence_level``,
        so after ``set_params(confidence_level=...)`` it is the threshold
        :meth:`predict_set` uses, without a refit.
    n_features_in_ : int
        Number of columns of ``X`` seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of ``X``, when it had string column names.

    See Also
    --------
    sklearn_calib.metrics.set_coverage : Fraction of sets holding the truth.
    sklearn_calib.metrics.mean_set_size : Average number of labels per set.
    sklearn_calib.selective.risk_coverage_curve : Abstaining instead of sets.

    Notes
    -----
    **Quantile.** With ``n`` calibration scores the threshold is the
    ``ceil((n + 1) * confidence_level)``-th smallest one [1]_; when that rank
    exceeds ``n`` (fewer than ``confidence_level / alpha`` samples, 9 at 0.9)
    the threshold is infinite, the sets hold every class and a warning says
    so. ``sample_weight`` counts as repetitions (weight 2 = the row twice):
    the threshold is the smallest score whose cumulative weight reaches
    ``confidence_level * (W + 1)``, ``W`` the total weight.

    **Guarantee.** Coverage is at least ``confidence_level`` when the
    probabilities do not depend on the calibration split: ``calibrator=None``,
    a ``FrozenEstimator`` of a calibrator fitted on other data, or a pipeline
    whose calibrator was fitted elsewhere. A calibrator fitted in :meth:`fit`
    (or by a :class:`~sklearn.pipeline.Pipeline` on the same rows) sees the
    calibration labels twice; with one temperature the effect on coverage is
    far below its sampling noise, but it is not covered by the theorem.

    **Input.** ``X`` is what the calibrator takes: logits for this library's
    calibrators and for ``calibrator=None``. Log-probabilities are logits
    too, so ``make_pipeline(TemperatureScaling(), ConformalClassifier())``
    works: the calibrator's ``transform`` passes calibrated log-probabilities.
    A pipeline has no ``predict_set``; call ``pipe[-1].predict_set(
    pipe[:-1].transform(X))``, or use ``calibrator=``. Probabilities ``p``
    enter as ``np.log(p)``.

    **Masked classes.** With ``calibrator=None`` a logit of ``-inf`` marks a
    class as impossible (probability exactly 0): it never enters a set, not
    even a set made full by an infinite threshold. A calibration sample
    whose true class is masked gets an infinite score (it can never be
    covered), and a warning. A class whose probability merely underflows to
    0 from a finite logit is an ordinary class.

    **Ties.** Classes of equal probability are ranked by column, lower
    first; the rule is the same at calibration and prediction.

    References
    ----------
    .. [1] V. Vovk, A. Gammerman and G. Shafer, "Algorithmic Learning in a
       Random World", Springer, 2005; A. N. Angelopoulos and S. Bates, "A
       Gentle Introduction to Conformal Prediction and Distribution-Free
       Uncertainty Quantification", 2021.
    .. [2] M. Sadinle, J. Lei and L. Wasserman, "Least Ambiguous Set-Valued
       Classifiers With Bounded Error Levels", JASA 114, 2019 (LAC).
    .. [3] Y. Romano, M. Sesia and E. Candès, "Classification with Valid and
       Adaptive Coverage", NeurIPS 2020 (APS).
    .. [4] A. N. Angelopoulos, S. Bates, J. Malik and M. I. Jordan,
       "Uncertainty Sets for Image Classifiers using Conformal Prediction",
       ICLR 2021 (RAPS).
    .. [5] J. Huang, H. Xi, L. Zhang, H. Yao, Y. Qiu and H. Wei, "Conformal
       Prediction for Deep Classifier via Label Ranking", ICML 2024 (SAPS).
    .. [6] V. Vovk, "Conditional Validity of Inductive Conformal Predictors",
       ACML 2012 (label-conditional, Mondrian).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.conformal import ConformalClassifier
    >>> from sklearn_calib.datasets import load_logits
    >>> data = load_logits("c100_densenetbc100_netcal")
    >>> clf = ConformalClassifier(TemperatureScaling(device="cpu"),
    ...                           conformity_score="aps", confidence_level=0.9)
    >>> clf = clf.fit(data.logits_val, data.y_val)
    >>> sets = clf.predict_set(data.logits_test)
    >>> sets.shape, sets.dtype
    ((5000, 100), dtype('bool'))
    >>> coverage = sets[np.arange(len(sets)), data.y_test].mean()
    >>> bool(coverage >= 0.88)
    True
    """

    _parameter_constraints: dict = {
        "calibrator": [HasMethods(["fit", "predict_proba"]), None],
        "conformity_score": [StrOptions(set(CONFORMITY_SCORES))],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "randomized": ["boolean"],
        "conditional": [StrOptions({"marginal", "class"})],
        "raps_penalty": [Interval(Real, 0, None, closed="left")],
        "raps_k_reg": [Interval(Integral, 0, None, closed="left")],
        "saps_weight": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "classes": ["array-like", None],
    }

    def __init__(
        self,
        calibrator=None,
        *,
        conformity_score="lac",
        confidence_level=0.9,
        randomized=False,
        conditional="marginal",
        raps_penalty=0.01,
        raps_k_reg=1,
        saps_weight=0.1,
        random_state=None,
        classes=None,
    ):
        self.calibrator = calibrator
        self.conformity_score = conformity_score
        self.confidence_level = confidence_level
        self.randomized = randomized
        self.conditional = conditional
        self.raps_penalty = raps_penalty
        self.raps_k_reg = raps_k_reg
        self.saps_weight = saps_weight
        self.random_state = random_state
        self.classes = classes

    # -- input ---------------------------------------------------------------

    def _check_logits(self, X, *, reset, y=None):
        """Validate logits that may hold ``-inf`` (masked classes)."""
        X = to_numpy(X)
        options = dict(
            reset=reset,
            dtype=[np.float64, np.float32],
            ensure_all_finite=False,
            ensure_min_samples=1,
        )
        if y is None:
            X = validate_data(self, X, **options)
        else:
            X, y = validate_data(self, X, to_numpy(y), **options)
        if np.isnan(X).any():
            raise ValueError("Input X contains NaN.")
        if np.isposinf(X).any():
            raise ValueError(
                "Input X contains infinity: +inf is not a logit (-inf, a masked "
                "class of probability 0, is allowed)."
            )
        X = expand_binary_scores(X)
        return X if y is None else (X, y)

    def _probabilities(self, X):
        """float64 probabilities of validated input, and the mask or None."""
        if self.calibrator_ is None:
            return self._probabilities_of_logits(self._check_logits(X, reset=False))
        proba = np.asarray(self.calibrator_.predict_proba(X), dtype=np.float64)
        if proba.ndim != 2 or proba.shape[1] != len(self.classes_):
            raise ValueError(
                f"The calibrator's predict_proba returned shape {proba.shape}; "
                f"expected (n_samples, {len(self.classes_)})."
            )
        if not np.all(np.isfinite(proba)) or np.any(proba < 0):
            bad = ~(np.isfinite(proba) & (proba >= 0))
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"The calibrator's predict_proba returned {float(proba[row, col])} "
                f"for row {row}, class {self.classes_[col].item()!r}: conformal "
                "scores need "
                "probabilities (finite, non-negative). Check the calibrator and "
                "its input."
            )
        return proba, _masked_columns(X, proba)

    def _scoring_params(self):
        """The parameters of the score function, as the constructor holds them."""
        return {
            "conformity_score": self.conformity_score,
            "raps_penalty": float(self.raps_penalty),
            "raps_k_reg": int(self.raps_k_reg),
            "saps_weight": float(self.saps_weight),
        }

    def _draws(self, proba):
        """The draws ``U`` of these rows' randomised scores, or None."""
        if not self._randomized:
            return None
        return _row_draws(proba, self._prediction_seed)

    def _scores(self, proba, u):
        # The parameters fixed by fit: changing them afterwards (set_params)
        # without refitting cannot desynchronise scores and thresholds.
        return _score_matrix(proba, u=u, **self._scoring)

    # -- fit -----------------------------------------------------------------

    @_fit_context(
        # the calibrator validates its own parameters in its fit
        prefer_skip_nested_validation=False
    )
    def fit(self, X, y, sample_weight=None):
        """Compute the calibration scores (and fit the calibrator, if any).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits of the calibration split (what the calibrator takes; a
            single score column for a binary problem with
            ``calibrator=None``). May hold ``-inf`` (masked classes) when
            ``calibrator`` is None.
        y : array-like of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative frequency weights of the calibration samples; also
            passed to the calibrator's ``fit``.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None."
            )
        if self.calibrator is None:
            self.calibrator_ = None
            X, y = self._check_logits(X, reset=True, y=y)
            check_logit_labels(y)
            sample_weight = check_sample_weight(sample_weight, X)
            self.classes_, y_codes = resolve_classes(y, X.shape[1], self.classes)
            proba, masked = self._probabilities_of_logits(X)
        else:
            if self.classes is not None:
                raise ValueError(
                    "classes= is for calibrator=None; a calibrator states its "
                    "own classes: pass classes= to the calibrator instead."
                )
            self.calibrator_ = clone(self.calibrator)
            fit_params = {}
            if sample_weight is not None:
                sample_weight = check_sample_weight(sample_weight, X)
                fit_params["sample_weight"] = sample_weight
                if not _accepts_sample_weight(self.calibrator_):
                    raise TypeError(
                        f"{type(self.calibrator_).__name__}.fit does not accept "
                        "sample_weight, so it would be fitted without the weights "
                        "the conformal scores use. Fit it beforehand and pass "
                        "FrozenEstimator(fitted), or drop the weights."
                    )
            self.calibrator_.fit(X, y, **fit_params)
            y = np.asarray(to_numpy(y))
            if y.ndim == 2 and y.shape[1] == 1:
                y = y[:, 0]
            if y.ndim != 1:
                # a frozen calibrator's fit does not look at y
                raise ValueError(
                    f"y must be 1-D, one label per sample; got shape {y.shape}."
                )
            check_logit_labels(y)
            if not hasattr(self.calibrator_, "classes_"):
                raise TypeError(
                    f"The calibrator {type(self.calibrator_).__name__} has no "
                    "classes_ after fit: ConformalClassifier needs a classifier "
                    "whose classes_ names the columns of its predict_proba."
                )
            self.classes_ = np.asarray(self.calibrator_.classes_)
            y_codes = self._encode(y)
            for name in ("n_features_in_", "feature_names_in_"):
                if hasattr(self.calibrator_, name):
                    setattr(self, name, getattr(self.calibrator_, name))
            proba, masked = self._probabilities(X)
            sample_weight = check_sample_weight(sample_weight, proba)
        if proba.shape[0] != y_codes.shape[0]:
            raise ValueError(
                "X and y have inconsistent numbers of samples: "
                f"{proba.shape[0]} and {y_codes.shape[0]}."
            )

        self._scoring = self._scoring_params()
        self._randomized = bool(self.randomized) and self.conformity_score != "lac"
        self._conditional = self.conditional
        random_state = check_random_state(self.random_state)
        if self._randomized:
            self._prediction_seed = int(random_state.randint(np.iinfo(np.int32).max))
        scores = np.empty(proba.shape[0], dtype=np.float64)
        for rows in row_blocks(*proba.shape):
            block = self._scores(proba[rows], self._draws(proba[rows]))
            if masked is not None:
                block[masked[rows]] = np.inf
            scores[rows] = _true_label_scores(block, y_codes[rows])
        n_impossible = int(np.count_nonzero(np.isinf(scores) & (sample_weight > 0)))
        if n_impossible:
            warnings.warn(
                f"The true class of {n_impossible} calibration sample(s) is masked "
                "(logit -inf): no set can hold it, so those samples count as never "
                "covered.",
                UserWarning,
                stacklevel=2,
            )
        self.conformity_scores_ = scores
        # Frequency weights against the new sample's weight 1: both divided
        # by a power of two (exact) so that huge weights cannot overflow.
        unit = weight_scale(sample_weight)
        sample_weight = sample_weight / unit
        new = unit_weight(unit)
        if self._conditional == "marginal":
            self._groups = [_SortedScores(scores, sample_weight, new)]
        else:
            self._groups = [
                _SortedScores(scores[y_codes == k], sample_weight[y_codes == k], new)
                for k in range(len(self.classes_))
            ]
        # Warns now about too few samples for the level; quantile_ is read
        # from the stored scores at the current level.
        self._thresholds(self.confidence_level, warn=True)
        return self

    @property
    def quantile_(self):
        if "_groups" not in self.__dict__:
            raise AttributeError(
                f"This {type(self).__name__} instance is not fitted yet: it has "
                "no quantile_."
            )
        return self._thresholds(self.confidence_level, warn=False)

    def _probabilities_of_logits(self, logits):
        proba = np.empty(logits.shape, dtype=np.float64)
        masked = np.zeros(logits.shape, dtype=bool)
        any_masked = False
        for rows in row_blocks(*logits.shape):
            block, block_mask = _masked_softmax(logits[rows])
            proba[rows] = block
            if block_mask is not None:
                masked[rows] = block_mask
                any_masked = True
        return proba, (masked if any_masked else None)

    def _encode(self, y):
        """Column index of each label in ``classes_`` (which need not be sorted)."""
        order = np.argsort(self.classes_, kind="stable")
        ordered = self.classes_[order]
        where = np.minimum(np.searchsorted(ordered, y), len(ordered) - 1)
        unknown = ordered[where] != y
        if np.any(unknown):
            raise ValueError(
                f"y has labels {np.unique(y[unknown]).tolist()[:5]} that are not "
                f"among the calibrator's classes {self.classes_.tolist()}."
            )
        return order[where].astype(np.intp)

    def _thresholds(self, confidence_level, *, warn):
        """The threshold(s) at ``confidence_level``; warns about infinite ones."""
        quantiles = np.array([g.quantile(confidence_level) for g in self._groups])
        if warn and np.isinf(quantiles).any():
            needed = _minimum_samples(confidence_level)
            if self._conditional == "marginal":
                group = self._groups[0]
                # The total weight in units of the new sample's weight 1; an
                # upper bound where that weight was capped (unit_weight).
                bound = "at most " if group.test_weight >= UNIT_WEIGHT_CAP else ""
                where = (
                    f"the calibration samples (total weight {bound}"
                    f"{group.total / group.test_weight:g})"
                )
            else:
                short = self.classes_[np.isinf(quantiles)].tolist()
                where = f"the calibration samples of classes {short[:10]}"
                if len(short) > 10:
                    where += f" (and {len(short) - 10} more)"
            warnings.warn(
                f"Too few calibration samples for confidence_level="
                f"{confidence_level:g}: {where} cannot bound the "
                f"{confidence_level:g} quantile (at least {needed} unit-weight "
                "samples are needed), so the threshold is infinite and those sets "
                "hold every class.",
                UserWarning,
                stacklevel=3,
            )
        return float(quantiles[0]) if self._conditional == "marginal" else quantiles

    # -- prediction ----------------------------------------------------------

    def predict_set(self, X, confidence_level=None):
        """Prediction sets: which labels each sample's set holds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.
        confidence_level : float in (0, 1), default=None
            Coverage target of these sets; None uses the constructor's. The
            threshold comes from the stored calibration scores, so any level
            costs no refit.

        Returns
        -------
        sets : ndarray of shape (n_samples, n_classes) of bool
            ``sets[i, k]`` is True when ``classes_[k]`` is in sample ``i``'s set.
        """
        check_is_fitted(self)
        if confidence_level is None:
            confidence_level = self.confidence_level
        confidence_level = _check_confidence_level(confidence_level)
        thresholds = self._thresholds(
            confidence_level, warn=confidence_level != self.confidence_level
        )
        proba, masked = self._probabilities(X)
        sets = np.empty(proba.shape, dtype=bool)
        for rows in row_blocks(*proba.shape):
            block = self._scores(proba[rows], self._draws(proba[rows]))
            if masked is not None:
                block[masked[rows]] = np.inf
            # A finite score at most the threshold: an infinite threshold (too
            # few samples) still leaves masked classes out.
            sets[rows] = (block <= thresholds) & np.isfinite(block)
        return sets

    def predict_proba(self, X):
        """Class probabilities: the calibrator's, or the softmax of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns ordered as ``classes_``; masked classes get exactly 0.
        """
        check_is_fitted(self)
        if self.calibrator_ is not None:
            return self.calibrator_.predict_proba(X)
        logits = self._check_logits(X, reset=False)
        return masked_softmax(logits, dtype=logits.dtype)

    def predict(self, X):
        """Most probable class (the point prediction beside the set).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        check_is_fitted(self)
        if self.calibrator_ is not None:
            return self.calibrator_.predict(X)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    # -- persistence -----------------------------------------------------------

    def __getstate__(self):
        # The calibration scores per group as plain arrays, so that skops
        # saves them as data (it would need to trust a private class).
        # A copy: object.__getstate__ may return the instance's own __dict__.
        state = dict(super().__getstate__())
        groups = state.pop("_groups", None)
        if groups is not None:
            state["_group_scores"] = [g.scores for g in groups]
            state["_group_cum_weights"] = [g.cum_weights for g in groups]
            state["_test_weight"] = groups[0].test_weight
            # The threshold at the saved level, checked on loading.
            state["quantile_"] = self.quantile_
        return state

    def __setstate__(self, state):
        state = dict(state)
        groups = state.pop("_groups", None)
        if groups is not None:  # a pickle of an earlier version
            state["_group_scores"] = [g.scores for g in groups]
            state["_group_cum_weights"] = [g.cum_weights for g in groups]
        scores = state.pop("_group_scores", None)
        cum_weights = state.pop("_group_cum_weights", None)
        test_weight = state.pop("_test_weight", 1.0)  # files before issue 25
        saved_quantile = state.pop("quantile_", None)
        check_state_parameters(type(self), state)
        super().__setstate__(state)
        # Any fitted attribute (classes_ deleted or not) means a fitted
        # state, checked in full; an unfitted one holds none.
        if is_fitted_state(state) or scores is not None or saved_quantile is not None:
            self._groups = self._checked_groups(scores, cum_weights, test_weight)
            self._check_fitted_state()
            # The thresholds follow from the stored scores: one edited apart
            # from them is refused rather than shown.
            if saved_quantile is not None and not np.array_equal(
                np.asarray(saved_quantile), np.asarray(self.quantile_)
            ):
                fail_state(
                    self,
                    "quantile_",
                    "must be the quantile of the stored calibration scores",
                )

    def _checked_groups(self, scores, cum_weights, test_weight):
        """The stored calibration groups, or a ValueError naming what is wrong."""
        if (
            isinstance(test_weight, (bool, np.bool_))
            or not isinstance(test_weight, Real)
            or not (math.isfinite(test_weight) and test_weight > 0)
        ):
            fail_state(
                self, "_test_weight", f"must be a number > 0, got {test_weight!r}"
            )
        name = "_group_scores"
        if not isinstance(scores, list) or not isinstance(cum_weights, list):
            fail_state(self, name, "must be lists of arrays, one per group")
        if len(scores) != len(cum_weights) or not scores:
            fail_state(self, name, "must pair each group with its cumulative weights")
        groups = []
        for k, (s, w) in enumerate(zip(scores, cum_weights, strict=True)):
            s = check_state_array(self, f"{name}[{k}]", value=s, ndim=1, numeric=True)
            w = check_state_array(
                self,
                f"_group_cum_weights[{k}]",
                value=w,
                shape=s.shape,
                finite=True,
                low=0.0,
            )
            # Sorted scores (inf for a masked true class last), rising weights:
            # a quantile read by searchsorted relies on both.
            if np.isnan(s).any() or np.any(np.diff(s) < 0):
                fail_state(self, f"{name}[{k}]", "must be sorted, without NaN")
            if np.any(np.diff(w) < 0):
                fail_state(self, f"_group_cum_weights[{k}]", "must be non-decreasing")
            groups.append(_SortedScores.from_sorted(s, w, float(test_weight)))
        return groups

    def _check_groups_against_scores(self, n_classes):
        """The groups hold exactly the conformity scores, within the score's range."""
        scores = self.conformity_scores_
        grouped = np.sort(np.concatenate([g.scores for g in self._groups]))
        if grouped.shape != scores.shape or not np.array_equal(
            grouped, np.sort(scores)
        ):
            fail_state(
                self,
                "_group_scores",
                "must hold exactly the calibration scores of conformity_scores_",
            )
        scoring = self._scoring
        name = scoring["conformity_score"]
        high = {
            "lac": 1.0,
            "aps": 1.0,
            "raps": 1.0
            + scoring["raps_penalty"] * max(n_classes - scoring["raps_k_reg"], 0),
            "saps": 1.0 + scoring["saps_weight"] * (n_classes - 1),
            "top_k": float(n_classes),
        }[name]
        finite = scores[np.isfinite(scores)]
        slack = 1e-9 * high
        if finite.size and (finite.min() < -slack or finite.max() > high + slack):
            fail_state(
                self,
                "conformity_scores_",
                f"must lie in [0, {high:g}] (or be inf) for the {name!r} score of "
                f"{n_classes} classes, got [{finite.min():.6g}, {finite.max():.6g}]",
            )
        if name == "top_k" and not self._randomized and finite.size:
            if not np.array_equal(finite, np.round(finite)):
                fail_state(
                    self,
                    "conformity_scores_",
                    "must be whole ranks for the non-randomized 'top_k' score",
                )
        if np.isneginf(scores).any():
            fail_state(self, "conformity_scores_", "contains -inf")

    def _check_fitted_state(self):
        self._validate_params()
        n_classes = check_state_classes(self)
        if hasattr(self, "n_features_in_"):  # a calibrator may not record it
            check_state_int(self, "n_features_in_", low=1)
        conditional = get_state(self, "_conditional")
        n_groups = {"marginal": 1, "class": n_classes}.get(conditional)
        if n_groups is None:
            fail_state(
                self,
                "_conditional",
                f"must be 'marginal' or 'class', got {conditional!r}",
            )
        if len(self._groups) != n_groups:
            fail_state(
                self,
                "_group_scores",
                f"must hold {n_groups} group(s) for conditional={conditional!r}, "
                f"got {len(self._groups)}",
            )
        scoring = get_state(self, "_scoring")
        if not isinstance(scoring, dict) or set(scoring) != set(self._scoring_params()):
            fail_state(self, "_scoring", "must hold the score function's parameters")
        if scoring["conformity_score"] not in CONFORMITY_SCORES:
            fail_state(
                self, "_scoring", f"names no score: {scoring['conformity_score']!r}"
            )
        for key in ("raps_penalty", "raps_k_reg", "saps_weight"):
            value = scoring[key]
            if (
                isinstance(value, bool)
                or not isinstance(value, Real)
                or not (math.isfinite(value) and value >= 0)
            ):
                fail_state(
                    self, "_scoring", f"{key} must be a number >= 0, got {value!r}"
                )
        randomized = get_state(self, "_randomized")
        if not isinstance(randomized, (bool, np.bool_)):
            fail_state(self, "_randomized", f"must be a bool, got {randomized!r}")
        if randomized:
            check_state_int(self, "_prediction_seed")
        check_state_array(self, "conformity_scores_", ndim=1, numeric=True)
        if np.isnan(self.conformity_scores_).any():
            fail_state(self, "conformity_scores_", "contains NaN")
        self._check_groups_against_scores(n_classes)
        if self.calibrator_ is not None:
            classes = getattr(self.calibrator_, "classes_", None)
            if classes is None or not np.array_equal(
                np.asarray(classes), self.classes_
            ):
                fail_state(
                    self, "calibrator_", "must be fitted on the classes in classes_"
                )

    def __sklearn_tags__(self):
        tags = calibrator_input_tags(super().__sklearn_tags__(), self.calibrator)
        if self.calibrator is None:
            tags.input_tags.two_d_array = True
        return tags


# --- a report for the command line ----------------------------------------------


def conformal_report(
    y_true,
    y_prob,
    *,
    conformity_scores=("lac", "aps", "raps"),
    confidence_levels=(0.9, 0.95),
    n_splits=20,
    calibration_size=0.5,
    randomized=False,
    random_state=0,
    labels=None,
    as_frame=True,
):
    """Coverage and set size of conformal sets, and AURC, for several models.

    The probabilities of each model on one labelled set are split at random,
    ``n_splits`` times, into a calibration part and an evaluation part: each
    score function is calibrated on the first and its sets are measured on
    the second, and the figures are averaged over the splits (the protocol
    of the conformal-prediction papers). The area under the risk-coverage
    curve of each model (on all samples) completes the row.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes), or mapping
        Probabilities of one model, or a mapping from a model's name to its
        probabilities (for example the test probabilities of every method of
        a calibration report); the mapping's order is the row order.
    conformity_scores : sequence of str, default=("lac", "aps", "raps")
        Score functions of :class:`ConformalClassifier`, with its default
        parameters.
    confidence_levels : sequence of float, default=(0.9, 0.95)
        Coverage targets ``1 - alpha``.
    n_splits : int, default=20
        Number of random calibration / evaluation splits.
    calibration_size : float in (0, 1), default=0.5
        Fraction of the samples used for calibration in each split.
    randomized : bool, default=False
        Randomised scores (see :class:`ConformalClassifier`), with fresh
        draws in every split.
    random_state : int, RandomState instance or None, default=0
        Seeds the splits (and the draws of randomised scores).
    labels : array-like of shape (n_classes,), default=None
        The class of each probability column, as in the metrics.
    as_frame : bool, default=True
        Return a :class:`pandas.DataFrame`; otherwise a list of dicts.

    Returns
    -------
    report : pandas.DataFrame or list of dict
        One row per (model, score, confidence level) with columns
        ``model``, ``conformity_score``, ``confidence_level``, ``coverage``
        (mean over splits), ``coverage_std`` (its standard deviation over
        splits), ``mean_set_size``, ``empty_set_rate``, and the model's
        ``aurc`` and ``excess_aurc`` (the same on each of its rows).

    See Also
    --------
    ConformalClassifier : The sets measured here.
    sklearn_calib.selective.aurc : The area under the risk-coverage curve.
    sklearn_calib.metrics.calibration_report : The calibration metrics.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.conformal import conformal_report
    >>> from sklearn_calib.datasets import load_logits
    >>> data = load_logits("c10_densenet40_guo")
    >>> logits = data.logits_test - data.logits_test.max(1, keepdims=True)
    >>> proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    >>> report = conformal_report(data.y_test, {"raw": proba}, n_splits=5,
    ...                           conformity_scores=["lac"],
    ...                           confidence_levels=[0.9])
    >>> list(report.columns)[:4]
    ['model', 'conformity_score', 'confidence_level', 'coverage']
    >>> bool(abs(report["coverage"].iloc[0] - 0.9) < 0.02)
    True
    """
    from collections.abc import Mapping

    from .metrics._selective import aurc_from_statistics, selective_statistics
    from .utils._validation import check_metric_inputs

    scores_chosen = (
        [conformity_scores]
        if isinstance(conformity_scores, str)
        else list(conformity_scores)
    )
    for name in scores_chosen:
        if name not in CONFORMITY_SCORES:
            raise ValueError(
                f"Unknown conformity score {name!r}; choose from {CONFORMITY_SCORES}."
            )
    if not scores_chosen:
        raise ValueError("conformity_scores is empty; name at least one.")
    # One level may come as a number, a 0-d array or a string (refused by
    # name, not read character by character).
    single = isinstance(confidence_levels, (Real, str)) or (
        isinstance(confidence_levels, np.ndarray) and confidence_levels.ndim == 0
    )
    levels = [
        _check_confidence_level(c)
        for c in ([confidence_levels] if single else confidence_levels)
    ]
    if not levels:
        raise ValueError("confidence_levels is empty; give at least one.")
    if isinstance(n_splits, bool) or not isinstance(n_splits, Integral) or n_splits < 1:
        raise ValueError(f"n_splits must be a positive integer, got {n_splits!r}.")
    if (
        isinstance(calibration_size, bool)
        or not isinstance(calibration_size, Real)
        or not 0 < calibration_size < 1
    ):
        raise ValueError(
            f"calibration_size must be a float in (0, 1), got {calibration_size!r}."
        )
    is_mapping = isinstance(y_prob, Mapping)
    models = dict(y_prob) if is_mapping else {"model": y_prob}
    if not models:
        raise ValueError("y_prob is an empty mapping; give at least one model.")

    rows = []
    for model, proba in models.items():
        try:
            y_codes, proba, _, _ = check_metric_inputs(y_true, proba, labels=labels)
        except ValueError as exc:
            if not is_mapping:
                raise
            raise ValueError(f"y_prob[{model!r}]: {exc}") from exc
        n_samples = proba.shape[0]
        n_cal = int(round(calibration_size * n_samples))
        if n_cal < 1 or n_cal >= n_samples:
            raise ValueError(
                f"calibration_size={calibration_size} leaves no calibration or no "
                f"evaluation sample among {n_samples}."
            )
        short = [level for level in levels if n_cal < _minimum_samples(level)]
        if short:
            warnings.warn(
                f"Too few calibration samples for confidence_level={short[0]:g}: "
                f"{n_cal} per split cannot bound the quantile (at least "
                f"{_minimum_samples(short[0])} are needed), so the threshold is "
                "infinite and every set holds every class (coverage 1).",
                UserWarning,
                stacklevel=2,
            )
        proba = np.asarray(proba, dtype=np.float64)
        stats = selective_statistics(y_codes, proba, None, None)
        area, excess = aurc_from_statistics(stats)
        rng = check_random_state(random_state)
        splits = [rng.permutation(n_samples) for _ in range(n_splits)]
        # One draw per sample and split, shared by the score functions.
        draws = [rng.uniform(size=n_samples) for _ in splits] if randomized else None
        for name in scores_chosen:
            scoring = ConformalClassifier(conformity_score=name)._scoring_params()
            drawn = randomized and name != "lac"
            fixed = None if drawn else _score_matrix(proba, **scoring)
            results = {level: ([], [], []) for level in levels}
            for index, perm in enumerate(splits):
                scores = (
                    _score_matrix(proba, u=draws[index], **scoring) if drawn else fixed
                )
                true_scores = _true_label_scores(scores, y_codes)
                cal, held = perm[:n_cal], perm[n_cal:]
                ranked = _SortedScores(true_scores[cal], np.ones(n_cal))
                for level in levels:
                    sets = scores[held] <= ranked.quantile(level)
                    sizes = sets.sum(axis=1)
                    coverage, size, empty = results[level]
                    coverage.append(sets[np.arange(len(held)), y_codes[held]].mean())
                    size.append(sizes.mean())
                    empty.append(np.mean(sizes == 0))
            for level in levels:
                coverage, size, empty = results[level]
                rows.append(
                    {
                        "model": model,
                        "conformity_score": name,
                        "confidence_level": level,
                        "coverage": float(np.mean(coverage)),
                        "coverage_std": float(np.std(coverage)),
                        "mean_set_size": float(np.mean(size)),
                        "empty_set_rate": float(np.mean(empty)),
                        "aurc": area,
                        "excess_aurc": excess,
                    }
                )
    if not as_frame:
        return rows
    import pandas as pd

    return pd.DataFrame(rows)


# --- conformal risk control -----------------------------------------------------
#
# Conformal risk control for prediction sets (Angelopoulos et al., ICLR 2024).
#
# The sets are those of :class:`~sklearn_calib.conformal.ConformalClassifier`:
# a label enters the set of a sample when its conformity score is at most a
# threshold ``lambda``, so the sets grow with ``lambda``. A loss ``L(C, y)`` in
# ``[0, B]`` that shrinks as the set ``C`` grows is controlled in expectation:
#
#     lambda_hat = inf { lambda : n / (n + 1) * R_n(lambda) + B / (n + 1) <= alpha }
#
# with ``R_n`` the mean loss of the ``n`` calibration samples; then ``E[L(C(X),
# Y)] <= alpha`` for a new exchangeable sample (Theorem 1 of the paper).
#
# The loss is a cost matrix: ``L(C, y) = min_{k in C} cost[y, k]``, the cost
# of the best label the set offers, with ``cost[y, y] = 0`` (a set holding the
# truth costs nothing) and the empty set costing the row's maximum. A
# class-weighted miscoverage ``w_y 1{y not in C}`` is the matrix with ``w_y``
# off the diagonal of row ``y``; plain miscoverage (all ones) gives back the
# split-conformal quantile.


def _crc_threshold(scores, y_codes, cost, risk):
    """The conformal-risk-control threshold of a cost-matrix loss.

    Parameters
    ----------
    scores : ndarray of shape (n, n_classes)
        Conformity score of every (sample, label); ``inf`` never enters a set.
    y_codes : ndarray of shape (n,)
        Column of each true label.
    cost : ndarray of shape (n_classes, n_classes)
        ``cost[y, k]`` >= 0, zero on the diagonal.
    risk : float
        Target expected loss ``alpha``.

    Returns
    -------
    threshold : float
        ``lambda_hat``; ``inf`` when even full sets cannot certify ``risk``
        (fewer than ``B / risk - 1`` samples), ``-inf`` when empty sets do.
    calibration_risk : float
        The mean calibration loss at ``threshold``.
    """
    n, n_classes = scores.shape
    bound = float(cost.max())
    start = np.empty(n)
    points, drops = [], []
    # Block by block, keeping only the entries where a sample's loss drops:
    # the loss is a step function of the threshold that changes only there,
    # so the first threshold that certifies the risk is one of them. The
    # whole (n, K) temporaries took 3.1 GB and 12 s for 2000 x 10,000.
    for block in row_blocks(n, n_classes):
        rows = cost[y_codes[block]]  # cost of each label for each sample
        order = np.argsort(scores[block], axis=1, kind="stable")
        ranked_scores = np.take_along_axis(scores[block], order, axis=1)
        ranked_cost = np.take_along_axis(rows, order, axis=1)
        first = rows.max(axis=1)
        start[block] = first
        running = np.minimum.accumulate(ranked_cost, axis=1)
        previous = np.concatenate([first[:, None], running[:, :-1]], axis=1)
        drop = previous - running
        keep = (drop > 0) & np.isfinite(ranked_scores)
        points.append(ranked_scores[keep])
        drops.append(drop[keep])
    points, drops = np.concatenate(points), np.concatenate(drops)
    by_score = np.argsort(points, kind="stable")
    points, drops = points[by_score], np.cumsum(drops[by_score])
    # the total loss once every entry up to each distinct score is in
    ends = np.searchsorted(points, points, side="right") - 1
    total = start.sum() - drops[ends]
    budget = (n + 1) * risk - bound
    if start.sum() <= budget:
        return -math.inf, float(start.mean())
    # The slack covers the rounding of the sums of up to n + 1 costs of at
    # most `bound` each: relative to them, so that costs in any unit give the
    # same threshold (an absolute 1e-12 let costs of order 1e-14 certify sets
    # whose calibration loss was nearly twice the target).
    ok = np.flatnonzero(total <= budget + 1e-12 * (n + 1) * bound)
    if not ok.size:
        return math.inf, float((total[-1] if total.size else start.sum()) / n)
    return float(points[ok[0]]), float(total[ok[0]] / n)


class ConformalRiskClassifier(ClassifierMixin, BaseEstimator):
    """Prediction sets that control the expected value of a set loss.

    Conformal risk control [1]_ on the sets of :class:`ConformalClassifier`:
    fitted on a calibration split of ``n`` samples, the sets satisfy
    ``E[L(C(X), Y)] <= risk`` for a new exchangeable sample, for a loss ``L``
    in ``[0, B]`` that shrinks as the set grows: a miscoverage weighted by
    class (missing a rare disease costs more than missing a cold) or a cost
    matrix (the cost of the best label the set offers).

    Parameters
    ----------
    calibrator : estimator with ``fit`` and ``predict_proba``, default=None
        As in :class:`ConformalClassifier`.
    risk : float > 0, default=0.1
        Target expected loss ``alpha`` (in the loss's units).
    miss_cost : array-like of shape (n_classes,) or dict, default=None
        Loss ``miss_cost[y]`` when the set misses the true class ``y``;
        None with ``cost_matrix=None`` is plain miscoverage (all ones). A dict
        maps class labels to weights (missing classes weigh 1).
    cost_matrix : array-like of shape (n_classes, n_classes), default=None
        ``cost_matrix[y, k]``: the cost of answering ``k`` when the truth is
        ``y`` (non-negative, zero on the diagonal; rows and columns follow
        ``classes_``). The loss of a set is its cheapest label's cost; the
        empty set costs the row's maximum. Exclusive with ``miss_cost``.
    conformity_score : {"lac", "aps", "raps", "saps", "top_k"}, default="lac"
        The score that orders the labels into sets (deterministic, so that
        the sets grow with the threshold).
    classes : array-like of shape (n_classes,), default=None
        With ``calibrator=None``, the class of each logit column.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels, the columns of :meth:`predict_set`.
    conformal_ : ConformalClassifier
        The fitted classifier whose scores make the sets.
    cost_ : ndarray of shape (n_classes, n_classes)
        The loss as a cost matrix.
    loss_bound_ : float
        ``B``, the largest loss.
    threshold_ : float
        ``lambda_hat``; ``inf`` (full sets) when too few samples.
    calibration_risk_ : float
        Mean calibration loss at ``threshold_``.
    n_features_in_ : int
        Number of columns of ``X``.

    See Also
    --------
    ConformalClassifier : Sets with a coverage guarantee.

    Notes
    -----
    The guarantee needs exchangeable calibration and test samples and
    probabilities that do not depend on the calibration labels (see
    :class:`ConformalClassifier`). It bounds the expected loss over the
    calibration draw and the new sample together, unlike the high-probability
    guarantees of :class:`~sklearn_calib.selective.SelectiveClassifier`. At
    least ``B / risk - 1`` samples are needed for a finite threshold.
    ``fit`` takes no ``sample_weight``.

    References
    ----------
    .. [1] A. N. Angelopoulos, S. Bates, A. Fisch, L. Lei and T. Schuster,
       "Conformal Risk Control", ICLR 2024.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.conformal import ConformalRiskClassifier
    >>> from sklearn_calib.datasets import load_logits
    >>> data = load_logits("c10_densenet40_guo")
    >>> weight = np.ones(10)
    >>> weight[3] = 5.0  # missing a cat costs five times as much
    >>> clf = ConformalRiskClassifier(risk=0.1, miss_cost=weight)
    >>> clf = clf.fit(data.logits_val, data.y_val)
    >>> sets = clf.predict_set(data.logits_test)
    >>> missed = ~sets[np.arange(len(sets)), data.y_test]
    >>> bool((weight[data.y_test] * missed).mean() <= 0.11)
    True
    """

    _parameter_constraints: dict = {
        "calibrator": [HasMethods(["fit", "predict_proba"]), None],
        "risk": [Interval(Real, 0, None, closed="neither")],
        "miss_cost": ["array-like", dict, None],
        "cost_matrix": ["array-like", None],
        "conformity_score": [StrOptions(set(CONFORMITY_SCORES))],
        "classes": ["array-like", None],
    }

    def __init__(
        self,
        calibrator=None,
        *,
        risk=0.1,
        miss_cost=None,
        cost_matrix=None,
        conformity_score="lac",
        classes=None,
    ):
        self.calibrator = calibrator
        self.risk = risk
        self.miss_cost = miss_cost
        self.cost_matrix = cost_matrix
        self.conformity_score = conformity_score
        self.classes = classes

    def _cost(self, n_classes):
        if self.miss_cost is not None and self.cost_matrix is not None:
            raise ValueError("Set miss_cost or cost_matrix, not both.")
        if self.cost_matrix is not None:
            cost = np.asarray(self.cost_matrix, dtype=np.float64)
            if cost.shape != (n_classes, n_classes):
                raise ValueError(
                    f"cost_matrix must have shape ({n_classes}, {n_classes}), one "
                    f"row and column per class; got {cost.shape}."
                )
            if not np.all(np.isfinite(cost)) or np.any(cost < 0):
                raise ValueError("cost_matrix must hold finite non-negative costs.")
            if np.any(np.diag(cost) != 0):
                raise ValueError(
                    "cost_matrix must be zero on the diagonal: a set holding the "
                    "true class costs nothing."
                )
        else:
            weight = np.ones(n_classes)
            if isinstance(self.miss_cost, dict):
                for label, value in self.miss_cost.items():
                    where = np.flatnonzero(self.classes_ == label)
                    if not where.size:
                        raise ValueError(
                            f"miss_cost names {label!r}, which is not a class "
                            f"({self.classes_.tolist()[:10]})."
                        )
                    weight[where] = value
            elif self.miss_cost is not None:
                weight = np.asarray(self.miss_cost, dtype=np.float64)
                if weight.shape != (n_classes,):
                    raise ValueError(
                        f"miss_cost must hold one cost per class ({n_classes}); "
                        f"got shape {weight.shape}."
                    )
            if not np.all(np.isfinite(weight)) or np.any(weight < 0):
                raise ValueError("miss_cost must hold finite non-negative costs.")
            cost = np.repeat(weight[:, None], n_classes, axis=1)
            np.fill_diagonal(cost, 0.0)
        if not cost.max() > 0:
            raise ValueError("The loss is zero everywhere; nothing to control.")
        return cost

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Fit the conformal scores (and the calibrator) and the threshold.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits of the calibration split (what the calibrator takes).
        y : array-like of shape (n_samples,)
            True labels.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        if y is None:
            # before the inner ConformalClassifier, whose message names itself
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None."
            )
        conformal = ConformalClassifier(
            self.calibrator,
            conformity_score=self.conformity_score,
            classes=self.classes,
        )
        with warnings.catch_warnings():
            # its quantile at its default level is not used; the count of
            # samples this loss needs is checked below
            warnings.filterwarnings("ignore", "Too few calibration samples")
            conformal.fit(X, y)
        self.conformal_ = conformal
        self.classes_ = conformal.classes_
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(conformal, name):
                setattr(self, name, getattr(conformal, name))
        self.cost_ = self._cost(len(self.classes_))
        self.loss_bound_ = float(self.cost_.max())
        y = np.asarray(to_numpy(y))
        y_codes = conformal._encode(y.ravel())
        scores = self._set_scores(X)
        self.threshold_, self.calibration_risk_ = _crc_threshold(
            scores, y_codes, self.cost_, float(self.risk)
        )
        if self.threshold_ == math.inf:
            needed = math.ceil(self.loss_bound_ / self.risk - 1)
            warnings.warn(
                f"Too few calibration samples for risk={self.risk:g} with a loss "
                f"bounded by {self.loss_bound_:g}: {len(y_codes)} samples cannot "
                f"certify it (at least {needed} are needed), so every set holds "
                "every class.",
                UserWarning,
                stacklevel=2,
            )
        return self

    def _set_scores(self, X):
        proba, masked = self.conformal_._probabilities(X)
        scores = self.conformal_._scores(proba, None)
        if masked is not None:
            scores[masked] = np.inf
        return scores

    def predict_set(self, X):
        """Prediction sets: which labels each sample's set holds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        sets : ndarray of shape (n_samples, n_classes) of bool
        """
        check_is_fitted(self)
        scores = self._set_scores(X)
        if self.threshold_ == math.inf:
            return np.isfinite(scores)
        return scores <= self.threshold_

    def predict_proba(self, X):
        """Class probabilities: the calibrator's, or the softmax of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self.conformal_.predict_proba(X)

    def predict(self, X):
        """Most probable class (the point prediction beside the set).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        return self.conformal_.predict(X)

    def __sklearn_tags__(self):
        return calibrator_input_tags(super().__sklearn_tags__(), self.calibrator)
