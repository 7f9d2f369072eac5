"""Counting with an encoding loaded in a helper process, so the engine's process never loads it.

Loading an encoding costs ~0.3 s of CPU holding the GIL; a :class:`HelperEncoder` runs
``_helper_main.py`` with the same tiktoken and files instead: the same numbers, computed
elsewhere. When editing: any helper failure raises :class:`HelperFailed` and the counter loads
in-process as before; during a session-end delivery a wait ends with :class:`HelperBusy` and
that batch is estimated. ``OBSERVED_TOKENIZER_PROCESS=0`` keeps every encoding in-process.

The full account: docs/design/internals.md, *observed_engine/tokens/helper.py*.
"""

from __future__ import annotations

import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Dict, List

logger = logging.getLogger(__name__)

__all__ = ["HelperBusy", "HelperEncoder", "HelperFailed", "enabled", "helper_for", "hurry", "running"]

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_helper_main.py")
TIMEOUT_S = 60.0          # for the helper to load its encoding, and for any one reply
_U32 = struct.Struct("<I")

_LOCK = threading.Lock()
_HELPERS: Dict[str, HelperEncoder] = {}

# Deliveries under way (a session end waiting for what is queued): token -> the monotonic time past
# which no wait for a helper goes on. The helper runs at the lowest CPU priority; on a busy machine it
# may not have loaded its encoding (or answered) by then, and the session end, after which the host
# may end the process (``hermes -z``), must not wait for it: the counter then estimates that batch.
_HURRY_LOCK = threading.Lock()
_HURRY: Dict[int, float] = {}
_SLICE_S = 0.02           # how often a wait for the helper looks at _HURRY


class hurry:
    """``with hurry(give_up_at):`` -- while it lasts, a wait for any helper ends at ``give_up_at``
    (monotonic) with :class:`HelperBusy`. Nests and overlaps (the earliest wins)."""

    def __init__(self, give_up_at: float) -> None:
        self.give_up_at = give_up_at

    def __enter__(self) -> hurry:
        with _HURRY_LOCK:
            _HURRY[id(self)] = self.give_up_at
        return self

    def __exit__(self, *_exc) -> None:
        with _HURRY_LOCK:
            _HURRY.pop(id(self), None)


def _give_up_at() -> float | None:
    hurries = _HURRY
    if not hurries:
        return None
    try:
        return min(hurries.values())
    except ValueError:      # emptied meanwhile
        return None


class HelperBusy(RuntimeError):
    """The helper did not answer before a delivery's deadline (:class:`hurry`). Nothing failed: the
    helper goes on, and an answer it still owes is read and discarded before the next batch."""


class HelperFailed(RuntimeError):
    """The helper process cannot count (did not start, failed to load, died, timed out).
    ``inherited``: it is the parent's, seen in a forked child (which starts one of its own)."""

    inherited = False


def enabled() -> bool:
    """Whether encodings are loaded in a helper process (``OBSERVED_TOKENIZER_PROCESS=0``: no)."""
    if os.environ.get("OBSERVED_TOKENIZER_PROCESS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if os.name != "posix" or getattr(sys, "frozen", False):
        return False     # select() on pipes is POSIX; a frozen app's executable is not a plain python
    return bool(sys.executable) and os.path.isfile(sys.executable) and os.path.isfile(_SCRIPT)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # what tiktoken's Encoding.encode does with lone surrogates before encoding
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


class HelperEncoder:
    """One encoding in one helper process; :meth:`count_batch` is thread-safe."""

    def __init__(self, name: str, cache_dir: str) -> None:
        self.name = name
        env = dict(os.environ)
        env["TIKTOKEN_CACHE_DIR"] = cache_dir
        self._lock = threading.Lock()
        self._failed: str | None = None
        self._inherited = False
        self._ready = False
        self._ready_line = b""
        self._owed = 0            # reply bytes of a batch abandoned under hurry(), read before the next
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", _SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, close_fds=True, start_new_session=True, bufsize=0,
        )
        self.pid = self._proc.pid
        hello = json.dumps({"path": [p for p in sys.path if p], "encoding": name}).encode() + b"\n"
        try:
            self._write(hello)
        except HelperFailed:
            pass    # reported by the first count_batch

    # -- pipe i/o (under _lock, except the hello) ------------------------------------

    def _write(self, data: bytes) -> None:
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            _, writable, _ = select.select([], [fd], [], TIMEOUT_S)
            if not writable:
                self._fail("timed out writing to the helper")
            try:
                n = os.write(fd, view)
            except OSError as exc:
                self._fail(f"helper gone ({exc})")
            view = view[n:]

    def _readable(self, fd: int) -> None:
        """Wait until ``fd`` is readable: HelperFailed after TIMEOUT_S, HelperBusy once a delivery's
        deadline (:class:`hurry`) has passed."""
        clock = time.monotonic
        end = clock() + TIMEOUT_S
        while True:
            give_up = _give_up_at()
            now = clock()
            if give_up is not None and now >= give_up:
                raise HelperBusy("the token-counting helper did not answer before the delivery deadline")
            wait = end - now
            if wait <= 0:
                self._fail("timed out waiting for the helper")
            readable, _, _ = select.select([fd], [], [], min(wait, _SLICE_S))
            if readable:
                return

    def _read(self, n: int, owed: bool = False) -> bytes:
        """``n`` bytes of the reply (``owed``: of an abandoned one, counted down in ``_owed``)."""
        fd = self._proc.stdout.fileno()
        chunks: List[bytes] = []
        while n:
            self._readable(fd)
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                self._fail("the helper ended")
            chunks.append(chunk)
            n -= len(chunk)
            if owed:
                self._owed -= len(chunk)
        return b"".join(chunks)

    def _wait_ready(self) -> None:
        if self._ready:
            return
        while not self._ready_line.endswith(b"\n") and len(self._ready_line) < 4096:
            self._ready_line += self._read(1)     # kept across a HelperBusy: nothing is lost
        if self._ready_line != b"OK\n":
            self._fail(self._ready_line.decode("utf-8", "replace").strip())
        self._ready = True

    def _fail(self, reason: str) -> None:
        self._failed = reason
        self.close()
        raise HelperFailed(reason)

    def _raise_failed(self) -> None:
        error = HelperFailed(self._failed)
        error.inherited = self._inherited
        raise error

    # -- counting --------------------------------------------------------------------

    def count_batch(self, texts: List[str]) -> List[int]:
        """``len(encoding.encode(text, disallowed_special=()))`` for each text, in order."""
        with self._lock:
            if self._failed is not None:
                self._raise_failed()
            self._wait_ready()
            if self._owed:
                self._read(self._owed, owed=True)     # the answer to a batch abandoned under hurry()
            if not texts:
                return []
            parts = [_U32.pack(len(texts))]
            for text in texts:
                data = _utf8(text)
                parts.append(_U32.pack(len(data)))
                parts.append(data)
            self._write(b"".join(parts))
            self._owed = 4 * len(texts)
            return list(struct.unpack(f"<{len(texts)}I", self._read(self._owed, owed=True)))

    def close(self) -> None:
        """End the helper (it exits at end-of-file on its input); does not wait."""
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except Exception:  # teardown: the helper exits at end-of-file anyway
                pass
        if self._failed is not None:
            try:
                self._proc.kill()
            except Exception:  # teardown: a helper already gone
                pass

    def _forget_in_child(self) -> None:
        """In a forked child: drop this process's copies of the pipes (the helper is the parent's)."""
        self._failed = "inherited from the parent process"
        self._inherited = True
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except Exception:  # teardown: the child's copy of a pipe
                pass


def running(name: str) -> HelperEncoder | None:
    """The process's helper for ``name`` if one was started and has not failed."""
    helper = _HELPERS.get(name)
    return helper if helper is not None and helper._failed is None else None


def helper_for(name: str, cache_dir: str) -> HelperEncoder:
    """The process's helper for ``name``, started on first use (a failed one is replaced);
    raises OSError when no process can be started."""
    with _LOCK:
        helper = _HELPERS.get(name)
        if helper is None or helper._failed is not None:
            helper = HelperEncoder(name, cache_dir)
            _HELPERS[name] = helper
            logger.debug("token-counting helper for %s started (pid %d)", name, helper.pid)
        return helper


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    for helper in list(_HELPERS.values()):
        helper._lock = threading.Lock()
        helper._forget_in_child()
    _HELPERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
