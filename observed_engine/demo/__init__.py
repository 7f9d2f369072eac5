"""``observed-engine demo``: real Hermes agents through the observed engine, and the live dashboard.

Concurrent sessions of Hermes' own agent loop against the demo's fake LLM on 127.0.0.1
(``DemoLLM``), in a private Hermes home selecting ``context.engine: observed``, so the store shows
what Hermes does. When editing: the demo writes only inside its own directory (``--dir``), sets
``HERMES_HOME`` before Hermes is imported, and rejects wrong arguments (exit 2) before creating
anything. The package: ``run``, ``arguments``, ``errors``, ``llm``, ``home``, ``traffic``,
``engines``, ``dashboard``; the names below are its surface.

The full account: docs/design/internals.md, *observed_engine/demo/__init__.py*.
"""

import subprocess  # noqa: F401  (tests patch demo.subprocess.Popen)

from .arguments import build_parser, check_arguments, demo_paths  # noqa: F401
from .dashboard import (  # noqa: F401
    DASHBOARD_APP,
    DASHBOARD_EXTRA,
    DEFAULT_DASHBOARD_PORT,
    choose_dashboard_port,
    dashboard_command,
    health,
    listens,
    port_in_use,
    start_dashboard,
    streamlit_installed,
    wait_until_serving,
)
from .engines import TOPICS, WORDS, OfflineSummariser, build_engines, make_topic_router, make_trimming_router  # noqa: F401
from .errors import DemoArgumentError  # noqa: F401
from .home import private_environment, write_demo_home  # noqa: F401
from .llm import CHAT_MODEL, SUMMARY_MARKER, SUMMARY_MODEL, SUMMARY_TEXT, DemoLLM  # noqa: F401
from .run import main  # noqa: F401
from .traffic import Traffic  # noqa: F401
