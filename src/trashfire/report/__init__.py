"""The report: the figures drawn from the aggregated tables, and the model cards."""
