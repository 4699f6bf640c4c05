"""Fitting the models: seer's estimators, SEER's model, and the training of a GPU's model set."""
