"""The OpenAI SDK's request transform, memoised per message, for replay processes only.

The SDK's ``maybe_transform`` walk of every request grew with the square of a replayed
conversation (29 % of a replay's CPU); a message's transform depends on the message alone, so
items are transformed one at a time by the SDK and kept by their JSON text. When editing: the
result is checked against the SDK's whole transform (first requests, then every
``CHECK_EVERY``-th) and the memo turns itself off on any difference.

The full account: docs/design/internals.md, *observed_engine/compare/request_memo.py*.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Dict, Optional

from .process_patch import CountedPatch

logger = logging.getLogger(__name__)

MEMO_FIELDS = ("messages", "tools")
CHECK_FIRST = 16         # requests compared in full at the start
CHECK_EVERY = 64         # and then one in this many
MAX_CHARS = 64 << 20     # the memo's keys, in characters: past it the memo starts afresh


class RequestMemo:
    """``maybe_transform`` for the chat-completions module: the SDK's own, item by item."""

    def __init__(self, original) -> None:
        self.original = original
        self._memo: Dict[str, Any] = {}
        self._chars = 0
        self._lock = threading.Lock()
        self.requests = 0
        self.hits = 0
        self.misses = 0
        self.disabled: Optional[str] = None       # why the memo turned itself off

    def __call__(self, data: Any, expected_type: Any) -> Any:
        if self.disabled is not None or not isinstance(data, dict) or not any(
                isinstance(data.get(f), list) for f in MEMO_FIELDS):
            return self.original(data, expected_type)
        with self._lock:
            self.requests += 1
            check = self.requests <= CHECK_FIRST or self.requests % CHECK_EVERY == 0
        try:
            fast = self._transform(data, expected_type)
        except Exception as exc:  # the SDK's own path answers; _disable says why, once
            self._disable(f"the item-by-item transform raised {type(exc).__name__}: {exc}")
            return self.original(data, expected_type)
        if check:
            whole = self.original(data, expected_type)
            if _wire(whole) != _wire(fast):
                self._disable("the item-by-item transform differed from the SDK's whole-body one")
                return whole
        return fast

    def _transform(self, data: Dict[str, Any], expected_type: Any) -> Dict[str, Any]:
        # the rest of the body by the SDK, with an empty list standing in for each memoised field:
        # its names, its dropped NotGiven values and its key order are the SDK's own
        memoised = [k for k, v in data.items() if k in MEMO_FIELDS and isinstance(v, list)]
        out = self.original({k: ([] if k in memoised else v) for k, v in data.items()}, expected_type)
        for key in memoised:
            if key not in out:
                raise ValueError(f"the SDK does not send {key!r} under its own name")
            out[key] = self._field(key, data[key], expected_type)
        return out

    def _field(self, key: str, items: list, expected_type: Any):
        result = []
        for item in items:
            try:
                text = key + "\0" + json.dumps(item, ensure_ascii=False, allow_nan=True)
            except (TypeError, ValueError):
                text = None          # not JSON: the SDK transforms it each time
            hit = self._memo.get(text) if text is not None else None
            if hit is None:
                hit = self.original({key: [item]}, expected_type)[key][0]
                self.misses += 1
                if text is not None:
                    with self._lock:
                        if self._chars + len(text) > MAX_CHARS:
                            self._memo.clear()
                            self._chars = 0
                        self._memo[text] = hit
                        self._chars += len(text)
            else:
                self.hits += 1
            result.append(hit)
        return result

    def _disable(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            logger.warning("replay: the request memo is off for this process (%s); the SDK transforms "
                           "every request whole, as without it", why)


def _wire(body: Any) -> Any:
    """What the SDK sends for ``body``: its JSON text, key order included."""
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return repr(body)


def _sdk_module():
    try:
        from openai.resources.chat.completions import completions as module
    except ImportError:
        return None
    return module


_patch = CountedPatch(_sdk_module, "maybe_transform",
                      lambda original: RequestMemo(original) if callable(original) else None,
                      lambda memo: {"requests": memo.requests, "hits": memo.hits, "misses": memo.misses,
                                    "disabled": memo.disabled})
last_stats: Optional[Dict[str, Any]] = None    # the last uninstalled memo's figures (tests, benchmarks)


def install() -> Optional[RequestMemo]:
    """Memoise the chat-completions request transform in this process (counted: one uninstall
    per install). None when the SDK has no such module function (another openai version)."""
    return _patch.install()


def uninstall() -> None:
    global last_stats
    stats = _patch.uninstall()
    if stats is not None:
        last_stats = stats
