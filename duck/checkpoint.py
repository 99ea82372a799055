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

from duck._version import __version__
from duck.errors import DuckInputError
from duck.io import atomic_write, atomic_write_bytes
from duck.paths import checkpoint_file

FORMAT = "duck-unlearn/1"
# manifest fields a job compares with what it was asked to build
CHECKED_FIELDS = ("model", "target", "num_classes", "in_chans", "img_size", "dataset")  # target: model=custom's class
# ``data.*`` settings that decide which samples form the training and the test split (conf/data/*.yaml,
# duck/data/*.py), compared with the config recorded in the manifest: a model evaluated on another split would
# have trained on "test" samples. digits: the stratified split (test_fraction, split_seed); synthetic: the
# generator (every sample is drawn from seed, in this order, with these sizes and this noise); imagefolder:
# which sub-folders are train and test. CIFAR-10/100, Fashion-MNIST and TinyImageNet have fixed splits.
# Not compared: paths (root: the same files may move), download, augment and the normalisation (mean, std):
# they do not change which samples are train or test. A data set not listed here compares
# DEFAULT_SPLIT_FIELDS.
SPLIT_FIELDS: dict[str, tuple[str, ...]] = {
    "digits": ("test_fraction", "split_seed"),
    "synthetic": ("seed", "n_train", "n_test", "num_classes", "img_size", "in_chans", "noise"),
    "imagefolder": ("train_split", "test_split"),
    "cifar10": (), "cifar100": (), "fashion_mnist": (), "tinyimagenet": (),
}
DEFAULT_SPLIT_FIELDS = ("test_fraction", "split_seed")


def build_manifest(model_spec: Mapping[str, Any], dataset: str, *, method: str | None = None,
                   scenario: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
                   seed: int | None = None, **extra: Any) -> dict[str, Any]:
    """Everything a later job needs to refuse a mismatch (plain JSON types only)."""
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


def _load_detail(error: BaseException) -> str:
    """The informative part of a load error (torch surrounds it with advice and links): the line naming an
    unsupported global, else the first sentence of the first line; the exception's type when it has no text."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    line = next((line for line in lines if "unsupported" in line.lower()), None)
    if line is None:
        line = lines[0].split(". ", 1)[0]
        if isinstance(error, (KeyError, AttributeError, TypeError, IndexError)):
            line = f"{type(error).__name__}: {line}"  # their text alone ("101") says nothing
    return line[:200]


def _corrupt(path: Path, detail: str) -> DuckInputError:
    return DuckInputError(f"checkpoint {path} is corrupt or not a PyTorch checkpoint ({detail}); re-create it "
                          "with torch.save(model.state_dict()) or as .safetensors")


def _read_safetensors(path: Path, data: bytes) -> tuple[dict[str, Any], Any]:
    """``(state dict, manifest JSON value or None)`` of a ``.safetensors`` file."""
    from safetensors.torch import load

    try:
        sd = load(data)
        header_len = int.from_bytes(data[:8], "little")
        header = json.loads(data[8: 8 + header_len])
        meta = (header.get("__metadata__") if isinstance(header, dict) else None) or {}
    except MemoryError:
        raise
    except Exception as e:  # SafetensorError, ValueError, UnicodeDecodeError...: the bytes are not a valid file
        raise DuckInputError(f"checkpoint {path} is corrupt or truncated ({_load_detail(e)}); re-create it") from None
    if "duck_manifest" not in meta:
        return sd, None
    try:
        return sd, json.loads(meta["duck_manifest"])
    except (ValueError, TypeError) as e:
        raise DuckInputError(f"checkpoint {path} is corrupt: its duck_manifest metadata is not JSON "
                             f"({_load_detail(e)}); re-create it (or re-save the state dict without metadata)") \
            from None


def _read_torch(path: Path, data: bytes) -> Any:
    """The object a ``torch.save`` file holds, unpickled with the weights-only unpickler."""
    try:
        with warnings.catch_warnings():  # the weights-only unpickler decides; its protocol notice is noise
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's weights-only unpickler names a disallowed class/function ("Unsupported global: GLOBAL x",
        # "Trying to load unsupported GLOBAL x whose module m is blocked");
        # any other unpickling failure means the bytes are not a checkpoint at all (text, a truncated
        # legacy file, a bare pickle without torch's header)
        found = re.search(r"unsupported (?:global: )?GLOBAL (\S+)", str(e), re.IGNORECASE)
        if found is None:
            raise _corrupt(path, _load_detail(e)) from None
        raise DuckInputError(
            f"refusing to load {path}: it pickles {found.group(1)}, not only tensors and plain containers; "
            "loading it could execute code. Export its state_dict (torch.save(model.state_dict())) "
            "or convert it to .safetensors"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:  # torch's zip reader: a cut or damaged archive
        raise DuckInputError(f"checkpoint {path} is corrupt or truncated ({_load_detail(e)}); re-create it") \
            from None
    except MemoryError:
        raise
    except Exception as e:  # the unpickler on arbitrary bytes raises anything (KeyError, ValueError, ...)
        raise _corrupt(path, _load_detail(e)) from None


def _check_tensors(path: Path, sd: Mapping[Any, Any]) -> None:
    """A state dict maps parameter names (strings) to tensors; floating ones must be finite."""
    if not sd:
        raise DuckInputError(f"checkpoint {path} holds an empty state dict; save model.state_dict()")
    for k, v in sd.items():
        if not isinstance(k, str):
            raise DuckInputError(f"checkpoint {path} is not a state dict: key {k!r} ({type(k).__name__}) is not a "
                                 "parameter name; save model.state_dict()")
        if not isinstance(v, torch.Tensor):
            raise DuckInputError(f"checkpoint {path} is not a state dict: {k} holds a value of type "
                                 f"{type(v).__name__}, not a tensor; save model.state_dict()")
    for k, v in sd.items():
        if not (v.is_floating_point() or v.is_complex()):
            continue
        finite = torch.isfinite(v.float() if v.element_size() == 1 else v)  # no isfinite for some float8 types
        if not bool(finite.all()):
            raise DuckInputError(f"checkpoint {path} holds non-finite weights: {k} has {int((~finite).sum())} "
                                 f"NaN/inf values out of {v.numel()}; the model diverged or the file is damaged; "
                                 "use a checkpoint with finite weights (retrain, e.g. with a lower learning rate)")


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """Read ``(state_dict, manifest or None)`` from any supported file; never unpickles code.

    Anything that cannot be read or parsed (empty, text, truncated, a bare pickle, a manifest that is not a
    JSON object, a state dict with non-string keys or non-tensor values) and any floating tensor holding NaN
    or inf is a :class:`DuckInputError` naming ``path``."""
    path = checkpoint_file(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DuckInputError(f"cannot read checkpoint {path} ({e.strerror or e}); check its permissions") from None
    if not data:
        raise DuckInputError(f"checkpoint {path} is corrupt or truncated (empty file, 0 bytes); re-create it")
    if path.suffix == ".safetensors":
        sd, manifest = _read_safetensors(path, data)
    else:
        obj = _read_torch(path, data)
        if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
            sd, manifest = obj["state_dict"], obj.get("manifest")  # ours, or a Lightning .ckpt
        elif isinstance(obj, Mapping) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            sd, manifest = obj, None  # plain state dict
        else:
            what = "an empty dict" if isinstance(obj, Mapping) and not obj else f"top-level type {type(obj).__name__}"
            raise DuckInputError(f"checkpoint {path} holds no state dict ({what}); save model.state_dict()")
    if manifest is None:
        manifest = _sidecar_manifest(path)
    if manifest is not None and not isinstance(manifest, Mapping):
        raise DuckInputError(f"checkpoint {path} is corrupt: its manifest is a {type(manifest).__name__}, not a "
                             "JSON object; re-create it (or save the bare state dict, which has no manifest)")
    _check_tensors(path, sd)
    return dict(sd), None if manifest is None else dict(manifest)


def _sidecar_manifest(path: Path) -> Any:
    """The manifest written beside a plain state dict (``unlearned.pt`` -> ``unlearned.manifest.json``, by
    ``duck-unlearn out_format=pt``), or None where there is none."""
    side = path.with_suffix(".manifest.json")
    if not side.is_file():
        return None
    try:
        return json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DuckInputError(f"manifest {side} beside checkpoint {path} is not readable JSON ({_load_detail(e)}); "
                             "re-create it or delete it") from None


def _override(value: Any) -> str:
    """``value`` as a Hydra command-line override value (``[3,5]``, ``null``, ``true``, ``0.25``)."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _config_section(manifest: Mapping[str, Any], section: str, path: str | Path) -> Mapping[str, Any] | None:
    """``manifest["config"][section]`` (None where the manifest has no config or the config lacks it)."""
    config = manifest.get("config")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise DuckInputError(f"checkpoint {path} is corrupt: its manifest's config is a {type(config).__name__}, "
                             "not an object; re-create it")
    node = config.get(section)
    if node is None or isinstance(node, Mapping):
        return node
    raise DuckInputError(f"checkpoint {path} is corrupt: its manifest's config.{section} is a "
                         f"{type(node).__name__}, not an object; re-create it")


def check_manifest(manifest: Mapping[str, Any] | None, expected: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint whose manifest disagrees with the requested model/data (one clear message).

    ``expected`` holds the :data:`CHECKED_FIELDS` and, optionally, ``data``: the requested ``cfg.data``, whose
    :data:`SPLIT_FIELDS` are compared with the data config recorded in the manifest (keys missing on either
    side, and manifests without a config, are not compared)."""
    if manifest is None:
        return
    diffs = [f"{k}={manifest[k]!r} (requested {expected[k]!r})" for k in CHECKED_FIELDS
             if k in expected and k in manifest and manifest[k] is not None and manifest[k] != expected[k]]
    if diffs:
        raise DuckInputError(
            f"checkpoint {path} does not match the requested setup: {', '.join(diffs)}; "
            "pass the model/data it was trained with, or the right checkpoint"
        )
    requested = expected.get("data")
    recorded = _config_section(manifest, "data", path)
    if not isinstance(requested, Mapping) or recorded is None:
        return
    dataset = manifest.get("dataset") or requested.get("name")
    keys = SPLIT_FIELDS.get(str(dataset), DEFAULT_SPLIT_FIELDS)
    split_diffs = [k for k in keys if k in recorded and k in requested and recorded[k] != requested[k]]
    if split_diffs:
        raise DuckInputError(
            f"checkpoint {path} was trained on another train/test split of {dataset}: "
            + ", ".join(f"data.{k}={_override(recorded[k])} in the checkpoint (requested {_override(requested[k])})"
                        for k in split_diffs)
            + "; its test set would hold samples the model trained on. Pass the checkpoint's values ("
            + " ".join(f"data.{k}={_override(recorded[k])}" for k in split_diffs) + ") or a checkpoint "
            "trained on this split"
        )


def _describe_scenario(sc: Mapping[str, Any]) -> str:
    """``class_removal of classes [3] (135 forget samples)`` from a ``Scenario.summary()``."""
    text = str(sc.get("scenario"))
    if sc.get("forget_classes"):
        text += f" of classes {sc['forget_classes']}"
    if sc.get("target_class") is not None:
        text += f" towards class {sc['target_class']}"
    if sc.get("scenario") == "homogeneous_removal" and sc.get("seed") is not None:
        text += f" drawn with seed {sc['seed']}"
    return text + (f" ({sc['n_forget']} forget samples)" if sc.get("n_forget") is not None else "")


def check_forget_set(manifest: Mapping[str, Any] | None, requested: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint made for another forget set than ``requested`` (a ``Scenario.summary()``).

    Only checkpoints whose manifest records a forget set they were made for are checked: an unlearned one
    (``method`` = the unlearning method) or a retrained oracle (``retrain``). An original's manifest may
    record the scenario of the job that trained it, but the original saw every sample, so it is not compared;
    nor are checkpoints without a manifest or whose manifest has no ``forget_hash``."""
    if manifest is None or manifest.get("method") in (None, "original", "shadow"):
        return
    recorded = manifest.get("scenario")
    if not isinstance(recorded, Mapping) or not recorded.get("forget_hash"):
        return
    if recorded["forget_hash"] == requested.get("forget_hash"):
        return
    sc_cfg = _config_section(manifest, "scenario", path)
    hint = "the scenario it was made for"
    if sc_cfg and sc_cfg.get("kind"):
        hint += " (" + " ".join([f"scenario={sc_cfg['kind']}"] + [f"scenario.{k}={_override(v)}"
                                 for k, v in sc_cfg.items() if k != "kind" and v is not None]) + ")"
    method = str(manifest["method"])
    made = "a retrained oracle" if method in ("retrain", "retrained") else f"unlearned with {method}"
    raise DuckInputError(
        f"checkpoint {path} ({made}) was made for another forget set: {_describe_scenario(recorded)}, but the requested "
        f"scenario is {_describe_scenario(requested)}; the forget ids differ (sha256 "
        f"{str(recorded['forget_hash'])[:12]}... vs {str(requested.get('forget_hash'))[:12]}...). "
        f"Pass {hint}, or the checkpoint made for this forget set"
    )


# how checkpoint keys may differ from the model's: (prefix stripped, prefix added), tried in this order
_KEY_RULES = [(strip, add) for strip in ("", "model.", "module.", "model.module.") for add in ("", "net.")]


def _key_map(sd: Mapping[str, torch.Tensor], want: set[str]) -> dict[str, str]:
    """Checkpoint key -> model key under the :data:`_KEY_RULES` rule that matches the most model keys (the first
    on ties); keys the rule does not apply to are left out."""
    maps = [{k: add + k[len(strip):] for k in sd if k.startswith(strip)} for strip, add in _KEY_RULES]
    return max(maps, key=lambda m: len(set(m.values()) & want))


KeyRule = tuple[str, str]


def checkpoint_key_rule(sd: Mapping[str, torch.Tensor], model: torch.nn.Module) -> KeyRule | None:
    """The :data:`_KEY_RULES` rule ``(strip, add)`` under which ``sd``'s keys are exactly ``model``'s state-dict
    keys (checkpoint key ``k`` -> model key ``add + k[len(strip):]``; keys without the prefix ``strip``, e.g. a
    Lightning module's other state, are not the model's), or None where none fits."""
    want = set(model.state_dict())
    for strip, add in _KEY_RULES:
        if {add + k[len(strip):] for k in sd if k.startswith(strip)} == want:
            return strip, add
    return None


def to_checkpoint_keys(state_dict: Mapping[str, torch.Tensor], rule: KeyRule) -> dict[str, torch.Tensor]:
    """``state_dict`` (the model's keys) under the input checkpoint's own key names: the inverse of ``rule``
    (from :func:`checkpoint_key_rule` / :func:`load_into`), so an unlearned model is written back with the keys
    the user's checkpoint had."""
    strip, add = rule
    bad = [k for k in state_dict if not k.startswith(add)]
    if bad:
        raise DuckInputError(f"state dict key {bad[0]!r} does not start with {add!r}; pass the state dict of the model "
                             "the checkpoint was loaded into")
    return {strip + k[len(add):]: v for k, v in state_dict.items()}


def _some(keys: list[str]) -> str:
    return f"{keys[:3]}" + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _first_conv(target: Mapping[str, torch.Tensor]) -> str | None:
    """The model key of its first convolution's weight (the first 4-d ``*.weight``)."""
    return next((k for k, v in target.items() if k.endswith("weight") and v.ndim == 4), None)


def _head_keys(model: torch.nn.Module) -> set[str]:
    """State-dict keys of the model's linear head (``model.classifier()``), empty where it has none."""
    get_head = getattr(model, "classifier", None)  # duck.models.Classifier.classifier()
    if not callable(get_head) or isinstance(get_head, torch.nn.Module):  # a bare module's own .classifier layer
        return set()
    try:
        head = get_head()
    except (AttributeError, TypeError):  # a network without a classifier module: no head hints
        return set()
    ids = {id(p) for p in head.parameters()}
    return {k for k, p in model.named_parameters() if id(p) in ids}


def _shape_hint(model: torch.nn.Module, target: Mapping[str, torch.Tensor], key: str, got: tuple[int, ...],
                want: tuple[int, ...]) -> str:
    """The settings that would make checkpoint tensor ``key`` (shape ``got``) fit the model's (``want``)."""
    if key == _first_conv(target) and len(got) == len(want) == 4:
        if got[1] != want[1]:
            return (f"the checkpoint's first convolution takes {got[1]}-channel images, the model's {want[1]}: set "
                    f"data.in_chans={got[1]} (or use the data it was trained on)")
        if got[2:] != want[2:]:
            stem = "true" if got[2:] == (3, 3) else "false"
            return (f"its first convolution has a {got[2]}x{got[3]} kernel, the model's {want[2]}x{want[3]}: set "
                    f"model.cifar_stem={stem} (the CIFAR stem is a 3x3 first convolution; auto picks it for images "
                    "of 64 px or less)")
    if key in _head_keys(model) and got[0] != want[0]:
        return (f"the checkpoint's head has {got[0]} outputs (classes), the model {want[0]}: the class count "
                f"(model.num_classes) comes from the data set: use the data set the checkpoint was trained on, with "
                f"{got[0]} classes")
    if len(got) == len(want) == 2 and got[0] == want[0] and got[1] != want[1]:
        return (f"{key} takes {got[1]} input features, the model's {want[1]}: a flattened feature size depends on "
                "the image size (data.img_size) and the model's width; use the data.img_size and model.* options it "
                "was trained with")
    return "another model width or model.* option? pass the model/data config it was trained with"


def load_into(model: torch.nn.Module, sd: dict[str, torch.Tensor], path: str | Path) -> KeyRule:
    """Load ``sd`` into ``model`` strictly, explaining architecture / class-count / input-shape mismatches with
    the setting that would fix them. Returns the key rule used (:func:`checkpoint_key_rule`): pass it to
    :func:`to_checkpoint_keys` to write the model back under the checkpoint's own key names."""
    target = model.state_dict()
    rule = checkpoint_key_rule(sd, model)
    if rule is None:
        want = set(target)
        best = _key_map(sd, want)
        missing = sorted(want - set(best.values()))
        unexpected = sorted(k for k in sd if best.get(k) not in want)
        plain = [k.removeprefix("net.") for k in missing]  # the model's own names, not the wrapper's
        detail = "; ".join(([f"missing {_some(plain)}"] if missing else [])
                           + ([f"unexpected {_some(unexpected)}"] if unexpected else []))
        raise DuckInputError(
            f"checkpoint {path} is for another architecture: its parameter names do not match "
            f"{getattr(model, 'arch', type(model).__name__)} ({detail}); pass the model it was trained with"
        )
    strip, add = rule
    fitted = {add + k[len(strip):]: v for k, v in sd.items() if k.startswith(strip)}
    bad = [(k, tuple(v.shape), tuple(target[k].shape)) for k, v in fitted.items() if v.shape != target[k].shape]
    if bad:
        k, got, want = bad[0]
        raise DuckInputError(f"checkpoint {path} does not fit the requested model: {k} has shape {got}, expected "
                             f"{want}; {_shape_hint(model, target, k, got, want)}")
    model.load_state_dict(fitted, strict=True)
    return rule
