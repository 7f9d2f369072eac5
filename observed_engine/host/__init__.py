"""The installed Hermes, looked up in one place: the only package that imports Hermes (an
import-linter contract checks it), so the core runs, and is tested, without it; what the host
does is written down once (docs/design/host-contract.md). One concept per module:

- ``engine``: the ``ContextEngine`` ABC, the overrides test, the built-in ``ContextCompressor``;
- ``building``: the agent being built and what the host hands its own compressor from it;
- ``compression``: ``compression.*`` read the host's way, the compress timeout;
- ``home``: HERMES_HOME, config.yaml, ``untouched_home``;
- ``installation``: which Hermes this Python runs;
- ``loaders``: where the host finds engines, its loaders;
- ``selection``: the plugin gates and a dry run of the engine selection;
- ``agent_loop``: ``AIAgent`` and its request hook (the demo);
- ``replay``: the session store and tool replay (``compare``, ``tune``).

Every function tolerates a missing or older Hermes: it returns None / {} / a default and never
raises, unless its docstring says otherwise. Callers use ``host.<name>``: the names below are
the package's surface (tests patch them here).
"""

from .agent_loop import (  # noqa: F401
    add_request_observer,
    ai_agent_class,
    minimum_context_length,
    tool_delay_kwargs,
)
from .building import (  # noqa: F401
    agent_compressor_inputs,
    agent_init_reads_model_max_tokens,
    building_agent,
    building_agent_quiet_mode,
)
from .compression import (  # noqa: F401
    MAX_COMPRESS_TIMEOUT,
    compression_threshold,
    compressor_max_tokens,
    custom_provider_context_length,
    custom_providers,
    host_compress_timeout,
    host_compression_settings,
    legacy_flag,
    minimum_tool_context_length,
)
from .engine import (  # noqa: F401
    compressor_arguments,
    compressor_defaults,
    compressor_module,
    compressor_resolves_window_lazily,
    context_compressor_class,
    context_engine_abc,
    overrides_abc_default,
)
from .home import (  # noqa: F401
    config_defaults,
    default_store_path,
    hermes_home,
    load_config,
    read_config,
    truthy,
    untouched_home,
)
from .installation import (  # noqa: F401
    DISTRIBUTIONS,
    HermesInstallation,
    hermes_import_problem,
    hermes_installation,
    hermes_version,
)
from .loaders import (  # noqa: F401
    ENTRY_POINTS_GROUP,
    bundled_engines_dir,
    directory_engine_names,
    engine_manifest,
    entry_points,
    load_directory_engine,
    plugin_system_engine,
    reset_plugin_discovery,
    supports_user_engines,
)
from .replay import (  # noqa: F401
    AGENT_INLINE_TOOLS,
    compaction_summary_body,
    configured_toolsets,
    replay_logs,
    replay_tool_results,
    session_db,
    tool_definitions,
    use_tool_schemas,
)
from .selection import (  # noqa: F401
    SAFE_MODE_ENV,
    _honours_safe_mode,
    plugin_gate,
    plugin_gates,
    simulate_selection,
)
