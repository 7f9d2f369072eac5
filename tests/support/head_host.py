"""A small head-host harness: how Hermes main (head) treats select_context and
on_turn_complete (hermes-host-contract.md, section 1, "Head adds").

Rules implemented here (our own code, following the contract):

* Both hooks are skipped unless the engine overrides them: the bound method's
  ``__func__`` is compared with the function on ``ContextEngine`` itself. The ABC
  is looked up in ``agent.context_engine`` at call time, so a test can install a
  head-like ABC there; on 0.19.0, whose ABC has neither hook, any callable the
  engine has counts as an override.
* ``select_context`` runs on every provider request, retries included, and fails
  open: an exception -> the original request (warning); ``None`` -> the original,
  silently; ``[]``, a non-list, or a list with a non-dict item -> the original
  (warning "invalid value"); a non-empty list of dicts -> that exact list object.
* ``on_turn_complete(messages, usage=None, **meta)`` after a finished turn, best
  effort: an exception is a warning; some early exits skip it.
* The engine gets structural copies of the conversation, never the live
  transcript.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Dict, List, Optional

import agent.context_engine as context_engine_module


def engine_overrides(engine: Any, name: str) -> bool:
    """Head's check: is ``engine.<name>`` something other than the ABC's default?"""
    hook = getattr(engine, name, None)
    if engine is None or not callable(hook):
        return False
    default = getattr(context_engine_module.ContextEngine, name, None)
    if default is None:   # 0.19.0's ABC: no default to compare with
        return True
    return getattr(hook, "__func__", None) is not default


class HeadHost:
    """Drives one engine through turns of provider requests the way head does."""

    def __init__(self, engine: Any, system_prompt: str = "You are the head host.") -> None:
        self.engine = engine
        self.system = {"role": "system", "content": system_prompt}
        self.conversation: List[Dict[str, Any]] = []
        self.sent: List[Dict[str, Any]] = []   # per request: what happened, for comparisons
        self.warnings: List[tuple] = []
        self.calls: Counter = Counter()
        self.skipped: Counter = Counter()

    # -- the two head hooks ----------------------------------------------------------

    def apply_selection(self, request: List[Dict[str, Any]], incoming: Optional[Dict[str, Any]]) -> list:
        engine = self.engine
        if not engine_overrides(engine, "select_context"):
            self.skipped["select_context"] += 1
            return request
        self.calls["select_context"] += 1
        try:
            selected = engine.select_context(
                request,
                conversation_messages=[copy.deepcopy(m) for m in self.conversation],
                incoming_message=copy.deepcopy(incoming) if isinstance(incoming, dict) else incoming,
                budget_tokens=getattr(engine, "context_length", 0) or 0,
            )
        except Exception as exc:  # noqa: BLE001 - head fails open on anything
            self.warnings.append(("select_context failed", type(exc), exc))
            return request
        if selected is None:
            return request
        if isinstance(selected, list) and selected and all(isinstance(m, dict) for m in selected):
            return selected
        self.warnings.append(("select_context returned an invalid value", type(selected), None))
        return request

    def turn_complete(self, messages: List[Dict[str, Any]], usage: Optional[Dict[str, Any]] = None,
                      **meta: Any) -> None:
        engine = self.engine
        if not engine_overrides(engine, "on_turn_complete"):
            self.skipped["on_turn_complete"] += 1
            return
        self.calls["on_turn_complete"] += 1
        try:
            engine.on_turn_complete([copy.deepcopy(m) for m in messages], usage=usage, **meta)
        except Exception as exc:  # noqa: BLE001
            self.warnings.append(("on_turn_complete failed", type(exc), exc))

    # -- a turn --------------------------------------------------------------------------

    def run_turn(self, user_text: str, *, requests: int = 1, turn_id: str = "t", failed: bool = False,
                 early_exit: bool = False, usage: Optional[Dict[str, Any]] = None) -> List[list]:
        """One user turn with ``requests`` provider requests (the extra ones are retries).

        Returns what was sent for each request. ``early_exit`` skips on_turn_complete,
        as some of head's early returns do."""
        incoming = {"role": "user", "content": user_text}
        self.conversation.append(incoming)
        usage = usage or {"prompt_tokens": 1000 + len(self.conversation), "completion_tokens": 20,
                          "total_tokens": 1020 + len(self.conversation)}
        sent_this_turn = []
        for attempt in range(requests):
            request = [self.system, *self.conversation]   # a fresh api_messages list per request
            sent = self.apply_selection(request, incoming)
            self.sent.append({"request": request, "sent": sent, "is_request": sent is request,
                              "attempt": attempt})
            sent_this_turn.append(sent)
        self.engine.update_from_response(usage)
        self.conversation.append({"role": "assistant", "content": f"answer to {user_text}"})
        if not early_exit:
            self.turn_complete(self.conversation, usage=usage, turn_id=turn_id, task_id="task",
                               api_call_count=requests, interrupted=False, failed=failed,
                               turn_exit_reason="failed" if failed else "text_response")
        return sent_this_turn
