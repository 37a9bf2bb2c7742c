"""Selective prediction: abstain on the least confident samples.

A selective classifier predicts the most probable class when its confidence
reaches a threshold and abstains otherwise. Lowering the threshold accepts
more samples (coverage) at a higher error rate among them (selective risk);
the risk-coverage curve traces that trade-off, and the area under it (AURC)
scores how well the confidence ranks correct predictions above errors.

Every function takes the metrics' arguments ``(y_true, y_prob, *, ...,
sample_weight=None, labels=None)``: the prediction is the first most probable
column of ``y_prob`` and the confidence its probability, unless another
``confidence`` is given (any score that is higher for samples more likely to
be right: the margin, a calibrator's probability, ...).

Conventions (``docs/user_guide/conformal.rst``):

- Samples of equal confidence are accepted or rejected together: the curve
  has one point per distinct confidence. Wherever a count of accepted
  samples falls inside such a tie, the risk is its expectation over the
  orderings of the tie, so AURC does not depend on the order of the rows.
- ``AURC = (1/n) sum_{k=1..n} r_k``, the mean over ``k`` of the error rate
  ``r_k`` of the ``k`` most confident samples (Geifman et al.). Weights are
  frequencies (a weight of 2 is a repeated row): ``n`` becomes the total
  weight, and with non-integer weights the sum over ``k`` is evaluated with
  the digamma function, which interpolates it exactly.
- ``E-AURC = AURC - AURC*``, with ``AURC*`` the AURC of the ideal
  confidence (every correct prediction above every error) under the same
  definition; for large ``n`` it tends to ``r + (1 - r) log(1 - r)``, ``r``
  the error rate, the closed form of Geifman et al.
"""

from ._risk_control._binary import CertifiedThresholdClassifier
from ._risk_control._bounds import (
    binomial_tail_pvalue,
    hoeffding_bentkus_pvalue,
    risk_upper_bound,
)
from ._risk_control._scorers import (
    acceptance_rate,
    acceptance_rate_scorer,
    accepted_error_rate,
    neg_accepted_error_rate,
)
from ._risk_control._selective import SelectiveClassifier
from .metrics._selective import (
    RiskCoverageCurve,
    aurc,
    coverage_at_risk,
    excess_aurc,
    risk_coverage_curve,
    selective_risk,
)

__all__ = [
    "CertifiedThresholdClassifier",
    "RiskCoverageCurve",
    "SelectiveClassifier",
    "accepted_error_rate",
    "acceptance_rate",
    "acceptance_rate_scorer",
    "aurc",
    "binomial_tail_pvalue",
    "coverage_at_risk",
    "excess_aurc",
    "hoeffding_bentkus_pvalue",
    "neg_accepted_error_rate",
    "risk_coverage_curve",
    "risk_upper_bound",
    "selective_risk",
]
