"""The ``observed-engine`` command as a package: its entry points (console script,
``python -m observed_engine``, ``python -m observed_engine.cli``) and the doctor as a list of
checks whose text and JSON reports agree line for line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from observed_engine.cli import doctor

COMMANDS = ("install", "doctor", "uninstall", "demo")


def cli_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_"))}
    env["HERMES_HOME"] = str(home)
    return env


def entry_points() -> list:
    commands = [pytest.param([sys.executable, "-m", "observed_engine"], id="python -m observed_engine"),
                pytest.param([sys.executable, "-m", "observed_engine.cli"], id="python -m observed_engine.cli")]
    script = Path(sys.executable).with_name("observed-engine")
    if script.exists():
        commands.append(pytest.param([str(script)], id="observed-engine"))
    return commands


@pytest.mark.parametrize("command", entry_points())
def test_every_entry_point_runs_the_cli(command, tmp_path):
    proc = subprocess.run(command + ["--help"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=cli_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: observed-engine")
    for name in COMMANDS:
        assert name in proc.stdout
    proc = subprocess.run(command + ["doctor", "--json"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=cli_env(tmp_path))
    assert proc.returncode == 1, proc.stderr                          # no config.yaml: a failing check
    report = json.loads(proc.stdout)
    assert report["hermes_home"] == str(tmp_path) and report["ok"] is False


def test_no_command_prints_help_and_exits_2(capsys):
    from observed_engine import cli

    assert cli.main([]) == 2
    assert "usage: observed-engine" in capsys.readouterr().out


def test_doctor_is_a_list_of_small_checks():
    assert doctor.CHECKS and len(set(doctor.CHECKS)) == len(doctor.CHECKS)
    for check in doctor.CHECKS:
        assert check.__name__.startswith("check_"), check
        assert check.__code__.co_argcount == 1                        # check_x(ctx)


def test_doctor_text_and_json_agree(tmp_path, monkeypatch, capsys):
    """One text line per JSON check, in the same order; the report's keys in the order of the checks."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "config.yaml").write_text("context:\n  engine: observed\nobserved:\n  tokenizer: estimate\n")
    report = doctor.run_doctor(tmp_path)
    assert list(report) == ["hermes_home", "hermes_version", "hermes_distribution", "hermes_tested_range",
                            "context_engine", "route",
                            "selection", "inner",
                            "exporters", "tokenizer", "checks", "ok"]
    assert list(report["exporters"]) == ["store", "prometheus", "otlp"]
    names = [c["check"] for c in report["checks"]]
    assert names[:4] == ["hermes", "hermes version", "config", "context.engine"] and names[-1] == "tokenizer"
    assert all(c["status"] in ("ok", "warn", "fail") for c in report["checks"])

    text = doctor.format_report(report).splitlines()
    assert text[0] == f"observed-engine doctor: HERMES_HOME={tmp_path}"
    check_lines = [line for line in text[1:-1] if not line.startswith("       fix: ")]
    assert check_lines == [f"{doctor.LABELS[c['status']]} {c['check']}: {c['detail']}" for c in report["checks"]]
    fixes = [line[len("       fix: "):] for line in text if line.startswith("       fix: ")]
    assert fixes == [c["fix"] for c in report["checks"] if c.get("fix")]
    assert text[-1].startswith("verdict: ")

    from observed_engine import cli
    assert cli.main(["doctor", "--hermes-home", str(tmp_path), "--json"]) == (0 if report["ok"] else 1)
    assert json.loads(capsys.readouterr().out)["checks"] == report["checks"]


# -- --version -------------------------------------------------------------------------------

@pytest.mark.parametrize("command", entry_points())
def test_version(command, tmp_path):
    import observed_engine
    from observed_engine import host

    proc = subprocess.run(command + ["--version"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=cli_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"observed-engine {observed_engine.__version__}", "hermes-agent 0.19.0"]
    assert host.hermes_version() == "0.19.0"                          # the venv's Hermes


def test_version_without_hermes(monkeypatch, capsys):
    import observed_engine
    from observed_engine import cli, host

    monkeypatch.setattr(host, "hermes_installation", lambda: None)
    assert cli.main(["--version"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"observed-engine {observed_engine.__version__}"
    assert second == f"hermes: not importable from {sys.executable}"
