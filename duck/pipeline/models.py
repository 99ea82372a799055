"""Checkpoints in and out of a job: load a user's checkpoint into the job's model (refusing any mismatch),
and write the unlearned weights back in the input's own format and key names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from duck.checkpoint import check_forget_set, check_manifest, load_checkpoint, load_into
from duck.models import Classifier
from duck.pipeline.config import OUT_FORMATS
from duck.pipeline.job import Job


def load_model(job: Job, path: str | Path, *, check_forget: bool = False
               ) -> tuple[Classifier, dict[str, Any] | None, Any]:
    """Build the job's model and load ``path`` into it: ``(model, manifest or None, key rule)``. A manifest
    that disagrees with the job is refused; with ``check_forget`` also a checkpoint unlearned or retrained for
    another forget set. The key rule says how the file's parameter names map onto the model's, so that the
    unlearned weights can be written back under the file's own names."""
    sd, manifest = load_checkpoint(path)
    check_manifest(manifest, job.expected_spec(), path)
    if check_forget and job.scenario is not None:
        check_forget_set(manifest, job.scenario.summary(), path)
    model = job.build_model()
    rule = load_into(model, sd, path)
    return model, manifest, rule


def unlearned_path(out: Path, job: Job) -> Path:
    """``out/unlearned.safetensors`` (default) or ``out/unlearned.pt`` (``out_format=pt``; checked with the job's
    other settings, :class:`~duck.pipeline.config.JobSettings`)."""
    return out / OUT_FORMATS[job.config.get("out_format", "safetensors")]


def plain_state_dict(model: Classifier, rule: Any = None) -> dict[str, Any]:
    """The model's weights under the key names of the checkpoint it was loaded from: the wrapped network's
    own names (no ``net.`` prefix), with the prefix the input file had (``model.``, ``module.``...) restored
    (``rule = (strip, add)`` from :func:`duck.checkpoint.load_into`)."""
    sd = model.plain_state_dict()
    if rule is None:
        return sd
    strip, add = rule  # file key = strip + rest; model key = add + rest (add is "net." or "")
    return {strip + ("" if add else "net.") + k: v for k, v in sd.items()}


def write_unlearned(path: Path, model: Classifier, rule: Any, manifest: dict[str, Any]) -> Path:
    """Write the unlearned weights as a plain state dict with the input checkpoint's own key names, loadable
    with ``load_state_dict``: ``.safetensors`` with the manifest in its metadata, or a ``.pt`` state dict
    (``torch.save``, no wrapper) with the manifest beside it in ``<name>.manifest.json``."""
    import torch

    from duck.checkpoint import save_checkpoint
    from duck.io import atomic_save_json, atomic_write

    sd = {k: v.detach().cpu().contiguous() for k, v in plain_state_dict(model, rule).items()}
    if path.suffix == ".safetensors":
        return save_checkpoint(path, sd, manifest)
    atomic_save_json(path.with_suffix(".manifest.json"), manifest)
    return atomic_write(path, lambda f: torch.save(sd, f))
