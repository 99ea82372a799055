"""The shared argument checks of ``duck.utils``: one message per kind of bad value, naming the setting."""

import math

import numpy as np
import pytest
import torch

from duck.errors import DuckInputError
from duck.utils import check_bool, check_device, check_number, check_seed, int64_array


@pytest.mark.parametrize("bad", ["foo", "gpu", "cuda:x", [1], 1.5])
def test_unknown_device_names_the_setting_without_torchs_type_list(bad):
    with pytest.raises(DuckInputError) as err:
        check_device(bad, "attack.device")
    assert str(err.value) == f"attack.device={bad!r} is not a device; use cpu, cuda, cuda:N or auto"


def test_cuda_request_without_cuda_or_beyond_the_gpu_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DuckInputError, match=r"^bench.device='cuda' requested but CUDA is not available; "
                                             r"use bench.device=cpu or auto$"):
        check_device("cuda", "bench.device")
    assert check_device("auto").type == "cpu" and check_device(None).type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DuckInputError, match=r"device='cuda:2' requested but this machine has 2 GPU\(s\); "
                                             r"use device=cuda:0..cuda:1"):
        check_device("cuda:2")
    assert check_device("cuda:1") == torch.device("cuda:1")  # nothing is allocated there by the check


def test_number_seed_and_bool_checks():
    assert check_number(0.5, "eps", 0.0, True, 1.0, True) == 0.5
    for bad in (0.0, 1.0, math.nan, math.inf, True, "0.5"):
        with pytest.raises(DuckInputError, match=r"^eps must be a finite number > 0.0 and < 1.0, got "):
            check_number(bad, "eps", 0.0, True, 1.0, True)
    assert check_seed(2**63 - 1) == 2**63 - 1
    for bad in (-1, 2**63, 1.5, True, "3"):
        with pytest.raises(DuckInputError, match="seed"):
            check_seed(bad)
    assert check_bool(False, "audit") is False
    for bad in ("no", 0, None):
        with pytest.raises(DuckInputError, match=f"^audit={bad!r} must be true or false$"):
            check_bool(bad, "audit")


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_int64_array_accepts_every_int64_id_and_nothing_else():
    assert int64_array([2**63 - 1, -(2**63)], "ids").tolist() == [2**63 - 1, -(2**63)]
    assert int64_array(np.array([3, 2**62 + 1], dtype=object), "ids").tolist() == [3, 2**62 + 1]  # exact, not via float
    assert int64_array(np.array([7], dtype=np.uint64), "ids").dtype == np.int64
    assert int64_array(torch.tensor([1.0, 2.0], dtype=torch.bfloat16), "ids").tolist() == [1, 2]
    assert int64_array(5, "ids").tolist() == [5] and int64_array([], "ids").size == 0
    assert int64_array(5, "n", keep_scalar=True).shape == () and int64_array([], "n", keep_scalar=True).shape == (0,)
    for bad, match in [([2**63], r"\[9223372036854775808\] outside the int64 range"),
                       ([float("nan")], r"non-integer values \[nan\]"), ([1.5], "non-integer values"),
                       ([True], "non-integer booleans"), ("3", "non-integer <U1 values"),
                       (2**64, "outside the int64 range"), (np.ones((2, 2)), r"shape \(2, 2\)"),
                       ([[1], [2, 3]], "nested or ragged"), (None, "non-integer object values")]:
        with pytest.raises(DuckInputError, match=f"^ids .*{match}.*; use ids$"):
            int64_array(bad, "ids", hint="use ids")
    assert int64_array(torch.tensor([2.0, 3.0], dtype=torch.float16), "ids").tolist() == [2, 3]
    with pytest.raises(DuckInputError, match="got a tensor of dtype torch.complex32"):
        int64_array(torch.zeros(2, dtype=torch.complex64).to(torch.complex32), "ids")
    with pytest.raises(DuckInputError, match="ids must hold integer ids, got non-integer floats"):
        int64_array([2.0], "ids", floats=False)  # where a float id is a caller's mistake (LSH point ids)


def test_atomic_writes_get_the_umask_mode_not_the_temporary_files_0600(tmp_path):
    """Reports and checkpoints were all -rw------- (mkstemp's mode); they now get 0666 less the umask, as a plain
    open() would give them."""
    import os
    import stat

    from duck.io import atomic_save_json, atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_save_json(tmp_path / "a.json", {"x": 1})
        os.umask(0o027)
        atomic_write_text(tmp_path / "b.md", "hi")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.md").stat().st_mode) == 0o640
