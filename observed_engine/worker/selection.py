"""Classifying a ``select_context`` call the way the head host treats it.

Host rules (docs/design/host-contract.md): an exception, ``[]``, a
non-list or a list with a non-dict item fall open to the original request;
``None`` passes the request through silently; a non-empty list of dicts is
sent as is. On top we measure churn: is this selection the one the session
used last time (same object or equal list), and if not, from which message on
does it differ -- everything after that point is a prompt-cache prefix lost.
"""

from __future__ import annotations

from typing import Any, Optional

from ..contract import vocabulary as v
from ..contract.records import record


@record
class Verdict:
    result: str                          # one of vocabulary.SELECTION_RESULTS
    fail_open_reason: Optional[str] = None   # one of vocabulary.FAIL_OPEN_REASONS
    detail: str = ""
    selection: Optional[tuple] = None    # the new selection (shallow), when one was made
    first_difference: int = 0            # index of the first message that differs from the last selection


def classify_selection(request: Any, result: Any, exc: Optional[BaseException],
                       previous: Optional[tuple], snapshot: Optional[tuple] = None) -> Verdict:
    """``snapshot``: ``tuple(result)`` taken when the hook returned. An engine may keep
    one list and edit it in place between calls, so neither the object's identity nor
    its content at processing time says what was sent; the snapshot does."""
    if exc is not None:
        return Verdict(v.FAIL_OPEN, v.REASON_EXCEPTION, type(exc).__name__)
    if result is None:
        return Verdict(v.UNCHANGED)
    if type(result) is not list and not isinstance(result, list):
        return Verdict(v.FAIL_OPEN, v.REASON_INVALID_RETURN, f"a {type(result).__name__}, not a list")
    if not result:
        return Verdict(v.FAIL_OPEN, v.REASON_INVALID_RETURN, "an empty list")
    for item in result:
        if not isinstance(item, dict):
            return Verdict(v.FAIL_OPEN, v.REASON_INVALID_RETURN, f"a list with a {type(item).__name__} item")
    if result is request:
        return Verdict(v.UNCHANGED, selection=None)
    selection = snapshot if snapshot is not None else tuple(result)
    if previous is not None and selection == previous:
        return Verdict(v.SAME_SELECTION, selection=selection, first_difference=len(previous))
    first = 0
    if previous is not None:
        limit = min(len(previous), len(selection))
        while first < limit and (previous[first] is selection[first] or previous[first] == selection[first]):
            first += 1
    return Verdict(v.CHANGED_SELECTION, selection=selection, first_difference=first)
