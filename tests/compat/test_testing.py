"""Temporal's testing API (temporalio.testing) as Temporal's samples write their tests.

The imports are the only change from Temporal code: `temporalio` -> `ostinato`. These tests are the time-skipping
environment itself (and `ActivityEnvironment`, which needs no engine), so they run on no broker; Temporal's tests
are plain `async def` functions under pytest-asyncio, here each body runs under `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import WorkflowExecutionStatus
from ostinato.exceptions import CancelledError
from ostinato.testing import ActivityEnvironment, WorkflowEnvironment
from ostinato.worker import Worker


def run(test: Callable[[], Awaitable[Any]]) -> Callable[[], None]:
    """What pytest-asyncio does for Temporal's tests."""
    def wrapper() -> None:
        asyncio.run(test())  # type: ignore[arg-type]

    wrapper.__name__ = test.__name__
    return wrapper


@activity.defn
async def say_hello(name: str) -> str:
    return f"Hello, {name}!"


@workflow.defn
class SayHello:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(say_hello, name, start_to_close_timeout=timedelta(seconds=5))


@workflow.defn
class Reminder:
    """Sleeps a month, then reminds."""

    @workflow.run
    async def run(self, what: str) -> str:
        await workflow.sleep(timedelta(days=30))
        return f"reminder: {what}"


@run
async def test_execute_workflow() -> None:
    task_queue_name = str(uuid.uuid4())
    async with await WorkflowEnvironment.start_time_skipping() as env:
        assert env.supports_time_skipping
        async with Worker(env.client, task_queue=task_queue_name, workflows=[SayHello], activities=[say_hello]):
            assert await env.client.execute_workflow(SayHello.run, "World", id=str(uuid.uuid4()),
                                                     task_queue=task_queue_name) == "Hello, World!"


@activity.defn(name="say_hello")
async def say_hello_mocked(name: str) -> str:
    return f"Hello, {name} from mocked activity!"


@run
async def test_mock_activity() -> None:
    task_queue_name = str(uuid.uuid4())
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=task_queue_name, workflows=[SayHello], activities=[say_hello_mocked]):
        assert await env.client.execute_workflow(SayHello.run, "World", id=str(uuid.uuid4()),
                                                 task_queue=task_queue_name) == "Hello, World from mocked activity!"


@run
async def test_a_month_passes_in_no_time() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue="reminders", workflows=[Reminder]):
        begin = await env.get_current_time()
        # Waiting for the result skips virtual time to the timer.
        assert await env.client.execute_workflow(Reminder.run, "rent", id="rent", task_queue="reminders") == \
            "reminder: rent"
        assert await env.get_current_time() - begin >= timedelta(days=30)

        # env.sleep moves time by hand: halfway through, the next reminder is still running.
        handle = await env.client.start_workflow(Reminder.run, "taxes", id="taxes", task_queue="reminders")
        await env.sleep(timedelta(days=15))
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await env.sleep(timedelta(days=16))
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED

        # With skipping off, waiting for a result does not jump to the timer.
        late = await env.client.start_workflow(Reminder.run, "later", id="later", task_queue="reminders")
        with env.auto_time_skipping_disabled(), pytest.raises(TimeoutError):
            await asyncio.wait_for(late.result(), 0.3)
        assert await late.result() == "reminder: later"


# -- ActivityEnvironment ----------------------------------------------------------------------------------------------

@activity.defn
async def download(urls: list[str]) -> str:
    for done, url in enumerate(urls):
        activity.heartbeat(done, url)
        await asyncio.sleep(0)
    info = activity.info()
    return f"{len(urls)} downloaded by attempt {info.attempt} of {info.workflow_id}"


@activity.defn
def blocking_poll() -> str:
    while True:
        activity.heartbeat()  # raises CancelledError once the environment cancels
        threading.Event().wait(0.01)


@activity.defn
async def until_shutdown() -> bool:
    await activity.wait_for_worker_shutdown()
    return activity.is_worker_shutdown()


@run
async def test_activity_environment() -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, workflow_id="wf-1")
    heartbeats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    assert await env.run(download, ["a", "b"]) == "2 downloaded by attempt 2 of wf-1"
    assert heartbeats == [(0, "a"), (1, "b")]

    cancelling = ActivityEnvironment()
    task = asyncio.ensure_future(cancelling.run(blocking_poll))
    await asyncio.sleep(0.05)
    cancelling.cancel()
    with pytest.raises(CancelledError):
        await task

    shutting_down = ActivityEnvironment()
    waiting = asyncio.ensure_future(shutting_down.run(until_shutdown))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    shutting_down.worker_shutdown()
    assert await waiting is True
