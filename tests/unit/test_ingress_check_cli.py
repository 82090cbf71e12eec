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
