"""Models with an embedding/head split (``Classifier.embed`` / ``Classifier.head``): local small CNNs, timm
models, and any ``nn.Module`` through :func:`wrap_model` (or ``create_model("custom", ...)``)."""

from duck.models.classifier import Classifier, wrap_model
from duck.models.factory import create_model, list_local_models, register_model

__all__ = ["Classifier", "create_model", "list_local_models", "register_model", "wrap_model"]
