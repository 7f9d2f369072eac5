"""``observed-engine demo``: real Hermes agents through the observed engine, and the live dashboard.

Runs several concurrent sessions of Hermes' own agent loop (``run_agent.AIAgent.run_conversation``,
the code a gateway runs) against the demo's own fake LLM, an OpenAI-compatible server on
127.0.0.1 (``DemoLLM``): nothing leaves the machine. The agents run in a private Hermes home
next to the store whose config.yaml selects ``context.engine: observed`` through Hermes' plugin
system, so what the store shows is what Hermes does: the host's preflight checks, its
``last_prompt_tokens = -1`` write after a compaction, the real ``compress_context``, and the
built-in compressor's cooldown after its summariser fails. Two engines:

* ``compressor`` -- Hermes' built-in ``ContextCompressor``, wrapped by the plugin;
* ``topic-router`` -- the built-in under another name plus ``select_context`` (per-request
  retrieval by topic), set on every third agent the way the host sets a plugin engine. Hermes
  0.19.0 never calls ``select_context``: the demo calls it from Hermes' ``pre_api_request`` hook,
  before every provider request, as head Hermes does (the result is not applied).

The fake LLM reports prompt-cache reads, and every few summaries one is slow enough to pass the
compression deadline or fails (HTTP 401, then a dropped connection); now and then the router
returns garbage from ``select_context`` (the host falls open). All of it lands in the SQLite
store that the dashboard, served on 127.0.0.1 while the traffic runs, reads; the address is
printed once the dashboard answers there (a taken default port gives way to the next free one).

The demo writes only inside a directory of its own (``--dir``; default ``$OBSERVED_DEMO_DIR``,
else ``~/.local/state/observed-engine/demo``): the store ``demo.sqlite``, the agents' Hermes
home ``demo-hermes-home/`` (set as ``HERMES_HOME`` before Hermes is imported, since Hermes'
modules create their home's files at import), tiktoken's cache, the dashboard's log. Wrong
arguments are one line on stderr and exit 2, before anything is created.

The package: ``run`` (main), ``arguments`` and ``errors``, ``llm`` (the fake LLM), ``home`` (the
private Hermes home), ``traffic`` (the agents), ``engines`` (the router and the offline engines),
``dashboard`` (its command line and port). The names below are its surface.
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
