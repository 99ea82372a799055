"""A test helper shared by the test files: a refusal asserted with its whole message."""

from __future__ import annotations

import re

import pytest

from duck.errors import DuckInputError


def refused(message: str, exc: type[Exception] = DuckInputError):
    """``pytest.raises`` for an ``exc`` (by default a DuckInputError) whose message is exactly ``message``."""
    return pytest.raises(exc, match=f"^{re.escape(message)}$")
