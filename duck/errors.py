"""The one exception type for bad user input.

Command-line entry points catch :class:`DuckInputError`, print its message as one line on stderr
and exit with status 2, writing nothing else. Its message must name the bad value and say what to do.
A recoverable problem (a damaged cache entry that is computed again) is one ``warning:`` line (:func:`warn_line`).
"""


def warn_line(message: str) -> None:
    """One ``warning: ...`` line on stderr (for a recoverable problem such as a corrupt cache entry that is
    rebuilt; Python's ``warnings`` would print two lines with a source location)."""
    import sys

    print(f"warning: {message}", file=sys.stderr)


class DuckInputError(ValueError):
    """Bad user input (config value, file, ids, data)."""


class DuckTerminated(RuntimeError):
    """The job was told to stop (SIGTERM: a scheduler's time limit or pre-emption, ``kill``) while training.
    Command-line entry points print one ``error:`` line and exit with status 143 (128 + SIGTERM): a stopped
    job never ends as a success (Lightning's own SIGTERM exit has status 0)."""

    exit_status = 143
