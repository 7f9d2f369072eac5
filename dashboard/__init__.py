"""The observed-engine Streamlit dashboard (``streamlit run dashboard/app.py``)."""
