"""The one artifact store (duck/store.py, issue 37 item 3): keys from typed specs, concurrent writers, killed
writers, refused writes, damaged entries, the caches of the earlier layout."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duck import store as store_mod
from duck.errors import DuckInputError
from duck.store import JSON, NPZ, ArtifactSpec, Store, canonical_json

AS_ROOT = os.geteuid() == 0

# ----------------------------------------------------------------------------------------------------- keys
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
fields_st = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


@settings(max_examples=150, deadline=None)
@given(fields=fields_st)
def test_the_same_spec_has_the_same_key_whatever_the_order_or_container(fields):
    reordered = dict(reversed(list(fields.items())))
    a = ArtifactSpec("shadow_banks", 1, fields)
    assert a.key == ArtifactSpec("shadow_banks", 1, reordered).key == ArtifactSpec("shadow_banks", 1, json.loads(
        json.dumps(fields))).key
    assert len(a.key) == 20 and int(a.key, 16) >= 0 and a == ArtifactSpec("shadow_banks", 1, reordered)


@settings(max_examples=150, deadline=None)
@given(a=fields_st, b=fields_st)
def test_different_specs_have_different_keys(a, b):
    same = canonical_json(a) == canonical_json(b)
    assert (ArtifactSpec("models", 1, a).key == ArtifactSpec("models", 1, b).key) == same
    assert ArtifactSpec("models", 1, a).key != ArtifactSpec("models", 2, a).key  # the kind's version
    assert ArtifactSpec("models", 1, a).key != ArtifactSpec("retrain_banks", 1, a).key  # the kind


def test_plain_values_of_the_same_content_hash_alike():
    from omegaconf import OmegaConf

    cfg = {"lr": 0.1, "sizes": [1, 2], "path": "/data", "n": 3, "flag": True}
    typed = {"lr": np.float64(0.1), "sizes": (np.int64(1), 2), "path": Path("/data"), "n": np.int32(3),
             "flag": np.bool_(True)}
    assert ArtifactSpec("models", 1, typed).key == ArtifactSpec("models", 1, cfg).key
    assert ArtifactSpec("models", 1, OmegaConf.create(cfg)).key == ArtifactSpec("models", 1, cfg).key
    assert ArtifactSpec("models", 1, {"x": 1}).key != ArtifactSpec("models", 1, {"x": 1.5}).key
    assert ArtifactSpec("models", 1, {"x": float("nan")}).fields == {"x": "nan"}  # canonical JSON has no NaN
    with pytest.raises(ValueError, match="kind"):
        ArtifactSpec("../models", 1, {})
    with pytest.raises(ValueError, match="version"):
        ArtifactSpec("models", 0, {})


# ------------------------------------------------------------------------------------------ layout, reads
def test_layout_and_a_damaged_file_is_recomputed_with_one_warning(tmp_path, capsys):
    entry = Store(tmp_path).open(ArtifactSpec("forgetting_scores", 3, {"set": "abc"}), label="score")
    assert entry.dir == tmp_path / "store-v1" / "forgetting_scores" / entry.key
    assert entry.lock_file == tmp_path / "store-v1" / "forgetting_scores" / f"{entry.key}.lock"
    calls = []

    def compute():
        calls.append(1)
        return {"quality": 0.5}

    assert entry.get_or_compute("score.json", compute, JSON) == ({"quality": 0.5}, False)
    assert entry.get_or_compute("score.json", compute, JSON) == ({"quality": 0.5}, True) and len(calls) == 1
    entry.path("score.json").write_text('{"quality": 0.')  # truncated
    assert entry.get_or_compute("score.json", compute, JSON) == ({"quality": 0.5}, False) and len(calls) == 2
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "corrupt score.json" in err and "recomputing it" in err
    entry.path("score.json").unlink()
    entry.path("score.json").mkdir()  # a folder where the file belongs
    assert entry.get_or_compute("score.json", compute, JSON)[1] is False and entry.path("score.json").is_file()
    assert "score.json is a directory" in capsys.readouterr().err


def test_a_check_that_rejects_the_stored_value_recomputes_it(tmp_path, capsys):
    entry = Store(tmp_path).open(ArtifactSpec("unlearned_sets", 1, {"k": 1}))
    entry.save("run_000.npz", {"phi": np.ones(3)}, NPZ)

    def check(arrays):
        if arrays["phi"].shape != (4,):
            raise ValueError(f"phi is {arrays['phi'].shape}, expected (4,)")

    assert entry.read("run_000.npz", NPZ, check) is None and not entry.path("run_000.npz").exists()
    assert "expected (4,)" in capsys.readouterr().err


def test_the_caches_of_the_earlier_layout_are_named_once(tmp_path, capsys):
    (tmp_path / "shadow_banks" / "0123").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    Store(tmp_path)
    Store(tmp_path).open(ArtifactSpec("models", 1, {}))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {tmp_path} holds caches of an earlier layout (models/, "
                                               "shadow_banks/)") and "delete those folders" in err[0]
    Store(tmp_path / "fresh")
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------- concurrent writers
def _compute_once(root: str, counter: str, start: float) -> list[float]:
    """A worker: wait for the common start, then get-or-compute one entry (the computation logs itself)."""
    while time.time() < start:
        time.sleep(0.001)
    entry = Store(root).open(ArtifactSpec("models", 1, {"seed": 0}))

    def compute() -> dict[str, np.ndarray]:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # long enough for every other worker to arrive and wait
        return {"w": np.random.default_rng().standard_normal(4)}

    value, _ = entry.get_or_compute("model.npz", compute, NPZ)
    return value["w"].tolist()


def _append_ids(root: str, worker: int, n: int, shared: bool) -> None:
    entry = Store(root).open(ArtifactSpec("shadow_banks", 1, {"seed": 0}))
    with entry.lock(shared=shared):
        for i in range(n):
            entry.update_json("meta.json", lambda meta, i=i: {**meta, "trained": [*meta.get("trained", []),
                                                                                   f"{worker}.{i}"]})


def test_concurrent_writers_of_one_key_compute_it_once_and_agree(tmp_path):
    ctx = multiprocessing.get_context("fork")
    counter = tmp_path / "computations.txt"
    start = time.time() + 0.5
    with ctx.Pool(4) as pool:
        results = pool.starmap(_compute_once, [(str(tmp_path), str(counter), start)] * 4)
    assert len(counter.read_text().splitlines()) == 1  # one computation
    assert all(r == results[0] for r in results)  # every worker got the stored result
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {"seed": 0}))
    assert sorted(p.name for p in entry.dir.iterdir()) == ["model.npz"]  # no temporary file left


@pytest.mark.parametrize("shared", [False, True])
def test_concurrent_index_updates_lose_no_entry(tmp_path, shared):
    """Several processes (holding the entry's lock shared, as the slices of a bank do, or in turns) each add
    their entries to one index file: none is lost."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_ids, args=(str(tmp_path), w, 15, shared)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    meta = json.loads(Store(tmp_path).open(ArtifactSpec("shadow_banks", 1, {"seed": 0})).path("meta.json")
                      .read_text())
    assert sorted(meta["trained"]) == sorted(f"{w}.{i}" for w in range(4) for i in range(15))


def _hold(root: str, shared: bool, hold_s: float, log: str) -> None:
    entry = Store(root).open(ArtifactSpec("shadow_banks", 1, {"seed": 0}))
    with entry.lock(shared=shared):
        t0 = time.time()
        time.sleep(hold_s)
        with open(log, "a") as f:
            f.write(f"{'S' if shared else 'X'} {t0:.3f} {time.time():.3f}\n")


def test_shared_holders_overlap_and_an_exclusive_holder_waits_for_them(tmp_path):
    ctx = multiprocessing.get_context("fork")
    log = tmp_path / "log.txt"
    readers = [ctx.Process(target=_hold, args=(str(tmp_path), True, 1.0, str(log))) for _ in range(2)]
    for p in readers:
        p.start()
    time.sleep(0.4)
    writer = ctx.Process(target=_hold, args=(str(tmp_path), False, 0.0, str(log)))
    writer.start()
    for p in (*readers, writer):
        p.join(30)
    rows = [line.split() for line in log.read_text().splitlines()]
    spans = {kind: [(float(a), float(b)) for k, a, b in rows if k == kind] for kind in "SX"}
    (s1, e1), (s2, e2) = spans["S"]
    assert max(s1, s2) < min(e1, e2)  # the shared holders held it at the same time
    assert spans["X"][0][0] >= max(e1, e2) - 0.01  # the exclusive one only after both


def test_a_second_process_waits_with_one_warning(tmp_path):
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {"seed": 0}))
    code = ("import sys; from duck.store import Store, ArtifactSpec; "
            "e = Store(sys.argv[1]).open(ArtifactSpec('models', 1, {'seed': 0})); "
            "cm = e.lock(waiting='the model is being trained by another job; waiting'); cm.__enter__(); print('got it')")
    with entry.lock():
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)
        assert proc.poll() is None  # waiting
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "got it" and err.strip() == "warning: the model is being trained by another job; waiting"


# ---------------------------------------------------------------------------------------- killed writers
def test_a_writer_killed_mid_write_leaves_no_artifact_and_the_next_open_removes_its_temp(tmp_path):
    from conftest import kill_writer_mid_write

    code = ("import sys, time; from duck.store import Store, ArtifactSpec; "
            "e = Store(sys.argv[1]).open(ArtifactSpec('models', 1, {'seed': 0})); "
            "e.write('model.ckpt', lambda f: (f.write(b'x' * 4096), f.flush(), time.sleep(120)))")
    entry_dir = Store(tmp_path).open(ArtifactSpec("models", 1, {"seed": 0})).dir
    entry_dir.mkdir(parents=True)
    kill_writer_mid_write(code, str(tmp_path), folder=entry_dir)
    assert not (entry_dir / "model.ckpt").exists() and len(list(entry_dir.glob(".*.tmp"))) == 1
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {"seed": 0}))  # the next open sweeps it
    assert list(entry.dir.iterdir()) == []


def test_stale_temporary_files_of_other_hosts_go_only_when_old(tmp_path):
    entry = Store(tmp_path).open(ArtifactSpec("shadow_banks", 1, {"seed": 0}))
    (entry.dir / "shadows").mkdir(parents=True)
    fresh = entry.dir / "shadows" / ".shadow_0001.ckpt.otherhost.7.00000000.tmp"
    old = entry.dir / "shadows" / ".shadow_0002.ckpt.otherhost.7.11111111.tmp"
    live = entry.dir / f".meta.json.{__import__('socket').gethostname()}.{os.getpid()}.22222222.tmp"
    for f in (fresh, old, live):
        f.write_bytes(b"partial")
    os.utime(old, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    assert entry.remove_stale_temps() == [old]
    assert fresh.exists() and live.exists()


# ------------------------------------------------------------------------------------------ refused writes
def _refuse_under(monkeypatch, root: Path, name: str, err: int) -> None:
    """Make ``os.<name>`` raise ``OSError(err)`` for paths under ``root`` (a full or read-only disk)."""
    real = getattr(os, name)

    def refused(*args, **kwargs):
        if any(str(a).startswith(str(root)) for a in args if isinstance(a, (str, os.PathLike))):
            raise OSError(err, os.strerror(err), str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, refused)


@pytest.mark.parametrize("call,err,reason", [
    ("replace", errno.ENOSPC, "no space left on the device"),
    ("open", errno.EROFS, "the file system is read-only"),
    ("open", errno.ENOSPC, "no space left on the device"),
])
def test_a_refused_write_is_one_line_and_leaves_nothing_partial(tmp_path, monkeypatch, call, err, reason):
    entry = Store(tmp_path).open(ArtifactSpec("forgetting_scores", 3, {"set": "abc"}))
    entry.save("score.json", {"old": True}, JSON)
    _refuse_under(monkeypatch, tmp_path, call, err)
    with pytest.raises(DuckInputError) as info:
        entry.save("score.json", {"new": True}, JSON)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"cannot write {entry.path('score.json')}: {reason}")
    assert "cache_dir=" in message and "nothing partial was left" in message
    monkeypatch.undo()
    assert json.loads(entry.path("score.json").read_text()) == {"old": True}
    assert [p.name for p in entry.dir.iterdir()] == ["score.json"]


def test_enospc_while_writing_through_os_write_is_one_line(tmp_path, monkeypatch):
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {}))

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(DuckInputError, match=r"cannot write .*model\.ckpt: no space left on the device"):
        entry.write("model.ckpt", lambda f: os.write(f.fileno(), b"weights"))
    monkeypatch.undo()
    assert list(entry.dir.iterdir()) == []


@pytest.mark.parametrize("err,reason", [(errno.EROFS, "the file system is read-only"),
                                        (errno.ENOSPC, "no space left on the device")])
def test_a_lock_the_disk_refuses_is_one_line(tmp_path, monkeypatch, err, reason):
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {}))
    _refuse_under(monkeypatch, tmp_path, "open", err)
    for shared in (False, True):
        with pytest.raises(DuckInputError, match=f"cannot write {entry.lock_file}: {reason}"):
            with entry.lock(shared=shared):
                pass


@pytest.mark.skipif(AS_ROOT, reason="root writes into read-only directories (simulated above)")
def test_a_read_only_cache_is_one_line_and_readable(tmp_path):
    entry = Store(tmp_path).open(ArtifactSpec("models", 1, {}))
    entry.save("metrics.json", {"acc": 1.0}, JSON)
    for folder in (entry.dir, entry.dir.parent):
        folder.chmod(0o555)
    try:
        again = Store(tmp_path).open(ArtifactSpec("models", 1, {}))
        assert again.read("metrics.json", JSON) == {"acc": 1.0}  # reading still works
        with pytest.raises(DuckInputError, match="permission denied"):
            again.save("other.json", {}, JSON)
        with pytest.raises(DuckInputError, match="permission denied"):
            with again.lock():
                pass
    finally:
        for folder in (entry.dir, entry.dir.parent):
            folder.chmod(0o755)


def test_a_full_cache_disk_ends_a_job_in_one_error_line(run_cli, tmp_path, monkeypatch):
    """duck-train's cached original cannot be written: one ``error:`` line naming the file, exit 2."""
    from conftest import SYNTH_ARGS

    cache = tmp_path / "cache"
    monkeypatch.setenv("DUCK_CACHE_DIR", str(cache))
    _refuse_under(monkeypatch, cache, "replace", errno.ENOSPC)
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "audit=false")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: cannot write {cache / 'store-v1' / 'models'}") and "no space left" in lines[0]


def test_the_store_sits_low_and_imports_no_deep_learning():
    code = "import sys, duck.store; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert store_mod.STORE_FOLDER == "store-v1"
