"""More of Temporal's names in the SDK (issue 17), used as Temporal's samples and docs use them: `workflow.memo()` /
`memo_value()`, `activity.is_worker_shutdown()` / `wait_for_worker_shutdown()`, and the worker's log line for a
workflow task that fails."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.exceptions import ActivityError
from ostinato.sdk._workflow_worker import FailingRuns
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "names-2"



# -- workflow.memo / memo_value ------------------------------------------------------------------------------------

@dataclass
class Owner:
    name: str
    team: str


@workflow.defn
class Memos:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> dict[str, Any]:
        seen: dict[str, Any] = {"at_start": workflow.memo()}
        owner = workflow.memo_value("owner", type_hint=Owner)
        assert isinstance(owner, Owner)
        seen["owner_team"] = owner.team
        seen["missing"] = workflow.memo_value("missing", "fallback")
        seen["missing_typed"] = workflow.memo_value("missing", None, type_hint=Owner)
        try:
            workflow.memo_value("missing")
        except KeyError:
            seen["raised"] = True
        workflow.upsert_memo({"stage": "waiting", "priority": None})
        seen["after_upsert"] = workflow.memo()
        await workflow.wait_condition(lambda: self.go)
        workflow.upsert_memo({"stage": "done"})
        seen["at_end"] = workflow.memo()
        return seen


@pytest.mark.parametrize("cached", [1000, 0], ids=["sticky", "replayed"])
@run_async
async def test_memo_is_the_runs_memo_kept_current_by_upsert_memo(cached: int) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Memos], max_cached_workflows=cached):
        handle = await env.client.start_workflow(
            Memos.run, id=f"memo-{cached}", task_queue=Q,
            memo={"owner": Owner("ada", "payments"), "priority": 3})
        await env.sleep(timedelta(seconds=1))
        await handle.signal(Memos.proceed)
        seen = await handle.result()
    owner = {"name": "ada", "team": "payments"}
    assert seen == {
        "at_start": {"owner": owner, "priority": 3}, "owner_team": "payments", "missing": "fallback",
        "missing_typed": None, "raised": True,
        "after_upsert": {"owner": owner, "stage": "waiting"},
        "at_end": {"owner": owner, "stage": "done"}}


def test_memo_is_workflow_only() -> None:
    with pytest.raises(RuntimeError, match="not in a workflow"):
        workflow.memo()
    with pytest.raises(RuntimeError, match="not in a workflow"):
        workflow.memo_value("owner", "x")


# -- activity.is_worker_shutdown / wait_for_worker_shutdown ----------------------------------------------------------

observed: list[tuple[str, bool, bool]] = []  # (activity, is_worker_shutdown, is_cancelled) as each one ended


@activity.defn
async def until_stopped() -> str:
    try:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        observed.append(("async", activity.is_worker_shutdown(), activity.is_cancelled()))
        raise


@activity.defn
def drains_on_shutdown() -> str:
    assert not activity.is_worker_shutdown()
    activity.wait_for_worker_shutdown_sync(timedelta(seconds=30))
    observed.append(("sync", activity.is_worker_shutdown(), activity.is_cancelled()))
    return "drained"


@activity.defn
async def waits_for_shutdown() -> str:
    try:
        await activity.wait_for_worker_shutdown()
    finally:
        observed.append(("waiting", activity.is_worker_shutdown(), activity.is_cancelled()))
    return "saw the shutdown"


@workflow.defn
class Busy:
    def __init__(self) -> None:
        self.cancel = False

    @workflow.signal
    def stop(self) -> None:
        self.cancel = True

    @workflow.run
    async def run(self, name: str) -> str:
        handle = workflow.start_activity(name, start_to_close_timeout=timedelta(minutes=5),
                                         heartbeat_timeout=timedelta(milliseconds=100))
        await workflow.wait_condition(lambda: self.cancel or handle.done())
        if self.cancel:
            handle.cancel()
        try:
            return str(await handle)
        except (ActivityError, asyncio.CancelledError):  # TRY_CANCEL raises CancelledError at once
            return "cancelled"


async def until(predicate: Any, steps: int = 500) -> None:
    for _ in range(steps):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out waiting")


@run_async
async def test_an_activity_tells_a_worker_shutdown_from_a_cancellation_request() -> None:
    observed.clear()
    activities = [until_stopped, drains_on_shutdown, waits_for_shutdown]
    async with await WorkflowEnvironment.start_time_skipping() as env:
        worker = Worker(env.client, task_queue=Q, workflows=[Busy], activities=activities)
        async with worker:
            cancelled = await env.client.start_workflow(Busy.run, "until_stopped", id="asked", task_queue=Q)
            await until(lambda: worker.activity_executor is not None and len(worker.activity_executor._running) == 1)
            await cancelled.signal(Busy.stop)
            assert await cancelled.result() == "cancelled"
            await until(lambda: bool(observed))  # the request reaches the activity with a heartbeat's answer
            assert observed == [("async", False, True)]
            observed.clear()
            for name in ("until_stopped", "drains_on_shutdown", "waits_for_shutdown"):
                await env.client.start_workflow(Busy.run, name, id=name, task_queue=Q)
            await until(lambda: worker.activity_executor is not None and len(worker.activity_executor._running) == 3)
        # Leaving `async with` shut the worker down.
    # Each saw the shutdown; a shutdown also stops them, as a cancellation does (is_cancelled() is True too).
    assert sorted((name, shutdown) for name, shutdown, _ in observed) == [
        ("async", True), ("sync", True), ("waiting", True)]
    assert ("async", True, True) in observed


def test_worker_shutdown_is_activity_only() -> None:
    with pytest.raises(RuntimeError, match="not in an activity"):
        activity.is_worker_shutdown()
    with pytest.raises(RuntimeError, match="not in an activity"):
        activity.wait_for_worker_shutdown_sync(0)


# -- the worker logs a failing workflow task once per failure series ------------------------------------------------

class Flaky:
    broken = True
    runs = 0


@workflow.defn
class Buggy:
    @workflow.run
    async def run(self) -> str:
        Flaky.runs += 1
        if Flaky.broken:
            return str({}["missing"])  # a bug: the task fails and is retried, the workflow does not fail
        return "fixed"


@run_async
async def test_a_failing_workflow_task_is_logged_once_per_series_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ostinato.worker")
    Flaky.broken, Flaky.runs = True, 0
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Buggy]):
        handle = await env.client.start_workflow(Buggy.run, id="buggy", task_queue=Q)
        for _ in range(50):
            await env.sleep(timedelta(seconds=10))  # the engine retries the task, with backoff from attempt 3
            if Flaky.runs >= 4:
                break
        assert Flaky.runs >= 4
        failing = (await handle.describe()).raw["workflow_task"]
        assert failing is not None and failing["attempt"] > 1  # describe shows the task is being retried
        Flaky.broken = False  # a fixed deployment
        assert await handle.result() == "fixed"
    failed = [r for r in caplog.records if r.name == "ostinato.worker" and r.levelno >= logging.WARNING]
    assert len(failed) == 1, [r.getMessage() for r in failed]
    [record] = failed
    message = record.getMessage()
    assert record.levelno == logging.WARNING and message.startswith("Failed activation on workflow Buggy")
    assert "buggy" in message and handle.run_id in message and "attempt 1" in message
    assert "WORKFLOW_WORKER_UNHANDLED_FAILURE" in message
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    assert "missing" in caplog.text and "in run" in caplog.text  # the traceback reaches the workflow's own frame
    assert record.temporal_workflow["run_id"] == handle.run_id  # type: ignore[attr-defined]
    recovered = [r for r in caplog.records if r.name == "ostinato.worker" and "recovered" in r.getMessage()]
    assert len(recovered) == 1 and recovered[0].levelno == logging.INFO


def test_each_failure_series_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ostinato.worker")
    runs = FailingRuns(max_remembered=2)
    task = {"namespace": "default", "workflow_id": "w", "run_id": "r", "workflow_type": "T", "task_queue": Q}
    bug = ValueError("bug")
    for attempt in (1, 2, 3, 4):
        runs.failed({**task, "attempt": attempt}, bug, "WORKFLOW_WORKER_UNHANDLED_FAILURE")
    runs.completed({**task, "attempt": 5})
    runs.completed({**task, "attempt": 1})  # a run that never failed recovers from nothing
    runs.failed({**task, "attempt": 1}, bug, "NONDETERMINISM")  # a new series
    runs.failed({**task, "attempt": 2}, bug, "NONDETERMINISM")
    runs.failed({**task, "run_id": "r2", "attempt": 3}, bug, "WORKFLOW_WORKER_UNHANDLED_FAILURE")  # first seen here
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records] == [
        ("WARNING", "Failed activation on workflow T with ID w and run ID r (task attempt 1, "
                    "WORKFLOW_WORKER_UNHANDLED_FAILURE)"),
        ("INFO", "workflow T with ID w and run ID r recovered"),
        ("ERROR", "Failed activation on workflow T with ID w and run ID r (task attempt 1, NONDETERMINISM)"),
        ("WARNING", "Failed activation on workflow T with ID w and run ID r2 (task attempt 3, "
                    "WORKFLOW_WORKER_UNHANDLED_FAILURE)")]


# -- args=[...] as Temporal's SDK takes them ------------------------------------------------------------------------

@activity.defn
async def add(a: int, b: int) -> int:
    return a + b


@workflow.defn
class Summer:
    @workflow.run
    async def run(self, a: int, b: int) -> list[int]:
        positional = await workflow.execute_activity(add, a, b, start_to_close_timeout=timedelta(seconds=5))
        keyword = await workflow.execute_activity(add, args=[a, 10], start_to_close_timeout=timedelta(seconds=5))
        try:
            workflow.start_activity(add, 1, args=[2], start_to_close_timeout=timedelta(seconds=5))
        except TypeError as exc:
            assert "not both" in str(exc)
        else:
            raise AssertionError("positional and args= together must be refused")
        return [positional, keyword]


@run_async
async def test_arguments_go_positionally_or_as_args() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Summer], activities=[add]):
        assert await env.client.execute_workflow(Summer.run, args=[1, 2], id="sum-1", task_queue=Q) == [3, 11]
        assert await env.client.execute_workflow(Summer.run, 5, 6, id="sum-2", task_queue=Q) == [11, 15]
        with pytest.raises(TypeError, match="not both"):
            await env.client.start_workflow(Summer.run, 1, args=[2], id="sum-3", task_queue=Q)
