"""The self-call guard: a hook the engine calls on itself is the engine's business, not the host's.

Per thread, the engine whose traced hook is running. A hook the engine calls on itself from
inside another (``ContextCompressor.on_session_start`` calls ``self.bind_session_state``) runs
untraced, so spans and ``hook_calls`` count what the host did.

Leaf hooks (``hooks.HookSpec.leaf``: the per-request ones that call no other hook) only check
the guard, and only while some guarded hook is running in any thread (``guarded_running``
non-empty), so on the request path the check is one global read.
"""

from __future__ import annotations

import threading


class _Inside(threading.local):
    engine = None      # class default: plain attribute reads, no AttributeError path per thread


inside = _Inside()
guarded_running: list = []   # one entry per guarded hook running now, in any thread
