"""How a Kafka record becomes a command (connectors/ingress_mapping.py): the pure half of the ingress."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_writer

from ostinato.connectors.ingress_mapping import (
    MappingError,
    Record,
    Unmappable,
    dead_letter_headers,
    load,
    parse,
    request_id,
    translate,
)
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key

START = {"name": "orders", "topic": "shop.orders", "action": "start", "workflow_id": "order-{value.id}",
         "workflow_type": "OrderWorkflow", "task_queue": "orders"}


def _one(**changes: object) -> object:
    return parse({"mappings": [{**START, **changes}]}).mappings[0]


def _record(value: object, key: str | None = None, headers: dict[str, str] | None = None, offset: int = 7) -> Record:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return Record("shop.orders", 2, offset, None if key is None else key.encode(), raw,
                  tuple((k, v.encode()) for k, v in (headers or {}).items()))


def _decoded(command: object) -> dict:
    _, record = codec.decode(command.value)  # type: ignore[attr-defined]
    return record


def test_a_start_takes_its_id_type_queue_and_input_from_the_record() -> None:
    mapping = _one()
    command = translate(mapping, _record({"id": 42, "total": 9.5}), shards=4, now_ms=1000)
    record = _decoded(command)
    kind, body = record["body"]
    assert kind == wire.command_type("StartWorkflowExecution")
    assert (record["namespace"], record["workflow_id"]) == ("default", "order-42")
    assert (body["workflow_type"], body["task_queue"]) == ("OrderWorkflow", "orders")
    assert [json.loads(p["data"]) for p in body["input"]] == [{"id": 42, "total": 9.5}]
    assert record["reply_partition"] is None  # nobody waits for an answer
    key = workflow_key("default", "order-42")
    assert (command.key, command.partition) == (key.encode(), partition_for(key, 4))


def test_the_request_id_is_where_the_record_is_so_a_replayed_record_makes_the_same_command() -> None:
    mapping = _one()
    first = translate(mapping, _record({"id": 1}, offset=11), 4, 1000)
    again = translate(mapping, _record({"id": 1}, offset=11), 4, 2000)
    other = translate(mapping, _record({"id": 1}, offset=12), 4, 1000)
    assert first.request_id == again.request_id == "ingress/orders/shop.orders/2/11"
    assert other.request_id != first.request_id
    assert _decoded(first)["request_id"] == request_id(mapping, _record({}, offset=11))


def test_signals_take_name_and_input_from_templates_over_key_headers_and_value() -> None:
    mapping = _one(action="signal", workflow_id="{headers.tenant}-{key}", signal="{value.kind}",
                   input="value.data", workflow_type="", task_queue="")
    record = _decoded(translate(mapping, _record({"kind": "paid", "data": [1, 2]}, key="o-1",
                                                 headers={"tenant": "acme"}), 4, 0))
    kind, body = record["body"]
    assert kind == wire.command_type("SignalWorkflowExecution")
    assert record["workflow_id"] == "acme-o-1"
    assert body["signal_name"] == "paid"
    assert [json.loads(p["data"]) for p in body["input"]] == [[1, 2]]


def test_signal_with_start_carries_the_start_and_the_signal() -> None:
    mapping = _one(action="signal-with-start", signal="line", input="value.sku")
    _, body = _decoded(translate(mapping, _record({"id": 5, "sku": "A-1"}), 4, 0))["body"]
    assert body["start"]["workflow_type"] == "OrderWorkflow" and body["start"]["input"] == []
    assert body["signal_name"] == "line"
    assert [json.loads(p["data"]) for p in body["signal_input"]] == ["A-1"]


def test_updates_take_their_name_from_a_template_and_their_id_from_where_the_record_is() -> None:
    mapping = _one(action="update", update="{value.kind}", input="value.item", workflow_type="", task_queue="")
    record = _decoded(translate(mapping, _record({"id": 3, "kind": "add", "item": "kettle"}, offset=9), 4, 0))
    kind, body = record["body"]
    assert kind == wire.command_type("UpdateWorkflowExecution") and record["workflow_id"] == "order-3"
    assert body["name"] == "add" and body["update_id"] == "ingress/orders/shop.orders/2/9" == record["request_id"]
    assert [json.loads(p["data"]) for p in body["input"]] == ["kettle"]


def test_update_with_start_uses_the_running_workflow_unless_told_to_fail() -> None:
    mapping = _one(action="update-with-start", update="add")
    _, body = _decoded(translate(mapping, _record({"id": 4}), 4, 0))["body"]
    assert body["start"]["workflow_type"] == "OrderWorkflow" and body["start"]["id_conflict_policy"] == "USE_EXISTING"
    assert body["update"]["name"] == "add" and body["start"]["input"] == []
    with pytest.raises(MappingError, match="USE_EXISTING"):
        _one(action="update-with-start", update="add", id_conflict_policy="TERMINATE_EXISTING")
    with pytest.raises(MappingError, match="needs `update`"):
        _one(action="update")


@pytest.mark.parametrize(("value", "reason"), [
    (b"not json", "not JSON"),
    ({"no_id": 1}, "no value.id"),
    ({"id": None}, "value.id is null"),
])
def test_records_that_do_not_map_say_why(value: object, reason: str) -> None:
    with pytest.raises(Unmappable, match=reason):
        translate(_one(), _record(value), 4, 0)


def test_json_nested_too_deeply_is_a_dead_letter_not_a_crash() -> None:
    with pytest.raises(Unmappable, match="nested too deeply"):
        translate(_one(), _record(b"[" * 200_000), 4, 0)


def test_an_empty_workflow_id_is_a_dead_letter() -> None:
    with pytest.raises(Unmappable, match="renders empty"):
        translate(_one(workflow_id="{value.id}"), _record({"id": ""}), 4, 0)


def test_a_tombstone_and_an_oversized_input_are_dead_letters() -> None:
    with pytest.raises(Unmappable, match="tombstone"):
        translate(_one(), Record("t", 0, 0, None, None), 4, 0)
    with pytest.raises(Unmappable, match="record limit"):
        translate(_one(), _record({"id": 1, "blob": "x" * 5_000_000}), 4, 0)


def test_dead_letters_keep_the_headers_and_add_the_reason_and_the_source() -> None:
    headers = dict(dead_letter_headers(_one(), _record({}, headers={"h": "v"}), "no value.id"))
    assert headers == {"h": b"v", "ostinato.error": b"no value.id", "ostinato.mapping": b"orders",
                       "ostinato.source": b"shop.orders/2/7"}


def test_avro_single_object_values(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"}, {"name": "sku", "type": "string"}]}
    (tmp_path / "order.avsc").write_text(json.dumps(schema))
    (tmp_path / "ingress.yaml").write_text(
        "mappings:\n  - name: orders\n    topic: shop.orders\n    action: start\n    workflow_id: 'order-{value.id}'\n"
        "    workflow_type: OrderWorkflow\n    task_queue: orders\n    format: avro\n    schema: order.avsc\n")
    mapping = load(tmp_path / "ingress.yaml").mappings[0]
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), {"id": 7, "sku": "A"})
    value = b"\xc3\x01" + codec.fingerprint(codec.canonical_form(schema, {})) + out.getvalue()
    record = _decoded(translate(mapping, _record(value), 4, 0))
    assert record["workflow_id"] == "order-7"
    assert json.loads(record["body"][1]["input"][0]["data"]) == {"id": 7, "sku": "A"}
    with pytest.raises(Unmappable, match="fingerprint"):
        translate(mapping, _record(b"\xc3\x01" + b"\0" * 8 + out.getvalue()), 4, 0)
    with pytest.raises(Unmappable, match="single-object"):
        translate(mapping, _record({"id": 7}), 4, 0)


@pytest.mark.parametrize(("changes", "message"), [
    ({"action": "publish"}, "action must be one of"),
    ({"workflow_type": ""}, "needs `workflow_type`"),
    ({"colour": "red"}, "unknown setting"),
    ({"workflow_id": "{value.id"}, "bad template"),
    ({"workflow_id": "{body.id}"}, "unknown template field"),
    ({"input": "everything"}, "input is value"),
    ({"format": "xml"}, "format must be"),
    ({"format": "avro"}, "needs `schema`"),
    ({"id_conflict_policy": "MAYBE"}, "id_conflict_policy must be"),
    ({"name": "a b"}, "a name is letters"),
])
def test_configuration_mistakes_are_refused_at_start(changes: dict, message: str) -> None:
    with pytest.raises(MappingError, match=message):
        parse({"mappings": [{**START, **changes}]})


def test_a_file_without_mappings_or_with_twins_is_refused() -> None:
    with pytest.raises(MappingError, match="mappings"):
        parse({"mapping": []})
    with pytest.raises(MappingError, match="two mappings"):
        parse({"mappings": [START, START]})


def test_outcomes_streams_are_read_beside_the_mappings() -> None:
    config = parse({"outcomes": [{"name": "done", "topic": "orders.completed", "workflow_types": ["Order"]}]})
    assert config.mappings == []
    (spec,) = config.outcomes
    assert (spec.name, spec.topic, spec.namespace, spec.workflow_types) == ("done", "orders.completed", "default",
                                                                           ("Order",))
    closed = {"namespace": "default", "workflow_type": "Order", "close_time_ms": 5}
    assert spec.wants(closed)
    assert not spec.wants({**closed, "close_time_ms": None})  # still running
    assert not spec.wants({**closed, "workflow_type": "Other"})
    assert not spec.wants({**closed, "namespace": "eu"})


@pytest.mark.parametrize(("entry", "message"), [
    ({"topic": "t"}, "`name` is required"),
    ({"name": "n", "topic": "t", "colour": 1}, "unknown setting"),
    ({"name": "n", "topic": "t", "workflow_types": "Order"}, "list of workflow type names"),
])
def test_outcomes_mistakes_are_refused_at_start(entry: dict, message: str) -> None:
    with pytest.raises(MappingError, match=message):
        parse({"outcomes": [entry]})


def test_an_outcome_record_is_the_close_with_its_result() -> None:
    from ostinato.connectors.outcomes import outcome_record

    visibility = {"namespace": "default", "workflow_id": "order-1", "run_id": "r1", "workflow_type": "Order",
                  "task_queue": "orders", "status": "COMPLETED", "start_time_ms": 1, "close_time_ms": 2}
    key, value, status = outcome_record(visibility, {"run_id": "r1", "status": "COMPLETED", "result": {"ok": True}})
    assert key == b"default/order-1" and status == "COMPLETED"
    assert json.loads(value) == {**visibility, "result": {"ok": True}}
