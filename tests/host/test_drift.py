"""The drift guard on the main suite's Hermes (issue 26, item 4).

Every name the installed Hermes can use on its context engine, read from its ``ContextEngine``
ABC and from the call sites in ``run_agent.py`` and ``agent/`` (tests/support/host_drift.py), is
a traced hook (``HOOK_SPECS``) or a documented non-hook (``contract/host_surface.py``); the test
fails with the list of the others. tests/hermes_versions/ runs the same check on every other
Hermes line of the matrix, so a new release is caught on its first run.
"""

from __future__ import annotations

import textwrap

from support import host_drift

from observed_engine import host
from observed_engine.contract.hooks import HOOK_NAMES
from observed_engine.contract.host_surface import NON_HOOKS


def test_the_installed_hermes_uses_no_engine_name_the_contract_does_not_know():
    unknown = host_drift.installed_drift()
    assert not unknown, host_drift.describe(unknown)


def test_hooks_and_non_hooks_are_apart():
    assert not set(HOOK_NAMES) & set(NON_HOOKS)
    assert all(isinstance(reason, str) and reason for reason in NON_HOOKS.values())


def test_the_guard_names_a_hook_the_contract_forgets():
    """The guard can fail: without the hooks the 0.19.0 host calls, it names each of them."""
    forgotten = {"update_from_response", "should_compress", "compress", "on_session_start", "update_model",
                 "last_prompt_tokens"}
    unknown = host_drift.installed_drift(host_drift.contract_names() - forgotten)
    assert forgotten <= set(unknown), sorted(unknown)
    assert set(unknown) <= forgotten
    assert any("agent/" in w or "run_agent.py" in w for w in unknown["update_from_response"])
    assert "the ContextEngine ABC" in unknown["last_prompt_tokens"]
    message = host_drift.describe(unknown)
    assert "hermes-agent 0.19.0 uses 6 engine name(s)" in message and "  compress: " in message


HOST_CODE = '''
import copy
from plugins.context_engine import load_context_engine


def _call_engine_hook(engine, hook, *args):
    fn = getattr(engine, hook, None)
    if callable(fn):
        fn(*args)


class Agent:
    def turn(self):
        compressor = self.context_compressor
        compressor.update_from_response({})
        if compressor.brand_new_hook(3):
            fresh = getattr(compressor, "another_new_hook", None)
        compressor.brand_new_state = 1          # a field the host keeps on the engine: state
        compressor.last_prompt_tokens = -1
        _call_engine_hook(self.context_compressor, "via_helper")
        blocked = getattr(type(compressor), "on_the_class", None)
        probe = lambda: compressor.inside_lambda()

    def select(self):
        engine = load_context_engine("x") or None
        clone = engine.clone_for_agent()
        clone.on_a_clone()
        twin = copy.deepcopy(clone)
        twin.on_a_deep_copy()


def helper(engine):
    return engine.from_a_parameter()


def unrelated(path):
    return path.exists()                     # not an engine: not reported
'''


def test_the_guard_reads_the_host_code(tmp_path):
    """The call-site scan on host code of its own: calls, getattr/hasattr with a constant name,
    type(engine), a helper taking the engine and a hook name, locals, clones, copies, parameters,
    lambdas; attributes the host only assigns are state."""
    (tmp_path / "agent").mkdir()
    (tmp_path / "run_agent.py").write_text(textwrap.dedent(HOST_CODE), encoding="utf-8")
    (tmp_path / "agent" / "nothing.py").write_text("x = 1\n", encoding="utf-8")
    unknown = host_drift.unknown_names(host.context_engine_abc(), host_drift.builtin_compressor(), tmp_path,
                                       host_drift.contract_names())
    assert set(unknown) == {"brand_new_hook", "another_new_hook", "via_helper", "on_the_class", "inside_lambda",
                            "on_a_clone", "on_a_deep_copy", "from_a_parameter"}, sorted(unknown)
    assert unknown["another_new_hook"] == {"run_agent.py (getattr)"}
    looked_up = host_drift.host_lookups(tmp_path)
    assert "brand_new_state" in looked_up and "exists" not in looked_up
