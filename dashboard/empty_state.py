"""The page without data: how to turn the engine on, or why the source cannot be read."""

from __future__ import annotations

import os

import streamlit as st

from observed_engine.contract.store_schema import demo_store_path

from .format import literal
from .options import PROMETHEUS
from .sources import Source, Status


def render_empty_state(src: Source, status: Status, refresh: float, *, typed: bool = False) -> None:
    """``typed``: the source is one the viewer typed into the sidebar, not the configured one;
    its failure says only that it cannot be opened (no hint whether the file exists)."""
    home = os.environ.get("HERMES_HOME", "~/.hermes")
    config = literal(home + "/config.yaml")
    demo = literal(demo_store_path())
    label = literal(src.label)
    if src.kind == PROMETHEUS:
        if status.state == "error":
            st.error(f"Cannot reach Prometheus at {label}: {literal(status.message)}")
        st.markdown(
            f"""
### No observed-engine metrics in Prometheus yet

Prometheus at {label} has no `hermes_context_*` series. To feed it:

1. Turn the engine on in {config} (`$HERMES_HOME/config.yaml`):
   ```yaml
   context:
     engine: observed
   observed:
     prometheus: {{enabled: true, host: 127.0.0.1, port: 9464}}
   ```
2. Install it into your Hermes home: `observed-engine install`
3. Add a scrape job for `127.0.0.1:9464` to `prometheus.yml` (and the alert rules from `deploy/`).
4. No live agent at hand? `observed-engine demo` runs real Hermes agents against a local fake LLM
   through the engine; it writes the SQLite store {demo}, not Prometheus (`--prometheus-port 9464`
   serves its `/metrics` too).

This page checks again every {refresh:g} s. Per-session views need the SQLite store
(`OBSERVED_STORE=/path/to/telemetry.sqlite`).
""")
        return
    if typed and status.state != "empty":
        st.error("Cannot open the store at that path.")
        return
    if status.state == "error":
        st.error(f"The store cannot be read: {literal(status.message)}")
        return
    title = ("No telemetry store yet" if status.state == "missing"
             else "The telemetry store is empty")
    where = ("does not exist yet" if status.state == "missing" else "exists but holds no events yet")
    st.markdown(
        f"""
### {title}

The dashboard reads {label}, which {where}. The observed engine creates it the first time
Hermes calls its context engine. To start recording:

1. **Enable the engine** in {config} (`$HERMES_HOME/config.yaml`):
   ```yaml
   context:
     engine: observed
   ```
2. **Install it** into your Hermes home: `observed-engine install`
3. **See it work without a live agent:** `observed-engine demo` (or `bash scripts/demo.sh`) runs
   real Hermes agents against a local fake LLM through the engine. It writes its own store,
   {demo}, and serves its own dashboard on it (http://127.0.0.1:8501, or the next free port: it
   prints the address); to read that store here, start this dashboard with `--store` {demo}
   (or set `OBSERVED_STORE`).
4. Run a Hermes turn. This page checks again every {refresh:g} s and fills in by itself.

Reading another store? Set `OBSERVED_STORE=/path/to/telemetry.sqlite` (or pick it in the sidebar).
Already scraping the engine's `/metrics`? Set `OBSERVED_PROMETHEUS_URL=http://127.0.0.1:9090`.
The dashboard only reads: it never writes the store.
""")
