"""Updates end to end (issue 18): a real broker, `ostinato server`, a worker process, and the SDK client, the HTTP
API and the CLI as users call them. A rejected update leaves no event; the same update id returns the first
outcome, also after the server was killed (kill -9) and restarted on a fresh data directory (state restored from
the changelog); update-with-start starts once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import aiohttp
import pytest

from ostinato.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from ostinato.common import WorkflowIDConflictPolicy
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import REPO, run_cli
from tests.e2e.update_app import Approval, Cart
from tests.tools.servers import ServerProcess

Q = "cart-q"


def updates_in(history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["event_type"].removeprefix("WORKFLOW_EXECUTION_UPDATE_"), e["attributes"][1]["update_id"])
            for e in history if "UPDATE" in e["event_type"]]


def _start_worker(url: str, log_path: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """`ostinato worker tests.e2e.update_app:worker` against the server at `url`, as a user runs it."""
    log = log_path.open("wb")
    return subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.update_app:worker", "--server",
                             url], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)), log


def test_updates_through_the_sdk_the_api_and_the_cli(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    worker, log = _start_worker(server.url, tmp_path / "worker.log")
    wf = f"cart-{uuid.uuid4().hex[:6]}"
    try:
        server.wait_owning(2)

        async def sdk() -> list[dict[str, Any]]:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                handle = await client.start_workflow(Cart.run, id=wf, task_queue=Q)
                assert await handle.execute_update(Cart.add, "apple", id="first") == 1
                before = len(await handle.fetch_history())
                with pytest.raises(WorkflowUpdateFailedError) as rejected:
                    await handle.execute_update(Cart.add, "")
                assert "an item needs a name" in str(rejected.value.cause)
                assert len(await handle.fetch_history()) == before  # a rejected update leaves no event
                assert await handle.execute_update(Cart.add_priced, "pear") == 4  # ran an activity
                assert await handle.execute_update(Cart.add, "apple", id="first") == 1  # the first outcome again
                return await handle.fetch_history()

        history = asyncio.run(asyncio.wait_for(sdk(), 120))
        assert [kind for kind, _ in updates_in(history)] == ["ACCEPTED", "COMPLETED"] * 2
        # What is in the history topic replays with today's code (the handlers run again where they were accepted).
        replayed = run_cli("replay", "tests.e2e.update_app:WORKFLOWS", "--from-kafka", "--kafka", kafka.bootstrap,
                           "--prefix", topic_prefix, "-o", "json")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert json.loads(replayed.stdout)["replayed"] == 1

        opts = ["--server", server.url]
        cli = run_cli("workflow", "update", wf, "add", "--input", '"plum"', "-o", "json", *opts)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        shown = json.loads(cli.stdout)
        assert shown["stage"] == "COMPLETED" and shown["outcome"]["result"] == 3
        refused = run_cli("workflow", "update", wf, "add", "--input", '""', "-o", "json", *opts)
        assert refused.returncode == 1 and "an item needs a name" in refused.stdout
        accepted = run_cli("workflow", "update", wf, "add", "--input", '"fig"', "--wait-for-stage", "accepted",
                           "-o", "json", *opts)
        assert accepted.returncode == 0 and json.loads(accepted.stdout)["stage"] in ("ACCEPTED", "COMPLETED")

        async def http() -> None:
            base = f"{server.url}/api/v1/namespaces/default/workflows"
            async with aiohttp.ClientSession() as session:
                # POST, then 303 to the owner's read, which waits for the stage: one call as curl -L makes it.
                async with session.post(f"{base}/{wf}/updates/add", json={"input": ["kiwi"], "update_id": "k",
                                                                          "wait_stage": "COMPLETED"}) as resp:
                    body = await resp.json()
                    assert resp.status == 200, body
                    assert body["outcome"]["result"] == 5 and body["update_id"] == "k"
                async with session.post(f"{base}/{wf}/updates/add", json={"input": ["kiwi"]},
                                        allow_redirects=False) as resp:
                    assert resp.status == 303 and "/updates/" in resp.headers["Location"]
                async with session.post(f"{base}/{wf}/updates/add", json={"wait_stage": "SOMETIME"}) as resp:
                    assert resp.status == 400
                async with session.get(f"{base}/{wf}/updates/never-sent") as resp:
                    assert resp.status == 404
                started = f"{wf}-ws"
                for item, count in (("a", 1), ("b", 2)):
                    async with session.post(f"{base}/{started}/update-with-start", json={
                            "workflow_type": "Cart", "task_queue": Q, "wait_stage": "COMPLETED",
                            "update": {"name": "add", "input": [item]}}) as resp:
                        body = await resp.json()
                        assert resp.status == 200 and body["outcome"]["result"] == count, body

        asyncio.run(asyncio.wait_for(http(), 120))

        async def async_completion() -> None:
            token_file = tmp_path / "token"
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                handle = await client.start_workflow(Approval.run, str(token_file), id=f"{wf}-approval", task_queue=Q)
                while not token_file.exists() or not token_file.read_bytes():
                    await asyncio.sleep(0.05)
                completer = client.get_async_activity_handle(task_token=token_file.read_bytes())
                await completer.heartbeat("reviewing")
                await completer.complete("approved")
                assert await handle.result() == "approved"

        asyncio.run(asyncio.wait_for(async_completion(), 120))  # issue 17: completed from outside the worker
    finally:
        worker.kill()
        worker.wait(30)
        log.close()
        server.stop()


def test_the_same_update_id_after_a_crash_returns_the_first_outcome(kafka: KafkaCluster, topic_prefix: str,
                                                                   tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    worker, log = _start_worker(server.url, tmp_path / "worker.log")
    wf = f"crash-{uuid.uuid4().hex[:6]}"
    try:
        server.wait_owning(2)

        async def before() -> None:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                op = WithStartWorkflowOperation(Cart.run, id=wf, task_queue=Q,
                                                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
                assert await client.execute_update_with_start_workflow(Cart.add, "apple", id="once",
                                                                       start_workflow_operation=op) == 1

        asyncio.run(asyncio.wait_for(before(), 120))
        server.kill()  # kill -9
        # A new process on a fresh data directory: the shard's state comes back from the changelog.
        server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data2", tmp_path / "server2.log",
                               port=server.port).start()
        server.wait_owning(2)

        async def after() -> list[dict[str, Any]]:
            async with await HttpService.connect(server.url) as service:
                handle = Client(service).get_workflow_handle(wf)
                assert await handle.execute_update(Cart.add, "apple", id="once") == 1
                assert await handle.execute_update(Cart.add, "pear") == 2
                await handle.signal(Cart.checkout)
                assert await handle.result() == ["apple", "pear"]
                return await handle.fetch_history()

        history = asyncio.run(asyncio.wait_for(after(), 120))
        assert [u for kind, u in updates_in(history) if kind == "ACCEPTED"].count("once") == 1
    finally:
        worker.kill()
        worker.wait(30)
        log.close()
        server.stop()
