"""Namespaces through the API, the CLI and the SDK's command path, on a real server."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from ostinato.client import Client
from ostinato.exceptions import RPCError
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.integration.test_json_api import call
from tests.tools.servers import ServerProcess


def test_register_list_describe_and_use(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    name = f"orders-{uuid.uuid4().hex[:4]}"
    try:
        server.wait_owning(1)
        registered = run_cli("namespace", "register", name, "--retention-days", "3", "--description", "shop",
                             "-o", "json", "--server", server.url)
        assert registered.returncode == 0, registered.stderr
        assert json.loads(registered.stdout)["retention_ms"] == 3 * 86_400_000
        again = run_cli("namespace", "register", name, "--server", server.url)
        assert again.returncode == 1 and "already_exists" in again.stderr
        listed = json.loads(run_cli("namespace", "list", "-o", "json", "--server", server.url).stdout)
        assert [n["name"] for n in listed][:1] == ["default"] and name in [n["name"] for n in listed]
        assert call(server, "GET", f"/api/v1/namespaces/{name}")[1]["description"] == "shop"
        assert call(server, "GET", "/api/v1/namespaces/nowhere")[0] == 404
        assert call(server, "POST", "/api/v1/namespaces", {"name": "x/y", "retention_days": 1})[0] == 400
        assert call(server, "POST", "/api/v1/namespaces", {"name": "short", "retention_ms": 5})[0] == 400

        start = {"workflow_id": "w1", "workflow_type": "T", "task_queue": "q"}
        assert call(server, "POST", f"/api/v1/namespaces/{name}/workflows", start)[0] == 201
        status, body = call(server, "POST", "/api/v1/namespaces/nowhere/workflows", start)
        assert status == 404 and body["code"] == "namespace_not_found"

        async def sdk() -> None:
            async with await HttpService.connect(server.url) as service:
                await Client(service, namespace=name).start_workflow("T", id="w2", task_queue="q")
                with pytest.raises(RPCError) as raised:
                    await Client(service, namespace="nowhere").start_workflow("T", id="w3", task_queue="q")
                assert raised.value.status == 404

        asyncio.run(sdk())
    finally:
        server.stop()
