"""Workflow retry policies and cron schedules through the SDK, on the time-skipping environment: Temporal's names
(`retry_policy=`, `cron_schedule=`, `workflow.info().attempt`, `get_last_failure`, `get_last_completion_result`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from ostinato import workflow
from ostinato.client import WorkflowExecutionStatus
from ostinato.common import RetryPolicy
from ostinato.exceptions import ApplicationError, ChildWorkflowError, WorkflowFailureError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "chains"
RETRY = RetryPolicy(initial_interval=timedelta(seconds=10), backoff_coefficient=2.0, maximum_attempts=5)


@workflow.defn
class Flaky:
    """Fails until its third attempt, and reports what each attempt saw."""

    @workflow.run
    async def run(self, name: str) -> list[object]:
        info = workflow.info()
        last = workflow.get_last_failure()
        seen = [info.attempt, info.first_execution_run_id == info.run_id, str(last) if last else None,
                workflow.now().timestamp(), info.retry_policy.maximum_attempts if info.retry_policy else None,
                info.cron_schedule]
        if info.attempt < 3:
            raise ApplicationError(f"attempt {info.attempt} of {name} failed", type="Flaky")
        return seen


@workflow.defn
class AlwaysFails:
    @workflow.run
    async def run(self) -> None:
        raise ApplicationError("no", type="Broken")


@workflow.defn
class Counter:
    """A cron workflow counting its runs through the last completion result."""

    @workflow.run
    async def run(self) -> int:
        assert workflow.info().cron_schedule == "* * * * *"
        previous: int = workflow.get_last_completion_result(int) if workflow.has_last_completion_result() else 0
        return previous + 1


@workflow.defn
class Parent:
    @workflow.run
    async def run(self) -> list[object]:
        return await workflow.execute_child_workflow(Flaky.run, "child", id="flaky-child", retry_policy=RETRY)  # type: ignore[no-any-return]


@workflow.defn
class ParentOfBroken:
    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.execute_child_workflow(AlwaysFails.run, id="broken-child",
                                                  retry_policy=RetryPolicy(maximum_attempts=2))
        except ChildWorkflowError as error:
            return f"{error.retry_state}"
        return "completed?"


@workflow.defn
class StartsCronChild:
    @workflow.run
    async def run(self) -> str:
        child = await workflow.start_child_workflow(Counter.run, id="cron-child", cron_schedule="* * * * *",
                                                    parent_close_policy=workflow.ParentClosePolicy.ABANDON)
        return child.run_id or ""


@run_async
async def test_a_workflow_retried_three_times_then_succeeding() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Flaky]):
        begin = (await env.get_current_time()).timestamp()
        handle = await env.client.start_workflow(Flaky.run, "job", id="flaky", task_queue=Q, retry_policy=RETRY)
        attempt, first_run, last_failure, at, maximum_attempts, cron_schedule = await handle.result()
        assert attempt == 3 and first_run is False and (maximum_attempts, cron_schedule) == (5, None)
        assert last_failure == "attempt 2 of job failed"
        assert 30 <= at - begin < 31  # 10 s then 20 s of backoff, in virtual time
        runs = [e async for e in handle.fetch_history_events()]
        assert runs[-1]["event_type"] == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"  # the handle's run: the first
        description = await handle.describe()
        assert description.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        latest = await env.client.get_workflow_handle("flaky").describe()
        assert latest.status == WorkflowExecutionStatus.COMPLETED and latest.run_id != handle.run_id


@run_async
async def test_maximum_attempts_reached_fails_the_workflow() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[AlwaysFails]):
        handle = await env.client.start_workflow(AlwaysFails.run, id="always", task_queue=Q,
                                                 retry_policy=RetryPolicy(maximum_attempts=3))
        with pytest.raises(WorkflowFailureError) as raised:
            await handle.result()
        assert "no" in str(raised.value.cause)
        latest = env.client.get_workflow_handle("always")
        assert (await latest.describe()).raw["attempt"] == 3
        closed = [e async for e in latest.fetch_history_events()][-1]
        assert closed["event_type"] == "WORKFLOW_EXECUTION_FAILED"
        assert closed["attributes"][1]["retry_state"] == "MAXIMUM_ATTEMPTS_REACHED"
        with pytest.raises(WorkflowFailureError):
            await env.client.execute_workflow(AlwaysFails.run, id="never-again", task_queue=Q, retry_policy=RetryPolicy(
                maximum_attempts=0, non_retryable_error_types=["Broken"]))


async def chain(env: WorkflowEnvironment, run_id: str) -> list[tuple[datetime, object]]:
    """Each run of a chain from `run_id` on: when its first task was due, and the result it handed on (if closed)."""
    runs = []
    while run_id:
        events = [e async for e in env.client.get_workflow_handle("counter", run_id=run_id).fetch_history_events()]
        started = events[0]["attributes"][1]
        due = datetime.fromtimestamp((events[0]["event_time_ms"] + started["first_workflow_task_backoff_ms"]) / 1000,
                                     UTC)
        run_id = ""
        if events[-1]["event_type"] == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW":
            closed = events[-1]["attributes"][1]
            runs.append((due, env.client.data_converter.decode_one(closed["last_completion_result"], int)))
            run_id = closed["new_execution_run_id"]
        else:
            runs.append((due, None))
    return runs


@run_async
async def test_cron_every_minute_for_five_runs() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Counter]):
        handle = await env.client.start_workflow(Counter.run, id="counter", task_queue=Q, cron_schedule="* * * * *")
        for _ in range(100):
            await env.sleep(timedelta(seconds=30))
            runs = await chain(env, handle.run_id)
            if len(runs) > 5:
                break
        await env.client.get_workflow_handle("counter").terminate("five runs are enough")
        runs = await chain(env, handle.run_id)
        assert [result for _, result in runs[:5]] == [1, 2, 3, 4, 5]
        due = [at for at, _ in runs]
        assert all(at.second == 0 and at.microsecond == 0 for at in due)  # on the minute, in virtual time
        assert all(later - earlier == timedelta(minutes=1) for earlier, later in pairwise(due))
        history = [e async for e in env.client.get_workflow_handle("counter").fetch_history_events()]
        assert history[-1]["event_type"] == "WORKFLOW_EXECUTION_TERMINATED"


@run_async
async def test_a_parent_sees_its_retried_child_once() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Parent, Flaky, ParentOfBroken, AlwaysFails]):
        attempt, _, last_failure, *_ = await env.client.execute_workflow(Parent.run, id="parent", task_queue=Q)
        assert (attempt, last_failure) == (3, "attempt 2 of child failed")
        assert await env.client.execute_workflow(ParentOfBroken.run, id="parent-2", task_queue=Q) == \
            "MAXIMUM_ATTEMPTS_REACHED"


@run_async
async def test_a_child_started_with_a_cron_schedule_repeats() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[StartsCronChild, Counter]):
        first = await env.client.execute_workflow(StartsCronChild.run, id="cron-parent", task_queue=Q)
        child = env.client.get_workflow_handle("cron-child")
        assert (await child.describe()).raw["cron_schedule"] == "* * * * *"
        await env.sleep(timedelta(minutes=3))
        latest = await child.describe()
        assert latest.run_id != first and latest.raw["attempt"] == 1
        await child.terminate("enough")
