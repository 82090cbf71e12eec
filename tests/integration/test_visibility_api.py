"""List and count through the API, the SDK and the CLI, fed from the visibility topic by a real server."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.integration.test_json_api import call
from tests.tools.servers import ServerProcess


def test_list_and_count(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    stem = uuid.uuid4().hex[:6]
    try:
        server.wait_owning(2)
        for i in range(5):
            kind = "Alpha" if i < 3 else "Beta"
            assert call(server, "POST", "/api/v1/namespaces/default/workflows",
                        {"workflow_id": f"{stem}-{i}", "workflow_type": kind, "task_queue": "vq"})[0] == 201
        assert call(server, "POST", f"/api/v1/namespaces/default/workflows/{stem}-4/terminate", {})[0] == 200
        query = f"WorkflowId STARTS_WITH '{stem}' AND WorkflowType = 'Alpha'"
        deadline = time.monotonic() + 30
        while call(server, "GET", "/api/v1/namespaces/default/workflow-count?query="
                   + urllib_quote(query))[1]["count"] != 3:
            assert time.monotonic() < deadline, "visibility never caught up"
            time.sleep(0.2)
        status, page = call(server, "GET", "/api/v1/namespaces/default/workflows?page_size=2&query="
                            + urllib_quote(f"WorkflowId STARTS_WITH '{stem}' ORDER BY WorkflowId"))
        assert status == 200 and [r["workflow_id"] for r in page["executions"]] == [f"{stem}-0", f"{stem}-1"]
        assert page["next_page_token"]
        closed = f"WorkflowId STARTS_WITH '{stem}' AND ExecutionStatus = 'Terminated'"
        deadline = time.monotonic() + 30
        while call(server, "GET", "/api/v1/namespaces/default/workflow-count?query=" + urllib_quote(closed))[1][
                "count"] != 1:
            assert time.monotonic() < deadline, "the terminated run never showed"
            time.sleep(0.2)
        status, bad = call(server, "GET", "/api/v1/namespaces/default/workflows?query="
                           + urllib_quote("WorkflowType = 'x' AND AND"))
        assert status == 400 and bad["code"] == "invalid_query" and bad["details"]["token"] == "AND"

        async def sdk() -> list[str]:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                assert await client.count_workflows(f"WorkflowId STARTS_WITH '{stem}'") == 5
                return [w.id async for w in client.list_workflows(
                    f"WorkflowId STARTS_WITH '{stem}' ORDER BY WorkflowId DESC", page_size=2)]

        assert asyncio.run(sdk()) == [f"{stem}-{i}" for i in reversed(range(5))]
        listed = run_cli("workflow", "list", f"WorkflowId STARTS_WITH '{stem}' AND WorkflowType = 'Beta'", "-o",
                         "json", "--server", server.url)
        assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 2
        counted = run_cli("workflow", "count", f"WorkflowId STARTS_WITH '{stem}'", "--server", server.url)
        assert counted.returncode == 0 and counted.stdout.strip() == "5"
        wrong = run_cli("workflow", "count", "Nope = 1", "--server", server.url)
        assert wrong.returncode == 1 and "invalid_query" in wrong.stderr
    finally:
        server.stop()


def urllib_quote(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")
