"""Temporal's client API as Temporal code uses it (temporalio.client, temporalio.common), on both engines.

The imports are the only change from Temporal code: `temporalio` -> `ostinato`. What a test does beyond Temporal's
API (finding the server's address, registering search attributes through the client rather than the operator
service) is said where it happens.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import pytest

from ostinato import workflow
from ostinato.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from ostinato.common import (
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from ostinato.exceptions import ApplicationError, RPCError, WorkflowAlreadyStartedError
from tests.e2e.sdk_scenarios.envs import ScenarioEnv

CUSTOMER_ID = SearchAttributeKey.for_keyword("CompatCustomerId")
ORDER_TOTAL = SearchAttributeKey.for_float("CompatOrderTotal")


@dataclass
class Order:
    customer: str
    items: list[str]


@workflow.defn
class OrderWorkflow:
    def __init__(self) -> None:
        self._approved = False
        self._status = "received"

    @workflow.run
    async def run(self, order: Order) -> str:
        self._status = "waiting for approval"
        await workflow.wait_condition(lambda: self._approved)
        if not order.items:
            raise ApplicationError("empty order", type="EmptyOrder", non_retryable=True)
        return f"{order.customer}: {len(order.items)} items shipped"

    @workflow.signal
    def approve(self) -> None:
        self._approved = True

    @workflow.query
    def status(self) -> str:
        return self._status


async def test_start_signal_query_result_and_describe(env: ScenarioEnv) -> None:
    """The quick start's client calls: start with Temporal's options, signal, query, result, describe."""
    await env.client.add_search_attributes([CUSTOMER_ID, ORDER_TOTAL])  # Temporal: the operator service does this
    client: Client = env.client
    workflow_id = env.workflow_id("order")
    async with env.worker(workflows=[OrderWorkflow]):
        handle: WorkflowHandle = await client.start_workflow(
            OrderWorkflow.run, Order("ada", ["tea", "cake"]), id=workflow_id, task_queue=env.task_queue,
            execution_timeout=timedelta(minutes=10),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            memo={"channel": "web"},
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(CUSTOMER_ID, "ada"), SearchAttributePair(ORDER_TOTAL, 12.5)]))
        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_workflow(OrderWorkflow.run, Order("ada", []), id=workflow_id,
                                        task_queue=env.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.FAIL)

        async def waiting() -> str | None:
            status: str = await handle.query(OrderWorkflow.status)
            return status if status == "waiting for approval" else None

        assert await env.wait_until(waiting, what="the order waiting") == "waiting for approval"
        running: WorkflowExecutionDescription = await handle.describe()
        assert running.status == WorkflowExecutionStatus.RUNNING and running.close_time is None
        await handle.signal(OrderWorkflow.approve)
        assert await handle.result() == "ada: 2 items shipped"

        desc = await client.get_workflow_handle(workflow_id).describe()
        assert (desc.id, desc.run_id, desc.workflow_type, desc.task_queue) == \
            (workflow_id, handle.run_id, "OrderWorkflow", env.task_queue)
        assert desc.status == WorkflowExecutionStatus.COMPLETED
        assert desc.start_time is not None and desc.close_time is not None and desc.start_time <= desc.close_time
        assert await desc.memo() == {"channel": "web"}
        assert await desc.memo_value("channel", type_hint=str) == "web"
        assert await desc.memo_value("missing", "none") == "none"
        assert desc.typed_search_attributes.get(CUSTOMER_ID) == "ada"
        assert desc.typed_search_attributes.get(ORDER_TOTAL) == 12.5
        assert desc.search_attributes["CompatCustomerId"] == ["ada"]
        events = [event async for event in handle.fetch_history_events()]
        assert desc.history_length == len(events)
        assert events[-1]["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"

        # A closed id with REJECT_DUPLICATE cannot start again.
        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_workflow(OrderWorkflow.run, Order("ada", []), id=workflow_id,
                                        task_queue=env.task_queue,
                                        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)

        # execute_workflow with args=, and WorkflowFailureError from `temporalio.client` carrying the cause.
        failing = env.workflow_id("empty-order")
        run = asyncio.ensure_future(client.execute_workflow(OrderWorkflow.run, args=[Order("bob", [])], id=failing,
                                                            task_queue=env.task_queue))
        typed = client.get_workflow_handle_for(OrderWorkflow.run, failing)

        async def started() -> bool | None:
            try:
                return True if (await typed.describe()).status == WorkflowExecutionStatus.RUNNING else None
            except Exception:  # noqa: BLE001 - not started yet
                return None

        await env.wait_until(started, what="the second order")
        await typed.signal("approve")
        with pytest.raises(WorkflowFailureError) as failed:
            await run
        assert isinstance(failed.value.cause, ApplicationError)
        assert failed.value.cause.type == "EmptyOrder" and failed.value.cause.non_retryable


@workflow.defn
class Sleeper:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(timedelta(days=1))


async def test_cancel_terminate_and_list(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Sleeper]):
        cancelled = await env.client.start_workflow(Sleeper.run, id=env.workflow_id("sleeper"),
                                                    task_queue=env.task_queue)
        terminated = await env.client.start_workflow(Sleeper.run, id=env.workflow_id("sleeper"),
                                                     task_queue=env.task_queue)
        await cancelled.cancel()
        await terminated.terminate("no longer needed")
        for handle, status in ((cancelled, WorkflowExecutionStatus.CANCELED),
                               (terminated, WorkflowExecutionStatus.TERMINATED)):
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            assert (await handle.describe()).status == status
        assert cancelled.result_run_id == cancelled.run_id

    query = f"WorkflowType = 'Sleeper' AND TaskQueue = '{env.task_queue}'"

    async def listed() -> list[str] | None:
        ids = [execution.id async for execution in env.client.list_workflows(query)]
        return ids if len(ids) == 2 else None

    if env.skips_time:  # a difference: the in-memory engine keeps no visibility store, and says so
        with pytest.raises(RPCError, match="visibility"):
            await listed()
        return
    assert sorted(await env.wait_until(listed, what="both runs listed")) == sorted([cancelled.id, terminated.id])


@workflow.defn
class Flaky:
    @workflow.run
    async def run(self) -> int:
        if workflow.info().attempt < 2:
            raise ApplicationError("not yet")
        return workflow.info().attempt


async def test_workflow_retry_policy_on_start(env: ScenarioEnv) -> None:
    async with env.worker(workflows=[Flaky]):
        result = await env.client.execute_workflow(
            Flaky.run, id=env.workflow_id("flaky"), task_queue=env.task_queue,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3))
    assert result == 2


@pytest.mark.parametrize("env", ["kafka"], indirect=True)  # the time-skipping environment has no address
async def test_connect_takes_temporal_host_port_spelling(env: ScenarioEnv) -> None:
    """`Client.connect("host:port")` as in Temporal (no scheme), on the real server."""
    target = env.service.target.removeprefix("http://")  # type: ignore[attr-defined]
    async with await Client.connect(target, namespace="default") as client, env.worker(workflows=[Flaky]):
        assert await client.execute_workflow(
            Flaky.run, id=env.workflow_id("connect"), task_queue=env.task_queue,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100))) == 2
