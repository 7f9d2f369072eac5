"""The contract package: the hand-off record, the vocabulary, and what is defined once.

The hook path builds plain tuples in ``HookEvent``'s field order (a NamedTuple there
would cost more than the rest of the hook path); these tests tie every tuple each hook
form builds to the named record, and the vocabulary to the catalogue, the alert rules
and the worker's tables.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import yaml
from support.engines import transcript
from support.paths import REPO

import observed_engine
from observed_engine import Registry, observe
from observed_engine.contract import catalogue, hooks, vocabulary
from observed_engine.contract.events import STATE_FIELDS, CompressCapture, HookEvent, event_state
from observed_engine.worker import usage
from observed_engine.worker.handlers import HANDLERS, USAGE_COLUMNS


class AllForms:
    """An engine with a hook of every form: exact leaf, variadic leaf, guarded plain, state
    reading, compress, tool, select_context, clone_for_agent."""

    name = "all-forms"

    def __init__(self):
        self.last_prompt_tokens = 0
        self.threshold_tokens = 100
        self.context_length = 1000

    def should_compress(self, prompt_tokens=None):                  # exact leaf
        return False

    def get_status(self, *args, **kwargs):                          # leaf, generic form
        return {}

    def update_from_response(self, usage):                          # exact leaf, reads state
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)

    def on_session_start(self, session_id, **kwargs):               # guarded plain
        pass

    def compress(self, messages, current_tokens=None, focus_topic=None):
        return messages[:2]

    def handle_tool_call(self, name, args, **kwargs):
        return "{}"

    def select_context(self, request_messages, **kwargs):
        return list(request_messages)

    def clone_for_agent(self):
        return AllForms()


@pytest.fixture
def captured():
    """A private pipeline whose worker hands us each raw batch before processing it."""
    registry = Registry()
    engine = observe(AllForms(), settings={"store": False}, registry=registry)
    pipeline = observed_engine.api.pipeline_of(engine)
    raw = []
    process = pipeline.recorder._process_batch

    def keep(batch):
        raw.extend(batch)
        process(batch)

    pipeline.recorder._process_batch = keep
    yield engine, pipeline, raw
    registry.shutdown(5.0)


def test_every_hook_form_builds_a_hook_event_tuple(captured):
    engine, pipeline, raw = captured
    engine.should_compress(5)
    engine.get_status("x", detail=True)
    engine.update_from_response({"prompt_tokens": 42})
    engine.on_session_start("s-1", platform="cli")
    messages = transcript(8)
    engine.compress(messages, current_tokens=900)
    engine.handle_tool_call("recall", {"q": 1})
    engine.select_context(messages[:3])
    engine.clone_for_agent()
    assert pipeline.flush(5.0)

    events = [e for e in raw if type(e[0]) is int]
    assert [hooks.HOOK_SPECS[e[0]].name for e in events] == [
        "should_compress", "get_status", "update_from_response", "on_session_start", "compress",
        "handle_tool_call", "select_context", "clone_for_agent"]
    n = len(HookEvent._fields)
    for raw_event in events:
        # the exact leaf form of a reads_state hook appends the three STATE_FIELDS after the ten
        # fields (one tuple fewer on the host's thread); every other event has exactly the ten
        spec = hooks.HOOK_SPECS[raw_event[0]]
        expected = n + len(STATE_FIELDS) if spec.reads_state and spec.leaf else n
        assert type(raw_event) is tuple and len(raw_event) == expected, spec.name
        ev = HookEvent._make(raw_event[:n])
        assert ev.engine is engine
        assert isinstance(ev.t0, int) and isinstance(ev.t1, int) and ev.t0 <= ev.t1
        assert ev.exc is None and type(ev.args) is tuple
    by_hook = {hooks.HOOK_SPECS[e[0]].name: HookEvent._make(e[:n]) for e in events}
    raw_by_hook = {hooks.HOOK_SPECS[e[0]].name: e for e in events}
    assert by_hook["should_compress"].args == (5,) and by_hook["should_compress"].result is False
    assert by_hook["get_status"].args == ("x",) and dict(by_hook["get_status"].kwargs) == {"detail": True}
    assert by_hook["update_from_response"].extra is None
    assert event_state(raw_by_hook["update_from_response"])[0] == 42   # STATE_FIELDS, copied right after the call
    assert dict(by_hook["on_session_start"].kwargs) == {"platform": "cli"}
    compress = by_hook["compress"]
    assert isinstance(compress.extra, CompressCapture)
    assert len(compress.extra.before) == len(messages) and len(compress.extra.after) == 2 and compress.extra.late is False
    assert compress.span_or_parent is not None and hasattr(compress.span_or_parent, "end")   # the live span
    assert by_hook["select_context"].extra == tuple(messages[:3])
    assert by_hook["handle_tool_call"].args == ("recall", {"q": 1})


def test_hook_event_fields_are_the_documented_order():
    assert HookEvent._fields == ("hook", "engine", "t0", "t1", "exc", "args", "kwargs", "result",
                                 "span_or_parent", "extra")
    assert CompressCapture._fields == ("before", "after", "late", "state", "summary")


def test_handlers_name_hooks_of_the_table_and_take_one_signature():
    for name, handler in HANDLERS.items():
        assert name in hooks.BY_NAME, name
        assert len(inspect.signature(handler).parameters) == 6, name


def test_vocabulary_matches_the_catalogue_label_values():
    by_key = catalogue.BY_KEY
    assert by_key["hook_calls"].label_values["outcome"] == vocabulary.CALL_OUTCOMES
    assert by_key["compressions"].label_values["outcome"] == vocabulary.COMPRESS_OUTCOMES
    assert by_key["summary_failures"].label_values["kind"] == vocabulary.SUMMARY_FAILURE_KINDS
    assert by_key["summary_failures"].label_values["cause"] == vocabulary.SUMMARY_FAILURE_CAUSES
    assert by_key["compression_timeouts"].label_values["kind"] == vocabulary.TIMEOUT_KINDS
    assert by_key["fail_open"].label_values["reason"] == vocabulary.FAIL_OPEN_REASONS
    assert by_key["selections"].label_values["result"] == vocabulary.SELECTION_RESULTS
    assert by_key["usage_tokens"].label_values["token_type"] == vocabulary.TOKEN_TYPES
    assert by_key["telemetry_dropped"].label_values["signal"] == vocabulary.DROP_SIGNALS
    assert by_key["compression_tokens"].label_values["stage"] == vocabulary.STAGES
    assert by_key["tool_result_prunes"].label_values["outcome"] == vocabulary.PRUNE_OUTCOMES
    assert by_key["turns"].label_values["outcome"] == vocabulary.TURN_OUTCOMES
    assert set(by_key["turns"].label_values["exit_reason"]) == {
        *vocabulary.TURN_EXIT_REASONS, vocabulary.EXIT_REASON_OTHER, vocabulary.UNSPECIFIED}
    assert by_key["clones"].label_values["outcome"] == vocabulary.CLONE_OUTCOMES
    assert tuple(usage.TOKEN_TYPES) == vocabulary.TOKEN_TYPES
    assert tuple(USAGE_COLUMNS) == vocabulary.TOKEN_TYPES


def test_vocabulary_alerts_are_the_shipped_rules_with_their_severities():
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    shipped = {r["alert"]: r["labels"]["severity"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert set(shipped) == set(vocabulary.ALERT_NAMES)
    for name, severity in shipped.items():
        if "{{" in severity:       # HermesContextSummaryFailing: critical for auth, else warning
            assert name == vocabulary.ALERT_SUMMARY_FAILING
            assert vocabulary.summary_failure_severity(vocabulary.CAUSE_AUTH) == vocabulary.CRITICAL
            assert vocabulary.summary_failure_severity(vocabulary.CAUSE_NETWORK) == vocabulary.WARNING
            assert f'"{vocabulary.CAUSE_AUTH}"' in severity
        else:
            assert vocabulary.ALERT_SEVERITIES[name] == severity, name


def test_contract_imports_only_the_standard_library():
    """Imported through the (lazy) package root, the contract pulls in no third-party module."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import observed_engine.contract.catalogue, observed_engine.contract.events, observed_engine.contract.hooks\n"
        "import observed_engine.contract.promql, observed_engine.contract.spans, observed_engine.contract.store_schema\n"
        "import observed_engine.contract.vocabulary\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "third = sorted(m for m in new if m != 'observed_engine' and m not in sys.stdlib_module_names)\n"
        "print(third)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
