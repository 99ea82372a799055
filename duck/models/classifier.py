"""The embedding/head split of any classifier (ALGORITHMS.md §1: backbone ``f`` + linear head ``g``).

:class:`Classifier` wraps a network ``net`` and exposes the split every method uses, whatever the network:

- **timm-style** nets (``forward_features``, ``forward_head(pre_logits=True)``, ``get_classifier``: timm models
  and the local small CNNs): ``embed(x) = forward_head(forward_features(x), pre_logits=True)``,
  ``head(z) = get_classifier()(z)``;
- **any other** ``nn.Module`` (a plain module, torchvision models): ``head`` names the final ``nn.Linear`` inside
  ``net`` by its attribute path (``"fc"``, ``"classifier.6"``, ``"heads.head"``); ``embed(x)`` is that
  module's input during ``net(x)`` (captured by a forward pre-hook, differentiable), ``head(z)`` applies
  the module, and ``forward(x)`` is ``net(x)`` itself.

:func:`wrap_model` finds (and, given an example batch, verifies) the split of a user's module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from duck.errors import DuckInputError

# torchvision's (and other zoos') names of the final linear layer, tried before any other nn.Linear
_CONVENTIONAL_HEADS = ("fc", "classifier", "heads.head", "head", "head.fc")


def error_line(error: BaseException, limit: int = 200) -> str:
    """``"Type: first line of the message"`` (at most ``limit`` characters of it) for a one-line error report."""
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:limit]}"


def is_timm_style(net: nn.Module) -> bool:
    """Whether ``net`` has timm's split interface (``forward_features``, ``forward_head``, ``get_classifier``)."""
    return all(callable(getattr(net, name, None)) for name in ("forward_features", "forward_head", "get_classifier"))


def linear_paths(net: nn.Module) -> list[str]:
    """Attribute paths of the ``nn.Linear`` modules of ``net``, in registration order."""
    return [name for name, mod in net.named_modules() if name and isinstance(mod, nn.Linear)]


def _candidates_text(net: nn.Module) -> str:
    paths = linear_paths(net)
    if not paths:
        return "it has no nn.Linear module"
    shown = ", ".join(repr(p) for p in paths[-6:])
    return f"its nn.Linear modules are {'... ' if len(paths) > 6 else ''}{shown}"


def _head_module(net: nn.Module, path: Any) -> nn.Linear:
    """The ``nn.Linear`` at attribute path ``path`` of ``net``, or a DuckInputError naming the value and the
    candidate paths."""
    name = type(net).__name__
    if not isinstance(path, str) or not path:
        raise DuckInputError(f"head={path!r} must be the attribute path of {name}'s final nn.Linear "
                             f"({_candidates_text(net)}); pass head='<path>'")
    try:
        module = net.get_submodule(path)
    except AttributeError:
        raise DuckInputError(f"head={path!r} is not a module of {name}; {_candidates_text(net)}: pass the path of "
                             "the one that outputs the logits") from None
    if not isinstance(module, nn.Linear):
        raise DuckInputError(f"head={path!r} is a {type(module).__name__}, not an nn.Linear, in {name}; "
                             f"{_candidates_text(net)}: pass the path of the one that outputs the logits")
    return module


def run_capturing(net: nn.Module, head: nn.Module, x: torch.Tensor
                  ) -> tuple[Any, torch.Tensor | None, torch.Tensor | None]:
    """``net(x)`` with ``head``'s input and output captured (its last call): ``(output, head input, head
    output)``; the hooks live for this call only (a deep copy or a ``functional_call`` of ``net`` sees none)."""
    seen: dict[str, torch.Tensor] = {}

    def pre_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        seen["input"] = args[0]

    def post_hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        seen["output"] = output

    handles = [head.register_forward_pre_hook(pre_hook), head.register_forward_hook(post_hook)]
    try:
        out = net(x)
    finally:
        for h in handles:
            h.remove()
    return out, seen.get("input"), seen.get("output")


class Classifier(nn.Module):
    """A classifier with an explicit embedding/head split: ``forward(x) == head(embed(x))``.

    Args:
        net: the network (its own state dict is :meth:`plain_state_dict`).
        arch: the model's name (``spec()["model"]``, compared with checkpoint manifests).
        num_classes, in_chans, img_size: output width and input shape (``in_chans``/``img_size`` may be
            None for a wrapped module whose input shape is unknown).
        head: attribute path of the final ``nn.Linear`` in ``net`` (the generic split). None: ``net`` must be
            timm-style (``forward_features``/``forward_head``/``get_classifier``).
        target: the ``module.Class`` path the network was built from (``model=custom``; recorded in
            :meth:`spec`).

    Build one for a user's module with :func:`wrap_model`, which finds ``head`` itself.
    """

    def __init__(self, net: nn.Module, arch: str, num_classes: int, in_chans: int | None, img_size: int | None,
                 head: str | None = None, target: str | None = None) -> None:
        super().__init__()
        if head is None and not is_timm_style(net):
            raise DuckInputError(f"{type(net).__name__} has no timm-style split (forward_features/forward_head/"
                                 "get_classifier); wrap it with duck.models.wrap_model(model) or pass head='<attribute "
                                 "path of its final nn.Linear>'")
        if head is not None:
            _head_module(net, head)
        self.net = net
        self.head_path = head
        self.target = target
        self.arch, self.num_classes, self.in_chans, self.img_size = arch, num_classes, in_chans, img_size

    @property
    def timm_style(self) -> bool:
        """True where the split is timm's interface, False where it is the hooked ``head`` module."""
        return self.head_path is None

    def classifier(self) -> nn.Module:
        """The linear head module ``g`` (timm's ``get_classifier()``, or the module at ``head``)."""
        if self.timm_style:
            return self.net.get_classifier()
        return self.net.get_submodule(self.head_path)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled pre-logit embedding ``f(x)`` ``(B, D)``; differentiable."""
        if self.timm_style:
            return self.net.forward_head(self.net.forward_features(x), pre_logits=True)
        _, z, _ = run_capturing(self.net, self.classifier(), x)
        if z is None:
            raise DuckInputError(f"{self.arch}: its head {self.head_path!r} was not called by its forward; pass "
                                 "head='<attribute path of the final nn.Linear>'")
        return z.flatten(1)  # (B, D)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """Linear head ``g(z)`` ``(B, num_classes)``."""
        return self.classifier()(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.timm_style:
            return self.head(self.embed(x))
        return self.net(x)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor | None:
        """The last feature map before pooling (timm's ``forward_features``: ``(B, C, H, W)`` or tokens
        ``(B, N, C)``), or None for a generic module, which has no such notion."""
        return self.net.forward_features(x) if self.timm_style else None

    def pool_features(self, features: torch.Tensor) -> torch.Tensor:
        """:meth:`embed` from a :meth:`feature_map` (timm's ``forward_head(features, pre_logits=True)``)."""
        if not self.timm_style:
            raise DuckInputError(f"{self.arch} has no feature map (generic split at head={self.head_path!r}); "
                                 "use embed(x)")
        return self.net.forward_head(features, pre_logits=True)

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`: timm's ``head_hidden_size`` where the head has a hidden layer before the
        classifier (mobilenetv3, vgg), else ``num_features``; the head's ``in_features`` for a generic module."""
        if not self.timm_style:
            return int(self.classifier().in_features)
        return int(getattr(self.net, "head_hidden_size", None) or self.net.num_features)

    def classifier_path(self) -> str:
        """Attribute path of the linear head inside ``net`` (``"fc"``, ``"head"``, ``"classifier.6"``...)."""
        if not self.timm_style:
            return self.head_path
        cfg = getattr(self.net, "pretrained_cfg", None) or {}
        return cfg.get("classifier", "fc")

    def set_classifier(self, module: nn.Module) -> None:
        """Replace the linear head (used by methods that change the number of outputs, e.g. boundary expanding)."""
        *parents, last = self.classifier_path().split(".")
        owner = self.net.get_submodule(".".join(parents)) if parents else self.net
        setattr(owner, last, module)
        self.num_classes = int(module.out_features)
        if hasattr(self.net, "num_classes"):
            self.net.num_classes = self.num_classes

    def plain_state_dict(self) -> dict[str, torch.Tensor]:
        """``net.state_dict()``: the network's own key names (no ``net.`` prefix), loadable into the user's class."""
        return self.net.state_dict()

    def spec(self) -> dict[str, Any]:
        """What a checkpoint manifest records about the model (and a later job compares)."""
        out: dict[str, Any] = {"model": self.arch, "num_classes": self.num_classes, "in_chans": self.in_chans,
                               "img_size": self.img_size}
        if self.head_path is not None:
            out["head"] = self.head_path
        if self.target is not None:
            out["target"] = self.target
        return out


def _candidate_heads(net: nn.Module) -> list[str | None]:
    """Splits to try, best first: timm's interface (None), the conventional head names, then every nn.Linear
    from the last registered one backwards."""
    found: list[str | None] = [None] if is_timm_style(net) else []
    modules = dict(net.named_modules())
    for path in _CONVENTIONAL_HEADS:
        mod = modules.get(path)
        if isinstance(mod, nn.Sequential) and len(mod) and isinstance(mod[-1], nn.Linear):
            path = f"{path}.{len(mod) - 1}"  # classifier[-1] (vgg, mobilenet, efficientnet, convnext)
            mod = mod[-1]
        if isinstance(mod, nn.Linear):
            found.append(path)
    found += reversed(linear_paths(net))
    return list(dict.fromkeys(found))


def _describe(path: str | None) -> str:
    return "the timm split (forward_features/forward_head)" if path is None else repr(path)


def _example_output(net: nn.Module, example: torch.Tensor) -> torch.Tensor:
    """``net(example)`` in eval mode without gradients, refusing anything but a ``(B, K)`` logits tensor."""
    name = type(net).__name__
    try:
        out = net(example)
    except Exception as e:  # the user's module on the example: any failure means the input does not fit it
        raise DuckInputError(f"{name} fails on an example batch of shape {tuple(example.shape)} ({error_line(e)}); "
                             "pass inputs of the shape it was built for (data.in_chans, "
                             "data.img_size)") from None
    if not isinstance(out, torch.Tensor):
        raise DuckInputError(f"{name} returns a {type(out).__name__}, not a logits tensor (batch, classes); wrap it "
                             "in an nn.Module whose forward returns the logits only")
    if out.ndim != 2 or out.shape[0] != example.shape[0]:
        raise DuckInputError(f"{name} returns a tensor of shape {tuple(out.shape)} for {example.shape[0]} inputs, "
                             "not logits (batch, classes); wrap it in an nn.Module whose forward returns them")
    return out


def _split_error(clf: Classifier, example: torch.Tensor, out: torch.Tensor) -> str | None:
    """Why ``clf``'s split does not reproduce ``out = net(example)`` (None where it does): the head's output
    must be the model's output and ``head(embed(x))`` must equal ``net(x)``."""
    if not clf.timm_style:
        _, z, head_out = run_capturing(clf.net, clf.classifier(), example)
        if z is None:
            return "it is not called by the forward"
        if head_out is None or head_out.shape != out.shape or not torch.allclose(head_out, out, rtol=1e-4, atol=1e-5):
            return "its output is not the model's output (something is applied after it)"
    try:
        logits = clf.head(clf.embed(example))
    except RuntimeError as e:
        return f"head(embed(x)) fails ({error_line(e, 120)})"
    if logits.shape != out.shape or not torch.allclose(logits, out, rtol=1e-4, atol=1e-5):
        return "head(embed(x)) differs from the model's output"
    return None


def _infer_in_chans(net: nn.Module) -> int | None:
    first = next((m for m in net.modules() if isinstance(m, nn.Conv2d)), None)
    return None if first is None else int(first.in_channels)


def wrap_model(module: nn.Module, *, head: str | None = None, example: torch.Tensor | None = None,
               arch: str | None = None, num_classes: int | None = None, in_chans: int | None = None,
               img_size: int | None = None, target: str | None = None) -> Classifier:
    """A :class:`Classifier` over the user's ``module``, with its embedding/head split found automatically.

    The split, in this order: timm's interface; the torchvision conventions ``fc``, ``classifier`` (or its last
    element where it is an ``nn.Sequential`` ending in an ``nn.Linear``), ``heads.head``, ``head``; otherwise
    the last ``nn.Linear`` (registration order) whose output is the model's output. ``head`` names the split
    explicitly (the attribute path of the final ``nn.Linear``).

    With ``example`` (an input batch) the split is verified in eval mode (every submodule's training flag is
    restored): ``net(example) == head(embed(example))`` and the head's output is the model output; the first
    candidate that passes is taken, ``num_classes`` is the output width, ``in_chans = example.shape[1]`` and
    ``img_size = example.shape[-1]``. Without it the first candidate is taken unchecked, ``num_classes`` is the
    head's ``out_features`` and ``in_chans`` that of the first ``nn.Conv2d``.

    No usable split, or a ``head`` that does not exist, is not an ``nn.Linear`` or does not produce the
    logits: a :class:`DuckInputError` naming ``head=`` and the candidate paths.
    """
    if isinstance(module, Classifier):
        if head is None:
            return module
        module = module.net
    if not isinstance(module, nn.Module):
        raise DuckInputError(f"model must be a torch.nn.Module, got {type(module).__name__}")
    name = type(module).__name__
    if head is not None:
        _head_module(module, head)
        candidates: list[str | None] = [head]
    else:
        candidates = _candidate_heads(module)
        if not candidates:
            raise DuckInputError(f"cannot find the classification head of {name}: it has no nn.Linear module (the "
                                 "split embedding -> linear head is what unlearning works on); give it a final "
                                 "nn.Linear classifier and pass head='<attribute path of the final nn.Linear>'")
    if example is None:
        split = candidates[0]
        clf = Classifier(module, arch or name, 0, in_chans, img_size, head=split, target=target)
        width = int(getattr(clf.classifier(), "out_features", 0) or getattr(module, "num_classes", 0))
        clf.num_classes = width
        clf.in_chans = in_chans if in_chans is not None else _infer_in_chans(module)
    else:
        if not isinstance(example, torch.Tensor) or example.ndim < 2:
            raise DuckInputError(f"example must be an input batch tensor (batch, ...), got "
                                 f"{type(example).__name__}{tuple(getattr(example, 'shape', ()))}")
        param = next(module.parameters(), None)
        if param is not None:
            example = example.to(param.device)
        modes = [(m, m.training) for m in module.modules()]  # restored exactly (a frozen BN may stay in eval)
        module.eval()
        try:
            with torch.no_grad():
                out = _example_output(module, example)
                errors: list[tuple[str | None, str]] = []
                clf = None
                for split in candidates:
                    cand = Classifier(module, arch or name, int(out.shape[1]), int(example.shape[1]),
                                      int(example.shape[-1]), head=split, target=target)
                    error = _split_error(cand, example, out)
                    if error is None:
                        clf = cand
                        break
                    errors.append((split, error))
        finally:
            for m, mode in modes:
                m.training = mode
        if clf is None:
            if head is not None:
                raise DuckInputError(f"head={head!r} does not produce {name}'s logits ({errors[0][1]}); "
                                     f"{_candidates_text(module)}: pass the one whose output is the model's output")
            tried = "; ".join(f"{_describe(path)}: {why}" for path, why in errors[:3])
            raise DuckInputError(f"cannot find the classification head of {name}: no nn.Linear's output is the "
                                 f"model's output ({tried}); its forward must return the logits of its final "
                                 "nn.Linear (no softmax or other op after it): fix that, or pass "
                                 "head='<attribute path of the final nn.Linear>'")
    if num_classes is not None and clf.num_classes != num_classes:
        raise DuckInputError(f"{name} outputs {clf.num_classes} logits but num_classes={num_classes}; build the model "
                             f"with {num_classes} outputs (or pass the data set it was made for)")
    if clf.num_classes < 2:
        raise DuckInputError(f"{name} outputs {clf.num_classes} logit(s); a classifier needs at least 2 classes")
    return clf
