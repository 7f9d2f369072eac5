"""Output into a pipe whose reader went away (``observed-engine doctor --json | head -1``): no
BrokenPipeError traceback, exit code 141 (128 + SIGPIPE, what a shell shows for such a tool).

Real processes, real pipes: the command runs as a child whose stdout is a pipe that the test
closes before the child writes (the reader is gone: EPIPE on the first write), and through a
shell pipeline into ``head -1``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observed_engine.cli import EXIT_BROKEN_PIPE


def cli_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_"))}
    env["HERMES_HOME"] = str(home)
    return env


def assert_no_traceback(stderr: str) -> None:
    for marker in ("Traceback", "BrokenPipeError", "Exception ignored"):
        assert marker not in stderr, stderr


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("args", [["doctor", "--json"], ["doctor"], ["--version"], ["--help"], ["demo", "--help"]])
def test_reader_closed_before_the_output(args, unbuffered, tmp_path):
    env = cli_env(tmp_path)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)                        # nobody will ever read: the first write fails (EPIPE)
    try:
        proc = subprocess.run([sys.executable, "-m", "observed_engine", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path, env=env)
    finally:
        os.close(write_end)
    assert_no_traceback(proc.stderr)
    # argparse writes --help itself and ignores a failed write (OSError), which unbuffered output
    # raises at once: that help ends with argparse's 0. Everything else reports the cut-off pipe.
    expected = 0 if unbuffered and "--help" in args else EXIT_BROKEN_PIPE
    assert EXIT_BROKEN_PIPE == 141
    assert proc.returncode == expected, proc.stderr


@pytest.mark.skipif(shutil.which("head") is None, reason="no head(1)")
def test_doctor_json_into_head(tmp_path):
    script = f'"{sys.executable}" -m observed_engine doctor --json | head -1; echo "status=${{PIPESTATUS[0]}}" >&2'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=cli_env(tmp_path))
    assert proc.stdout == "{\n"
    assert_no_traceback(proc.stderr)
    # head may exit before or after the write: the report then fails (1, no config.yaml) or is cut off
    assert proc.stderr.strip().splitlines()[-1] in ("status=1", f"status={EXIT_BROKEN_PIPE}"), proc.stderr


def test_an_unbroken_pipe_keeps_the_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "observed_engine", "doctor", "--json"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=cli_env(tmp_path))
    assert proc.returncode == 1 and proc.stdout.startswith("{") and proc.stdout.rstrip().endswith("}")
