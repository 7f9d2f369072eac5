"""What a chat message counts: the strings of a message that :class:`TokenCounter` encodes.

Content only, no per-message framing/role overhead: ``content`` (a string, or
the text parts of a list of parts -- image/audio/file parts count 0), the
``name`` and ``arguments`` of every ``tool_calls[*].function`` (and of a legacy
``function_call``), and ``reasoning`` / ``reasoning_content`` strings.
Malformed input never raises: strings are counted, anything else counts 0 and
``TokenCounter.malformed`` is incremented once per malformed message (that is,
once per ``False`` from :func:`_collect_texts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Part types whose "text" is counted; "refusal" parts count their "refusal" string.
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def _collect_texts(message: Any, out: list[str]) -> bool:
    """Append the countable strings of ``message`` to ``out``; False if anything was malformed."""
    if isinstance(message, str):
        out.append(message)
        return False
    if not isinstance(message, Mapping):
        return False
    ok = True
    content = message.get("content")
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, (list, tuple)):
        for part in content:
            ok = _collect_part(part, out) and ok
    elif isinstance(content, Mapping):  # a single part not wrapped in a list
        _collect_part(content, out)
        ok = False
    elif content is not None:
        ok = False

    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, (list, tuple)):
        for call in tool_calls:
            if not isinstance(call, Mapping):
                ok = False
                continue
            ok = _collect_function(call.get("function"), out) and ok
    elif tool_calls is not None:
        ok = False

    function_call = message.get("function_call")  # legacy single call
    if function_call is not None:
        ok = _collect_function(function_call, out) and ok

    for key in ("reasoning", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str):
            out.append(value)
        elif value is not None:
            ok = False
    return ok


def _collect_part(part: Any, out: list[str]) -> bool:
    if isinstance(part, str):
        out.append(part)
        return True
    if not isinstance(part, Mapping):
        return False
    kind = part.get("type")
    if kind in _TEXT_PART_TYPES or (kind is None and "text" in part):
        text = part.get("text")
        if isinstance(text, str):
            out.append(text)
            return True
        return False
    if kind is None or not isinstance(kind, str):
        return False
    if kind == "refusal":
        refusal = part.get("refusal")
        if isinstance(refusal, str):
            out.append(refusal)
            return True
        return refusal is None
    return True  # image_url, input_audio, file, ...: not text, count 0


def _collect_function(function: Any, out: list[str]) -> bool:
    if not isinstance(function, Mapping):
        return False
    ok = True
    for key in ("name", "arguments"):
        value = function.get(key)
        if isinstance(value, str):
            out.append(value)
        elif value is not None:
            ok = False
    return ok
