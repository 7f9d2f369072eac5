"""The contract every side imports: stdlib only.

``hooks`` (which hooks are traced and how the host treats each), ``catalogue`` (every
metric), ``vocabulary`` (outcomes, event kinds, reasons, alerts and severities),
``spans`` (span names and attribute keys), ``store_schema`` (the SQLite schema),
``events`` (the record the hook path hands to the worker, and the snapshot formats),
``promql`` (the query shapes of the dashboard and the Grafana board).

The public names here are also the project's published interface
(docs/design/telemetry-contract.md): add freely, rename nothing without a migration note.
"""
