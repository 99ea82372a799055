"""Small shared helpers used by every layer (no deep-learning imports beyond torch).

torch is imported by the functions that use it, not by this module: the command line checks its settings with
these helpers before it imports torch (1.4 s), so that a bad setting is refused in well under a second."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from duck.errors import DuckInputError, warn_line  # noqa: F401 (warn_line: re-exported, its home is duck.errors)

if TYPE_CHECKING:
    import torch


def _is_tensor(value: Any) -> bool:
    """``isinstance(value, torch.Tensor)`` without importing torch (no tensor exists before torch is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``/``None`` -> CUDA when available else CPU; otherwise ``torch.device(device)``.

    Asking for CUDA on a machine without it, or for a GPU index the machine lacks, raises instead of
    silently falling back (or failing later, at the first tensor moved there).
    """
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):  # torch's message lists every device type it knows
        raise ValueError(f"device={device!r} is not a device; use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} requested but CUDA is not available; use device=cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"device={device!r} requested but this machine has {torch.cuda.device_count()} GPU(s); "
                           f"use device=cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return dev


def as_tensor(
    X: Any, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None, name: str = "X"
) -> torch.Tensor:
    """Convert numpy/torch/list input to a tensor on ``device`` (``dtype`` default float32); reject NaN/inf with a
    clear error."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    t = X if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X))
    t = t.to(device=device if device is not None else t.device, dtype=dtype)
    if t.is_floating_point() and not torch.isfinite(t).all():
        bad = (~torch.isfinite(t)).reshape(t.shape[0], -1).any(1).nonzero().flatten()[:5].tolist() if t.ndim else []
        raise ValueError(f"{name} contains NaN or inf values (first bad rows: {bad}); clean or drop those rows")
    return t


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``; None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human_bytes(n_bytes: float) -> str:
    """``n_bytes`` as text in decimal units (``1.5 GB``)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes / 1e3:.1f} kB"


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer (Python or numpy, not bool) ``>= minimum``, else a
    ``DuckInputError`` naming ``name`` and the value."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value.__index__()) < minimum:
        raise DuckInputError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value.__index__())


def check_bool(value: Any, name: str) -> bool:
    """A config switch: ``true`` or ``false`` (a Python or numpy bool), else a ``DuckInputError`` naming the
    value (a string such as ``no`` is refused, not read as truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise DuckInputError(f"{name}={value!r} must be true or false")
    return bool(value)


def check_number(value: Any, name: str, lo: float, lo_open: bool, hi: float = math.inf,
                 hi_open: bool = False) -> float:
    """``value`` as a float if it is a finite real number (not bool) in the interval from ``lo`` to ``hi``
    (open ends where ``lo_open`` / ``hi_open``), else a ``DuckInputError`` naming ``name`` and the value."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        v = float(value)
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok:
        bound = "" if lo == -math.inf else (f" > {lo}" if lo_open else f" >= {lo}")
        upper = "" if hi == math.inf else f" {'and ' if bound else ''}{'<' if hi_open else '<='} {hi}"
        raise DuckInputError(f"{name} must be a finite number{bound}{upper}, got {value!r}")
    return float(value)


#: largest radius accepted: radii are compared through squared distances (and small multiples of them), which
#: must stay finite in float64 (max ~1.8e308)
RADIUS_MAX = 1e150


def check_radius(r: Any, name: str = "r") -> float:
    """A finite radius in ``(0, RADIUS_MAX]`` as a float (a real number, not a bool or a string), else a
    ``DuckInputError`` naming the value (beyond RADIUS_MAX, ``r^2`` overflows or nearly: rescale)."""
    value = check_number(r, name, 0.0, True)
    if value > RADIUS_MAX:
        raise DuckInputError(
            f"{name}={value:.3g} is too large: radii are compared as squared distances, and above {RADIUS_MAX:.0e} "
            f"those approach the float64 maximum; rescale the data and {name} by the same factor"
        )
    return value


#: seeds are the 64-bit values torch.Generator.manual_seed and numpy accept
SEED_MAX = 2**63 - 1
#: Lightning's seed_everything seeds numpy's legacy generator, which takes 32-bit seeds (jobs, unlearners)
JOB_SEED_MAX = 2**32 - 1


def check_seed(seed: Any, name: str = "seed") -> int:
    """An integer seed in ``[0, 2^63 - 1]`` (not a bool), else a ``DuckInputError`` naming the value."""
    value = check_positive_int(seed, name, 0)
    if value > SEED_MAX:
            raise DuckInputError(f"{name}={seed!r} is too large; seeds are integers in [0, 2^63 - 1]")
    return value


def check_device(device: Any, name: str = "device") -> torch.device:
    """:func:`resolve_device` with a ``DuckInputError`` (naming the value) for an unknown or unavailable
    device."""
    try:
        return resolve_device(device)
    except (RuntimeError, ValueError) as e:
        raise DuckInputError(str(e).replace("device=", f"{name}=")) from None


def real_array_tensor(X: Any, name: str, shape: str = "(n, d)") -> torch.Tensor:
    """A real-valued numeric tensor from numpy/torch/list input (torch input detached, not copied or moved).

    Raises ``DuckInputError`` naming ``name`` for input that is not a numeric array (strings, objects,
    ragged lists) or is complex / boolean; shapes and finiteness are the caller's checks.
    """
    import torch

    if isinstance(X, torch.Tensor):
        t = X.detach()
        if t.is_complex() or t.dtype == torch.bool:
            raise DuckInputError(f"{name} must be real-valued, got dtype {t.dtype}")
        return t
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as e:
        raise DuckInputError(f"{name} must be a numeric {shape} array: {e}") from None
    if arr.dtype.kind not in "iuf":
        raise DuckInputError(f"{name} must be a real-valued numeric array, got dtype {arr.dtype}")
    return torch.from_numpy(np.ascontiguousarray(arr))


#: the integers an int64 holds: [-2^63, 2^63 - 1]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def int64_array(value: Any, name: str, *, floats: bool = True, keep_scalar: bool = False,
                hint: str = "") -> np.ndarray:
    """``value`` (an int, a flat list, a numpy array or a tensor of integers) as an int64 numpy array.

    The one integer-id parser of the library (k-means and SPN row ids, LSH point ids and sample counts,
    forget-id files). Accepts integer dtypes, Python ints of any size that fit, and -- where ``floats`` --
    integer-valued finite floats, all within int64; a scalar becomes a 1-element array unless
    ``keep_scalar`` (then it stays 0-d, for per-query counts that broadcast). Anything else is a
    ``DuckInputError`` naming ``name`` and the first bad values, ending with ``hint``: nested or ragged
    lists, 2-D arrays, booleans, text, complex numbers, non-integral or non-finite floats, and values
    outside int64 (a uint64 >= 2^63, a float such as 1e20, an int beyond 64 bits), which a plain cast
    would wrap around silently.
    """
    tail = f"; {hint}" if hint else ""
    if _is_tensor(value):
        import torch

        t = value.detach().cpu()
        if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
            t = t.double()  # bfloat16, float16, float8: dtypes numpy lacks
        try:
            arr = t.numpy()
        except TypeError:  # complex32 and the like
            raise DuckInputError(f"{name} must hold integer ids, got a tensor of dtype {t.dtype}{tail}") from None
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raise DuckInputError(
                f"{name} must be a flat 1-D sequence of integer ids, got a nested or ragged sequence{tail}"
            ) from None
    if arr.ndim > 1:
        raise DuckInputError(f"{name} has shape {arr.shape}; give a flat (1-D) sequence of integer ids{tail}")
    shape = arr.shape if keep_scalar else (arr.size,)
    if arr.dtype.kind == "i":  # the common case, first: nothing to check
        return arr.astype(np.int64).reshape(shape)
    flat = arr.reshape(-1)

    def outside(values: list) -> DuckInputError:
        return DuckInputError(f"{name} holds {values[:5]} outside the int64 range [-2^63, 2^63 - 1]{tail}")

    kind = flat.dtype.kind
    if flat.size == 0:
        return np.empty(shape, dtype=np.int64)
    if kind == "O" and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in flat):
        values = [int(v) for v in flat]  # Python ints numpy could not fit in one 64-bit dtype
        big = [v for v in values if not INT64_MIN <= v <= INT64_MAX]
        if big:
            raise outside(big)
        return np.array(values, dtype=np.int64).reshape(shape)
    if kind == "u" and int(flat.max()) > INT64_MAX:
        raise outside(flat[flat > INT64_MAX].tolist())
    if kind == "f" and floats:
        bad = flat[~np.isfinite(flat) | (flat != np.round(flat))]
        if bad.size:
            raise DuckInputError(f"{name} must hold integer ids, got non-integer values {bad[:5].tolist()}{tail}")
        big = flat[(flat < INT64_MIN) | (flat >= 2.0**63)]
        if big.size:
            raise outside(big.tolist())
    elif kind not in "iu":
        what = {"b": "booleans", "c": "complex numbers", "f": "floats"}.get(kind, f"{flat.dtype} values")
        preview = " ".join(repr(flat[:5].tolist()).split())[:60]
        raise DuckInputError(f"{name} must hold integer ids, got non-integer {what} {preview}{tail}")
    return flat.astype(np.int64).reshape(shape)
