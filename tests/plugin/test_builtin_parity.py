"""The built-in the plugin builds is the one bare Hermes 0.19.0 builds (issue 26).

With ``context.engine: observed`` and ``observed.inner: compressor`` the host does not construct
its ``ContextCompressor``; the plugin does (``plugin.build_compressor``). For every config.yaml of
``support.builtin_parity.cases()`` (each compression key of 0.19.0's own DEFAULT_CONFIG set to a
value other than its default, all of them at once, values the host parses or rejects, the window
from custom_providers, model.max_tokens, a model with the host's own per-model threshold, an agent
whose model is not the config's default), a real bare AIAgent and a real observed AIAgent are
built against the fake LLM on 127.0.0.1, and the built-in's whole instance state is compared.
The other Hermes lines run the same cases in tests/hermes_versions/test_builtin_parity.py.
"""

from __future__ import annotations

import pytest
from support import builtin_parity as parity
from support.fake_llm_server import FakeLLMServer

CASES = parity.cases()


@pytest.fixture(scope="module")
def llm():
    with FakeLLMServer(model=parity.MODEL, context_length=parity.CONTEXT_LENGTH) as server:
        yield server


def test_every_compression_key_of_this_hermes_has_a_case():
    assert not parity.unknown_keys(), (
        f"compression keys of this Hermes' DEFAULT_CONFIG without a value in "
        f"support/builtin_parity.NON_DEFAULT: {parity.unknown_keys()}")
    ids = {case.id for case in CASES}
    assert {f"compression.{key}" for key in parity.compression_defaults()} <= ids


@pytest.mark.parametrize("route", parity.ROUTES)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_observed_inner_is_the_bare_builtin(case, route, llm, tmp_path, monkeypatch, record_property):
    parity.skip_where_the_route_cannot_know(case, route)
    with parity.parity_host(tmp_path, monkeypatch, route):
        bare, observed = parity.agent_pair(tmp_path, case, llm.base_url, monkeypatch, route)
        host_made = parity.assert_same_builtin(bare, observed, case, twin=lambda: parity.build_agent(
            tmp_path / "home-compressor", llm.base_url, monkeypatch, case.agent_model))
        if host_made:                    # explained by the host's own update_model() (H40): in the report
            record_property("host_made_differences", "; ".join(host_made))


def test_the_comparison_sees_a_field_that_differs(llm, tmp_path, monkeypatch):
    """The differential is not blind: one field changed on the observed side is reported by name,
    and a field held by one instance against the class's own value is not."""
    case = CASES[0]
    with parity.parity_host(tmp_path, monkeypatch):
        bare, observed = parity.agent_pair(tmp_path, case, llm.base_url, monkeypatch)
        engine = observed.context_compressor
        engine.protect_last_n += 1
        diff = parity.differences(bare.context_compressor, engine)
        assert len(diff) == 1 and diff[0].startswith("protect_last_n:"), diff
        engine.protect_last_n -= 1
        vars(engine).pop("last_total_tokens", None)
        vars(bare.context_compressor)["last_total_tokens"] = 0
        assert parity.differences(bare.context_compressor, engine) == []
