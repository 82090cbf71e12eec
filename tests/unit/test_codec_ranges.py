"""Avro int and long ranges are checked on encode (issue 16): fastavro writes 2^40 into an `int` field (Java readers
refuse the record), a bool or a float (truncated) into int and long fields. The codec refuses them, naming the path
of the field, wherever the field sits: top level, nested records, arrays, maps, nullable unions and tagged unions of
records."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.schemas import codec
from ostinato.schemas.codec import decode, encode

Record = dict[str, Any]
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
COMMAND = "ostinato.command.Command"


def command(body: tuple[str, Record], **envelope: Any) -> Record:
    return {"namespace": "d", "workflow_id": "w", "request_id": "r", "time_ms": 1, "body": body, **envelope}


def completion(**fields: Any) -> Record:
    return command(("ostinato.command.RespondWorkflowTaskCompleted",
                    {"scheduled_event_id": 1, "attempt": 1, "commands": [], **fields}))


def timer(timeout: Any) -> Record:
    return completion(commands=[("ostinato.command.StartTimerCommand",
                                 {"timer_id": "t", "start_to_fire_timeout_ms": timeout})])


def failed(**failure: Any) -> Record:
    return command(("ostinato.command.RespondActivityTaskFailed", {
        "scheduled_event_id": 1, "attempt": 1, "failure": {"message": "m", **failure}}))


@pytest.mark.parametrize(("record", "message"), [
    pytest.param(command(("ostinato.command.TerminateWorkflowExecution", {}), time_ms=2**63),
                 r"Command.time_ms is 9223372036854775808, too large for an Avro long \(at most 9223372036854775807\)",
                 id="long too large"),
    pytest.param(command(("ostinato.command.TerminateWorkflowExecution", {}), time_ms=-(2**63) - 1),
                 r"Command.time_ms is -9223372036854775809, too small for an Avro long", id="long too small"),
    pytest.param(command(("ostinato.command.TerminateWorkflowExecution", {}), reply_partition=2**40),
                 r"Command.reply_partition is 1099511627776, too large for an Avro int \(at most 2147483647\)",
                 id="nullable int"),
    pytest.param(completion(attempt=2**40), r"Command.body<RespondWorkflowTaskCompleted>.attempt is 1099511627776, "
                 r"too large for an Avro int", id="int in a tagged union"),
    pytest.param(completion(attempt=INT_MIN - 1), r"\.attempt is -2147483649, too small for an Avro int",
                 id="int too small"),
    pytest.param(completion(sdk_flags=[1, 2**31]), r"Command.body<RespondWorkflowTaskCompleted>.sdk_flags\[1\] is "
                 r"2147483648, too large", id="int in an array"),
    pytest.param(timer(2**64), r"\.commands\[0\]<StartTimerCommand>.start_to_fire_timeout_ms is 18446744073709551616",
                 id="long in an array of tagged unions"),
    pytest.param(failed(cause={"message": "c", "next_retry_delay_ms": 2**63}),
                 r"<RespondActivityTaskFailed>.failure.cause.next_retry_delay_ms is 9223372036854775808",
                 id="recursive record"),
    pytest.param(command(("ostinato.command.TerminateWorkflowExecution", {}), time_ms=True),
                 r"Command.time_ms is True, a bool where an Avro long is expected", id="bool as long"),
    pytest.param(completion(attempt=False), r"\.attempt is False, a bool where an Avro int is expected",
                 id="bool as int"),
    pytest.param(completion(attempt=1.5), r"\.attempt is 1.5, a float where an Avro int is expected",
                 id="float as int"),
    pytest.param(command(("ostinato.command.TerminateWorkflowExecution", {}), time_ms=1.0),
                 r"Command.time_ms is 1.0, a float where an Avro long is expected", id="integral float as long"),
    pytest.param(completion(attempt=None), r"\.attempt is None", id="null where null is not allowed"),
])
def test_out_of_range_or_non_integer_values_are_refused_with_their_path(record: Record, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode(COMMAND, record)


def test_every_record_type_is_checked_not_only_commands() -> None:
    info = codec.registry().schema("ostinato.visibility.VisibilityRecord")
    assert info.check is not None
    record = {"namespace": "d", "workflow_id": "w", "run_id": "r", "workflow_type": "T", "task_queue": "q",
              "status": "RUNNING", "start_time_ms": 0, "execution_time_ms": 0, "history_length": 2**70,
              "history_size_bytes": 0, "first_execution_run_id": "r", "version": 1}
    with pytest.raises(ValueError, match=r"VisibilityRecord.history_length is 1180591620717411303424"):
        encode("ostinato.visibility.VisibilityRecord", record)


def test_map_values_are_checked_with_their_key() -> None:
    """No shipped schema has a map of numbers yet; the checker handles one all the same."""
    check = codec.datum_checker({"type": "record", "name": "n.M", "fields": [
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "spans", "type": {"type": "array", "items": {"type": "map", "values": ["null", "long"]}}}]})
    assert check is not None
    check({"counts": {"a": 1}, "spans": [{"x": None, "y": 5}]})
    with pytest.raises(Exception, match=r"too large for an Avro int") as raised:
        check({"counts": {"a": 1, "b": 2**31}, "spans": []})
    assert raised.value.message("M") == ("M.counts['b'] is 2147483648, too large for an Avro int "  # type: ignore
                                         "(at most 2147483647)")
    with pytest.raises(Exception) as raised:
        check({"counts": {}, "spans": [{}, {"z": True}]})
    assert raised.value.message("M").startswith("M.spans[1]['z'] is True, a bool")  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [INT_MIN, -1, 0, 1, INT_MAX])
def test_the_whole_int_range_is_written(value: int) -> None:
    assert decode(encode(COMMAND, completion(attempt=value)))[1]["body"][1]["attempt"] == value


@pytest.mark.parametrize("value", [LONG_MIN, 0, LONG_MAX])
def test_the_whole_long_range_is_written(value: int) -> None:
    assert decode(encode(COMMAND, timer(value)))[1]["body"][1]["commands"][0][1]["start_to_fire_timeout_ms"] == value


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**80), max_value=2**80))
def test_an_int_encodes_exactly_when_it_is_in_range(value: int) -> None:
    try:
        data = encode(COMMAND, completion(attempt=value))
    except ValueError as exc:
        assert not INT_MIN <= value <= INT_MAX
        assert "Command.body<RespondWorkflowTaskCompleted>.attempt" in str(exc)
    else:
        assert INT_MIN <= value <= INT_MAX and decode(data)[1]["body"][1]["attempt"] == value


def test_a_missing_field_with_a_default_is_still_allowed() -> None:
    """The check leaves what fastavro handles (defaults, missing fields) to fastavro."""
    record = command(("ostinato.command.RecordActivityTaskStarted", {"scheduled_event_id": 5, "attempt": 1}))
    assert decode(encode(COMMAND, record))[1]["reply_partition"] is None
