"""What ``compare`` and ``tune`` replay through the host: its session store, the built-in's
summary format, recorded tool results answered in place of the tools, toolsets and schemas."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

logger = logging.getLogger(__name__)


def compaction_summary_body(content: Any) -> Optional[str]:
    """The body of a built-in compaction summary message (``content`` as Hermes stores it),
    without the handoff prefix and end marker, as the summariser returned it; None for any
    other message, or without Hermes."""
    try:
        from agent.context_compressor import ContextCompressor as cc
    except Exception:  # no Hermes: no summary format to recognise (None)
        return None
    if not isinstance(content, str):
        return None
    try:
        if not cc._is_context_summary_content(content):
            return None
        return cc._strip_summary_prefix(content)
    except Exception:  # a Hermes without these private helpers, or they raised: not a summary
        return None


def config_module():
    """Hermes' ``hermes_cli.config`` module, whose ``load_config()`` copies its cached config on each
    call (the sweep gives it a faster copy: compare/config_copy.py); None without Hermes."""
    try:
        from hermes_cli import config
    except ImportError:
        return None
    return config


def session_db(path: os.PathLike | str):
    """Hermes' ``hermes_state.SessionDB`` on ``path`` (raises ImportError without Hermes)."""
    from hermes_state import SessionDB

    return SessionDB(Path(path))


# Tools the 0.19.0 agent runs itself (agent/tool_executor.py), never through
# handle_function_call / _invoke_tool: a replay cannot answer them with the recorded result.
AGENT_INLINE_TOOLS = frozenset({"todo", "session_search", "memory", "clarify", "read_terminal",
                                "delegate_task", "skill_manage"})


def replay_tool_results(agent: Any, results: Mapping[str, Any], names) -> Any:
    """A context manager: while it is open, ``agent`` answers every tool call with the recorded
    result for its ``tool_call_id`` (``results``) instead of running the tool. The tool names
    in ``names`` are offered to the model (a minimal schema each) and accepted as valid; file
    checkpoints before terminal calls are off. Covers both dispatch paths: the sequential one
    (``run_agent.handle_function_call`` up to 0.20, ``model_tools.handle_function_call`` on
    0.22) and the concurrent one (``agent._invoke_tool``). Raises ImportError without Hermes."""
    import contextlib
    import json as _json

    import run_agent

    def answer(function_name, function_args=None, *args, tool_call_id=None, **kwargs):  # noqa: ARG001
        if tool_call_id in results:
            content = results[tool_call_id]
            return content if isinstance(content, str) else _json.dumps(content)
        return _json.dumps({"error": f"replay: no recorded result for {function_name} call {tool_call_id}"})

    def invoke(function_name, function_args, effective_task_id, tool_call_id=None, *args, **kwargs):  # noqa: ARG001
        return answer(function_name, function_args, tool_call_id=tool_call_id)

    @contextlib.contextmanager
    def _cm():
        tools = agent.tools if isinstance(getattr(agent, "tools", None), list) else []
        agent.tools = tools
        present = {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}
        for name in sorted(set(names) - present):
            tools.append({"type": "function", "function": {
                "name": name, "description": f"{name} (replayed: answers with the recorded result)",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": True}}})
            agent.valid_tool_names.add(name)
        checkpoints = getattr(agent, "_checkpoint_mgr", None)
        if checkpoints is not None and hasattr(checkpoints, "enabled"):
            checkpoints.enabled = False
        # The dispatcher the host calls: run_agent's own name up to 0.20, model_tools' on 0.22
        # (run_agent no longer imports it): each that is there answers with the record.
        import model_tools

        dispatchers = [m for m in (run_agent, model_tools) if hasattr(m, "handle_function_call")]
        before = [(m, m.handle_function_call) for m in dispatchers]
        for m in dispatchers:
            m.handle_function_call = answer
        agent._invoke_tool = invoke
        try:
            yield
        finally:
            for m, fn in before:
                m.handle_function_call = fn
            agent.__dict__.pop("_invoke_tool", None)

    return _cm()


def configured_toolsets(config: Mapping[str, Any], platform: str) -> Dict[str, Any]:
    """The toolsets an agent of ``platform`` ("cli", "telegram", ...) gets from ``config``,
    resolved as Hermes' own prompt-size diagnostic does (``_get_platform_tools``, the
    ``agent.disabled_toolsets``), without MCP servers (connecting them would start their
    processes): ``{"enabled": [...], "disabled": [...]}``. Raises ImportError without Hermes."""
    from hermes_cli.tools_config import _get_platform_tools

    enabled = sorted(_get_platform_tools(dict(config), platform or "cli", include_default_mcp_servers=False))
    agent_cfg = config.get("agent") if isinstance(config.get("agent"), dict) else {}
    disabled = [str(t) for t in (agent_cfg.get("disabled_toolsets") or [])]
    return {"enabled": enabled, "disabled": disabled}


def tool_definitions(toolsets: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The tool schemas an agent with these toolsets sends (``model_tools.get_tool_definitions``),
    computed in this process: some schemas name paths of the current HERMES_HOME and depend on
    this environment's keys and binaries, as they do for the operator's own agents."""
    from model_tools import get_tool_definitions

    tools = get_tool_definitions(enabled_toolsets=list(toolsets.get("enabled") or []),
                                 disabled_toolsets=list(toolsets.get("disabled") or []) or None, quiet_mode=True)
    return [dict(t) for t in tools or []]


def use_tool_schemas(agent: Any, schemas: List[Dict[str, Any]]) -> None:
    """Give ``agent`` these tool schemas (computed elsewhere by :func:`tool_definitions`) in
    place of those it built, keeping the context engine's own tools after them, as the host
    orders them at init."""
    engine_tools = set(getattr(agent, "_context_engine_tool_names", None) or ())
    own = [t for t in (agent.tools or []) if isinstance(t, dict)
           and t.get("function", {}).get("name") in engine_tools]
    tools = [dict(s) for s in schemas] + own
    agent.tools = tools
    agent.valid_tool_names = {t.get("function", {}).get("name") for t in tools if t.get("function", {}).get("name")}


def _under(path: Any, top: Path) -> bool:
    try:
        return Path(str(path)).resolve().is_relative_to(top)
    except (OSError, ValueError, TypeError):
        return False


@contextlib.contextmanager
def replay_logs(home: os.PathLike | str):
    """While open, the agent's file logs go to ``home/logs`` (Hermes' ``setup_logging``
    reads the home ``run_agent`` fixed at its import, up to 0.20: without this, every replay
    after the first logs into the first replay's home, deleted by then, or into the operator's
    real home when Hermes was imported before); on exit the log handlers opened under ``home``
    are drained, detached and closed, so none outlives the replay home and nothing is written
    outside it. Hermes' three ways are covered: handlers on the root logger (0.16, 0.17),
    file handlers behind its log queue (0.18 on), and on 0.22, when the process already logs
    for another home, the per-home files its routers hold (released through Hermes' own
    ``release_profile_log_handlers``). Fails open without Hermes."""
    top = Path(home).resolve()
    try:
        import run_agent
    except Exception:  # no Hermes, or run_agent fails to import: no home to redirect (fails open)
        run_agent = None
    had = run_agent is not None and hasattr(run_agent, "_hermes_home")
    before = getattr(run_agent, "_hermes_home", None)
    if had:
        run_agent._hermes_home = Path(home)
    try:
        yield
    finally:
        if had:
            run_agent._hermes_home = before
        _close_logs_under(top)


def _close_logs_under(top: Path) -> None:
    closed: List[logging.Handler] = []
    root = logging.getLogger()
    for handler in list(root.handlers):
        if _under(getattr(handler, "baseFilename", None), top):
            root.removeHandler(handler)
            closed.append(handler)
    try:
        import hermes_logging as hl
    except Exception:  # no Hermes or no hermes_logging: only the root logger's handlers are closed
        hl = None
    queued = getattr(hl, "_queued_file_handlers", None)
    lock = getattr(hl, "_queue_state_lock", None)
    if isinstance(queued, list) and lock is not None:
        try:
            with lock:
                mine = [h for h in queued if _under(getattr(h, "baseFilename", None), top)]
                if mine:
                    listener = getattr(hl, "_queue_listener", None)
                    if listener is not None:
                        listener.stop()          # writes what is queued, to every handler
                    queued[:] = [h for h in queued if h not in mine]
                    if listener is not None and getattr(hl, "_log_queue", None) is not None:
                        from logging.handlers import QueueListener

                        hl._queue_listener = QueueListener(hl._log_queue, *queued, respect_handler_level=True)
                        hl._queue_listener.start()
                    closed.extend(mine)
        except Exception as exc:   # Hermes' log queue changed shape: its handlers stay as they are
            logger.warning("replay: could not detach Hermes' log handlers under %s: %s", top, exc)
    release = getattr(hl, "release_profile_log_handlers", None)
    if callable(release):    # 0.22: a second home in one process is routed, its files held by the router
        try:
            release(top)
        except Exception as exc:
            logger.warning("replay: could not release Hermes' routed log files under %s: %s", top, exc)
    for handler in closed:
        try:
            handler.close()
        except Exception as exc:   # a handler that cannot close: its file goes with the replay home
            logger.debug("replay: closing log handler %r: %s", handler, exc)
