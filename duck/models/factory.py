"""Model factory: local small CNNs by name, ``custom`` (the user's own ``nn.Module`` class by its import path),
otherwise any timm model (``timm.create_model``).

Every model is wrapped in :class:`~duck.models.classifier.Classifier`, which exposes the split DUCK needs
(ALGORITHMS.md §1): ``embed(x)`` (the pooled pre-logit embedding) and ``head(z)`` (the linear head).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from duck.errors import DuckInputError
from duck.models.classifier import Classifier, error_line, wrap_model
from duck.models.small_cnn import SmallCNN
from duck.schema import Integer, Real, Settings, option, settings
from duck.utils import available_memory, check_bool, check_number, human_bytes


@settings
class ModelOptions(Settings):
    """The ``model.*`` options of a local model (but ``name``; the data's shape is not an option). timm's and
    ``custom`` models take their constructor's keywords: the constructor is their schema."""

    prefix: ClassVar[str] = "model"


_LOCAL_MODELS: dict[str, tuple[Callable[..., nn.Module], type[ModelOptions]]] = {}


def register_model(name: str, options: type[ModelOptions]) -> Callable[[Callable[..., nn.Module]],
                                                                       Callable[..., nn.Module]]:
    """Register a local model builder ``fn(num_classes, in_chans, **options)`` and its options class."""

    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        _LOCAL_MODELS[name] = (fn, options)
        return fn

    return deco


@settings
class SmallCnnOptions(ModelOptions):
    """``model=smallcnn``'s options (conf/model/smallcnn.yaml is their preset)."""

    width: int = option(32, Integer(1), "channels of the first block (2x and 4x in the next two)")
    drop_rate: float = option(0.0, Real(0.0, False, 1.0, hi_open=True), "dropout before the head")


@settings
class SmallCnn28Options(SmallCnnOptions):
    """``model=smallcnn28``'s options (conf/model/smallcnn28.yaml is their preset)."""

    width: int = option(16, Integer(1), "channels of the first block (2x and 4x in the next two)")


@register_model("smallcnn", SmallCnnOptions)
def smallcnn(num_classes: int, in_chans: int, width: int, drop_rate: float) -> nn.Module:
    """For 8x8 inputs (digits): one 2x2 pool, 128-d embedding at width 32."""
    return SmallCNN(num_classes, in_chans, width=width, n_pool=1, drop_rate=drop_rate)


@register_model("smallcnn28", SmallCnn28Options)
def smallcnn28(num_classes: int, in_chans: int, width: int, drop_rate: float) -> nn.Module:
    """For 28x28 inputs (Fashion-MNIST): two 2x2 pools, ``4·width``-d embedding."""
    return SmallCNN(num_classes, in_chans, width=width, n_pool=2, drop_rate=drop_rate)


def list_local_models() -> list[str]:
    return sorted(_LOCAL_MODELS)


def _has_plain_stem(net: nn.Module) -> bool:
    """A ResNet stem the CIFAR stem can replace: one ``conv1`` convolution and a ``maxpool`` (not the deep
    stems of resnet18d / resnet26t / resnetrs, or resnetv2's ``stem`` module)."""
    return hasattr(net, "conv1") and isinstance(net.conv1, nn.Conv2d) and hasattr(net, "maxpool")


def _cifar_stem(net: nn.Module, in_chans: int) -> None:
    """CIFAR-style ResNet stem: 3x3 stride-1 first conv, no max-pool (for inputs of 64 px or less)."""
    if not _has_plain_stem(net):
        raise DuckInputError("model.cifar_stem=true only applies to ResNet-style models with a plain stem "
                             "(conv1 + maxpool); remove the override (or set model.cifar_stem=false)")
    net.conv1 = nn.Conv2d(in_chans, net.conv1.out_channels, 3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()


#: what create_model sets from the data set; a model option of that name would be replaced silently
_DATA_ARGS = {"num_classes": "data set's class count", "in_chans": "data's image channels",
              "img_size": "data's image size (data.img_size)"}
_UNEXPECTED_KWARG = re.compile(r"(?:(\w+)\.__init__\(\) )?got an unexpected keyword argument '(\w+)'")


def _options_text(options: list[str]) -> str:
    return ", ".join(f"model.{k}" for k in options)


def model_options(name: str) -> list[str] | None:
    """The ``model.*`` options of a local model (its builder's parameters besides the data's shape)."""
    if name not in _LOCAL_MODELS:
        return None
    return [f.name for f in dataclasses.fields(_LOCAL_MODELS[name][1])]


def _timm_options(name: str, cls_name: str | None) -> list[str] | None:
    """The keyword options of the timm class ``cls_name`` that builds ``name`` (for error messages), or
    ``None`` where it cannot be found."""
    try:
        from timm.models import model_entrypoint

        cls = getattr(sys.modules[model_entrypoint(name).__module__], cls_name or "")
        params = inspect.signature(cls.__init__).parameters.values()
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return ["pretrained", "cifar_stem"] + [p.name for p in params if p.kind in kinds and p.name not in
                                           ("self", "device", "dtype", *_DATA_ARGS)]


def _timm_model(name: str, img_size: int, args: dict[str, Any], kwargs: dict[str, Any]) -> nn.Module:
    """``timm.create_model`` for ``img_size`` inputs; a ``model.*`` option it does not take, or a value it
    fails on, becomes a ``DuckInputError`` naming the option."""
    import timm

    try:
        try:
            return timm.create_model(name, img_size=img_size, **args)
        except TypeError as e:  # architectures without an img_size argument (CNNs) adapt to any input size
            found = _UNEXPECTED_KWARG.search(str(e))
            if not found or found.group(2) != "img_size":
                raise
        return timm.create_model(name, **args)
    except TypeError as e:
        found = _UNEXPECTED_KWARG.search(str(e))
        if found and found.group(2) in kwargs:
            key, options = found.group(2), _timm_options(name, found.group(1))
            listing = f"its options are {_options_text(options)}" if options else \
                f"see the keyword arguments of timm's {found.group(1) or name}"
            raise DuckInputError(f"model.{key}={kwargs[key]!r} is not an option of model {name!r}; {listing} "
                                 "(check the spelling or remove the override)") from None
        error: Exception = e
    except (ValueError, AssertionError, ZeroDivisionError) as e:
        error = e
    settings = ", ".join(f"model.{k}={v!r}" for k, v in kwargs.items()) or "its default options"
    detail = (str(error).splitlines() or [""])[0] or type(error).__name__
    raise DuckInputError(f"cannot build model {name!r} for {args['in_chans']}x{img_size}x{img_size} inputs with "
                         f"{settings}: {detail}; fix those model.* settings or data.img_size") from None


CUSTOM = "custom"


def _torchvision_builder(obj: Any) -> bool:
    """Is ``obj`` one of torchvision's registered model builders (``torchvision.models.resnet18``...)?"""
    try:
        import torchvision.models as tvm

        return any(obj is tvm.get_model_builder(name) for name in tvm.list_models())
    except (ImportError, AttributeError, ValueError):
        return False


def _import_target(target: Any) -> Callable[..., nn.Module]:
    """The ``nn.Module`` subclass at ``target`` (``"pkg.module.Class"``), imported from ``sys.path`` and the
    current directory, or one of torchvision's registered model builders (``torchvision.models.resnet18``; an
    allowlist: ``torchvision.models.list_models()``). Anything else (a function such as ``os.system``, a
    module, a constant) is refused: a config names a model to build, never an arbitrary function to call."""
    if not isinstance(target, str) or not target or target == "???":
        raise DuckInputError("model=custom needs model._target_=pkg.module.ClassName, the import path of your "
                             "torch.nn.Module subclass")
    module_name, _, attr = target.rpartition(".")
    if not module_name or not all(part.isidentifier() for part in target.split(".")):
        raise DuckInputError(f"model._target_={target!r} is not an import path pkg.module.ClassName; give the "
                             "dotted path of your torch.nn.Module subclass")
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        importlib.invalidate_caches()  # a module written since the last import (tests, notebooks)
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise DuckInputError(f"model._target_={target!r}: cannot import {module_name!r} ({e}); put its package on "
                             "PYTHONPATH (or run from the folder that holds it)") from None
    except Exception as e:  # the user's module raised while being imported
        raise DuckInputError(f"model._target_={target!r}: importing {module_name!r} failed ({error_line(e)}); fix "
                             "that module") from None
    finally:
        if added:
            sys.path.remove(cwd)
    cls = getattr(module, attr, None)
    if cls is None:
        raise DuckInputError(f"model._target_={target!r}: module {module_name!r} has no attribute {attr!r}; "
                             "check the class name")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)) and not _torchvision_builder(cls):
        raise DuckInputError(f"model._target_={target!r} is a {type(cls).__name__}, not a torch.nn.Module class; "
                             "model=custom builds nn.Module subclasses and torchvision's registered model builders "
                             "(torchvision.models.resnet18, ...): point it at your model's class")
    return cls


def _custom_model(num_classes: int, in_chans: int, img_size: int, target: Any, head: str | None,
                  kwargs: dict[str, Any]) -> Classifier:
    """``model=custom``: instantiate the user's class with ``model.*`` options (plus the data's
    ``num_classes``/``in_chans``/``img_size`` where its constructor takes them by name), then
    :func:`wrap_model` it on a fixed random batch ``(2, in_chans, img_size, img_size)`` (the global RNG untouched)."""
    cls = _import_target(target)
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [k for k, p in params.items() if p.kind in kinds]
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in kwargs if k not in named]
        if unknown:
            options = [k for k in named if k not in _DATA_ARGS]
            listing = f"its options are {_options_text(options)}" if options else "its constructor takes no options"
            raise DuckInputError(f"model.{unknown[0]}={kwargs[unknown[0]]!r} is not a parameter of {target}; "
                                 f"{listing} (check the spelling or remove the override)")
    shape = {"num_classes": num_classes, "in_chans": in_chans, "img_size": img_size}
    if _torchvision_builder(cls):
        named = [*named, "num_classes"]  # torchvision's builders pass num_classes on to the model (**kwargs)
    args = {**{k: v for k, v in shape.items() if k in named}, **kwargs}
    try:
        net = cls(**args)
    except Exception as e:  # the user's constructor: any failure comes from these arguments
        given = ", ".join(f"{k}={v!r}" for k, v in args.items())
        raise DuckInputError(f"cannot build {target}({given}): {error_line(e)}; fix the model.* settings") from None
    # a fixed random batch, not zeros: on zeros an op after the head (a ReLU with positive biases) can go unseen
    example = torch.randn(2, in_chans, img_size, img_size, generator=torch.Generator().manual_seed(0), device="cpu")
    clf = wrap_model(net, head=head, example=example, arch=CUSTOM, target=target)
    if clf.num_classes != num_classes:
        fix = (f"its constructor ignores num_classes={num_classes}" if "num_classes" in named else
               "give its constructor a num_classes parameter (it is passed the data set's class count) or set the "
               "model.* keyword that sets its output width")
        raise DuckInputError(f"{target} outputs {clf.num_classes} logits but the data set has {num_classes} classes "
                             f"(model.num_classes comes from the data); {fix}")
    return clf


def _state_bytes(net: nn.Module) -> int:
    """Bytes of a module's parameters and buffers (works on the ``meta`` device, where nothing is allocated)."""
    return sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))


def _built_within_memory(build: Callable[[], nn.Module], name: str, options: dict[str, Any]) -> nn.Module:
    """``build()``, refused first when the model's weights cannot fit in the available memory.

    The model is first built on PyTorch's ``meta`` device (shapes only, nothing allocated, the random number
    generators untouched) to count its parameter and buffer bytes; more than the available memory (Linux
    ``MemAvailable``) is a :class:`DuckInputError` naming the size and the options, before an allocation fails
    with an allocator traceback. An allocation that still fails (an estimate that could not be made) gets the
    same one-line refusal."""
    shown = " ".join(f"model.{k}={v!r}" for k, v in options.items())
    fix = f"choose a smaller model or lower its size options{f' ({shown})' if shown else ''}"
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            need: int | None = _state_bytes(build())
    except Exception:  # a model that cannot be built on the meta device: no estimate, the real build decides
        need = None
    free = available_memory()
    if need is not None and free is not None and need > free:
        raise DuckInputError(f"model {name!r} needs {human_bytes(need)} of memory for its weights alone and "
                             f"{human_bytes(free)} is available; {fix}")
    try:
        return build()
    except (MemoryError, RuntimeError) as e:
        if isinstance(e, MemoryError) or "allocat" in str(e) or "out of memory" in str(e):
            raise DuckInputError(f"model {name!r} cannot be allocated ({error_line(e)}); {fix}") from None
        raise


def create_model(name: str, num_classes: int, in_chans: int = 3, img_size: int = 32, /, *, pretrained: bool = False,
                 cifar_stem: bool | str = "auto", **kwargs: Any) -> Classifier:
    """Build ``name`` (a local small CNN, ``custom`` or any timm model) for ``num_classes`` outputs and the input
    shape.

    ``kwargs`` are the model's own options (``model.*``): an option the model does not take is refused
    (``DuckInputError`` naming it and listing the valid ones), never ignored; so are the shape arguments,
    which come from the data set. ``cifar_stem`` (``true``, ``false`` or ``auto``) applies to ResNet-style
    timm models only. ``custom``: ``_target_="pkg.module.Class"`` (an ``nn.Module`` subclass on the Python path)
    built with the other ``kwargs``, and ``head`` (optional) the attribute path of its final ``nn.Linear``
    (see :func:`~duck.models.classifier.wrap_model`).
    """
    if num_classes < 2:
        raise DuckInputError(f"num_classes={num_classes} must be at least 2")
    pretrained = check_bool(pretrained, "model.pretrained")
    if not (isinstance(cifar_stem, bool) or cifar_stem == "auto"):
        raise DuckInputError(f"model.cifar_stem={cifar_stem!r} must be true, false or auto")
    clash = sorted(kwargs.keys() & _DATA_ARGS.keys())
    if clash:
        key = clash[0]
        raise DuckInputError(f"model.{key}={kwargs[key]!r} cannot be set: it comes from the {_DATA_ARGS[key]}; "
                             f"remove the model.{key} override")
    if name == CUSTOM:
        if pretrained or cifar_stem != "auto":
            key, value = ("pretrained", pretrained) if pretrained else ("cifar_stem", cifar_stem)
            raise DuckInputError(f"model.{key}={value!r} does not apply to model=custom (your class builds its own "
                                 f"weights and stem); remove the model.{key} override")
        return _custom_model(num_classes, in_chans, img_size, kwargs.pop("_target_", None), kwargs.pop("head", None),
                             kwargs)
    if name in _LOCAL_MODELS:
        options = model_options(name)
        unknown = [k for k in kwargs if k not in options]
        if unknown:
            raise DuckInputError(
                f"model.{unknown[0]}={kwargs[unknown[0]]!r} is not an option of model {name!r}; its options are "
                f"{_options_text(options)} (check the spelling or remove the override)"
            )
        if pretrained:
            raise DuckInputError(f"{name} has no pretrained weights; set model.pretrained=false")
        if cifar_stem != "auto":
            raise DuckInputError(f"model.cifar_stem={cifar_stem!r} does not apply to {name} (only ResNet-style timm "
                                 "models have that stem); remove the model.cifar_stem override")
        build, options_cls = _LOCAL_MODELS[name]
        checked = dict(options_cls.parse(kwargs))
        net = _built_within_memory(lambda: build(num_classes=num_classes, in_chans=in_chans, **checked), name, kwargs)
        smallest = getattr(net, "min_img_size", 1)
        if img_size < smallest:
            raise DuckInputError(f"{name} needs images of at least {smallest}x{smallest} pixels (its max-pools halve "
                                 f"them); data.img_size={img_size} is too small: use larger images or another model")
        return Classifier(net, name, num_classes, in_chans, img_size)
    import timm

    if not isinstance(name, str) or not timm.is_model(name):
        raise DuckInputError(
            f"unknown model {name!r}; use one of {list_local_models()} or a timm model name "
            "(python -c 'import timm; print(timm.list_models())')"
        )
    for key, value in kwargs.items():  # timm's drop_rate, drop_path_rate, attn_drop_rate...: probabilities
        if isinstance(key, str) and key.endswith("_rate"):
            check_number(value, f"model.{key}", 0.0, False, 1.0, hi_open=True)
    args = dict(pretrained=pretrained, num_classes=num_classes, in_chans=in_chans, **kwargs)
    try:
        net = (_timm_model(name, img_size, args, kwargs) if pretrained else
               _built_within_memory(lambda: _timm_model(name, img_size, args, kwargs), name, kwargs))
    except (RuntimeError, OSError) as e:
        if pretrained:
            raise DuckInputError(f"cannot load pretrained weights for {name} ({e}); set model.pretrained=false "
                                 "or put the weights in the Hugging Face cache") from None
        raise
    auto = (cifar_stem == "auto" and img_size <= 64 and name.startswith(("resnet", "resnext"))
            and _has_plain_stem(net))  # deep stems keep theirs under auto
    if cifar_stem is True or auto:
        if pretrained:
            from duck.utils import warn_line

            warn_line(f"model.cifar_stem{'=true' if cifar_stem is True else ' (auto, images <= 64 px)'} replaces "
                      f"{name}'s pretrained first convolution by a new, randomly initialised 3x3 one; set "
                      "model.cifar_stem=false to keep the pretrained stem")
        _cifar_stem(net, in_chans)
    return Classifier(net, name, num_classes, in_chans, img_size)
