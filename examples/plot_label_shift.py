"""
==============================================================
Adapting a CIFAR-10 DenseNet to a new class mix
==============================================================

The calibrator is fitted on a long-tailed validation set (class ``k`` keeps a
share ``0.5**k`` of its rows), and the model is then used on targets whose
class proportions are drawn from a Dirichlet distribution. From the unlabelled
target logits alone, :class:`~sklearn_calib.label_shift.LabelShiftAdapter`
estimates the target priors (EM on bias-corrected temperature scaling) and
reweights the probabilities. The figure compares the estimated priors with
the true ones, and the NLL before and after adaptation.
"""

# %%
# A long-tailed source and shifted targets
# ----------------------------------------
import matplotlib.pyplot as plt
import numpy as np

from sklearn_calib.datasets import load_logits
from sklearn_calib.label_shift import LabelShiftAdapter, label_shift_report

data = load_logits("c10_densenet40_guo")
rng = np.random.default_rng(0)
keep = rng.random(len(data.y_val)) < 0.5**data.y_val
adapter = LabelShiftAdapter().fit(data.logits_val[keep], data.y_val[keep])

by_class = [np.flatnonzero(data.y_test == k) for k in range(10)]
true_priors, estimated, nll = [], [], []
for _ in range(5):
    proportions = rng.dirichlet(np.ones(10))
    counts = rng.multinomial(3000, proportions)
    rows = np.concatenate([rng.choice(by_class[k], c) for k, c in enumerate(counts)])
    adapter.adapt(data.logits_test[rows])
    report = label_shift_report(adapter, data.logits_test[rows], data.y_test[rows])
    true_priors.append(counts / counts.sum())
    estimated.append(adapter.priors_)
    nll.append((report["unadapted"]["nll"], report["adapted"]["nll"]))
    print(
        f"NLL {report['unadapted']['nll']:.3f} -> {report['adapted']['nll']:.3f}, "
        f"accuracy {report['unadapted']['accuracy']:.3f} -> "
        f"{report['adapted']['accuracy']:.3f}"
    )

# %%
# Estimated against true priors
# -----------------------------
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
ax1.scatter(np.ravel(true_priors), np.ravel(estimated), s=12)
ax1.plot([0, 0.5], [0, 0.5], color="grey", linestyle="--")
ax1.set(xlabel="true target prior", ylabel="estimated prior", title="Priors")
nll = np.array(nll)
ax2.bar(np.arange(5) - 0.2, nll[:, 0], width=0.4, label="calibrated only")
ax2.bar(np.arange(5) + 0.2, nll[:, 1], width=0.4, label="adapted")
ax2.set(xlabel="target draw", ylabel="NLL", title="Target NLL")
ax2.legend()
fig.tight_layout()
plt.show()
