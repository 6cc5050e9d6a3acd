"""Survival analysis of time to adversarial failure: the per-sample data set, the lifelines fitters, model comparison and its figures."""
