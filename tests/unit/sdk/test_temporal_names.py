"""Temporal's names in the SDK (issue 17), used as Temporal's samples and docs use them, on the time-skipping
environment: the workflow status and start-policy enums, `activity.logger`, `activity.Info` and waiting for an
activity's cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import functools
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

Q = "names"
Record = dict[str, Any]


def run_async(fn: Any) -> Any:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


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
