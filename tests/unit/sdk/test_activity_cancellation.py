"""Cancelling an activity raises what Temporal's Python SDK raises (issue 17): `ActivityError` whose cause is
`CancelledError`, for each `ActivityCancellationType`, whether the activity's handle or the workflow is cancelled;
a workflow that lets it out is CANCELED, not FAILED."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import WorkflowExecutionStatus, WorkflowFailureError
from ostinato.exceptions import ActivityError, CancelledError
from ostinato.sdk import _instance as runtime
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Replayer, Worker
from ostinato.workflow import ActivityCancellationType
from tests.unit.sdk.support import run_async

Q = "activity-cancellation"
ACKNOWLEDGED: list[str] = []
STARTED: list[str] = []


@activity.defn
async def slow(label: str) -> str:
    STARTED.append(label)
    try:
        while True:
            await asyncio.sleep(0.05)
            activity.heartbeat()
    except asyncio.CancelledError:
        ACKNOWLEDGED.append(label)
        raise


@workflow.defn
class CancelsItsActivity:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def cancel_it(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, kind: str) -> str:
        handle = workflow.start_activity(slow, kind, start_to_close_timeout=timedelta(minutes=5),
                                         heartbeat_timeout=timedelta(seconds=1),
                                         cancellation_type=ActivityCancellationType(kind))
        await workflow.wait_condition(lambda: self.go)  # once the activity runs
        handle.cancel()
        try:
            await handle
        except ActivityError as error:
            return f"ActivityError caused by {type(error.cause).__name__}, {error.retry_state}"
        return "no error"


@workflow.defn
class AwaitsItsActivity:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(slow, "awaited", start_to_close_timeout=timedelta(minutes=5),
                                               heartbeat_timeout=timedelta(seconds=1))


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def _cancel_running(env: WorkflowEnvironment, kind: str) -> str:
    STARTED.clear()
    ACKNOWLEDGED.clear()
    handle = await env.client.start_workflow(CancelsItsActivity.run, kind, id=f"cancels-{kind}", task_queue=Q)
    await _until(lambda: kind in STARTED)
    await handle.signal(CancelsItsActivity.cancel_it)
    return str(await handle.result())


@pytest.mark.parametrize("kind", ["TRY_CANCEL", "WAIT_CANCELLATION_COMPLETED", "ABANDON"])
@run_async
async def test_a_cancelled_activity_raises_activity_error_caused_by_cancellation(kind: str) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[CancelsItsActivity], activities=[slow]) as worker:
        answer = await _cancel_running(env, kind)
        assert answer == "ActivityError caused by CancelledError, CANCEL_REQUESTED"
        if kind == "ABANDON":  # never told: it runs until the worker stops it
            assert ACKNOWLEDGED == []
            await worker.shutdown()
        else:
            await _until(lambda: [kind] == ACKNOWLEDGED)


@run_async
async def test_wait_cancellation_completed_waits_for_the_activity_to_acknowledge() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[CancelsItsActivity], activities=[slow]):
        await _cancel_running(env, "WAIT_CANCELLATION_COMPLETED")
        assert ACKNOWLEDGED == ["WAIT_CANCELLATION_COMPLETED"]  # before the workflow went on and completed


@run_async
async def test_a_workflow_cancelled_while_it_awaits_an_activity_is_canceled() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[AwaitsItsActivity], activities=[slow]):
        STARTED.clear()
        handle = await env.client.start_workflow(AwaitsItsActivity.run, id="awaits", task_queue=Q)
        await _until(lambda: "awaited" in STARTED)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as raised:
            await handle.result()
        assert isinstance(raised.value.cause, CancelledError)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


@workflow.defn
class ReactsToCancellation:
    """Takes another path on each behaviour, so replaying a run with the wrong one is non-deterministic."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def cancel_it(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> str:
        handle = workflow.start_activity(slow, "reacts", start_to_close_timeout=timedelta(minutes=5),
                                         heartbeat_timeout=timedelta(seconds=1))
        await workflow.wait_condition(lambda: self.go)
        handle.cancel()
        try:
            await handle
        except asyncio.CancelledError:
            await workflow.sleep(timedelta(seconds=1))
            return "asyncio's CancelledError"
        except ActivityError:
            return "ActivityError"
        return "no error"


async def _reacts(env: WorkflowEnvironment, workflow_id: str) -> tuple[str, list[dict[str, Any]]]:
    STARTED.clear()
    handle = await env.client.start_workflow(ReactsToCancellation.run, id=workflow_id, task_queue=Q)
    await _until(lambda: "reacts" in STARTED)
    await handle.signal(ReactsToCancellation.cancel_it)
    return str(await handle.result()), list(await handle.fetch_history())


def _flags(history: list[dict[str, Any]]) -> list[list[int]]:
    return [e["attributes"][1]["sdk_flags"] for e in history if e["event_type"] == "WORKFLOW_TASK_COMPLETED"]


@run_async
async def test_a_run_begun_before_the_change_keeps_asyncio_cancelled_error_on_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour is an SDK flag (Temporal's `sdk_flags`): a run whose first task an older SDK completed (no
    flag recorded) keeps seeing asyncio's CancelledError, so its replay takes the path it took."""
    async with await WorkflowEnvironment.start_time_skipping() as env:
        with monkeypatch.context() as patch:
            patch.setattr(runtime, "SDK_FLAGS", frozenset())  # the SDK before the change
            async with Worker(env.client, task_queue=Q, workflows=[ReactsToCancellation], activities=[slow]):
                before, old = await _reacts(env, "before")
        async with Worker(env.client, task_queue=Q, workflows=[ReactsToCancellation], activities=[slow]):
            after, new = await _reacts(env, "after")
    assert (before, after) == ("asyncio's CancelledError", "ActivityError")
    assert all(flags == [] for flags in _flags(old)) and all(flags == [1] for flags in _flags(new))
    replayer = Replayer(workflows=[ReactsToCancellation])
    assert replayer.replay(old).failure is None  # with today's SDK: the old path again
    assert replayer.replay(new).failure is None
