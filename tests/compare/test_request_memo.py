"""The sweep's request memo (compare/request_memo.py): the real OpenAI SDK sends the same bytes
with it as without it, and a memo that would differ turns itself off."""

from __future__ import annotations

import json
import logging

import openai
import pytest
from openai.resources.chat.completions import completions as sdk_module
from support.fake_llm_server import FakeLLMServer

from observed_engine.compare import request_memo

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                           "parameters": {"type": "object", "properties": {
                                               "path": {"type": "string"}, "limit": {"type": "integer"}},
                                               "required": ["path"]}}},
         {"type": "function", "function": {"name": "terminal", "description": "Run a command ünïcode",
                                           "parameters": {"type": "object", "properties": {}}}}]


def conversation():
    """Hermes-shaped messages: a system prompt, multimodal and plain user turns, tool calls and
    their results, an assistant message with extra keys Hermes keeps."""
    return [
        {"role": "system", "content": "You are Hermes."},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "", "reasoning": "think", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "file text \u2603"},
        {"role": "assistant", "content": "done", "finish_reason": "stop"},
        {"role": "user", "content": "and now?"},
    ]


def send_turns(client, streams):
    msgs = conversation()
    for i, stream in enumerate(streams):
        msgs = msgs + [{"role": "user", "content": f"turn {i}"}]
        kwargs = dict(model="m", messages=msgs, tools=TOOLS, temperature=0.3, max_tokens=100)
        if stream:
            for _ in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
                pass
        else:
            client.chat.completions.create(**kwargs)


@pytest.fixture
def memo():
    installed = request_memo.install()
    assert installed is not None and sdk_module.maybe_transform is installed
    yield installed
    request_memo.uninstall()
    assert sdk_module.maybe_transform is installed.original


def test_the_sdk_sends_the_same_bytes_with_the_memo(memo):
    streams = [False, True] * 20                      # past CHECK_FIRST: memo answers unchecked too
    with FakeLLMServer(reply_chars=20) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        send_turns(client, streams)
        with_memo = [json.dumps(body, ensure_ascii=False) for body in server.requests]   # key order kept
        request_memo.uninstall()
        try:
            server.requests.clear()
            send_turns(client, streams)
            without = [json.dumps(body, ensure_ascii=False) for body in server.requests]
        finally:
            request_memo.install()
    assert with_memo == without and len(with_memo) == len(streams)
    assert memo.disabled is None
    assert memo.hits > memo.misses > 0, (memo.hits, memo.misses)


def test_a_memo_that_would_differ_turns_itself_off(caplog):
    def unlike_whole(data, _expected):
        # transforms a one-item list apart from the same item in a longer one
        out = dict(data)
        if len(out.get("messages") or []) == 1:
            out["messages"] = [{**out["messages"][0], "x": 1}]
        return out

    memo = request_memo.RequestMemo(unlike_whole)
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "model": "m"}
    caplog.set_level(logging.WARNING, logger="observed_engine.compare.request_memo")
    assert memo(body, None) == body                        # the whole-body result, not the memo's
    assert memo.disabled and "differed" in memo.disabled
    assert memo(body, None) == body and len(caplog.records) == 1


def test_an_item_that_is_not_json_is_transformed_each_time():
    calls = []

    def whole(data, _expected):
        calls.append(len(data.get("messages") or []))
        return dict(data)

    memo = request_memo.RequestMemo(whole)
    odd = {"role": "user", "content": object()}
    body = {"messages": [odd], "model": "m"}
    for _ in range(3):
        memo(body, None)
    assert memo.misses == 3 and memo.hits == 0 and memo.disabled is None


def test_install_is_counted_and_uninstall_restores_the_sdk():
    original = sdk_module.maybe_transform
    first = request_memo.install()
    second = request_memo.install()
    assert first is second
    request_memo.uninstall()
    assert sdk_module.maybe_transform is first
    request_memo.uninstall()
    assert sdk_module.maybe_transform is original
    assert request_memo.last_stats["disabled"] is None
