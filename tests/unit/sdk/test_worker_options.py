"""The `Worker` options Temporal users pass, accepted and in effect: max_concurrent_workflow_tasks,
max_concurrent_local_activities, graceful_shutdown_timeout, activity_executor and workflow_runner."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import timedelta

import pytest

from ostinato import activity, workflow
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import UnsandboxedWorkflowRunner, Worker
from ostinato.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from tests.unit.sdk.support import run_async

Q = "options-q"


class Peak:
    """How many calls run at once, and the most there were."""

    def __init__(self) -> None:
        self.now = self.most = 0


peak = Peak()
shutdown_log: list[str] = []


@activity.defn
async def busy(seconds: float) -> str:
    peak.now += 1
    peak.most = max(peak.most, peak.now)
    try:
        await asyncio.sleep(seconds)
    finally:
        peak.now -= 1
    return "done"


@activity.defn
async def patient(seconds: float) -> str:
    shutdown_log.append("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        shutdown_log.append("stopped")
        raise
    shutdown_log.append("finished")
    return "finished"


@activity.defn
def where() -> str:
    return threading.current_thread().name


@workflow.defn
class Local:
    @workflow.run
    async def run(self, count: int) -> list[str]:
        return list(await asyncio.gather(*(
            workflow.execute_local_activity(busy, 0.3, start_to_close_timeout=timedelta(seconds=5))
            for _ in range(count))))


@workflow.defn
class Remote:
    @workflow.run
    async def run(self, name: str) -> str:
        if name == "where":
            return str(await workflow.execute_activity(where, start_to_close_timeout=timedelta(seconds=5)))
        return str(await workflow.execute_activity(patient, 0.5, start_to_close_timeout=timedelta(seconds=30)))


@pytest.fixture(autouse=True)
def _reset() -> None:
    peak.now = peak.most = 0
    shutdown_log.clear()


async def _peak_of(env: WorkflowEnvironment, runs: int, count: int, **options: object) -> int:
    peak.most = 0
    async with Worker(env.client, task_queue=Q, workflows=[Local], activities=[busy], **options):  # type: ignore[arg-type]
        handles = [await env.client.start_workflow(Local.run, count, id=f"local-{i}", task_queue=Q)
                   for i in range(runs)]
        for handle in handles:
            assert await handle.result() == ["done"] * count
    return peak.most


@run_async
async def test_max_concurrent_workflow_tasks_limits_the_tasks_handled_at_once() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        # Each task runs its local activity: two tasks at once overlap theirs, one at a time cannot.
        assert await _peak_of(env, 2, 1, max_concurrent_workflow_tasks=1) == 1
    async with await WorkflowEnvironment.start_time_skipping() as env:
        assert await _peak_of(env, 2, 1, max_concurrent_workflow_tasks=2) == 2


@run_async
async def test_max_concurrent_local_activities_limits_the_attempts_running_at_once() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        assert await _peak_of(env, 1, 3, max_concurrent_local_activities=1) == 1
    async with await WorkflowEnvironment.start_time_skipping() as env:
        assert await _peak_of(env, 1, 3) == 3


async def _shutdown_while_running(grace: timedelta | None) -> None:
    env = await WorkflowEnvironment.start_time_skipping()
    worker = Worker(env.client, task_queue=Q, workflows=[Remote], activities=[patient],
                    graceful_shutdown_timeout=grace or timedelta())
    async with worker:
        await env.client.start_workflow(Remote.run, "patient", id="patient", task_queue=Q)
        for _ in range(500):
            if shutdown_log:
                break
            await asyncio.sleep(0.01)
        assert shutdown_log == ["started"]


@run_async
async def test_graceful_shutdown_timeout_lets_running_activities_finish() -> None:
    await _shutdown_while_running(timedelta(seconds=10))
    assert shutdown_log == ["started", "finished"]
    # Temporal's default is no grace: running activities are asked to stop at once.
    shutdown_log.clear()
    await _shutdown_while_running(None)  # zero, the default
    assert shutdown_log == ["started", "stopped"]


@run_async
async def test_activity_executor_and_workflow_runner_are_accepted() -> None:
    restrictions = SandboxRestrictions.default.with_passthrough_modules("json")
    with ThreadPoolExecutor(2, thread_name_prefix="users-pool") as pool:
        async with await WorkflowEnvironment.start_time_skipping() as env:
            for runner in (SandboxedWorkflowRunner(restrictions=restrictions), UnsandboxedWorkflowRunner()):
                async with Worker(env.client, task_queue=Q, workflows=[Remote], activities=[where],
                                  activity_executor=pool, workflow_runner=runner):
                    result = await env.client.execute_workflow(Remote.run, "where", id=f"where-{id(runner)}",
                                                               task_queue=Q)
                assert result.startswith("users-pool")
        with ProcessPoolExecutor(1) as processes, pytest.raises(TypeError, match="ThreadPoolExecutor"):
            Worker(env.client, task_queue=Q, activities=[where], activity_executor=processes)


@run_async
async def test_the_rate_limits_are_accepted_by_the_time_skipping_environment() -> None:
    """temporalio's max_activities_per_second and max_task_queue_activities_per_second: accepted (and enforced only
    by a server's workers and engine, tests/integration/test_rate_limits.py); a rate must be positive."""
    async with await WorkflowEnvironment.start_time_skipping() as env:
        async with Worker(env.client, task_queue=Q, workflows=[Remote], activities=[where],
                          max_activities_per_second=2.0, max_task_queue_activities_per_second=5.0):
            result = await env.client.execute_workflow(Remote.run, "where", id="rated", task_queue=Q)
        assert isinstance(result, str)
        for options in ({"max_activities_per_second": 0.0}, {"max_task_queue_activities_per_second": -1.0}):
            with pytest.raises(ValueError, match="must be positive"):
                Worker(env.client, task_queue=Q, activities=[where], **options)  # type: ignore[arg-type]
