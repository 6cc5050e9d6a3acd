"""Errors a user can act on: each renders as one line naming what is wrong and what is allowed."""


class TrashfireError(Exception):
    """Base for errors reported as one line and a non-zero exit, without a traceback."""

    exit_code = 2


class ConfigError(TrashfireError):
    """A configuration value is missing, of the wrong type or out of range."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"config error: {key}: {problem}")
        self.key, self.problem = key, problem

    def __reduce__(self):  # raised in a worker process, it crosses back pickled
        return type(self), (self.key, self.problem)


class DataError(TrashfireError):
    """A data set, model or record file is missing or unreadable."""
