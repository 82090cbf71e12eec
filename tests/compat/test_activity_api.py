"""Temporal's activity API (temporalio.activity) as Temporal's samples use it, on both engines.

The imports are the only change from Temporal code: `temporalio` -> `ostinato`. Activities report what they saw
through their results, heartbeats and signals, so the same code would run on a worker in another process.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import nullcontext
from datetime import timedelta

from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.common import RetryPolicy
from ostinato.exceptions import ActivityError, ApplicationError, CancelledError, is_cancelled_exception
from tests.e2e.sdk_scenarios.envs import ScenarioEnv, TimeSkippingEnv

TEN_SECONDS = timedelta(seconds=10)


# -- info, heartbeat details carried to the next attempt, activity.client() ----------------------------------------

@activity.defn(name="process-batch")
async def process_batch(size: int) -> dict[str, object]:
    info: activity.Info = activity.info()
    start = info.heartbeat_details[0] if info.heartbeat_details else 0
    for item in range(start, size):
        activity.heartbeat(item)  # a retry resumes from the last heartbeat
        if info.attempt == 1 and item == 2:
            raise ApplicationError("worker hiccup")
    # Tell the workflow how far it got, through the worker's own client.
    client: Client = activity.client()
    await client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id).signal("progress", size)
    return {"id": info.activity_id, "type": info.activity_type, "attempt": info.attempt, "resumed_at": start,
            "workflow": [info.workflow_type, info.workflow_namespace, info.task_queue], "local": info.is_local,
            "token": isinstance(info.task_token, bytes) and len(info.task_token) > 0,
            "timeouts": [info.start_to_close_timeout, info.heartbeat_timeout]}


@workflow.defn
class BatchWorkflow:
    def __init__(self) -> None:
        self.progress: list[int] = []

    @workflow.signal
    def progress(self, done: int) -> None:
        self.progress.append(done)

    @workflow.run
    async def run(self, size: int) -> dict[str, object]:
        result: dict[str, object] = await workflow.execute_activity(
            "process-batch", size, activity_id="batch", start_to_close_timeout=TEN_SECONDS,
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))
        await workflow.wait_condition(lambda: bool(self.progress))
        return {**result, "progress": self.progress}


async def test_info_heartbeat_details_and_client(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[BatchWorkflow], activities=[process_batch]):
        result = await env.client.execute_workflow(BatchWorkflow.run, 5, id=env.workflow_id("batch"),
                                                   task_queue=env.task_queue)
    assert result == {"id": "batch", "type": "process-batch", "attempt": 2, "resumed_at": 2,
                      "workflow": ["BatchWorkflow", "default", env.task_queue], "local": False, "token": True,
                      "timeouts": [10.0, 5.0], "progress": [5]}


# -- cancellation: async (CancelledError, wait_for_cancelled) and sync (is_cancelled) ---------------------------------

@activity.defn
async def wait_for_approval() -> str:
    async def keep_alive() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.05)

    beating = asyncio.ensure_future(keep_alive())
    try:
        await activity.wait_for_cancelled()  # a heartbeat learns of the cancellation, which cancels this task
        raise CancelledError("approval withdrawn")
    finally:
        beating.cancel()


@activity.defn
def crunch_numbers() -> str:
    """A sync activity (Temporal runs these on the worker's `activity_executor`) polling `is_cancelled()`."""
    while not activity.is_cancelled():
        try:
            activity.heartbeat()
        except CancelledError:  # a sync activity's heartbeat may raise once it is cancelled
            break
        time.sleep(0.05)
    activity.logger.info("crunching cancelled")
    raise CancelledError("stopped crunching")


@activity.defn
async def long_download() -> str:
    try:
        while True:
            activity.heartbeat("downloading")
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        activity.logger.info("download cancelled, cleaning up")
        raise


@workflow.defn
class CancellingWorkflow:
    """Starts an activity and cancels it when told to (a signal rather than a timer: the time-skipping environment
    does not move time while an activity runs, where Temporal's moves it at wall-clock speed)."""

    def __init__(self) -> None:
        self.cancel_requested = False

    @workflow.signal
    def cancel_activity(self) -> None:
        self.cancel_requested = True

    @workflow.run
    async def run(self, name: str) -> str:
        handle = workflow.start_activity(
            name, start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await workflow.wait_condition(lambda: self.cancel_requested)
        handle.cancel()
        try:
            return await handle  # type: ignore[no-any-return]
        except ActivityError as err:  # what Temporal raises: the activity's error, caused by CancelledError
            return f"{name}: {type(err.cause).__name__} ({is_cancelled_exception(err)})"


async def test_cancellation_reaches_async_and_sync_activities(env: ScenarioEnv) -> None:
    outcomes = []
    async with env.worker(workflows=[CancellingWorkflow], activities=[wait_for_approval, crunch_numbers,
                                                                       long_download]):
        for name in ("wait_for_approval", "crunch_numbers", "long_download"):
            handle = await env.client.start_workflow(CancellingWorkflow.run, name, id=env.workflow_id(name),
                                                     task_queue=env.task_queue)

            async def heartbeating() -> bool | None:
                activities = (await handle.describe()).raw["activities"]  # noqa: B023
                return True if activities and activities[0]["last_heartbeat_time_ms"] else None

            await env.wait_until(heartbeating, what=f"{name} heartbeating")
            await handle.signal(CancellingWorkflow.cancel_activity)
            outcomes.append(await handle.result())
            assert "ACTIVITY_TASK_CANCELED" in [event["event_type"] for event in await handle.fetch_history()]
    assert outcomes == [f"{name}: CancelledError (True)" for name in ("wait_for_approval", "crunch_numbers",
                                                                 "long_download")]


# -- completed asynchronously: Temporal's async activity completion sample ------------------------------------------

class GreetingComposer:
    """Hands its task token to a background task that completes it later with the worker's client."""

    def __init__(self) -> None:
        self.background: set[asyncio.Task[None]] = set()

    @activity.defn
    async def compose_greeting(self, name: str) -> str:
        task = asyncio.ensure_future(self.complete_greeting(activity.info().task_token, name, activity.client()))
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        activity.raise_complete_async()

    async def complete_greeting(self, task_token: bytes, name: str, client: Client) -> None:
        await asyncio.sleep(0.2)
        handle = client.get_async_activity_handle(task_token=task_token)
        await handle.heartbeat()
        await handle.complete(f"Hello, {name}!")


@workflow.defn
class AsyncGreeting:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity_method(  # type: ignore[no-any-return]
            GreetingComposer.compose_greeting, name, start_to_close_timeout=TEN_SECONDS)


async def test_raise_complete_async(env: ScenarioEnv) -> None:
    composer = GreetingComposer()
    # While the activity waits to be completed from outside nothing runs, so time skipping would jump to its
    # start-to-close timeout: Temporal's tests turn skipping off around such a wait, and so does this one.
    skipping = env.environment.auto_time_skipping_disabled() if isinstance(env, TimeSkippingEnv) else nullcontext()
    async with env.worker(workflows=[AsyncGreeting], activities=[composer.compose_greeting]):
        with skipping:
            assert await env.client.execute_workflow(AsyncGreeting.run, "Ada", id=env.workflow_id("async-greeting"),
                                                     task_queue=env.task_queue) == "Hello, Ada!"


def test_is_cancelled_exception_tells_cancellations_from_failures() -> None:
    cancelled = ActivityError("activity cancelled", activity_id="1", activity_type="a", scheduled_event_id=5,
                              retry_state="CANCEL_REQUESTED", cause=CancelledError("cancelled"))
    failed = ActivityError("activity failed", activity_id="1", activity_type="a", scheduled_event_id=5,
                           retry_state="NON_RETRYABLE_FAILURE", cause=ApplicationError("boom"))
    assert is_cancelled_exception(cancelled) and is_cancelled_exception(asyncio.CancelledError())
    assert is_cancelled_exception(CancelledError("x"))
    assert not is_cancelled_exception(failed) and not is_cancelled_exception(ValueError())
