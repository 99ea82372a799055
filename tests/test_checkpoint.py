"""Checkpoint I/O: formats, manifests, mismatches, corrupt files, pickles that would run code, atomic writes."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from duck.checkpoint import build_manifest, check_manifest, load_checkpoint, load_into, save_checkpoint
from duck.errors import DuckInputError
from duck.io import atomic_write
from duck.models import create_model


@pytest.fixture
def model():
    torch.manual_seed(0)
    return create_model("smallcnn", 4, 1, 8, width=8)


@pytest.mark.parametrize("suffix", [".ckpt", ".safetensors"])
def test_roundtrip_with_manifest(tmp_path, model, suffix):
    man = build_manifest(model.spec(), "synthetic", method="duck", seed=3)
    path = save_checkpoint(tmp_path / f"m{suffix}", model.state_dict(), man)
    sd, got = load_checkpoint(path)
    assert got["model"] == "smallcnn" and got["num_classes"] == 4 and got["dataset"] == "synthetic"
    fresh = create_model("smallcnn", 4, 1, 8, width=8)
    load_into(fresh, sd, path)
    for k, v in model.state_dict().items():
        assert torch.equal(v, fresh.state_dict()[k])


def test_reads_lightning_ckpt_and_plain_state_dicts(tmp_path, model):
    lightning_style = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "epoch": 3, "global_step": 10, "pytorch-lightning_version": "2.6.0"}
    torch.save(lightning_style, tmp_path / "l.ckpt")
    torch.save(model.net.state_dict(), tmp_path / "plain.pth")  # timm-style keys without the wrapper prefix
    for name in ("l.ckpt", "plain.pth"):
        sd, man = load_checkpoint(tmp_path / name)
        fresh = create_model("smallcnn", 4, 1, 8, width=8)
        load_into(fresh, sd, tmp_path / name)
        assert man is None and torch.equal(fresh.net.fc.weight, model.net.fc.weight)


def test_missing_truncated_and_malicious_files(tmp_path, model):
    with pytest.raises(DuckInputError, match="not found"):
        load_checkpoint(tmp_path / "nope.ckpt")
    path = save_checkpoint(tmp_path / "m.ckpt", model.state_dict(), {})
    data = path.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(DuckInputError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "trunc.ckpt")
    st = save_checkpoint(tmp_path / "m.safetensors", model.state_dict(), {})
    (tmp_path / "trunc.safetensors").write_bytes(st.read_bytes()[:100])
    with pytest.raises(DuckInputError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "trunc.safetensors")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for name, payload in (("evil.pt", {"state_dict": Evil()}), ("evil2.ckpt", Evil())):
        with open(tmp_path / name, "wb") as f:
            if name.endswith(".pt"):
                torch.save(payload, f)
            else:
                pickle.dump(payload, f)
        # torch.save'd: the disallowed callable is named; a bare pickle has no torch header: not a checkpoint
        match = "refusing to load .* pickles posix.system" if name.endswith(".pt") else "not a PyTorch checkpoint"
        with pytest.raises(DuckInputError, match=match):
            load_checkpoint(tmp_path / name)
    assert not marker.exists()
    (tmp_path / "text.ckpt").write_text("garbage\n")  # not a refusal: nothing in it could run
    with pytest.raises(DuckInputError, match="corrupt or not a PyTorch checkpoint"):
        load_checkpoint(tmp_path / "text.ckpt")


def test_architecture_and_class_count_mismatch(tmp_path, model):
    path = save_checkpoint(tmp_path / "m.ckpt", model.state_dict(), {})
    sd, _ = load_checkpoint(path)
    with pytest.raises(DuckInputError, match=r"fc.weight has shape \(4, 32\), expected \(10, 32\)"):
        load_into(create_model("smallcnn", 10, 1, 8, width=8), sd, path)
    with pytest.raises(DuckInputError, match="another architecture"):
        load_into(create_model("resnet18", 4, 1, 8), sd, path)
    man = build_manifest(model.spec(), "synthetic")
    with pytest.raises(DuckInputError, match=r"num_classes=4 \(requested 10\)"):
        check_manifest(man, {"model": "smallcnn", "num_classes": 10, "dataset": "synthetic"}, path)
    with pytest.raises(DuckInputError, match=r"dataset='synthetic' \(requested 'digits'\)"):
        check_manifest(man, {"dataset": "digits"}, path)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temporary file left behind
