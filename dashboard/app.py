"""observed-engine dashboard: ``observed-engine dashboard`` runs it on 127.0.0.1:8501; by hand,
``streamlit run app.py --server.address 127.0.0.1``.

The source comes from ``OBSERVED_STORE`` / ``OBSERVED_PROMETHEUS_URL`` (flags after ``--``
override and pin it); the store is opened read-only. When editing: Streamlit runs this file by
path, so it imports the dashboard as the installed package ``observed_engine.dashboard`` (the
same code from a wheel and from a checkout).

The full account: docs/design/internals.md, *dashboard/app.py*.
"""

from observed_engine.dashboard.page import main

main()
