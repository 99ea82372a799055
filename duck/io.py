"""Atomic file writes (temporary file in the same directory + ``os.replace``).

A killed job leaves either the previous file or the complete new one, never a truncated file.
Pure standard library + numpy: safe to import from every layer.
"""

from __future__ import annotations

import errno
import glob
import json
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from duck.errors import DuckInputError


def _umask() -> int:
    """The process umask (read by setting it and putting it back: there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: errors of the file system rather than of the program: reported as one ``error:`` line naming the path
_DISK_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                errno.EPERM: "permission denied", errno.ENAMETOOLONG: "the file name is too long"}


#: the errno values :func:`disk_error` reports
DISK_ERRNOS = frozenset(_DISK_ERRORS)


def disk_error(path: str | os.PathLike, error: OSError) -> DuckInputError:
    """The one-line error for a write the file system refused (full disk, read-only, no permission)."""
    reason = _DISK_ERRORS.get(error.errno or 0, error.strerror or str(error))
    return DuckInputError(f"cannot write {path}: {reason}; free space or choose a writable directory "
                          "(cache_dir=..., hydra.run.dir=...); nothing partial was left")


def temp_name(path: Path) -> Path:
    """A writer's temporary name next to ``path``: ``.<name>.<host>.<pid>.<random>.tmp`` (host and pid let a
    later writer tell a killed writer's leftovers from a live one's)."""
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


#: a temporary file nobody has written to for this long is a dead writer's, whatever its host: another
#: machine's writer cannot be checked by its pid, and a pid may have been reused since (writers touch their file
#: with every block they write, so a live one is never this old)
STALE_TEMP_AGE_S = 3600.0


def _is_stale(tmp: Path, owner: str, host: str, max_age_s: float) -> bool:
    """Is ``tmp`` (a :func:`temp_name` whose name between its target and ``.tmp`` is ``owner``:
    ``<host>.<pid>.<random>``) a dead writer's: written on this host by a process that no longer exists, or
    untouched for ``max_age_s`` seconds?"""
    parts = owner.rsplit(".", 2)  # host (may hold dots), pid, random
    if len(parts) == 3 and parts[0] == host and parts[1].isdigit() and not _alive(int(parts[1])):
        return True
    try:
        return time.time() - tmp.stat().st_mtime > max_age_s
    except FileNotFoundError:  # its writer renamed or removed it meanwhile
        return False


def _unlink_all(paths: Iterable[Path]) -> list[Path]:
    removed = []
    for tmp in paths:
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    return removed


def remove_stale_temps(path: Path, max_age_s: float = STALE_TEMP_AGE_S) -> list[Path]:
    """Remove the temporary files of earlier writers of ``path`` that were killed (``kill -9``, a crash): those
    written on this host by a process that no longer exists, and any host's untouched for ``max_age_s``
    (:data:`STALE_TEMP_AGE_S`); live writers' files are kept."""
    host = socket.gethostname()
    return _unlink_all(tmp for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp")
                       if _is_stale(tmp, tmp.name[len(path.name) + 2:-4], host, max_age_s))


def remove_stale_temps_under(folder: Path, max_age_s: float = STALE_TEMP_AGE_S) -> list[Path]:
    """:func:`remove_stale_temps` for every target under ``folder`` (recursively): the sweep of a cache entry
    when it is opened. A name's target is unknown here, so the writer's host is read from the name's end."""
    host = socket.gethostname()

    def owner(tmp: Path) -> str:  # "<target>.<host>.<pid>.<random>" -> "<host>.<pid>.<random>" when it is ours
        name = tmp.name[1:-4]
        parts = name.rsplit(".", 2)
        return name[len(parts[0]) - len(host):] if parts[0].endswith(f".{host}") else ""

    return _unlink_all(tmp for tmp in folder.rglob(".*.tmp") if tmp.is_file()
                       and _is_stale(tmp, owner(tmp), host, max_age_s))


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; where a directory cannot be opened, e.g. Windows, nothing)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(fileobj)`` on a temporary file next to ``path``, fsync, then rename over ``path``.

    The file gets the mode a plain ``open(path, "w")`` would give it (0666 less the umask), not the 0600 of
    the temporary file: reports and checkpoints stay readable by whoever may read the directory. A killed
    earlier writer's temporary file is removed first (:func:`remove_stale_temps`); the directory is synced after
    the rename, so the new name survives a power cut; a write the file system
    refuses (full disk, read-only, no permission) removes its partial file and raises one
    :class:`~duck.errors.DuckInputError` naming the path."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        if e.errno in _DISK_ERRORS:
            raise disk_error(path, e) from None
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        cause = _disk_cause(e)
        if cause is not None:
            raise disk_error(path, cause) from None
        raise
    return path


def _disk_cause(error: BaseException) -> OSError | None:
    """The file-system error behind ``error`` (itself, or the cause or context of a wrapper such as torch's
    ``RuntimeError`` around a failed write), if any."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in _DISK_ERRORS:
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


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
    if isinstance(o, Mapping):  # typed settings (duck.schema) are read-only mappings of their options
        return dict(o)
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
