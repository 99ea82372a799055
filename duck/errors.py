"""The one exception type for bad user input.

Command-line entry points catch :class:`DuckInputError`, print its message as one line on stderr
and exit with status 2, writing nothing else. Its message must name the bad value and say what to do.
"""


class DuckInputError(ValueError):
    """Bad user input (config value, file, ids, data)."""
