"""`ostinato ingress check`: a mapping tried on sample records before it meets real ones."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ostinato.services.cli.main import app

CONFIG = """
mappings:
  - name: orders
    topic: shop.orders
    action: start
    workflow_id: "order-{value.id}"
    workflow_type: OrderWorkflow
    task_queue: orders
"""


def test_check_shows_each_command_and_each_dead_letter(tmp_path: Path) -> None:
    (tmp_path / "ingress.yaml").write_text(CONFIG)
    (tmp_path / "sample.jsonl").write_text("\n".join([
        json.dumps({"value": {"id": 7, "total": 12}, "key": "7"}),
        json.dumps({"value": {"total": 1}}),
        json.dumps({"value": "not json"}),
    ]))
    result = CliRunner().invoke(app, ["ingress", "check", str(tmp_path / "ingress.yaml"),
                                      "--sample", str(tmp_path / "sample.jsonl")])
    assert result.exit_code == 1, result.output  # a sample would be a dead letter
    lines = result.output.splitlines()
    assert lines[0].startswith("1: StartWorkflowExecution default/order-7 (shard ")
    assert '"workflow_type": "OrderWorkflow"' in lines[0] and '"input": [{"id": 7, "total": 12}]' in lines[0]
    assert lines[1] == "2: dead letter to shop.orders.dlq: the record has no value.id"
    assert lines[2].startswith("3: dead letter to shop.orders.dlq: the value is not JSON")


def test_check_refuses_a_bad_file_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "ingress.yaml").write_text(CONFIG.replace("action: start", "action: publish"))
    (tmp_path / "sample.jsonl").write_text("{}\n")
    result = CliRunner().invoke(app, ["ingress", "check", str(tmp_path / "ingress.yaml"),
                                      "--sample", str(tmp_path / "sample.jsonl")])
    assert result.exit_code == 2
    assert "action must be one of start, signal, signal-with-start" in result.output


def test_all_samples_mapping_exit_zero(tmp_path: Path) -> None:
    (tmp_path / "ingress.yaml").write_text(CONFIG)
    (tmp_path / "sample.jsonl").write_text(json.dumps({"value": {"id": 1}}) + "\n")
    result = CliRunner().invoke(app, ["ingress", "check", str(tmp_path / "ingress.yaml"),
                                      "--sample", str(tmp_path / "sample.jsonl")])
    assert result.exit_code == 0, result.output


def test_check_reads_confluent_framed_samples_through_the_registry(tmp_path: Path) -> None:
    """With a registry, a sample is either the record's bytes (value_base64, as a consumer prints them) or a
    readable value with the schema id to write it with, as Confluent's serializer would."""
    import base64

    from fastavro import parse_schema

    from ostinato.connectors.schema_registry import encode
    from tests.tools.schema_registry import StandInRegistry, register

    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    registry = StandInRegistry().start()
    try:
        schema_id = register(registry.url, "shop.orders-value", schema)
        (tmp_path / "ingress.yaml").write_text(f"registry: {registry.url}\n" + CONFIG.replace(
            "    task_queue: orders\n", "    task_queue: orders\n    format: avro\n"))
        framed = base64.b64encode(encode(schema_id, parse_schema(schema), {"id": 8})).decode()
        (tmp_path / "sample.jsonl").write_text("\n".join([
            json.dumps({"schema_id": schema_id, "value": {"id": 7}}),
            json.dumps({"value_base64": framed}),
            json.dumps({"schema_id": 99, "value": {"id": 1}}),
            json.dumps({"value": {"id": 1}}),
        ]))
        args = ["ingress", "check", str(tmp_path / "ingress.yaml"), "--sample", str(tmp_path / "sample.jsonl")]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        lines = result.output.splitlines()
        assert lines[0].startswith("1: StartWorkflowExecution default/order-7 ") and '"input": [{"id": 7}]' in lines[0]
        assert lines[1].startswith("2: StartWorkflowExecution default/order-8 ")
        assert lines[2].startswith("3: dead letter to shop.orders.dlq: schema id 99 is not in the schema registry")
        assert lines[3].startswith("4: dead letter to shop.orders.dlq: the value is not in the Confluent wire format")
        registry.stop()
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output  # an outage is not a dead letter: the check cannot tell
        assert "is unavailable" in result.output and "would wait and retry" in result.output
    finally:
        registry.stop()
