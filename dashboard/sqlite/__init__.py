"""The parts of the store source; ``sqlite_source.SQLiteSource`` puts them together.

``reader`` (read-only connections, one snapshot per page run, the engine and hook lists),
``buckets`` (the incremental per-bucket cache), ``percentiles`` (exact or stratified-sample
latency percentiles), and one module of SQL per view: ``usage`` (sessions, the sawtooth,
message text), ``compressions``, ``selections``, ``latency``, ``incidents``, ``alerts``
(derived from the store, severities from ``observed_engine.contract.vocabulary``).
"""
