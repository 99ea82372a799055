"""Install anywhere (issue 24 item 1): the wheel built with ``python -m build`` carries the configs and runs
the commands and the Python API from outside the repository, in a scratch environment that reuses the
already installed torch (and the other dependencies) instead of downloading them."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """``(scratch venv bin/, environment, a work directory outside the repository)``."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist, source = tmp / "dist", tmp / "source"
    # a copy of the sources: setuptools builds in the source tree (build/, *.egg-info) and the checkout stays clean
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("duck", "attacks", "baselines", "benchmarks", "conf"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    built = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(source)],
                 cwd=tmp, env=dict(os.environ))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheels = list(dist.glob("duck_unlearn-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "duck/conf/run.yaml" in names and "duck/conf/method/duck.yaml" in names and "benchmarks/compare.py" in names
    venv = tmp / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    created = _run([base_python, "-m", "venv", str(venv)], cwd=tmp, env=dict(os.environ))
    assert created.returncode == 0, created.stderr
    # reuse the installed dependencies (torch is several GB): their site-packages on the scratch venv's path.
    # Only the folder is added: its .pth files (the editable install of this checkout) are not processed.
    scratch_site = next((venv / "lib").glob("python3*/site-packages"))
    (scratch_site / "_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DUCK_CONF_DIR")}
    env["DUCK_CACHE_DIR"] = str(tmp / "cache")
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--quiet", str(wheels[0])],
                     cwd=tmp, env=env)
    assert installed.returncode == 0, installed.stderr[-2000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return venv / "bin", env, work


def test_wheel_imports_its_own_copy_and_finds_the_packaged_configs(wheel_env):
    bin_dir, env, work = wheel_env
    probe = _run([str(bin_dir / "python"), "-c", "import duck, duck.pipeline.config as c; print(duck.__file__); "
                  "print(c.conf_dir())"], cwd=work, env=env)
    assert probe.returncode == 0, probe.stderr
    module_file, conf = probe.stdout.split()
    assert str(REPO) not in module_file and "site-packages" in module_file  # not the checkout
    assert conf.endswith("duck/conf") and str(REPO) not in conf


@pytest.mark.slow  # a promise (wheel / sharded banks): run by make test's second pass
def test_wheel_runs_the_commands_from_another_directory(wheel_env):
    bin_dir, env, work = wheel_env
    fast = ["recipe.epochs=2", "progress=false"]
    run = _run([str(bin_dir / "duck-run"), "audit=false", *fast, f"hydra.run.dir={work / 'run'}"], cwd=work, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (work / "run" / "summary.json").is_file() and (work / "run" / "forget_ids.txt").is_file()
    train = _run([str(bin_dir / "duck-train"), *fast, f"hydra.run.dir={work / 'train'}"], cwd=work, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    ckpt = work / "train" / "model.ckpt"
    unl = _run([str(bin_dir / "duck-unlearn"), f"ckpt={ckpt}", "scenario.forget_classes=[3]", *fast,
                f"hydra.run.dir={work / 'unlearn'}"],
               cwd=work, env=env)
    assert unl.returncode == 0, unl.stderr[-3000:]
    assert json.loads((work / "unlearn" / "metrics.json").read_text())["method"] == "duck"
    audit = _run([str(bin_dir / "duck-audit"), f"ckpt={work / 'unlearn' / 'unlearned.safetensors'}",
                  "scenario.forget_classes=[3]", *fast,
                  "attack.n_shadow=4", "attack.svm_mia.enabled=false", "report.analysis.enabled=false",
                  "report.shareable.enabled=false", f"original_ckpt={ckpt}", "attack.forgetting.enabled=true",
                  "attack.forgetting.n_unlearned=3", "attack.forgetting.n_retrained=3",
                  f"hydra.run.dir={work / 'audit'}"], cwd=work, env=env)
    assert audit.returncode == 0, audit.stderr[-3000:]
    assert (work / "audit" / "audit.json").is_file() and (work / "audit" / "report.html").is_file()
    # the forgetting audit from the wheel: the method rerun from the checkpoint's manifest, N = R = 3
    report = json.loads((work / "audit" / "audit.json").read_text())
    assert report["verdict"] in ("forgotten", "not_forgotten", "inconclusive")
    assert report["forgetting"]["n_unlearned"] == 3 and report["forgetting"]["n_retrained"] == 3
    helped = _run([str(bin_dir / "duck-run"), "--help"], cwd=work, env=env)
    assert helped.returncode == 0 and helped.stdout.startswith("duck-run: the main job")


def test_wheel_python_api_on_a_plain_module(wheel_env):
    bin_dir, env, work = wheel_env
    script = textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        import duck

        torch.manual_seed(0)
        x = torch.randn(300, 2, 8, 8)
        y = torch.arange(300) % 3
        x[torch.arange(300), 0, 0, y] += 4.0  # a learnable signal
        train, test = TensorDataset(x[:240], y[:240]), TensorDataset(x[240:], y[240:])

        class TinyCNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                                          nn.Flatten())
                self.out = nn.Linear(32, 3)
            def forward(self, x):
                return self.out(self.body(x))

        model = TinyCNN()
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for _ in range(60):
            opt.zero_grad(); nn.functional.cross_entropy(model(x[:240]), y[:240]).backward(); opt.step()
        result = duck.unlearn(model, train, test=test, forget_classes=[1], max_epochs=2)
        fresh = TinyCNN()
        fresh.load_state_dict(result.state_dict())

        # a model trained on a torchvision ImageFolder of PNG files with the user's own transforms
        import pathlib, torchvision
        from PIL import Image
        from torchvision import transforms
        root = pathlib.Path("pngs")
        for i in range(300):
            folder = root / ("train" if i < 240 else "test") / f"class_{int(y[i])}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = ((x[i, 0] * 0.1 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
            Image.fromarray(pixels.numpy()).save(folder / f"{i:03d}.png")
        tf = transforms.Compose([transforms.Grayscale(), transforms.ToTensor(), transforms.Normalize([0.5], [0.1])])
        folder_train = torchvision.datasets.ImageFolder(str(root / "train"), transform=tf)
        folder_test = torchvision.datasets.ImageFolder(str(root / "test"), transform=tf)
        xs = torch.stack([folder_train[i][0] for i in range(len(folder_train))])
        ys = torch.tensor(folder_train.targets)
        grey = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                             nn.Linear(32, 3))
        opt = torch.optim.Adam(grey.parameters(), 1e-2)
        for _ in range(60):
            opt.zero_grad(); nn.functional.cross_entropy(grey(xs), ys).backward(); opt.step()
        folder_result = duck.unlearn(grey, folder_train, test=folder_test, forget_classes=["class_2"],
                                     max_epochs=2)
        print(result.metrics["method"], folder_result.metrics["forget_classes"], type(result.model).__name__)
    """)
    out = _run([str(bin_dir / "python"), "-c", script], cwd=work, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    method, forgotten, cls = out.stdout.split()
    assert method == "duck" and forgotten == "[2]" and cls == "TinyCNN"


def test_wheel_runs_a_hyperparameter_search_and_reuses_its_preset(wheel_env):
    """``duck-run -m +tune=METHOD`` from the wheel (its tune configs and the sweep-end callback are packaged), one
    trial; the preset it writes is found by ``hydra.searchpath`` from another directory."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    bin_dir, env, work = wheel_env
    fast = ["data=synthetic", "model.width=8", "recipe.epochs=3", "progress=false"]
    sweep = work / "tune"
    # the space's epoch cap and min_epochs range cut down for speed (CLI values replace the config's sweep params)
    proc = _run([str(bin_dir / "duck-run"), "-m", "+tune=neggrad_plus", *fast, "hydra.sweeper.n_trials=1",
                 "method.epochs=4", "method.min_epochs=range(0,2)", f"hydra.sweep.dir={sweep}"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    preset = sweep / "preset" / "tuned_synthetic_neggrad_plus.yaml"
    assert preset.is_file() and (sweep / "trials.png").is_file()
    reuse = _run([str(bin_dir / "duck-run"), "method=neggrad_plus", "+preset=tuned_synthetic_neggrad_plus",
                  f"hydra.searchpath=[file://{sweep}]", "scenario.forget_classes=[2]", "audit=false", *fast,
                  f"hydra.run.dir={work / 'reuse'}"], cwd=work, env=env)
    assert reuse.returncode == 0, reuse.stderr[-3000:]
    tuned_lr = json.loads((sweep / "trials.json").read_text())["best"]["searched"]["lr"]
    assert json.loads((work / "reuse" / "unlearned" / "metrics.json").read_text())["hparams"]["lr"] == tuned_lr


@pytest.mark.slow  # a promise (margins computed elsewhere): run by make test's second pass
def test_wheel_decides_from_a_margins_file_and_the_python_api(wheel_env):
    """``duck-audit margins=FILE.npz`` and ``duck.forgetting_verdict`` from the installed wheel, outside the
    repository: margins computed anywhere get the verdict without any model."""
    bin_dir, env, work = wheel_env
    script = textwrap.dedent("""
        import json, numpy as np, duck
        rng = np.random.default_rng(0)
        mu, sd = rng.normal(0, 2, 40), rng.uniform(0.5, 1.5, 40)
        draw = lambda shift, s=1.0: mu + shift * sd + s * sd * rng.standard_normal((16, 40))
        arrays = dict(unlearned=draw(3.0), retrained=draw(0), retrain_control=draw(0), none_control=draw(3, 0.7))
        np.savez("margins.npz", **arrays)
        rec = duck.forgetting_verdict(*arrays.values(), replicates=30)
        print(json.dumps({"verdict": rec["verdict"], "shift": rec["shift"]}))
    """)
    api = _run([str(bin_dir / "python"), "-c", script], cwd=work, env=env)
    assert api.returncode == 0, api.stderr[-3000:]
    assert json.loads(api.stdout.splitlines()[-1])["verdict"] == "not_forgotten"  # it kept the whole shift
    cli = _run([str(bin_dir / "duck-audit"), "margins=margins.npz", "attack.forgetting.replicates=30",
                f"hydra.run.dir={work / 'margins'}"], cwd=work, env=env)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert json.loads((work / "margins" / "audit.json").read_text())["verdict"] == "not_forgotten"
    assert (work / "margins" / "report.html").is_file()
