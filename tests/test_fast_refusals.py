"""Input errors are refused before the heavy imports (issue 37): the command line checks what a composed config
can show (required settings, checkpoint / forget-id / margins files, a data.root that loops) without importing
torch or Lightning; a data.root loop and a model too large for memory are one error line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from duck.errors import DuckInputError
from duck.models import factory
from duck.paths import resolved

REPO = Path(__file__).resolve().parents[1]

#: a torch and a lightning that cannot be imported: a refusal that needs them fails with ImportError instead
_BLOCKER = "raise ImportError('{name} was imported before the input was checked')\n"


def _run_without_torch(tmp_path: Path, command: str, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    blocked = tmp_path / "blocked"
    for name in ("torch", "lightning"):
        (blocked / name).mkdir(parents=True, exist_ok=True)
        (blocked / name / "__init__.py").write_text(_BLOCKER.format(name=name))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(REPO)]), **env_vars}
    code = f"import sys; sys.argv = ['duck-{command}', *{list(args)!r}]; from duck.cli.{command} import main; main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "loop_a", tmp_path / "loop_b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


@pytest.mark.parametrize("case", ["missing_ckpt", "ckpt_is_folder", "required", "forget_ids", "margins", "root_loop"])
def test_bad_inputs_are_refused_before_torch_is_imported(tmp_path: Path, loop: Path, case: str):
    command, args, expected = {
        "missing_ckpt": ("unlearn", ["ckpt=/nonexistent.pt", "scenario.forget_classes=[3]"],
                         "checkpoint /nonexistent.pt not found; pass ckpt=PATH"),
        "ckpt_is_folder": ("audit", [f"ckpt={tmp_path}", "scenario.forget_classes=[3]"], "is a directory"),
        "required": ("unlearn", [], "required settings ckpt, scenario.forget_classes not given"),
        "forget_ids": ("run", ["scenario=custom", "scenario.forget_ids=/no/ids.txt"],
                       "forget-id file /no/ids.txt not found"),
        "margins": ("audit", ["margins=missing.npz"], "margins=missing.npz: no such file"),
        "root_loop": ("run", ["data=imagefolder", f"data.root={loop}"], "(a loop of symbolic links); point data.root"),
    }[case]
    done = _run_without_torch(tmp_path, command, *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], done.stderr
    assert not (tmp_path / "outputs").exists()  # nothing written


def test_a_good_command_line_does_reach_the_heavy_imports(tmp_path: Path):
    """The blocker works: a valid job imports torch (so the refusals above are refusals before it)."""
    done = _run_without_torch(tmp_path, "train", "data=synthetic", f"hydra.run.dir={tmp_path / 'run'}",
                              HYDRA_FULL_ERROR="1")
    assert done.returncode != 0 and "was imported before the input was checked" in done.stderr


def test_a_symlink_loop_as_data_root_is_one_error_line(loop: Path):
    from duck.data.registry import build_datasets

    with pytest.raises(DuckInputError, match=r"data.root=.*loop_a cannot be followed \(a loop of symbolic links\)"):
        build_datasets("imagefolder", root=str(loop))
    with pytest.raises(DuckInputError, match="data.train_split="):
        resolved(loop / "train", "data.train_split")


def test_a_model_too_large_for_memory_is_refused_before_allocation(monkeypatch: pytest.MonkeyPatch):
    # smallcnn's parameter count is known in closed form from its widths; the refusal uses the meta-device count
    net = factory.create_model("smallcnn", 10, 1, 8).net
    need = sum(p.numel() * 4 for p in net.parameters()) + sum(b.numel() * b.element_size() for b in net.buffers())
    monkeypatch.setattr(factory, "available_memory", lambda: need - 1)
    with pytest.raises(DuckInputError, match=rf"model 'smallcnn' needs {need / 1e3:.1f} kB of memory for its weights "
                       rf"alone and {(need - 1) / 1e3:.1f} kB is available; choose a smaller model"):
        factory.create_model("smallcnn", 10, 1, 8)
    monkeypatch.setattr(factory, "available_memory", lambda: need)
    factory.create_model("smallcnn", 10, 1, 8)  # exactly enough: built
    monkeypatch.setattr(factory, "available_memory", lambda: 10**6)
    with pytest.raises(DuckInputError, match=r"model 'resnet18' needs 44\.\d MB .*1\.0 MB is available"):
        factory.create_model("resnet18", 10, 3, 32)


def test_the_size_probe_leaves_the_random_state_alone():
    torch.manual_seed(0)
    direct = factory._LOCAL_MODELS["smallcnn"][0](num_classes=10, in_chans=1, width=32, drop_rate=0.0).state_dict()
    torch.manual_seed(0)
    built = factory.create_model("smallcnn", 10, 1, 8).net.state_dict()
    assert direct.keys() == built.keys() and all(torch.equal(direct[k], built[k]) for k in direct)


def test_an_allocation_that_fails_anyway_is_one_error_line(monkeypatch: pytest.MonkeyPatch):
    def build() -> torch.nn.Module:
        if torch.empty(0).device.type == "meta":
            raise NotImplementedError("no meta build")  # no estimate: the real build decides
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    with pytest.raises(DuckInputError, match=r"model 'big' cannot be allocated \(.*can't allocate memory\)"):
        factory._built_within_memory(build, "big", {"width": 10**6})
    with pytest.raises(RuntimeError, match="shape mismatch"):  # other errors are the model's own
        factory._built_within_memory(lambda: (_ for _ in ()).throw(RuntimeError("shape mismatch")), "m", {})
