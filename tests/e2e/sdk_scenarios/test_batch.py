"""Batch operations on both engines: a job terminates (or signals) every run a visibility query selects, with
progress, a rate limit and cancellation; each run is acted on once (checked from history)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from ostinato.client import Client, WorkflowHandle
from ostinato.sdk.batch import BatchSignal, BatchTerminate
from ostinato.sdk.batch_workflow import BATCH_TASK_QUEUE, BatchOperation, batch_activities
from ostinato.worker import Worker
from tests.conftest import run_cli
from tests.e2e.sdk_scenarios.conftest import ScenarioEnv
from tests.e2e.sdk_scenarios.test_scenarios import only
from tests.e2e.sdk_scenarios.workflows import Child
from tests.tools.servers import ServerProcess

RUNS = 12


@asynccontextmanager
async def batch_worker(env: ScenarioEnv) -> AsyncIterator[None]:
    """The job's worker: every `ostinato server` runs one; the in-memory engine needs the test's."""
    if env.name != "time-skipping":
        yield
        return
    async with Worker(env.client, task_queue=BATCH_TASK_QUEUE, workflows=[BatchOperation],
                      activities=batch_activities(env.client)):
        yield


async def _runs(env: ScenarioEnv, stem: str) -> list[WorkflowHandle]:
    if env.name == "time-skipping":
        pytest.skip("the time-skipping environment has no visibility store to select runs with")
    handles = [await env.client.start_workflow(Child.run, id=env.workflow_id(stem),
                                               task_queue=env.task_queue) for _ in range(RUNS)]
    query = f"WorkflowId STARTS_WITH '{stem}' AND ExecutionStatus = 'Running'"

    async def visible() -> int | None:
        found = await env.client.count_workflows(query)
        return found if found == RUNS else None

    await env.wait_until(visible, what="the runs in visibility", timeout_s=30)
    return handles


async def test_batch_terminate_by_query_terminates_each_run_once(env: ScenarioEnv) -> None:
    stem = env.workflow_id("bt")
    handles = await _runs(env, stem)
    async with batch_worker(env):
        job = await env.client.start_batch_operation(
            f"WorkflowId STARTS_WITH '{stem}' AND ExecutionStatus = 'Running'", BatchTerminate("cleanup"),
            job_id=env.workflow_id("job"), rps=50)
        described = await job.result()
    assert (described.state, described.total, described.done, described.failed) == ("COMPLETED", RUNS, RUNS, 0)
    for handle in handles:
        history = await handle.fetch_history()
        assert len(only(history, "WORKFLOW_EXECUTION_TERMINATED")) == 1


async def test_batch_signal_and_cancel_of_the_job(env: ScenarioEnv) -> None:
    stem = env.workflow_id("bs")
    handles = await _runs(env, stem)
    async with env.worker(workflows=[Child]), batch_worker(env):
        job = await env.client.start_batch_operation(f"WorkflowId STARTS_WITH '{stem}'",
                                                     BatchSignal("finish", []), job_id=env.workflow_id("job"))
        described = await job.result()
        assert (described.state, described.done) == ("COMPLETED", RUNS)
        results = await asyncio.gather(*(h.result() for h in handles))
    assert len(results) == RUNS
    slow = await env.client.start_batch_operation(f"WorkflowId STARTS_WITH '{stem}'", BatchTerminate(),
                                                  job_id=env.workflow_id("slow"), rps=0.01)
    async with batch_worker(env):
        async def paused() -> bool | None:  # one run acted on (failed: it had closed), then a 100 s pause
            progress = await slow.describe()
            return True if progress.done + progress.failed >= 1 else None

        await env.wait_until(paused, what="the slow job's first run", timeout_s=30)
        await slow.cancel()
        try:
            ended = await asyncio.wait_for(slow.result(), 20)
        except TimeoutError:
            print([(e["event_id"], e["event_type"]) for e in await slow._workflow.fetch_history()])
            raise
    assert (ended.state, ended.done, ended.failed) == ("CANCELED", 0, 1)


def test_batch_and_reset_over_http_and_the_command_line(scenario_server: ServerProcess) -> None:
    """The HTTP API starts and describes a job, the CLI describes and lists it; a reset to a point that is no
    completed workflow task is refused by both."""
    server = scenario_server
    stem = f"cli-{uuid.uuid4().hex[:6]}"

    async def runs() -> None:
        client = await Client.connect(server.url)
        for i in range(3):
            await client.start_workflow("Idle", id=f"{stem}-{i}", task_queue="idle")
        while await client.count_workflows(f"WorkflowId STARTS_WITH '{stem}'") < 3:
            await asyncio.sleep(0.1)
        await client.close()

    asyncio.run(runs())
    job_id = f"job-{stem}"
    status, started = _post(server, "/api/v1/namespaces/default/batch-operations", {
        "query": f"WorkflowId STARTS_WITH '{stem}'", "operation": "terminate", "reason": "gc", "job_id": job_id})
    assert (status, started["job_id"]) == (201, job_id), started
    deadline = time.monotonic() + 60
    while True:
        status, progress = server.get(f"/api/v1/namespaces/default/batch-operations/{job_id}")
        if status == 200 and progress["state"] == "COMPLETED":
            break
        assert time.monotonic() < deadline, progress
        time.sleep(0.2)
    assert (progress["total"], progress["done"], progress["failed"]) == (3, 3, 0)
    described = run_cli("batch", "describe", job_id, "--server", server.url)
    assert described.returncode == 0 and json.loads(described.stdout)["done"] == 3, described.stderr
    listed = run_cli("batch", "list", "--server", server.url)
    assert {"job_id": job_id, "status": "COMPLETED"} in json.loads(listed.stdout), listed.stderr
    status, refused = _post(server, f"/api/v1/namespaces/default/workflows/{stem}-0/reset", {"event_id": 1})
    assert status == 400 and "WORKFLOW_TASK_COMPLETED" in refused["message"], refused
    cli = run_cli("workflow", "reset", f"{stem}-0", "--type", "last", "--server", server.url)
    assert cli.returncode != 0 and "no completed workflow task" in cli.stdout + cli.stderr


def _post(server: ServerProcess, path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(server.url + path, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
