"""Temporal's worker API (temporalio.worker) as Temporal's samples run workers, on both engines.

The imports are the only change from Temporal code: `temporalio` -> `ostinato`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from datetime import timedelta

from ostinato import activity, workflow
from ostinato.worker import UnsandboxedWorkflowRunner, Worker
from ostinato.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from tests.e2e.sdk_scenarios.envs import ScenarioEnv

TEN_SECONDS = timedelta(seconds=10)


@activity.defn
def slow_square(x: int) -> list[float]:
    """A plain function on the worker's `activity_executor`: returns when it ran, to check they did not overlap."""
    started = time.monotonic()
    time.sleep(0.1)
    return [x * x, started, time.monotonic(), float(threading.get_ident() != threading.main_thread().ident)]


@workflow.defn
class SquaresWorkflow:
    @workflow.run
    async def run(self, numbers: list[int]) -> list[list[float]]:
        return list(await asyncio.gather(*[
            workflow.execute_activity(slow_square, n, start_to_close_timeout=TEN_SECONDS) for n in numbers]))


async def test_run_and_shutdown_with_temporal_options(env: ScenarioEnv) -> None:
    """The samples' `worker.run()` with a thread pool for sync activities, stopped by `shutdown()`; at most one
    activity at a time (`max_concurrent_activities=1`), whichever runner is given."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as activity_executor:
        for runner in (UnsandboxedWorkflowRunner(), SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("json"))):
            worker = Worker(env.client, task_queue=env.task_queue, workflows=[SquaresWorkflow],
                            activities=[slow_square], activity_executor=activity_executor,
                            max_concurrent_activities=1, max_concurrent_workflow_tasks=5,
                            max_concurrent_local_activities=5, max_cached_workflows=10,
                            graceful_shutdown_timeout=timedelta(seconds=1), workflow_runner=runner)
            assert not worker.is_running
            running = asyncio.ensure_future(worker.run())
            await asyncio.sleep(0)
            assert worker.is_running
            result = await env.client.execute_workflow(SquaresWorkflow.run, [1, 2, 3],
                                                       id=env.workflow_id("squares"), task_queue=env.task_queue)
            await worker.shutdown()
            assert running.done() and not worker.is_running
            assert [square for square, *_ in result] == [1, 4, 9]
            assert all(in_thread == 1.0 for *_, in_thread in result)
            spans = sorted((start, end) for _, start, end, _ in result)
            assert all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(spans)), spans


@activity.defn
async def finish_when_shutting_down() -> str:
    """Works until its worker starts shutting down, then wraps up within the graceful shutdown timeout."""
    while not activity.is_worker_shutdown():
        activity.heartbeat()
        await asyncio.sleep(0.02)
    return "wrapped up on shutdown"


@workflow.defn
class ShutdownWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(  # type: ignore[no-any-return]
            finish_when_shutting_down, start_to_close_timeout=timedelta(minutes=1),
            heartbeat_timeout=timedelta(seconds=5))


async def test_graceful_shutdown_lets_a_running_activity_finish(env: ScenarioEnv) -> None:
    handle = await env.client.start_workflow(ShutdownWorkflow.run, id=env.workflow_id("shutdown"),
                                             task_queue=env.task_queue)
    async with Worker(env.client, task_queue=env.task_queue, workflows=[ShutdownWorkflow],
                      activities=[finish_when_shutting_down], graceful_shutdown_timeout=timedelta(seconds=5)) as worker:
        async def heartbeating() -> bool | None:
            activities = (await handle.describe()).raw["activities"]
            return True if activities and activities[0]["last_heartbeat_time_ms"] else None

        await env.wait_until(heartbeating, what="the activity running")
        await worker.shutdown()
    async with Worker(env.client, task_queue=env.task_queue, workflows=[ShutdownWorkflow]):
        assert await handle.result() == "wrapped up on shutdown"
    attempts = [e["attributes"][1]["attempt"] for e in await handle.fetch_history()
                if e["event_type"] == "ACTIVITY_TASK_STARTED"]
    assert attempts == [1]  # finished by the first worker, not retried by another
