"""Utilities: input validation, estimator discovery and scikit-learn compatibility."""
