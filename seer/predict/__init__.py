"""Predicting on a CPU: shape features, tree arrays, the fitted predictors, the model set and its files."""
