"""Custom search attributes over the HTTP API on a real broker: registered per namespace (durable in the cluster
topic, so a restarted server still knows them), a start refused with a 400 for a wrong type or an unregistered
name, and list/count queries typed by the registry."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.integration.test_json_api import call
from tests.tools.servers import ServerProcess

SHARDS = 2
NS = "typed"
BASE = f"/api/v1/namespaces/{NS}"


@pytest.fixture(scope="module")
def api(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Any:
    prefix = f"sa{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    home: Path = tmp_path_factory.mktemp("sa")
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        server.wait_owning(SHARDS)
        assert call(server, "POST", "/api/v1/namespaces", {"name": NS, "retention_days": 1})[0] == 201
        yield server, prefix, home
    finally:
        server.stop()


def _start(server: ServerProcess, workflow_id: str, attributes: dict[str, Any]) -> tuple[int, Any]:
    return call(server, "POST", f"{BASE}/workflows", {"workflow_id": workflow_id, "workflow_type": "Order",
                                                     "task_queue": "typed-q", "search_attributes": attributes})


def test_register_then_start_typed_and_refuse_wrong_types(api: tuple[ServerProcess, str, Path]) -> None:
    server, _, _ = api
    status, listed = call(server, "POST", f"{BASE}/search-attributes", {"search_attributes": {
        "CustomerId": "Keyword", "Amount": "Int", "DueAt": "Datetime", "Tags": "keyword_list"}})
    assert status == 200, listed
    assert listed["custom_attributes"] == {"Amount": "Int", "CustomerId": "Keyword", "DueAt": "Datetime",
                                           "Tags": "KeywordList"}
    assert listed["system_attributes"]["StartTime"] == "Datetime"
    assert call(server, "GET", f"{BASE}/search-attributes")[1] == listed
    assert call(server, "GET", "/api/v1/namespaces/default/search-attributes")[1]["custom_attributes"] == {}

    # Registering the same again is a no-op; another type, a bad name or type, an unknown namespace are refused.
    assert call(server, "POST", f"{BASE}/search-attributes", {"search_attributes": {"Amount": "Int"}})[0] == 200
    status, clash = call(server, "POST", f"{BASE}/search-attributes", {"search_attributes": {"Amount": "Text"}})
    assert (status, clash["code"]) == (409, "already_exists") and "already registered" in clash["message"]
    for body in ({"search_attributes": {"Bad-Name": "Keyword"}}, {"search_attributes": {"X": "Float"}},
                 {"search_attributes": {"StartTime": "Datetime"}}, {"nothing": 1}):
        status, refused = call(server, "POST", f"{BASE}/search-attributes", body)
        assert (status, refused["code"]) == (400, "invalid_argument"), body
    assert call(server, "GET", "/api/v1/namespaces/nope/search-attributes")[0] == 404

    status, wrong = _start(server, "wrong-type", {"Amount": "five"})
    assert (status, wrong["code"]) == (400, "invalid_argument")
    assert "search attribute 'Amount' is Int: expected a 64-bit integer, not \"five\"" in wrong["message"]
    status, unregistered = _start(server, "unregistered", {"Region": "eu"})
    assert (status, unregistered["code"]) == (400, "invalid_argument")
    assert "'Region' is not registered in namespace 'typed'" in unregistered["message"]
    status, bad_date = _start(server, "bad-date", {"DueAt": "next tuesday"})
    assert status == 400 and "'DueAt' is Datetime" in bad_date["message"]
    # The default namespace has no custom attribute registered: anything custom is refused there.
    status, other = call(server, "POST", "/api/v1/namespaces/default/workflows", {
        "workflow_id": "elsewhere", "workflow_type": "Order", "task_queue": "typed-q",
        "search_attributes": {"Amount": 5}})
    assert status == 400 and "not registered in namespace 'default'" in other["message"]

    for i, (amount, due, tags) in enumerate([(3, "2025-12-31T23:00:00Z", ["x"]), (7, "2026-02-01T00:00:00+01:00",
                                                                                 ["x", "y"]), (9, None, ["y"])]):
        attributes: dict[str, Any] = {"CustomerId": f"c-{i}", "Amount": amount, "Tags": tags}
        if due is not None:
            attributes["DueAt"] = due
        status, started = _start(server, f"typed-{i}", attributes)
        assert status == 201, started

    def ids(query: str) -> list[str]:
        status, found = call(server, "GET", f"{BASE}/workflows?query={urllib_quote(query)}")
        assert status == 200, found
        return [row["workflow_id"] for row in found["executions"]]

    deadline = time.monotonic() + 30
    while len(ids("")) < 3 and time.monotonic() < deadline:  # the visibility store follows the topic
        time.sleep(0.2)
    assert ids('DueAt > "2026-01-01T00:00:00Z" ORDER BY WorkflowId') == ["typed-1"]
    assert ids("Amount >= 5 ORDER BY Amount DESC") == ["typed-2", "typed-1"]
    assert ids("Tags = 'x' ORDER BY WorkflowId") == ["typed-0", "typed-1"]
    assert ids("DueAt IS NULL") == ["typed-2"]
    tags_y = urllib_quote('Tags = "y"')
    status, count = call(server, "GET", f"{BASE}/workflow-count?query={tags_y}")
    assert (status, count) == (200, {"count": 2})
    status, unknown = call(server, "GET", f"{BASE}/workflows?query={urllib_quote('Region = 1')}")
    assert status == 400 and "unknown search attribute 'Region'" in unknown["message"]
    status, described = call(server, "GET", f"{BASE}/workflows/typed-1")
    assert status == 200 and "DueAt" in described["search_attributes"]


def urllib_quote(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")


def test_the_cli_registers_and_lists(api: tuple[ServerProcess, str, Path]) -> None:
    from typer.testing import CliRunner

    from ostinato.services.cli.main import app

    server, _, _ = api
    runner = CliRunner()
    created = runner.invoke(app, ["operator", "search-attribute", "create", "--name", "Region", "--type", "Keyword",
                                  "--name", "Score", "--type", "double", "-n", NS, "--server", server.url,
                                  "-o", "json"])
    assert created.exit_code == 0, created.output
    assert {"Region": "Keyword", "Score": "Double"}.items() <= json.loads(created.output)["custom_attributes"].items()
    listed = runner.invoke(app, ["operator", "search-attribute", "list", "-n", NS, "--server", server.url])
    assert listed.exit_code == 0 and "Region" in listed.output and "WorkflowType" in listed.output
    clash = runner.invoke(app, ["operator", "add-search-attributes", "--name", "Region", "--type", "Int", "-n", NS,
                                "--server", server.url])
    assert clash.exit_code == 1 and "already registered" in clash.output


def test_the_registry_survives_a_server_restart(kafka: KafkaCluster, api: tuple[ServerProcess, str, Path]) -> None:
    server, prefix, home = api
    assert call(server, "POST", f"{BASE}/search-attributes", {"search_attributes": {"Durable": "Bool"}})[0] == 200
    server.stop()
    again = ServerProcess(kafka.bootstrap, prefix, home / "data2", home / "server2.log").start()
    try:
        again.wait_owning(SHARDS)
        status, listed = call(again, "GET", f"{BASE}/search-attributes")
        assert status == 200 and listed["custom_attributes"]["Durable"] == "Bool"
        status, refused = _start(again, "durable-1", {"Durable": "yes"})
        assert status == 400 and "'Durable' is Bool" in refused["message"]
        assert _start(again, "durable-2", {"Durable": True})[0] == 201
    finally:
        again.stop()
