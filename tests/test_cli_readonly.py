"""An output directory Hydra cannot create (a read-only launch directory or parent, a file in the path, a full
disk) or whose log file it cannot open: one ``error:`` line naming the directory and the setting to change,
exit status 2, nothing written. Other errors keep Hydra's own report."""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SYNTH_ARGS

AS_ROOT = os.geteuid() == 0


def duck_train(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real ``duck-train`` console script, run in ``cwd``."""
    script = Path(sys.executable).with_name("duck-train")
    return subprocess.run([str(script), *args], cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("multirun", [False, True])
def test_file_in_the_output_path(tmp_path, multirun):
    """``hydra.run.dir`` / ``hydra.sweep.dir`` through a regular file (ENOTDIR: root too cannot create it)."""
    (tmp_path / "afile").write_text("")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    args = ("-m", *SYNTH_ARGS, "seed=1,2") if multirun else SYNTH_ARGS
    line = one_error_line(duck_train(*args, "recipe.epochs=1", f"{key}={tmp_path}/afile/out", cwd=tmp_path))
    kind = "sweep" if multirun else "run"
    assert line == (f"error: cannot write the {kind} directory {tmp_path}/afile/out (Not a directory); "
                    f"pass {key}=WRITABLE_DIR")
    assert tree(tmp_path) == {"afile"}


@pytest.mark.skipif(AS_ROOT, reason="root writes into read-only directories (the tests above cover root)")
@pytest.mark.parametrize("where", ["launch directory", "parent", "existing run directory"])
def test_read_only_directory(tmp_path, where):
    ro = tmp_path / "ro"
    (ro / "existing").mkdir(parents=True)
    args = {"launch directory": (), "parent": (f"hydra.run.dir={ro}/run",),
            "existing run directory": (f"hydra.run.dir={ro}/existing",)}[where]
    for folder in (ro / "existing", ro):
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        line = one_error_line(duck_train(*SYNTH_ARGS, "recipe.epochs=1", *args, cwd=ro))
    finally:
        for folder in (ro, ro / "existing"):
            folder.chmod(stat.S_IRWXU)
    assert line.startswith(f"error: cannot write the run directory {ro}/") and "(Permission denied" in line
    assert line.endswith("hydra.run.dir=WRITABLE_DIR")
    assert ("run from a writable directory" in line) == (where == "launch directory")
    if where == "launch directory":
        assert f"Permission denied: {ro}/outputs)" in line
    if where == "existing run directory":  # the directory is there: the log file is what fails
        assert f"Permission denied: {ro}/existing/" in line
    assert tree(ro) == {"existing"}


def test_full_disk(run_cli, monkeypatch, tmp_path):
    """ENOSPC while Hydra creates the run directory (simulated: works as root)."""
    real_mkdir = Path.mkdir

    def full(self: Path, *args: object, **kwargs: object) -> None:
        if self == tmp_path / "run":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", full)
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1")
    assert code == 2 and err.strip() == (f"error: cannot write the run directory {run_dir} (No space left on "
                                         "device); free some space or pass hydra.run.dir=WRITABLE_DIR")
    assert not run_dir.exists()


def test_log_file_refused(run_cli, monkeypatch, tmp_path):
    """``logging.config`` wraps the log file's PermissionError in ``ValueError: Unable to configure handler
    'file'``: the chain is followed (simulated: works as root)."""
    real_open = logging.FileHandler._open

    def refuse(self: logging.FileHandler) -> object:
        if Path(self.baseFilename).parent == tmp_path / "run":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.baseFilename)
        return real_open(self)

    monkeypatch.setattr(logging.FileHandler, "_open", refuse)
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot write the run directory {run_dir} (Permission denied: {run_dir}/")
    assert lines[0].endswith("; pass hydra.run.dir=WRITABLE_DIR")


def test_job_errors_are_not_taken_for_the_run_directory(run_cli, monkeypatch):
    """A permission error of the job itself (even inside the run directory) keeps Hydra's report."""
    from duck.pipeline import jobs

    def refuse(job: object, out: Path) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(out / "model.ckpt"))

    monkeypatch.setattr(jobs, "train", refuse)
    code, _, err, _ = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1")
    assert code == 1 and "PermissionError" in err and "cannot write the run directory" not in err


def test_only_unwritable_errors_are_recognised():
    from duck.cli._app import unwritable_output_message

    assert unwritable_output_message(ValueError("Unable to configure handler 'file'"), []) is None
    assert unwritable_output_message(RuntimeError("boom"), []) is None
    assert unwritable_output_message(FileNotFoundError(errno.ENOENT, "No such file", "x"), []) is None
    wrapped = ValueError("Unable to configure handler 'file'")
    wrapped.__cause__ = PermissionError(errno.EACCES, "Permission denied", "/x/run/train.log")
    assert unwritable_output_message(wrapped, []) is None  # no Hydra config in its frames: not Hydra's start-up
