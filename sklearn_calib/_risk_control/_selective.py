"""Selective classification with a certified risk or a certified coverage.

The classifier predicts the most probable class and accepts a sample when its
confidence score reaches a threshold ``t``; otherwise it abstains. Fitted on
``n`` certification samples, it chooses ``t`` by Learn-then-Test (Angelopoulos,
Bates, Candes, Jordan and Lei, 2021): every candidate threshold is a
hypothesis "the error rate among accepted samples exceeds ``risk``", tested
with the errors among the calibration samples it accepts, and a family-wise
error control keeps the chance of certifying any false hypothesis at most
``delta = 1 - confidence_level``.

Candidate thresholds are calibration scores, ordered by decreasing
confidence: the score of the ``m``-th most confident sample for ``m`` on a
grid from ``m_min`` to ``n``. A threshold that accepts ``m`` samples with no
error has the p-value ``(1 - risk) ** m``, so none below ``m_min = ceil(log
delta / log(1 - risk))`` could ever be certified: the grid starts there,
which depends on ``risk`` and ``delta`` only. Fixed-sequence testing walks the
grid from the most confident threshold down and stops at the first it
cannot certify; the chosen threshold is the last certified one (the largest
coverage). Bonferroni and Holm test the whole grid and take the certified
threshold of largest coverage; ``"sgr"`` is the binary search of Geifman and
El-Yaniv (2017) over every rank, each of its ``ceil(log2 n)`` steps tested at
``delta / ceil(log2 n)``.

With ``control="coverage"`` the loss is abstention, which only grows with the
threshold: the threshold is the largest calibration score ``s_(k)`` (``k``-th
smallest) whose abstention rate is certified at most ``1 - coverage``, that
is ``P(Bin(n, 1 - coverage) <= #{s < s_(k)}) <= delta``, the exact quantile
bound of the order statistics.
"""

import math
import warnings
from numbers import Integral, Real

import numpy as np

from ..utils._compat import Interval, StrOptions, _fit_context, check_is_fitted
from ._bounds import BOUNDS, control_error, risk_pvalue, risk_upper_bound
from ._common import DecisionEstimator

SCORES = ("max_proba", "margin")
ERROR_CONTROLS = ("fixed_sequence", "bonferroni", "bonferroni_holm", "sgr")


def minimum_accepted(risk, confidence_level):
    """Fewest accepted samples whose risk can be certified (all correct)."""
    delta = 1.0 - confidence_level
    return max(1, math.ceil(math.log(delta) / math.log1p(-risk) - 1e-12))


def confidence_scores(proba, score):
    """Confidence of every sample's most probable class (higher: accept)."""
    if callable(score):
        values = np.asarray(score(proba), dtype=np.float64)
        if values.shape != (proba.shape[0],):
            raise ValueError(
                f"score(proba) must return one value per sample, shape "
                f"({proba.shape[0]},); got shape {values.shape}."
            )
        if not np.all(np.isfinite(values)):
            raise ValueError("score(proba) returned NaN or infinite values.")
        return values
    if score == "max_proba":
        return proba.max(axis=1)
    top2 = np.partition(proba, proba.shape[1] - 2, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def tie_ends(ranked):
    """For each position of rows sorted by decreasing score, how many scores
    of its row are at least as high (the samples a threshold there accepts)."""
    n = ranked.shape[-1]
    last = np.ones(ranked.shape, dtype=bool)
    last[..., :-1] = ranked[..., :-1] != ranked[..., 1:]
    ends = np.where(last, np.arange(1, n + 1), n)
    return np.minimum.accumulate(ends[..., ::-1], axis=-1)[..., ::-1]


def rank_grid(n, risk, confidence_level, n_thresholds):
    """Candidate numbers of accepted samples, fixed before seeing the labels."""
    start = minimum_accepted(risk, confidence_level)
    if start > n:
        return np.zeros(0, dtype=np.intp)
    # More points than ranks give every rank (spacing below 1): the same grid,
    # without allocating n_thresholds floats (10**9 of them asked for 8 GB).
    size = min(n_thresholds, n - start + 1)
    return np.unique(np.linspace(start, n, size).round().astype(np.intp))


def certify_risk_sorted(
    ranked,
    cum_errors,
    *,
    risk,
    confidence_level,
    bound="binomial",
    error_control="fixed_sequence",
    n_thresholds=100,
):
    """Certified numbers of accepted samples, for rows sorted by confidence.

    Parameters
    ----------
    ranked : ndarray of shape (n_rows, n)
        Scores of each row (one certification sample each: many random
        splits at once in the tests), sorted in decreasing order.
    cum_errors : ndarray of shape (n_rows, n)
        Cumulative count of errors in that order.

    Returns
    -------
    n_accepted : ndarray of shape (n_rows,) of int
        Samples accepted at the certified threshold (0: none certified); the
        threshold is ``ranked[row, n_accepted - 1]``.
    counts, losses, p_values : ndarray of shape (n_rows, n_tested)
        The candidates tested, by decreasing threshold.
    """
    delta = 1.0 - confidence_level
    n_rows, n = ranked.shape
    ends = tie_ends(ranked)
    rows = np.arange(n_rows)
    if error_control == "sgr":
        # Algorithm 1 of Geifman and El-Yaniv: the threshold is the z-th
        # smallest score (n - z + 1 samples accepted, more with ties); a
        # certified step lowers it (z_max = z), a failed one raises it.
        steps = max(1, math.ceil(math.log2(n)))
        z_min = np.zeros(n_rows, dtype=np.intp)
        z_max = np.full(n_rows, n, dtype=np.intp)
        best = np.zeros(n_rows, dtype=np.intp)
        counts, losses, p_values = [], [], []
        for _ in range(steps):
            z = (z_min + z_max + 1) // 2
            m = ends[rows, n - z]
            k = cum_errors[rows, m - 1]
            p = risk_pvalue(k, m, risk, bound)
            passed = p <= delta / steps
            best = np.where(passed, np.maximum(best, m), best)
            z_max = np.where(passed, z, z_max)
            z_min = np.where(passed, z_min, z)
            counts.append(m)
            losses.append(k)
            p_values.append(p)
        return best, *(np.stack(a, axis=-1) for a in (counts, losses, p_values))
    grid = rank_grid(n, risk, confidence_level, n_thresholds)
    if not grid.size:
        empty = np.zeros((n_rows, 0))
        return np.zeros(n_rows, dtype=np.intp), empty.astype(np.intp), empty, empty
    counts = ends[:, grid - 1]
    losses = np.take_along_axis(cum_errors, counts - 1, axis=1)
    p_values = risk_pvalue(losses, counts, risk, bound)
    rejected = control_error(p_values, delta, error_control)
    n_accepted = np.where(rejected, counts, 0).max(axis=1)
    return n_accepted, counts, losses, p_values


def certify_coverage(scores, *, coverage, confidence_level, bound="binomial"):
    """The certified number of abstained samples (lowest scores), and its p-value."""
    delta = 1.0 - confidence_level
    ranked = np.sort(scores)
    # abstaining below ranked[j] abstains on the samples strictly below it
    abstained = np.searchsorted(ranked, ranked, side="left")
    p_values = risk_pvalue(abstained, len(scores), 1.0 - coverage, bound)
    passed = np.logical_and.accumulate(p_values <= delta)
    if not passed.any():
        return 0, -math.inf
    j = int(np.flatnonzero(passed)[-1])
    return int(abstained[j]), float(ranked[j])


class SelectiveClassifier(DecisionEstimator):
    """Accept or abstain per sample, with a certified risk among accepted ones.

    Fitted on certification data (logits and labels the model did not train
    on), the classifier chooses a confidence threshold such that, with
    probability at least ``confidence_level`` over the certification sample,
    the error rate among the samples it accepts is at most ``risk``
    (``control="risk"``), or the fraction it accepts is at least
    ``coverage`` (``control="coverage"``). Below the threshold it abstains:
    :meth:`predict` returns ``abstain_label`` and :meth:`accept` False.

    Parameters
    ----------
    calibrator : estimator with ``fit`` and ``predict_proba``, default=None
        Maps ``X`` to the probabilities the score is computed from. None:
        ``X`` holds logits and the probabilities are their softmax. A
        calibrator is cloned and fitted on a random ``calibrator_fraction``
        of the data given to :meth:`fit`, the rest certifying the threshold;
        a :class:`~sklearn.frozen.FrozenEstimator` around a calibrator fitted
        on other data is used as it is, and all the data certifies.
    control : {"risk", "coverage"}, default="risk"
        What is guaranteed: ``"risk"``, the error rate among accepted samples
        is at most ``risk`` (with the largest coverage the data certifies);
        ``"coverage"``, the accepted fraction is at least ``coverage``
        (with the highest such threshold, hence the lowest risk).
    risk : float in (0, 1), default=0.05
        Largest error rate among accepted samples (``control="risk"``).
    coverage : float in (0, 1), default=0.8
        Smallest accepted fraction (``control="coverage"``).
    confidence_level : float in (0, 1), default=0.9
        Probability, over the certification sample, that the guarantee holds
        (``1 - delta``).
    confidence_score : {"max_proba", "margin"} or callable, \
default="max_proba"
        Confidence: the (calibrated) probability of the predicted class, the
        gap between the two largest probabilities, or ``score(proba)``
        returning one finite value per sample (higher: more confident).
    bound : {"binomial", "hoeffding_bentkus"}, default="binomial"
        p-value of each threshold: the exact binomial tail (Clopper-Pearson),
        or Hoeffding-Bentkus (valid for any bounded loss; looser here).
    error_control : {"fixed_sequence", "bonferroni", "bonferroni_holm", \
"sgr"}, default="fixed_sequence"
        How the thresholds are tested together (``control="risk"``): fixed
        sequence from the most confident threshold down, Bonferroni or Holm
        over the grid, or Geifman and El-Yaniv's SGR binary search.
    n_thresholds : int >= 1, default=100
        Size of the grid of candidate thresholds (fewer when scores tie).
    abstain_label : object, default=None
        What :meth:`predict` returns for abstentions; None means ``-1``, which
        needs numeric classes (set it for string labels). Must not be a class.
    calibrator_fraction : float in (0, 1), default=0.5
        Fraction of the data of :meth:`fit` that fits a calibrator that is not
        frozen; ignored otherwise.
    random_state : int, RandomState instance or None, default=None
        Seeds the calibrator / certification split.
    classes : array-like of shape (n_classes,), default=None
        With ``calibrator=None``, the class of each logit column.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    calibrator_ : estimator or None
        The fitted (or frozen) calibrator.
    threshold_ : float
        Samples with a score at least this are accepted; ``inf`` when no
        threshold could be certified (every sample abstains).
    certified_ : bool
        Whether a threshold was certified (always True for coverage).
    risk_upper_bound_ : float
        Upper confidence bound, at ``confidence_level``, of the error rate
        among accepted certification samples at ``threshold_`` (NaN when none
        is accepted). Under ``control="risk"`` it is at most ``risk``; under
        ``control="coverage"`` it is informative only (not corrected for the
        choice of the threshold).
    empirical_risk_ : float
        Error rate among the accepted certification samples (NaN if none).
    coverage_ : float
        Fraction of the certification samples accepted: the estimate of the
        expected coverage.
    n_certification_samples_ : int
        Samples that certified the threshold.
    abstain_label_ : object
        The label of abstentions.
    thresholds_, p_values_ : ndarray
        The candidate thresholds tested, by decreasing confidence, and their
        p-values (``control="risk"``; empty for coverage).
    n_features_in_ : int
        Number of columns of ``X``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of ``X``, when it had string column names.

    See Also
    --------
    sklearn_calib.selective.CertifiedThresholdClassifier : A binary decision
        threshold that guarantees precision, recall, specificity or FPR.
    sklearn_calib.selective.risk_coverage_curve : The trade-off, measured.

    Notes
    -----
    **Guarantee.** ``P(risk among accepted samples <= risk) >= confidence_level``
    over the draw of the certification sample, assuming the certification and
    future samples are exchangeable (i.i.d. from one distribution) and the
    probabilities do not depend on the certification labels (no calibrator,
    a frozen one, or one fitted on its own split). Distribution shift, a
    calibrator refitted on the certification rows, or choosing ``risk`` after
    looking at the result break it. The guarantee is on the expected error
    rate of future accepted samples, not on a particular test batch, whose
    rate fluctuates around it.

    **Weights.** ``fit`` takes no ``sample_weight``: the binomial tail counts
    exchangeable samples, and a weight is not a sample.

    **Masked classes.** With ``calibrator=None`` a ``-inf`` logit has
    probability 0 and is never predicted.

    References
    ----------
    .. [1] A. N. Angelopoulos, S. Bates, E. J. Candes, M. I. Jordan and L. Lei,
       "Learn then Test: Calibrating Predictive Algorithms to Achieve Risk
       Control", 2021.
    .. [2] Y. Geifman and R. El-Yaniv, "Selective Classification for Deep
       Neural Networks", NeurIPS 2017 (SGR).

    Examples
    --------
    >>> from sklearn_calib.datasets import load_logits
    >>> from sklearn_calib.selective import SelectiveClassifier
    >>> data = load_logits("c10_densenet40_guo")
    >>> clf = SelectiveClassifier(risk=0.02, confidence_level=0.9)
    >>> clf = clf.fit(data.logits_val, data.y_val)
    >>> bool(clf.certified_), bool(clf.risk_upper_bound_ <= 0.02)
    (True, True)
    >>> round(clf.coverage_, 3)  # accepted fraction of the certification set
    0.862
    >>> accepted = clf.accept(data.logits_test)
    >>> errors = clf.predict(data.logits_test)[accepted] != data.y_test[accepted]
    >>> round(float(accepted.mean()), 3), round(float(errors.mean()), 4)
    (0.855, 0.0213)

    The guarantee is on the expected error rate of future accepted samples;
    one test batch of 855 accepted images fluctuates around it.
    """

    _parameter_constraints: dict = {
        **DecisionEstimator._parameter_constraints,
        "control": [StrOptions({"risk", "coverage"})],
        "risk": [Interval(Real, 0, 1, closed="neither")],
        "coverage": [Interval(Real, 0, 1, closed="neither")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "confidence_score": [StrOptions(set(SCORES)), callable],
        "bound": [StrOptions(set(BOUNDS))],
        "error_control": [StrOptions(set(ERROR_CONTROLS))],
        "n_thresholds": [Interval(Integral, 1, None, closed="left")],
        "abstain_label": "no_validation",
    }

    def __init__(
        self,
        calibrator=None,
        *,
        control="risk",
        risk=0.05,
        coverage=0.8,
        confidence_level=0.9,
        confidence_score="max_proba",
        bound="binomial",
        error_control="fixed_sequence",
        n_thresholds=100,
        abstain_label=None,
        calibrator_fraction=0.5,
        random_state=None,
        classes=None,
    ):
        self.calibrator = calibrator
        self.control = control
        self.risk = risk
        self.coverage = coverage
        self.confidence_level = confidence_level
        self.confidence_score = confidence_score
        self.bound = bound
        self.error_control = error_control
        self.n_thresholds = n_thresholds
        self.abstain_label = abstain_label
        self.calibrator_fraction = calibrator_fraction
        self.random_state = random_state
        self.classes = classes

    @_fit_context(
        # the calibrator validates its own parameters in its fit
        prefer_skip_nested_validation=False
    )
    def fit(self, X, y):
        """Fit the calibrator (if any) and certify a threshold.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits of the certification data (what the calibrator takes).
        y : array-like of shape (n_samples,)
            True labels.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        proba, y_codes = self._fit_probabilities(X, y)
        self.abstain_label_ = self._resolve_abstain_label()
        errors = proba.argmax(axis=1) != y_codes
        scores = confidence_scores(proba, self.confidence_score)
        n = len(scores)
        self.n_certification_samples_ = n
        if self.control == "risk":
            order = np.argsort(-scores, kind="stable")
            ranked = scores[order]
            n_accepted, counts, _, p_values = certify_risk_sorted(
                ranked[None, :],
                np.cumsum(errors[order])[None, :],
                risk=self.risk,
                confidence_level=self.confidence_level,
                bound=self.bound,
                error_control=self.error_control,
                n_thresholds=self.n_thresholds,
            )
            n_accepted, counts = int(n_accepted[0]), counts[0]
            self.thresholds_ = ranked[counts - 1] if len(counts) else np.zeros(0)
            self.p_values_ = np.asarray(p_values[0], dtype=np.float64)
            self.certified_ = n_accepted > 0
            self.threshold_ = (
                float(ranked[n_accepted - 1]) if self.certified_ else math.inf
            )
            if not self.certified_:
                warnings.warn(
                    f"No threshold can be certified at risk={self.risk:g} with "
                    f"confidence_level={self.confidence_level:g} from {n} "
                    "certification samples: the classifier abstains on every "
                    "sample. At least "
                    f"{minimum_accepted(self.risk, self.confidence_level)} "
                    "accepted samples without an error are needed; raise risk, "
                    "lower confidence_level, or certify on more data.",
                    UserWarning,
                    stacklevel=2,
                )
        else:
            _, self.threshold_ = certify_coverage(
                scores,
                coverage=self.coverage,
                confidence_level=self.confidence_level,
                bound=self.bound,
            )
            self.certified_ = True
            self.thresholds_ = np.zeros(0)
            self.p_values_ = np.zeros(0)
        accepted = scores >= self.threshold_
        n_accepted = int(accepted.sum())
        n_errors = int(errors[accepted].sum())
        self.coverage_ = n_accepted / n
        self.empirical_risk_ = n_errors / n_accepted if n_accepted else math.nan
        self.risk_upper_bound_ = (
            float(
                risk_upper_bound(
                    n_errors, n_accepted, self.confidence_level, self.bound
                )
            )
            if n_accepted
            else math.nan
        )
        return self

    def _resolve_abstain_label(self):
        label = self.abstain_label
        if label is None:
            if self.classes_.dtype.kind not in "iuf":
                raise ValueError(
                    f"The classes {self.classes_.tolist()[:5]} are not numbers, so "
                    "the default abstention label -1 does not fit them: set "
                    "abstain_label (for example abstain_label='abstain')."
                )
            label = -1
        if np.any(self.classes_ == np.asarray(label, dtype=object)):
            raise ValueError(
                f"abstain_label={label!r} is one of the classes; choose a label "
                "that is not a class."
            )
        return label

    def decision_score(self, X):
        """The confidence score of each sample (accepted when >= ``threshold_``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits (what the calibrator takes).

        Returns
        -------
        scores : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        return confidence_scores(self._probabilities(X), self.confidence_score)

    def accept(self, X):
        """Whether each sample is accepted (its prediction is given).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits (what the calibrator takes).

        Returns
        -------
        accepted : ndarray of shape (n_samples,) of bool
        """
        check_is_fitted(self)
        return self.decision_score(X) >= self.threshold_

    def predict(self, X):
        """The most probable class where accepted, ``abstain_label_`` elsewhere.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits (what the calibrator takes).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        proba = self._probabilities(X)
        accepted = confidence_scores(proba, self.confidence_score) >= self.threshold_
        labels = self.classes_[proba.argmax(axis=1)]
        return np.where(
            accepted,
            labels.astype(_label_dtype(labels, self.abstain_label_)),
            self.abstain_label_,
        )


def _label_dtype(labels, abstain_label):
    """A dtype that holds the class labels and the abstention label unchanged.

    Numbers with numbers and strings with strings share numpy's common type;
    any other mix is held as objects: numpy's common type of integers and a
    string is a string, which turned class 0 into '0' (never equal to the
    true label 0), and strings with an integer have none.
    """
    abstain = np.asarray(abstain_label)
    kinds = labels.dtype.kind + abstain.dtype.kind
    if set(kinds) <= set("iuf") or kinds == "UU":
        return np.result_type(labels, abstain)
    return object
