"""The output directory checked through Hydra's public callback API: one ``error:`` line and exit status 2 when
the run (``-m``: sweep) directory cannot be created or written, before Hydra creates it and opens its log file
(whose failure Hydra reports as a 30-line traceback with exit status 1).

Hydra calls ``on_run_start`` / ``on_multirun_start`` after composing the config and before it makes the output
directory (``hydra.core.utils.run_job``, the launchers); the callback makes the directory itself (Hydra's
``mkdir(exist_ok=True)`` then finds it) and writes and removes a probe file in it, as the log file will be."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

from duck.io import DISK_ERRNOS

try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - Hydra < 1.1 has no callbacks (pyproject.toml requires 1.3)
    Callback = object  # type: ignore[assignment,misc]

#: errno values of an output directory or log file that cannot be made: the file system's refusals of
#: :data:`duck.io.DISK_ERRNOS` (no permission, a read-only or full file system; a name too long is refused before
#: Hydra starts, by ``check_output_dir``), and a file where a directory should be (or where the directory itself
#: should be)
UNWRITABLE = (DISK_ERRNOS - {errno.ENAMETOOLONG}) | {errno.ENOTDIR, errno.EEXIST}


def unwritable_message(error: OSError, folder: Path, multirun: bool, key_given: bool) -> str:
    """The error line for ``error`` met while making or writing the output directory ``folder``."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    reason = ("a file of that name exists" if error.errno == errno.EEXIST
              else error.strerror or errno.errorcode.get(error.errno or 0, str(error)))
    if error.filename is not None:
        failed = Path(os.path.abspath(os.fsdecode(error.filename)))
        if failed != folder:
            reason += f": {failed}"
    advice = ("free some space or pass" if error.errno in (errno.ENOSPC, errno.EDQUOT)
              else "pass" if key_given else "run from a writable directory or pass")
    return (f"cannot write the {'sweep' if multirun else 'run'} directory {folder} ({reason}); "
            f"{advice} {key}=WRITABLE_DIR")


def _probe(folder: Path) -> None:
    """Make ``folder`` (with its parents) and create, write and remove a file in it; OSError where refused."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-probe-{os.getpid()}.tmp"  # a killed probe's name is ignored as a temporary file
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def check_output_folder(folder: str | os.PathLike, multirun: bool, hydra_overrides: list[str]) -> None:
    """Make and probe the output directory; an :data:`UNWRITABLE` refusal prints one ``error:`` line and exits
    with status 2 (``SystemExit`` passes through Hydra's error report, which catches ``Exception``)."""
    path = Path(os.path.abspath(os.fspath(folder)))
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        _probe(path)
    except OSError as e:
        if e.errno not in UNWRITABLE:
            raise
        given = any(o.startswith(f"{key}=") for o in hydra_overrides)
        print(f"error: {unwritable_message(e, path, multirun, given)}", file=sys.stderr)
        raise SystemExit(2) from None


class OutputDirCheck(Callback):  # type: ignore[misc,valid-type]
    """Hydra callback of every command (``hydra.callbacks.output_dir`` in each job config): the run or sweep
    directory checked before Hydra uses it (:func:`check_output_folder`)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        check_output_folder(str(config.hydra.run.dir), False, list(config.hydra.overrides.hydra))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        check_output_folder(str(config.hydra.sweep.dir), True, list(config.hydra.overrides.hydra))
