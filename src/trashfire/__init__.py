"""trashfire: time-to-adversarial-failure survival analysis and robustness cost metrics."""

__version__ = "0.1.0"
