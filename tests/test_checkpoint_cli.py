"""Checkpoints through the jobs: a damaged, non-finite or mismatched checkpoint ends in one ``error:`` line,
exit status 2 and no output files (a Python traceback before for empty/text files, integer keys, non-JSON
manifests; NaN weights and another train/test split were accepted)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SYNTH_ARGS, written_files
from omegaconf import OmegaConf

from duck.checkpoint import build_manifest, save_checkpoint

CONF = Path(__file__).resolve().parents[1] / "conf"


def synth_data_cfg(**changes: object) -> dict:
    """``cfg.data`` of a job run with ``SYNTH_ARGS`` (conf/data/synthetic.yaml with n_train=240, n_test=120)."""
    return {**OmegaConf.to_container(OmegaConf.load(CONF / "data" / "synthetic.yaml")), "n_train": 240, "n_test": 120,
            **changes}


def _write(kind: str, path: Path, synthetic_model) -> Path:
    sd = synthetic_model.state_dict()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("hello world")
    elif kind == "intkeys":
        torch.save({0: torch.zeros(1)}, path)
    elif kind == "nan":
        save_checkpoint(path, {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in sd.items()},
                        build_manifest(synthetic_model.spec(), "synthetic"))
    elif kind == "badman":
        from safetensors.torch import save

        path.write_bytes(save({k: v.contiguous() for k, v in sd.items()}, metadata={"duck_manifest": "not json{"}))
    return path


@pytest.mark.parametrize("kind,name,match", [
    ("empty", "empty.ckpt", "empty.ckpt is corrupt or truncated (empty file, 0 bytes)"),
    ("text", "text.ckpt", "text.ckpt is corrupt or not a PyTorch checkpoint"),
    ("intkeys", "intkeys.pt", "intkeys.pt is not a state dict: key 0 (int) is not a parameter name"),
    ("badman", "badman.safetensors", "badman.safetensors is corrupt: its duck_manifest metadata is not JSON"),
    ("nan", "nan.ckpt", "nan.ckpt holds non-finite weights: net.features.0.0.weight has"),
])
def test_damaged_checkpoints_exit_cleanly(run_cli, synthetic_model, tmp_path, kind, name, match):
    ckpt = _write(kind, tmp_path / name, synthetic_model)
    code, _, err, run_dir = run_cli("unlearn", *SYNTH_ARGS, f"ckpt={ckpt}")
    assert code == 2 and match in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: checkpoint ")
    assert written_files(run_dir) == set()


@pytest.mark.parametrize("arg,match", [
    ("data.seed=1", "data.seed=0 in the checkpoint (requested 1)"),
    ("data.noise=0.3", "data.noise=0.6 in the checkpoint (requested 0.3)"),
    ("data.n_train=200", "data.n_train=240 in the checkpoint (requested 200)"),
])
def test_checkpoint_of_another_split_is_refused(run_cli, synthetic_model, tmp_path, arg, match):
    """The test set of another split holds the checkpoint's training samples: refused, naming the value to pass."""
    manifest = build_manifest(synthetic_model.spec(), "synthetic", method="original", config={"data": synth_data_cfg()})
    ckpt = save_checkpoint(tmp_path / "model.ckpt", synthetic_model.state_dict(), manifest)
    code, _, err, run_dir = run_cli("unlearn", *SYNTH_ARGS, f"ckpt={ckpt}", arg)
    assert code == 2 and match in err and "trained on another train/test split of synthetic" in err, err
    assert f"Pass the checkpoint's values ({match.split(' in ')[0]})" in err and "Traceback" not in err
    assert written_files(run_dir) == set()
