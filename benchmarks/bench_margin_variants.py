"""Variants of the recommended default measured and not adopted (issue 26).

Two directions of issue 26, built on the shipped ``MarginTemperatureScaling``:

**A principled fallback** to a less flexible map where the data cannot
support more. ``LooMarginTemperature`` fits the default as shipped, then
estimates the held-out NLL of its margin temperature on the rows it was
fitted to (the base's out-of-fold log-probabilities) by approximate
leave-one-out, one Newton step per row:

    NLL_loo ~ sum_i w_i NLL_i(u) + sum_i w_i^2 g_i' H^-1 g_i

with ``g_i`` the gradient of row i's NLL in the knot values ``u`` and ``H``
the Hessian of the whole objective (NLL, smooth ECE and ridge; the ECE
term's dependence on row i is left out). The base's own NLL on those rows
is already held out. ``LooMarginTemperature`` keeps the margin temperature
only where its estimate is below the base's; ``LooGridMarginTemperature``
also refits it with 4, 16 and 64 times the ridge and keeps the lowest
estimate of the five.

**A pooled base** instead of the selector's single choice, against the
noise of choosing among temperature, structured vector and structured
matrix scaling by 5 folds: ``PooledBaseMarginTemperature`` takes the three
candidates' out-of-fold log-probabilities on the same folds, fits
non-negative weights ``v`` of their log-linear pool
``log_softmax(sum_c v_c log p_c)`` by NLL on them (convex), fits the margin
temperature on the pooled out-of-fold rows, and predicts with the pool of
the three candidates refitted on all rows.

Two more, measured in the third session of 2026-12-07, against the two
sources of the small-set NLL excess (the base's choice and the smooth-ECE
term fitted to the noise of few rows):

**A noise-scaled ECE weight** (``NoiseWeightMarginTemperature``): the
smooth-ECE weight times the share of the base's apparent miscalibration on
its out-of-fold rows that sampling noise does not explain,
``max(0, 1 - (E0 / S)^2)``. ``S`` is the binned top-label calibration gap
``sum_b |sum_{i in b} w_i (1[correct_i] - c_i)|`` over the temperature's
``n_bins`` equal-width confidence bins, ``E0`` its expected value under
perfect calibration, ``sqrt(2 / pi) sum_b sqrt(sum_{i in b} w_i^2 c_i (1 -
c_i))`` (a normal approximation of each bin's sum). No row count enters.

**A paired base choice** (``PairedBaseMarginTemperature``): the three
candidates' out-of-fold predictions on the same folds; a structured map is
eligible only where its fold NLLs beat temperature scaling's on average by
more than one standard error of the paired fold differences (a one-sided
test at about 84 %), and the best eligible candidate is the base; with
``ece_weight`` 1, 0 or the noise-scaled weight above.

Parts (``--part``):

- ``check``: the estimate against exact leave-one-out (300 refits) on 300
  rows of a CIFAR-100 set.
- ``quality``: the 20 public sets, fit on val, scored on test
  (``bench_quality``'s tables; ``--out`` writes ``<name>_quality``).
- ``small``: 100, 300 and 1,000 val rows, 5 draws (``bench_small_n``'s
  tables; ``--out`` writes ``<name>_small``).

Run ``python benchmarks/bench_margin_variants.py --part check|quality|small
[--out DIR] [--name bench_margin_variants] [--only NAMES]``; ``--only``
(comma-separated name fragments) picks the variants, by default the first
two directions (``--only "MarginTemperatureScaling,noise,paired"`` for the
later ones).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_set  # noqa: E402

from sklearn_calib import (  # noqa: E402
    MarginTemperatureScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
)
from sklearn_calib.utils._math import log_softmax  # noqa: E402


def loo_nll(log_proba, y, weights, left, right_weight, values, **objective):
    """(training NLL, approximate leave-one-out NLL) of the knot ``values``."""
    import torch

    from sklearn_calib._torch._margin import _Objective

    weights = weights / weights.sum()
    shifted = log_proba - log_proba.max(axis=1, keepdims=True)
    problem = _Objective(
        torch.tensor(shifted),
        torch.tensor(y),
        torch.tensor(weights),
        torch.tensor(left),
        torch.tensor(right_weight),
        **objective,
    )
    hessian = problem.hessian(values)
    rows = np.arange(y.shape[0])
    design = np.zeros((y.shape[0], values.shape[0]))
    if values.shape[0] == 1:
        design[:] = 1.0
    else:
        design[rows, left] = 1.0 - right_weight
        design[rows, left + 1] = right_weight
    beta = np.exp(design @ values)
    calibrated = log_softmax(shifted * beta[:, None])
    proba = np.exp(calibrated)
    true = shifted[rows, y]
    nll = -calibrated[rows, y]
    # d NLL_i / d u = (E_q[l] - l_y) beta_i times the interpolation weights
    slope = ((proba * shifted).sum(axis=1) - true) * beta
    leverage = np.einsum("ij,jk,ik->i", design, np.linalg.inv(hessian), design)
    train = float(weights @ nll)
    return train, train + float((weights**2 * slope**2) @ leverage)


class LooMarginTemperature(MarginTemperatureScaling):
    """The shipped fit, then the margin temperature kept by leave-one-out NLL.

    ``_strategy`` "fallback": kept or dropped; "grid": also refitted with 4,
    16 and 64 times the ridge (``LooGridMarginTemperature``).
    """

    _strategy = "fallback"

    def _training_log_proba(self, logits, y, sample_weight):
        self._rows = super()._training_log_proba(logits, y, sample_weight)
        return self._rows

    def _fit(self, logits, y, sample_weight):
        import torch

        from sklearn_calib._margin.features import logit_margins
        from sklearn_calib._torch._margin import fit_margin_temperature, interpolation

        super()._fit(logits, y, sample_weight)
        log_proba = self.__dict__.pop("_rows")
        weights = sample_weight / sample_weight.max()
        left, right_weight = interpolation(logit_margins(log_proba), self.knots_)
        shape = {"n_bins": self.n_bins, "sigma": self.sigma, "delta": self.delta}
        rows = np.arange(y.shape[0])
        base_nll = float(weights @ -log_proba[rows, y] / weights.sum())
        fitted = self.log_inverse_temperature_
        options = [(base_nll, np.zeros_like(fitted))]
        alphas = [self.alpha_]
        if self._strategy == "grid":
            alphas += [self.alpha_ * f for f in (4.0, 16.0, 64.0)]
        shifted = torch.tensor(log_proba - log_proba.max(axis=1, keepdims=True))
        for alpha in alphas:
            if alpha != self.alpha_:
                fitted = fit_margin_temperature(
                    shifted,
                    torch.tensor(y.astype(np.int64)),
                    torch.tensor(weights),
                    torch.tensor(left.astype(np.int64)),
                    torch.tensor(right_weight),
                    self.knots_.shape[0],
                    ece_weight=self.ece_weight,
                    alpha=alpha,
                    max_iter=self.max_iter,
                    tol=self.tol,
                    **shape,
                ).log_inverse_temperature
            _, estimate = loo_nll(
                log_proba,
                y,
                weights,
                left,
                right_weight,
                fitted,
                ece_weight=self.ece_weight,
                alpha=alpha,
                **shape,
            )
            options.append((estimate, fitted))
        self.choice_ = min(range(len(options)), key=lambda i: options[i][0])
        self.log_inverse_temperature_ = options[self.choice_][1]


def pool_weights(log_probas, y, weights):
    """Non-negative ``v`` minimising the NLL of ``log_softmax(sum_c v_c l_c)``."""
    from scipy.optimize import minimize

    weights = weights / weights.sum()
    rows = np.arange(y.shape[0])

    def nll_and_gradient(v):
        pooled = log_softmax(sum(vc * lp for vc, lp in zip(v, log_probas, strict=True)))
        proba = np.exp(pooled)
        nll = -(weights @ pooled[rows, y])
        gradient = [
            weights @ ((proba * lp).sum(axis=1) - lp[rows, y]) for lp in log_probas
        ]
        return nll, np.asarray(gradient)

    start = np.zeros(len(log_probas))
    start[0] = 1.0
    bounds = [(0.0, None)] * len(log_probas)
    return minimize(
        nll_and_gradient, start, jac=True, method="L-BFGS-B", bounds=bounds
    ).x


class LooGridMarginTemperature(LooMarginTemperature):
    _strategy = "grid"


def default_candidates_out_of_fold(estimator, logits, y, sample_weight):
    """The default's three candidates on ``estimator``'s folds.

    Returns ``(candidates, out_of_fold, fold_nll)``: the unfitted candidates,
    each one's out-of-fold log-probabilities, and its weighted NLL per fold.
    """
    from sklearn.base import clone

    from sklearn_calib._meta.cross_validation import cv_splits, with_code_classes

    kinds = (TemperatureScaling, StructuredVectorScaling, StructuredMatrixScaling)
    candidates = [
        with_code_classes(kind(device=estimator.device), logits.shape[1])
        for kind in kinds
    ]
    splits = cv_splits(estimator.cv, logits, y)
    out_of_fold, fold_nll = [], []
    for candidate in candidates:
        oof = np.empty(logits.shape)
        scores = []
        for train, test in splits:
            fitted = clone(candidate).fit(
                logits[train], y[train], sample_weight=sample_weight[train]
            )
            oof[test] = log_softmax(fitted.transform(logits[test]))
            w = sample_weight[test]
            true = oof[test][np.arange(test.shape[0]), y[test]]
            scores.append(-(w @ true) / w.sum())
        out_of_fold.append(oof)
        fold_nll.append(scores)
    return candidates, out_of_fold, fold_nll


class PooledBaseMarginTemperature(MarginTemperatureScaling):
    """The margin temperature on a log-linear pool of the default's candidates."""

    def _training_log_proba(self, logits, y, sample_weight):
        from sklearn.base import clone

        candidates, out_of_fold, _ = default_candidates_out_of_fold(
            self, logits, y, sample_weight
        )
        self.pool_weights_ = pool_weights(out_of_fold, y, sample_weight)
        self.pool_ = [
            clone(c).fit(logits, y, sample_weight=sample_weight) for c in candidates
        ]
        # a fitted calibrator for the checks of the fitted state
        self.base_ = self.pool_[int(np.argmax(self.pool_weights_))]
        return self._pooled(out_of_fold)

    def _pooled(self, log_probas):
        weights = self.pool_weights_
        pooled = sum(v * lp for v, lp in zip(weights, log_probas, strict=True))
        return log_softmax(pooled)

    def _base_log_proba(self, logits):
        return self._pooled(
            [
                log_softmax(np.asarray(c.transform(logits), dtype=np.float64))
                for c in self.pool_
            ]
        )


def ece_signal(log_proba, y, weights, n_bins):
    """The share of the binned calibration gap that noise does not explain.

    ``max(0, 1 - (E0 / S)^2)`` with ``S`` the top-label gap summed over
    ``n_bins`` equal-width confidence bins (those of the library's ECE) and
    ``E0`` its expected value under perfect calibration (normal
    approximation of each bin's sum).
    """
    from sklearn_calib.metrics._bin_statistics import uniform_bin_index

    proba = np.exp(log_proba)
    confidence = proba.max(axis=1)
    correct = (proba.argmax(axis=1) == y).astype(np.float64)
    # The library's ECE bins, (b/M, (b+1)/M].
    bins = uniform_bin_index(confidence, n_bins)
    gap = np.abs(np.bincount(bins, weights * (correct - confidence), n_bins)).sum()
    variance = np.bincount(bins, weights**2 * confidence * (1 - confidence), n_bins)
    noise = np.sqrt(2.0 / np.pi) * np.sqrt(variance).sum()
    return 0.0 if gap <= 0 else max(0.0, 1.0 - (noise / gap) ** 2)


class NoiseWeightMarginTemperature(MarginTemperatureScaling):
    """The shipped fit with the ECE weight scaled by ``ece_signal``.

    The weight used is stored as ``ece_weight_``; the parameter is restored
    after the fit.
    """

    _noise_weight = True

    def fit(self, X, y, sample_weight=None):
        given = self.ece_weight
        try:
            return super().fit(X, y, sample_weight=sample_weight)
        finally:
            self.ece_weight = given

    def _training_log_proba(self, logits, y, sample_weight):
        rows = super()._training_log_proba(logits, y, sample_weight)
        self._scale_ece_weight(rows, y, sample_weight)
        return rows

    def _scale_ece_weight(self, log_proba, y, sample_weight):
        # Read by _fit after this method; fit() restores the parameter.
        if self._noise_weight:
            signal = ece_signal(log_proba, y, sample_weight, self.n_bins)
            self.ece_weight = self.ece_weight * signal
        self.ece_weight_ = self.ece_weight


def paired_choice(fold_nll):
    """The base: the best candidate among those that beat the first.

    ``fold_nll``: (candidates, folds). Candidate c > 0 is eligible where the
    mean of ``fold_nll[c] - fold_nll[0]`` plus its standard error is below 0.
    """
    fold_nll = np.asarray(fold_nll)
    eligible = [0]
    for c in range(1, fold_nll.shape[0]):
        difference = fold_nll[c] - fold_nll[0]
        error = difference.std(ddof=1) / np.sqrt(difference.shape[0])
        if difference.mean() + error < 0:
            eligible.append(c)
    return min(eligible, key=lambda c: fold_nll[c].mean())


class PairedBaseMarginTemperature(NoiseWeightMarginTemperature):
    """The margin temperature on the base chosen by ``paired_choice``."""

    _noise_weight = False

    def _training_log_proba(self, logits, y, sample_weight):
        from sklearn.base import clone

        candidates, out_of_fold, fold_nll = default_candidates_out_of_fold(
            self, logits, y, sample_weight
        )
        self.choice_ = paired_choice(fold_nll)
        self.base_ = clone(candidates[self.choice_]).fit(
            logits, y, sample_weight=sample_weight
        )
        rows = out_of_fold[self.choice_]
        self._scale_ece_weight(rows, y, sample_weight)
        return rows


class PairedBaseNoiseWeightMarginTemperature(PairedBaseMarginTemperature):
    _noise_weight = True


def variants():
    """name -> factory(classes): the shipped default and the variants."""
    return {
        "MarginTemperatureScaling": lambda classes: MarginTemperatureScaling(
            device="cpu", classes=classes
        ),
        "LOO fallback": lambda classes: LooMarginTemperature(
            device="cpu", classes=classes
        ),
        "LOO grid": lambda classes: LooGridMarginTemperature(
            device="cpu", classes=classes
        ),
        "pooled base": lambda classes: PooledBaseMarginTemperature(
            device="cpu", classes=classes
        ),
        "noise-scaled ECE weight": lambda classes: NoiseWeightMarginTemperature(
            device="cpu", classes=classes
        ),
        "paired base": lambda classes: PairedBaseMarginTemperature(
            device="cpu", classes=classes
        ),
        "paired base, noise-scaled ECE weight": (
            lambda classes: PairedBaseNoiseWeightMarginTemperature(
                device="cpu", classes=classes
            )
        ),
        "paired base, ece_weight=0": lambda classes: PairedBaseMarginTemperature(
            ece_weight=0.0, device="cpu", classes=classes
        ),
    }


def part_check(name="c100_resnet56_chenyaofo", n_rows=300):
    import torch

    from sklearn_calib._margin.features import logit_margins
    from sklearn_calib._margin.margin_temperature import _weighted_quantiles
    from sklearn_calib._torch._margin import (
        fit_margin_temperature,
        interpolation,
        log_inverse_temperature,
    )

    data = load_set(name)
    subset = np.random.default_rng(0).choice(len(data["y_val"]), n_rows, replace=False)
    log_proba = log_softmax(data["logits_val"][subset].astype(np.float64))
    y, weights = data["y_val"][subset], np.ones(n_rows)
    margins = logit_margins(log_proba)
    knots = np.unique(_weighted_quantiles(margins, weights, np.linspace(0, 1, 8)))
    left, right_weight = interpolation(margins, knots)
    objective = {
        "ece_weight": 1.0,
        "alpha": 50.0 / n_rows,
        "n_bins": 15,
        "sigma": 0.05,
        "delta": 1e-3,
    }

    def fit(rows):
        shifted = log_proba[rows] - log_proba[rows].max(axis=1, keepdims=True)
        return fit_margin_temperature(
            torch.tensor(shifted),
            torch.tensor(y[rows]),
            torch.tensor(weights[rows]),
            torch.tensor(left[rows]),
            torch.tensor(right_weight[rows]),
            knots.shape[0],
            max_iter=500,
            tol=1e-6,
            **objective,
        ).log_inverse_temperature

    values = fit(np.arange(n_rows))
    train, estimate = loo_nll(
        log_proba, y, weights, left, right_weight, values, **objective
    )
    exact = []
    for i in range(n_rows):
        kept = fit(np.delete(np.arange(n_rows), i))
        beta = np.exp(log_inverse_temperature(margins[i : i + 1], knots, kept))
        exact.append(-log_softmax(beta[:, None] * log_proba[i : i + 1])[0, y[i]])
    print(f"{name}, {n_rows} rows, raw logits as the base (log-softmax):")
    print(f"training NLL {train:.4f}, approximate leave-one-out {estimate:.4f},")
    print(f"exact leave-one-out ({n_rows} refits) {np.mean(exact):.4f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["check", "quality", "small"])
    parser.add_argument("--out", default=None)
    parser.add_argument("--name", default="bench_margin_variants")
    parser.add_argument("--only", default=None)
    args = parser.parse_args(argv)
    out = [] if args.out is None else ["--out", args.out]
    if args.part == "check":
        part_check()
    elif args.part == "quality":
        import bench_quality

        from sklearn_calib import TemperatureScaling

        factories = {
            "TemperatureScaling": lambda classes: TemperatureScaling(device="cpu")
        }
        factories.update(variants())
        bench_quality.ours = lambda: {
            name: (lambda factory=factory: factory(None))
            for name, factory in factories.items()
        }
        chosen = args.only or "MarginTemperatureScaling,LOO,pooled"
        only = f"TemperatureScaling,{chosen}"
        name = ["--name", f"{args.name}_quality"]
        bench_quality.main(["--only", only, *name, *out])
    else:
        import bench_small_n

        reference = bench_small_n.methods()[bench_small_n.REFERENCE]
        bench_small_n.methods = lambda: {
            bench_small_n.REFERENCE: reference,
            **variants(),
        }
        name = ["--name", f"{args.name}_small"]
        only = args.only or "MarginTemperatureScaling,LOO,pooled"
        bench_small_n.main(["--only", only, *name, *out])


if __name__ == "__main__":
    main()
