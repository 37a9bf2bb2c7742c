"""
==============================================================
Prediction sets and abstention for a CIFAR-100 DenseNet
==============================================================

A DenseNet-BC-100 is 76% accurate on CIFAR-100: a quarter of its top-1
predictions are wrong. Two ways to act on its calibrated probabilities:

- return a **set of labels** that holds the true one for 90% of the images,
  guaranteed by split conformal prediction, and
- **abstain** on the least confident images, trading coverage for accuracy.

Temperature scaling is fitted on the 5000 validation images; the 5000 test
images are split (seeded) into a conformal calibration half and an
evaluation half, so the calibrator never sees the conformal split and the
guarantee is exact.
"""

# %%
# Calibrate, then split the test images
# -------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.frozen import FrozenEstimator

from sklearn_calib import TemperatureScaling
from sklearn_calib.conformal import ConformalClassifier, conformal_report
from sklearn_calib.datasets import load_logits
from sklearn_calib.display import RiskCoverageDisplay
from sklearn_calib.metrics import (
    classwise_coverage,
    mean_set_size,
    set_coverage,
    size_stratified_coverage,
)
from sklearn_calib.selective import aurc, coverage_at_risk, selective_risk

data = load_logits("c100_densenetbc100_netcal")
ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
print(f"T = {ts.temperature_:.4f}")

order = np.random.default_rng(0).permutation(len(data.y_test))
cal, held = order[:2500], order[2500:]
X_cal, y_cal = data.logits_test[cal], data.y_test[cal]
X_new, y_new = data.logits_test[held], data.y_test[held]

# %%
# Prediction sets at 90% confidence
# ---------------------------------
# ``FrozenEstimator`` keeps the fitted temperature as it is; the conformal
# classifier only computes the scores of the 2500 calibration images and
# their finite-sample quantile. The score functions differ in how they share
# the labels out. The coverage of one split fluctuates around the target (by
# about 0.01 here): the guarantee holds on average over calibration sets.
frozen = FrozenEstimator(ts)
sets = {}
for score in ["lac", "aps", "raps", "saps"]:
    clf = ConformalClassifier(frozen, conformity_score=score, confidence_level=0.9)
    sets[score] = clf.fit(X_cal, y_cal).predict_set(X_new)
    print(
        f"{score:>4}: coverage {set_coverage(y_new, sets[score]):.3f}, "
        f"mean size {mean_set_size(sets[score]):.2f}"
    )

# %%
# Averaged over 20 random splits of the test images, the coverage is the
# target (``conformal_report``, the table of the command line's report):
report = conformal_report(
    data.y_test,
    {"temperature": ts.predict_proba(data.logits_test)},
    conformity_scores=["lac", "aps", "raps", "saps"],
    confidence_levels=[0.9],
    n_splits=20,
    random_state=0,
)
print(report[["conformity_score", "coverage", "coverage_std", "mean_set_size"]])

# %%
# Per class (Mondrian) coverage
# -----------------------------
# The marginal guarantee is an average over images: some classes are covered
# far less often. One threshold per class, from that class's ~25 calibration
# images, guarantees every class's coverage, at the cost of larger sets.
# Coverage per class, averaged over 20 random splits (with ~25 test images
# of a class per split, the worst of 100 such averages still sits a little
# below 0.9 by chance alone):
proba_test = ts.predict_proba(data.logits_test)
rng = np.random.default_rng(1)
per_class = {"marginal": [], "class": []}
sizes = {"marginal": [], "class": []}
for _ in range(20):
    split = rng.permutation(len(data.y_test))
    c, h = split[:2500], split[2500:]
    for conditional in per_class:
        clf = ConformalClassifier(conditional=conditional)
        clf.fit(np.log(proba_test[c]), data.y_test[c])
        s = clf.predict_set(np.log(proba_test[h]))
        per_class[conditional].append(classwise_coverage(data.y_test[h], s))
        sizes[conditional].append(mean_set_size(s))
for conditional, values in per_class.items():
    mean_per_class = np.nanmean(values, axis=0)
    print(
        f"{conditional:>8}: worst class {mean_per_class.min():.3f}, "
        f"classes below 0.85: {np.sum(mean_per_class < 0.85)}, "
        f"mean size {np.mean(sizes[conditional]):.2f}"
    )

# %%
# Set sizes, and coverage by size
# -------------------------------
# LAC gives the smallest sets on average; APS gives easy images small sets
# and hard ones large sets, so its coverage is more even across set sizes
# (the size-stratified coverage on the right).
fig, (ax_size, ax_strata) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
edges = np.arange(0, 16)
for score, s in sets.items():
    ax_size.hist(s.sum(axis=1), bins=edges, histtype="step", label=score)
    strata = size_stratified_coverage(y_new, s, bins=[0, 1, 2, 4, 7, 11, 100])
    ax_strata.plot(np.arange(len(strata.coverage)), strata.coverage, "o-", label=score)
ax_size.set(xlabel="set size", ylabel="images", title="Set sizes at 90%")
ax_size.legend()
ax_strata.axhline(0.9, color="black", linestyle=":")
ax_strata.set_xticks(range(6), ["0", "1", "2-3", "4-6", "7-10", "11+"])
ax_strata.set(xlabel="set size", ylabel="coverage", title="Coverage by set size")
ax_strata.legend()
plt.show()

# %%
# Abstaining instead
# ------------------
# Accept an image when its top probability reaches a threshold. The
# risk-coverage curve gives the error rate among the accepted images at every
# coverage; the dotted curves are the ideal confidences (every correct
# prediction first). Temperature scaling re-orders the images slightly.
proba_raw = np.exp(X_new - X_new.max(axis=1, keepdims=True))
proba_raw /= proba_raw.sum(axis=1, keepdims=True)
proba_ts = ts.predict_proba(X_new)
for name, proba in [("raw", proba_raw), ("temperature", proba_ts)]:
    print(
        f"{name:>11}: AURC {aurc(y_new, proba):.4f}, "
        f"error at 70% coverage {selective_risk(y_new, proba, coverage=0.7):.3f}, "
        f"coverage at 5% error {coverage_at_risk(y_new, proba, risk=0.05):.3f}"
    )
disp = RiskCoverageDisplay.from_predictions(y_new, proba_raw, name="raw")
RiskCoverageDisplay.from_estimator(
    ts, X_new, y_new, name="temperature scaling", ax=disp.ax_, ideal=False
)
disp.ax_.set_title("Selective prediction, DenseNet-BC-100")
plt.show()
