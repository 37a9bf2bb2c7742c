"""
=====================================================
The temperature: what it minimises and what it means
=====================================================

Temperature scaling divides the logits by one number ``T`` fitted on a
validation set by minimising the negative log-likelihood (NLL). This example
draws that NLL as a function of ``T`` for the DenseNet-40 of Guo et al. (2017)
on CIFAR-10, marks the fitted optimum, and shows that the same curve seen as a
function of ``beta = 1 / T`` (what several libraries store) is convex.
"""

# %%
# Load the bundled logits and fit
# -------------------------------
import matplotlib.pyplot as plt
import numpy as np

from sklearn_calib import TemperatureScaling
from sklearn_calib.datasets import load_logits

data = load_logits("c10_densenet40_guo")
ts = TemperatureScaling(device="cpu").fit(data.logits_val, data.y_val)
beta = 1 / ts.temperature_
print(f"fitted temperature T = {ts.temperature_:.4f} (beta = 1/T = {beta:.4f})")

# %%
# The validation NLL as a function of T
# -------------------------------------
# The NLL of ``softmax(z / T)`` is computed directly with a log-sum-exp; the
# fitted ``T`` must sit at its minimum.


def nll(logits, y, temperature):
    scaled = logits.astype(np.float64) / temperature
    shifted = scaled - scaled.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_norm - shifted[np.arange(len(y)), y]))


temperatures = np.geomspace(0.5, 8.0, 80)
curve = [nll(data.logits_val, data.y_val, t) for t in temperatures]
betas = 1.0 / temperatures

fig, (ax_t, ax_beta) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
ax_t.plot(temperatures, curve)
ax_t.axvline(1.0, color="grey", linestyle=":", label="T = 1 (raw logits)")
ax_t.axvline(
    ts.temperature_,
    color="C3",
    linestyle="--",
    label=f"fitted T = {ts.temperature_:.2f}",
)
ax_t.set(xscale="log", xlabel="temperature T (log scale)", ylabel="validation NLL")
ax_t.set_xticks([0.5, 1, 2, 4, 8], labels=["0.5", "1", "2", "4", "8"])
ax_t.minorticks_off()
ax_t.legend()
ax_beta.plot(betas, curve)
ax_beta.axvline(
    1.0 / ts.temperature_, color="C3", linestyle="--", label="fitted beta = 1/T"
)
ax_beta.set(xlabel="inverse temperature beta = 1/T", ylabel="validation NLL")
ax_beta.set_title("convex in beta", fontsize="medium")
ax_beta.legend()
plt.show()

# %%
# Over-confidence, and its correction
# -----------------------------------
# ``T > 1`` means the network is over-confident: its raw confidences are
# higher than its accuracy. Dividing by ``T`` lowers them without changing any
# prediction, so the test accuracy stays exactly the same.


def softmax(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


raw = softmax(data.logits_test.astype(np.float64))
calibrated = ts.predict_proba(data.logits_test)
accuracy = np.mean(raw.argmax(axis=1) == data.y_test)
print(
    f"test accuracy: {accuracy:.4f} before and "
    f"{np.mean(calibrated.argmax(axis=1) == data.y_test):.4f} after"
)
print(
    f"mean confidence: {raw.max(axis=1).mean():.4f} raw, "
    f"{calibrated.max(axis=1).mean():.4f} calibrated"
)
print(
    f"test NLL: {nll(data.logits_test, data.y_test, 1.0):.4f} raw, "
    f"{nll(data.logits_test, data.y_test, ts.temperature_):.4f} calibrated"
)

fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
bins = np.linspace(0, 1, 41)
ax.hist(raw.max(axis=1), bins=bins, alpha=0.6, label="raw")
ax.hist(
    calibrated.max(axis=1), bins=bins, alpha=0.6, label=f"T = {ts.temperature_:.2f}"
)
ax.axvline(accuracy, color="black", linestyle="--", label=f"accuracy {accuracy:.3f}")
ax.set(xlabel="confidence (largest probability)", ylabel="test samples", yscale="log")
ax.legend(loc="upper left")
plt.show()
