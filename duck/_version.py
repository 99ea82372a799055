"""The version of duck-unlearn, in a module of its own.

The library reads it from here (cache keys, checkpoint manifests, bank formats), never from the package
``duck``, whose ``__init__`` is the public facade that imports the API lazily; pyproject.toml reads it from
here too (``[tool.setuptools.dynamic]``).
"""

__version__ = "0.1.0"
