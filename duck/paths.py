"""Input paths a user types (``ckpt=``, ``scenario.forget_ids=``, ``data.root=``), checked without torch.

The loaders call these checks, and so does the command line before it imports torch or Lightning (about 1.5 s
and 4 s), so that a mistyped path is refused at once with the same one line either way."""

from __future__ import annotations

import os
from pathlib import Path

from duck.errors import DuckInputError


def checkpoint_file(path: str | os.PathLike) -> Path:
    """``path`` (``~`` expanded) when it is an existing file; else the checkpoint's ``DuckInputError``."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise DuckInputError(f"checkpoint {p} is a directory; pass ckpt=PATH to a .ckpt/.pt/.safetensors file")
    if not p.is_file():
        raise DuckInputError(f"checkpoint {p} not found; pass ckpt=PATH to an existing .ckpt/.pt/.safetensors file")
    return p


def forget_id_file(path: str | os.PathLike) -> Path:
    """``path`` (``~`` expanded) when it is an existing file; else the forget-id file's ``DuckInputError``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DuckInputError(f"forget-id file {p} not found; pass scenario.forget_ids=PATH to a .txt/.npy/.csv file")
    return p


def resolved(path: str | os.PathLike, key: str) -> Path:
    """``path`` with its symbolic links resolved; a loop of links (pathlib's ``RuntimeError: Symlink loop``, or
    ``ELOOP`` from the system) is a ``DuckInputError`` naming ``key``."""
    p = Path(path).expanduser()
    try:
        return p.resolve()
    except (RuntimeError, OSError) as e:
        reason = "a loop of symbolic links" if isinstance(e, RuntimeError) or "loop" in str(e).lower() else str(e)
        raise DuckInputError(f"{key}={p} cannot be followed ({reason}); point {key} at a real folder") from None
