"""Hook-time message snapshots stay apart from malformed messages that look like them."""

from observed_engine.contract.events import as_messages, snapshot_messages
from observed_engine.worker.messages import message_problem


def test_a_tuple_message_is_malformed_not_a_snapshot():
    messages = [{"role": "user", "content": "hi"}, ("assistant", "looks like a snapshot", None)]
    snap = snapshot_messages(messages)
    assert message_problem(snap) == "message_not_a_dict"
    assert message_problem(messages) == "message_not_a_dict"
    assert as_messages(snap)[1] == ("assistant", "looks like a snapshot", None)


def test_snapshot_is_immune_to_in_place_edits_and_round_trips():
    msg = {"role": "assistant", "content": "before", "tool_calls": [{"id": "1"}]}
    snap = snapshot_messages([msg])
    msg["content"] = "after"
    assert as_messages(snap) == [{"role": "assistant", "content": "before", "tool_calls": [{"id": "1"}]}]
    assert message_problem(snap) is None
    assert snapshot_messages(("not", "a list")) is None
