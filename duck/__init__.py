"""duck-unlearn: machine unlearning on GPUs.

Sub-packages are imported lazily so that ``import duck`` stays cheap; the classical,
exactly-deletable models (``duck.deletion``) and the DP statistics (``duck.privacy``)
never import the deep-learning side.
"""

__version__ = "0.1.0"
