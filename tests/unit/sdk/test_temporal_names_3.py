"""More of Temporal's names (issue 17), used as Temporal's samples use them: `@workflow.init`,
`execute_activity_method`, handlers set at run time (`set_signal_handler` with signals that came first,
`set_query_handler`, `set_update_handler`), `activity.client()`, `ostinato.converter`, `Worker.is_running`,
`WorkflowEnvironment.get_current_time` / `supports_time_skipping` / `auto_time_skipping_disabled`,
`handle.result_run_id` and `fetch_history_events`."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from ostinato import activity, workflow
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "names-3"



class Greeter:
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @activity.defn
    async def greet(self, name: str) -> str:
        return f"{self.greeting}, {name}"


@activity.defn
async def signal_back(workflow_id: str) -> str:
    handle = activity.client().get_workflow_handle(workflow_id)
    await handle.signal("late", "from an activity")
    return "sent"


@workflow.defn
class Dynamic:
    @workflow.init
    def __init__(self, name: str) -> None:
        self.name = name  # set before any handler runs
        self.seen: list[str] = []

    @workflow.run
    async def run(self, name: str) -> list[str]:
        greeting = await workflow.execute_activity_method(Greeter.greet, self.name,
                                                          start_to_close_timeout=timedelta(seconds=5))
        self.seen.append(greeting)
        await workflow.execute_activity(signal_back, workflow.info().workflow_id,
                                        start_to_close_timeout=timedelta(seconds=5))
        # The signal came before any handler existed: it is delivered as soon as one is set.
        workflow.set_signal_handler("late", self.seen.append)
        workflow.set_query_handler("count", lambda: len(self.seen))
        workflow.set_update_handler("add", self._add, validator=self._check)
        await workflow.wait_condition(lambda: len(self.seen) >= 3)
        return self.seen

    def _add(self, item: str) -> int:
        self.seen.append(item)
        return len(self.seen)

    def _check(self, item: str) -> None:
        if not item:
            raise ValueError("empty")


@run_async
async def test_names_of_the_workflow_activity_and_testing_apis() -> None:
    import ostinato.converter as converter

    assert converter.DataConverter is not None and converter.PayloadCodec is not None
    async with await WorkflowEnvironment.start_time_skipping() as env:
        assert env.supports_time_skipping
        assert isinstance(await env.get_current_time(), datetime)
        with env.auto_time_skipping_disabled():
            assert not env.service.time_skipping
        assert env.supports_time_skipping
        worker = Worker(env.client, task_queue=Q, workflows=[Dynamic],
                        activities=[Greeter("Hello").greet, signal_back])
        assert not worker.is_running
        async with worker:
            assert worker.is_running
            handle = await env.client.start_workflow(Dynamic.run, "Ada", id="dynamic", task_queue=Q)
            for _ in range(500):
                try:
                    if await handle.query("count") >= 2:
                        break
                except Exception:  # noqa: BLE001 - the query handler is not set yet
                    pass
                await asyncio.sleep(0.01)
            assert await handle.execute_update("add", "tea") == 3
            assert await handle.result() == ["Hello, Ada", "from an activity", "tea"]
            assert handle.result_run_id == handle.run_id
            kinds = [event["event_type"] async for event in handle.fetch_history_events()]
            assert kinds[0] == "WORKFLOW_EXECUTION_STARTED" and kinds[-1] == "WORKFLOW_EXECUTION_COMPLETED"
        assert not worker.is_running


@activity.defn
async def slow_counter(to: int) -> int:
    for i in range(to):
        activity.heartbeat(i)
        await asyncio.sleep(0.01)
    return activity.info().attempt


@activity.defn
def sync_counter(to: int) -> str:
    for i in range(to):
        activity.heartbeat(i)
        if activity.is_worker_shutdown():
            return "shutting down"
    return "done"


@run_async
async def test_activity_environment_runs_an_activity_with_heartbeats_and_cancellation() -> None:
    import dataclasses

    import pytest

    from ostinato.exceptions import CancelledError
    from ostinato.testing import ActivityEnvironment

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=3)
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    assert await env.run(slow_counter, 3) == 3
    assert beats == [0, 1, 2]
    running = asyncio.ensure_future(env.run(slow_counter, 1000))
    await asyncio.sleep(0.05)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    env2 = ActivityEnvironment()
    env2.worker_shutdown()
    assert await env2.run(sync_counter, 5) == "shutting down"
    env3 = ActivityEnvironment()
    env3.cancel()
    with pytest.raises(CancelledError):
        await env3.run(sync_counter, 5)


@workflow.defn
class Broken:
    @workflow.run
    async def run(self) -> None:
        raise KeyError("a bug, not a failure")


@run_async
async def test_describe_shows_why_the_workflow_task_keeps_failing() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Broken]):
        handle = await env.client.start_workflow(Broken.run, id="broken", task_queue=Q)
        for _ in range(500):
            failure = (await handle.describe()).last_workflow_task_failure
            if failure is not None:
                break
            await asyncio.sleep(0.01)
        assert failure is not None
        assert failure["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE" and "a bug, not a failure" in failure["message"]
        await handle.terminate("fixed elsewhere")
