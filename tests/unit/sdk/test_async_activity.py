"""Async activity completion as Temporal has it (issue 17): `activity.raise_complete_async()`, then
`client.get_async_activity_handle(task_token=... | workflow_id=, activity_id=)` with complete, fail, heartbeat and
report_cancellation, from outside the worker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from ostinato import activity, workflow
from ostinato.client import AsyncActivityCancelledError
from ostinato.exceptions import ActivityError, ApplicationError, RPCError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "async-activities"
TOKENS: list[bytes] = []



@activity.defn
async def approve(request: str) -> str:
    TOKENS.append(activity.info().task_token)
    activity.raise_complete_async()


@workflow.defn
class Approval:
    @workflow.run
    async def run(self, request: str) -> str:
        try:
            return await workflow.execute_activity(approve, request, activity_id="approve",
                                                   start_to_close_timeout=timedelta(hours=1))
        except ActivityError as error:
            return f"failed: {error.cause}"



async def _token(count: int) -> bytes:
    for _ in range(500):
        if len(TOKENS) >= count:
            return TOKENS[count - 1]
        await asyncio.sleep(0.01)
    raise AssertionError("the activity never ran")


@run_async
async def test_an_activity_completed_from_outside_by_its_token_and_by_its_id() -> None:
    TOKENS.clear()
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Approval], activities=[approve]):
        first = await env.client.start_workflow(Approval.run, "loan", id="approval-1", task_queue=Q)
        token = await _token(1)
        handle = env.client.get_async_activity_handle(task_token=token)
        await handle.heartbeat("looking")
        await handle.complete("approved by Ada")
        assert await first.result() == "approved by Ada"
        with pytest.raises(RPCError):  # the attempt is answered: the token is stale
            await handle.complete("again")

        second = await env.client.start_workflow(Approval.run, "car", id="approval-2", task_queue=Q)
        await _token(2)
        by_id = env.client.get_async_activity_handle(workflow_id="approval-2", activity_id="approve")
        await by_id.fail(ApplicationError("refused", non_retryable=True))
        assert (await second.result()).startswith("failed: refused")

        third = await env.client.start_workflow(Approval.run, "boat", id="approval-3", task_queue=Q)
        await _token(3)
        await third.terminate("changed our minds")
        with pytest.raises(RPCError):
            await env.client.get_async_activity_handle(workflow_id="approval-3", activity_id="approve").complete()
    with pytest.raises(ValueError, match="task token"):
        env.client.get_async_activity_handle(task_token=b"nonsense")


@workflow.defn
class Cancellable:
    def __init__(self) -> None:
        self.stop = False

    @workflow.signal
    def give_up(self) -> None:
        self.stop = True

    @workflow.run
    async def run(self) -> str:
        task = workflow.start_activity(approve, "x", activity_id="approve", start_to_close_timeout=timedelta(hours=1),
                                       cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await workflow.wait_condition(lambda: self.stop)
        task.cancel()
        try:
            await task
        except (ActivityError, asyncio.CancelledError):
            return "activity cancelled"
        return "not cancelled"


@run_async
async def test_a_heartbeat_learns_of_a_cancellation_and_the_cancellation_is_reported() -> None:
    TOKENS.clear()
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Cancellable], activities=[approve]):
        run = await env.client.start_workflow(Cancellable.run, id="cancellable", task_queue=Q)
        handle = env.client.get_async_activity_handle(task_token=await _token(1))
        await run.signal(Cancellable.give_up)
        for _ in range(500):
            try:
                await handle.heartbeat()
            except AsyncActivityCancelledError:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the cancellation never showed")
        await handle.report_cancellation("stopped")
        assert await run.result() == "activity cancelled"
        assert "ACTIVITY_TASK_CANCELED" in [e["event_type"] for e in await run.fetch_history()]
