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

from ..base import BaseCalibrator
from ..utils._compat import StrOptions
from ..utils._fitted_state import check_state_array, fail_state
from ..utils._math import log_softmax, row_blocks
from ..utils._validation import unit_weight, weight_scale

# One-vs-one fits and predicts K (K - 1) / 2 binary problems: 4,950 pairs
# (K = 100, 5,000 samples) took 12-18 s on a loaded 2-core machine, so 32,640
# (K = 256) take minutes; beyond, refuse by name.
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


# Scores closer than this fraction of their scale are ties: a model's outputs
# for identical inputs can differ in the last bits (BLAS kernels sum in an
# order that depends on a row's position in the batch), and a tie or not is a
# jump in the Venn-Abers probabilities. The scale of two neighbouring scores
# is the larger of their magnitudes and the median magnitude of the problem's
# scores (noise near 0 is that of the terms summed): not the largest score,
# of which one far out (1e20) would tie every other score into one group.
TIE_RTOL = 1e-12


def _tie_tolerance(values, typical):
    """TIE_RTOL times the scale of each value (0 for infinite values)."""
    finite = np.isfinite(values)
    scale = np.maximum(np.abs(np.where(finite, values, 0.0)), typical)
    return np.where(finite, TIE_RTOL * scale, 0.0)


def venn_abers_table(scores, labels, weights, test_weight=1.0):
    """Venn-Abers probabilities of every position of a test score.

    Parameters
    ----------
    scores : ndarray of shape (n,), float64
    labels : ndarray of shape (n,) in {0, 1}
    weights : ndarray of shape (n,), positive
    test_weight : float, default=1.0
        The weight of the test point on the scale of ``weights``: the
        caller divides huge weights by a power of two so that their sums
        cannot overflow, and the test point's weight 1 by the same.

    Returns
    -------
    intervals : ndarray of shape (k, 2)
        The tie groups of the calibration scores, increasing: scores that
        differ from their neighbour by at most ``TIE_RTOL`` times the larger
        of the two magnitudes and the median ``|score|`` form one group, and
        a test score within that tolerance of a group's ``[smallest,
        largest]`` score ties with it. Each row holds the group's interval
        widened by the tolerance.
    p0, p1 : ndarray of shape (2 k + 1,)
        Position ``2 i`` is a test score between groups ``i - 1`` and ``i``
        (below all, above all at the ends); position ``2 i + 1`` ties with
        group ``i``.
    """
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    magnitudes = np.abs(ordered[np.isfinite(ordered)])
    typical = float(np.median(magnitudes)) if magnitudes.size else 0.0
    tol = _tie_tolerance(ordered, typical)
    starts = np.zeros(ordered.size, dtype=bool)
    starts[:1] = True
    starts[1:] = np.diff(ordered) > np.maximum(tol[1:], tol[:-1])
    group = np.cumsum(starts) - 1
    k = int(np.count_nonzero(starts))
    group_w = np.bincount(group, weights=weights[order], minlength=k)
    group_s = np.bincount(group, weights=(weights * labels)[order], minlength=k)
    first = np.flatnonzero(starts)
    last = np.append(first[1:] - 1, ordered.size - 1) if k else first
    intervals = np.column_stack(
        [ordered[first] - tol[first], ordered[last] + tol[last]]
    )
    if k and (not np.any(group_s > 0) or np.all(group_s >= group_w)):
        return intervals, *_single_label_table(
            group_w, bool(group_s[0] > 0), test_weight
        )
    prefix = _prefix_blocks(group_w, group_s)
    suffix = _suffix_blocks(group_w, group_s)
    p0 = np.empty(2 * k + 1)
    p1 = np.empty(2 * k + 1)
    for i in range(k + 1):
        left, right = prefix[3][i], suffix[3][i]
        p0[2 * i] = _pooled_mean(test_weight, 0.0, left, right, prefix, suffix)
        p1[2 * i] = _pooled_mean(test_weight, test_weight, left, right, prefix, suffix)
        if i < k:
            # A tie joins the test point to the group of equal scores.
            right = suffix[3][i + 1]
            tw, ts = group_w[i] + test_weight, group_s[i]
            p0[2 * i + 1] = _pooled_mean(tw, ts, left, right, prefix, suffix)
            p1[2 * i + 1] = _pooled_mean(
                tw, ts + test_weight, left, right, prefix, suffix
            )
    return intervals, p0, p1


def _single_label_table(group_w, positive, test_weight=1.0):
    """The table when every calibration label is the same (closed form).

    All labels 0: the isotonic fit is 0 everywhere, so ``p0 = 0``, and a test
    point labelled 1 pools with every group at or above it, ``p1 = 1 / (1 +
    weight at or above)`` (the test point of weight ``test_weight``). All
    labels 1 mirror this. Many one-vs-rest
    problems of a large vocabulary have no positive calibration sample.
    """
    k = group_w.shape[0]
    # Weight at or above each position: gap i sees groups i..k-1; a tie with
    # group i joins it, which is the same set.
    above = np.concatenate([np.cumsum(group_w[::-1])[::-1], [0.0]])
    below = np.concatenate([[0.0], np.cumsum(group_w)])
    at_or_above = np.empty(2 * k + 1)
    at_or_above[0::2] = above
    at_or_above[1::2] = above[:-1]
    at_or_below = np.empty(2 * k + 1)
    at_or_below[0::2] = below
    at_or_below[1::2] = below[1:]
    if positive:
        return 1.0 - test_weight / (test_weight + at_or_below), np.ones(2 * k + 1)
    return np.zeros(2 * k + 1), test_weight / (test_weight + at_or_above)


def _positions(intervals, scores):
    """Table position of each test score (see :func:`venn_abers_table`)."""
    # Groups starting at or below the score, and groups ending below it: one
    # more of the former exactly when the score lies inside a group.
    below_start = np.searchsorted(intervals[:, 0], scores, side="right")
    below_end = np.searchsorted(intervals[:, 1], scores, side="left")
    return below_start + below_end


def one_vs_rest_logits(logits):
    """``z_k - logsumexp_{j != k} z_j`` for every class: the log-odds of ``p_k``.

    ``log p_k - log(1 - p_k)`` computed without cancellation: for every class
    but the row's top one ``p_k <= 1/2`` and ``log1p(-p_k)`` is accurate; the
    top class's rest is summed explicitly. A masked class gives ``-inf``, a
    class whose rest is all masked ``+inf``.
    """
    log_p = log_softmax(np.asarray(logits, dtype=np.float64))
    rows = np.arange(log_p.shape[0])
    top = log_p.argmax(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = log_p - np.log1p(-np.exp(log_p))
        others = log_p.copy()
        others[rows, top] = -np.inf
        second = others.max(axis=1)
        shift = np.where(np.isfinite(second), second, 0.0)
        log_rest = shift + np.log(np.exp(others - shift[:, None]).sum(axis=1))
        out[rows, top] = log_p[rows, top] - log_rest
    return out


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

    Multiclass problems are split into binary ones:

    - ``multiclass="ovr"`` (one-vs-rest, the default, as probmetrics'
      ``ivap`` and the venn-abers package's ``"one_vs_all"``): one problem
      per class ``k``, on every calibration sample, with score the log-odds
      ``z_k - logsumexp_{j != k} z_j`` of ``softmax(z)_k`` and label
      ``1[y = k]``; the merged probabilities are normalised over the
      classes.
    - ``multiclass="ovo"`` (one-vs-one, as in Manokhin's ``venn-abers``
      package and MAPIE): one problem per pair of classes ``i < j``, on the
      calibration samples of those two classes with score ``z_j - z_i``,
      gives ``P(j | i or j)``; the pairwise probabilities are coupled by
      Price et al.'s rule

      .. math::

          q_c \propto \Big(\sum_{j \ne c} \frac{1}{P(c \mid c
          \text{ or } j)} - (K - 2)\Big)^{-1}.

    A binary problem is always the single pair ``(0, 1)``.

    The scores enter only through their order, so this is the same as
    running the method on the probabilities ``softmax(z)_k`` (one-vs-rest)
    or ``softmax(z)_j / (softmax(z)_i + softmax(z)_j)`` (one-vs-one), except
    that logits keep the order of extreme scores that float64 probabilities
    would tie at 0 or 1.

    Parameters
    ----------
    multiclass : {"ovr", "ovo"}, default="ovr"
        How a multiclass problem is split into binary problems (see above).
        One-vs-one is the multiclass Venn-Abers method of Manokhin (2017),
        but each pairwise probability keeps a Venn-Abers spread of about one
        over the pair's sample count, and the coupling adds those up over
        the ``K - 1`` pairs of a class: the result is under-confident as
        ``K`` grows (measured test ECE on four CIFAR-100 networks 45-53 %,
        against 4-6 % one-vs-rest and 1.4-4.2 % for temperature scaling).
        Binary problems ignore it.

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
    problems_ : ndarray of shape (n_problems, 2)
        The binary problems: row ``(i, j)`` is class ``classes_[j]`` (the
        positive class) against ``classes_[i]``, or against every other class
        where ``i`` is -1 (one-vs-rest). A binary problem has the single row
        ``(0, 1)``.
    thresholds_ : ndarray of shape (n_groups, 2)
        The tie groups of the calibration scores of every problem,
        concatenated: each row is a group's smallest and largest score,
        widened by the tie tolerance (see Notes).
    offsets_ : ndarray of shape (n_problems + 1,)
        Problem ``m``'s groups are ``thresholds_[offsets_[m]:offsets_[m + 1]]``.
    p0_, p1_ : ndarray
        The Venn-Abers probabilities of every position of a test score,
        concatenated over the problems (``2 k + 1`` positions for ``k``
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
    a test score equal to a calibration score joins its tie group. Two
    neighbouring scores that differ by at most ``1e-12`` times the larger of
    their magnitudes and the median ``|score|`` of the problem's calibration
    scores count as equal: a model's outputs for identical inputs can
    differ in their last bits (BLAS sums in an order that depends on where a
    row sits in the batch), and tied or not is a jump in ``p0`` and ``p1``.
    Sample weights count as numbers of samples (integer weights give the same
    fit as repeated rows), and the test point always weighs 1, so multiplying
    every weight by a constant changes the interval (as more data would).

    One-vs-one fits and predicts with ``K (K - 1) / 2`` binary problems, so
    it is limited to 256 classes (a ``ValueError`` beyond); one-vs-rest
    fits ``K``.

    A masked logit (``-inf``) has probability 0. A problem whose positive
    class is masked is certain (``p0 = p1 = 0``), one whose other side is
    all masked too (``p0 = p1 = 1``), and a pair with both classes masked has
    no probability (NaN in :meth:`predict_interval`). Such rows are left out
    of that problem's fit.

    References
    ----------
    .. [1] V. Vovk and I. Petej, "Venn-Abers predictors", UAI 2014.
    .. [2] V. Vovk, I. Petej and V. Fedorova, "Large-scale probabilistic
       predictors with and without guarantees of validity", NeurIPS 2015.
    .. [3] V. Manokhin, "Multi-class probabilistic classification using
       inductive and cross Venn-Abers predictors", COPA 2017; the
       ``venn-abers`` package (PyPI) and MAPIE's ``VennAbersCalibrator``.
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
    >>> bool(np.allclose(proba[:, 1], (p1 / (1 - p0 + p1))[:, 0]))
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "multiclass": [StrOptions({"ovr", "ovo"})],
    }

    def __init__(self, *, multiclass="ovr", classes=None):
        self.classes = classes
        self.multiclass = multiclass

    def _one_vs_one(self, n_classes):
        return n_classes == 2 or self.multiclass == "ovo"

    def _problem_scores(self, logits):
        """Scores (n_problems, n_rows) and where each problem is certain.

        Returns ``(scores, certain)``: ``certain`` holds 0 or 1 where the
        problem's outcome is fixed by masked logits, NaN where it is
        undefined (both classes of a pair masked), and -1 elsewhere.
        """
        columns = np.asarray(logits, dtype=np.float64).T
        if self._one_vs_one(columns.shape[0]):
            first, second = self.problems_[:, 0], self.problems_[:, 1]
            with np.errstate(invalid="ignore", over="ignore"):
                # Finite logits near the float range may differ by inf: such
                # a score lies beyond every group, as it should.
                scores = columns[second] - columns[first]
            masked_i = columns[first] == -np.inf
            masked_j = columns[second] == -np.inf
            certain = np.where(masked_j, np.where(masked_i, np.nan, 0.0), 1.0)
            certain[~(masked_i | masked_j)] = -1.0
        else:
            scores = one_vs_rest_logits(logits).T
            certain = np.where(scores == -np.inf, 0.0, 1.0)
            certain[np.abs(scores) != np.inf] = -1.0
        scores[certain != -1.0] = 0.0
        return scores, certain

    def _weight_scale_matters(self):
        # Weights count as samples against the test point's weight 1.
        return True

    def _fit(self, logits, y, sample_weight):
        n_classes = logits.shape[1]
        if self._one_vs_one(n_classes):
            n_pairs = n_classes * (n_classes - 1) // 2
            if n_pairs > MAX_PAIRS:
                raise ValueError(
                    f"VennAbersCalibration with {n_classes:,} classes has "
                    f"{n_pairs:,} one-vs-one pairs; the limit is {MAX_PAIRS:,} "
                    "pairs (256 classes): each pair is a binary fit, and every "
                    "prediction couples all of them. Use multiclass='ovr' for "
                    "this many classes."
                )
            problems = [
                (i, j) for i in range(n_classes) for j in range(i + 1, n_classes)
            ]
        else:
            problems = [(-1, k) for k in range(n_classes)]
        self.problems_ = np.array(problems, dtype=np.intp).reshape(-1, 2)
        if self._one_vs_one(n_classes):
            columns = np.asarray(logits, dtype=np.float64).T
        else:
            rest_scores = one_vs_rest_logits(logits).T
        thresholds, p0, p1, offsets = [], [], [], [0]
        keep = sample_weight > 0
        # The test point weighs 1 against the weights as given; both are
        # divided by a power of two (exact) so that sums cannot overflow.
        scale = weight_scale(sample_weight)
        sample_weight = sample_weight / scale
        for i, j in self.problems_:
            # One problem at a time: all pairs' scores at once would take
            # K (K - 1) / 2 rows of memory.
            if i >= 0:
                rows = keep & ((y == i) | (y == j))
                rows &= (columns[i] != -np.inf) & (columns[j] != -np.inf)
                with np.errstate(over="ignore"):
                    score = columns[j, rows] - columns[i, rows]
            else:
                rows = keep & (np.abs(rest_scores[j]) != np.inf)
                score = rest_scores[j, rows]
            table = venn_abers_table(
                score,
                (y[rows] == j).astype(np.float64),
                sample_weight[rows],
                test_weight=unit_weight(scale),
            )
            thresholds.append(table[0])
            p0.append(table[1])
            p1.append(table[2])
            offsets.append(offsets[-1] + table[0].shape[0])
        self.thresholds_ = np.concatenate(thresholds).reshape(-1, 2)
        self.offsets_ = np.array(offsets, dtype=np.intp)
        self.p0_ = np.concatenate(p0)
        self.p1_ = np.concatenate(p1)

    def _check_fitted_state(self):
        super()._check_fitted_state()
        n_classes = len(self.classes_)
        if self._one_vs_one(n_classes):
            expected = [
                (i, j) for i in range(n_classes) for j in range(i + 1, n_classes)
            ]
        else:
            expected = [(-1, k) for k in range(n_classes)]
        n_problems = len(expected)
        problems = check_state_array(self, "problems_", shape=(n_problems, 2))
        # The problems follow from classes_ and multiclass; any other pairing
        # would index the wrong logit columns.
        if problems.dtype.kind not in "iu" or not np.array_equal(problems, expected):
            fail_state(
                self,
                "problems_",
                f"must be the {n_problems} problems of {n_classes} classes "
                f"(multiclass={self.multiclass!r}), got {problems.tolist()!r}",
            )
        offsets = check_state_array(self, "offsets_", shape=(n_problems + 1,))
        if offsets.dtype.kind not in "iu":
            fail_state(self, "offsets_", f"must hold integers, got {offsets.dtype}")
        # Signed: the differences of unsigned offsets would wrap, not go negative.
        offsets = offsets.astype(np.int64)
        # Scores may differ by +-inf (finite logits near the float range): the
        # group bounds are never NaN, but may be infinite.
        thresholds = check_state_array(
            self, "thresholds_", ndim=2, low=-np.inf, high=np.inf
        )
        if thresholds.shape[1] != 2:
            fail_state(
                self,
                "thresholds_",
                f"must have 2 columns, got shape {thresholds.shape}",
            )
        n_groups = thresholds.shape[0]
        if offsets[0] != 0 or offsets[-1] != n_groups or np.any(np.diff(offsets) < 0):
            fail_state(
                self,
                "offsets_",
                f"must rise from 0 to the {n_groups} groups of thresholds_, got "
                f"{offsets.tolist()!r}",
            )
        if np.any(thresholds[:, 0] > thresholds[:, 1]):
            fail_state(self, "thresholds_", "must have each lower bound <= upper")
        for m in range(n_problems):
            # Binary searches need each problem's groups in increasing order.
            block = thresholds[offsets[m] : offsets[m + 1]]
            if np.any(np.diff(block, axis=0) < 0):
                fail_state(
                    self,
                    "thresholds_",
                    f"must be non-decreasing within problem {m}",
                )
        # 2 k + 1 positions per problem of k groups.
        shape = (2 * n_groups + n_problems,)
        p0 = check_state_array(self, "p0_", shape=shape, low=0.0, high=1.0)
        p1 = check_state_array(self, "p1_", shape=shape, low=0.0, high=1.0)
        # The upper probability (test label 1) is never below the lower one.
        if np.any(p0 > p1):
            fail_state(self, "p1_", "must be >= p0_ at every position")

    def _bounds(self, logits):
        """(p0, p1) of every problem on every row, each (n_problems, n_rows)."""
        scores, certain = self._problem_scores(logits)
        position = np.empty(scores.shape, dtype=np.intp)
        # As intp: a loaded state may hold other integers, and uint64 plus the
        # intp positions below would be float64.
        offsets = self.offsets_.astype(np.intp, copy=False)
        for m in range(scores.shape[0]):
            position[m] = _positions(
                self.thresholds_[offsets[m] : offsets[m + 1]], scores[m]
            )
        # Problem m's 2 k + 1 positions follow the earlier problems' positions.
        position += (2 * offsets[:-1] + np.arange(scores.shape[0]))[:, None]
        fixed = certain != -1.0
        p0 = np.where(fixed, certain, self.p0_[position])
        p1 = np.where(fixed, certain, self.p1_[position])
        return p0, p1

    def predict_interval(self, X):
        """The Venn-Abers probabilities ``p0 <= p1`` of every binary problem.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_classes) or (n_samples, 1)
            Logits, as in :meth:`fit`.

        Returns
        -------
        p0 : ndarray of shape (n_samples, n_problems)
            Lower Venn-Abers probability of the positive class of each problem
            of ``problems_``: one column per class (one-vs-rest, the
            probability of that class), or per pair ``(i, j)`` (one-vs-one,
            the probability of ``classes_[j]`` given that the label is
            ``classes_[i]`` or ``classes_[j]``). A binary problem has one
            column: the positive class ``classes_[1]``.
        p1 : ndarray of shape (n_samples, n_problems)
            Upper Venn-Abers probability; ``p0 <= p1`` on every entry.
        """
        logits = self._check_fitted_input(X)
        n_problems = self.problems_.shape[0]
        p0 = np.empty((logits.shape[0], n_problems))
        p1 = np.empty((logits.shape[0], n_problems))
        # Row blocks keep the (n_problems, rows) temporaries near 2**20 values.
        for rows in row_blocks(
            logits.shape[0], self.problems_.shape[0], max_elements=2**20
        ):
            lower, upper = self._bounds(logits[rows])
            p0[rows], p1[rows] = lower.T, upper.T
        return p0, p1

    def _calibrated_logits(self, logits):
        out = np.empty(logits.shape)
        # Row blocks keep the (n_problems, rows) temporaries near 2**20 values.
        for rows in row_blocks(
            logits.shape[0], self.problems_.shape[0], max_elements=2**20
        ):
            out[rows] = self._merged_log_proba(logits[rows])
        return out

    def _merged_log_proba(self, logits):
        p0, p1 = self._bounds(logits)
        unmasked = np.isfinite(logits).T
        if not self._one_vs_one(logits.shape[1]):
            with np.errstate(invalid="ignore"):
                proba = np.where(unmasked, p1 / (1.0 - p0 + p1), 0.0)
        else:
            first, second = self.problems_[:, 0], self.problems_[:, 1]
            both = unmasked[first] & unmasked[second]
            # P(j | i or j) = p1 / (1 - p0 + p1), P(i | i or j) = (1 - p0) / (...)
            denominator = 1.0 - p0 + p1
            with np.errstate(divide="ignore", invalid="ignore"):
                inverse_j = np.where(both, denominator / p1, 0.0)
                inverse_i = np.where(both, denominator / (1.0 - p0), 0.0)
            inverse_sum = np.zeros(unmasked.shape)
            np.add.at(inverse_sum, second, inverse_j)
            np.add.at(inverse_sum, first, inverse_i)
            # With two classes the coupling is the pair's own merged probability.
            count = unmasked.sum(axis=0)
            with np.errstate(divide="ignore"):
                proba = np.where(unmasked, 1.0 / (inverse_sum - (count - 2)), 0.0)
        proba /= proba.sum(axis=0)
        with np.errstate(divide="ignore"):
            return np.log(proba).T
