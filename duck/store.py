"""The one content-keyed artifact store behind every cache of the project.

Trained originals and oracles, the LiRA shadow bank and the other model banks, the forgetting audit's unlearning
runs and U-LiRA's unlearned shadows, the forgetting verdict's scores and calibrations: each is an **entry** of
this store, found again by a key computed from what it depends on.

Layout (``cache_dir`` is ``$DUCK_CACHE_DIR``, default ``~/.cache/duck-unlearn``)::

    <cache_dir>/store-v1/<kind>/<key>/             the entry's files (one or many, in sub-folders if need be)
    <cache_dir>/store-v1/<kind>/<key>.lock         its lock: held while the entry is computed
    <cache_dir>/store-v1/<kind>/<key>.index.lock   a short lock for read-modify-write of its index files

- **Key**: an :class:`ArtifactSpec` is a kind (the folder), a version (raised when the stored format or the
  meaning of an entry changes) and the fields the artifact depends on; the key is the first 20 hex digits of the
  sha256 of their canonical JSON (:func:`canonical_json`: sorted keys, no spaces, plain types).
- **Locks**: :func:`file_lock` takes ``filelock.FileLock`` (``fcntl.flock`` on POSIX, ``LockFileEx`` on
  Windows; released by the operating system when its holder dies), so concurrent jobs of one setup take turns
  and the second finds the first's result. A *shared* lock (the slices of a bank built by several array tasks
  together, which train disjoint models) is ``flock(LOCK_SH)`` on the same file: it excludes, and is excluded by,
  ``FileLock``'s exclusive ``flock``. filelock's own reader-writer locks are not used: ``ReadWriteLock`` is a
  SQLite database, whose locking SQLite documents as unreliable on network file systems, which is where the
  array tasks of a SLURM sweep share their cache, and ``SoftReadWriteLock`` is a lease that a contender takes
  over when its holder's heartbeat stalls for a while (a suspended job would lose its lock while still
  writing). Where ``fcntl`` is missing (Windows) or the file system refuses ``flock``, a shared lock is taken
  exclusively: the slices take turns, which is slower and never wrong.
- **Atomic writes**: every file is written to a temporary name in its own folder, fsynced and renamed over its
  name (:func:`duck.io.atomic_write`), and the folder is fsynced: a killed writer leaves the old file or the new
  one, never a partial one.
- **Stale temporary files**: opening an entry (:meth:`Store.open`) removes the temporary files of its dead
  writers: written on this host by a process that is gone, or untouched for an hour on any host
  (:func:`duck.io.remove_stale_temps_under`).
- **Refusals**: a full disk, a read-only file system or a folder without write permission ends in one
  :class:`~duck.errors.DuckInputError` naming the path (:func:`duck.io.disk_error`), which the command-line
  entry points print as their one ``error:`` line; nothing partial is left.
- **Damage**: a stored file that does not load (truncated, garbage, the wrong arrays) is recomputed with one
  ``warning:`` line (:meth:`Entry.read`), never used and never a traceback.

The caches written before this store (``<cache_dir>/models``, ``shadow_banks``, ...) were keyed otherwise; they
are not read: their entries are computed again in the store, and one line says which folders may be deleted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

import numpy as np

from duck.errors import DuckInputError, warn_line
from duck.io import DISK_ERRNOS, atomic_save_json, atomic_save_npz, atomic_write, disk_error, remove_stale_temps_under

#: the store's layout version: the folder under the cache directory (a new layout gets a new folder)
STORE_FORMAT = 1
STORE_FOLDER = f"store-v{STORE_FORMAT}"

#: the cache folders of the layout before the store (keyed otherwise: never read, named once for deletion)
LEGACY_FOLDERS = ("models", "shadow_banks", "retrain_banks", "original_banks", "shadow_retrain_banks",
                  "unlearned_sets", "unlearned_shadows", "forgetting_scores", "forgetting_calibrations")

#: hex digits of a key (80 bits)
KEY_LENGTH = 20

#: what reading a damaged stored file raises (truncated or garbage .npy / .npz / .json, missing arrays)
CORRUPT_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, UnicodeDecodeError, zipfile.BadZipFile,
                  json.JSONDecodeError)

#: errnos of a file system that has no working ``flock`` (some network mounts): locks are then taken exclusively
_NO_FLOCK = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}

_KIND = re.compile(r"[a-z][a-z0-9_]*")

T = TypeVar("T")


# ------------------------------------------------------------------------------------------------------ keys
def plain(obj: Any) -> Any:
    """``obj`` as plain JSON data: mappings (OmegaConf's too) with string keys, sequences as lists, numpy
    scalars and arrays, paths, enums and dataclasses converted, non-finite floats as strings; anything else
    by ``str`` (as the caches before the store hashed it)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (np.generic, np.ndarray)):
        return plain(obj.tolist())
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
        return [plain(v) for v in obj]
    if isinstance(obj, Enum):
        return plain(obj.value)
    if is_dataclass(obj) and not isinstance(obj, type):
        return plain(asdict(obj))
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return str(obj)


def canonical_json(obj: Any) -> str:
    """The one text of ``obj`` that its key hashes: :func:`plain` data, sorted keys, no spaces, ASCII."""
    return json.dumps(plain(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def spec_key(kind: str, version: int, fields: Mapping[str, Any]) -> str:
    """The key of an entry: sha256 of the canonical JSON of its kind, version and fields, first
    :data:`KEY_LENGTH` hex digits."""
    text = canonical_json({"kind": kind, "version": version, "fields": fields})
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


@dataclass(frozen=True, eq=True)
class ArtifactSpec:
    """What one stored artifact depends on: its ``kind`` (the folder: ``models``, ``shadow_banks``, ...), the
    kind's ``version`` and the ``fields`` (held as :func:`plain` data). Equal specs have equal keys; specs that
    differ in anything have different keys."""

    kind: str
    version: int
    fields: Mapping[str, Any]
    key: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not _KIND.fullmatch(self.kind):
            raise ValueError(f"artifact kind {self.kind!r}: lower-case letters, digits and _ only")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"artifact version {self.version!r}: a positive integer")
        if not isinstance(self.fields, Mapping):
            raise TypeError(f"artifact fields: a mapping, not {type(self.fields).__name__}")
        object.__setattr__(self, "fields", plain(self.fields))
        object.__setattr__(self, "key", spec_key(self.kind, self.version, self.fields))

    def __hash__(self) -> int:
        return hash(self.key)

    def with_fields(self, **changes: Any) -> ArtifactSpec:
        """The spec of the same kind and version with some fields changed (e.g. a bank of another size)."""
        return ArtifactSpec(self.kind, self.version, {**self.fields, **changes})


# ----------------------------------------------------------------------------------------------------- locks
def _refuse(path: Path, error: OSError) -> DuckInputError | OSError:
    """The one-line :class:`DuckInputError` for a refused write at ``path`` (full disk, read-only, no
    permission), else ``error`` itself."""
    return disk_error(path, error) if error.errno in DISK_ERRNOS else error


def _shared_flock(lock_file: Path, waiting: Callable[[], None] | None) -> Callable[[], None] | None:
    """Take ``flock(LOCK_SH)`` on ``lock_file``; returns its release, or None where there is no ``flock``
    (Windows, a file system without it): the caller then locks exclusively."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise _refuse(lock_file, e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as e:
        os.close(fd)
        if e.errno in _NO_FLOCK:
            return None
        raise

    def release() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    return release


def _exclusive_lock(lock_file: Path, waiting: Callable[[], None] | None) -> Callable[[], None]:
    """Take ``filelock.FileLock`` on ``lock_file``; returns its release."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_file))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if waiting is not None:
                waiting()
            lock.acquire()
    except OSError as e:
        raise _refuse(lock_file, e) from None
    return lock.release


@contextmanager
def file_lock(lock_file: str | os.PathLike, *, shared: bool = False,
              waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock on ``lock_file`` (created if missing) for the block: exclusive, or ``shared`` with other
    shared holders (module docstring). ``waiting()`` is called once when another process holds it. A lock file
    the file system refuses to create raises the one-line :class:`DuckInputError`."""
    path = Path(lock_file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _refuse(path.parent, e) from None
    release = _shared_flock(path, waiting) if shared else None
    if release is None:
        release = _exclusive_lock(path, waiting)
    try:
        yield
    finally:
        release()


# ----------------------------------------------------------------------------------------------- the store
def check_cache_dir(cache_dir: str | os.PathLike) -> Path:
    """``cache_dir`` (``$DUCK_CACHE_DIR``) as a path, refusing one that exists as (or under) a file."""
    path = Path(os.fspath(cache_dir)).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise DuckInputError(f"cache_dir={str(cache_dir)!r} (DUCK_CACHE_DIR) is not a directory: {p} is a "
                                     "file; point DUCK_CACHE_DIR / cache_dir= at a folder")
            break
    return path


def check_cache_writable(cache_dir: Path, setting: str = "cache_dir") -> None:
    """Refuse, before any work, a cache directory this process cannot write (a read-only file system, no
    permission): every entry takes a lock file, even one only read, so such a cache would fail the job only
    after its first stages. Checked on the directory or, where it does not exist yet, its nearest existing
    parent (which it will be made in)."""
    for p in (cache_dir, *cache_dir.parents):
        if p.exists():
            if not os.access(p, os.W_OK | os.X_OK):
                raise DuckInputError(f"{setting}={str(cache_dir)!r} cannot be written here ({p} is read-only or not "
                                     "yours): the cache takes lock files even to read; point cache_dir= (or "
                                     "DUCK_CACHE_DIR) at a writable folder")
            return


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How a value is stored in one file: ``load(path) -> value`` (raising one of :data:`CORRUPT_ERRORS` on a
    damaged file) and ``save(path, value)`` (atomically)."""

    load: Callable[[Path], T]
    save: Callable[[Path, T], Any]


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: np.asarray(f[k]) for k in f.files}


def has_arrays(*names: str) -> Callable[[Mapping[str, np.ndarray]], None]:
    """A check for :meth:`Entry.read` of :data:`NPZ` files: raises ``KeyError`` naming the arrays missing."""
    def check(arrays: Mapping[str, np.ndarray]) -> None:
        missing = [k for k in names if k not in arrays]
        if missing:
            raise KeyError(f"no {', '.join(missing)} array")

    return check


#: a JSON document (strict JSON: NaN/inf become null)
JSON = Codec(load=_load_json, save=atomic_save_json)
#: named numpy arrays (``np.savez_compressed``; loaded without pickle)
NPZ = Codec(load=_load_npz, save=lambda path, arrays: atomic_save_npz(path, **arrays))

_NOTED_LEGACY: set[Path] = set()


class Store:
    """The artifact store under ``cache_dir`` (module docstring). Cheap to create: opening an entry is what
    touches the disk."""

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = check_cache_dir(cache_dir)
        self.root = self.cache_dir / STORE_FOLDER
        self._note_legacy()

    def _note_legacy(self) -> None:
        """Say once per process and cache directory that the caches of the layout before the store are not
        read (their entries are computed again here) and may be deleted."""
        if self.cache_dir in _NOTED_LEGACY:
            return
        _NOTED_LEGACY.add(self.cache_dir)
        old = [name for name in LEGACY_FOLDERS if (self.cache_dir / name).is_dir()]
        if old:
            warn_line(f"{self.cache_dir} holds caches of an earlier layout ({', '.join(f'{n}/' for n in old)}): they "
                  f"are not reused (their keys differ) and are computed again under {self.root}; delete those "
                  "folders to free their space")

    def open(self, spec: ArtifactSpec, label: str | None = None) -> Entry:
        """The entry of ``spec`` (``label`` names it in messages, default its kind); its dead writers'
        temporary files are removed."""
        entry = Entry(self, spec, label or spec.kind.replace("_", " "))
        entry.remove_stale_temps()
        return entry


class Entry:
    """One artifact of the store: a folder of files under one key, with its lock (module docstring)."""

    def __init__(self, store: Store, spec: ArtifactSpec, label: str) -> None:
        self.store, self.spec, self.label = store, spec, label
        self.key = spec.key
        self.dir = store.root / spec.kind / self.key
        self.lock_file = self.dir.with_name(f"{self.key}.lock")
        self.index_lock_file = self.dir.with_name(f"{self.key}.index.lock")

    def __repr__(self) -> str:
        return f"Entry({self.spec.kind}/{self.key})"

    def path(self, *parts: str) -> Path:
        """A file of the entry (``parts`` below its folder)."""
        return self.dir.joinpath(*parts)

    def remove_stale_temps(self) -> list[Path]:
        """Remove the temporary files that dead writers left in the entry (see :mod:`duck.io`)."""
        if not self.dir.is_dir():
            return []
        try:
            return remove_stale_temps_under(self.dir)
        except OSError as e:  # a read-only cache: its leftovers stay, reading still works
            if e.errno in DISK_ERRNOS:
                return []
            raise

    @contextmanager
    def lock(self, *, shared: bool = False, waiting: str | None = None) -> Iterator[None]:
        """Hold the entry's lock (exclusive, or shared: :func:`file_lock`); ``waiting`` is printed as one
        ``warning:`` line when another job holds it."""
        with file_lock(self.lock_file, shared=shared, waiting=None if waiting is None else lambda: warn_line(waiting)):
            yield

    @contextmanager
    def index_lock(self) -> Iterator[None]:
        """Hold the entry's short exclusive lock for a read-modify-write of its index files (taken also by
        holders of the shared entry lock, so that none loses another's update)."""
        with file_lock(self.index_lock_file):
            yield

    # -- files ---------------------------------------------------------------------------------------------
    def make_room(self, path: Path, want: str = "file") -> None:
        """Remove whatever stands at ``path`` (in the entry) in place of a ``want`` (``"file"`` or ``"dir"``),
        with a warning: e.g. a folder where a stored file belongs (everything in an entry is the store's to
        rebuild). A symlink to the right kind is kept."""
        if (path.is_file() if want == "file" else path.is_dir()) or not (path.exists() or path.is_symlink()):
            return
        real_dir = path.is_dir() and not path.is_symlink()
        what = ("a directory" if real_dir else "not a regular file") if want == "file" else "not a directory"
        warn_line(f"{self.label} {self.dir}: {path.name} is {what}; removing it and rebuilding what it held")
        try:
            if real_dir:
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as e:
            raise DuckInputError(f"{self.label} {self.dir}: cannot remove {path} ({e.strerror or e}); delete it "
                                 "by hand or point DUCK_CACHE_DIR / cache_dir= at another folder") from None

    def write(self, name: str, write: Callable[[IO[bytes]], None]) -> Path:
        """Write the file ``name`` atomically (``write(fileobj)``; refusals as one :class:`DuckInputError`)."""
        return atomic_write(self.path(name), write)

    def save(self, name: str, value: T, codec: Codec[T]) -> Path:
        """Store ``value`` in the file ``name`` with ``codec`` (atomically)."""
        path = self.path(name)
        codec.save(path, value)
        return path

    def read(self, name: str, codec: Codec[T], check: Callable[[T], None] | None = None) -> T | None:
        """The value stored in ``name``, or None when there is none. A file that does not load with ``codec``,
        or whose value ``check`` rejects (raising one of :data:`CORRUPT_ERRORS`), is damage: one ``warning:``
        line, the file is removed and None returned (the caller computes it again)."""
        path = self.path(name)
        self.make_room(path)
        if not path.is_file():
            return None
        try:
            value = codec.load(path)
            if check is not None:
                check(value)
        except CORRUPT_ERRORS as e:
            self.warn_corrupt(path, e)
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
            return None
        return value

    def warn_corrupt(self, path: Path, error: BaseException) -> None:
        """One warning line for a damaged file of the entry that is about to be computed again."""
        reason = (str(error).splitlines() or [""])[0][:120] or type(error).__name__
        warn_line(f"{self.label} {self.dir}: corrupt {path.relative_to(self.dir)} ({reason}); recomputing it")

    def get_or_compute(self, name: str, compute: Callable[[], T], codec: Codec[T], *, reuse: bool = True,
                       check: Callable[[T], None] | None = None, waiting: str | None = None) -> tuple[T, bool]:
        """``(value, reused)``: the value stored in ``name`` (with ``reuse``), else ``compute()`` stored there.
        Concurrent callers take turns on the entry's lock: one computes, the others wait and read its result."""
        if reuse:
            value = self.read(name, codec, check)
            if value is not None:
                return value, True
        with self.lock(waiting=waiting):
            if reuse:
                value = self.read(name, codec, check)
                if value is not None:
                    return value, True
            value = compute()
            self.save(name, value, codec)
        return value, False

    def update_json(self, name: str, change: Callable[[Any], Any], default: Callable[[], Any] = dict) -> Any:
        """Read-modify-write of the JSON file ``name`` under :meth:`index_lock`: ``change(current)`` returns the
        new content (``default()`` when the file is missing or damaged); returns it. Concurrent updates are
        applied one after the other, none lost."""
        with self.index_lock():
            current = self.read(name, JSON)
            new = change(default() if current is None else current)
            self.save(name, new, JSON)
        return new
