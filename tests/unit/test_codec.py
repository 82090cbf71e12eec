"""Single-object encoding: round trips, schema evolution, and one typed error for anything unreadable."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import given
from hypothesis import strategies as st

from ostinato.schemas import codec
from ostinato.schemas.cluster import SETTINGS_TYPE, ClusterSettings
from ostinato.schemas.codec import HEADER_LEN, MAGIC, DecodeError, SchemaRegistry, decode, encode

DATA = Path(__file__).parent / "data"
SETTINGS = ClusterSettings("acme", 16, 3, 8, 1_700_000_000_000, "ops@host")


def test_header_is_magic_and_the_schema_fingerprint() -> None:
    data = SETTINGS.encode()
    info = codec.registry().schema(SETTINGS_TYPE)
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert data[2:HEADER_LEN] == info.fingerprint
    assert ClusterSettings.decode(data) == SETTINGS


def test_fingerprints_follow_the_avro_specification() -> None:
    # "int" is the spec's classic example; fastavro's independent implementation agrees on every schema.
    assert codec.fingerprint('"int"').hex() == fastavro_fingerprint('"int"', "CRC-64-AVRO") == "8f5c393f1ad57572"
    for info in codec.registry().schemas:
        assert info.fingerprint.hex() == fastavro_fingerprint(info.canonical, "CRC-64-AVRO")


def test_canonical_form_matches_fastavro_for_self_contained_schemas() -> None:
    info = codec.registry().schema(SETTINGS_TYPE)
    assert info.canonical == to_parsing_canonical_form(parse_schema(info.source))


def test_canonical_form_defines_a_named_type_once_then_refers_to_it() -> None:
    named: dict[str, object] = {}
    parse_schema({"type": "record", "name": "P", "namespace": "n", "fields": [{"name": "a", "type": "int"}]},
                 named_schemas=named)
    outer = {"type": "record", "name": "O", "namespace": "n",
             "fields": [{"name": "x", "type": "n.P"}, {"name": "y", "type": ["null", "P"]}]}
    assert codec.canonical_form(outer, named, "n") == (
        '{"name":"n.O","type":"record","fields":[{"name":"x","type":{"name":"n.P","type":"record","fields":'
        '[{"name":"a","type":"int"}]}},{"name":"y","type":["null","n.P"]}]}'
    )


def test_a_record_written_with_an_older_schema_decodes_with_the_current_one() -> None:
    old_source = json.loads((DATA / "cluster_settings_v0.avsc").read_text())
    old = {"topic_prefix": "legacy", "shards": 2, "replication_factor": 1, "created_at_ms": 42}
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(old_source), old)
    old_fp = codec.fingerprint(to_parsing_canonical_form(parse_schema(old_source)))
    data = MAGIC + old_fp + body.getvalue()

    fresh = SchemaRegistry()
    with pytest.raises(DecodeError, match=f"unknown schema fingerprint {old_fp.hex()}"):
        fresh.decode(data)
    fresh.add_writer_schema(old_source)  # as learned from the schemas topic
    name, record = fresh.decode(data)
    assert name == SETTINGS_TYPE
    assert record == {**old, "reply_partitions": 8, "created_by": ""}  # the new fields take their defaults


def test_encoding_a_wrong_record_names_the_type() -> None:
    with pytest.raises(ValueError, match=SETTINGS_TYPE):
        encode(SETTINGS_TYPE, {"topic_prefix": "p"})
    with pytest.raises(ValueError, match="no Avro record type 'nope'"):
        encode("nope", {})


@pytest.mark.parametrize(("data", "message"), [
    (b"", "not an Avro single-object record"),
    (b"\xc3\x01\x00", "not an Avro single-object record"),
    (b"{json}", "not an Avro single-object record"),
    (b"\xc3\x01" + b"\x00" * 8 + b"body", "unknown schema fingerprint 0000000000000000"),
])
def test_unreadable_bytes_raise_one_typed_error(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(data)


def test_truncated_and_padded_bodies_are_rejected() -> None:
    data = SETTINGS.encode()
    with pytest.raises(DecodeError, match="corrupt"):
        decode(data[:-3])
    with pytest.raises(DecodeError, match="2 trailing bytes"):
        decode(data + b"\x00\x00")


@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):  # any other exception fails the test
        decode(data)


@given(st.sampled_from([s.fingerprint for s in codec.registry().schemas]), st.binary(max_size=300))
def test_random_bodies_behind_a_valid_header_only_ever_raise_decode_error(fp: bytes, body: bytes) -> None:
    try:
        name, record = decode(MAGIC + fp + body)
    except DecodeError:
        return
    assert isinstance(record, dict) and name in {s.name for s in codec.registry().schemas}


def test_union_branches_keep_their_names_when_an_older_writer_is_resolved() -> None:
    """Regression: fastavro fails to name union branches while resolving; the codec must not."""
    command = "ostinato.command.Command"
    current = json.loads(codec.registry().schema(command).canonical)
    old = {**current, "fields": [f for f in current["fields"] if f["name"] not in ("identity", "reply_partition")]}
    registry = SchemaRegistry()
    info = registry.add_writer_schema(old)
    completion = ("ostinato.command.RespondWorkflowTaskCompleted", {
        "scheduled_event_id": 3, "attempt": 1, "force_create_new_task": False, "sdk_flags": [], "build_id": "b",
        "versioning_behavior": "",
        "started_time_ms": 2, "rejected_updates": [], "commands": [
            ("ostinato.command.StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": 5}),
            ("ostinato.command.CancelTimerCommand", {"timer_id": "t"}),
        ],
    })
    record = {"namespace": "default", "workflow_id": "w", "run_id": "r", "request_id": "q", "time_ms": 1,
              "body": completion}
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(old, named_schemas={}), record)

    name, decoded = registry.decode(MAGIC + info.fingerprint + body.getvalue())
    assert name == command
    assert decoded == {**record, "identity": "", "reply_partition": None}


def test_the_worked_example_in_the_schemas_readme_is_current() -> None:
    """schemas/README.md shows a command byte by byte; it must stay what the codec really writes."""
    from ostinato.schemas import partition_for

    readme = (Path(__file__).parents[2] / "schemas" / "README.md").read_text()
    block = readme.split("value = 85 bytes:\n", 1)[1].split("```", 1)[0]
    shown = bytes.fromhex("".join(m.group(0) for line in block.splitlines()
                                  if (m := re.match(r"(?:[0-9a-f]{2} )+", line + " "))))
    record = {
        "namespace": "default", "workflow_id": "order-1", "run_id": "4f1c", "request_id": "r-1",
        "identity": "worker-7", "time_ms": 1764400000000, "reply_partition": None,
        "body": ("ostinato.command.RespondActivityTaskCompleted", {
            "scheduled_event_id": 5, "attempt": 1,
            "result": [{"metadata": {"encoding": b"json/plain"}, "data": b'"ok"'}]}),
    }
    assert encode("ostinato.command.Command", record) == shown
    assert len(shown) == 85
    assert (partition_for("default/order-1", 4), partition_for("default/order-1", 16)) == (1, 13)


_TERMINATE = ("ostinato.command.TerminateWorkflowExecution", {"reason": "gc"})
_ENVELOPE = {"namespace": "d", "workflow_id": "w", "request_id": "r", "time_ms": 1}


@pytest.mark.parametrize(("record", "message"), [
    # {"reason": ...} fits three commands; fastavro would silently pick the first that fits.
    ({**_ENVELOPE, "body": {"reason": "gc"}}, r"Command.body is a union of record types: give it as \(type name"),
    ({**_ENVELOPE, "body": ("ostinato.command.RespondWorkflowTaskCompleted", {
        "scheduled_event_id": 1, "attempt": 1, "commands": [{"timer_id": "t"}]})},
     r"Command.body<RespondWorkflowTaskCompleted>.commands\[0\] is a union of record types"),
    ({**_ENVELOPE, "run_Id": "typo", "body": _TERMINATE}, "more fields than the schema specifies: run_Id"),
    ({"namespace": "d", "workflow_id": "w", "time_ms": 1, "body": _TERMINATE}, "Field request_id"),
    ({**_ENVELOPE, "time_ms": 2**70, "body": _TERMINATE}, "too large"),
])
def test_records_that_would_be_written_wrongly_are_refused(record: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode("ostinato.command.Command", record)


def test_tagged_unions_in_nested_lists_are_checked_too() -> None:
    event = {"event_id": 1, "event_time_ms": 0, "event_type": "TIMER_FIRED",
             "attributes": {"timer_id": "t", "started_event_id": 0}}
    task = {"namespace": "d", "workflow_id": "w", "run_id": "r", "workflow_type": "T", "task_queue": "q",
            "scheduled_event_id": 1, "started_event_id": 2, "attempt": 1, "events": [event],
            "scheduled_time_ms": 0, "deadline_ms": 0}
    with pytest.raises(ValueError, match=r"WorkflowTask.events\[0\].attributes is a union"):
        encode("ostinato.task.WorkflowTask", task)
    event["attributes"] = ("ostinato.history.TimerFiredEventAttributes", event["attributes"])
    assert decode(encode("ostinato.task.WorkflowTask", task))[1]["events"][0] == {**event, "applier_version": 1}
