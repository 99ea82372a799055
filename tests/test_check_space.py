"""`make install`'s free-space check (scripts/check_space.py): a full disk is refused before pip starts, with one
`error:` line naming the folder and the space needed, exit 2 (CI died half-way through torch's install once)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_space.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_enough_space_passes_silently(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "venv"), "0")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_too_little_space_is_one_error_line_naming_the_nearest_existing_folder(tmp_path: Path) -> None:
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    need = f"{free_gb * 2 + 1:.0f}"
    done = _run(str(tmp_path / "not" / "yet" / "venv"), need)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1
    assert lines[0].startswith("error: only ") and str(tmp_path.resolve()) + ";" in lines[0]
    assert f"needs about {need} GB" in lines[0]
    assert not (tmp_path / "not").exists()  # nothing created


def test_the_threshold_is_the_free_space_itself(tmp_path: Path) -> None:
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    assert _run(str(tmp_path), f"{free_gb * 0.5}").returncode == 0
    assert _run(str(tmp_path), f"{free_gb * 1.5}").returncode == 2


@pytest.mark.parametrize("bad", ["lots", "nan", "-1", ""])
def test_a_threshold_that_is_not_a_number_of_gb_is_one_error_line(tmp_path: Path, bad: str) -> None:
    done = _run(str(tmp_path), bad)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: MIN_FREE_GB={bad!r} is not a number of GB >= 0: give one, e.g. MIN_FREE_GB=8\n"


def test_make_install_runs_the_check_before_pip_when_torch_is_absent(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "-s", "install", f"VENV={venv}", "MIN_FREE_GB=1e12"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "error: only" in done.stderr and "needs about 1e+12 GB" in done.stderr
    assert not venv.exists()  # refused before the venv was made
