"""Safe checkpoint I/O: read Lightning ``.ckpt``, plain state dicts (``.pt``/``.pth``) and ``.safetensors``
without executing pickled code; write atomically with a manifest that later jobs check.

Written format (``.ckpt``/``.pt``): a ``torch.save`` zip holding only tensors and plain containers,
``{"format": "duck-unlearn/1", "state_dict": {...}, "manifest": {...}}`` — loadable with
``torch.load(weights_only=True)``. ``.safetensors`` files carry the manifest as JSON in their metadata.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from duck.errors import DuckInputError
from duck.io import atomic_write, atomic_write_bytes

FORMAT = "duck-unlearn/1"
# manifest fields a job compares with what it was asked to build
CHECKED_FIELDS = ("model", "num_classes", "in_chans", "img_size", "dataset")


def build_manifest(model_spec: Mapping[str, Any], dataset: str, *, method: str | None = None,
                   scenario: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
                   seed: int | None = None, **extra: Any) -> dict[str, Any]:
    """Everything a later job needs to refuse a mismatch (plain JSON types only)."""
    from duck import __version__

    manifest = {**dict(model_spec), "dataset": dataset, "method": method, "seed": seed,
                "scenario": dict(scenario) if scenario else None, "config": config,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "duck_version": __version__, **extra}
    return json.loads(json.dumps(manifest, default=str))  # normalise to plain types


def save_checkpoint(path: str | Path, state_dict: Mapping[str, torch.Tensor], manifest: Mapping[str, Any]) -> Path:
    """Write ``state_dict`` + ``manifest`` atomically (``.safetensors`` by suffix, else torch zip)."""
    path = Path(path)
    sd = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    if path.suffix == ".safetensors":
        from safetensors.torch import save

        return atomic_write_bytes(path, save(sd, metadata={"duck_manifest": json.dumps(manifest)}))
    obj = {"format": FORMAT, "state_dict": sd, "manifest": dict(manifest)}
    return atomic_write(path, lambda f: torch.save(obj, f))


def _load_detail(error: Exception) -> str:
    """The informative line of a torch.load error (torch surrounds it with advice and links)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return next((line for line in lines if "unsupported" in line.lower()), lines[0])[:200]


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """Read ``(state_dict, manifest or None)`` from any supported file; never unpickles code."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DuckInputError(f"checkpoint {path} not found; pass ckpt=PATH to an existing .ckpt/.pt/.safetensors file")
    data = path.read_bytes()
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            sd = load(data)
            header_len = int.from_bytes(data[:8], "little")
            meta = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
        except (SafetensorError, ValueError, json.JSONDecodeError) as e:
            raise DuckInputError(f"checkpoint {path} is corrupt or truncated ({e}); re-create it") from None
        manifest = json.loads(meta["duck_manifest"]) if "duck_manifest" in meta else None
        return sd, manifest
    try:
        with warnings.catch_warnings():  # the weights-only unpickler decides; its protocol notice is noise
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's weights-only unpickler names a disallowed class/function ("Unsupported global: GLOBAL x",
        # "Trying to load unsupported GLOBAL x whose module m is blocked");
        # any other unpickling failure means the bytes are not a checkpoint at all (text, a truncated
        # legacy file, a bare pickle without torch's header)
        found = re.search(r"unsupported (?:global: )?GLOBAL (\S+)", str(e), re.IGNORECASE)
        if found is None:
            raise DuckInputError(
                f"checkpoint {path} is corrupt or not a PyTorch checkpoint ({_load_detail(e)}); re-create it "
                "with torch.save(model.state_dict()) or as .safetensors"
            ) from None
        raise DuckInputError(
            f"refusing to load {path}: it pickles {found.group(1)}, not only tensors and plain containers; "
            "loading it could execute code. Export its state_dict (torch.save(model.state_dict())) "
            "or convert it to .safetensors"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        raise DuckInputError(f"checkpoint {path} is corrupt or truncated ({str(e).splitlines()[0][:200]}); "
                             "re-create it") from None
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        sd, manifest = dict(obj["state_dict"]), obj.get("manifest")  # ours, or a Lightning .ckpt
    elif isinstance(obj, Mapping) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        sd, manifest = dict(obj), None  # plain state dict
    else:
        raise DuckInputError(f"{path} holds no state dict (top-level type {type(obj).__name__}); save model.state_dict()")
    if not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise DuckInputError(f"{path}: state_dict holds non-tensor values; save model.state_dict()")
    return sd, dict(manifest) if isinstance(manifest, Mapping) else None


def check_manifest(manifest: Mapping[str, Any] | None, expected: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint whose manifest disagrees with the requested model/data (one clear message)."""
    if manifest is None:
        return
    diffs = [f"{k}={manifest[k]!r} (requested {expected[k]!r})" for k in CHECKED_FIELDS
             if k in expected and k in manifest and manifest[k] is not None and manifest[k] != expected[k]]
    if diffs:
        raise DuckInputError(
            f"checkpoint {path} does not match the requested setup: {', '.join(diffs)}; "
            "pass the model/data it was trained with, or the right checkpoint"
        )


def _fit_keys(sd: dict[str, torch.Tensor], target: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Map checkpoint keys onto the model's (``model.``/``module.`` prefixes stripped, ``net.`` added)."""
    want = set(target)
    for strip in ("", "model.", "module.", "model.module."):
        for add in ("", "net."):
            cand = {add + k[len(strip):]: v for k, v in sd.items() if k.startswith(strip)}
            if set(cand) == want:
                return cand
    return None


def load_into(model: torch.nn.Module, sd: dict[str, torch.Tensor], path: str | Path) -> None:
    """Load ``sd`` into ``model`` strictly, explaining architecture / class-count mismatches."""
    target = model.state_dict()
    fitted = _fit_keys(sd, target)
    if fitted is None:
        missing = sorted(set(target) - {k.split("net.", 1)[-1] for k in sd} - set(sd))[:3]
        raise DuckInputError(
            f"checkpoint {path} is for another architecture: its parameter names do not match "
            f"{getattr(model, 'arch', type(model).__name__)} (e.g. missing {missing}); pass the model it was trained with"
        )
    bad = [(k, tuple(v.shape), tuple(target[k].shape)) for k, v in fitted.items() if v.shape != target[k].shape]
    if bad:
        k, got, want = bad[0]
        raise DuckInputError(
            f"checkpoint {path} does not fit the requested model: {k} has shape {got}, expected {want} "
            "(wrong class count or architecture width?); pass the matching model/data config"
        )
    model.load_state_dict(fitted, strict=True)
