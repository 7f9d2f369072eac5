"""Recorded conversations, read from Hermes' own session store (``$HERMES_HOME/state.db``).

Opened read-only (``mode=ro``). When editing: a compaction keeps the summarised-away rows (in
place: flagged ``active = 0, compacted = 1``; legacy: a child session), so the original
transcript is the rows in insertion order without the compaction products, keeping messages of
the turn in progress that a compacted set carries first. Each recorded summary's body is kept
too (``Conversation.summaries``) for the offline summariser.

The full account: docs/design/internals.md, *observed_engine/compare/sessions.py*.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence
from urllib.parse import quote

# A compacted set's rows are inserted 1e-6 s apart (hermes_state._insert_message_rows);
# rows appended one by one are milliseconds apart at the least.
SET_GAP_SECONDS = 5e-6


class StoreError(Exception):
    """The session store cannot be read (missing, not Hermes' state.db)."""


@dataclass
class Conversation:
    session_id: str                     # the root session
    sessions: List[str]                 # the root and its compression children, in order
    model: Optional[str]
    system_prompt: Optional[str]
    started_at: Optional[float]
    messages: List[Dict[str, Any]] = field(default_factory=list)   # the original transcript
    summaries: List[str] = field(default_factory=list)             # recorded summary bodies
    compactions: int = 0                # compacted sets found
    skip: Optional[str] = None          # why the replay cannot reproduce it

    @property
    def turns(self) -> List[Dict[str, Any]]:
        """``[{"user": content, "replies": [assistant/tool messages...]}, ...]``."""
        out: List[Dict[str, Any]] = []
        for m in self.messages:
            if m["role"] == "user":
                out.append({"user": m.get("content"), "replies": []})
            elif out:
                out[-1]["replies"].append(m)
        return out


class NothingRecorded(StoreError):
    """The session store is there but holds no conversation yet (an empty state.db)."""


def open_store(path: Path, *, missing: Optional[str] = None) -> sqlite3.Connection:
    """``path`` opened read-only; a directory, a missing file (``missing``, if given, is the
    message), an unreadable, empty or foreign database is one :class:`StoreError` line."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not Hermes' session store; fix: move it away")
    if not path.is_file():
        raise StoreError(missing or f"no session store at {path} (Hermes writes state.db in its home); fix: "
                         f"pass the --hermes-home Hermes runs with")
    try:
        # read-only; and without a -wal file (no Hermes has it open), immutable too: a plain
        # read-only open of a WAL database would leave a -wal and a -shm file in the home
        uri = f"file:{quote(os.fsencode(os.path.abspath(path)))}?mode=ro"
        conn = sqlite3.connect(uri if os.path.exists(f"{path}-wal") else uri + "&immutable=1", uri=True)
        conn.row_factory = sqlite3.Row
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a readable SQLite file ({exc}); fix: pass the --hermes-home whose "
                         f"state.db Hermes writes") from None
    if not tables:
        # an empty file, or a database Hermes opened before it wrote its schema
        conn.close()
        raise NothingRecorded(f"no conversation is recorded yet in {path}: the session store is empty; fix: "
                              f"have a conversation with Hermes in that home first")
    if not {"sessions", "messages"} <= tables:
        conn.close()
        raise StoreError(f"{path} has no sessions/messages tables: not a Hermes state.db (another "
                         f"program's database?); fix: pass the --hermes-home whose state.db Hermes writes")
    return conn


def other_home_hint(home_given: bool) -> str:
    """What a message about the home's recorded conversations adds when no --hermes-home was given."""
    return "" if home_given else " (pass --hermes-home for another home)"


def recorded_store(home: Path, *, home_given: bool) -> Path:
    """``home``'s state.db, checked before anything replays (``compare``, ``tune``): a directory, a
    missing file, an empty store or another program's database is one :class:`StoreError` line,
    the ones about this home's history ending with :func:`other_home_hint`."""
    state_db = home / "state.db"
    other_home = other_home_hint(home_given)
    missing = (f"no session store at {state_db}: Hermes has recorded no conversation in that home{other_home}; "
               f"fix: have a conversation with Hermes there first")
    try:
        open_store(state_db, missing=missing).close()   # all of it is said before Hermes loads
    except NothingRecorded as exc:
        said, _, fix = str(exc).partition("; fix: ")
        raise NothingRecorded(f"{said}{other_home}; fix: {fix}") from None
    return state_db


def _columns(conn: sqlite3.Connection, table: str) -> set:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


# hermes_state.SessionDB._encode_content: structured (multimodal) content is stored as this
# prefix + JSON; plain text as is.
CONTENT_JSON_PREFIX = "\x00json:"


def _decode(content: Any) -> Any:
    if isinstance(content, str) and content.startswith(CONTENT_JSON_PREFIX):
        try:
            return json.loads(content[len(CONTENT_JSON_PREFIX):])
        except ValueError:
            return content
    return content


def _fingerprint(m: Dict[str, Any]) -> tuple:
    return (m.get("role"), json.dumps(m.get("content"), sort_keys=True, default=str),
            m.get("tool_call_id"), json.dumps(m.get("tool_calls"), sort_keys=True, default=str))


def _message(row: sqlite3.Row) -> Dict[str, Any]:
    m: Dict[str, Any] = {"role": row["role"], "content": _decode(row["content"])}
    if row["tool_calls"]:
        try:
            m["tool_calls"] = json.loads(row["tool_calls"])
        except ValueError:
            m["tool_calls"] = row["tool_calls"]
    if row["tool_call_id"]:
        m["tool_call_id"] = row["tool_call_id"]
    if row["tool_name"]:
        m["tool_name"] = row["tool_name"]
    return m


def _groups(rows: Sequence[sqlite3.Row], is_summary: Callable[[Any], bool]) -> List[tuple]:
    """Rows in insertion order as ``("row", row)`` and ``("set", [rows])`` for compacted sets."""
    out: List[tuple] = []
    i = 0
    while i < len(rows):
        j = i
        while (j + 1 < len(rows) and rows[j + 1]["session_id"] == rows[i]["session_id"]
               and 0 <= (rows[j + 1]["timestamp"] or 0) - (rows[j]["timestamp"] or 0) < SET_GAP_SECONDS):
            j += 1
        if j > i or is_summary(rows[i]["content"]):
            out.append(("set", list(rows[i:j + 1])))
        else:
            out.append(("row", rows[i]))
        i = j + 1
    return out


def _new_in_set(set_rows: List[sqlite3.Row], original: List[Dict[str, Any]],
                is_summary: Callable[[Any], bool]) -> List[Dict[str, Any]]:
    """The messages of a compacted set that were not stored before: after the copy of the
    transcript's last message (the set's protected tail ends there), or, without one, those
    that are neither a summary nor a copy of an earlier message."""
    msgs = [_message(r) for r in set_rows]
    if original:
        last = _fingerprint(original[-1])
        for k in range(len(msgs) - 1, -1, -1):
            if _fingerprint(msgs[k]) == last:
                return msgs[k + 1:]
    seen = {_fingerprint(m) for m in original}
    return [m for m in msgs if not is_summary(m.get("content")) and _fingerprint(m) not in seen]


def _child_prefix(conv: Conversation, row: sqlite3.Row, original: List[Dict[str, Any]],
                  summary_body: Callable[[Any], Optional[str]]) -> bool:
    """Legacy rotation: a child session starts with the compacted set, flushed row by row.
    True for a row of that prefix (a summary, or a copy of an earlier message, up to the copy
    of the parent's last message), which is then left out."""
    state = conv.__dict__.setdefault("_child_state", {})
    sid = row["session_id"]
    if state.get(sid) == "done":
        return False
    if sid not in state:
        state[sid] = "prefix"
        conv.compactions += 1
        state["last"] = _fingerprint(original[-1])
        state["seen"] = {_fingerprint(m) for m in original}
    m = _message(row)
    body = summary_body(m.get("content"))
    if body is not None:
        conv.summaries.append(body)
        return True
    fp = _fingerprint(m)
    if fp == state["last"]:
        state[sid] = "done"
        return True
    if fp in state["seen"]:
        return True
    state[sid] = "done"
    return False


def _calls(m: Dict[str, Any]) -> List[tuple]:
    """``[(id, name), ...]`` of an assistant message's tool calls."""
    out = []
    for call in m.get("tool_calls") or []:
        if isinstance(call, dict):
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            out.append((call.get("id"), fn.get("name") or call.get("name")))
        else:
            out.append((None, None))
    return out


def tool_results(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The recorded result of each tool call, by ``tool_call_id``."""
    return {m["tool_call_id"]: m.get("content") for m in messages
            if m["role"] == "tool" and m.get("tool_call_id")}


def tool_names(messages: List[Dict[str, Any]]) -> List[str]:
    return sorted({name for m in messages for _, name in _calls(m) if name})


def _why_not(messages: List[Dict[str, Any]], inline_tools: frozenset = frozenset()) -> Optional[str]:
    if not any(m["role"] == "user" for m in messages):
        return "no user message"
    if messages[0]["role"] != "user":
        return f"the transcript starts with a {messages[0]['role']} message, not a user message"
    if any(not isinstance(m.get("content"), (str, type(None))) for m in messages):
        return "multimodal content (lists of parts): the replay sends text only"
    roles = {m["role"] for m in messages} - {"user", "assistant", "tool"}
    if roles:
        return f"messages with role(s) {sorted(roles)} the replay cannot send"
    results = tool_results(messages)
    for m in messages:
        for call_id, name in _calls(m):
            if not call_id or not name:
                return "a tool call without an id or a name: its recorded result cannot be matched"
            if name in inline_tools:
                return (f"a {name!r} tool call: Hermes runs that tool inside the agent, the replay cannot "
                        f"answer it with the recorded result")
            if call_id not in results:
                return f"tool call {call_id} ({name}) has no recorded result"
    return None


def read_conversations(path: Path, *, session_ids: Optional[Sequence[str]] = None,
                       limit: Optional[int] = None,
                       summary_body: Callable[[Any], Optional[str]],
                       inline_tools: frozenset = frozenset()) -> List[Conversation]:
    """The recorded conversations, newest first (``limit`` of them), or the ones named.

    ``summary_body(content)``: the body of a compaction summary message, None for any other
    message (the host's own test, ``host.compaction_summary_body``)."""
    conn = open_store(path)
    try:
        return _read(conn, session_ids, limit, summary_body, inline_tools)
    finally:
        conn.close()


def _read(conn, session_ids, limit, summary_body, inline_tools) -> List[Conversation]:
    scols = _columns(conn, "sessions")
    mcols = _columns(conn, "messages")
    need = {"id", "session_id", "role", "content", "tool_calls", "tool_call_id", "tool_name", "timestamp"}
    if not need <= mcols:
        raise StoreError(f"the messages table lacks {sorted(need - mcols)}: a Hermes version this "
                         f"replay does not know")
    parent = "parent_session_id" if "parent_session_id" in scols else "NULL"
    end_reason = "end_reason" if "end_reason" in scols else "NULL"
    sessions = {r["id"]: dict(r) for r in conn.execute(
        f"SELECT id, model, system_prompt, started_at, {parent} AS parent, {end_reason} AS end_reason "
        f"FROM sessions")}
    children: Dict[str, List[str]] = {}
    for sid, s in sessions.items():
        p = s["parent"]
        if p and p in sessions and sessions[p]["end_reason"] == "compression":
            children.setdefault(p, []).append(sid)
    roots = [sid for sid, s in sessions.items()
             if not (s["parent"] and s["parent"] in sessions and sessions[s["parent"]]["end_reason"] == "compression")]
    if session_ids:
        wanted = []
        for sid in session_ids:
            if sid not in sessions:
                wanted.append(Conversation(sid, [sid], None, None, None, skip="no such session in state.db"))
                continue
            root = sid
            while root not in roots:    # a child named: its conversation
                root = sessions[root]["parent"]
            wanted.append(root)
    else:
        wanted = sorted(roots, key=lambda sid: sessions[sid]["started_at"] or 0, reverse=True)
    out: List[Conversation] = []
    is_summary = (lambda content: summary_body(content) is not None)
    for root in wanted:
        if isinstance(root, Conversation):
            out.append(root)
            continue
        chain = [root]
        while children.get(chain[-1]):
            chain.append(sorted(children[chain[-1]], key=lambda c: sessions[c]["started_at"] or 0)[0])
        marks = ",".join("?" * len(chain))
        rows = conn.execute(f"SELECT * FROM messages WHERE session_id IN ({marks}) ORDER BY id", chain).fetchall()
        if not rows:
            continue
        active = [r for r in rows if ("active" not in mcols or r["active"]) or
                  ("compacted" in mcols and r["compacted"])]   # rewound rows (active=0, compacted=0) are gone
        conv = Conversation(root, chain, sessions[root]["model"], sessions[root]["system_prompt"],
                            sessions[root]["started_at"])
        original: List[Dict[str, Any]] = []
        started: set = set()
        for kind, item in _groups(active, is_summary):
            sid = item["session_id"] if kind == "row" else item[0]["session_id"]
            if sid not in started:
                started.add(sid)
                if kind == "set" and sid != root:    # the child's compacted set came as one set
                    conv.__dict__.setdefault("_child_state", {})[sid] = "done"
            if kind == "row" and original and item["session_id"] != root and _child_prefix(
                    conv, item, original, summary_body):
                continue
            if kind == "row":
                original.append(_message(item))
                continue
            conv.compactions += 1
            for r in item:
                body = summary_body(r["content"])
                if body is not None:
                    conv.summaries.append(body)
            original.extend(_new_in_set(item, original, is_summary))
        conv.messages = original
        conv.skip = _why_not(original, inline_tools)
        out.append(conv)
        if limit and not session_ids and len([c for c in out if c.skip is None]) >= limit:
            break
    return out
