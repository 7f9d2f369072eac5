"""Is a message list (a hook-time snapshot or the list itself) well formed?"""

from __future__ import annotations

from typing import Optional

from ..contract.events import snapshot_fields


def message_problem(messages) -> Optional[str]:
    """The first malformed message of a list, as a bad-input kind: ``message_not_a_dict``,
    ``message_without_role``, ``message_content_<type>`` (content neither a string, a list of
    parts nor None), ``message_tool_calls_<type>`` (tool_calls not a list); None when all look right."""
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
    except Exception:  # hot path: items that cannot be read; reported as the bad-input kind below
        return "message_unreadable"
    return None
