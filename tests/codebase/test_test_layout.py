"""The tests mirror the packages, and what several test modules share lives in tests/support/:
a test module that imports another test module runs that module's fixtures and module-level
set-up in the importer, and couples two folders that are meant to be read on their own."""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

TESTS = REPO / "tests"


def imports_of_test_modules(root: Path) -> list:
    """(file, line, module) of every import, at any depth, that names a test module (``test_*``)
    or the ``tests`` package itself."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "support" in path.relative_to(root).parts[:1]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                names = [a.name for a in node.names] + ([node.module] if node.module else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "tests" or any(p.startswith("test_") for p in parts):
                    found.append((str(path.relative_to(root)), node.lineno, name))
                    break
    return found


def test_no_test_module_imports_another():
    assert imports_of_test_modules(TESTS) == []


def test_the_rule_finds_an_import_of_a_test_module(tmp_path):
    (tmp_path / "dashboard").mkdir()
    (tmp_path / "dashboard" / "test_a.py").write_text("from tests.dashboard.test_b import helper\n")
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "test_c.py").write_text("def f():\n    from .test_d import page\n")
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "helpers.py").write_text("import json\n")
    assert imports_of_test_modules(tmp_path) == [
        ("dashboard/test_a.py", 1, "tests.dashboard.test_b"),
        ("e2e/test_c.py", 2, "test_d"),
    ]
