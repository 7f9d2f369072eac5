"""observed-engine dashboard: ``observed-engine dashboard`` runs it on 127.0.0.1:8501; by hand,
``streamlit run app.py --server.address 127.0.0.1`` (``.streamlit/config.toml`` here binds
127.0.0.1 too).

Source from the environment; flags after ``--`` override it and pin it:
  OBSERVED_STORE=<path>            the SQLite store (default: the current Hermes home's store)
  OBSERVED_PROMETHEUS_URL=<url>    a Prometheus scraping the engine (http://127.0.0.1:9090)
  OBSERVED_REFRESH_SECONDS=<s>     live refresh interval (default 5)
  streamlit run app.py --server.address 127.0.0.1 -- --store PATH | --prometheus URL [--refresh S] [--allow-source-change]

Started with ``--store`` or ``--prometheus``, the sidebar shows the source read-only unless
``--allow-source-change`` (or OBSERVED_ALLOW_SOURCE_CHANGE=1) was given. Read-only: the store
is opened with mode=ro and PRAGMA query_only.

Streamlit runs this file by path, so it imports the dashboard as the installed package
``observed_engine.dashboard`` (the same code from a wheel and from a checkout).
"""

from observed_engine.dashboard.page import main

main()
