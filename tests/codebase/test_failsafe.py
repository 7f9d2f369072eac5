"""The one guard for "telemetry never raises into the host" (observed_engine/failsafe.py), and
the rule that a broad handler which only passes says why (issue 27)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from support.paths import REPO

from observed_engine import failsafe


@pytest.fixture(autouse=True)
def fresh_kinds():
    failsafe.forget_logged()
    yield
    failsafe.forget_logged()


def warnings_of(caplog):
    return [r for r in caplog.records if r.name == "observed_engine.failsafe" and r.levelno == logging.WARNING]


def test_swallowed_counts_every_failure_and_logs_once_per_kind(caplog):
    counted = []
    caplog.set_level(logging.DEBUG, logger="observed_engine.failsafe")
    for _ in range(3):
        with failsafe.swallowed("exporter", counted.append):
            raise ValueError("bad payload")
    with failsafe.swallowed("exporter", counted.append):
        raise OSError("closed")
    with failsafe.swallowed("store", counted.append):
        raise ValueError("bad row")
    assert counted == ["exporter"] * 4 + ["store"]
    logged = [(r.getMessage().split(":")[0], r.exc_info[0]) for r in warnings_of(caplog)]
    assert logged == [("observed-engine exporter", ValueError), ("observed-engine exporter", OSError),
                      ("observed-engine store", ValueError)]


def test_swallowed_lets_the_block_run_and_returns_nothing_it_did_not_raise():
    counted = []
    with failsafe.swallowed("x", counted.append) as guard:
        value = 42
    assert value == 42 and counted == [] and isinstance(guard, failsafe.swallowed)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupts_pass_through(exc):
    counted = []
    with pytest.raises(exc):
        with failsafe.swallowed("x", counted.append):
            raise exc()
    assert counted == []


def test_a_broken_counter_or_message_never_raises(caplog):
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    def broken(_component):
        raise RuntimeError("counter gone")

    with failsafe.swallowed("x", broken):
        raise Unprintable()
    failsafe.note("y", Unprintable(), broken)      # returns, whatever the handler's logging does


def test_note_counts_without_a_block():
    counted = []
    failsafe.note("retention", ValueError("x"), counted.append)
    failsafe.note("retention", ValueError("y"))
    assert counted == ["retention"]


def bare_passes(path: Path):
    """(line, text) of each ``except Exception/BaseException: pass`` in ``path`` whose except or
    pass line carries no comment."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        if not any(isinstance(t, ast.Name) and t.id in ("Exception", "BaseException") for t in types):
            continue
        if len(node.body) != 1 or not isinstance(node.body[0], ast.Pass):
            continue
        if "#" in lines[node.lineno - 1] or "#" in lines[node.body[0].lineno - 1]:
            continue
        yield node.lineno, lines[node.lineno - 1].strip()


def test_every_broad_handler_that_only_passes_says_why():
    files = sorted((REPO / "observed_engine").rglob("*.py")) + sorted((REPO / "dashboard").rglob("*.py"))
    silent = [f"{p.relative_to(REPO)}:{line}: {text}" for p in files for line, text in bare_passes(p)]
    assert silent == [], ("broad handlers that swallow without a word: use failsafe.swallowed/note, or say "
                          "why on the except or pass line:\n" + "\n".join(silent))


def test_the_rule_finds_a_silent_handler(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("try:\n    x = 1\nexcept Exception:\n    pass\ntry:\n    y = 2\n"
                      "except Exception:  # a reason\n    pass\n")
    assert list(bare_passes(sample)) == [(3, "except Exception:")]
