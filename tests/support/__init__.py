"""The tests' helpers, one module per family (the fixtures are in conftest.py):

* engines.py -- every test engine (scripted, wild-shaped, head-shaped, ledger), transcripts, CANARY;
* host.py -- a 0.19.0 host driving an engine; twins.py -- bare engine vs observed twin;
* builtin.py -- the built-in ContextCompressor offline; llm.py -- its one LLM call faked (FakeLLM);
* otel.py -- in-memory providers (Providers) and exact metric reads;
* servers.py -- free ports, dead endpoints, /metrics scrapes, real Prometheus / Alertmanager, a webhook;
* deploy.py -- the shipped deploy/ files; logs.py -- observed-engine's log records;
* entry_points.py -- real hermes_agent.plugins entry-point plugins (a module and a dist-info on sys.path);
* store_rows.py -- reading the store; latency.py, real_feeds.py, store_writer_proc.py -- as they say.
"""
