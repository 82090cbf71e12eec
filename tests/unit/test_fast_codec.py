"""The compiled Avro writers and readers (schemas/fast_writer.py, fast_reader.py) write and read what fastavro
writes and reads, for every schema Ostinato has, and leave every datum or byte string they are unsure of to the
careful path, which explains what is wrong."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ostinato.schemas import codec, wire
from ostinato.schemas.fast_reader import Reader, compile_reader
from ostinato.schemas.fast_writer import Encoded, Unsure, Writer, _varint, compile_writer
from ostinato.schemas.native_writer import compile_native_reader, compile_native_writer

REGISTRY = codec.registry()
NAMES = sorted(info.name for info in REGISTRY.schemas)
NAMED: dict[str, Any] = REGISTRY._named


def datum(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Valid data of an expanded schema: the values Ostinato writes, and the edges (bounds, empty, unicode)."""
    if isinstance(schema, str):
        primitive = {"null": st.none(), "boolean": st.booleans(), "int": st.integers(-(2**31), 2**31 - 1),
                     "long": st.integers(-(2**63), 2**63 - 1), "double": st.floats(allow_nan=False),
                     "float": st.floats(allow_nan=False, width=32), "string": st.text(max_size=20),
                     "bytes": st.binary(max_size=20)}
        return primitive[schema] if schema in primitive else datum(NAMED[schema], depth)
    if isinstance(schema, list):
        if schema[0] == "null" and len(schema) == 2:
            return st.none() if depth > 3 else st.none() | datum(schema[1], depth + 1)
        branches = [s if isinstance(s, dict) else NAMED[s] for s in schema]
        return st.one_of(*[st.tuples(st.just(b["name"]), datum(b, depth + 1)) for b in branches])
    kind = schema["type"]
    if isinstance(kind, dict | list):
        return datum(kind, depth)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(datum(schema["items"], depth + 1), max_size=0 if depth > 3 else 3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), datum(schema["values"], depth + 1), max_size=0 if depth > 3 else 3)
    if kind == "record":
        # fastavro cannot write the default of a bytes field (a str in Avro's JSON): Ostinato always gives one
        omittable = [f for f in schema["fields"] if ("default" in f and not isinstance(f["default"], str | bytes))
                     or ("default" in f and f["type"] != "bytes")]
        required = {f["name"]: datum(f["type"], depth + 1) for f in schema["fields"] if f not in omittable}
        optional = {f["name"]: datum(f["type"], depth + 1) for f in omittable}
        return st.fixed_dictionaries(required, optional=optional)
    return datum(kind, depth)


# The generated Python writers and readers, and the same plans on the C engine (built at install: a missing engine
# fails here).
COMPILERS = {("writer", "python"): compile_writer, ("writer", "native"): compile_native_writer,
             ("reader", "python"): compile_reader, ("reader", "native"): compile_native_reader}
ENGINES = ("native", "python")
engines = pytest.mark.parametrize("engine", ENGINES)


@functools.cache
def compiled(kind: str, name: str, engine: str) -> Any:
    function = COMPILERS[kind, engine](REGISTRY.schema(name).parsed, NAMED)
    assert function is not None, f"{name} has no compiled {kind} on the {engine} engine"
    return function


def writer_of(name: str, engine: str) -> Writer:
    writer: Writer = compiled("writer", name, engine)
    return writer


def reader_of(name: str, engine: str) -> Reader:
    reader: Reader = compiled("reader", name, engine)
    return reader


def fast(name: str, record: Any, engine: str = "python") -> bytes:
    writer = writer_of(name, engine)
    out = bytearray()
    writer(record, out)
    return bytes(out)


def careful(name: str, record: Any) -> bytes:
    return REGISTRY._encode_carefully(name, REGISTRY.schema(name), record)[codec.HEADER_LEN:]


def read_fast(name: str, body: bytes, engine: str = "python") -> Any:
    reader = reader_of(name, engine)
    record, end = reader(body, 0)
    if end != len(body):
        raise Unsure
    return record


def read_carefully(name: str, body: bytes) -> Any:
    info = REGISTRY.schema(name)
    return REGISTRY._decode_carefully(info, info, b"\0" * codec.HEADER_LEN + body)


@pytest.mark.parametrize("name", NAMES)
def test_every_schema_compiles(name: str) -> None:
    assert compile_writer(REGISTRY.schema(name).parsed, NAMED) is not None
    assert compile_reader(REGISTRY.schema(name).parsed, NAMED) is not None


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@engines
def test_compiled_writers_and_readers_agree_with_fastavro(name: str, engine: str, data: st.DataObject) -> None:
    record = data.draw(datum(REGISTRY.schema(name).parsed))
    body = fast(name, record, engine)
    assert body == careful(name, record)
    assert repr(read_fast(name, body, engine)) == repr(read_carefully(name, body))  # the same values, types, order


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_varints_past_the_table(z: int) -> None:
    expected = bytearray()
    rest = z
    while rest > 0x7F:
        expected.append(rest & 0x7F | 0x80)
        rest >>= 7
    expected.append(rest)
    assert _varint(z) == bytes(expected)


TIMER = "ostinato.history.TimerFiredEventAttributes"


@pytest.mark.parametrize(("what", "body"), [
    ("truncated", fast(TIMER, {"timer_id": "abc", "started_event_id": 300})[:-1]),
    ("trailing bytes", fast(TIMER, {"timer_id": "abc", "started_event_id": 300}) + b"\x00"),
    ("a string longer than the record", b"\x40abc\x02"),
    ("a negative length", b"\x03abc\x02"),
    ("a varint that never ends", b"\x06abc" + b"\xff" * 11),
])
@engines
def test_what_the_compiled_reader_is_unsure_of_is_refused_by_fastavro(what: str, body: bytes, engine: str) -> None:
    with pytest.raises((Unsure, IndexError, UnicodeDecodeError)):
        read_fast(TIMER, body, engine)
    with pytest.raises(codec.DecodeError):
        read_carefully(TIMER, body)


@engines
def test_a_union_index_out_of_range_is_refused(engine: str) -> None:
    body = bytearray(fast("ostinato.history.HistoryEvent", {
        "event_id": 1, "event_time_ms": 0, "event_type": "TIMER_FIRED", "applier_version": 1,
        "attributes": ("ostinato.history.TimerFiredEventAttributes", {"timer_id": "t", "started_event_id": 1})}))
    body[body.index(b"\x02t") - 1] = 0x7E  # the branch index: 63 of 44
    with pytest.raises((KeyError, Unsure)):
        read_fast("ostinato.history.HistoryEvent", bytes(body), engine)
    with pytest.raises(codec.DecodeError):
        read_carefully("ostinato.history.HistoryEvent", bytes(body))


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("an unknown field", {"timer_id": "t", "start_to_fire_timeout_ms": 5, "typo": 1}, "typo"),
    ("a missing field", {"timer_id": "t"}, "start_to_fire_timeout_ms"),
    ("a bool for a long", {"timer_id": "t", "start_to_fire_timeout_ms": True}, "bool"),
    ("a float for a long", {"timer_id": "t", "start_to_fire_timeout_ms": 5.0}, "float"),
    ("a long out of range", {"timer_id": "t", "start_to_fire_timeout_ms": 2**63}, "too large"),
    ("bytes for a string", {"timer_id": b"t", "start_to_fire_timeout_ms": 5}, "timer_id"),
]


@pytest.mark.parametrize(("what", "record", "said"), BAD, ids=[b[0] for b in BAD])
@engines
def test_what_the_compiled_writer_is_unsure_of_is_refused_by_the_careful_path(
        what: str, record: dict[str, Any], said: str, engine: str) -> None:
    name = "ostinato.command.StartTimerCommand"
    with pytest.raises((Unsure, KeyError)):
        fast(name, record, engine)
    with pytest.raises(ValueError, match=said):
        REGISTRY.encode(name, record)


@engines
def test_an_untagged_union_of_records_is_left_to_the_careful_path(engine: str) -> None:
    event = {"event_id": 1, "event_time_ms": 0, "event_type": "TIMER_FIRED", "applier_version": 1,
             "attributes": {"timer_id": "t", "started_event_id": 1}}
    with pytest.raises(Unsure):
        fast("ostinato.history.HistoryEvent", event, engine)
    with pytest.raises(ValueError, match="union"):
        REGISTRY.encode("ostinato.history.HistoryEvent", event)


@engines
def test_an_int_field_refuses_a_long_value(engine: str) -> None:
    task = {"scheduled_event_id": 1, "started_event_id": 0, "attempt": 2**31, "task_queue": "q",
            "scheduled_time_ms": 0, "started_time_ms": 0, "timeout_ms": 0}
    with pytest.raises(Unsure):
        fast("ostinato.state.WorkflowTaskState", task, engine)
    with pytest.raises(ValueError, match="too large for an Avro int"):
        REGISTRY.encode("ostinato.state.WorkflowTaskState", task)


@pytest.mark.parametrize("empty", [[], ()], ids=["list", "tuple"])
@engines
def test_an_empty_array_is_not_written_where_a_map_belongs(empty: Any, engine: str) -> None:
    name = "ostinato.command.ContinueAsNewWorkflowExecutionCommand"
    command = {"workflow_type": "W", "task_queue": "q", "input": [], "run_timeout_ms": None, "task_timeout_ms": None,
               "backoff_start_interval_ms": 0, "retry_policy": None, "memo": empty, "search_attributes": None,
               "header": {}}
    assert fast(name, {**command, "memo": {}}, engine) == careful(name, {**command, "memo": {}})
    with pytest.raises(Unsure):
        fast(name, command, engine)
    with pytest.raises(ValueError):
        REGISTRY.encode(name, command)


@engines
def test_a_varint_past_64_bits_is_left_to_fastavro(engine: str) -> None:
    body = b"\x06abc" + b"\xff" * 9 + b"\x03"  # fastavro wraps it; the compiled reader does not guess
    with pytest.raises(Unsure):
        read_fast(TIMER, body, engine)
    assert REGISTRY.decode(REGISTRY.encode(TIMER, {"timer_id": "x", "started_event_id": 1})[:codec.HEADER_LEN] + body
                           )[1] == read_carefully(TIMER, body)


def test_prepared_types_are_generated_before_their_first_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor prepares its types at start: its first batch must not generate code (most of a second)."""
    registry = codec.SchemaRegistry()
    registry.prepare([wire.CURRENT_RUN])

    def generating(*_: Any) -> None:
        raise AssertionError("generated on the first record, not at prepare")

    monkeypatch.setattr(codec, "compile_writer", generating)
    monkeypatch.setattr(codec, "compile_reader", generating)
    record = {"run_id": "r-1", "status": "RUNNING", "start_time_ms": 1}
    name, back = registry.decode(registry.encode(wire.CURRENT_RUN, record))
    assert name == wire.CURRENT_RUN and back["run_id"] == "r-1"
    with pytest.raises(ValueError, match="no Avro record type"):
        registry.prepare(["ostinato.state.NoSuchThing"])


def _event(event_id: int) -> dict[str, Any]:
    return {"event_id": event_id, "event_time_ms": 1_700_000_000_000 + event_id,
            "event_type": "WORKFLOW_TASK_SCHEDULED", "applier_version": 1,
            "attributes": ("ostinato.history.WorkflowTaskScheduledEventAttributes",
                           {"task_queue": "orders", "start_to_close_timeout_ms": 10_000, "attempt": 1})}


def test_an_event_written_once_is_copied_into_a_task_byte_for_byte() -> None:
    events = [_event(1), _event(2)]
    spliced = [codec.spliceable(wire.HISTORY_EVENT, e, codec.encode(wire.HISTORY_EVENT, e)) for e in events]
    assert all(isinstance(e, Encoded) for e in spliced)
    task = {"namespace": "default", "workflow_id": "w", "run_id": "r", "workflow_type": "Order", "task_queue": "orders",
            "scheduled_event_id": 2, "started_event_id": 3, "attempt": 1, "previous_started_event_id": 0,
            "history_length": 3, "suggest_continue_as_new": False, "scheduled_time_ms": 0, "deadline_ms": 0,
            "events_omitted": False, "updates": []}
    assert codec.encode(wire.WORKFLOW_TASK, {**task, "events": spliced}) == \
        codec.encode(wire.WORKFLOW_TASK, {**task, "events": events})
    # The compiled writers copy the body they are given, and write nothing of the fields.
    for engine in ENGINES:
        assert fast(wire.HISTORY_EVENT, Encoded(events[0], wire.HISTORY_EVENT, b"BODY"), engine) == b"BODY"


def test_a_body_is_copied_only_where_its_own_type_goes() -> None:
    event = _event(1)
    other = Encoded(event, wire.VISIBILITY, codec.encode(wire.HISTORY_EVENT, event)[codec.HEADER_LEN:])
    for engine in ENGINES:
        with pytest.raises(Unsure):  # a body of another type: the careful path writes the fields
            fast(wire.HISTORY_EVENT, other, engine)
    assert codec.encode(wire.HISTORY_EVENT, other) == codec.encode(wire.HISTORY_EVENT, event)


def test_a_record_written_with_an_older_schema_is_not_spliced() -> None:
    event = _event(1)
    data = codec.encode(wire.HISTORY_EVENT, event)
    older = data[:2] + b"\x00" * 8 + data[codec.HEADER_LEN:]  # another writer schema's fingerprint
    assert codec.spliceable(wire.HISTORY_EVENT, event, older) is event
    assert isinstance(codec.spliceable(wire.HISTORY_EVENT, event, data), Encoded)


JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
                    | st.binary(max_size=5) | st.just("\ud800") | st.just(2**63) | st.just(1e300),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                    | st.tuples(inner, inner), max_leaves=6)


def _outcome(name: str, record: Any, engine: str) -> bytes | None:
    try:
        return fast(name, record, engine)
    except Exception:  # noqa: BLE001 - any refusal sends the record to the careful path
        return None


@pytest.mark.parametrize("name", [TIMER, wire.HISTORY_EVENT, wire.MUTABLE_STATE, wire.WORKFLOW_TASK, wire.COMMAND])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_both_engines_refuse_the_same_bad_data(name: str, data: st.DataObject) -> None:
    """A valid record with one field, anywhere in it, replaced by junk: the C engine writes exactly what the
    generated writer writes, and refuses exactly what it refuses (what either writes, fastavro writes too)."""
    record = data.draw(datum(REGISTRY.schema(name).parsed))
    holders = [record]
    todo = [record]
    while todo:  # every dict of the record is a place junk may go
        item = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else ()
        for child in children:
            if isinstance(child, dict | list | tuple):
                todo.append(child)
                if isinstance(child, dict):
                    holders.append(child)
    target = data.draw(st.sampled_from(holders))
    key = data.draw(st.sampled_from([*target.keys(), "typo"]))
    target[key] = data.draw(JUNK)
    python, native = _outcome(name, record, "python"), _outcome(name, record, "native")
    assert python == native
    if python is not None:
        assert python == careful(name, record)


def _read_outcome(name: str, body: bytes, engine: str) -> str:
    try:
        record, end = reader_of(name, engine)(body, 0)
    except Exception:  # noqa: BLE001 - any refusal sends the bytes to the careful path
        return "refused"
    return repr((record, end))


@pytest.mark.parametrize("name", [TIMER, wire.HISTORY_EVENT, wire.MUTABLE_STATE, wire.WORKFLOW_TASK, wire.COMMAND])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_both_engines_read_the_same_from_damaged_bytes(name: str, data: st.DataObject) -> None:
    """A valid record's bytes cut short, with bytes flipped or appended: the C engine reads exactly what the
    generated reader reads (values, types, order, end) and refuses exactly what it refuses."""
    body = bytearray(fast(name, data.draw(datum(REGISTRY.schema(name).parsed))))
    for _ in range(data.draw(st.integers(0, 3))):
        if body:
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    body = body[:data.draw(st.integers(0, len(body)))] + data.draw(st.binary(max_size=4))
    assert _read_outcome(name, bytes(body), "python") == _read_outcome(name, bytes(body), "native")
