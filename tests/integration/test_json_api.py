"""The JSON workflow API as a script would use it, on a real broker."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker

SHARDS = 2


@pytest.fixture(scope="module")
def api(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory):
    prefix = f"api{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    home: Path = tmp_path_factory.mktemp("api")
    server = ServerProcess(kafka.bootstrap, prefix, home / "data", home / "server.log").start()
    try:
        server.wait_owning(SHARDS)
        yield server, prefix
    finally:
        server.stop()


def call(server: ServerProcess, method: str, path: str, body: Any = None, raw: bytes | None = None,
         ) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_start_signal_query_terminate_and_result(api: tuple[ServerProcess, str]) -> None:
    server, _ = api
    wf = f"api-{uuid.uuid4().hex[:6]}"
    base = "/api/v1/namespaces/default/workflows"
    status, started = call(server, "POST", base, {"workflow_id": wf, "workflow_type": "Waits", "task_queue": "q",
                                                  "input": [{"order": 1}]})
    assert status == 201 and started["started"] and started["run_id"]
    status, again = call(server, "POST", base, {"workflow_id": wf, "workflow_type": "Waits", "task_queue": "q"})
    assert status == 409 and again["code"] == "already_started"
    assert again["details"]["existing_run_id"] == started["run_id"]
    assert call(server, "POST", f"{base}/{wf}/signal", {"signal_name": "go", "input": [1]}) == (200, {"accepted": True})
    status, no_worker = call(server, "POST", f"{base}/{wf}/query", {"query_type": "state", "timeout_ms": 500})
    assert status == 504 and no_worker["code"] == "timeout"
    assert call(server, "POST", f"{base}/{wf}/terminate", {"reason": "enough"})[0] == 200
    status, outcome = call(server, "GET", f"{base}/{wf}/result?timeout_ms=20000")
    assert status == 200 and outcome == {"run_id": started["run_id"], "status": "TERMINATED", "reason": "enough"}


def test_a_completed_workflow_returns_its_json_result(kafka: KafkaCluster, api: tuple[ServerProcess, str]) -> None:
    server, prefix = api
    wf = f"hello-{uuid.uuid4().hex[:6]}"
    with TestWorker(kafka.bootstrap, prefix, SHARDS, "hello-q"):
        status, _ = call(server, "POST", "/api/v1/namespaces/default/workflows",
                         {"workflow_id": wf, "workflow_type": "hello", "task_queue": "hello-q", "input": ["API"]})
        assert status == 201
        status, outcome = call(server, "GET", f"/api/v1/namespaces/default/workflows/{wf}/result?timeout_ms=30000")
    assert status == 200 and outcome["status"] == "COMPLETED" and outcome["result"] == "Hello, API"


@pytest.mark.parametrize(("method", "path", "raw", "status", "code"), [
    ("POST", "/api/v1/namespaces/default/workflows", b"{not json", 400, "invalid_argument"),
    ("POST", "/api/v1/namespaces/default/workflows", b"[1, 2]", 400, "invalid_argument"),
    ("POST", "/api/v1/namespaces/default/workflows", b'{"workflow_id": "x"}', 400, "invalid_argument"),
    ("POST", "/api/v1/namespaces/default/workflows",
     b'{"workflow_id": "x", "workflow_type": "T", "task_queue": "bad queue"}', 400, "invalid_argument"),
    ("POST", "/api/v1/namespaces/default/workflows",
     b'{"workflow_id": "x", "workflow_type": "T", "task_queue": "q", "run_timeout_ms": -5}', 400,
     "invalid_argument"),
    ("POST", "/api/v1/namespaces/default/workflows/nobody-here/signal", b'{"signal_name": "s"}', 404, "not_found"),
    ("POST", "/api/v1/namespaces/default/workflows/nobody-here/cancel", b"{}", 404, "not_found"),
    ("GET", "/api/v1/namespaces/default/workflows/nobody-here/result?timeout_ms=100", None, 404, "not_found"),
])
def test_bad_requests_get_the_error_model(api: tuple[ServerProcess, str], method: str, path: str,
                                          raw: bytes | None, status: int, code: str) -> None:
    server, _ = api
    got, body = call(server, method, path, raw=raw)
    assert (got, body["code"]) == (status, code), body
    assert body["message"] and isinstance(body["details"], dict)


def test_task_queue_backlog_drains_when_a_worker_comes(kafka: KafkaCluster, api: tuple[ServerProcess, str]) -> None:
    import asyncio

    from ostinato.client import Client
    from ostinato.sdk._http import HttpService
    from ostinato.worker import Worker
    from tests.e2e.cli_app import Shout

    server, _ = api
    queue = "cli-q"  # the queue tests.e2e.cli_app's Shout workflow runs on
    ids = [f"tq-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    for wf in ids:
        assert call(server, "POST", "/api/v1/namespaces/default/workflows",
                    {"workflow_id": wf, "workflow_type": "Shout", "task_queue": queue, "input": ["x"]})[0] == 201
    status, before = call(server, "GET", f"/api/v1/namespaces/default/task-queues/{queue}")
    assert status == 200 and before["workflow"]["backlog"] == 3 and before["workers"] == []
    assert before["workflow"]["oldest_age_ms"] is not None
    # No worker: the tasks are out, and nothing claims they started (their start comes with the answer).
    run = f"/api/v1/namespaces/default/workflows/{ids[0]}"
    status, pending = call(server, "GET", f"{run}/pending")
    assert status == 200 and pending["workflow_task"]["state"] == "SCHEDULED", pending
    assert (pending["workflow_task"]["started_event_id"], pending["workflow_task"]["started_time_ms"]) == (0, 0)
    status, page = call(server, "GET", f"{run}/history")
    assert [e["event_type"] for e in page["events"]] == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED"]
    worker_came_ms = time.time_ns() // 1_000_000

    async def serve() -> None:
        async with await HttpService.connect(server.url) as service:
            client = Client(service)
            from tests.e2e.cli_app import shout

            async with Worker(client, task_queue=queue, workflows=[Shout], activities=[shout]):
                for wf in ids:
                    assert await client.get_workflow_handle(wf).result() == "X"
                _, during = call(server, "GET", f"/api/v1/namespaces/default/task-queues/{queue}")
                assert len(during["workers"]) == 1

    asyncio.run(asyncio.wait_for(serve(), 90))
    status, after = call(server, "GET", f"/api/v1/namespaces/default/task-queues/{queue}")
    assert after["workflow"]["backlog"] == 0 and after["activity"]["backlog"] == 0
    # History records the start when the worker took the task, naming it, just before its answer.
    status, page = call(server, "GET", f"{run}/history")
    scheduled, started, completed = page["events"][1:4]
    assert [e["event_type"] for e in (scheduled, started, completed)] == [
        "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED"]
    assert scheduled["event_time_ms"] < worker_came_ms <= started["event_time_ms"] <= completed["event_time_ms"]
    worker = completed["attributes"]["identity"]
    assert worker and started["attributes"]["identity"] == worker
    assert completed["attributes"]["started_event_id"] == started["event_id"]
    assert call(server, "GET", "/api/v1/namespaces/default/task-queues/bad%20queue")[0] == 400


def test_fire_and_forget_starts(api: tuple[ServerProcess, str]) -> None:
    server, _ = api
    ids = [f"bulk-{uuid.uuid4().hex[:6]}" for _ in range(20)]
    for wf in ids:
        status, body = call(server, "POST", "/api/v1/namespaces/default/workflows",
                            {"workflow_id": wf, "workflow_type": "Bulk", "task_queue": "bulk-q", "wait": False})
        assert status == 202 and body["accepted"] and body["request_id"]
    for wf in ids:  # each was applied: a synchronous duplicate start now finds it running
        status, body = call(server, "POST", "/api/v1/namespaces/default/workflows",
                            {"workflow_id": wf, "workflow_type": "Bulk", "task_queue": "bulk-q"})
        assert status == 409, body


def test_size_refusals_are_413s_in_the_error_model_and_values_up_to_the_payload_limit_go_through(
        api: tuple[ServerProcess, str]) -> None:
    server, _ = api
    base = "/api/v1/namespaces/default/workflows"
    wf = f"big-{uuid.uuid4().hex[:6]}"
    value = "x" * (2 * 2**20 - 64)  # just under the payload hard limit (2 MiB), which the SDK's Avro path takes too
    status, started = call(server, "POST", base, {"workflow_id": wf, "workflow_type": "Big", "task_queue": "big-q",
                                                  "input": [value]})
    assert status == 201, started
    status, page = call(server, "GET", f"{base}/{wf}/history?page_size=1")
    assert status == 200
    (sent,) = page["events"][0]["attributes"]["input"]
    assert json.loads(base64.b64decode(sent["data"])) == value

    status, body = call(server, "POST", base, raw=json.dumps({"workflow_id": "huge", "workflow_type": "Big",
                                                              "task_queue": "big-q", "input": ["x" * 2**22]}).encode())
    assert (status, body["code"]) == (413, "too_large"), body
    assert body["details"]["limit_bytes"] == 2**22 and "4,194,304-byte limit" in body["message"]

    status, body = call(server, "POST", f"{base}/{wf}/signal", {"signal_name": "more", "input": ["x" * 2**21]})
    assert (status, body["code"]) == (413, "too_large"), body
    assert body["details"]["field"] == "input[0]" and body["details"]["limit_bytes"] == 2**21
    assert call(server, "POST", f"{base}/{wf}/terminate", {"reason": "done"})[0] == 200
