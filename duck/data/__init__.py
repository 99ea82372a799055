"""Data sets and scenarios: the train/test splits of each data set (``duck.data.registry``), the forget sets
(``duck.data.scenarios``) and the loaders.

The built-in data sets are imported here so that they register (``@register_dataset``); the registry itself
imports none of them.
"""

from duck.data import cifar, digits, fashion_mnist, imagefolder, synthetic  # noqa: F401  (registration)
