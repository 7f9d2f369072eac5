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

from .engine import (  # noqa: F401
    context_engine_abc, overrides_abc_default, compressor_module, context_compressor_class,
    compressor_arguments, compressor_defaults, compressor_resolves_window_lazily,
)
from .building import (  # noqa: F401
    building_agent, building_agent_quiet_mode, agent_compressor_inputs,
    agent_init_reads_model_max_tokens,
)
from .compression import (  # noqa: F401
    MAX_COMPRESS_TIMEOUT, compression_threshold, legacy_flag, host_compression_settings,
    compressor_max_tokens, custom_providers, custom_provider_context_length,
    minimum_tool_context_length, host_compress_timeout,
)
from .home import (  # noqa: F401
    truthy, hermes_home, default_store_path, load_config, untouched_home, read_config,
    config_defaults,
)
from .installation import (  # noqa: F401
    DISTRIBUTIONS, HermesInstallation, hermes_installation, hermes_version, hermes_import_problem,
)
from .loaders import (  # noqa: F401
    ENTRY_POINTS_GROUP, bundled_engines_dir, supports_user_engines, directory_engine_names,
    entry_points, load_directory_engine, plugin_system_engine, reset_plugin_discovery,
    engine_manifest,
)
from .selection import (  # noqa: F401
    SAFE_MODE_ENV, plugin_gates, _honours_safe_mode, plugin_gate, simulate_selection,
)
from .agent_loop import (  # noqa: F401
    ai_agent_class, minimum_context_length, add_request_observer,
)
from .replay import (  # noqa: F401
    compaction_summary_body, session_db, AGENT_INLINE_TOOLS, replay_tool_results,
    configured_toolsets, tool_definitions, use_tool_schemas,
)
