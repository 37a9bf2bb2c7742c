"""Real validation and test logits bundled with the package.

A few sets of logits from real trained networks, small enough to ship and
licensed for redistribution (MIT or Apache-2.0), so that examples, the
documentation and ``sklearn-calib report`` run without downloading anything.
"""

from ._base import list_logits, load_logits

__all__ = ["list_logits", "load_logits"]
