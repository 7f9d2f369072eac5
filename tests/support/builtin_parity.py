"""The built-in compressor of a bare agent against the one observed-engine builds (issue 26).

With ``context.engine: observed`` and ``observed.inner: compressor`` the host does not build its
``ContextCompressor``; the plugin does, from ``compression.*``, ``model.*`` and the rest of
config.yaml. Whatever it builds must be the compressor the bare host builds for the same
config.yaml. This module builds both, each inside a real ``run_agent.AIAgent`` (against the fake
LLM on 127.0.0.1), and renders the compressors' whole instance state for comparison.

The config.yaml files come from the installed Hermes itself: every key of its own
``DEFAULT_CONFIG["compression"]`` is set to a value other than its default, one key per config
(so a difference names the key), then all at once, then values the host has to parse (strings,
floats, booleans, bad values), the model window from ``custom_providers``, ``model.max_tokens``
and ``agent.minimum_tool_context_length``. A key the table below does not know fails the test by
name: a new Hermes line that adds a compression key gets a value here before it is verified.

Used by ``tests/plugin/test_builtin_parity.py`` (0.19.0, the main suite) and
``tests/hermes_versions/test_builtin_parity.py`` (every other line, in its own venv).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

MODEL = "fake-model"
# A model the host gives a threshold of its own (auxiliary_client._compression_threshold_for_model: 0.75)
TRINITY = "arcee-ai/trinity-large-thinking"
CONTEXT_LENGTH = 64_000      # Hermes' minimum window (MINIMUM_CONTEXT_LENGTH)
SESSION_ID = "20260101_000000_0abc12"
REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"

# A value other than the default for every compression.* key of the six lines (0.16.0 .. 0.22.2.post1).
# Values that change the compressor where the line reads the key: a threshold above the small-window
# floor (0.75), an absolute cap below the 85 % trigger of a 64K window (54,400), a per-model map
# matching the model.
NON_DEFAULT: Dict[str, Any] = {
    "enabled": False,
    "progress_notices": True,
    "checkpoint_required": True,
    "threshold": 0.8,
    "threshold_tokens": 50_000,
    "target_ratio": 0.35,
    "protect_last_n": 7,
    "min_tail_user_messages": 3,
    "max_attempts": 5,
    "proactive_prune_tokens": 1000,
    "proactive_prune_min_result_chars": 1200,
    "proactive_prune_min_reclaim_tokens": 300,
    "micro_compact": True,
    "micro_compact_every_n_turns": 4,
    "micro_compact_defrag_threshold_tokens": 3000,
    "hygiene_hard_message_limit": 400,
    "hygiene_timeout_seconds": 12,
    "hygiene_total_ceiling_seconds": 90,
    "hygiene_failure_cooldown_seconds": 45,
    "hygiene_max_turn_hold_seconds": 4,
    "context_timeout_seconds": 30,
    "context_total_ceiling_seconds": 200,
    "protect_first_n": 0,
    "abort_on_summary_failure": True,
    "codex_gpt55_autoraise": False,
    "codex_gpt55_autoraise_notice": False,
    "codex_app_server_auto": "hermes",
    "codex_responses_native": True,
    "codex_responses_compact_threshold": 150_000,
    "in_place": False,
    "model_thresholds": {"fake": 0.9, "other-model": 0.6},
    "idle_compact_after_seconds": 600,
}

# Values the host parses rather than takes: numeric strings, integral floats, booleans where a
# number belongs, padded words, maps with non-numbers.
PARSED_VALUES: Dict[str, Any] = {
    "threshold": "0.82",
    "threshold_tokens": "50000",
    "target_ratio": "0.3",
    "protect_last_n": "9",
    "protect_first_n": -3,
    "min_tail_user_messages": "2",
    "tail_mode": " LEAN ",
    "proactive_prune_tokens": 2000.0,
    "proactive_prune_min_result_chars": "900",
    "proactive_prune_min_reclaim_tokens": -10,
    "abort_on_summary_failure": "yes",
    "model_thresholds": {"fake": True, "fake-mod": 0.85, "x": "0.3"},
    "codex_gpt55_autoraise": "no",
}

# Values the host rejects and replaces by its own default (each must still let an agent be built).
BAD_VALUES: Dict[str, Any] = {
    "threshold_tokens": "many",
    "min_tail_user_messages": True,
    "tail_mode": "wide",
    "proactive_prune_tokens": 1.5,
    "proactive_prune_min_result_chars": 12.5,
    "proactive_prune_min_reclaim_tokens": "lots",
    "model_thresholds": "fake=0.9",
    "micro_compact_every_n_turns": 0,
}


def compression_defaults() -> Dict[str, Any]:
    """The installed Hermes' own ``DEFAULT_CONFIG["compression"]``: the keys this line knows."""
    from hermes_cli.config import DEFAULT_CONFIG

    return dict(DEFAULT_CONFIG.get("compression") or {})


def unknown_keys() -> List[str]:
    """Compression keys of the installed line that :data:`NON_DEFAULT` has no value for."""
    return sorted(k for k in compression_defaults() if k not in NON_DEFAULT and k != "tail_mode")


def _non_default(key: str, default: Any) -> Any:
    if key == "tail_mode":                   # "legacy" on 0.20, "lean" on 0.22
        return "legacy" if str(default).strip().lower() == "lean" else "lean"
    return NON_DEFAULT[key]


class Case:
    """One config.yaml of the differential: ``overlay`` merged into the base config, and the model
    the agents are built with (``agent_model``; the config's ``model.default`` is ``config_model``)."""

    def __init__(self, id: str, overlay: Dict[str, Any], *, agent_model: str = MODEL,
                 config_model: Optional[str] = None):
        self.id, self.overlay = id, overlay
        self.agent_model = agent_model
        self.config_model = config_model or agent_model

    def __repr__(self) -> str:
        return f"Case({self.id!r})"


def cases() -> List[Case]:
    """The config.yaml files for the installed line: ``defaults``, one per compression key of its
    ``DEFAULT_CONFIG``, ``all-keys``, ``parsed-values``, ``bad-values``, and the other inputs of
    the built-in: custom_providers' window, model.max_tokens, the 0.22 tool-context floor, a model
    with a per-model threshold of the host's own (Arcee Trinity), and an agent whose model is not
    the config's default (what ``hermes -m`` does)."""
    defaults = compression_defaults()
    known = [k for k in defaults if k in NON_DEFAULT or k == "tail_mode"]
    out: List[Case] = [Case("defaults", {})]
    for key in known:
        out.append(Case(f"compression.{key}", {"compression": {key: _non_default(key, defaults[key])}}))
    out.append(Case("all-keys", {"compression": {k: _non_default(k, defaults[k]) for k in known}}))
    out.append(Case("parsed-values", {"compression": {k: v for k, v in PARSED_VALUES.items() if k in defaults}}))
    out.append(Case("bad-values", {"compression": {k: v for k, v in BAD_VALUES.items() if k in defaults}}))
    out.append(Case("cap-and-map-together", {"compression": {
        k: v for k, v in {"threshold_tokens": 40_000, "model_thresholds": {"fake-model": 0.95},
                          "threshold": 0.6}.items() if k in defaults}}))
    out.append(Case("custom-providers-window", {"model": {"context_length": None}, "custom_providers": [
        {"name": "fake-endpoint", "base_url": "{base_url}", "models": {MODEL: {"context_length": 96_000}}}]}))
    out.append(Case("model.max_tokens", {"model": {"max_tokens": 8192}}))
    out.append(Case("agent.minimum_tool_context_length", {"agent": {"minimum_tool_context_length": 32_000}}))
    out.append(Case("per-model-threshold-of-the-host", {}, agent_model=TRINITY))
    out.append(Case("agent-model-not-the-config-default", {"compression": {
        k: v for k, v in {"model_thresholds": {"trinity": 0.9}}.items() if k in defaults}},
        agent_model=TRINITY, config_model=MODEL))
    return out


def _merge(base: Dict[str, Any], overlay: Dict[str, Any]) -> Dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return {k: v for k, v in merged.items() if v is not None}


def _fill(value: Any, base_url: str) -> Any:
    if isinstance(value, str):
        return value.replace("{base_url}", base_url)
    if isinstance(value, list):
        return [_fill(v, base_url) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, base_url) for k, v in value.items()}
    return value


def config_yaml(case: Case, base_url: str, engine: str, route: str = "bundled") -> str:
    """The config.yaml of one side: the fake model on ``base_url``, ``context.engine: engine``
    (``observed`` with ``observed.inner: compressor``; on the entry-point route with
    ``plugins.enabled: [observed]``), and the overlay."""
    import yaml

    base: Dict[str, Any] = {
        "model": {"default": case.config_model, "provider": "custom", "base_url": base_url,
                  "context_length": CONTEXT_LENGTH},
        "context": {"engine": engine},
    }
    if engine == "observed":
        base["observed"] = {"inner": "compressor"}
        if route == "entrypoint":
            base["plugins"] = {"enabled": ["observed"]}
    return yaml.safe_dump(_merge(base, _fill(case.overlay, base_url)), sort_keys=False)


ROUTES = ("bundled", "entrypoint")


@contextlib.contextmanager
def parity_host(tmp_path: Path, monkeypatch, route: str = "bundled") -> Iterator[Path]:
    """A clean plugin host for the agents of one test: no stray provider keys, OTEL variables or
    safe mode, a fresh plugin manager, and a stand-in for Hermes' bundled
    ``plugins/context_engine/``: on the ``bundled`` route holding only observed-engine's plugin
    (what ``install --route bundled`` copies there), on the ``entrypoint`` route empty, with the
    ``observed`` entry point answered for this process (what ``install --route entrypoint``
    declares; Hermes' plugin system builds the engine once and copies it per agent, H35).
    observed-engine is shut down before and after."""
    import os

    import hermes_cli.plugins as hp

    import observed_engine
    import plugins.context_engine as pce

    for var in list(os.environ):
        if var.startswith("OTEL_") or var.endswith("_API_KEY"):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("HERMES_SAFE_MODE", raising=False)
    monkeypatch.setattr(hp, "_plugin_manager", None)
    engines = tmp_path / "context_engine"
    engines.mkdir()
    if route == "bundled":
        shutil.copytree(PLUGIN_SRC, engines / "observed")
    else:
        from support.entry_points import simulate_observed_entry_point

        simulate_observed_entry_point(monkeypatch.setattr)
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", engines)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    observed_engine.shutdown(5)
    try:
        yield tmp_path
    finally:
        observed_engine.shutdown(5)
        for name in [n for n in sys.modules if n.startswith("plugins.context_engine.") and n not in before]:
            sys.modules.pop(name, None)


def build_agent(home: Path, base_url: str, monkeypatch, model: str = MODEL):
    """A real AIAgent in ``home`` (its config.yaml written), as the version checks build theirs."""
    import hermes_cli.plugins as hp
    from run_agent import AIAgent

    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setattr(hp, "_plugin_manager", None)
    return AIAgent(base_url=base_url, api_key="sk-fake", provider="custom", model=model,
                   quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                   max_iterations=4, save_trajectories=False, session_id=SESSION_ID)


def agent_pair(root: Path, case: Case, base_url: str, monkeypatch, route: str = "bundled"):
    """``(bare agent, observed agent)`` for one case, each in a home of its own."""
    agents = []
    for engine in ("compressor", "observed"):
        home = root / f"home-{engine}"
        home.mkdir()
        (home / "config.yaml").write_text(config_yaml(case, base_url, engine, route), encoding="utf-8")
        agents.append(build_agent(home, base_url, monkeypatch, case.agent_model))
    return tuple(agents)


_PLAIN = (str, int, float, bool, bytes, type(None))


def render(value: Any, _depth: int = 0) -> Any:
    """A comparable rendering of one field: plain data as it is (with its exact type: True is not
    1, 1 is not 1.0), containers element by element, and every other object (locks, clients,
    session stores, callables) by its type alone: those are per-object things, equal when they
    are of one kind."""
    if _depth > 8:
        return ("deep", type(value).__qualname__)
    if isinstance(value, _PLAIN):
        return (type(value).__name__, value)
    if isinstance(value, dict):
        return ("dict", {repr(k): render(v, _depth + 1) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [render(v, _depth + 1) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(map(repr, value)))
    return ("object", f"{type(value).__module__}.{type(value).__qualname__}")


def lazy_properties(engine) -> List[str]:
    """The properties of the engine's class (its MRO, the ABC's and ``name`` aside): on 0.20+ the
    built-in's ``context_length``, ``threshold_tokens``, ``tail_token_budget`` and
    ``max_summary_tokens`` are caches filled on first read (``_resolved_context_length``,
    ``_threshold_tokens``, ...)."""
    import inspect

    names = set()
    for klass in type(engine).__mro__:
        for attr, value in vars(klass).items():
            if isinstance(value, property) and attr != "name":
                names.add(attr)
    return sorted(n for n in names if isinstance(inspect.getattr_static(engine, n, None), property))


def settle(engine) -> Dict[str, Any]:
    """Read every lazy property once, as the host's first reads would, and return what they say.

    The host treats a plugin engine differently from its own compressor in one way the state
    shows: right after selecting it, it calls ``update_model()`` on it (host-contract H39), which
    fills those caches, where the bare compressor fills them on its first read. Reading them on
    both sides compares what the host will read, not when it was computed."""
    values = {}
    for name in lazy_properties(engine):
        try:
            values[name] = render(getattr(engine, name))
        except Exception as exc:               # the same exception on both sides is the same state
            values[name] = ("raises", type(exc).__name__)
    return values


def state(engine) -> Dict[str, Any]:
    """The engine's whole instance state (``vars()``), rendered, after :func:`settle`."""
    settle(engine)
    return {name: render(value) for name, value in vars(engine).items()}


def _class_value(engine, name: str) -> Any:
    """What reading ``name`` gives where the instance does not hold it: a plain class attribute
    (the ABC's ``last_total_tokens = 0``), rendered; ``<absent>`` for anything else."""
    import inspect

    try:
        value = inspect.getattr_static(type(engine), name)
    except AttributeError:
        return "<absent>"
    if hasattr(value, "__get__") or callable(value):
        return "<absent>"
    return render(value)


def differences(bare, observed) -> List[str]:
    """Every field on which the two compressors differ, one line each (empty: the same state).

    A field one instance holds and the other leaves to a plain class attribute of the same value
    is the same state: ``update_model()``, which the host calls only on a plugin engine, assigns
    ``last_total_tokens = 0`` where the bare constructor leaves the ABC's class-level 0."""
    a, b = state(bare), state(observed)
    lines = []
    for name, value in sorted(settle(bare).items()):
        other = settle(observed).get(name, "<absent>")
        if value != other:
            lines.append(f"{name} (property): bare {_show(value)} != observed {_show(other)}")
    for name in sorted(set(a) | set(b)):
        left = a[name] if name in a else _class_value(bare, name)
        right = b[name] if name in b else _class_value(observed, name)
        if left != right:
            lines.append(f"{name}: bare {_show(left)} != observed {_show(right)}")
    return lines


def _show(rendered: Any) -> str:
    text = repr(rendered)
    return text if len(text) <= 240 else text[:240] + "..."


# The fields the host itself may leave different on a plugin engine, and only through the
# update_model() it calls on one right after selecting it (host-contract H40): 0.20.1.2's
# update_model() sets the tail budget by the legacy formula (threshold x target ratio) whatever
# tail_mode says, where the bare built-in in lean mode keeps its clamped lean budget until its own
# first update_model() (a model switch, a fallback). 0.22's update_model() recomputes it lean-aware.
HOST_MADE_FIELDS = frozenset({"_tail_token_budget", "tail_token_budget (property)"})


def host_update_model(agent) -> None:
    """The call the host makes on a plugin engine right after selecting it (every line):
    ``update_model(model=, context_length=, base_url=, api_key=, provider=, api_mode=)`` with the
    agent's runtime and the window it resolved for it."""
    engine = agent.context_compressor
    engine.update_model(model=agent.model, context_length=engine.context_length, base_url=agent.base_url,
                        api_key=getattr(agent, "api_key", ""), provider=agent.provider, api_mode=agent.api_mode)


def _field(line: str) -> str:
    return line.split(": bare ", 1)[0]


def assert_same_builtin(bare_agent, observed_agent, case: Case, version: Optional[str] = None,
                        twin=None) -> Optional[List[str]]:
    """The observed agent's engine is observed, wraps the built-in, and its state is the bare one's.

    A difference only in :data:`HOST_MADE_FIELDS` passes only when the host's own call explains
    it: ``twin()`` (another bare agent for the same config) given :func:`host_update_model` has
    exactly the observed state. Returns those differences (None when there are none)."""
    from agent.context_compressor import ContextCompressor

    from observed_engine import is_observed

    bare, observed = bare_agent.context_compressor, observed_agent.context_compressor
    assert not is_observed(bare) and type(bare) is ContextCompressor
    assert is_observed(observed) and isinstance(observed, ContextCompressor), type(observed)
    assert observed.name == "observed"
    diff = differences(bare, observed)
    where = f"Hermes {version}, " if version else ""
    message = (f"{where}config {case.id}: the observed inner compressor differs from the bare one "
               f"in {len(diff)} field(s):\n  " + "\n  ".join(diff))
    if not diff:
        return None
    assert twin is not None and {_field(line) for line in diff} <= HOST_MADE_FIELDS, message
    explained = twin()
    host_update_model(explained)
    rest = differences(explained.context_compressor, observed)
    assert not rest, (message + "\nand the host's own update_model() on a bare twin does not explain it:\n  "
                      + "\n  ".join(rest))
    return diff


def skip_where_the_route_cannot_know(case: Case, route: str) -> None:
    """On the entry-point route Hermes' plugin system builds the engine once, at its plugin scan
    (0.20: inside the first agent's init before it reads config.yaml; 0.22: on its plugin-loader
    thread, no agent on the stack), and every agent gets a copy (H35): what the agent alone
    decides and ``update_model()`` does not reset (the window kept by an agent whose model is not
    the config's default, the threshold raised for its model) cannot be that agent's. Those cases
    run on the directory route only (host-contract H41)."""
    import pytest

    if route == "entrypoint" and case.agent_model != case.config_model:
        pytest.skip("the entry-point route builds one engine per process, before the agent's own "
                    "runtime is known (host-contract H41); checked on the directory route")
