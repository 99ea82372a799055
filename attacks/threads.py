"""torch's intra-op threads while a bank trains or runs (``attack.threads``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from duck.errors import DuckInputError

# ``threads: auto`` uses one intra-op thread on machines with at most this many cores: small shadow models
# gain nothing from intra-op parallelism there, and on this 2-core machine shared with other jobs torch's
# default of 2 threads made the digits bank ~6x slower (708 s against 119 s for 16 shadows, docs/audit.md).
AUTO_SINGLE_THREAD_MAX_CORES = 4


def resolve_threads(threads: int | str | None) -> int | None:
    """``None``: leave torch's setting; ``"auto"``: 1 on small machines, else leave it; an int: that many."""
    if threads is None:
        return None
    if threads == "auto":
        return 1 if (os.cpu_count() or 1) <= AUTO_SINGLE_THREAD_MAX_CORES else None
    if not str(threads).isdigit() or int(threads) < 1:
        raise DuckInputError(f"attack.threads={threads!r}; use auto, null or a positive integer")
    return int(threads)


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads(n)`` for the duration (nothing if ``n`` is None)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
