"""The built-in the plugin builds is the one bare Hermes builds, on every line (issue 26).

The main suite's tests/plugin/test_builtin_parity.py, run by scripts/test.sh in each
``.venv-hermes-<version>`` with ``OBSERVED_HERMES_VERSION=<version>``: the config.yaml files of
``support.builtin_parity.cases()`` come from that line's own DEFAULT_CONFIG (each compression key it
knows, set to a value other than its default, then all at once, parsed and rejected values, and
the built-in's other inputs), and for each a real bare AIAgent and a real observed AIAgent
(``observed.inner: compressor``) are built against the fake LLM on 127.0.0.1; the built-in's whole
instance state must be the same. Every test id names the line (``[0.20.1.2-compression.threshold_tokens]``),
so a regression on one line fails CI by its name. Skipped without that variable (the main 0.19.0
run has its own file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TARGET = os.environ.get("OBSERVED_HERMES_VERSION")
if not TARGET:
    pytest.skip("run by scripts/test.sh with a .venv-hermes-<version> python and OBSERVED_HERMES_VERSION "
                "(tests/plugin/test_builtin_parity.py covers the main suite's Hermes)", allow_module_level=True)

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
from support import builtin_parity as parity  # noqa: E402
from support.fake_llm_server import FakeLLMServer  # noqa: E402

CASES = parity.cases()


@pytest.fixture(scope="module")
def llm():
    with FakeLLMServer(model=parity.MODEL, context_length=parity.CONTEXT_LENGTH, varied=True) as server:
        yield server


@pytest.mark.parametrize("line", [TARGET])
def test_every_compression_key_of_this_line_has_a_case(line):
    from observed_engine import host

    assert host.hermes_version() == line
    assert not parity.unknown_keys(), (
        f"Hermes {line}: compression keys of its DEFAULT_CONFIG without a value in "
        f"support/builtin_parity.NON_DEFAULT: {parity.unknown_keys()}")
    ids = {case.id for case in CASES}
    assert {f"compression.{key}" for key in parity.compression_defaults()} <= ids


@pytest.mark.parametrize("route", parity.ROUTES)
@pytest.mark.parametrize("case", CASES, ids=[f"{TARGET}-{case.id}" for case in CASES])
def test_the_observed_inner_is_the_bare_builtin(case, route, llm, tmp_path, monkeypatch, record_property):
    parity.skip_where_the_route_cannot_know(case, route)
    with parity.parity_host(tmp_path, monkeypatch, route):
        bare, observed = parity.agent_pair(tmp_path, case, llm.base_url, monkeypatch, route)
        host_made = parity.assert_same_builtin(bare, observed, case, version=TARGET, twin=lambda: parity.build_agent(
            tmp_path / "home-compressor", llm.base_url, monkeypatch, case.agent_model))
        if host_made:                    # explained by the host's own update_model() (H40): in the report
            record_property("host_made_differences", "; ".join(host_made))
