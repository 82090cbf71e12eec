"""The synchronous command path against a real broker: the SDK client over HTTP (`HttpService`) through
`POST /api/v1/commands`, replies read back from `<prefix>.replies`, and the owner reads.

The cluster has a single reply partition, so both servers read the same one and each must pick out its own
answers by request id. No worker runs: workflows start and wait for a workflow task nobody takes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.keys import shard_for
from ostinato.sdk import exceptions as exc
from ostinato.sdk._http import HttpService
from ostinato.sdk.client import Client
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.frontend.gateway import CONTENT_TYPE
from tests.tools.servers import ServerProcess, two_servers

SHARDS = 2
C = "ostinato.command."
T = TypeVar("T")


@pytest.fixture(scope="module")
def servers(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ...]]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    tmp: Path = tmp_path_factory.mktemp("gateway")
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS, reply_partitions=1)
    with two_servers(kafka.bootstrap, prefix, tmp) as pair:
        yield pair


def run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return asyncio.run(fn(*args))


async def _client(server: ServerProcess) -> Client:
    return Client(await HttpService.connect(server.url), identity="gateway-test")


async def _close(client: Client) -> None:
    assert isinstance(client.service, HttpService)
    await client.service.close()


def _command(body: tuple[str, dict[str, Any]], workflow_id: str = "raw-1", request_id: str = "") -> bytes:
    return codec.encode(C + "Command", {
        "namespace": "default", "workflow_id": workflow_id, "run_id": "", "request_id": request_id,
        "identity": "raw", "time_ms": 0, "reply_partition": None, "body": body})


def _post(server: ServerProcess, data: bytes, query: str = "") -> tuple[int, str, bytes]:
    request = urllib.request.Request(f"{server.url}/api/v1/commands{query}", data=data, method="POST",
                                     headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=40) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_client_lifecycle_over_http(servers: tuple[ServerProcess, ...]) -> None:
    async def scenario() -> None:
        client = await _client(servers[0])
        try:
            assert isinstance(client.service, HttpService) and client.service.cluster["shards"] == SHARDS
            wf = f"hello/{uuid.uuid4().hex[:6]}"  # a '/' in the id must survive keys, URLs and redirects
            handle = await client.start_workflow("Hello", "world", id=wf, task_queue="q")
            assert handle.run_id
            with pytest.raises(exc.WorkflowAlreadyStartedError):
                await client.start_workflow("Hello", id=wf, task_queue="q")
            again = await client.start_workflow("Hello", id=wf, task_queue="q", id_conflict_policy="USE_EXISTING")
            assert again.run_id == handle.run_id

            described = await handle.describe()
            assert (described.workflow_id, described.run_id, described.workflow_type, described.task_queue,
                    described.status) == (wf, handle.run_id, "Hello", "q", "RUNNING")
            await handle.signal("poke", 1, "two")
            await handle.cancel("enough")
            await handle.terminate("really enough")
            with pytest.raises(exc.WorkflowFailureError) as failed:
                await handle.result()
            assert failed.value.status == "TERMINATED"
            assert isinstance(failed.value.cause, exc.TerminatedError)

            history = await handle.fetch_history()
            kinds = [e["event_type"] for e in history]
            assert kinds[0] == "WORKFLOW_EXECUTION_STARTED" and kinds[-1] == "WORKFLOW_EXECUTION_TERMINATED"
            assert {"WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_EXECUTION_CANCEL_REQUESTED"} <= set(kinds)
            assert [e["event_id"] for e in history] == list(range(1, len(history) + 1))
            signaled = next(e for e in history if e["event_type"] == "WORKFLOW_EXECUTION_SIGNALED")
            assert client.data_converter.decode(signaled["attributes"][1]["input"]) == [1, "two"]

            with pytest.raises(exc.RPCError) as closed:
                await handle.signal("late")
            assert closed.value.code == "ALREADY_CLOSED"
            missing = client.get_workflow_handle(f"missing-{uuid.uuid4().hex[:6]}")
            with pytest.raises(exc.RPCError) as not_found:
                await missing.terminate()
            assert (not_found.value.code, not_found.value.status) == ("NOT_FOUND", 404)
            with pytest.raises(exc.RPCError) as no_describe:
                await missing.describe()
            assert no_describe.value.status == 404
            assert await missing.fetch_history() == []
            name, malformed = await client.service.send("default", wf, "", (C + "SignalWorkflowExecution", {
                "signal_name": "x", "bogus": 1}), uuid.uuid4().hex, "me")  # as the in-memory engine answers it
            assert (name, malformed["code"]) == ("ostinato.reply.Rejected", "MALFORMED")
        finally:
            await _close(client)

    run(scenario)


def test_queries_are_answered_or_time_out(servers: tuple[ServerProcess, ...]) -> None:
    async def scenario() -> None:
        client = await _client(servers[0])
        service = client.service
        try:
            name, rejected = await service.query("default", f"nobody-{uuid.uuid4().hex[:6]}", "", "status", [],
                                                 timedelta(seconds=10))
            assert name == "ostinato.reply.Rejected" and rejected["code"] == "NOT_FOUND"

            handle = await client.start_workflow("Hello", id=f"asked-{uuid.uuid4().hex[:6]}", task_queue="q")
            with pytest.raises(exc.RPCError, match="is a worker running") as no_worker:
                await handle.query("status", timeout=timedelta(seconds=1))
            assert no_worker.value.status == 504
            await handle.terminate()
        finally:
            await _close(client)

    run(scenario)


def test_bad_requests_are_refused(servers: tuple[ServerProcess, ...]) -> None:
    a = servers[0]
    status, kind, body = _post(a, b"\xc3\x01 not a command")
    error = json.loads(body)
    assert status == 400 and kind.startswith("application/json") and error["code"] == "malformed"
    assert set(error) == {"code", "message", "details"}
    assert _post(a, codec.encode("ostinato.reply.Accepted", {}))[0] == 400  # readable, but not a Command

    fire = (C + "FireTimer", {"kind": "USER_TIMER", "fire_at_ms": 1, "timer_id": "t"})
    status, _, body = _post(a, _command(fire))
    assert status == 403 and json.loads(body)["code"] == "forbidden"
    child = (C + "StartWorkflowExecution", {"workflow_type": "Hello", "task_queue": "q", "parent": {
        "namespace": "default", "workflow_id": "p", "run_id": "r", "initiated_event_id": 5}})
    assert _post(a, _command(child))[0] == 403
    archived = (C + "ArchivalCompleted", {"uri": "s3://x", "event_count": 3})
    assert _post(a, _command(archived))[0] == 403

    start = (C + "StartWorkflowExecution", {"workflow_type": "Hello", "task_queue": "q"})
    assert _post(a, _command(start), "?timeout_ms=soon")[0] == 400
    # No request id: the gateway makes one up and still finds the answer.
    wf = f"raw-{uuid.uuid4().hex[:6]}"
    status, kind, body = _post(a, _command(start, wf))
    assert (status, kind) == (200, CONTENT_TYPE)
    name, reply = codec.decode(body)
    assert name == "ostinato.reply.Reply" and reply["body"][0] == "ostinato.reply.WorkflowStarted"
    assert reply["request_id"] and reply["workflow_id"] == wf
    terminate = (C + "TerminateWorkflowExecution", {"reason": "done"})
    assert codec.decode(_post(a, _command(terminate, wf, "t-1"))[2])[1]["body"][0] == "ostinato.reply.Accepted"

    # Beyond aiohttp's default 1 MiB request limit, within the record limit.
    big = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * 1_500_000}
    status, _, body = _post(a, _command((C + "StartWorkflowExecution", {
        "workflow_type": "Hello", "task_queue": "q", "input": [big]}), f"big-{uuid.uuid4().hex[:6]}"))
    assert status == 200 and codec.decode(body)[1]["body"][0] == "ostinato.reply.WorkflowStarted", body[:300]


def test_two_servers_sharing_a_reply_partition_each_get_their_answers(servers: tuple[ServerProcess, ...]) -> None:
    async def scenario() -> None:
        clients = [await _client(s) for s in servers]
        try:
            tag = uuid.uuid4().hex[:6]
            ids = [f"pair-{tag}-{i}" for i in range(16)]
            while {shard_for("default", wf, SHARDS) for wf in ids} != set(range(SHARDS)):  # 16 random ids miss a
                ids.append(f"pair-{tag}-{len(ids)}")  # shard in one run of 25: add ids until each shard has one
            assert {shard_for("default", wf, SHARDS) for wf in ids} == set(range(SHARDS))
            handles = await asyncio.gather(*(
                clients[i % 2].start_workflow("Hello", i, id=wf, task_queue="q") for i, wf in enumerate(ids)))
            assert all(h.run_id for h in handles) and len({h.run_id for h in handles}) == len(ids)
            for i, handle in enumerate(handles):  # each server answers for every shard, through redirects
                other = clients[(i + 1) % 2].get_workflow_handle(handle.id)
                described = await other.describe()
                assert described.run_id == handle.run_id and described.status == "RUNNING"
            await asyncio.gather(*(clients[i % 2].get_workflow_handle(wf).terminate() for i, wf in enumerate(ids)))
            closed = await asyncio.gather(*(clients[i % 2].service.wait_closed("default", wf, "")
                                            for i, wf in enumerate(ids)))
            assert {e["event_type"] for e in closed} == {"WORKFLOW_EXECUTION_TERMINATED"}
        finally:
            for client in clients:
                await _close(client)

    run(scenario)
