"""Temperature and affine maps of the logits.

Temperature scaling, vector, matrix and Dirichlet scaling, Platt scaling, the
structured maps, ensemble and bias-corrected temperature scaling, and the beta
and quadratic binary maps. The public names are exported by :mod:`sklearn_calib`.
"""
