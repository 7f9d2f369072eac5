"""The embedded store's schema: one SQLite file, no server (the writer is ``observed_engine.store``).

One row per hook call or event, written in batches by a background thread
(WAL mode, bounded queue, retention by age). Several Hermes processes may write
the same file: each batch is one short transaction and SQLite's busy timeout
serialises writers. The dashboard reads the same file (read-only).

Schema (documented in docs/store-schema.md, version in ``meta``):

``events``
  ts              REAL     epoch seconds at the end of the call / the event
  host            TEXT     hostname of the writing process
  pid             INTEGER  process id of the writing process
  session         TEXT     Hermes session id when known (never a metric label)
  engine          TEXT     the inner engine's name
  hook            TEXT     hook name (compress, should_compress, select_context, ...)
  event           TEXT     'call' for a hook call; 'deadline_exceeded', 'late_completion',
                           'host_reported' (timeouts); 'fail_open'; 'bad_input';
                           'summary_failure' (compress returned after its summary model failed);
                           'compression_blocked' (automatic compression blocked: started / ended)
  outcome         TEXT     'ok' / 'error' for calls; compress: 'compressed' / 'noop' / 'error';
                           select_context: 'unchanged' / 'same_selection' / 'changed_selection' / 'fail_open';
                           summary_failure: 'fallback_summary' / 'aborted'
  reason          TEXT     fail-open reason, timeout failure kind, exception type, bad-input kind,
                           summary failure cause ('auth' / 'network' / 'other')
  duration_s      REAL     call duration (late_completion: the whole call)
  prompt_tokens   INTEGER  engine.last_prompt_tokens after the call (-1 sentinel stored as 0)
  threshold_tokens INTEGER engine.threshold_tokens after the call
  window_tokens   INTEGER  engine.context_length after the call
  tokens_before / tokens_after / messages_before / messages_after  INTEGER (compress, select_context)
  cache_lost_tokens INTEGER prompt-cache prefix tokens a changed selection invalidated
  input_tokens / output_tokens / cache_read_tokens / cache_write_tokens / reasoning_tokens INTEGER
                           usage passed to update_from_response
  cache_rewrite_tokens INTEGER first update_from_response after a compaction: prompt tokens written
                           into the provider's cache again (cache_write where reported, else
                           prompt - cache_read)
  checked_tokens  INTEGER  should_compress / should_compress_preflight / should_compress_info /
                           should_defer_preflight_to_real_usage: the tokens the engine was asked about
                           (the argument, or engine.last_prompt_tokens when called without one);
                           threshold_tokens holds the threshold at that moment
  decision        TEXT     those hooks' answer: 'compress' / 'skip' (should_compress*), 'defer' /
                           'estimate' (should_defer_preflight_to_real_usage); reason: the engine's
                           reason where it gives one, else 'below_threshold' / 'at_or_above_threshold',
                           or the blocked reason ('summary_cooldown', ...) of a skip at/above it
  summary_model   TEXT     compress: the summary model (Hermes' usage record of the call where there is
                           one, else the engine's summary_model, else its main model)
  summary_provider TEXT    compress: the summary model's provider where known
  summary_input_tokens / summary_output_tokens INTEGER compress: the summary model's usage, where
                           observable (Hermes' auxiliary usage record, task 'compression')
  event 'compression_blocked': outcome 'started' / 'ended', reason the blocked reason
                           ('summary_cooldown', 'ineffective_compression', 'fallback_streak',
                           'attempts_exhausted', 'other'); ts when the block began / ended
  pruned_results  INTEGER  prune_tool_results_only (Hermes 0.20+): the tool results the engine says it
                           pruned; outcome 'pruned' (the host goes on with the new list) / 'noop' /
                           'uncommitted' (a count, but the input list came back: the host keeps it) /
                           'fail_open' (not a (list, n) pair) / 'error'; messages_before/after and
                           tokens_before/after as for compress (after = before unless pruned);
                           checked_tokens the current_tokens the host passed
  api_calls       INTEGER  on_turn_complete (Hermes 0.20+): the turn's provider calls (api_call_count);
                           outcome 'completed' / 'interrupted' / 'failed', reason the host's
                           turn_exit_reason word without its detail ('text_response', ...; 'unspecified'
                           when none), input_tokens ... reasoning_tokens the usage the host passed (its
                           last response's, also counted by update_from_response), messages_after /
                           tokens_after the finished transcript
  clone_for_agent rows (Hermes 0.22+): outcome 'observed' (a new engine on the same pipeline) /
                           'same_engine' / 'unobserved' / 'error'
  tokenizer       TEXT     how token counts were made ('tiktoken:o200k_base' or 'estimate')
  content         TEXT     message text, only when capture_content is on, else NULL
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Sequence

SCHEMA_VERSION = 3

COLUMNS: Sequence[str] = (
    "ts", "host", "pid", "session", "engine", "hook", "event", "outcome", "reason",
    "duration_s", "prompt_tokens", "threshold_tokens", "window_tokens",
    "tokens_before", "tokens_after", "messages_before", "messages_after",
    "cache_lost_tokens", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "tokenizer", "content",
    # schema version 2 (issue 15): decisions, the summary model, cache rewrites
    "checked_tokens", "decision", "summary_model", "summary_provider",
    "summary_input_tokens", "summary_output_tokens", "cache_rewrite_tokens",
    # schema version 3 (issue 26): the hooks of Hermes 0.20+ (tool-result prunes, finished turns)
    "pruned_results", "api_calls",
)

_COLUMN_TYPES = {
    "ts": "REAL NOT NULL", "host": "TEXT", "pid": "INTEGER", "session": "TEXT",
    "engine": "TEXT", "hook": "TEXT", "event": "TEXT NOT NULL", "outcome": "TEXT",
    "reason": "TEXT", "duration_s": "REAL", "tokenizer": "TEXT", "content": "TEXT",
    "decision": "TEXT", "summary_model": "TEXT", "summary_provider": "TEXT",
}

SCHEMA_SQL = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, "
    + ", ".join(f"{c} {_COLUMN_TYPES.get(c, 'INTEGER')}" for c in COLUMNS)
    + ")",
    # Time-range scans (retention, every dashboard view).
    "CREATE INDEX IF NOT EXISTS events_ts ON events (ts)",
    # Per-engine / per-hook views over a time range.
    # Covering: outcome counts, churn, cache loss and latency samples are read from the index alone.
    "CREATE INDEX IF NOT EXISTS events_engine_hook_ts_cover ON events "
    "(engine, hook, ts, event, outcome, duration_s, cache_lost_tokens)",
    # The sawtooth of one session.
    "CREATE INDEX IF NOT EXISTS events_session_ts ON events (session, ts)",
    # Timeout / fail-open tables: the rare non-call events, newest first.
    "CREATE INDEX IF NOT EXISTS events_incidents ON events (ts) WHERE event != 'call'",
    # Hook errors without a full scan.
    "CREATE INDEX IF NOT EXISTS events_errors ON events (ts) WHERE outcome = 'error'",
)



def column_type(column: str) -> str:
    """The declared type of an ``events`` column, as in SCHEMA_SQL."""
    return _COLUMN_TYPES.get(column, "INTEGER")


def add_column_sql(column: str) -> str:
    """The ALTER TABLE that adds ``column`` to an older store's ``events`` table (without NOT NULL:
    SQLite cannot add one without a default, and the older rows have no value)."""
    return f"ALTER TABLE events ADD COLUMN {column} {column_type(column).replace(' NOT NULL', '')}"


def insert_sql(names: Sequence[str], rows: int = 1) -> str:
    """The INSERT of ``rows`` ``events`` rows that give only the columns ``names`` (each in COLUMNS,
    or ``id``; the others are NULL)."""
    one = f"({', '.join('?' for _ in names)})"
    return f"INSERT INTO events ({', '.join(names)}) VALUES {', '.join([one] * rows)}"


INSERT_SQL = insert_sql(COLUMNS)     # a full-width row, in COLUMNS order


# A stale -wal/-shm without its main file is moved to NAME-wal.orphaned / NAME-shm.orphaned.
ORPHAN_SUFFIX = ".orphaned"

# The store's place under a Hermes home (observed.store.path overrides it).
STORE_DIR = "observed"
STORE_FILE = "telemetry.sqlite"
DEMO_STORE_FILE = "demo.sqlite"      # what `observed-engine demo` writes, next to STORE_FILE


# `observed-engine demo` writes only inside a directory of its own (its store, the private Hermes
# home its agents run in, its token cache, its dashboard's log), never into the operator's Hermes
# home: $OBSERVED_DEMO_DIR (scripts/demo.sh: .demo/ in the checkout), else the user's state
# directory, $XDG_STATE_HOME/observed-engine/demo (default ~/.local/state/observed-engine/demo).
DEMO_DIR_ENV = "OBSERVED_DEMO_DIR"


def demo_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The demo's own directory (see DEMO_DIR_ENV above); not created here."""
    env = os.environ if environ is None else environ
    if env.get(DEMO_DIR_ENV):
        return Path(env[DEMO_DIR_ENV]).expanduser()
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state).expanduser() / "observed-engine" / "demo"


def demo_store_path(directory: Optional[os.PathLike | str] = None) -> Path:
    """DIR/demo.sqlite, the demo's store in its own directory (the dashboard's empty state names it)."""
    return Path(directory if directory is not None else demo_dir()) / DEMO_STORE_FILE


def default_store_path(hermes_home: os.PathLike | str) -> Path:
    """HERMES_HOME/observed/telemetry.sqlite."""
    return Path(hermes_home) / STORE_DIR / STORE_FILE


def make_row(**fields) -> tuple:
    """A row tuple in COLUMNS order; missing fields are NULL."""
    return tuple(map(fields.get, COLUMNS))


def row_from(fields: dict) -> tuple:
    """A store row that names its columns: ``(names, values)`` of ``fields``, in their order. The
    writer binds only these columns (the others are NULL; a name that is not a column is left out,
    as ``make_row`` leaves it out). The worker's rows take this form: binding the 20-odd NULLs of
    a full-width row cost as much as the rest of the insert."""
    return tuple(fields), tuple(fields.values())


def schema_markdown() -> str:
    """docs/store-schema.md, generated from this module (a test keeps the file current)."""
    body = __doc__.split("Schema (documented in docs/store-schema.md, version in ``meta``):", 1)[1].strip()
    lines = [
        "# The embedded store's schema", "",
        "One SQLite file (default `$HERMES_HOME/observed/telemetry.sqlite`), written by "
        "`observed_engine.store.StoreWriter` in WAL mode, read (read-only) by the dashboard. "
        f"Schema version: {SCHEMA_VERSION} (table `meta`, key `schema_version`). "
        "Generated by `python -c \"from observed_engine.contract.store_schema import schema_markdown as s; print(s())\"`.", "",
        "## Table `events`", "",
        "One row per hook call (`event = 'call'`) or per event (timeouts, fail-opens, bad input).", "",
        "```text", body, "```", "", "## DDL", "", "```sql",
        *[stmt + ";" for stmt in SCHEMA_SQL], "```", "", "## Retention and writers", "",
        "Rows older than `observed.store.retention_days` (default 14) are deleted by the writer at most every "
        "10 minutes, 5,000 rows per transaction with a pause of 20 ms between two, so that deleting a large "
        "backlog never holds the write lock for long. Several processes may write one file: each batch is one `BEGIN IMMEDIATE` transaction and "
        "its rows get the ids after the table's largest, in the order they came, inside that transaction (rows of one set of columns "
        "are inserted together, by multi-row INSERTs); "
        "SQLite's busy timeout (5 s) serialises them. A failed batch (locked, read-only, full disk) is kept in "
        "memory up to the queue bound and retried; rows beyond the bound are dropped and counted in "
        "`hermes_context_engine_telemetry_dropped_total{signal=\"store_row\"}`.", "",
        "## Versions and migration", "",
        "A writer opening a store reads `meta.schema_version` and adds every column of `events` that the "
        "table lacks (`ALTER TABLE events ADD COLUMN`, without NOT NULL; older rows read NULL there), creates "
        "missing indexes, and sets `schema_version` to its own version when the store's is older (never "
        "lowers it: a writer of an older version writes a newer store with the columns it knows), all in one "
        "transaction, logged once. Readers must accept columns they do not know and NULL in newer ones.", "",
        "## A file that is not a store", "",
        "A writer refuses a file at the store path that is not an observed-engine store: not SQLite at all, or "
        "a database with tables but no `meta` table holding an integer `schema_version`, or with other tables "
        "and no `events`, or whose `events` lacks `ts`/`event` (a mistyped `observed.store.path`). It writes "
        "nothing to it, never switches its journal mode (the check runs before), logs one line, counts one "
        "error (`hermes_context_engine_telemetry_errors_total{component=\"store\"}`) and drops every store "
        "row from then on (counted in `hermes_context_engine_telemetry_dropped_total{signal=\"store_row\"}`) "
        "until the process restarts. An empty file or an empty database becomes a store.", "",
        "## Failures", "",
        "A batch that fails because of its data (not the file) is never retried as it is. Text is made storable "
        "once: each lone surrogate (a header decoded with `surrogateescape`) becomes U+FFFD, an integer beyond "
        "64 bits or a value of another type becomes NULL (counted in "
        "`hermes_context_engine_telemetry_errors_total{component=\"store\"}`, logged once). A row that still "
        "cannot be stored (a NOT NULL column without a value, the wrong number of values) is skipped, counted "
        "in `hermes_context_engine_telemetry_dropped_total{signal=\"store_row\"}` and logged once; the other "
        "rows of its batch are written.", "",
        "The writer compares the path's `(st_dev, st_ino)` with the file it has open at every batch: a store "
        "deleted, renamed or replaced while open is noticed, logged once (counted in "
        "`hermes_context_engine_telemetry_errors_total{component=\"store\"}`) and the path reopened, a new store "
        "created if nothing is there; the old file's `-wal`/`-shm` are checkpointed into it and moved aside "
        f"(`NAME-wal{ORPHAN_SUFFIX}`). Opening a path whose main file is missing but whose `-wal`/`-shm` are "
        "still there (a process killed with the store open, then the file removed) moves those aside too, "
        "with a log line, so that SQLite does not read them as the new store's.", "",
        "The writer thread does not die and the writer raises into no caller: if the thread cannot be started "
        "(`can't start new thread`), rows are queued up to the bound, the start is retried at the next submit, "
        "and the failure is counted once in `hermes_context_engine_telemetry_errors_total{component=\"store\"}` "
        "and logged once.",
    ]
    return "\n".join(lines) + "\n"
