"""How interceptor chains are built, as in Temporal: the first interceptor given is the outermost; every client call
goes through the client's chain; a worker uses the client's interceptors that are worker interceptors, then its own;
a query's interceptors cannot leave context variables behind in the worker."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.client import (
    CancelWorkflowInput,
    CompleteAsyncActivityInput,
    CountWorkflowsInput,
    DescribeWorkflowInput,
    FetchWorkflowHistoryEventsInput,
    HeartbeatAsyncActivityInput,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateWithStartInput,
    TerminateWorkflowInput,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from ostinato.common import WorkflowIDConflictPolicy
from ostinato.converter import DefaultPayloadConverter
from ostinato.exceptions import RPCError, WorkflowFailureError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)
from ostinato.worker import Interceptor as WorkerInterceptor
from tests.unit.sdk.support import run_async

Q = "chains"
CALLS: list[str] = []
CONVERTER = DefaultPayloadConverter()
LEAK: contextvars.ContextVar[str] = contextvars.ContextVar("leak", default="")


class Recording(Interceptor):
    def __init__(self, name: str) -> None:
        self.name = name

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        name = self.name

        class Outbound(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
                CALLS.append(f"{name} start {input.workflow} {input.id}")
                return await super().start_workflow(input)

            async def signal_workflow(self, input: SignalWorkflowInput) -> None:
                CALLS.append(f"{name} signal {input.signal}")
                await super().signal_workflow(input)

            async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
                CALLS.append(f"{name} describe {input.id}")
                return await super().describe_workflow(input)

            async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
                CALLS.append(f"{name} cancel {input.reason}")
                await super().cancel_workflow(input)

            async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
                CALLS.append(f"{name} terminate {input.reason}")
                await super().terminate_workflow(input)

            def fetch_workflow_history_events(self, input: FetchWorkflowHistoryEventsInput) -> Any:
                CALLS.append(f"{name} history {input.id}")
                return super().fetch_workflow_history_events(input)

            def list_workflows(self, input: ListWorkflowsInput) -> Any:
                CALLS.append(f"{name} list")
                return super().list_workflows(input)

            async def count_workflows(self, input: CountWorkflowsInput) -> int:
                CALLS.append(f"{name} count")
                return await super().count_workflows(input)

        return Outbound(next)


class Both(Recording, WorkerInterceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput,
                                   ) -> type[WorkflowInboundInterceptor] | None:
        name = self.name

        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                CALLS.append(f"{name} execute {input.type.__name__}")
                return await super().execute_workflow(input)

            async def handle_query(self, input: HandleQueryInput) -> Any:
                LEAK.set("set by a query interceptor")
                return await super().handle_query(input)

            async def handle_signal(self, input: HandleSignalInput) -> None:
                await super().handle_signal(dataclasses.replace(input, args=list(input.args)))  # a copy goes on

        return Inbound

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        name = self.name

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                CALLS.append(f"{name} activity {input.fn.__name__}")
                return await super().execute_activity(input)

        return Inbound(next)


@activity.defn
async def noop() -> None:
    return None


@workflow.defn
class Waiting:
    def __init__(self) -> None:
        self.go = False
        self.leak_seen = ""

    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=5))
        await workflow.wait_condition(lambda: self.go)
        return "done" + self.leak_seen

    @workflow.signal
    def release(self) -> None:
        self.go = True
        self.leak_seen = LEAK.get()  # a handler's task starts from the worker's context

    @workflow.query
    def leaked(self) -> str:
        return LEAK.get()


@run_async
async def test_every_client_call_goes_through_the_chain_first_interceptor_outermost() -> None:
    CALLS.clear()
    env = await WorkflowEnvironment.start_time_skipping(interceptors=[Recording("outer"), Recording("inner")])
    async with env, Worker(env.client, task_queue=Q, workflows=[Waiting], activities=[noop]):
        handle = await env.client.start_workflow(Waiting.run, id="w-1", task_queue=Q)
        await handle.describe()
        await handle.signal(Waiting.release)
        assert await handle.result() == "done"
        assert (await handle.fetch_history())[-1]["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"
        second = await env.client.start_workflow(Waiting.run, id="w-2", task_queue=Q)
        await second.cancel("enough")
        third = await env.client.start_workflow(Waiting.run, id="w-3", task_queue=Q)
        await third.terminate("stop")
        for stopped in (second, third):
            with contextlib.suppress(WorkflowFailureError):
                await stopped.result()
    assert CALLS[:2] == ["outer start Waiting w-1", "inner start Waiting w-1"]
    for call in ("describe w-1", "signal release", "history w-1", "cancel enough", "terminate stop"):
        assert [c for c in CALLS if c.endswith(call)] == [f"outer {call}", f"inner {call}"]
    # Neither is a worker interceptor: the workers built from the client have none.
    assert not [c for c in CALLS if " execute " in c or " activity " in c]


@run_async
async def test_list_and_count_go_through_the_chain() -> None:
    CALLS.clear()
    async with await WorkflowEnvironment.start_time_skipping(interceptors=[Recording("only")]) as env:
        # The in-memory engine has no visibility store: the calls fail at the end of the chain, after it.
        with pytest.raises(RPCError, match="visibility"):
            await env.client.count_workflows()
        with pytest.raises(RPCError, match="visibility"):
            _ = [row async for row in env.client.list_workflows()]
    assert CALLS == ["only count", "only list"]


@run_async
async def test_a_worker_runs_the_clients_worker_interceptors_then_its_own() -> None:
    CALLS.clear()
    env = await WorkflowEnvironment.start_time_skipping(interceptors=[Both("client"), Recording("plain")])
    async with env, Worker(env.client, task_queue=Q, workflows=[Waiting], activities=[noop],
                       interceptors=[Both("worker")]):
        handle = await env.client.start_workflow(Waiting.run, id="w-4", task_queue=Q)
        # What a query's interceptor sets reaches the query's handler, and stays with that query: the signal
        # handler after it does not see it.
        assert await handle.query(Waiting.leaked) == "set by a query interceptor"
        await handle.signal(Waiting.release)
        assert await handle.result() == "done"
    assert [c for c in CALLS if " execute " in c] == ["client execute Waiting", "worker execute Waiting"]
    assert [c for c in CALLS if " activity " in c] == ["client activity noop", "worker activity noop"]
    assert LEAK.get() == ""


def _half(headers: Any) -> Any:
    return None if "half" not in headers else CONVERTER.from_payload(headers["half"])


class _UpdateWithStartHeaders(Interceptor, WorkerInterceptor):
    """Puts a header on each half of an update-with-start; the worker side records what arrives where."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        class Outbound(OutboundInterceptor):
            async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput,
                                                       ) -> WorkflowUpdateHandle:
                input.start_workflow_input.headers = {"half": CONVERTER.to_payload("start")}
                input.update_workflow_input.headers = {"half": CONVERTER.to_payload("update")}
                return await super().start_update_with_start_workflow(input)

        return Outbound(next)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput,
                                   ) -> type[WorkflowInboundInterceptor] | None:
        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                CALLS.append(f"execute {_half(input.headers)}")
                return await super().execute_workflow(input)

            async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
                CALLS.append(f"update {input.update} {_half(input.headers)}")
                return await super().handle_update_handler(input)

        return Inbound


@workflow.defn
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: len(self.items) >= 1)
        return self.items

    @workflow.update
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)


@run_async
async def test_update_with_start_goes_through_the_chain_with_both_halves_headers() -> None:
    CALLS.clear()
    env = await WorkflowEnvironment.start_time_skipping(interceptors=[_UpdateWithStartHeaders()])
    async with env, Worker(env.client, task_queue=Q, workflows=[Cart]):
        start = WithStartWorkflowOperation(Cart.run, id="cart-1", task_queue=Q,
                                           id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        assert await env.client.execute_update_with_start_workflow(Cart.add, "apple",
                                                                   start_workflow_operation=start) == 1
        assert await (await start.workflow_handle()).result() == ["apple"]
    assert sorted(CALLS) == ["execute start", "update add update"]


class _AsyncActivityRecording(Interceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        class Outbound(OutboundInterceptor):
            async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
                CALLS.append(f"heartbeat {type(input.id_or_token).__name__} {list(input.details)}")
                await super().heartbeat_async_activity(input)

            async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
                CALLS.append(f"complete {type(input.id_or_token).__name__} {input.result}")
                await super().complete_async_activity(input)

        return Outbound(next)


TOKENS: list[bytes] = []


@activity.defn
async def later() -> str:
    TOKENS.append(activity.info().task_token)
    activity.raise_complete_async()


@workflow.defn
class Later:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(later, activity_id="later", start_to_close_timeout=timedelta(hours=1))


@run_async
async def test_async_activity_answers_go_through_the_chain() -> None:
    CALLS.clear()
    TOKENS.clear()
    env = await WorkflowEnvironment.start_time_skipping(interceptors=[_AsyncActivityRecording()])
    async with env, Worker(env.client, task_queue=Q, workflows=[Later], activities=[later]):
        by_token = await env.client.start_workflow(Later.run, id="later-1", task_queue=Q)
        while not TOKENS:
            await asyncio.sleep(0.01)
        await env.client.get_async_activity_handle(task_token=TOKENS[0]).heartbeat("half")
        await env.client.get_async_activity_handle(task_token=TOKENS[0]).complete("by token")
        assert await by_token.result() == "by token"
        by_id = await env.client.start_workflow(Later.run, id="later-2", task_queue=Q)
        while len(TOKENS) < 2:
            await asyncio.sleep(0.01)
        await env.client.get_async_activity_handle(workflow_id="later-2", activity_id="later").complete("by id")
        assert await by_id.result() == "by id"
    assert CALLS == ["heartbeat bytes ['half']", "complete bytes by token", "complete AsyncActivityIDReference by id"]
