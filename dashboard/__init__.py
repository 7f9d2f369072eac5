"""The observed-engine Streamlit dashboard, shipped as ``observed_engine.dashboard``.

``app.py`` is the Streamlit script (``observed-engine dashboard``, or
``streamlit run <this directory>/app.py --server.address 127.0.0.1``); everything else is
imported relatively.
"""
