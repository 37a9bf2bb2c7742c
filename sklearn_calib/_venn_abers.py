"""Inductive Venn-Abers calibration: binary, and multiclass one-vs-one.

For a binary score the two Venn-Abers probabilities ``p0 <= p1`` of a test
score are the values at the test point of the isotonic regressions of the
calibration set augmented by the test point with label 0 and with label 1.
They are computed for every possible position of a test score (each gap
between distinct calibration scores, and each tie with one) at fit time, so a
prediction is a binary search.

The isotonic regression of a concatenation is obtained by pooling the blocks
of the isotonic regressions of its parts (blocks are never split), so the
value at the test point follows from the pool-adjacent-violators blocks of
the calibration scores below it and above it, pooled with the test point
until the sequence is non-decreasing. Persistent stacks hold those blocks for
every prefix and suffix: ``O(n)`` memory, and a few pooling steps per
position in practice.
"""

import numpy as np

from .base import BaseCalibrator

# One-vs-one fits and predicts K (K - 1) / 2 binary problems: 32,640 pairs
# (K = 256) take about a minute on a 2-core machine; beyond, refuse by name.
MAX_PAIRS = 256 * 255 // 2


def _prefix_blocks(weights, sums):
    """Pool-adjacent-violators blocks of every prefix, as persistent stacks.

    Returns ``(w, s, prev, top)``: block ``b`` has weight ``w[b]``, label sum
    ``s[b]`` and the block below it ``prev[b]`` (-1 at the bottom); the stack
    of the first ``j`` groups starts at ``top[j]`` (-1 when empty). Blocks of
    equal means are pooled too, so consecutive blocks have increasing means.
    """
    k = weights.shape[0]
    w = [0.0] * k
    s = [0.0] * k
    prev = [-1] * k
    top = [-1] * (k + 1)
    current = -1
    for g in range(k):
        bw, bs = float(weights[g]), float(sums[g])
        # Pool while the block below has a mean at least as large.
        while current >= 0 and s[current] * bw >= bs * w[current]:
            bw += w[current]
            bs += s[current]
            current = prev[current]
        w[g], s[g], prev[g] = bw, bs, current
        current = g
        top[g + 1] = current
    return w, s, prev, top


def _suffix_blocks(weights, sums):
    """Blocks of every suffix: ``top[j]`` is the stack of groups ``j..k-1``.

    ``nxt[b]`` is the block to the right of block ``b`` (-1 at the end);
    consecutive blocks have increasing means.
    """
    k = weights.shape[0]
    w = [0.0] * k
    s = [0.0] * k
    nxt = [-1] * k
    top = [-1] * (k + 1)
    current = -1
    for g in range(k - 1, -1, -1):
        bw, bs = float(weights[g]), float(sums[g])
        # Pool while the block to the right has a mean at most as large.
        while current >= 0 and bs * w[current] >= s[current] * bw:
            bw += w[current]
            bs += s[current]
            current = nxt[current]
        w[g], s[g], nxt[g] = bw, bs, current
        current = g
        top[g] = current
    return w, s, nxt, top


def _pooled_mean(tw, ts, left, right, prefix, suffix):
    """Mean of the block holding the test point once every violation is pooled."""
    lw, ls, lprev, _ = prefix
    rw, rs, rnext, _ = suffix
    # Each pass pools one block of the prefix or the suffix: at most k passes.
    while True:
        if left >= 0 and ls[left] * tw >= ts * lw[left]:
            tw += lw[left]
            ts += ls[left]
            left = lprev[left]
        elif right >= 0 and ts * rw[right] >= rs[right] * tw:
            tw += rw[right]
            ts += rs[right]
            right = rnext[right]
        else:
            return ts / tw


# Scores closer than this fraction of the pair's largest |score| are ties: a
# model's outputs for identical inputs can differ in the last bits (BLAS
# kernels sum in an order that depends on a row's position in the batch), and
# a tie or not is a jump in the Venn-Abers probabilities.
TIE_RTOL = 1e-12


def venn_abers_table(scores, labels, weights):
    """Venn-Abers probabilities of every position of a test score.

    Parameters
    ----------
    scores : ndarray of shape (n,), float64
    labels : ndarray of shape (n,) in {0, 1}
    weights : ndarray of shape (n,), positive

    Returns
    -------
    intervals : ndarray of shape (k, 2)
        The tie groups of the calibration scores, increasing: scores that
        differ by at most ``TIE_RTOL`` times the largest ``|score|`` from their
        neighbour form one group, and a test score within that tolerance of
        a group's ``[smallest, largest]`` score ties with it. Each row holds
        the group's interval widened by the tolerance.
    p0, p1 : ndarray of shape (2 k + 1,)
        Position ``2 i`` is a test score between groups ``i - 1`` and ``i``
        (below all, above all at the ends); position ``2 i + 1`` ties with
        group ``i``.
    """
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    largest = float(np.max(np.abs(ordered), initial=0.0))
    tol = TIE_RTOL * largest if np.isfinite(largest) else 0.0
    starts = np.zeros(ordered.size, dtype=bool)
    starts[:1] = True
    starts[1:] = np.diff(ordered) > tol
    group = np.cumsum(starts) - 1
    k = int(np.count_nonzero(starts))
    group_w = np.bincount(group, weights=weights[order], minlength=k)
    group_s = np.bincount(group, weights=(weights * labels)[order], minlength=k)
    first = np.flatnonzero(starts)
    last = np.append(first[1:] - 1, ordered.size - 1) if k else first
    intervals = np.column_stack([ordered[first] - tol, ordered[last] + tol])
    prefix = _prefix_blocks(group_w, group_s)
    suffix = _suffix_blocks(group_w, group_s)
    p0 = np.empty(2 * k + 1)
    p1 = np.empty(2 * k + 1)
    for i in range(k + 1):
        left, right = prefix[3][i], suffix[3][i]
        p0[2 * i] = _pooled_mean(1.0, 0.0, left, right, prefix, suffix)
        p1[2 * i] = _pooled_mean(1.0, 1.0, left, right, prefix, suffix)
        if i < k:
            # A tie joins the test point to the group of equal scores.
            right = suffix[3][i + 1]
            tw, ts = group_w[i] + 1.0, group_s[i]
            p0[2 * i + 1] = _pooled_mean(tw, ts, left, right, prefix, suffix)
            p1[2 * i + 1] = _pooled_mean(tw, ts + 1.0, left, right, prefix, suffix)
    return intervals, p0, p1


def _positions(intervals, scores):
    """Table position of each test score (see :func:`venn_abers_table`)."""
    # Groups starting at or below the score, and groups ending below it: one
    # more of the former exactly when the score lies inside a group.
    below_start = np.searchsorted(intervals[:, 0], scores, side="right")
    below_end = np.searchsorted(intervals[:, 1], scores, side="left")
    return below_start + below_end


class VennAbersCalibration(BaseCalibrator):
    r"""Inductive Venn-Abers calibration (Vovk, Petej and Fedorova 2015).

    Binary problem, score ``s`` (the single score column, or ``z_1 - z_0``):
    for a test score, fit the isotonic regression of the labels on the scores
    of the calibration set augmented by the test point, once with label 0 and
    once with label 1; the values at the test point are the two Venn-Abers
    probabilities ``p0 <= p1`` of the positive class. One of them is
    perfectly calibrated under exchangeability (the Venn predictor's validity
    guarantee); their spread ``p1 - p0`` shrinks as the calibration set grows
    and says how much the calibration data pin the probability down.
    :meth:`predict_interval` returns them. :meth:`predict_proba` returns the
    merged probability of Vovk et al., which minimises the worst-case log
    loss over the two:

    .. math::

        p = \frac{p_1}{1 - p_0 + p_1}.

    Multiclass, one-vs-one (as in Manokhin's ``venn-abers`` package and
    MAPIE): one binary problem per pair of classes ``i < j``, on the
    calibration samples of those two classes with score ``z_j - z_i``,
    gives ``P(j | i or j)``; the pairwise probabilities are coupled by Price
    et al.'s rule

    .. math::

        q_c \propto \Big(\sum_{j \ne c} \frac{1}{P(c \mid c \text{ or } j)}
        - (K - 2)\Big)^{-1}.

    The scores enter only through their order, so this is the same as
    running the method on the pairwise probabilities ``softmax(z)_j /
    (softmax(z)_i + softmax(z)_j)``, except that the logit differences keep
    the order of extreme scores that float64 probabilities would tie.

    Attributes
    ----------
    pairs_ : ndarray of shape (n_pairs, 2)
        Column indices ``(i, j)``, ``i < j``, of each binary problem; the
        positive class of pair ``(i, j)`` is ``classes_[j]``. A binary
        problem has the single pair ``(0, 1)``.
    thresholds_ : ndarray of shape (n_groups, 2)
        The tie groups of the calibration scores of every pair, concatenated:
        each row is a group's smallest and largest score, widened by the tie
        tolerance (see Notes).
    pair_offsets_ : ndarray of shape (n_pairs + 1,)
        Pair ``m``'s groups are
        ``thresholds_[pair_offsets_[m]:pair_offsets_[m + 1]]``.
    p0_, p1_ : ndarray
        The Venn-Abers probabilities of every position of a test score,
        concatenated over the pairs (``2 k + 1`` positions for ``k``
        groups: the gaps and the ties).
    classes_ : ndarray of shape (n_classes,)
        Class labels; the i-th logit column belongs to ``classes_[i]``.
    n_features_in_ : int
        Number of logit columns seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    IsotonicCalibration : Isotonic regression of the probabilities, without
        the test point.

    Notes
    -----
    Tied scores are pooled, as in :class:`~sklearn.isotonic.IsotonicRegression`;
    a test score equal to a calibration score joins its tie group. Scores
    that differ by at most ``1e-12`` times the pair's largest calibration
    ``|score|`` count as equal: a model's outputs for identical inputs can
    differ in their last bits (BLAS sums in an order that depends on where a
    row sits in the batch), and tied or not is a jump in ``p0`` and ``p1``. Sample
    weights count as numbers of samples (integer weights give the same fit as
    repeated rows), and the test point always weighs 1, so multiplying every
    weight by a constant changes the interval (as more data would).

    The multiclass method fits ``K (K - 1) / 2`` binary problems and
    predicts with all of them: about 50 ms per pair on a 2-core machine at
    100 samples per pair, so it suits tens of classes rather than thousands.

    Where a pair's logit is masked (``-inf``), that pair is certain
    (``p0 = p1 = 0`` or ``1``) and the masked class has probability 0; a
    pair with both logits masked has no probability (NaN in
    :meth:`predict_interval`). Rows with a masked logit in a pair are left
    out of that pair's fit.

    References
    ----------
    .. [1] V. Vovk and I. Petej, "Venn-Abers predictors", UAI 2014.
    .. [2] V. Vovk, I. Petej and V. Fedorova, "Large-scale probabilistic
       predictors with and without guarantees of validity", NeurIPS 2015.
    .. [3] V. Manokhin, ``venn-abers`` (PyPI), multiclass one-vs-one
       Venn-Abers; and MAPIE's ``VennAbersCalibrator``.
    .. [4] D. Price, S. Knerr, L. Personnaz and G. Dreyfus, "Pairwise neural
       network classifiers with probabilistic outputs", NIPS 1994.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib import VennAbersCalibration
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=500)
    >>> score = 3.0 * (2 * y - 1) + rng.normal(scale=2.0, size=500)
    >>> va = VennAbersCalibration().fit(score[:, None], y)
    >>> p0, p1 = va.predict_interval(score[:3, None])
    >>> bool(np.all(p0 <= p1))
    True
    >>> proba = va.predict_proba(score[:3, None])
    >>> np.allclose(proba[:, 1], (p1 / (1 - p0 + p1))[:, 0])
    True
    """

    def __init__(self):
        pass

    def _fit(self, logits, y, sample_weight):
        n_classes = logits.shape[1]
        n_pairs = n_classes * (n_classes - 1) // 2
        if n_pairs > MAX_PAIRS:
            raise ValueError(
                f"VennAbersCalibration with {n_classes:,} classes has {n_pairs:,} "
                f"one-vs-one pairs; the limit is {MAX_PAIRS:,} pairs (256 "
                "classes): each pair is a binary fit, and every prediction "
                "couples all of them. Use TemperatureScaling or "
                "SplineCalibration for this many classes."
            )
        pairs = [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]
        thresholds, p0, p1, offsets = [], [], [], [0]
        keep = sample_weight > 0
        for i, j in pairs:
            rows = keep & ((y == i) | (y == j))
            rows &= np.isfinite(logits[:, i]) & np.isfinite(logits[:, j])
            with np.errstate(over="ignore"):
                score = logits[rows, j].astype(np.float64) - logits[rows, i]
            table = venn_abers_table(
                score, (y[rows] == j).astype(np.float64), sample_weight[rows]
            )
            thresholds.append(table[0])
            p0.append(table[1])
            p1.append(table[2])
            offsets.append(offsets[-1] + table[0].shape[0])
        self.pairs_ = np.array(pairs, dtype=np.intp).reshape(-1, 2)
        self.thresholds_ = np.concatenate(thresholds).reshape(-1, 2)
        self.pair_offsets_ = np.array(offsets, dtype=np.intp)
        self.p0_ = np.concatenate(p0)
        self.p1_ = np.concatenate(p1)

    def _bounds(self, logits):
        """(p0, p1) of every pair on every row, each of shape (n_pairs, n_rows).

        A pair with a masked logit (-inf) is certain; with both masked, NaN.
        """
        columns = np.asarray(logits, dtype=np.float64).T
        first, second = self.pairs_[:, 0], self.pairs_[:, 1]
        with np.errstate(invalid="ignore", over="ignore"):
            # Finite logits near the float range may differ by inf: such a
            # score lies beyond every threshold, as it should.
            scores = columns[second] - columns[first]
        masked_i = columns[first] == -np.inf
        masked_j = columns[second] == -np.inf
        either = masked_i | masked_j
        any_masked = bool(either.any())
        if any_masked:
            scores[either] = 0.0
        position = np.empty(scores.shape, dtype=np.intp)
        offsets = self.pair_offsets_
        for m in range(scores.shape[0]):
            position[m] = _positions(
                self.thresholds_[offsets[m] : offsets[m + 1]], scores[m]
            )
        # Pair m's 2 k + 1 positions start after the earlier pairs' positions.
        position += (2 * offsets[:-1] + np.arange(scores.shape[0]))[:, None]
        p0 = self.p0_[position]
        p1 = self.p1_[position]
        if any_masked:
            # z_j = -inf: class j impossible; z_i = -inf: class j certain.
            certain = np.where(masked_j, np.where(masked_i, np.nan, 0.0), 1.0)
            p0 = np.where(either, certain, p0)
            p1 = np.where(either, certain, p1)
        return p0, p1

    def _row_blocks(self, n_rows):
        """Row slices keeping the (n_pairs, rows) temporaries near 2**20 values."""
        step = max(1, 2**20 // max(1, self.pairs_.shape[0]))
        for begin in range(0, n_rows, step):
            yield slice(begin, min(begin + step, n_rows))

    def predict_interval(self, X):
        """The Venn-Abers probabilities ``p0 <= p1`` of every binary problem.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        p0 : ndarray of shape (n_samples, n_pairs)
            Lower Venn-Abers probability of the positive class of each pair
            (``classes_[pairs_[m, 1]]`` given that the label is one of the
            pair's two classes). A binary problem has one pair: the positive
            class ``classes_[1]``.
        p1 : ndarray of shape (n_samples, n_pairs)
            Upper Venn-Abers probability; ``p0 <= p1`` on every entry.
        """
        logits = self._check_fitted_input(X)
        n_pairs = self.pairs_.shape[0]
        p0 = np.empty((logits.shape[0], n_pairs))
        p1 = np.empty((logits.shape[0], n_pairs))
        for rows in self._row_blocks(logits.shape[0]):
            lower, upper = self._bounds(logits[rows])
            p0[rows], p1[rows] = lower.T, upper.T
        return p0, p1

    def _calibrated_logits(self, logits):
        out = np.empty(logits.shape)
        for rows in self._row_blocks(logits.shape[0]):
            out[rows] = self._coupled_log_proba(logits[rows])
        return out

    def _coupled_log_proba(self, logits):
        p0, p1 = self._bounds(logits)
        unmasked = np.isfinite(logits).T
        both = unmasked[self.pairs_[:, 0]] & unmasked[self.pairs_[:, 1]]
        # P(j | i or j) = p1 / (1 - p0 + p1), P(i | i or j) = (1 - p0) / (...)
        denominator = 1.0 - p0 + p1
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse_j = np.where(both, denominator / p1, 0.0)
            inverse_i = np.where(both, denominator / (1.0 - p0), 0.0)
        inverse_sum = np.zeros(unmasked.shape)
        np.add.at(inverse_sum, self.pairs_[:, 1], inverse_j)
        np.add.at(inverse_sum, self.pairs_[:, 0], inverse_i)
        # With two classes the coupling is the pair's own merged probability.
        count = unmasked.sum(axis=0)
        with np.errstate(divide="ignore"):
            proba = np.where(unmasked, 1.0 / (inverse_sum - (count - 2)), 0.0)
        proba /= proba.sum(axis=0)
        with np.errstate(divide="ignore"):
            return np.log(proba).T
