"""A replay loads no CA bundle: Hermes builds a client per provider request, and each one loaded
the system's or certifi's bundle (40-55 ms of CPU). The replay speaks plain HTTP to 127.0.0.1, so
its clients are pointed at one certificate that verifies nothing (compare/replay_tls.py)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from observed_engine import host
from observed_engine.compare import replay as replay_module
from observed_engine.compare import replay_tls
from observed_engine.compare.sessions import read_conversations

MODEL = "fake-model"


def _recorded(home: Path, turns: int):
    home.mkdir()
    db = host.session_db(home / "state.db")
    db.create_session(session_id="tls", source="cli", model=MODEL)
    for t in range(turns):
        db.append_message("tls", "user", f"question {t}")
        db.append_message("tls", "assistant", f"answer {t}")
    db.close()
    [conv] = read_conversations(home / "state.db", summary_body=host.compaction_summary_body,
                                inline_tools=host.AGENT_INLINE_TOOLS)
    return conv


@pytest.fixture
def trust_loads(monkeypatch):
    """Every certificate source an SSL context is given while the test runs: a CA file's path,
    or "default certificates"."""
    loads = []
    real_locations, real_defaults = ssl.SSLContext.load_verify_locations, ssl.SSLContext.load_default_certs

    def locations(self, cafile=None, capath=None, cadata=None):
        loads.append(str(cafile or capath or "cadata"))
        return real_locations(self, cafile, capath, cadata)

    def defaults(self, *args, **kwargs):
        loads.append("default certificates")
        return real_defaults(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", locations)
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", defaults)
    return loads


@pytest.mark.parametrize("operator_env", ["SSL_CERT_FILE", "none"])
def test_a_replay_loads_only_the_trust_nothing_certificate(tmp_path, monkeypatch, trust_loads, operator_env):
    certifi = pytest.importorskip("certifi")
    for name in ("HERMES_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    if operator_env == "SSL_CERT_FILE":            # an operator's machine that names its bundle
        monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    ours, foreign = {}, {}
    for turns in (1, 2, 6):                      # the first pays the process's one-shot imports
        del trust_loads[:]
        raw = replay_module.replay(_recorded(tmp_path / f"rec{turns}", turns), "compressor", user_config={},
                                   context_length=64_000, usage="chars")
        assert raw["error"] is None and raw["turns_done"] == turns and len(raw["requests"]) == turns, raw
        ours[turns] = sum(Path(p).name == replay_tls.FILE_NAME for p in trust_loads)
        foreign[turns] = [p for p in trust_loads if Path(p).name != replay_tls.FILE_NAME]
    # Up to 0.20 each request's client loads a bundle (0.22 keeps its client): only the one
    # certificate now; what else is loaded (Hermes' check of certifi's bundle when it builds an
    # agent, a module's context at import) does not grow with the requests.
    assert len(foreign[6]) == len(foreign[2]), (foreign, ours)
    # the operator's variables are theirs again afterwards
    assert ("SSL_CERT_FILE" in os.environ) == (operator_env == "SSL_CERT_FILE")
    assert "HERMES_CA_BUNDLE" not in os.environ


def test_the_certificate_is_one_that_loads(tmp_path):
    env = replay_tls.trust_nothing_environment(tmp_path)
    assert set(env) == set(replay_tls.CA_VARIABLES)
    path = Path(env["SSL_CERT_FILE"])
    assert all(Path(v) == path for v in env.values())
    der = ssl.PEM_cert_to_DER_cert(path.read_text(encoding="ascii"))   # one well-formed certificate
    assert b"observed-engine replay: trusts nothing" in der
    ctx = ssl.create_default_context(cafile=str(path))                # loads (0.22: truststore's context)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
