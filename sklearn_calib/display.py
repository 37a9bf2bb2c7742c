"""Reliability diagrams and risk-coverage curves in scikit-learn's Display API.

matplotlib is imported inside the ``plot`` methods only, so importing this
module (or the package) does not load it.
"""

import warnings
from numbers import Integral, Real

import numpy as np

from .metrics._bin_statistics import Binning, curve_from_statistics, ece_values
from .metrics._binomial import BINOMIAL_METHODS, bin_accuracy_interval
from .metrics._bootstrap import resample_weights
from .metrics._selective import aurc_from_statistics, risk_coverage_statistics
from .utils._compat import check_is_fitted
from .utils._validation import check_metric_inputs, weight_scale


def _bootstrap_accuracy_band(
    binning, sample_weight, n_bootstraps, confidence_level, random_state
):
    """Per-bin percentile interval of the accuracy over bootstrap resamples."""
    accuracies = []
    step = binning.block_rows
    for slab in resample_weights(
        binning.n_samples, n_bootstraps, random_state, sample_weight
    ):
        for start in range(0, slab.shape[0], step):
            stats = binning.statistics(slab[start : start + step])
            with np.errstate(invalid="ignore", divide="ignore"):
                accuracies.append(
                    np.where(stats.count > 0, stats.hit / stats.count, np.nan)
                )
    accuracies = np.concatenate(accuracies)
    alpha = (1 - confidence_level) / 2
    with warnings.catch_warnings():
        # A bin empty in every resample has no interval: NaN, drawn as nothing.
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(accuracies, [alpha, 1 - alpha], axis=0)
    if binning.multiclass == "top-label":
        return low[0], high[0]
    return low, high


def _from_estimator(display, estimator, X, y, name, what, kwargs):
    """``display.from_predictions`` on ``estimator.predict_proba(X)``.

    The estimator's ``classes_`` label the columns and its class name the
    legend, unless given; a TypeError names ``what`` needs probabilities.
    """
    check_is_fitted(estimator)
    if not hasattr(estimator, "predict_proba"):
        raise TypeError(
            f"{type(estimator).__name__} has no predict_proba; {what} needs "
            "predicted probabilities."
        )
    kwargs.setdefault("labels", getattr(estimator, "classes_", None))
    return display.from_predictions(
        y,
        estimator.predict_proba(X),
        name=type(estimator).__name__ if name is None else name,
        **kwargs,
    )


class ReliabilityDisplay:
    """Reliability diagram: per-bin accuracy against mean confidence.

    The diagram shows, for every non-empty bin, the accuracy (fraction of
    correct predictions) against the mean confidence, with the diagonal of
    perfect calibration and, below it, the fraction of samples in each bin.
    Multiclass predictions are shown top-label by default (the confidence
    ``max_k q_ik`` against correctness) or class-wise on request (each
    class's probability against the frequency of that class). Optional
    bootstrap or binomial bands show the per-bin uncertainty of the accuracy.
    Several calibrators are compared by drawing them on the same axes.

    The bins are those of every binned metric of :mod:`sklearn_calib.metrics`
    (``(b/M, (b+1)/M]``, 0 in the first bin, 1 in the last).

    Create it with :meth:`from_estimator` or :meth:`from_predictions`; the
    constructor only stores precomputed values.

    Parameters
    ----------
    accuracy : ndarray of shape (n_bins,) or (n_classes, n_bins)
        Accuracy (class-wise: observed frequency) per bin; NaN in empty bins.
    confidence : ndarray of the same shape
        Mean confidence (class-wise: mean predicted probability) per bin.
    count : ndarray of the same shape
        Total sample weight per bin.
    bin_edges : ndarray of shape (n_bins + 1,) or (n_classes, n_bins + 1)
        Bin edges.
    ece : float, default=None
        The (class-wise) expected calibration error, shown in the legend.
    accuracy_low, accuracy_high : ndarray of the shape of ``accuracy``, default=None
        Bootstrap interval of the accuracy per bin.
    estimator_name : str, default=None
        Name shown in the legend.
    class_labels : array-like of shape (n_classes,), default=None
        Class names of a class-wise diagram.

    Attributes
    ----------
    line_ : matplotlib Line2D or list of Line2D
        The reliability curve (one per class in a class-wise diagram).
    band_ : matplotlib PolyCollection, list of them, or None
        The bootstrap or binomial band(s), when intervals were computed.
    gap_ : matplotlib LineCollection or None
        Vertical segments from each bin's accuracy to its confidence, when
        ``gap=True``.
    ref_line_ : matplotlib Line2D or None
        The diagonal, when drawn by this call.
    hist_ : matplotlib StepPatch, list of them, or None
        The histogram of bin fractions, when drawn.
    ax_ : matplotlib Axes
        Axes of the diagram.
    hist_ax_ : matplotlib Axes or None
        Axes of the histogram.
    figure_ : matplotlib Figure
        Figure holding the axes.

    See Also
    --------
    sklearn_calib.metrics.calibration_curve : The values plotted.
    sklearn.calibration.CalibrationDisplay : Binary, positive-class diagram.

    References
    ----------
    .. [1] M. H. DeGroot and S. E. Fienberg, "The Comparison and Evaluation of
       Forecasters", Journal of the Royal Statistical Society D 32, 1983.
    .. [2] C. Guo, G. Pleiss, Y. Sun and K. Q. Weinberger, "On Calibration of
       Modern Neural Networks", ICML 2017.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from scipy.special import softmax
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.datasets import load_logits
    >>> from sklearn_calib.display import ReliabilityDisplay
    >>> data = load_logits("c10_resnet50_cross_entropy_smart")
    >>> raw = ReliabilityDisplay.from_predictions(
    ...     data.y_test, softmax(data.logits_test, axis=1), name="raw")
    >>> ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
    >>> disp = ReliabilityDisplay.from_estimator(
    ...     ts, data.logits_test, data.y_test, ax=raw.ax_, hist_ax=raw.hist_ax_,
    ...     name="TS")
    >>> len(disp.ax_.get_lines())   # diagonal, raw, TS
    3
    """

    def __init__(
        self,
        *,
        accuracy,
        confidence,
        count,
        bin_edges,
        ece=None,
        accuracy_low=None,
        accuracy_high=None,
        estimator_name=None,
        class_labels=None,
    ):
        self.accuracy = accuracy
        self.confidence = confidence
        self.count = count
        self.bin_edges = bin_edges
        self.ece = ece
        self.accuracy_low = accuracy_low
        self.accuracy_high = accuracy_high
        self.estimator_name = estimator_name
        self.class_labels = class_labels

    def plot(
        self,
        ax=None,
        *,
        hist_ax=None,
        name=None,
        ref_line=True,
        histogram=True,
        gap=False,
        **kwargs,
    ):
        """Draw the diagram.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on. None creates a figure with the diagram above a
            histogram axes. Pass the ``ax_`` of another display to overlay
            calibrators.
        hist_ax : matplotlib Axes, default=None
            Axes for the histogram when ``ax`` is given (for example the
            ``hist_ax_`` of another display); without it no histogram is drawn
            on a given ``ax``.
        name : str, default=None
            Legend name; defaults to ``estimator_name``.
        ref_line : bool, default=True
            Draw the diagonal of perfect calibration (once per axes).
        histogram : bool, default=True
            Draw the fraction of samples per bin below the diagram.
        gap : bool, default=False
            Draw vertical segments between each bin's accuracy and confidence.
        **kwargs : dict
            Passed to ``matplotlib.axes.Axes.plot`` for the curve(s).

        Returns
        -------
        display : ReliabilityDisplay
            This object, with the artists stored as attributes.
        """
        import matplotlib.pyplot as plt

        if ax is None:
            if histogram:
                fig, (ax, hist_ax) = plt.subplots(
                    2,
                    1,
                    sharex=True,
                    figsize=(5, 6),
                    gridspec_kw={"height_ratios": [3, 1]},
                )
            else:
                fig, ax = plt.subplots(figsize=(5, 5))
        name = self.estimator_name if name is None else name
        classwise = np.ndim(self.accuracy) == 2

        self.ref_line_ = None
        if ref_line:
            _, legend_labels = ax.get_legend_handles_labels()
            if "Perfectly calibrated" not in legend_labels:
                (self.ref_line_,) = ax.plot(
                    [0, 1],
                    [0, 1],
                    linestyle=":",
                    color="black",
                    label="Perfectly calibrated",
                )

        rows = np.atleast_2d(self.accuracy)
        lines, bands, hists = [], [], []
        for k in range(rows.shape[0]):
            label = self._label(name, k if classwise else None)
            acc = np.atleast_2d(self.accuracy)[k]
            conf = np.atleast_2d(self.confidence)[k]
            shown = np.atleast_2d(self.count)[k] > 0
            (line,) = ax.plot(
                conf[shown], acc[shown], marker="s", markersize=4, label=label, **kwargs
            )
            lines.append(line)
            if self.accuracy_low is not None:
                low = np.atleast_2d(self.accuracy_low)[k]
                high = np.atleast_2d(self.accuracy_high)[k]
                banded = shown & np.isfinite(low) & np.isfinite(high)
                bands.append(
                    ax.fill_between(
                        conf[banded],
                        low[banded],
                        high[banded],
                        color=line.get_color(),
                        alpha=0.2,
                        linewidth=0,
                    )
                )
            if histogram and hist_ax is not None:
                count = np.atleast_2d(self._histogram_count())[k]
                edges = np.atleast_2d(self.bin_edges)[k]
                hists.append(
                    hist_ax.stairs(
                        count / count.sum(), edges, color=line.get_color(), label=label
                    )
                )

        self.gap_ = None
        if gap:
            acc, conf = np.ravel(self.accuracy), np.ravel(self.confidence)
            shown = np.ravel(self.count) > 0
            self.gap_ = ax.vlines(
                conf[shown],
                acc[shown],
                conf[shown],
                color="tab:red",
                alpha=0.6,
                label="Gap",
            )

        if classwise:
            ax.set(
                xlabel=None if hist_ax is not None else "Predicted probability",
                ylabel="Observed frequency",
            )
        else:
            ax.set(
                xlabel=None if hist_ax is not None else "Confidence", ylabel="Accuracy"
            )
        ax.set(xlim=(0, 1), ylim=(0, 1))
        ax.legend(loc="upper left")
        if hist_ax is not None and histogram:
            hist_ax.set(
                xlim=(0, 1),
                xlabel="Predicted probability" if classwise else "Confidence",
                ylabel="Fraction of samples",
            )
        self.line_ = lines if classwise else lines[0]
        self.band_ = (bands if classwise else bands[0]) if bands else None
        self.hist_ = (hists if classwise else hists[0]) if hists else None
        self.ax_ = ax
        self.hist_ax_ = hist_ax if histogram else None
        self.figure_ = ax.figure
        return self

    def _histogram_count(self):
        """The counts whose fractions the histogram shows, free of overflow.

        Those of the weights divided by a power of two when
        :meth:`from_predictions` computed them, else ``count`` divided by
        the power of two nearest below its largest finite entry (exact):
        the fractions are those of ``count``, without its sum overflowing.
        """
        scaled = getattr(self, "_scaled_count", None)
        count = np.asarray(self.count, dtype=np.float64)
        if scaled is not None and np.shape(scaled) == count.shape:
            return scaled
        if count.size and np.all(np.isfinite(count)):
            return count / weight_scale(count)
        return count

    def _label(self, name, k):
        parts = []
        if name is not None:
            parts.append(str(name))
        if k is not None:
            cls = self.class_labels[k] if self.class_labels is not None else k
            parts.append(f"class {cls}")
        elif self.ece is not None:
            parts.append(f"ECE {100 * self.ece:.2f}%")
        return ", ".join(parts) if parts else None

    @classmethod
    def from_predictions(
        cls,
        y_true,
        y_prob,
        *,
        n_bins=15,
        strategy="uniform",
        multiclass="top-label",
        sample_weight=None,
        labels=None,
        n_bootstraps=0,
        confidence_level=0.95,
        random_state=None,
        interval=None,
        name=None,
        ax=None,
        hist_ax=None,
        ref_line=True,
        histogram=True,
        gap=False,
        **kwargs,
    ):
        """Reliability diagram of predicted probabilities.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels.
        y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
            Predicted probabilities (a 1-D array: positive-class
            probabilities of a binary problem).
        n_bins : int, default=15
            Number of bins.
        strategy : {"uniform", "quantile"}, default="uniform"
            Equal-width or equal-mass bins.
        multiclass : {"top-label", "classwise"}, default="top-label"
            Top-label diagram, or one curve per class.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights.
        labels : array-like of shape (n_classes,), default=None
            The class of each column of ``y_prob``.
        n_bootstraps : int, default=0
            Number of bootstrap resamples for the per-bin accuracy bands; 0
            draws no band.
        confidence_level : float, default=0.95
            Coverage of the bands.
        random_state : int, RandomState instance or None, default=None
            Seeds the bootstrap.
        interval : {"bootstrap", "clopper-pearson", "wilson", "jeffreys"} or \
                None, default=None
            The per-bin band: bootstrap percentiles (needs ``n_bootstraps``),
            or a binomial interval of each bin's accuracy (see
            :func:`~sklearn_calib.metrics.binomial_interval`), which, unlike
            the bootstrap, does not collapse on bins that are all correct or
            all wrong. None: bootstrap when ``n_bootstraps > 0``, else no band.
        name : str, default=None
            Legend name.
        ax, hist_ax, ref_line, histogram, gap, **kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : ReliabilityDisplay
        """
        if multiclass not in ("top-label", "classwise"):
            raise ValueError(
                f"multiclass must be 'top-label' or 'classwise', got {multiclass!r}."
            )
        if strategy not in ("uniform", "quantile"):
            raise ValueError(
                f"strategy must be 'uniform' or 'quantile', got {strategy!r}."
            )
        if not isinstance(n_bins, Integral) or isinstance(n_bins, bool) or n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}.")
        if (
            not isinstance(n_bootstraps, Integral)
            or isinstance(n_bootstraps, bool)
            or n_bootstraps < 0
        ):
            raise ValueError(
                f"n_bootstraps must be a non-negative integer, got {n_bootstraps!r}."
            )
        if (
            not isinstance(confidence_level, Real)
            or isinstance(confidence_level, bool)
            or not 0 < confidence_level < 1
        ):
            raise ValueError(
                f"confidence_level must lie in (0, 1), got {confidence_level!r}."
            )
        if interval is not None and interval not in ("bootstrap", *BINOMIAL_METHODS):
            raise ValueError(
                "interval must be None, 'bootstrap', 'clopper-pearson', 'wilson' "
                f"or 'jeffreys', got {interval!r}."
            )
        y_codes, y_prob, sample_weight, classes = check_metric_inputs(
            y_true, y_prob, sample_weight=sample_weight, labels=labels
        )
        binning = Binning(
            y_codes, y_prob, n_bins=n_bins, strategy=strategy, multiclass=multiclass
        )
        # The bins are filled with the weights divided by a power of two
        # (exact), so that their sums cannot overflow: the values depend on
        # the weights' ratios only. The counts are given in the caller's
        # scale (inf where their sum exceeds float64's range).
        unit = weight_scale(sample_weight)
        if sample_weight is not None:
            sample_weight = sample_weight / unit
        stats = binning.statistics(sample_weight)
        curve = curve_from_statistics(stats, multiclass)
        if interval is None and n_bootstraps:
            interval = "bootstrap"
        low = high = None
        if interval in BINOMIAL_METHODS:
            low, high = bin_accuracy_interval(
                curve,
                y_codes,
                y_prob,
                sample_weight,
                multiclass=multiclass,
                strategy=strategy,
                method=interval,
                confidence_level=confidence_level,
            )
        elif interval == "bootstrap":
            if not n_bootstraps:
                raise ValueError(
                    "interval='bootstrap' needs n_bootstraps > 0 resamples."
                )
            low, high = _bootstrap_accuracy_band(
                binning, sample_weight, n_bootstraps, confidence_level, random_state
            )
        with np.errstate(over="ignore"):
            count = curve.count * unit
        display = cls(
            accuracy=curve.accuracy,
            confidence=curve.confidence,
            count=count,
            bin_edges=curve.bin_edges,
            ece=float(ece_values(stats)[0].mean()),
            accuracy_low=low,
            accuracy_high=high,
            estimator_name=name,
            class_labels=classes if multiclass == "classwise" else None,
        )
        # The histogram's fractions, from the counts in the weights' scale
        # (finite even where the caller's counts overflow).
        display._scaled_count = curve.count
        return display.plot(
            ax=ax,
            hist_ax=hist_ax,
            ref_line=ref_line,
            histogram=histogram,
            gap=gap,
            **kwargs,
        )

    @classmethod
    def from_estimator(cls, estimator, X, y, *, name=None, **kwargs):
        """Reliability diagram of a fitted classifier's ``predict_proba`` on ``X``.

        Parameters
        ----------
        estimator : fitted classifier
            Any classifier with ``predict_proba`` and ``classes_`` (a
            calibrator of this library, a ``CalibratedClassifier``, ...).
        X : array-like
            Its input (logits for a calibrator).
        y : array-like of shape (n_samples,)
            True labels.
        name : str, default=None
            Legend name; defaults to the estimator's class name.
        **kwargs : dict
            Passed to :meth:`from_predictions`.

        Returns
        -------
        display : ReliabilityDisplay
        """
        return _from_estimator(
            cls, estimator, X, y, name, "a reliability diagram", kwargs
        )


class RiskCoverageDisplay:
    """Risk-coverage curve of selective prediction.

    A selective classifier abstains when its confidence is below a
    threshold. The curve shows, for every threshold, the fraction of samples
    accepted (coverage) against the error rate among them (selective risk),
    from the most confident sample alone to every sample (risk = error
    rate). A lower curve is better; its area is the AURC. Optionally the
    curve of the ideal confidence (every correct prediction first) is drawn
    as a reference. Several calibrators are compared on the same axes.

    Create it with :meth:`from_estimator` or :meth:`from_predictions`; the
    constructor only stores precomputed values.

    Parameters
    ----------
    coverage : ndarray of shape (n_points,)
        Fraction of samples accepted at each threshold, increasing.
    risk : ndarray of shape (n_points,)
        Selective risk at each threshold.
    aurc : float, default=None
        Area under the curve, shown in the legend.
    ideal_coverage, ideal_risk : ndarray, default=None
        The curve of the ideal confidence at the same accuracy.
    estimator_name : str, default=None
        Name shown in the legend.

    Attributes
    ----------
    line_ : matplotlib Line2D
        The risk-coverage curve.
    ideal_line_ : matplotlib Line2D or None
        The ideal curve, when drawn.
    ax_ : matplotlib Axes
        Axes of the plot.
    figure_ : matplotlib Figure
        Figure holding the axes.

    See Also
    --------
    sklearn_calib.selective.risk_coverage_curve : The values plotted.
    sklearn_calib.selective.aurc : The area under the curve.

    References
    ----------
    .. [1] Y. Geifman and R. El-Yaniv, "Selective Classification for Deep
       Neural Networks", NeurIPS 2017.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn_calib import TemperatureScaling
    >>> from sklearn_calib.display import RiskCoverageDisplay
    >>> from sklearn_calib.utils._testing import make_logits
    >>> logits, y = make_logits(n_samples=2000, n_classes=4, seed=0)
    >>> proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    >>> raw = RiskCoverageDisplay.from_predictions(y, proba, name="raw")
    >>> ts = TemperatureScaling(device="cpu").fit(logits, y)
    >>> disp = RiskCoverageDisplay.from_estimator(ts, logits, y, ax=raw.ax_,
    ...                                           name="TS", ideal=False)
    >>> len(disp.ax_.get_lines())   # raw, its ideal curve, TS
    3
    """

    def __init__(
        self,
        *,
        coverage,
        risk,
        aurc=None,
        ideal_coverage=None,
        ideal_risk=None,
        estimator_name=None,
    ):
        self.coverage = coverage
        self.risk = risk
        self.aurc = aurc
        self.ideal_coverage = ideal_coverage
        self.ideal_risk = ideal_risk
        self.estimator_name = estimator_name

    def plot(self, ax=None, *, name=None, ideal=True, **kwargs):
        """Draw the curve.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; None creates a figure. Pass the ``ax_`` of
            another display to compare models.
        name : str, default=None
            Legend name; defaults to ``estimator_name``.
        ideal : bool, default=True
            Also draw the ideal curve (dotted, in the same colour), when it
            was computed.
        **kwargs : dict
            Passed to ``matplotlib.axes.Axes.plot`` for the curve.

        Returns
        -------
        display : RiskCoverageDisplay
            This object, with the artists stored as attributes.
        """
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5, 4))
        name = self.estimator_name if name is None else name
        parts = [str(name)] if name is not None else []
        if self.aurc is not None:
            parts.append(f"AURC {self.aurc:.4f}")
        (self.line_,) = ax.plot(
            self.coverage, self.risk, label=", ".join(parts) or None, **kwargs
        )
        self.ideal_line_ = None
        if ideal and self.ideal_coverage is not None:
            (self.ideal_line_,) = ax.plot(
                self.ideal_coverage,
                self.ideal_risk,
                linestyle=":",
                color=self.line_.get_color(),
                label=f"{name}, ideal" if name is not None else "ideal",
            )
        ax.set(xlabel="Coverage", ylabel="Selective risk (error rate)", xlim=(0, 1))
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(loc="upper left")
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    @classmethod
    def from_predictions(
        cls,
        y_true,
        y_prob,
        *,
        confidence=None,
        sample_weight=None,
        labels=None,
        name=None,
        ax=None,
        ideal=True,
        **kwargs,
    ):
        """Risk-coverage curve of predicted probabilities.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels.
        y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
            Predicted probabilities; the prediction is the most probable
            column.
        confidence : array-like of shape (n_samples,), default=None
            Score by which samples are accepted; None uses the probability
            of the predicted class.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative frequency weights.
        labels : array-like of shape (n_classes,), default=None
            The class of each column of ``y_prob``.
        name : str, default=None
            Legend name.
        ax, ideal, **kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : RiskCoverageDisplay
        """
        stats = risk_coverage_statistics(
            y_true, y_prob, confidence, sample_weight, labels
        )
        area, _ = aurc_from_statistics(stats)
        errors = float(stats.cum_loss[-1])
        right = stats.total - errors
        # The ideal curve: the correct predictions first (risk 0), then the
        # errors, whose risk climbs to the error rate.
        steps = np.linspace(0.0, 1.0, 101)[1:]
        first = min(float(stats.cum_mass[0]), right)
        accepted = np.concatenate(
            [
                [first, right] if right > 0 else [],
                right + errors * steps if errors > 0 else [],
            ]
        )
        ideal_risk = np.maximum(accepted - right, 0.0) / accepted
        display = cls(
            coverage=stats.cum_mass / stats.total,
            risk=stats.cum_loss / stats.cum_mass,
            aurc=area,
            ideal_coverage=accepted / stats.total,
            ideal_risk=ideal_risk,
            estimator_name=name,
        )
        return display.plot(ax=ax, ideal=ideal, **kwargs)

    @classmethod
    def from_estimator(cls, estimator, X, y, *, name=None, **kwargs):
        """Risk-coverage curve of a fitted classifier's ``predict_proba`` on ``X``.

        Parameters
        ----------
        estimator : fitted classifier
            Any classifier with ``predict_proba`` and ``classes_`` (a
            calibrator of this library, a conformal classifier, ...).
        X : array-like
            Its input (logits for a calibrator).
        y : array-like of shape (n_samples,)
            True labels.
        name : str, default=None
            Legend name; defaults to the estimator's class name.
        **kwargs : dict
            Passed to :meth:`from_predictions`.

        Returns
        -------
        display : RiskCoverageDisplay
        """
        return _from_estimator(
            cls, estimator, X, y, name, "a risk-coverage curve", kwargs
        )
