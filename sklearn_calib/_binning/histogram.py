"""Non-parametric calibrators: isotonic regression and histogram binning.

Both map the softmax probabilities of the logits (numpy, scipy and
scikit-learn only; no torch). Two ways to apply a binary map to a
multiclass problem:

- ``"ovr"`` (one-vs-rest): one map per class on ``softmax(z)_k`` against
  ``1[y = k]``, then each row is renormalised to sum to 1.
- ``"top_label"``: one map on the confidence ``max_k softmax(z)_k`` against
  the correctness of the argmax; the other classes are rescaled by
  ``(1 - new) / (1 - old)`` so that the row still sums to 1.

Histogram binning bins the probabilities themselves. Isotonic regression
regresses on their log-odds ``log(p_k / (1 - p_k))``, computed from the logits
(``z_k - logsumexp_{j != k} z_j``): the same order as ``p_k``, but without the
saturation of float64 probabilities, which round to 1.0 once a logit leads the
others by about 36.7 and would then tie samples that the logits still rank.

Calibrated probabilities are floored at ``PROBA_FLOOR`` before the
renormalisation, so that :meth:`transform` (log-probabilities) never returns
``-inf`` for a class with a finite logit. A one-vs-rest row whose calibrated
values are all zero falls back to the uncalibrated softmax row.

Masked classes (``-inf`` logits) keep probability exactly 0. They are left out
of the fit of their class's one-vs-rest map (the model rules them out; they say
nothing about how its other probabilities are calibrated), and a class with no
unmasked calibration sample keeps the identity map (isotonic) or the bin
mid-points (histogram): no data, no correction.
"""

import functools
from numbers import Integral

import numpy as np
from scipy.special import expit
from sklearn.isotonic import IsotonicRegression

from .._chunks.quantiles import EqualMassSelection, digit_bits_for
from ..base import BaseCalibrator
from ..metrics._accumulators import BinnedCalibrationAccumulator
from ..metrics._calibration import (
    BLOCK_ELEMENTS,
    _block_top_label,
    uniform_bin_index,
)
from ..utils._compat import Interval, StrOptions
from ..utils._fitted_state import (
    check_state_array,
    check_state_list,
    fail_state,
)
from ..utils._math import row_blocks, softmax
from ..utils._validation import mask_of

PROBA_FLOOR = 1e-12


def _probabilities(logits):
    return softmax(np.asarray(logits, dtype=np.float64))


def softmax_log_odds(logits):
    """``log(p_k / (1 - p_k))`` of every softmax probability, stably, in float64.

    The log-odds of class ``k`` are ``z_k - logsumexp_{j != k} z_j``. For a
    class below the row maximum ``m``, ``logsumexp_{j != k} z_j = m + log(S -
    e_k)`` with ``e = exp(z - m)`` and ``S = sum(e)``, where ``S - e_k >= 1``
    loses nothing to cancellation. For the maximal class the others' sum is
    taken relative to the runner-up, so the result stays finite whatever the
    gap (the probability rounds to 1.0 in float64 beyond a gap of ~36.7).
    Values are clipped to the finite float64 range.

    Parameters
    ----------
    logits : ndarray of shape (n_samples, n_classes)

    Returns
    -------
    log_odds : ndarray of shape (n_samples, n_classes) of float64
    """
    z = np.asarray(logits, dtype=np.float64)
    rows = np.arange(z.shape[0])
    top = z.argmax(axis=1)
    peak = z[rows, top][:, None]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        shifted = z - peak
        exp = np.exp(shifted)
        out = shifted - np.log(exp.sum(axis=1, keepdims=True) - exp)
        others = z.copy()
        others[rows, top] = -np.inf
        second = others.max(axis=1, keepdims=True)
        rest = np.exp(others - second).sum(axis=1)
        out[rows, top] = (peak - second)[:, 0] - np.log(rest)
    # A row with a single finite logit (masked classes) gives +-inf and NaN
    # where the ranking is still clear: the ends of the float64 range.
    out[np.isnan(out)] = np.inf
    return np.clip(out, -np.finfo(np.float64).max, np.finfo(np.float64).max)


def _top_label_targets(proba, y):
    """Confidence of the predicted class and whether it is correct."""
    predicted = proba.argmax(axis=1)
    confidence = proba[np.arange(proba.shape[0]), predicted]
    return predicted, confidence, (predicted == y).astype(np.float64)


def _binary_problems(proba, y, mode, sample_weight, masked):
    """(scores, 0/1 targets, weights) of each binary map: per class, or the top label.

    ``proba`` may be any order-preserving representation of the probabilities
    (the log-odds for isotonic regression). A class's map is fitted on the rows
    where that class is not masked. Only the ratios of the weights matter: they
    are divided by their maximum, so that their scale (1e-310 or 1e300) changes
    no sum's precision.
    """
    sample_weight = sample_weight / sample_weight.max()
    if mode == "top_label":
        _, scores, targets = _top_label_targets(proba, y)
        return [(scores, targets, sample_weight)]
    problems = []
    for k in range(proba.shape[1]):
        scores, targets = proba[:, k], (y == k).astype(np.float64)
        if masked is not None and masked[:, k].any():
            keep = ~masked[:, k]
            scores, targets = scores[keep], targets[keep]
            problems.append((scores, targets, sample_weight[keep]))
        else:
            problems.append((scores, targets, sample_weight))
    return problems


def _masked_classes(logits):
    """Boolean mask of the ``-inf`` (masked) logits, or None when there are none."""
    masked = np.isneginf(logits)
    return masked if masked.any() else None


def _apply_top_label(proba, new_confidence, masked=None, predicted=None):
    """Set the predicted class to ``new_confidence`` and rescale the others."""
    rows = np.arange(proba.shape[0])
    if predicted is None:
        predicted = proba.argmax(axis=1)
    old = proba[rows, predicted]
    rest = 1.0 - old
    out = proba.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(rest > 0, (1.0 - new_confidence) / rest, 0.0)
    out *= scale[:, None]
    # A row whose other classes were exactly 0 shares the freed mass equally
    # among its other unmasked classes; with none (every other class masked)
    # the row stays one-hot.
    degenerate = rest <= 0
    if np.any(degenerate):
        open_classes = np.ones((int(degenerate.sum()), proba.shape[1]), dtype=bool)
        if masked is not None:
            open_classes &= ~masked[degenerate]
        open_classes[np.arange(open_classes.shape[0]), predicted[degenerate]] = False
        n_open = open_classes.sum(axis=1)
        share = np.where(n_open > 0, 1.0 - new_confidence[degenerate], 0.0)
        out[degenerate] = open_classes * (share / np.maximum(n_open, 1))[:, None]
        new_confidence = new_confidence.copy()
        new_confidence[degenerate] = np.where(
            n_open > 0, new_confidence[degenerate], 1.0
        )
    out[rows, predicted] = new_confidence
    return out


def _finish(calibrated, uncalibrated, masked=None):
    """Floor, fall back for empty rows, renormalise, and return log-probabilities.

    Masked entries (``masked``, ``-inf`` logits) stay exactly 0: log-probability
    ``-inf``.
    """
    calibrated = np.clip(calibrated, 0.0, 1.0)
    if masked is not None:
        calibrated[masked] = 0.0
    empty = calibrated.sum(axis=1) <= 0
    if np.any(empty):
        calibrated[empty] = uncalibrated[empty]
    np.maximum(calibrated, PROBA_FLOOR, out=calibrated)
    if masked is not None:
        calibrated[masked] = 0.0
    calibrated /= calibrated.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):  # log(0) = -inf for masked classes
        return np.log(calibrated)


class IsotonicCalibration(BaseCalibrator):
    """Isotonic regression of the softmax probabilities (Zadrozny & Elkan 2002).

    A non-decreasing step function (linearly interpolated between its
    thresholds, as :class:`sklearn.isotonic.IsotonicRegression` predicts) is
    fitted by the pool adjacent violators algorithm to the 0/1 outcome, either
    per class (one-vs-rest, then rows renormalised) or on the top-label
    confidence. Inputs outside the fitted range are clipped to its ends.

    The maps take the log-odds ``log(p_k / (1 - p_k)) = z_k - logsumexp_{j !=
    k} z_j`` of the probabilities as input, computed stably from the logits.
    They order the samples as the probabilities do, so the isotonic fit is the
    same, but they do not saturate: float64 probabilities round to 1.0 once a
    logit leads the others by about 36.7, which would tie (and pool) samples
    that the logits still rank. For a single score column ``s`` (the logits
    ``(0, s)``) the log-odds of the positive class are ``s`` itself, so the
    map is :class:`~sklearn.isotonic.IsotonicRegression` on the scores, as in
    :class:`~sklearn.calibration.CalibratedClassifierCV` with
    ``method="isotonic"``.

    Isotonic regression is flexible and needs a large calibration set; it may
    change the argmax, through ties of the step function and through the
    renormalisation, so report accuracy beside the calibration metrics.
    Calibrated probabilities are floored at ``1e-12`` so that
    log-probabilities stay finite.

    Parameters
    ----------
    mode : {"ovr", "top_label"}, default="ovr"
        ``"ovr"``: one map per class on ``softmax(z)_k``, rows renormalised
        (a row whose calibrated values are all zero keeps its uncalibrated
        probabilities). ``"top_label"``: one map on the confidence of the
        predicted class; the other classes are rescaled proportionally.

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
    X_thresholds_ : list of ndarray
        Per map (one per class for ``"ovr"``, one for ``"top_label"``), the
        increasing input thresholds of the step function, in log-odds.
    y_thresholds_ : list of ndarray
        The matching calibrated values, non-decreasing in ``[0, 1]``.
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.

    See Also
    --------
    HistogramBinning : Piecewise-constant map on fixed bins.
    sklearn.isotonic.IsotonicRegression : The binary building block.

    Notes
    -----
    Each map is scikit-learn's ``IsotonicRegression(y_min=0, y_max=1,
    out_of_bounds="clip")`` fitted on the (weighted) log-odds of the
    calibration probabilities, so:

    - tied calibration scores are pooled first, their targets averaged with
      their weights, and get one fitted value;
    - between two thresholds the map is linear; scores below the smallest or
      above the largest calibration score take the value at that end;
    - only the thresholds are kept (``X_thresholds_``, ``y_thresholds_``), so
      the fitted calibrator is small and pickles without scikit-learn
      estimators inside.

    In ``"ovr"`` mode a row whose calibrated values are all zero (every
    class's score lies where its map is 0) keeps its uncalibrated
    probabilities instead of becoming undefined.

    Masked classes (``-inf`` logits) keep probability exactly 0; each
    class's map is fitted on the rows where it is not masked, and a class
    masked in every calibration row keeps the identity map.

    References
    ----------
    .. [1] B. Zadrozny and C. Elkan, "Transforming classifier scores into
       accurate multiclass probability estimates", KDD 2002.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import IsotonicCalibration
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=1000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(1000, 3))
    >>> iso = IsotonicCalibration().fit(logits, y)
    >>> iso.predict_proba(logits[:2]).sum(axis=1)
    array([1., 1.])
    >>> accuracy = (iso.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.854 -> 0.861
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "mode": [StrOptions({"ovr", "top_label"})],
    }

    def __init__(self, *, mode="ovr", classes=None):
        self.mode = mode
        self.classes = classes

    def _fit(self, logits, y, sample_weight):
        problems = _binary_problems(
            softmax_log_odds(logits),
            y,
            self.mode,
            sample_weight,
            _masked_classes(logits),
        )
        self.X_thresholds_, self.y_thresholds_ = [], []
        for scores, targets, weights in problems:
            if not np.any(weights > 0):  # masked in every calibration row
                # No data, no correction: the identity on the probability,
                # as a function of the log-odds (interpolated within 1e-4).
                grid = np.linspace(-40.0, 40.0, 801)
                self.X_thresholds_.append(grid)
                self.y_thresholds_.append(expit(grid))
                continue
            iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
            iso.fit(scores, targets, sample_weight=weights)
            self.X_thresholds_.append(iso.X_thresholds_)
            self.y_thresholds_.append(iso.y_thresholds_)

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_maps = 1 if self.mode == "top_label" else len(self.classes_)
        x_list = check_state_list(self, "X_thresholds_", length=n_maps)
        y_list = check_state_list(self, "y_thresholds_", length=n_maps)
        for m, (x, values) in enumerate(zip(x_list, y_list, strict=True)):
            x = check_state_array(
                self, f"X_thresholds_[{m}]", value=x, ndim=1, finite=True
            )
            values = check_state_array(
                self, f"y_thresholds_[{m}]", value=values, ndim=1, low=0.0, high=1.0
            )
            if x.shape[0] < 1 or values.shape != x.shape:
                fail_state(
                    self,
                    f"y_thresholds_[{m}]",
                    f"must hold one value per threshold ({x.shape[0]}, at least "
                    f"1), got shape {values.shape}",
                )
            if np.any(np.diff(x) <= 0):
                fail_state(self, f"X_thresholds_[{m}]", "must be strictly increasing")
            if np.any(np.diff(values) < 0):
                fail_state(self, f"y_thresholds_[{m}]", "must be non-decreasing")

    def _map(self, index, scores):
        x, values = self.X_thresholds_[index], self.y_thresholds_[index]
        if x.shape[0] == 1:  # a single threshold: a constant map
            return np.full_like(scores, values[0])
        return np.interp(scores, x, values)

    def _calibrated_logits(self, logits):
        proba = _probabilities(logits)
        masked = _masked_classes(logits)
        log_odds = softmax_log_odds(logits)
        if self.mode == "top_label":
            # The predicted class is the argmax of the log-odds, as in fit
            # (probabilities that round to the same value would tie).
            predicted, confidence, _ = _top_label_targets(
                log_odds, np.zeros(proba.shape[0])
            )
            calibrated = _apply_top_label(
                proba, self._map(0, confidence), masked, predicted
            )
        else:
            calibrated = np.column_stack(
                [self._map(k, log_odds[:, k]) for k in range(proba.shape[1])]
            )
        return _finish(calibrated, proba, masked)


def _weighted_quantile_edges(scores, weights, n_bins):
    """Inner edges splitting the weighted scores into ``n_bins`` equal masses.

    Edge ``b`` is the smallest score whose cumulative weight reaches
    ``b / n_bins`` of the total (the inverted CDF), so integer weights give
    the same edges as repeated samples.
    """
    order = np.argsort(scores, kind="stable")
    cumulative = np.cumsum(weights[order])
    targets = cumulative[-1] * np.arange(1, n_bins) / n_bins
    positions = np.searchsorted(cumulative, targets * (1 - 1e-12), side="left")
    return scores[order][np.minimum(positions, scores.shape[0] - 1)]


class HistogramBinning(BaseCalibrator):
    """Histogram binning of the softmax probabilities (Zadrozny & Elkan 2001).

    ``[0, 1]`` is split into ``n_bins`` bins (equal width, or equal mass from
    the calibration set's quantiles); a probability falling in a bin is
    replaced by the bin's (weighted) frequency of positives on the
    calibration set. Bins are ``(lo, hi]``, with 0 in the first bin, as in
    :mod:`sklearn_calib.metrics`. **An empty bin keeps its mid-point**
    ``(lo + hi) / 2`` as calibrated value: with no calibration sample to
    estimate a frequency, the bin's centre is the value closest to the scores
    it will receive.

    Binning may change the argmax (ties between bins, renormalisation), so
    report accuracy beside the calibration metrics. Masked classes (``-inf``
    logits) keep probability exactly 0 and are not counted in their class's
    bins.
    Calibrated probabilities are floored at ``1e-12`` so that log-probabilities
    stay finite.

    Parameters
    ----------
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width bins, or bins holding equal calibration mass (edges at
        weighted quantiles of the calibration scores, end bins stretched to
        0 and 1).
    mode : {"ovr", "top_label"}, default="ovr"
        ``"ovr"``: one histogram per class, rows renormalised (a row whose
        calibrated values are all zero keeps its uncalibrated probabilities).
        ``"top_label"``: one histogram of the confidence of the predicted
        class; the other classes are rescaled proportionally.

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
    bin_edges_ : ndarray of shape (n_maps, n_bins + 1)
        Edges of each map's bins (one map per class for ``"ovr"``).
    bin_values_ : ndarray of shape (n_maps, n_bins)
        Calibrated value of each bin.
    bin_counts_ : ndarray of shape (n_maps, n_bins)
        Calibration weight that fell in each bin (the number of samples for
        unit weights); masked
        entries of a class are not counted in its bins.
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.

    See Also
    --------
    IsotonicCalibration : A monotone map with data-driven steps.

    References
    ----------
    .. [1] B. Zadrozny and C. Elkan, "Obtaining calibrated probability
       estimates from decision trees and naive Bayesian classifiers",
       ICML 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import HistogramBinning
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=1000)
    >>> logits = 4.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(1000, 3))
    >>> hb = HistogramBinning(n_bins=10).fit(logits, y)
    >>> hb.bin_values_.shape
    (3, 10)
    >>> accuracy = (hb.predict(logits) == y).mean()
    >>> print(f"accuracy {(logits.argmax(1) == y).mean():.3f} -> {accuracy:.3f}")
    accuracy 0.854 -> 0.858
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        "strategy": [StrOptions({"uniform", "quantile"})],
        "mode": [StrOptions({"ovr", "top_label"})],
    }

    def __init__(self, *, n_bins=15, strategy="uniform", mode="ovr", classes=None):
        self.n_bins = n_bins
        self.strategy = strategy
        self.mode = mode
        self.classes = classes

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_maps = 1 if self.mode == "top_label" else len(self.classes_)
        edges = check_state_array(
            self,
            "bin_edges_",
            shape=(n_maps, self.n_bins + 1),
            low=0.0,
            high=1.0,
        )
        if np.any(np.diff(edges, axis=1) < 0):
            fail_state(self, "bin_edges_", "must be non-decreasing in every row")
        if np.any(edges[:, 0] != 0.0) or np.any(edges[:, -1] != 1.0):
            fail_state(self, "bin_edges_", "must start at 0 and end at 1 in every row")
        check_state_array(
            self, "bin_values_", shape=(n_maps, self.n_bins), low=0.0, high=1.0
        )
        check_state_array(
            self, "bin_counts_", shape=(n_maps, self.n_bins), finite=True, low=0.0
        )

    def _edges(self, scores, weights):
        if self.strategy == "uniform" or not np.any(weights > 0):
            return np.linspace(0.0, 1.0, self.n_bins + 1)
        inner = _weighted_quantile_edges(scores, weights, self.n_bins)
        return np.concatenate([[0.0], inner, [1.0]])

    def _bin_index(self, map_index, scores):
        if self.strategy == "uniform":
            return uniform_bin_index(scores, self.n_bins)
        inner = self.bin_edges_[map_index, 1:-1]
        # (lo, hi] bins: a score equal to an edge belongs to the bin below it.
        return np.searchsorted(inner, scores, side="left")

    def _fit(self, logits, y, sample_weight):
        problems = _binary_problems(
            _probabilities(logits), y, self.mode, sample_weight, _masked_classes(logits)
        )
        n_maps = len(problems)
        self.bin_edges_ = np.empty((n_maps, self.n_bins + 1))
        self.bin_values_ = np.empty((n_maps, self.n_bins))
        self.bin_counts_ = np.empty((n_maps, self.n_bins))
        for m, (scores, targets, weights) in enumerate(problems):
            self.bin_edges_[m] = self._edges(scores, weights)
            index = self._bin_index(m, scores)
            mass = np.bincount(index, weights=weights, minlength=self.n_bins)
            hits = np.bincount(index, weights=weights * targets, minlength=self.n_bins)
            midpoints = 0.5 * (self.bin_edges_[m, :-1] + self.bin_edges_[m, 1:])
            with np.errstate(divide="ignore", invalid="ignore"):
                self.bin_values_[m] = np.where(mass > 0, hits / mass, midpoints)
            # The weights were divided by their maximum (for precision): the
            # counts are reported in the caller's units.
            self.bin_counts_[m] = mass * sample_weight.max()

    def _fit_chunked(self, data):
        """The exact fit from chunks: bin sums, equal-mass edges by selection."""
        n_bins = self.n_bins
        multiclass = "top-label" if self.mode == "top_label" else "classwise"
        n_maps = 1 if self.mode == "top_label" else data.n_classes
        bin_edges = None
        if self.strategy == "quantile":
            # The in-memory edges: smallest score whose cumulative weight reaches
            # W * b / M * (1 - 1e-12) (HistogramBinning._edges); W is the weight
            # of the rows where the class is open (masked entries are left out).
            if self.mode == "top_label":
                mass = np.array([data.total_weight])
            else:
                mass = data.open_weight
            fractions = np.arange(1, n_bins) / n_bins * (1 - 1e-12)
            targets = mass[:, None] * fractions
            if n_bins == 1:
                bin_edges = np.tile([0.0, 1.0], (n_maps, 1))
            else:
                selection = EqualMassSelection(
                    targets, np.uint64, digit_bits_for(targets.size)
                )
                while not selection.done:
                    _, bits = selection.digit_range()
                    hist = data.reduce(
                        functools.partial(
                            _selection_histograms,
                            selection=selection,
                            mode=self.mode,
                        )
                    )
                    selection.advance(hist.reshape(n_maps, n_bins - 1, 1 << bits))
                bin_edges = selection.edges()
                # A class masked in every row has no data: equal-width edges, as
                # in memory.
                bin_edges[~(mass > 0)] = np.linspace(0.0, 1.0, n_bins + 1)
        template = BinnedCalibrationAccumulator(
            n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
        )
        vector = data.reduce(
            functools.partial(
                _histogram_sums, mode=self.mode, n_bins=n_bins, bin_edges=bin_edges
            )
        )
        state = template.from_vector(vector, data.n_classes)
        edges = np.array(state._group_edges())
        mass, hits = state.count, state.hit
        midpoints = 0.5 * (edges[:, :-1] + edges[:, 1:])
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.where(mass > 0, hits / mass, midpoints)
        self.bin_edges_ = edges
        self.bin_values_ = values
        self.bin_counts_ = mass.copy()

    def _calibrated_logits(self, logits):
        proba = _probabilities(logits)
        masked = _masked_classes(logits)
        if self.mode == "top_label":
            _, confidence, _ = _top_label_targets(proba, np.zeros(proba.shape[0]))
            new = self.bin_values_[0][self._bin_index(0, confidence)]
            calibrated = _apply_top_label(proba, new, masked)
        elif self.strategy == "uniform":
            # Every class shares the edges: one pass bins the whole block.
            index = uniform_bin_index(proba, self.n_bins)
            calibrated = self.bin_values_[np.arange(proba.shape[1]), index]
        else:
            calibrated = np.column_stack(
                [
                    self.bin_values_[k][self._bin_index(k, proba[:, k])]
                    for k in range(proba.shape[1])
                ]
            )
        return _finish(calibrated, proba, masked)


# --- the chunked fit of HistogramBinning: bin sums over chunks --------------------


def _histogram_groups(logits, codes, mode):
    """The binned scores of histogram binning: float64 softmax, top label or columns."""
    proba = softmax(logits.astype(np.float64))
    if mode == "top_label":
        confidence = np.empty(proba.shape[0])
        for rows in row_blocks(*proba.shape, max_elements=BLOCK_ELEMENTS):
            confidence[rows] = _block_top_label(proba, rows, codes[rows])[0]
        return proba, [confidence]
    return proba, [proba[:, k] for k in range(proba.shape[1])]


def _histogram_sums(logits, codes, weights, *, mode, n_bins, bin_edges):
    multiclass = "top-label" if mode == "top_label" else "classwise"
    state = BinnedCalibrationAccumulator(
        n_bins=n_bins, multiclass=multiclass, bin_edges=bin_edges
    )
    proba = softmax(logits.astype(np.float64)) if logits.shape[0] else logits
    mask = mask_of(logits) if mode != "top_label" else None
    if mask is None:
        state._update_validated(codes, proba.astype(np.float64), weights)
    else:
        state._update_validated(codes, proba[:0], weights[:0])
        _add_open_classwise_sums(state, codes, proba, weights, mask)
    return state.to_vector()


def _add_open_classwise_sums(state, codes, proba, weights, mask):
    """Class-wise bin counts and hits over the rows where each class is open.

    In memory, class k's histogram is fitted on the rows where k is not
    masked: a masked entry enters here with weight 0 (adding 0.0 changes no
    sum), and so does a row's hit when its own class is masked.
    """
    n_rows, n_classes = proba.shape
    n_bins = state.n_bins
    edges = state._group_edges()[:, 1:-1]
    offsets = n_bins * np.arange(n_classes)
    # Flat views: class k's bin b is entry k * n_bins + b.
    count, hit = state.count.reshape(-1), state.hit.reshape(-1)
    for rows in row_blocks(n_rows, n_classes, max_elements=BLOCK_ELEMENTS):
        block = proba[rows]
        if state.bin_edges is None:
            index = uniform_bin_index(block, n_bins)
        else:
            index = np.column_stack(
                [
                    np.searchsorted(edges[k], block[:, k], side="left")
                    for k in range(n_classes)
                ]
            )
        index += offsets
        open_weight = np.where(mask[rows], 0.0, weights[rows, None])
        count += np.bincount(index.ravel(), open_weight.ravel(), count.shape[0])
        rows_index = np.arange(block.shape[0])
        truth = codes[rows]
        hit += np.bincount(
            index[rows_index, truth], open_weight[rows_index, truth], hit.shape[0]
        )
    state.n_samples = n_rows


def _selection_histograms(logits, codes, weights, *, selection, mode):
    _, groups = _histogram_groups(logits, codes, mode)
    mask = mask_of(logits) if mode != "top_label" else None
    if mask is not None:
        # Class k's edges are those of the rows where k is open.
        weights = [np.where(mask[:, k], 0.0, weights) for k in range(len(groups))]
    return selection.pass_histograms(groups, weights).ravel()
