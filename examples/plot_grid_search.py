"""
===================================================
Choosing a calibrator by cross-validation on logits
===================================================

Calibrators are scikit-learn estimators, so the model-selection tools work on
them unchanged: here :class:`~sklearn.model_selection.GridSearchCV` picks a
calibrator and its settings by 3-fold cross-validation on the validation
logits alone, scored with the library's scorers, and the winner is then
checked once on the test logits. The data are the bundled CIFAR-10 ResNet-50
logits.
"""

# %%
# The search
# ----------
# A one-step :class:`~sklearn.pipeline.Pipeline` turns "which calibrator" into
# a parameter. The scorers are ``neg_`` metrics (greater is better); the
# refit criterion is the NLL, a proper scoring rule, with the ECE reported
# beside it.
import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline

from sklearn_calib import SMART, TemperatureScaling, VectorScaling
from sklearn_calib.datasets import load_logits
from sklearn_calib.metrics import expected_calibration_error, get_scorer, log_loss

data = load_logits("c10_resnet50_cross_entropy_smart")
search = GridSearchCV(
    Pipeline([("calibrator", TemperatureScaling(device="cpu"))]),
    param_grid=[
        {"calibrator": [TemperatureScaling(device="cpu"), VectorScaling(device="cpu")]},
        {
            "calibrator": [SMART(device="cpu", random_state=0)],
            "calibrator__max_iter": [200, 2000],
        },
    ],
    scoring={
        "nll": get_scorer("neg_log_loss"),
        "ece": get_scorer("neg_expected_calibration_error"),
    },
    refit="nll",
    cv=StratifiedKFold(3, shuffle=True, random_state=0),
)
search.fit(data.logits_val, data.y_val)

# %%
# Cross-validated scores
# ----------------------
results = search.cv_results_
labels = []
for params in results["params"]:
    name = type(params["calibrator"]).__name__
    if "calibrator__max_iter" in params:
        name += f" ({params['calibrator__max_iter']} steps)"
    labels.append(name)
nll = -results["mean_test_nll"]
ece = -100 * results["mean_test_ece"]
for label, n, e in zip(labels, nll, ece, strict=True):
    print(f"{label:>22}: CV NLL {n:.4f}  CV ECE {e:.2f}%")
print("best:", labels[search.best_index_])

fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
ax.scatter(ece, nll)
for label, x, y in zip(labels, ece, nll, strict=True):
    ax.annotate(
        label, (x, y), textcoords="offset points", xytext=(5, 3), fontsize="small"
    )
ax.set(
    xlabel="cross-validated ECE (%)",
    ylabel="cross-validated NLL",
    title="3-fold CV on the 5000 validation logits",
)
plt.show()

# %%
# The winner on the test logits
# -----------------------------
# ``search`` was refitted on all validation logits with the best settings.
proba = search.predict_proba(data.logits_test)
print(
    f"test NLL {log_loss(data.y_test, proba):.4f}, "
    f"ECE {100 * expected_calibration_error(data.y_test, proba):.2f}%, "
    f"accuracy {100 * np.mean(proba.argmax(axis=1) == data.y_test):.2f}%"
)
