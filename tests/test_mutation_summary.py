"""mutation/mutate.py's scores (issue 39): the score and the score with the CUDA-only equivalents counted as
survivors, by hand, and which equivalent reasons count as CUDA-only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "mutation" / "mutate.py"
_spec = importlib.util.spec_from_file_location("mutate_under_test", _PATH)
mutate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutate)


def _counts(**kw: int) -> dict[str, int]:
    base = {"killed": 0, "timeout": 0, "survived": 0, "no tests": 0, "other": 0, "equivalent": 0, "cuda-only": 0}
    return {**base, **kw}


def test_scores_by_hand():
    """35 killed + 1 timeout of 36 + 2 survived + 1 without tests + 1 other = 40 considered: 36 / 40 = 0.9; with 4
    CUDA-only equivalents counted as survivors, 36 / 44. The equivalents themselves are never in the denominator."""
    c = _counts(killed=35, timeout=1, survived=2, **{"no tests": 1}, other=1, equivalent=10, **{"cuda-only": 4})
    assert mutate.scores(c) == (pytest.approx(0.9), pytest.approx(36 / 44))
    assert mutate.scores(_counts(killed=3)) == (1.0, 1.0)
    assert all(s != s for s in mutate.scores(_counts()))  # nothing considered: nan, not a division error


@pytest.mark.parametrize(("reason", "device_only"), [
    ("CPU-only machine: differs only on CUDA (tests/test_qkmeans_survivors.py's CUDA test targets it)", True),
    ("a device argument: on a CPU-only machine every tensor is on the CPU either way", True),
    ("np.sin on a CPU tensor returns the same values; fails only on a CUDA tensor", True),
    ("the same sorted order: the tie-break never meets equal keys", False),
    ("CPU tensors and numpy views share storage here", False),
])
def test_which_reasons_are_cuda_only(reason, device_only):
    assert mutate.device_only(reason) is device_only
