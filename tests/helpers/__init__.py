"""Helpers shared by the tests: job functions worker processes import by name."""
