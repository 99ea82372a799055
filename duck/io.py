"""Atomic file writes (temporary file in the same directory + ``os.replace``).

A killed job leaves either the previous file or the complete new one, never a truncated file.
Pure standard library + numpy: safe to import from every layer.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np


def _umask() -> int:
    """The process umask (read by setting it and putting it back: there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(fileobj)`` on a temporary file next to ``path``, fsync, then rename over ``path``.

    The file gets the mode a plain ``open(path, "w")`` would give it (0666 less the umask), not the 0600 of
    the temporary file: reports and checkpoints stay readable by whoever may read the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    try:  # torch tensors without importing torch here
        return o.tolist()
    except AttributeError:
        raise TypeError(f"not JSON serialisable: {type(o).__name__}") from None


def _strict(obj: Any) -> Any:
    """``obj`` with every NaN/inf float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def atomic_save_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> Path:
    """Write ``obj`` as strict JSON (numpy scalars/arrays converted; NaN/inf, which JSON cannot hold and which
    Python would write as bare ``NaN``, become ``null``) atomically."""
    try:
        text = json.dumps(obj, indent=indent, default=_json_default, allow_nan=False)
    except ValueError:  # a non-finite number somewhere: convert everything to plain types, then null them
        text = json.dumps(_strict(json.loads(json.dumps(obj, default=_json_default))), indent=indent,
                          allow_nan=False)
    return atomic_write_text(path, text + "\n")


def atomic_save_npz(path: str | os.PathLike, **arrays: Any) -> Path:
    """``np.savez_compressed`` atomically (the target name keeps its ``.npz`` suffix)."""
    return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
