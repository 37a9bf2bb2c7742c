"""One call for the validation statistics of a clinical prediction model.

:func:`validation_report` gathers what the reporting guidelines (TRIPOD+AI;
Van Calster et al. 2019) ask for, plus the indices of R ``rms::val.prob``,
for a binary outcome (or the top-label confidence of a multiclass model).
"""

from numbers import Integral, Real

import numpy as np
from scipy import stats
from sklearn.metrics import roc_auc_score

from ..utils._compat import Interval, StrOptions, validate_params
from ._binomial import BINOMIAL_METHODS
from ._calibration import calibration_curve
from ._lowess import r_lowess
from ._recalibration import (
    _cox_one,
    _hosmer_lemeshow_one,
    _logistic_calibration_one,
    _spiegelhalter_one,
    clipped_logit,
    effective_weights,
    fit_logistic,
    log_likelihood,
)
from ._smooth_curve import binary_scores, distances, flexible_curve

VAL_PROB_NAMES = (
    "Dxy",
    "C (ROC)",
    "R2",
    "D",
    "D:Chi-sq",
    "D:p",
    "U",
    "U:Chi-sq",
    "U:p",
    "Q",
    "Brier",
    "Intercept",
    "Slope",
    "Emax",
    "E90",
    "Eavg",
    "S:z",
    "S:p",
)


def val_prob_statistics(p, y, w, joint, lowess=True):
    """The statistics of R ``rms::val.prob(p, y)``, by its names.

    ``joint`` is the two-parameter logistic recalibration fit. D, R2 and U
    use the likelihood ratios of R's code: D's chi-square compares the
    predictions taken as they are (intercept 0, slope 1) with the null
    model, U's the recalibrated fit with the predictions as they are.
    Emax, E90 and Eavg are those of ``lowess(p, y, iter = 0)`` (NaN when
    ``lowess`` is False). As rms
    does, C and Dxy rank the probabilities truncated to multiples of 0.0002.
    rms 6.5 prints NA for D:p; here it is the chi-square(1) tail of
    D:Chi-sq.
    """
    n = float(np.sum(w))
    x = clipped_logit(p)
    mean_y = np.dot(w, y) / n
    null_deviance = -2 * log_likelihood(
        np.full_like(x, np.log(mean_y / (1 - mean_y))), y, w
    )
    deviance_as_is = -2 * log_likelihood(x, y, w)
    lr = null_deviance - deviance_as_is
    u_chisq = deviance_as_is + 2 * joint.loglik
    # rms ranks the probabilities truncated to multiples of 0.0002 for its
    # rank correlations (its Fortran tabulates them in 5001 cells):
    # reproduced here; the report's C row is exact.
    auc = roc_auc_score(y, np.floor(p * 5000), sample_weight=w)
    r2 = (1 - np.exp(-lr / n)) / (1 - np.exp(-null_deviance / n))
    d = (lr - 1) / n
    u = (u_chisq - 2) / n
    if lowess:
        # Rows of zero weight do not count: left in, they would take places
        # in the windows of lowess's nearest points.
        counted = w > 0
        p_c, y_c, w_c = p[counted], y[counted], w[counted]
        same = np.all(w_c == w_c[0])
        errors = np.abs(p_c - r_lowess(p_c, y_c, weights=None if same else w_c))
        eavg, _, e90, emax = distances(errors, None if same else w_c)
    else:
        eavg = e90 = emax = np.nan
    spiegelhalter = _spiegelhalter_one(p, y, w)
    values = (
        2 * (auc - 0.5),
        auc,
        r2,
        d,
        lr,
        stats.chi2.sf(lr, 1),
        u,
        u_chisq,
        stats.chi2.sf(u_chisq, 2),
        d - u,
        np.dot(w, (p - y) ** 2) / n,
        joint.coef[0],
        joint.coef[1],
        emax,
        e90,
        eavg,
        spiegelhalter.statistic,
        spiegelhalter.pvalue,
    )
    return {name: float(v) for name, v in zip(VAL_PROB_NAMES, values, strict=True)}


class ValidationReport:
    """Validation statistics of one model's predictions (see :func:`validation_report`).

    Attributes
    ----------
    rows : list of dict
        One row per statistic: ``statistic``, ``value``, ``low``, ``high``,
        ``pvalue`` (NaN where there is none) and ``note``.
    val_prob : dict
        The statistics of R ``rms::val.prob``, by its names.
    logistic : LogisticCalibration
        Calibration intercept, slope and joint intercept with intervals.
    curve : FlexibleCalibrationCurve
        The loess curve, its band, and ICI, E50, E90, Emax.
    binned : CalibrationCurveInterval
        The binned curve with binomial intervals per bin.
    n_samples : int
    n_events : float
        Number (total weight) of positive outcomes.
    """

    def __init__(self, rows, val_prob, logistic, curve, binned, n_samples, n_events):
        self.rows = rows
        self.val_prob = val_prob
        self.logistic = logistic
        self.curve = curve
        self.binned = binned
        self.n_samples = n_samples
        self.n_events = n_events

    def to_frame(self):
        """The rows as a pandas DataFrame indexed by statistic."""
        import pandas as pd

        return pd.DataFrame(self.rows).set_index("statistic")

    def to_text(self):
        """A plain-text table of the rows."""
        lines = [
            f"n = {self.n_samples}, events = {self.n_events:g}",
            f"{'statistic':<44}{'value':>11}{'low':>11}{'high':>11}{'p':>11}",
        ]
        for row in self.rows:
            # Blank where there is no value (NaN); an infinite end of an
            # interval or statistic prints as inf (it was blank too).
            cells = [
                "" if np.isnan(row[k]) else f"{row[k]:.4g}"
                for k in ("value", "low", "high", "pvalue")
            ]
            # 11 wide: a negative value in e-notation takes 10 (-1.991e+04).
            lines.append(
                f"{row['statistic']:<44}" + "".join(f" {c:>10}" for c in cells)
            )
        return "\n".join(lines)

    def __repr__(self):
        return self.to_text()


def _row(statistic, value, low=np.nan, high=np.nan, pvalue=np.nan, note=""):
    return {
        "statistic": statistic,
        "value": float(value),
        "low": float(low),
        "high": float(high),
        "pvalue": float(pvalue),
        "note": note,
    }


@validate_params(
    {
        "y_true": ["array-like"],
        "y_prob": ["array-like"],
        "interval": [StrOptions({"wald", "profile"})],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "span": [Interval(Real, 0, 1, closed="right")],
        "n_groups": [Interval(Integral, 3, None, closed="left")],
        "n_bins": [Interval(Integral, 1, None, closed="left")],
        "bin_interval": [StrOptions(set(BINOMIAL_METHODS))],
        "lowess": ["boolean", None],
        "sample_weight": ["array-like", None],
        "labels": ["array-like", None],
        "external": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def validation_report(
    y_true,
    y_prob,
    *,
    interval="profile",
    confidence_level=0.95,
    span=0.75,
    n_groups=10,
    n_bins=10,
    bin_interval="wilson",
    lowess=None,
    sample_weight=None,
    labels=None,
    external=False,
):
    """Validation statistics of a binary prediction model, as guidelines report them.

    One call for: the calibration intercept (slope fixed at 1) and slope
    with intervals, the joint intercept, Cox's joint test, Spiegelhalter's
    z, Hosmer-Lemeshow (reported for completeness; the guidelines
    discourage it), the loess calibration curve with its band and the
    distances ICI, E50, E90 and Emax, a binned curve with binomial
    intervals, and the indices of R ``rms::val.prob`` (Dxy, C, R2, D, U, Q,
    Brier, Emax, E90, Eavg).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities: a binary problem's positive class (the
        second column, or a 1-D array), or a multiclass model's top-label
        confidence against correctness.
    interval : {"profile", "wald"}, default="profile"
        Intervals of the intercepts and the slope.
    confidence_level : float, default=0.95
        Nominal coverage of every interval and band.
    span : float, default=0.75
        Span of the loess curve.
    n_groups : int, default=10
        Hosmer-Lemeshow groups.
    n_bins : int, default=10
        Equal-mass bins of the binned curve.
    bin_interval : {"wilson", "clopper-pearson", "jeffreys"}, default="wilson"
        Binomial interval of each bin.
    lowess : bool or None, default=None
        Whether to compute ``val.prob``'s Eavg, E90 and Emax from R's
        ``lowess`` (an exact port, whose cost grows as about 100 local fits
        over two thirds of the sample each: a second on 10^5 rows, tens of
        seconds on 10^6). None: only up to 200,000 samples; the loess ICI,
        E50, E90 and Emax, the guidelines' distances, are always computed.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights (relative; see :func:`logistic_calibration`).
    labels : array-like of shape (n_classes,), default=None
        The class of each column of ``y_prob``.
    external : bool, default=False
        Whether the predictions come from a model not fitted on these
        samples: the Hosmer-Lemeshow row then has as many degrees of freedom
        as groups, not two fewer (see :func:`hosmer_lemeshow_test`).

    Returns
    -------
    report : ValidationReport
        ``rows`` (``to_frame()``, ``to_text()``), ``val_prob``,
        ``logistic``, ``curve`` and ``binned``.

    See Also
    --------
    logistic_calibration, flexible_calibration_curve, spiegelhalter_test,
    hosmer_lemeshow_test, cox_calibration_test

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_calib.metrics import validation_report
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.02, 0.98, 1000)
    >>> report = validation_report(rng.uniform(size=1000) < p, p)
    >>> frame = report.to_frame()
    >>> bool(frame.loc["calibration slope", "low"] < 1)
    True
    """
    p, y, w = binary_scores(y_true, y_prob, sample_weight, labels)
    if w is None:
        weights = np.ones_like(p)
    else:
        weights = effective_weights(w)
    counted = y[weights > 0]
    if np.all(counted) or not np.any(counted):
        raise ValueError(
            "validation_report needs both outcomes among the samples of "
            "positive weight; y_true holds only one there."
        )
    level = confidence_level
    logistic = _logistic_calibration_one(p, y, weights, interval, level)
    x = clipped_logit(p)
    identified = np.isfinite(logistic.slope)
    joint = fit_logistic(
        np.column_stack([np.ones_like(x), x]), y, weights, np.zeros_like(x),
        start=[logistic.joint_intercept, logistic.slope] if identified else None,
    )  # fmt: skip
    if lowess is None:
        lowess = p.shape[0] <= 200_000
    vp = val_prob_statistics(p, y, weights, joint, lowess=lowess)
    if not identified:
        # One predicted value: only the fit's likelihood is defined (U, Cox).
        vp["Intercept"] = vp["Slope"] = np.nan
    curve = flexible_curve(
        p, y, w, span=span, degree=2, confidence_level=confidence_level
    )
    auc = roc_auc_score(y, p, sample_weight=weights)
    cox = _cox_one(p, y, weights, joint)
    spiegelhalter = _spiegelhalter_one(p, y, weights)
    hosmer = _hosmer_lemeshow_one(p, y, weights, n_groups, external)
    binned = calibration_curve(
        y, p, n_bins=n_bins, strategy="quantile", multiclass="classwise",
        sample_weight=w, labels=[False, True], interval=bin_interval,
        confidence_level=confidence_level,
    )  # fmt: skip
    binned = type(binned)(*(np.asarray(field)[-1] for field in binned))
    how = f"{interval} {100 * confidence_level:g}% CI"
    rows = [
        _row(
            "calibration intercept (slope fixed at 1)",
            logistic.intercept, logistic.intercept_low, logistic.intercept_high,
            note=f"calibration-in-the-large, offset fit; ideal 0; {how}",
        ),
        _row(
            "calibration slope",
            logistic.slope, logistic.slope_low, logistic.slope_high,
            note=f"ideal 1; below 1: predictions too extreme; {how}",
        ),
        _row(
            "intercept of the joint fit (slope free)",
            logistic.joint_intercept, logistic.joint_intercept_low,
            logistic.joint_intercept_high,
            note=f"val.prob's Intercept; {how}",
        ),
        _row("Cox test: intercept 0 and slope 1 (chi2, 2 df)", cox.statistic,
             pvalue=cox.pvalue, note="likelihood ratio; val.prob's U:Chi-sq"),
        _row("Spiegelhalter z", spiegelhalter.statistic,
             pvalue=spiegelhalter.pvalue),
        _row(f"Hosmer-Lemeshow (chi2, {hosmer.dof} df)", hosmer.statistic,
             pvalue=hosmer.pvalue,
             note=f"{n_groups} risk groups; depends on the grouping, "
             "discouraged by the guidelines"),
        _row("ICI", curve.ici, note=f"loess, span {span}"),
        _row("E50", curve.e50, note="loess"),
        _row("E90", curve.e90, note="loess"),
        _row("Emax", curve.emax, note="loess"),
        _row("C (ROC)", auc, note="discrimination: area under the ROC curve"),
        _row("Dxy", 2 * auc - 1, note="Somers' D: 2 (C - 1/2)"),
        _row("R2", vp["R2"], note="Nagelkerke, of the predictions as they are"),
        _row("D", vp["D"], pvalue=vp["D:p"], note="discrimination index"),
        _row("U", vp["U"], pvalue=vp["U:p"], note="unreliability index"),
        _row("Q", vp["Q"], note="quality index: D - U"),
        _row("Brier", vp["Brier"], note="mean (p - y)^2"),
        _row("Eavg (lowess)", vp["Eavg"], note="val.prob's lowess, f = 2/3"),
        _row("E90 (lowess)", vp["E90"], note="val.prob"),
        _row("Emax (lowess)", vp["Emax"], note="val.prob"),
    ]  # fmt: skip
    return ValidationReport(
        rows,
        vp,
        logistic,
        curve,
        binned,
        int(np.count_nonzero(weights > 0)),
        float(np.dot(np.ones_like(p) if w is None else w, y)),
    )
