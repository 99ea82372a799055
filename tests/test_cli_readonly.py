"""An output directory Hydra cannot create (a read-only launch directory or parent, a file in the path, a full
disk) or whose log file it cannot open: one ``error:`` line naming the directory and the setting to change,
exit status 2, nothing written. Other errors keep Hydra's own report."""

from __future__ import annotations

import errno
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


def test_existing_directory_refusing_files(run_cli, monkeypatch, tmp_path):
    """The run directory exists but refuses new files (where Hydra's log file would fail with ``ValueError:
    Unable to configure handler 'file'``): the probe file names the path (simulated: works as root)."""
    real_open = os.open

    def refuse(path: object, *args: object, **kwargs: object) -> int:
        if Path(os.fsdecode(path)).parent == tmp_path / "run":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot write the run directory {run_dir} (Permission denied: {run_dir}/")
    assert lines[0].endswith("; pass hydra.run.dir=WRITABLE_DIR")


def test_job_errors_are_not_taken_for_the_run_directory(run_cli, monkeypatch):
    """A permission error of the job itself (even inside the run directory) keeps Hydra's report."""
    from duck.pipeline import jobs

    def refuse(job: object, out: Path, *tracker: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(out / "model.ckpt"))

    monkeypatch.setitem(jobs.JOBS, "train", refuse)
    code, _, err, _ = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1")
    assert code == 1 and "PermissionError" in err and "cannot write the run directory" not in err


def test_only_unwritable_errors_are_refused(tmp_path, monkeypatch):
    """Other OS errors of the output directory are not taken for an unwritable one (Hydra reports them)."""
    from duck.cli import _output

    def broken(folder: Path) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(folder))

    monkeypatch.setattr(_output, "_probe", broken)
    with pytest.raises(OSError, match="Input/output error"):
        _output.check_output_folder(tmp_path / "run", False, [])
    message = _output.unwritable_message(OSError(errno.EEXIST, "File exists", str(tmp_path / "run")),
                                         tmp_path / "run", True, False)
    assert message == (f"cannot write the sweep directory {tmp_path / 'run'} (a file of that name exists); "
                       "run from a writable directory or pass hydra.sweep.dir=WRITABLE_DIR")


def test_the_probe_leaves_nothing_behind(tmp_path):
    from duck.cli._output import check_output_folder

    check_output_folder(tmp_path / "a" / "b", False, [])
    assert tree(tmp_path) == {"a", "a/b"}


def test_read_only_launch_directory_simulated(tmp_path, monkeypatch, capsys):
    """The default run directory under a launch directory that refuses new folders (simulated: works as root):
    the advice is to run elsewhere, the path is the folder the system refused."""
    from duck.cli._output import check_output_folder

    real_mkdir = os.mkdir

    def refuse(path: object, *args: object, **kwargs: object) -> None:
        if Path(os.fsdecode(path)) == tmp_path / "outputs":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(SystemExit) as exit_:
        check_output_folder(tmp_path / "outputs" / "train" / "now", False, ["hydra.verbose=false"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"error: cannot write the run directory {tmp_path}/outputs/train/now "
                                       f"(Permission denied: {tmp_path}/outputs); run from a writable directory "
                                       "or pass hydra.run.dir=WRITABLE_DIR\n")
    assert tree(tmp_path) == set()
