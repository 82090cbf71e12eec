"""Workflow updates through the SDK (issue 18), on the in-memory engine: handlers (sync, async running an
activity), validators that reject without a trace in history, de-duplication by id, handles, dynamic handlers,
`all_handlers_finished`, update-with-start, and replay of histories with updates (a changed handler is a
non-determinism error)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import (
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from ostinato.common import WorkflowIDConflictPolicy
from ostinato.exceptions import ApplicationError, NondeterminismError
from ostinato.sdk.replayer import Replayer
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "updates"



@activity.defn
async def price(item: str) -> int:
    return len(item)


@workflow.defn
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.total = 0
        self.done = False

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.done)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.items

    @workflow.update
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @add.validator
    def validate_add(self, item: str) -> None:
        if not item:
            raise ValueError("an item needs a name")

    @workflow.update
    async def add_priced(self, item: str) -> int:
        cost = await workflow.execute_activity(price, item, start_to_close_timeout=timedelta(seconds=5))
        self.items.append(item)
        self.total += cost
        return self.total

    @workflow.update
    def fail(self) -> None:
        raise ApplicationError("refused by the handler", type="Refused")

    @workflow.update(dynamic=True)
    def anything(self, name: str, args: list[Any]) -> str:
        return f"{name}:{args}"

    @workflow.signal
    def checkout(self) -> None:
        self.done = True


def update_events(history: list[dict[str, Any]]) -> list[str]:
    return [e["event_type"] for e in history if "UPDATE" in e["event_type"]]


@run_async
async def test_updates_validate_run_and_answer() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Cart], activities=[price]):
        handle = await env.client.start_workflow(Cart.run, id="cart-1", task_queue=Q)
        assert await handle.execute_update(Cart.add, "apple") == 1
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(Cart.add, "")
        assert "an item needs a name" in str(rejected.value.cause)
        assert await handle.execute_update(Cart.add_priced, "pear") == 4
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(Cart.fail)
        assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.type == "Refused"
        assert await handle.execute_update("surprise", args=[1, 2]) == "surprise:[1, 2]"
        # The same id joins the first update: its handler does not run again.
        assert await handle.execute_update(Cart.add, "plum", id="once") == 3
        assert await handle.execute_update(Cart.add, "plum", id="once") == 3
        started = await handle.start_update(Cart.add, "fig", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        assert await started.result() == 4
        assert await handle.get_update_handle_for(Cart.add, started.id).result() == 4
        await handle.signal(Cart.checkout)
        assert await handle.result() == ["apple", "pear", "plum", "fig"]
        history = await handle.fetch_history()
    # The rejected update left nothing; six accepted (apple, pear, fail, surprise, plum, fig), six completed.
    assert update_events(history).count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED") == 6
    assert update_events(history).count("WORKFLOW_EXECUTION_UPDATE_COMPLETED") == 6
    assert Replayer(workflows=[Cart]).replay(history).failure is None


@workflow.defn(name="Cart")
class CartChanged(Cart):
    @workflow.update
    def add(self, item: str) -> int:  # now runs an activity first: different commands on replay
        workflow.start_activity(price, item, start_to_close_timeout=timedelta(seconds=5))
        self.items.append(item)
        return len(self.items)


@run_async
async def test_a_changed_update_handler_is_a_nondeterminism_error_on_replay() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Cart], activities=[price]):
        handle = await env.client.start_workflow(Cart.run, id="cart-2", task_queue=Q)
        await handle.execute_update(Cart.add, "apple")
        await handle.signal(Cart.checkout)
        await handle.result()
        history = await handle.fetch_history()
    result = Replayer(workflows=[CartChanged]).replay(history)
    assert isinstance(result.failure, NondeterminismError)


@run_async
async def test_update_with_start_starts_once_then_updates_the_running_workflow() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Cart], activities=[price]):
        def operation() -> WithStartWorkflowOperation:
            return WithStartWorkflowOperation(Cart.run, id="cart-3", task_queue=Q,
                                              id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

        first = operation()
        assert await env.client.execute_update_with_start_workflow(Cart.add, "apple",
                                                                   start_workflow_operation=first) == 1
        second = operation()
        assert await env.client.execute_update_with_start_workflow(Cart.add, "pear",
                                                                   start_workflow_operation=second) == 2
        assert (await first.workflow_handle()).run_id == (await second.workflow_handle()).run_id
        handle = await second.workflow_handle()
        await handle.signal(Cart.checkout)
        assert await handle.result() == ["apple", "pear"]


@workflow.defn
class Hasty:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(1)
        return "done"

    @workflow.update
    async def slow(self) -> str:
        await workflow.sleep(3600)
        return "late"


@run_async
async def test_a_run_finishing_with_an_update_running_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ostinato.workflow")
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Hasty]):
        handle = await env.client.start_workflow(Hasty.run, id="hasty", task_queue=Q)
        await handle.start_update(Hasty.slow, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        assert await handle.result() == "done"
    assert any("update handlers were still running: slow" in r.getMessage() for r in caplog.records)


@workflow.defn
class Strict:
    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        return list(self.items)  # returns at once: an update-with-start must still be handled first

    @workflow.update
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @add.validator
    def validate_add(self, item: str) -> None:
        if item == "lucky":
            workflow.random()  # a validator may not draw the run's random numbers: replay never runs it
        if item == "timer":
            workflow.start_activity(price, item, start_to_close_timeout=timedelta(seconds=5))


@workflow.defn
class Lingering:
    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.update
    async def cancelled(self) -> None:
        task = asyncio.ensure_future(workflow.sleep(3600))
        task.cancel()
        await task

    @workflow.update
    def failing(self) -> None:
        raise ApplicationError("no")

    @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def forever(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.query
    def sneaky(self) -> int:
        workflow.start_activity(price, "x", start_to_close_timeout=timedelta(seconds=5))
        return 1


@run_async
async def test_validators_and_queries_are_read_only() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Strict, Lingering], activities=[price]):
        op = WithStartWorkflowOperation(Strict.run, id="strict", task_queue=Q,
                                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        # The update's handler runs before `run`, which returns at once: the item is in its result.
        assert await env.client.execute_update_with_start_workflow(Strict.add, "first",
                                                                   start_workflow_operation=op) == 1
        assert await (await op.workflow_handle()).result() == ["first"]
        handle = await env.client.start_workflow(Lingering.run, id="lingering", task_queue=Q)
        with pytest.raises(Exception, match="sneaky"):
            await handle.query(Lingering.sneaky)
        strict = await env.client.start_workflow(Strict.run, id="strict-2", task_queue=Q)
        await strict.result()
    # A validator that tries to change the workflow rejects the update, and history has nothing of it.
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Lingering, StrictWaiting], activities=[price]):
        waiting = await env.client.start_workflow(StrictWaiting.run, id="strict-3", task_queue=Q)
        for item in ("lucky", "timer"):
            with pytest.raises(WorkflowUpdateFailedError) as rejected:
                await waiting.execute_update(StrictWaiting.add, item)
            assert "ReadOnlyContextError" in repr(rejected.value.cause) or "may not change" in str(rejected.value.cause)
        assert not update_events(await waiting.fetch_history())


@workflow.defn
class StrictWaiting(Strict):
    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: False)
        return []


@run_async
async def test_handler_outcomes_and_handles_after_the_fact() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Lingering]):
        handle = await env.client.start_workflow(Lingering.run, id="lingering-2", task_queue=Q)
        with pytest.raises(WorkflowUpdateFailedError) as cancelled:
            await handle.execute_update(Lingering.cancelled)
        assert "cancelled" in str(cancelled.value.cause)
        failing = await handle.start_update(Lingering.failing, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        for _ in range(2):  # the outcome is kept: asking twice raises twice
            with pytest.raises(WorkflowUpdateFailedError):
                await failing.result()
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.get_update_handle(failing.id).result()
        forever = await handle.start_update(Lingering.forever, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        await handle.signal(Lingering.finish)
        await handle.result()
        with pytest.raises(WorkflowUpdateFailedError) as abandoned:
            await forever.result()
        assert "completed before the Update completed" in str(abandoned.value.cause)


@run_async
async def test_an_update_that_does_not_complete_in_time_says_so() -> None:
    from ostinato.client import WorkflowUpdateRPCTimeoutOrCancelledError

    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Lingering]):
        handle = await env.client.start_workflow(Lingering.run, id="lingering-3", task_queue=Q)
        with pytest.raises(WorkflowUpdateRPCTimeoutOrCancelledError):
            await handle.execute_update(Lingering.forever, rpc_timeout=timedelta(milliseconds=200))
        await handle.signal(Lingering.finish)
        await handle.result()
