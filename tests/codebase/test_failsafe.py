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


def _broad(node) -> bool:
    if not isinstance(node, ast.ExceptHandler) or node.type is None:
        return False
    types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    return any(isinstance(t, ast.Name) and t.id in ("Exception", "BaseException") for t in types)


_SAYING = {"debug", "info", "warning", "error", "exception", "critical"}


def _accounted(node: ast.ExceptHandler) -> bool:
    """The handler re-raises, counts (``note(...)``, a ``count_error``), logs, or hands what it
    caught on (``except Exception as exc`` and ``exc`` used: a FAIL line, an error field)."""
    for child in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(child, ast.Raise):
            return True
        if node.name and isinstance(child, ast.Name) and child.id == node.name:
            return True
        if isinstance(child, ast.Call):
            func = child.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("note", "swallowed") or name.endswith("count_error"):
                return True
            if isinstance(func, ast.Attribute) and name in _SAYING and isinstance(func.value, ast.Name) \
                    and func.value.id in ("logger", "log", "logging"):
                return True
    return False


def silent_handlers(path: Path):
    """(line, text) of each ``except Exception/BaseException`` in ``path`` that swallows what it
    caught without accounting for it (:func:`_accounted`) and says nowhere why: no comment on its
    except line or on its first body line."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if not _broad(node) or _accounted(node):
            continue
        if "#" in lines[node.lineno - 1] or "#" in lines[node.body[0].lineno - 1]:
            continue
        yield node.lineno, lines[node.lineno - 1].strip()


def test_every_broad_handler_that_swallows_says_why():
    files = sorted((REPO / "observed_engine").rglob("*.py")) + sorted((REPO / "dashboard").rglob("*.py"))
    silent = [f"{p.relative_to(REPO)}:{line}: {text}" for p in files for line, text in silent_handlers(p)]
    assert silent == [], ("broad handlers that swallow without a word: use failsafe.swallowed/note, or say "
                          "why on the except line:\n" + "\n".join(silent))


def test_the_rule_finds_a_silent_handler(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("try:\n    x = 1\nexcept Exception:\n    pass\n"                       # 3: silent
                      "try:\n    y = 2\nexcept Exception:  # a reason\n    pass\n"
                      "try:\n    z = 3\nexcept Exception:\n    z = None\n"                   # 11: silent
                      "try:\n    w = 4\nexcept BaseException:\n    cleanup()\n    raise\n"
                      "try:\n    v = 5\nexcept Exception as exc:\n    note('x', exc)\n"
                      "try:\n    u = 6\nexcept Exception:\n    logger.warning('u failed')\n"
                      "try:\n    t = 7\nexcept Exception:\n    self.count_error('t')\n"
                      "try:\n    s = 8\nexcept Exception as exc:\n    out['error'] = str(exc)\n"
                      "try:\n    r = 9\nexcept Exception as exc:\n    r = None\n"               # 36: silent
                      "try:\n    q = 10\nexcept (ValueError, Exception):\n    q = print('x')\n")  # 40: silent
    assert list(silent_handlers(sample)) == [(3, "except Exception:"), (11, "except Exception:"),
                                             (36, "except Exception as exc:"),
                                             (40, "except (ValueError, Exception):")]
