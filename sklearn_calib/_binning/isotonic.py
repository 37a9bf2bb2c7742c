"""Isotonic calibration: a monotone map of the log-odds, one-vs-rest or top-label.

The conventions (modes, masked classes, the probability floor) are those of
:mod:`sklearn_calib._binning.one_vs_rest`.
"""

import numpy as np
from scipy.special import expit
from sklearn.isotonic import IsotonicRegression

from ..base import BaseCalibrator
from ..utils._compat import StrOptions
from ..utils._fitted_state import (
    check_state_array,
    check_state_list,
    fail_state,
)
from .one_vs_rest import (
    apply_top_label,
    binary_problems,
    canonical_log_odds,
    finish_one_vs_rest,
    has_steep_points,
    log_odds_slack,
    masked_classes,
    near_others,
    near_points,
    probabilities,
    row_magnitudes,
    softmax_log_odds,
    steep_points,
    top_label_targets,
    top_ties,
)


def _constant_fit(scores, targets):
    """The thresholds of the isotonic fit of constant targets, else ``(None, None)``.

    ``scores`` and ``targets`` are those of the samples of positive weight
    (the only ones :class:`~sklearn.isotonic.IsotonicRegression` keeps). When
    every target is the same (a class absent from the calibration labels: all
    0), the fit is that constant, and scikit-learn keeps the smallest and the
    largest score as thresholds (one when they are equal): the same arrays,
    without a regression per class (a vocabulary of 50,000 classes of which a
    calibration set holds a few hundred).
    """
    first = targets[0]
    if np.any(targets != first):
        return None, None
    low, high = scores.min(), scores.max()
    x = np.array([low], dtype=np.float64) if low == high else np.array([low, high])
    return x.astype(np.float64), np.full(x.shape, float(first))


class IsotonicCalibration(BaseCalibrator):
    """Isotonic regression of the softmax probabilities (Zadrozny & Elkan 2002).

    A non-decreasing map is fitted by the pool adjacent violators algorithm
    to the 0/1 outcome, either per class (one-vs-rest, then rows
    renormalised) or on the top-label confidence, as a function of the
    log-odds ``log(p_k / (1 - p_k)) = z_k - logsumexp_{j != k} z_j`` of the
    probabilities (computed stably from the logits). Inputs outside the
    fitted range are clipped to its ends.

    The log-odds order the samples as the probabilities do, so (where no two
    samples' probabilities round to the same float64) the pooled blocks and
    the fitted values are those of :class:`sklearn.isotonic.IsotonicRegression`
    fitted on the probabilities, and the thresholds are the log-odds of its
    thresholds. Two things differ from scikit-learn's isotonic calibration of
    the probabilities:

    - between two thresholds the map is linear in the log-odds, where
      scikit-learn's is linear in the probability, so at a score between
      thresholds the two differ (in a class's map at the test scores with
      ``p_k < 0.5`` of the bundled sets: up to 2.2e-3 on CIFAR-10, 2.0e-2 on
      CIFAR-100); at the thresholds, and outside the fitted range, they
      agree;
    - the log-odds do not saturate: float64 probabilities round to 1.0 once
      a logit leads the others by about 36.7, which would tie (and pool)
      samples that the logits still rank.

    For a single score column ``s`` (the logits ``(0, s)``) the log-odds of
    the positive class are ``s`` itself, so the map is
    :class:`~sklearn.isotonic.IsotonicRegression` on the scores, as in
    :class:`~sklearn.calibration.CalibratedClassifierCV` with
    ``method="isotonic"`` on a ``decision_function``.

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
    - between two thresholds ``x_j < x_{j+1}`` (log-odds) the map is linear
      in the log-odds, ``y_j + (s - x_j) (y_{j+1} - y_j) / (x_{j+1} - x_j)``
      (:func:`numpy.interp`), not in the probability; scores below the
      smallest or above the largest calibration score take the value at that
      end;
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
        masked = masked_classes(logits)
        logits = np.asarray(logits, dtype=np.float64)
        log_odds = softmax_log_odds(logits)
        magnitude = row_magnitudes(logits)
        problems = binary_problems(log_odds, y, self.mode, sample_weight, masked)
        self.X_thresholds_, self.y_thresholds_ = [], []
        for m, (scores, targets, weights) in enumerate(problems):
            counted = weights > 0
            if not np.any(counted):  # masked in every calibration row
                # No data, no correction: the identity on the probability,
                # as a function of the log-odds (interpolated within 1e-4).
                grid = np.linspace(-40.0, 40.0, 801)
                self.X_thresholds_.append(grid)
                self.y_thresholds_.append(expit(grid))
                continue
            x, values = _constant_fit(scores[counted], targets[counted])
            if x is None:
                scores = self._pooled_scores(m, scores, magnitude, logits, masked)
                iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
                iso.fit(scores, targets, sample_weight=weights)
                x, values = iso.X_thresholds_, iso.y_thresholds_
            self.X_thresholds_.append(x)
            self.y_thresholds_.append(values)

    def _pooled_scores(self, m, scores, magnitude, logits, masked):
        """Map ``m``'s scores, those near another's in a canonical order.

        Equal scores are pooled, whatever the order of the columns (see
        :func:`~sklearn_calib._binning.one_vs_rest.canonical_log_odds`).
        """
        rows = np.arange(logits.shape[0])
        if self.mode != "top_label" and masked is not None:
            rows = rows[~masked[:, m]]
        near = near_others(scores, log_odds_slack(logits, scores, magnitude[rows]))
        if not near.any():
            return scores
        canonical = canonical_log_odds(logits[rows[near]])
        scores = scores.copy()
        if self.mode == "top_label":
            scores[near] = canonical.max(axis=1)
        else:
            scores[near] = canonical[:, m]
        return scores

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
        proba = probabilities(logits)
        masked = masked_classes(logits)
        logits = np.asarray(logits, dtype=np.float64)
        log_odds = softmax_log_odds(logits)
        if self.mode == "top_label":
            # The predicted class is the argmax of the log-odds, as in fit
            # (probabilities that round to the same value would tie).
            predicted, confidence, _ = top_label_targets(
                log_odds, np.zeros(proba.shape[0])
            )
            magnitude = row_magnitudes(logits)
            steep = steep_points(
                self.X_thresholds_[0], logits.shape[1], magnitude.max(initial=0.0)
            )
            near = np.zeros(confidence.shape, dtype=bool)
            if steep.shape[0]:
                slack = log_odds_slack(logits, confidence, magnitude)
                near = near_points(confidence, slack, steep)
            if near.any():
                confidence = confidence.copy()
                confidence[near] = canonical_log_odds(logits[near]).max(axis=1)
            calibrated = apply_top_label(
                proba,
                self._map(0, confidence),
                masked,
                predicted,
                tied=top_ties(log_odds, log_odds.max(axis=1)),
            )
        else:
            # A constant map (a class absent from the calibration labels) is
            # its value everywhere: filled at once rather than interpolated
            # column by column (50,000 classes, most of them absent).
            values = self.y_thresholds_
            constant = np.array([v[0] == v[-1] for v in values], dtype=bool)
            calibrated = np.empty_like(log_odds)
            calibrated[:, constant] = [values[k][0] for k in np.flatnonzero(constant)]
            mapped = np.flatnonzero(~constant)
            # Contiguous columns: one search and one interpolation per class.
            columns = np.ascontiguousarray(log_odds[:, mapped].T)
            self._canonical_near_thresholds(columns, logits, mapped)
            for i, k in enumerate(mapped):
                calibrated[:, k] = self._map(k, columns[i])
        return finish_one_vs_rest(calibrated, proba, masked)

    def _canonical_near_thresholds(self, columns, logits, mapped):
        """Recompute in place, in a canonical order, the log-odds near a threshold.

        ``columns[i]`` holds the log-odds of class ``mapped[i]``. A map's
        steps between thresholds an ulp apart are steep: a score summed in
        another column order reads a value far along them. The rows holding
        such a score are recomputed from their sorted logits at once (see
        :func:`~sklearn_calib._binning.one_vs_rest.canonical_log_odds`).
        """
        if mapped.shape[0] == 0 or logits.shape[0] == 0:
            return
        near = np.zeros(columns.shape, dtype=bool)
        magnitude = row_magnitudes(logits)
        largest = magnitude.max()
        # Only steep steps are worth it: elsewhere a score's rounding moves
        # its value as little near a threshold as between two.
        maps = [self.X_thresholds_[k] for k in mapped]
        for i in np.flatnonzero(has_steep_points(maps, logits.shape[1], largest)):
            steep = steep_points(maps[i], logits.shape[1], largest)
            slack = log_odds_slack(logits, columns[i], magnitude)
            near[i] = near_points(columns[i], slack, steep)
        rows = np.flatnonzero(near.any(axis=0))
        if rows.shape[0] == 0:
            return
        canonical = canonical_log_odds(logits[rows])[:, mapped].T
        block = columns[:, rows]
        block[near[:, rows]] = canonical[near[:, rows]]
        columns[:, rows] = block
