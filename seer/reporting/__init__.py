"""Scoring the models, the evaluation report, and the hierarchical roofline."""
