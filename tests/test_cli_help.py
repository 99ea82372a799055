"""First contact (issue 24 item 9): every command's --help says what it does under its own name, lists its
config groups and settings; progress bars only on a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from duck.pipeline.config import resolve_progress


@pytest.mark.parametrize("command,words", [
    ("run", "the main job"), ("train", "train a classifier"), ("unlearn", "checkpoint in, unlearned checkpoint out"),
    ("audit", "membership-inference audit"), ("data", "write index.csv"),
])
def test_help_starts_with_what_the_command_does(run_cli, command, words):
    code, out, err, _ = run_cli(command, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"duck-{command}: {words}"), out[:200]
    assert "powered by Hydra" not in out and len(out.splitlines()) < 60  # not Hydra's 250-line config dump
    assert "config groups" in out and "data      " in out and "settings (key=value):" in out
    assert "digits*" in out  # the default choice marked


def test_help_shows_multi_line_comments_whole(run_cli):
    _, out, _, _ = run_cli("unlearn", "--help")
    assert "# as a reference) with the cached shadow bank" in out  # the audit setting's second comment line
    assert "forget_classes=???" in out  # a deletion request must name its forget set
    # DUCK's nulls are its preset's values for the scenario and data set, not None
    assert "lambda_fgt=(preset) lambda_ret=(preset)" in out and "lambda_fgt=None" not in out


def test_bench_help_lists_the_suites_and_a_suites_settings(run_cli):
    code, out, _, _ = run_cli("bench", "--help")
    assert code == 0 and "suites:" in out and "  compare " in out and "  api " in out
    code, out, _, _ = run_cli("bench", "api", "--help")
    assert code == 0 and "conf/bench/api.yaml" in out and "repetitions:" in out


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_progress_bars_only_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Stream(tty=False))
    assert resolve_progress("auto") is False  # a log file: one line per stage, no bar redraws
    monkeypatch.setattr(sys, "stderr", _Stream(tty=True))
    assert resolve_progress("auto") is True
    assert resolve_progress(False) is False and resolve_progress(True) is True


@pytest.mark.parametrize("args,code", [(["duck.cli.run", "--help"], 0), (["duck.cli.bench", "compare", "--help"], 0),
                                       (["duck.cli.bench"], 2)])
def test_help_into_a_closed_pipe_ends_quietly(args, code):
    """``duck-run --help | head``: the reader has gone before the text is written; the command ends with its own
    exit code and no BrokenPipeError traceback (the pipe's read end is closed before the command starts, so
    every write fails, not only one that loses a race)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == code and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
