"""Models with an embedding/head split (``Classifier.embed`` / ``Classifier.head``)."""

from duck.models.factory import Classifier, create_model, list_local_models, register_model

__all__ = ["Classifier", "create_model", "list_local_models", "register_model"]
