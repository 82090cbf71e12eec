"""Temporal's names in the SDK (issue 17), used as Temporal's samples and docs use them, on the time-skipping
environment: status and start-policy enums, the activity and workflow loggers, `workflow.unsafe`,
`workflow.time()`, `workflow.wait` / `as_completed`, `workflow.Info` / `activity.Info` and waiting for an
activity's cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import WorkflowExecutionStatus
from ostinato.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from ostinato.exceptions import WorkflowAlreadyStartedError
from ostinato.sdk.activity import ActivityContext, set_context
from ostinato.testing import EngineService, WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

with workflow.unsafe.imports_passed_through():
    import json  # as Temporal code imports what its workflows pass through the sandbox

Q = "names"
Record = dict[str, Any]



# -- ostinato.client / ostinato.common ------------------------------------------------------------------------------

def test_the_enums_have_temporals_members_and_values() -> None:
    assert {m.name: m.value for m in WorkflowExecutionStatus} == {
        "RUNNING": 1, "COMPLETED": 2, "FAILED": 3, "CANCELED": 4, "TERMINATED": 5, "CONTINUED_AS_NEW": 6,
        "TIMED_OUT": 7}
    assert {m.name: m.value for m in WorkflowIDReusePolicy} == {
        "ALLOW_DUPLICATE": 1, "ALLOW_DUPLICATE_FAILED_ONLY": 2, "REJECT_DUPLICATE": 3, "TERMINATE_IF_RUNNING": 4}
    assert {m.name: m.value for m in WorkflowIDConflictPolicy} == {
        "UNSPECIFIED": 0, "FAIL": 1, "USE_EXISTING": 2, "TERMINATE_EXISTING": 3}


@workflow.defn
class Approval:
    def __init__(self) -> None:
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.approved)
        return "approved"


class ListingService(EngineService):
    """The in-memory engine with `list` over its visibility records (a real server uses its visibility store)."""

    async def list_page(self, namespace: str, query: str, page_size: int, token: str) -> tuple[list[Record], str]:
        return [row for (ns, _, _), row in sorted(self.engine.visibility.items()) if ns == namespace], ""


@run_async
async def test_describe_and_list_report_a_workflow_execution_status() -> None:
    env = await WorkflowEnvironment.start_time_skipping()
    env.client.service = ListingService(env.engine)
    async with Worker(env.client, task_queue=Q, workflows=[Approval]):
        handle = await env.client.start_workflow(Approval.run, id="a-1", task_queue=Q)
        await env.sleep(timedelta(seconds=1))
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await handle.signal(Approval.approve)
        assert await handle.result() == "approved"
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED and described.status is not None
    assert described.status.name == "COMPLETED"
    assert described.status == "COMPLETED"  # the engine's string still compares equal
    listed = [(wf.id, wf.status) async for wf in env.client.list_workflows("WorkflowId = 'a-1'")]
    assert listed == [("a-1", WorkflowExecutionStatus.COMPLETED)]
    assert listed[0][1] in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED)


@run_async
async def test_start_workflow_takes_the_id_policies() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Approval]):
        first = await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q)
        again = await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q,
                                                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        assert again.run_id == first.run_id
        with pytest.raises(WorkflowAlreadyStartedError):
            await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q,
                                            id_conflict_policy=WorkflowIDConflictPolicy.FAIL)
        replaced = await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q,
                                                   id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING)
        assert replaced.run_id != first.run_id
        assert (await env.client.get_workflow_handle("p-1", run_id=first.run_id).describe()).status == \
            WorkflowExecutionStatus.TERMINATED
        await replaced.signal(Approval.approve)
        await replaced.result()
        with pytest.raises(WorkflowAlreadyStartedError):
            await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q,
                                            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
        fresh = await env.client.start_workflow(Approval.run, id="p-1", task_queue=Q,
                                                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        assert fresh.run_id not in (first.run_id, replaced.run_id)


# -- ostinato.activity ----------------------------------------------------------------------------------------------

@activity.defn
async def charge(order_id: str) -> str:
    activity.logger.info("charging order %s", order_id)
    assert isinstance(activity.info(), activity.Info)
    return f"charged {order_id}"


@workflow.defn
class Checkout:
    @workflow.run
    async def run(self, order_id: str) -> str:
        return await workflow.execute_activity(charge, order_id, start_to_close_timeout=timedelta(seconds=5))


@run_async
async def test_activity_logger_adds_the_activitys_details(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ostinato.activity")
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Checkout], activities=[charge]):
        assert await env.client.execute_workflow(Checkout.run, "o-7", id="co-1", task_queue=Q) == "charged o-7"
    [record] = [r for r in caplog.records if r.msg.startswith("charging order")]
    details = record.temporal_activity
    assert details["activity_type"] == "charge" and details["workflow_id"] == "co-1" and details["attempt"] == 1
    assert details["workflow_type"] == "Checkout" and details["task_queue"] == Q
    assert record.getMessage().startswith("charging order o-7 ({") and "'activity_type': 'charge'" in \
        record.getMessage()
    activity.logger.info("outside any activity")  # plain: nothing to add, nothing raised
    assert not hasattr(caplog.records[-1], "temporal_activity")


def _in_activity(is_cancelled: threading.Event) -> contextvars.Context:
    """A context as the worker gives a running activity, whose cancellation `is_cancelled` stands for."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    info = activity.Info("1", "wait", 1, "default", "wf", "run", "Wf", Q, now, now, None, None, None, ())
    context = contextvars.copy_context()
    context.run(set_context, ActivityContext(info, lambda details: None, is_cancelled.is_set))
    return context


@run_async
async def test_wait_for_cancelled_returns_once_cancellation_is_requested() -> None:
    cancelled = threading.Event()
    context = _in_activity(cancelled)
    waiting = asyncio.get_running_loop().create_task(activity.wait_for_cancelled(), context=context)
    await asyncio.sleep(0.2)
    assert not waiting.done()
    cancelled.set()
    await asyncio.wait_for(waiting, 1)
    with pytest.raises(RuntimeError, match="not in an activity"):
        await activity.wait_for_cancelled()


def test_wait_for_cancelled_sync_waits_for_the_request_or_the_timeout() -> None:
    cancelled = threading.Event()
    context = _in_activity(cancelled)
    started = time.monotonic()
    context.run(activity.wait_for_cancelled_sync, timedelta(milliseconds=200))
    assert 0.2 <= time.monotonic() - started < 1 and not cancelled.is_set()
    threading.Timer(0.1, cancelled.set).start()
    started = time.monotonic()
    context.run(activity.wait_for_cancelled_sync)
    assert time.monotonic() - started < 1


# -- ostinato.workflow ----------------------------------------------------------------------------------------------

REPLAYING: list[bool] = []


@workflow.defn
class Onboarding:
    """Logs, records `unsafe.is_replaying()` and checks `workflow.time()` at each step."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    @workflow.signal
    def step(self, name: str) -> None:
        self.steps.append(name)

    @workflow.run
    async def run(self, user: str) -> str:
        assert isinstance(workflow.info(), workflow.Info)
        workflow.logger.info("onboarding %s", user)
        REPLAYING.append(workflow.unsafe.is_replaying())
        await workflow.wait_condition(lambda: len(self.steps) == 2)
        workflow.logger.info("steps done: %s", json.dumps(self.steps))
        REPLAYING.append(workflow.unsafe.is_replaying())
        assert workflow.time() == workflow.now().timestamp()
        return f"{user} at {workflow.time()}"


@run_async
async def test_workflow_logger_adds_the_runs_details_and_is_silent_on_replay(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ostinato.workflow")
    REPLAYING.clear()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with await WorkflowEnvironment.start_time_skipping(start_time=start) as env, \
            Worker(env.client, task_queue=Q, workflows=[Onboarding], max_cached_workflows=0):  # every task replays
        handle = await env.client.start_workflow(Onboarding.run, "ada", id="on-1", task_queue=Q)
        await handle.signal(Onboarding.step, "email")
        await env.sleep(timedelta(minutes=1))
        await handle.signal(Onboarding.step, "profile")
        result = await handle.result()
    assert result == f"ada at {env.now().timestamp()}" and env.now() >= start + timedelta(minutes=1)
    lines = [r for r in caplog.records if r.name == "ostinato.workflow" and r.msg.startswith(("onboarding", "steps"))]
    assert [r.getMessage().split(" (")[0] for r in lines] == ["onboarding ada", 'steps done: ["email", "profile"]']
    details = lines[0].temporal_workflow
    assert details == {"attempt": 1, "namespace": "default", "run_id": handle.run_id, "task_queue": Q,
                       "workflow_id": "on-1", "workflow_type": "Onboarding"}
    assert "'workflow_id': 'on-1'" in lines[1].getMessage()
    # The first step ran live once, then was replayed by each later task; the last ran live.
    assert REPLAYING[0] is False and REPLAYING[-1] is False and REPLAYING.count(True) >= 2


def test_unsafe_is_workflow_only_and_passes_imports_through_as_a_no_op() -> None:
    with pytest.raises(RuntimeError, match="not in a workflow"):
        workflow.unsafe.is_replaying()
    assert workflow.unsafe.in_sandbox() is False
    with workflow.unsafe.imports_passed_through():
        import decimal
    assert decimal.Decimal("1") == 1


@workflow.defn
class Race:
    """Timers race in `workflow.wait` and `workflow.as_completed`; replays must make the same decisions."""

    @workflow.run
    async def run(self) -> Record:
        async def after(seconds: int, label: str) -> str:
            await workflow.sleep(seconds)
            return label

        slow, fast = asyncio.create_task(after(60, "slow")), asyncio.create_task(after(10, "fast"))
        done, pending = await workflow.wait([slow, fast], return_when=asyncio.FIRST_COMPLETED)
        first = [t.result() for t in done]
        for task in pending:
            task.cancel()
        hour = asyncio.create_task(after(3600, "hour"))
        done, pending = await workflow.wait([hour], timeout=timedelta(seconds=30))
        timed_out = (len(done), len(pending))
        hour.cancel()
        order = [await next_done for next_done in workflow.as_completed(
            [after(30, "c"), after(10, "a"), after(20, "b")])]
        late: list[str] = []
        for next_done in workflow.as_completed([after(5, "soon"), after(500, "never")], timeout=60):
            try:
                late.append(await next_done)
            except TimeoutError:
                late.append("timed out")
        return {"first": first, "timed_out": timed_out, "order": order, "late": late}


@run_async
async def test_wait_and_as_completed_order_results_deterministically() -> None:
    results = []
    for cached in (10, 0):  # kept in memory, then replayed from history at every task
        async with await WorkflowEnvironment.start_time_skipping() as env, \
                Worker(env.client, task_queue=Q, workflows=[Race], max_cached_workflows=cached):
            results.append(await env.client.execute_workflow(Race.run, id=f"race-{cached}", task_queue=Q))
    assert results[0] == results[1] == {"first": ["fast"], "timed_out": [0, 1], "order": ["a", "b", "c"],
                                        "late": ["soon", "timed out"]}


@run_async
async def test_wait_refuses_what_asyncio_wait_refuses() -> None:
    async def nothing() -> None:
        pass

    coroutine = nothing()
    with pytest.raises(TypeError, match="not coroutines"):
        await workflow.wait([coroutine])
    coroutine.close()
    with pytest.raises(ValueError, match="at least one"):
        await workflow.wait([])
    task = asyncio.create_task(nothing())
    with pytest.raises(ValueError, match="return_when"):
        await workflow.wait([task], return_when="SOMETIMES")
    await task
