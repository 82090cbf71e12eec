"""Worker versioning on a real broker (issue 23's acceptance): workers of build A run N long-lived pinned runs; build B
becomes current and its workers start; new runs go to B while A's pinned runs stay on A (every WORKFLOW_TASK_COMPLETED
in their histories names A, and their activities ran on A); an auto-upgrade run started on A moves to B at its next
task; with A's workers stopped, A's pinned runs wait through their task timeouts (running, not failed) until A comes
back; `BuildIds = 'pinned:A'` counts them, then none; every activity ran once, and the history checker finds nothing
wrong. The short form (N=10) runs by default; the full form (N=50, `-m chaos_full`) is the acceptance run."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import Client, WorkflowExecutionStatus, WorkflowHandle
from ostinato.common import VersioningBehavior, WorkerDeploymentVersion
from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.checker import check_history
from ostinato.worker import Worker, WorkerDeploymentConfig
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess

QUEUE = "versioned-orders"
RAN: Counter[tuple[str, int]] = Counter()  # (workflow id, step) -> times an activity ran, counted outside the engine


def _where(build: str) -> Callable[[int], Awaitable[str]]:
    @activity.defn(name="where")
    async def where(step: int) -> str:
        RAN[(activity.info().workflow_id, step)] += 1
        return build

    return where


class _Steps:
    """One activity, a wait for a signal (long-lived), another activity: the build of each step's worker."""

    def __init__(self) -> None:
        self.go = False

    async def steps(self) -> list[str]:
        timeout = timedelta(seconds=30)
        first = await workflow.execute_activity("where", 1, start_to_close_timeout=timeout)
        await workflow.wait_condition(lambda: self.go)
        second = await workflow.execute_activity("where", 2, start_to_close_timeout=timeout)
        return [str(first), str(second)]

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class PinnedOrder(_Steps):
    @workflow.run
    async def run(self) -> list[str]:
        return await self.steps()


@workflow.defn(versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class UpgradingOrder(_Steps):
    @workflow.run
    async def run(self) -> list[str]:
        return await self.steps()


def _worker(client: Client, build: str) -> Worker:
    if build == "A":  # Temporal's older spelling for A, the deployment config for B: both must route alike
        return Worker(client, task_queue=QUEUE, workflows=[PinnedOrder, UpgradingOrder], activities=[_where("A")],
                      build_id="A", use_worker_versioning=True)
    return Worker(client, task_queue=QUEUE, workflows=[PinnedOrder, UpgradingOrder], activities=[_where(build)],
                  deployment_config=WorkerDeploymentConfig(WorkerDeploymentVersion("orders", build)))


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.2)


async def _completed_builds(handle: WorkflowHandle) -> list[str]:
    return [e["attributes"][1]["build_id"] async for e in handle.fetch_history_events()
            if e["event_type"] == "WORKFLOW_TASK_COMPLETED"]


def _post(url: str, body: object) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def _first_step_done(handles: list[WorkflowHandle]) -> bool:
    infos = [(await h.describe()).raw for h in handles]
    return all(i["build_id"] and not i["activities"] and i["workflow_task"] is None for i in infos)


async def _scenario(server: ServerProcess, n: int) -> tuple[dict[str, float], str]:
    RAN.clear()
    tag = uuid.uuid4().hex[:6]
    client = await Client.connect(server.url)
    timings: dict[str, float] = {}
    started = time.monotonic()
    await client.set_current_deployment_version(QUEUE, "A")
    worker_a = _worker(client, "A")
    await worker_a.__aenter__()
    # Short task timeouts, so the outage below spans several of them.
    pinned = [await client.start_workflow(PinnedOrder.run, id=f"pinned-{tag}-{i}", task_queue=QUEUE,
                                          task_timeout=timedelta(seconds=2)) for i in range(n)]
    moving = await client.start_workflow(UpgradingOrder.run, id=f"moving-{tag}", task_queue=QUEUE)
    await _until("A ran every run's first step", lambda: _first_step_done([*pinned, moving]))
    timings["first steps on A"] = time.monotonic() - started

    drain = "BuildIds = 'pinned:A' AND ExecutionStatus = 'Running'"

    async def counted(expected: int) -> bool:
        return await client.count_workflows(drain) == expected

    await _until(f"{n} runs pinned to A are counted", lambda: counted(n))

    # B becomes current and its workers start: new runs go to B, the auto-upgrade run moves at its next task.
    info = await client.set_current_deployment_version(QUEUE, "B")
    assert info.current_build == "B"
    worker_b = _worker(client, "B")
    await worker_b.__aenter__()
    fresh = [await client.start_workflow(PinnedOrder.run, id=f"fresh-{tag}-{i}", task_queue=QUEUE)
             for i in range(max(2, n // 5))]
    await moving.signal(UpgradingOrder.proceed)
    assert await asyncio.wait_for(moving.result(), 60) == ["A", "B"]

    # A's workers stop: the pinned runs' next tasks wait in A's topic, through several task timeouts.
    await worker_a.shutdown()
    for handle in pinned:
        await handle.signal(PinnedOrder.proceed)
    await asyncio.sleep(7)
    for handle in pinned:
        described = await handle.describe()
        assert described.status is WorkflowExecutionStatus.RUNNING, (handle.id, described.status)
        assert described.versioning_info.pinned_build == "A"
    assert RAN[(pinned[0].id, 2)] == 0  # nothing ran them elsewhere (B's workers are up)
    timings["A away"] = 7.0

    # A comes back: every pinned run finishes there.
    back = time.monotonic()
    worker_a = _worker(client, "A")
    await worker_a.__aenter__()
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in pinned)), 120)
    timings["pinned runs done after A came back"] = time.monotonic() - back
    assert all(r == ["A", "A"] for r in results), results
    for handle in fresh:
        await handle.signal(PinnedOrder.proceed)
    assert [await asyncio.wait_for(h.result(), 60) for h in fresh] == [["B", "B"]] * len(fresh)
    await _until("no run is counted as pinned to A any more", lambda: counted(0))
    assert await client.count_workflows(f"BuildIds = 'pinned:B' AND WorkflowId = '{fresh[0].id}'") == 1

    for handle in pinned:
        assert set(await _completed_builds(handle)) == {"A"}, handle.id
    timed_out = [e async for e in pinned[0].fetch_history_events() if e["event_type"] == "WORKFLOW_TASK_TIMED_OUT"]
    assert timed_out, "the outage should have outlasted the pinned runs' task timeout"
    for handle in fresh:
        assert set(await _completed_builds(handle)) == {"B"}, handle.id
    builds = await _completed_builds(moving)
    assert builds[0] == "A" and builds[-1] == "B", builds
    described = await moving.describe()
    assert described.versioning_info.behavior is VersioningBehavior.AUTO_UPGRADE
    assert described.versioning_info.build_id == "B"
    # every activity ran exactly once (none lost, none twice)
    expected = {(h.id, step) for h in [*pinned, *fresh, moving] for step in (1, 2)}
    assert set(RAN) == expected and set(RAN.values()) == {1}, {k: v for k, v in RAN.items() if v != 1}
    await worker_a.shutdown()
    await worker_b.shutdown()
    await client.close()
    timings["total"] = time.monotonic() - started
    return timings, pinned[0].id


@pytest.mark.parametrize("n", [pytest.param(10, id="short"), pytest.param(50, id="full", marks=pytest.mark.chaos_full)])
def test_pinned_runs_stay_on_their_build_while_new_work_moves(kafka: KafkaCluster, topic_prefix: str,
                                                              server: ServerProcess, n: int) -> None:
    timings, pinned_id = asyncio.run(_scenario(server, n))
    report = check_history(kafka.bootstrap, topic_prefix)
    assert report.ok, report.summary()
    # the command line: describe a queue's builds, ramp one, and see a run's versioning
    found = run_cli("deployment", "describe", "--task-queue", QUEUE, "--server", server.url, "--output", "json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["current_build"] == "B"
    ramp = run_cli("deployment", "set-ramping", "--task-queue", QUEUE, "--build-id", "C", "--percentage", "5",
                   "--server", server.url, "--output", "json")
    assert ramp.returncode == 0, ramp.stderr
    assert json.loads(ramp.stdout)["ramping_build"] == "C"
    # the HTTP API refuses what cannot be routed, naming why
    path = f"/api/v1/namespaces/default/task-queues/{QUEUE}/versioning"
    for body, why in [({"current_build": "a/b"}, "characters"), ({"ramping_build": "B"}, "already current"),
                      ({"ramping_build": "D", "ramping_percentage": 101}, "0 to 100"), ({"nope": 1}, "the body is"),
                      ({}, "the body is")]:
        status, answer = _post(server.url + path, body)
        assert status == 400 and why in answer["message"], (body, status, answer)
    status, answer = server.get(path)
    assert status == 200 and (answer["current_build"], answer["ramping_build"]) == ("B", "C"), answer
    queue = run_cli("task-queue", "describe", QUEUE, "--server", server.url)
    assert "current build B, ramping C (5%)" in " ".join(queue.stdout.split()), queue.stdout + queue.stderr
    shown = run_cli("workflow", "describe", pinned_id, "--server", server.url)
    assert "PINNED, pinned to A, last task by build A" in " ".join(shown.stdout.split()), shown.stdout
    print(f"worker versioning, {n} pinned runs:", {k: round(v, 1) for k, v in timings.items()}, report.summary())
