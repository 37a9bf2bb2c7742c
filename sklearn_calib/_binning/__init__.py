"""Non-parametric maps: histogram binning, isotonic, spline and Venn-Abers.

The public names are exported by :mod:`sklearn_calib`.
"""
