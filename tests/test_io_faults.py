"""Faults while writing (issue 26 item 3): a killed writer's temporary file is removed by the next writer of the
same target (only when its process is gone), a full or read-only disk leaves nothing partial and ends in one
error naming the path, and re-linking a cached checkpoint onto its own hard link leaves no temporary file."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest

from duck.errors import DuckInputError
from duck.io import atomic_write, atomic_write_text, remove_stale_temps


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_next_writer_removes_only_a_dead_writers_temporary_files(tmp_path):
    target = tmp_path / "model.ckpt"
    host = socket.gethostname()
    dead = tmp_path / f".model.ckpt.{host}.{_dead_pid()}.ab12cd34.tmp"
    live = tmp_path / f".model.ckpt.{host}.{os.getpid()}.ffff0000.tmp"      # a writer still at work
    remote = tmp_path / ".model.ckpt.otherhost.1.00000000.tmp"                # another machine's writer
    other_target = tmp_path / f".metrics.json.{host}.{_dead_pid()}.00000000.tmp"
    for f in (dead, live, remote, other_target):
        f.write_bytes(b"partial")
    atomic_write_text(target, "weights")
    assert target.read_text() == "weights"
    assert not dead.exists() and live.exists() and remote.exists() and other_target.exists()
    assert remove_stale_temps(tmp_path / "metrics.json") == [other_target]


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   OSError(errno.EROFS, "Read-only file system")])
def test_a_refused_write_leaves_the_old_file_and_no_partial_file(tmp_path, error):
    target = tmp_path / "audit.json"
    target.write_text("old")

    def write(f):
        f.write(b"half of it")
        raise error

    with pytest.raises(DuckInputError, match=r"cannot write .*audit\.json: (no space left|the file system is read-only)"):
        atomic_write(target, write)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["audit.json"]


def test_a_wrapped_disk_error_is_recognised(tmp_path):
    """torch.save reports a failed write as a RuntimeError raised while handling the OSError."""
    def write(f):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed") from None

    with pytest.raises(DuckInputError, match="no space left"):
        atomic_write(tmp_path / "x.ckpt", write)
    assert list(tmp_path.iterdir()) == []


def test_other_errors_propagate_unchanged(tmp_path):
    def write(f):
        raise KeyError("bug")

    with pytest.raises(KeyError):
        atomic_write(tmp_path / "x.json", write)
    assert list(tmp_path.iterdir()) == []


def test_relinking_onto_its_own_hard_link_leaves_no_temporary_file(tmp_path):
    from duck.pipeline.cache import link_or_copy

    src = tmp_path / "cache" / "model.ckpt"
    src.parent.mkdir()
    src.write_bytes(b"weights")
    dst = tmp_path / "run" / "original" / "model.ckpt"
    link_or_copy(src, dst)
    link_or_copy(src, dst)  # dst is already a hard link to src: rename(2) would do nothing
    assert dst.read_bytes() == b"weights" and os.path.samefile(src, dst)
    assert [p.name for p in dst.parent.iterdir()] == ["model.ckpt"]


def test_a_run_directory_with_only_a_killed_writers_temporary_file_is_not_refused(tmp_path):
    from duck.cli._app import _results_in

    (tmp_path / "original").mkdir()
    (tmp_path / "original" / f".model.ckpt.{socket.gethostname()}.{_dead_pid()}.0.tmp").write_bytes(b"x")
    (tmp_path / ".hydra").mkdir()
    assert _results_in(tmp_path) == []
    (tmp_path / "summary.json").write_text("{}")
    assert _results_in(tmp_path) == ["summary.json"]


def test_kill_9_mid_write_then_the_next_writer_cleans_up(tmp_path):
    from conftest import kill_writer_mid_write

    target = tmp_path / "model.ckpt"
    code = ("import sys, time; from duck.io import atomic_write; "
            "atomic_write(sys.argv[1], lambda f: (f.write(b'x' * 4096), f.flush(), time.sleep(120)))")
    kill_writer_mid_write(code, str(target), folder=tmp_path)
    assert not target.exists() and len(list(tmp_path.glob(".*.tmp"))) == 1  # what kill -9 leaves
    atomic_write_text(target, "weights")
    assert target.read_text() == "weights" and list(tmp_path.glob(".*.tmp")) == []


def test_a_bank_beyond_the_machine_is_refused_before_any_work(run_cli):
    from conftest import SYNTH_ARGS, written_files

    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "attack.n_shadow=1000000000")
    assert code == 2 and err.count("error:") == 1 and written_files(run_dir) == set(), err
    assert "attack.n_shadow=1000000000: the shadow bank of 1000000000 models needs about" in err
    assert "lower attack.n_shadow" in err
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "attack.forgetting.n_retrained=100000000")
    assert code == 2 and "attack.forgetting.n_retrained=100000000: the retrain bank" in err, err


def test_paths_and_keys_beyond_the_file_system_end_in_one_line(run_cli, tmp_path):
    from conftest import SYNTH_ARGS

    long_dir = tmp_path / ("d" * 300)
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, f"hydra.run.dir={long_dir}")
    assert code == 2 and err.count("error:") == 1 and "File name too long" in err and "Traceback" not in err, err
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "+" + "k" * 5000 + "=1")
    assert code == 2 and "is 5000 characters long: no setting has such a name" in err and "Traceback" not in err
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code, _, err, _ = run_cli("run", *SYNTH_ARGS[1:], "data=fashion_mnist", "model=smallcnn28", f"data.root={loop}")
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err


def test_two_jobs_on_one_cache_train_the_original_and_the_oracle_once(tmp_path):
    """Two duck-run jobs of one setup started together: one trains the original and the oracle, the other waits
    for the cache entry's lock and reuses them."""
    import json
    from pathlib import Path

    from conftest import SYNTH_ARGS

    exe = Path(sys.executable).parent / "duck-run"
    args = [*SYNTH_ARGS, "recipe.epochs=3", "scenario.forget_classes=[1]", "audit=false",
            f"cache_dir={tmp_path / 'cache'}"]
    procs = [subprocess.Popen([str(exe), *args, f"hydra.run.dir={tmp_path / f'run{i}'}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    for role in ("original", "retrained"):
        reused = sorted(json.loads((tmp_path / f"run{i}" / role / "metrics.json").read_text())["reused_from_cache"]
                        for i in range(2))
        assert reused == [False, True], (role, outs)


@pytest.mark.slow  # a promise (wheel / sharded banks): run by make test's second pass
def test_two_shard_tasks_build_one_bank_and_the_audit_trains_nothing(tmp_path):
    """attack.num_shards=2: two duck-run array tasks started together each train their slice of the LiRA
    bank and of the forgetting audit's banks (disjoint models, side by side); the job without shards then
    trains no model of any bank."""
    import json
    from pathlib import Path

    from conftest import SYNTH_ARGS

    exe = Path(sys.executable).parent / "duck-run"
    args = [*SYNTH_ARGS, "recipe.epochs=2", "scenario.forget_classes=[1]", "attack.n_shadow=4",
            "attack.svm_mia.enabled=false", "report.shareable.enabled=false", "report.analysis.enabled=false",
            "attack.forgetting.n_unlearned=3", "attack.forgetting.n_retrained=3", f"cache_dir={tmp_path / 'cache'}"]
    procs = [subprocess.Popen([str(exe), *args, "attack.num_shards=2", f"attack.shard={i}",
                               f"hydra.run.dir={tmp_path / f'shard{i}'}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    shards = [json.loads((tmp_path / f"shard{i}" / "shard.json").read_text()) for i in range(2)]
    for name in shards[0]["banks"]:
        got = [s["banks"][name]["trained"] for s in shards]
        assert sorted(got[0] + got[1]) == list(range(shards[0]["banks"][name]["n_models"])), (name, got)
        assert all(k % 2 == i for i in range(2) for k in got[i])
    assert not (tmp_path / "shard0" / "summary.json").exists()  # a shard task trains banks only
    code = subprocess.run([str(exe), *args, f"hydra.run.dir={tmp_path / 'audit'}"], capture_output=True, text=True)
    assert code.returncode == 0, code.stderr
    audit = json.loads((tmp_path / "audit" / "unlearned" / "audit.json").read_text())
    assert audit["bank"]["trained_now"] == 0
    assert all(s["computed_now"] == 0 for k, s in audit["forgetting"]["sets"].items() if k != "method")


def test_shard_settings_are_checked(run_cli, tmp_path):
    from conftest import SYNTH_ARGS

    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "attack.num_shards=2", "attack.shard=2")
    assert code == 2 and "attack.shard=2 must be an integer in 0..1" in err
    ckpt = tmp_path / "x.ckpt"
    ckpt.write_bytes(b"")  # exists (a missing one is refused first), never read: the settings are refused before
    code, _, err, _ = run_cli("unlearn", *SYNTH_ARGS, f"ckpt={ckpt}", "audit=true", "attack.num_shards=2")
    assert code == 2 and "attack.num_shards=2" in err
