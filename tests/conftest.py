"""Shared fixtures: an isolated cache, in-process CLI runs, small trained models."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# every test run gets its own model / shadow-bank cache (never the user's ~/.cache)
_SESSION_CACHE = Path(os.environ.get("PYTEST_DUCK_CACHE", "")) if os.environ.get("PYTEST_DUCK_CACHE") else None


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = _SESSION_CACHE or tmp_path_factory.mktemp("duck-cache")
    os.environ["DUCK_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(autouse=True)
def _one_torch_thread() -> object:
    """One torch intra-op thread per test (restored afterwards): the tests' tensors are tiny, and on a shared
    2-core machine a second thread makes them several times slower. Tests of thread handling set their own."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> Callable[..., tuple[int, str, str, Path]]:
    """Run a console script's ``main`` in-process: ``run_cli("train", "data=synthetic", ...)``.

    Returns ``(exit code, stdout, stderr, run directory)``; the run directory is ``tmp_path/run`` for the
    first call of a test and ``tmp_path/run_K`` for the K-th later one (a job refuses a directory holding
    another job's results). ``duck-unlearn`` / ``duck-audit`` calls that name no scenario setting get
    ``scenario.forget_classes=[3]`` (those commands require the forget set to be named).
    """
    calls = [0]

    def _run(command: str, *args: str) -> tuple[int, str, str, Path]:
        import importlib

        module = importlib.import_module(f"duck.cli.{command}")
        run_dir = tmp_path / ("run" if not calls[0] else f"run_{calls[0]}")
        calls[0] += 1
        argv = [f"duck-{command}", *args]
        if command in ("unlearn", "audit") and not any(a.lstrip("+").startswith("scenario") for a in args):
            argv.append("scenario.forget_classes=[3]")
        if command != "bench" or len(args) > 0:
            argv.append(f"hydra.run.dir={run_dir}")
        old = sys.argv
        sys.argv = argv
        code = 0
        try:
            module.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = old
        out, err = capsys.readouterr()
        return code, out, err, run_dir

    return _run


def kill_writer_mid_write(code: str, *args: str, folder: Path) -> None:
    """Run ``python -c code *args`` (a writer that blocks half-way through a write), wait until its temporary
    ``.*.tmp`` file appears in ``folder``, then ``kill -9`` it."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    try:
        deadline = time.time() + 60
        while not list(folder.glob(".*.tmp")) and time.time() < deadline:
            time.sleep(0.05)
        assert list(folder.glob(".*.tmp")), "the writer never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


#: the experiment loggers' folders in a run directory (tests/test_loggers.py checks what they hold, and that a
#: refused job leaves none)
LOGGER_FOLDERS = ("csv", "tensorboard", "wandb")


def written_files(run_dir: Path) -> set[str]:
    """Files a job wrote into its run directory, ignoring Hydra's own (.hydra/, *.log) and the experiment
    logger's (csv/ by default)."""
    if not run_dir.exists():
        return set()
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
            if p.is_file() and ".hydra" not in p.parts and p.suffix != ".log"
            and p.relative_to(run_dir).parts[0] not in LOGGER_FOLDERS}


@pytest.fixture(scope="session")
def digits():
    from duck.data.registry import build_datasets

    return build_datasets("digits")


@pytest.fixture(scope="session")
def synthetic():
    from duck.data.registry import build_datasets

    return build_datasets("synthetic", n_train=240, n_test=120, num_classes=4)


# `make mutation` (mutation/mutate.py) sets this to a folder of its work directory: a session fixture that trains a
# model is then built once, by the unmutated code (mutmut's stats and clean runs), and loaded by every mutant's run
# instead of being retrained in each (16 s of 16.1 for a duck/metrics.py mutant on this machine). A mutant never
# writes it. Outside mutation testing it is unset and nothing changes.
_MUTATION_FIXTURES = os.environ.get("DUCK_MUTATION_FIXTURE_CACHE")


def _mutation_cached_state(name: str, model: Any, train: Callable[[], Any]) -> Any:
    """``train()`` (returning the trained ``model``), or under mutation testing the state it left, cached."""
    if not _MUTATION_FIXTURES:
        return train()
    import torch

    path = Path(_MUTATION_FIXTURES) / f"{name}.pt"
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model
    model = train()
    if os.environ.get("MUTANT_UNDER_TEST", "") in ("", "stats"):  # the unmutated code built it
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)
    return model


@pytest.fixture(scope="session")
def synthetic_model(synthetic):
    """A small CNN trained for 3 epochs on the synthetic data (a few seconds)."""
    import torch

    from duck.models import create_model
    from duck.training import Recipe, train_classifier

    torch.manual_seed(0)
    model = create_model("smallcnn", synthetic.num_classes, 1, 8, width=8)

    def train() -> Any:
        rec = Recipe(epochs=3, batch_size=32, optimizer=lambda p: torch.optim.Adam(p, lr=3e-3))
        return train_classifier(model, synthetic.train, rec, seed=0)[0]

    return _mutation_cached_state("synthetic_model", model, train).eval()


@pytest.fixture(scope="session")
def synthetic_ckpt(tmp_path_factory: pytest.TempPathFactory, synthetic, synthetic_model) -> Path:
    """``synthetic_model`` saved as a duck checkpoint matching ``data=synthetic model=smallcnn model.width=8``."""
    from duck.checkpoint import build_manifest, save_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "model.ckpt"
    save_checkpoint(path, synthetic_model.state_dict(), build_manifest(synthetic_model.spec(), "synthetic"))
    return path


SYNTH_ARGS = ("data=synthetic", "data.n_train=240", "data.n_test=120", "model=smallcnn", "model.width=8",
              "progress=false", "trainer=cpu")


def record_batch_ids(unlearner) -> list:
    """Wrap ``unlearner.training_step`` to record the sample ids (``batch[2]``) of every training batch; returns
    the list it fills (the spy of the baselines' run tests: which samples, in which order)."""
    seen: list = []
    real = unlearner.training_step

    def spy(batch, batch_idx):
        seen.append(batch[2].clone())
        return real(batch, batch_idx)

    unlearner.training_step = spy
    return seen


def method_file_keys(path: Path) -> dict:
    """The settings a method config file defines, with those of the method configs its ``defaults`` list
    builds on (``duck_reinit.yaml`` on ``duck.yaml``): :func:`duck.pipeline.config.preset` of the file."""
    from duck.pipeline.config import preset

    return preset(path.parent.name, path.stem)
