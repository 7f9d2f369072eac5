"""The installed Hermes, looked up in one place: the only package that imports Hermes.

An import-linter contract checks that, so the core runs, and is tested, without Hermes; what the
host does is written down once (docs/design/host-contract.md). One concept per module (engine,
building, compression, home, installation, loaders, selection, agent_loop, replay). When
editing: every function tolerates a missing or older Hermes (None / {} / a default, never a
raise unless its docstring says so); callers use ``host.<name>`` and tests patch the names here.

The full account: docs/design/internals.md, *observed_engine/host/__init__.py*.
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
    config_module,
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
