"""Hook-time snapshots of message lists.

``compress()`` may edit its input in place and the host may edit a returned list
later, so the hook path copies what the worker needs -- role, content and tool
calls per message -- into a tagged tuple. The tag keeps a snapshot apart from a
malformed message that happens to be a tuple itself.
"""

from __future__ import annotations

from typing import Any, List, Optional

_TAG = object()


def snapshot_messages(messages: Any) -> Optional[list]:
    """Per message ``(TAG, role, content, tool_calls)``; non-dict items as they are. None for a non-list."""
    if type(messages) is not list:
        return None
    try:
        return [
            (_TAG, m.get("role"), m.get("content"), m.get("tool_calls")) if type(m) is dict else m
            for m in messages
        ]
    except Exception:
        return None


def snapshot_fields(item: Any):
    """(role, content, tool_calls) of a snapshot entry or a message dict; None for anything else."""
    if type(item) is tuple and len(item) == 4 and item[0] is _TAG:
        return item[1], item[2], item[3]
    if isinstance(item, dict):
        return item.get("role"), item.get("content"), item.get("tool_calls")
    return None


def as_messages(snapshot) -> List[Any]:
    """Message dicts (for the token counter) from a snapshot or a plain list."""
    out = []
    for item in snapshot:
        if type(item) is tuple and len(item) == 4 and item[0] is _TAG:
            msg = {"role": item[1], "content": item[2]}
            if item[3]:
                msg["tool_calls"] = item[3]
            out.append(msg)
        else:
            out.append(item)
    return out


def message_problem(messages) -> Optional[str]:
    """The first malformed message of a list (a snapshot or the list itself), as a bad-input kind:
    ``message_not_a_dict``, ``message_without_role``, ``message_content_<type>`` (content neither
    a string, a list of parts nor None), ``message_tool_calls_<type>`` (tool_calls not a list);
    None when all look right."""
    try:
        for item in messages:
            fields = snapshot_fields(item)
            if fields is None:
                return "message_not_a_dict"
            role, content, tool_calls = fields
            if not isinstance(role, str) or not role:
                return "message_without_role"
            if content is not None and not isinstance(content, (str, list)):
                return f"message_content_{type(content).__name__}"
            if tool_calls is not None and not isinstance(tool_calls, list):
                return f"message_tool_calls_{type(tool_calls).__name__}"
    except Exception:
        return "message_unreadable"
    return None
