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

import numpy as np

from ..utils._math import order_free_softmax, softmax, top_label_correctness

PROBA_FLOOR = 1e-12


def probabilities(logits):
    return softmax(np.asarray(logits, dtype=np.float64))


def sum_slack(n_terms):
    """A bound on the relative rounding of a float64 sum of ``n_terms`` terms.

    Eight times the worst case of a recursive sum of positive terms, ``(n -
    1) eps`` (pairwise sums do better), so that two orders of the same terms
    give sums, and quotients by them, less than half the bound apart.
    """
    return 16.0 * n_terms * np.finfo(np.float64).eps


def near_others(keys, slack, order=None):
    """Rows whose key lies within ``slack`` (either row's) of another row's key.

    ``slack`` is an array (one per row), or a float: a relative slack,
    ``slack * |key|``. ``order`` is ``np.argsort(keys, kind="stable")`` when
    already at hand.
    The calibrators that group or split equal values use it to find the rows
    whose value, summed over the classes in column order, could differ by
    the sums' rounding from that of a row holding the same logits in another
    order (or the classes permuted), and recompute only those in a canonical
    order: sorting every row is several times slower than the fit.
    """
    if order is None:
        # Most sets have no two keys that close: a sort (faster than an
        # argsort) against the largest slack shows it.
        if keys.shape[0] < 2:
            return np.zeros(keys.shape[0], dtype=bool)
        bound = np.max(slack) if np.ndim(slack) else slack * np.max(np.abs(keys))
        if not np.any(np.diff(np.sort(keys)) <= bound):
            return np.zeros(keys.shape[0], dtype=bool)
        order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    if np.ndim(slack) == 0:
        ordered_slack = slack * np.abs(ordered)
    else:
        ordered_slack = slack[order]
    close = np.diff(ordered) <= np.maximum(ordered_slack[1:], ordered_slack[:-1])
    near = np.zeros(keys.shape[0], dtype=bool)
    near[order[1:][close]] = True
    near[order[:-1][close]] = True
    return near


def canonical_probabilities(logits):
    """:func:`probabilities` with each row's sum over its sorted entries.

    The same logits in any column order give the same probabilities (the
    column-order sums may differ by an ulp), to the rounding of the sums of
    :func:`probabilities`.
    """
    return order_free_softmax(np.asarray(logits, dtype=np.float64))


def canonical_bin_index(scores, edges, logits, columns):
    """``np.searchsorted(edges, scores)`` as if the scores were canonical.

    ``scores[i]`` is column ``columns[i]`` of ``probabilities(logits[i])``
    (``columns`` as in :func:`canonical_at`); ``edges`` are increasing inner
    bin edges, a score equal to one belonging to the bin below it. A score
    within its sum's rounding of an edge is recomputed by
    :func:`canonical_probabilities`, so the bin does not depend on the order
    of the columns; the others fall on the side of their canonical value.
    """
    index = np.searchsorted(edges, scores, side="left")
    if edges.shape[0] == 0 or scores.shape[0] == 0:
        return index
    slack = sum_slack(logits.shape[1]) * scores
    below = edges[np.maximum(index - 1, 0)]
    above = edges[np.minimum(index, edges.shape[0] - 1)]
    near = np.flatnonzero(
        (np.abs(scores - below) <= slack) | (np.abs(above - scores) <= slack)
    )
    if near.shape[0] == 0:
        return index
    index[near] = np.searchsorted(
        edges, canonical_at(logits, near, columns), side="left"
    )
    return index


def canonical_near_uniform_edges(scores, n_bins, logits, columns=None):
    """``scores`` with those within their sum's rounding of ``b / n_bins`` canonical.

    The equal-width bins of ``uniform_bin_index`` split at the inner edges
    ``b / n_bins``, where probabilities often lie exactly (the logits
    ``log(votes / 15)`` of a 15-neighbour vote, with the default 15 bins): a
    score summed in column order falls an ulp either side, so permuting the
    classes moved rows to the next bin. Those scores are recomputed by
    :func:`canonical_probabilities`; the others are further from every edge
    than their rounding and fall in their canonical bin already.

    ``scores`` is 1-D (``columns`` as in :func:`canonical_at`), or 2-D with
    one column per logit column (``columns`` unused).
    """
    if scores.size == 0 or n_bins < 2:
        return scores
    scaled = scores * float(n_bins)
    distance = np.rint(scaled)
    np.subtract(scaled, distance, out=distance)
    np.abs(distance, out=distance)
    # Strictly: a score of 0 (a masked class) is no closer than its slack.
    near = distance < sum_slack(logits.shape[1]) * scaled
    # Edges 0 and n_bins bound the first and the last bin: not a split.
    near &= (scaled > 0.5) & (scaled < n_bins - 0.5)
    if not near.any():
        return scores
    scores = scores.copy()
    if scores.ndim == 2:
        rows = np.flatnonzero(near.any(axis=1))
        block, where = scores[rows], near[rows]
        block[where] = canonical_probabilities(logits[rows])[where]
        scores[rows] = block
    else:
        rows = np.flatnonzero(near)
        scores[rows] = canonical_at(logits, rows, columns)
    return scores


def canonical_at(logits, rows, columns):
    """:func:`canonical_probabilities` of ``rows``, at ``columns``.

    ``columns``: an int, one column per row of ``logits`` (not only of
    ``rows``), or None for each row's maximum.
    """
    canonical = canonical_probabilities(logits[rows])
    if columns is None:
        return canonical.max(axis=1)
    cols = columns if np.ndim(columns) == 0 else np.asarray(columns)[rows]
    return canonical[np.arange(rows.shape[0]), cols]


def softmax_log_odds(logits):
    """``log(p_k / (1 - p_k))`` of every softmax probability, stably, in float64.

    The log-odds of class ``k`` are ``z_k - logsumexp_{j != k} z_j``. For a
    class below the row maximum ``m``, ``logsumexp_{j != k} z_j = m + log(S -
    e_k)`` with ``e = exp(z - m)`` and ``S = sum(e)``, where ``S - e_k >= 1``
    loses nothing to cancellation. For the maximal class the others' sum is
    taken relative to the runner-up, so the result stays finite whatever the
    gap (the probability rounds to 1.0 in float64 beyond a gap of ~36.7).
    Columns tied at the maximum get equal log-odds, in any column order.
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
        # Only a single maximum: where the top is tied (S >= 2, no
        # cancellation in S - 1) every tied column keeps the general formula,
        # so tied columns get the same log-odds whatever their order (the
        # runner-up formula sums the row in another order, an ulp apart).
        single = (second < peak)[:, 0]
        out[rows[single], top[single]] = (peak - second)[single, 0] - np.log(
            rest[single]
        )
    # A row with a single finite logit (masked classes) gives +-inf and NaN
    # where the ranking is still clear: the ends of the float64 range.
    out[np.isnan(out)] = np.inf
    return np.clip(out, -np.finfo(np.float64).max, np.finfo(np.float64).max)


def row_magnitudes(logits):
    """Each row's largest finite ``|logit|`` (0 for a row with none)."""
    return np.abs(np.where(np.isfinite(logits), logits, 0.0)).max(axis=1)


def log_odds_slack(logits, log_odds, magnitude=None):
    """A bound on the rounding of :func:`softmax_log_odds` that column order sets.

    Its sums run in column order: the same logits in another order give
    log-odds up to this apart (the sum's rounding, on the scale of the row's
    logits and of the log-odds themselves). ``log_odds`` may be one column
    of them (1-D) or all (2-D); ``magnitude``, each row's largest finite
    ``|logit|``, is computed from ``logits`` when not given.
    """
    if magnitude is None:
        magnitude = row_magnitudes(logits)
    if log_odds.ndim == 2:
        magnitude = magnitude[:, None]
    # inf near the float range: such a row is recomputed whenever it is near
    with np.errstate(over="ignore"):
        return sum_slack(logits.shape[1]) * (1.0 + magnitude + np.abs(log_odds))


# A step between two thresholds this many times the scores' rounding apart
# (or closer) is steep: a score moved by its rounding jumps along it.
_STEEP = 1e3


def _steep_gaps(points, n_classes, magnitude):
    """Whether each gap of the increasing ``points`` is a steep step."""
    bound = _STEEP * sum_slack(n_classes) * (1.0 + magnitude + np.abs(points))
    return np.diff(points) <= np.maximum(bound[:-1], bound[1:])


def steep_points(points, n_classes, magnitude):
    """The increasing ``points`` that bound a steep step of a piecewise map.

    A map interpolating between thresholds ``points`` moves a score's value
    by ``slope * delta`` when the score moves by its rounding ``delta``
    (:func:`log_odds_slack`, at most ``sum_slack * (1 + magnitude + |x|)``
    with ``magnitude`` the largest ``|logit|``). That is what the score's
    rounding costs anywhere inside a step; only where two thresholds lie
    within ``_STEEP`` roundings of each other does it cost the step's whole
    rise. Scores near these points are the ones worth recomputing.
    """
    if points.shape[0] < 2:
        return points[:0]
    steep = _steep_gaps(points, n_classes, magnitude)
    return np.unique(np.concatenate([points[:-1][steep], points[1:][steep]]))


def has_steep_points(maps, n_classes, magnitude):
    """Whether each increasing array of ``maps`` has :func:`steep_points`.

    One pass over all of them (a map's own check costs a few numpy calls,
    which over a thousand classes and every block of rows added up).
    """
    lengths = np.array([points.shape[0] for points in maps], dtype=np.intp)
    found = np.zeros(len(maps), dtype=bool)
    if lengths.sum() < 2:
        return found
    steep = _steep_gaps(np.concatenate(maps), n_classes, magnitude)
    # not a gap: the last point of one map and the first of the next
    owner = np.repeat(np.arange(len(maps)), lengths)
    steep &= owner[1:] == owner[:-1]
    found[owner[1:][steep]] = True
    return found


def near_points(scores, slack, points):
    """Scores within their ``slack`` of one of the increasing ``points``."""
    above = np.minimum(np.searchsorted(points, scores), points.shape[0] - 1)
    below = np.maximum(above - 1, 0)
    return (np.abs(scores - points[above]) <= slack) | (
        np.abs(scores - points[below]) <= slack
    )


def canonical_log_odds(logits):
    """:func:`softmax_log_odds` of each row's sorted logits, in column order.

    The same logits in any column order give the same log-odds. The
    isotonic maps pool equal scores and read steep steps between scores an
    ulp apart: a row summed in another column order (the classes permuted)
    would fall on the other side. Only the rows within
    :func:`log_odds_slack` of another row's score, or of a threshold, are
    recomputed so: sorting every row is slower than the maps.
    """
    order = np.argsort(logits, axis=1, kind="stable")
    ordered = softmax_log_odds(np.take_along_axis(logits, order, axis=1))
    out = np.empty_like(ordered)
    np.put_along_axis(out, order, ordered, axis=1)
    return out


def top_label_targets(proba, y):
    """Confidence of the predicted class and whether it is correct.

    Where ``t > 1`` columns tie at a row's maximum, the prediction is any of
    them: the row counts ``1 / t`` correct when the label is among them (the
    chance that a given tied column is the label), else 0, whatever the
    columns' order; :func:`apply_top_label` gives each tied column the map's
    value.
    """
    rows = np.arange(proba.shape[0])
    predicted = proba.argmax(axis=1)
    confidence = proba[rows, predicted]
    correct = top_label_correctness(proba, np.asarray(y, dtype=np.intp))
    return predicted, confidence, correct


def top_ties(scores, top):
    """``(is_top, n_top)`` of rows whose maximum ``top`` several columns attain.

    ``None`` when every row has a single maximal column.
    """
    is_top = scores == top[:, None]
    n_top = is_top.sum(axis=1)
    if not np.any(n_top > 1):
        return None
    return is_top, n_top


def binary_problems(proba, y, mode, sample_weight, masked):
    """(scores, 0/1 targets, weights) of each binary map: per class, or the top label.

    ``proba`` may be any order-preserving representation of the probabilities
    (the log-odds for isotonic regression). A class's map is fitted on the rows
    where that class is not masked. Only the ratios of the weights matter: they
    are divided by their maximum, so that their scale (1e-310 or 1e300) changes
    no sum's precision.
    """
    sample_weight = sample_weight / sample_weight.max()
    if mode == "top_label":
        _, scores, targets = top_label_targets(proba, y)
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


def masked_classes(logits):
    """Boolean mask of the ``-inf`` (masked) logits, or None when there are none."""
    masked = np.isneginf(logits)
    return masked if masked.any() else None


def apply_top_label(proba, new_confidence, masked=None, predicted=None, tied=None):
    """Set the predicted class to ``new_confidence`` and rescale the others.

    ``tied`` (from :func:`top_ties`, or None) marks the columns that tie at
    each row's maximum: on a row with ``t > 1`` of them, each gets the new
    confidence, at most ``1 / t``, and the other classes share the rest, so
    the result does not depend on the order of the columns.
    """
    rows = np.arange(proba.shape[0])
    if predicted is None:
        predicted = proba.argmax(axis=1)
    old = proba[rows, predicted]
    rest = 1.0 - old
    # Above 1/2, 1 - p cancels (its rounding is eps / (1 - p) of it, and it is
    # 0 once p rounds to 1): the other classes' probabilities, each accurate
    # to its own precision, are summed instead.
    high = np.flatnonzero(old > 0.5)
    if high.shape[0]:
        others = proba[high].copy()
        others[np.arange(high.shape[0]), predicted[high]] = 0.0
        rest[high] = others.sum(axis=1)
    top = None
    if tied is not None:
        is_top, n_top = tied
        several = n_top > 1
        top = np.zeros(proba.shape, dtype=bool)
        top[rows, predicted] = True
        top[several] = is_top[several]
        new_confidence = np.where(
            several, np.minimum(new_confidence, 1.0 / n_top), new_confidence
        )
        # the other classes' total, summed (1 - t p cancels near p = 1 / t)
        rest = np.where(several, np.where(top, 0.0, proba).sum(axis=1), rest)
        # their share of the row: t times the new confidence
        taken = new_confidence * n_top
    else:
        taken = new_confidence
    # Each class's share of the rest first (at most 1, where a rest near the
    # smallest float would overflow (1 - new) / rest); the predicted
    # columns, which may overflow, are set below.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = proba / np.where(rest > 0, rest, 1.0)[:, None]
        out *= np.where(rest > 0, 1.0 - taken, 0.0)[:, None]
    # A row whose other classes were exactly 0 shares the freed mass equally
    # among its other unmasked classes; with none (every other class masked)
    # the row stays one-hot (its t tied classes 1 / t each).
    degenerate = rest <= 0
    if np.any(degenerate):
        open_classes = np.ones((int(degenerate.sum()), proba.shape[1]), dtype=bool)
        if masked is not None:
            open_classes &= ~masked[degenerate]
        open_classes[np.arange(open_classes.shape[0]), predicted[degenerate]] = False
        if top is not None:
            open_classes &= ~top[degenerate]
        n_open = open_classes.sum(axis=1)
        share = np.where(n_open > 0, 1.0 - taken[degenerate], 0.0)
        out[degenerate] = open_classes * (share / np.maximum(n_open, 1))[:, None]
        new_confidence = new_confidence.copy()
        alone = 1.0 if top is None else 1.0 / tied[1][degenerate]
        new_confidence[degenerate] = np.where(
            n_open > 0, new_confidence[degenerate], alone
        )
    if top is None:
        out[rows, predicted] = new_confidence
    else:
        out = np.where(top, new_confidence[:, None], out)
    return out


def finish_one_vs_rest(calibrated, uncalibrated, masked=None):
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
