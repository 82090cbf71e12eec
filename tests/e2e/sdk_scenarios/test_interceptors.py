"""Interceptors carry context across the engine, as Temporal's do: a trace id that a client interceptor puts in
the start's (signal's, query's, update's) headers reaches the workflow's inbound interceptor; the workflow's outbound
interceptor puts it in the headers of the activities and the child it starts, whose inbound interceptors read it
back. The interceptor is one object, a client and a worker interceptor at once, given to the client only: workers
built from that client use it too. Run on both engines (time-skipping and a real broker)."""

from __future__ import annotations

import asyncio
import contextvars
from datetime import timedelta
from typing import Any, NoReturn

from ostinato import activity, workflow
from ostinato.client import (
    Client,
    OutboundInterceptor,
    QueryWorkflowInput,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from ostinato.client import Interceptor as ClientInterceptor
from ostinato.common import Payload
from ostinato.converter import DefaultPayloadConverter
from ostinato.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from tests.e2e.sdk_scenarios.envs import ScenarioEnv

TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="")
HEADER = "trace-id"
CONVERTER = DefaultPayloadConverter()
SEEN: list[tuple[str, str]] = []  # (where, trace id seen there), for what has no return value to show it
TIMEOUT = timedelta(seconds=30)


def _with_trace(headers: dict[str, Payload] | Any) -> dict[str, Payload]:
    trace = TRACE.get()
    return {**headers, HEADER: CONVERTER.to_payload(trace)} if trace else dict(headers)


def _trace_in(headers: Any) -> str:
    payload = headers.get(HEADER)
    return "" if payload is None else str(CONVERTER.from_payload(payload, str))


class _ClientTracing(OutboundInterceptor):
    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        input.headers = _with_trace(input.headers)
        return await super().start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        input.headers = _with_trace(input.headers)
        await super().signal_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        input.headers = _with_trace(input.headers)
        return await super().query_workflow(input)

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle:
        input.headers = _with_trace(input.headers)
        return await super().start_workflow_update(input)


class _WorkflowOutTracing(WorkflowOutboundInterceptor):
    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        input.headers = _with_trace(input.headers)
        await super().signal_external_workflow(input)

    def start_activity(self, input: StartActivityInput) -> Any:
        input.headers = _with_trace(input.headers)
        return super().start_activity(input)

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> Any:
        input.headers = _with_trace(input.headers)
        return await super().start_child_workflow(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        input.headers = _with_trace(input.headers)
        super().continue_as_new(input)


class _WorkflowTracing(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutTracing(outbound))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        TRACE.set(_trace_in(input.headers))  # the run's own task: workflow code and what it starts see it
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        TRACE.set(_trace_in(input.headers))  # the signal handler's own task
        await super().handle_signal(input)

    async def handle_query(self, input: HandleQueryInput) -> Any:
        SEEN.append((f"query {input.query}", _trace_in(input.headers)))
        return await super().handle_query(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        SEEN.append((f"validator {input.update}", _trace_in(input.headers)))
        super().handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        TRACE.set(_trace_in(input.headers))
        return await super().handle_update_handler(input)


class _ActivityOutTracing(ActivityOutboundInterceptor):
    def info(self) -> Any:
        SEEN.append(("activity.info", TRACE.get()))
        return super().info()

    def heartbeat(self, *details: Any) -> None:
        SEEN.append(("activity.heartbeat", TRACE.get()))
        super().heartbeat(*details)


class _ActivityTracing(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_ActivityOutTracing(outbound))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        TRACE.set(_trace_in(input.headers))
        return await super().execute_activity(input)


class Tracing(ClientInterceptor, Interceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _ClientTracing(next)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityTracing(next)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput,
                                   ) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowTracing


@activity.defn
async def traced() -> str:
    assert activity.info().activity_type == "traced"
    return TRACE.get()


@activity.defn
def traced_in_thread() -> str:
    activity.heartbeat("working")
    return TRACE.get()


@workflow.defn
class TracedChild:
    @workflow.run
    async def run(self, generation: int, parent_id: str) -> list[str]:
        if generation == 0:
            workflow.continue_as_new(1, parent_id)
        await workflow.get_external_workflow_handle(parent_id).signal(Traced.from_child)
        return [TRACE.get(), await workflow.execute_activity(traced, start_to_close_timeout=TIMEOUT)]


@workflow.defn
class Traced:
    def __init__(self) -> None:
        self.signal_trace = "unset"
        self.update_trace = "unset"
        self.child_signal_trace = "unset"

    @workflow.run
    async def run(self) -> list[str]:
        mine = TRACE.get()
        in_activity = await workflow.execute_activity(traced, start_to_close_timeout=TIMEOUT)
        in_thread = await workflow.execute_activity(traced_in_thread, start_to_close_timeout=TIMEOUT)
        parent_id = workflow.info().workflow_id
        child = await workflow.execute_child_workflow(TracedChild.run, args=[0, parent_id], id=f"{parent_id}-child")
        await workflow.wait_condition(lambda: "unset" not in (self.signal_trace, self.update_trace,
                                                              self.child_signal_trace))
        return [mine, in_activity, in_thread, *child, self.child_signal_trace, self.signal_trace, self.update_trace]

    @workflow.signal
    def from_child(self) -> None:
        self.child_signal_trace = TRACE.get()

    @workflow.signal
    def finish(self) -> None:
        self.signal_trace = TRACE.get()

    @workflow.update
    def mark(self) -> None:
        self.update_trace = TRACE.get()

    @mark.validator
    def check_mark(self) -> None:
        pass

    @workflow.query
    def status(self) -> str:
        return "running"


async def _traced_calls(client: Client, env: ScenarioEnv) -> list[str]:
    """The client's calls, made with a trace id in the caller's context only (not in the workers')."""
    TRACE.set("trace-7")
    handle = await client.start_workflow(Traced.run, id=env.workflow_id("traced"), task_queue=env.task_queue)
    assert await handle.query(Traced.status) == "running"
    await handle.execute_update(Traced.mark)
    await handle.signal(Traced.finish)
    result: list[str] = await handle.result()
    return result


def _worker(client: Client, env: ScenarioEnv) -> Worker:
    return Worker(client, task_queue=env.task_queue, workflows=[Traced, TracedChild],
                  activities=[traced, traced_in_thread])


async def test_a_trace_id_travels_client_workflow_activity_child(env: ScenarioEnv) -> None:
    SEEN.clear()
    client = Client(env.client.service, namespace=env.client.namespace, interceptors=[Tracing()])
    async with _worker(client, env):
        # A task of its own, started after the workers: they do not inherit the trace id from the test's context.
        result = await asyncio.create_task(_traced_calls(client, env))
    # run, async activity, activity in a thread, child (after its continue-as-new) and its activity, the child's signal
    # to its parent, the client's signal, update
    assert result == ["trace-7"] * 8
    assert ("query status", "trace-7") in SEEN
    assert ("validator mark", "trace-7") in SEEN
    assert ("activity.info", "trace-7") in SEEN and ("activity.heartbeat", "trace-7") in SEEN


async def test_workers_without_the_interceptor_see_no_trace(env: ScenarioEnv) -> None:
    """The control: the same calls through a client without interceptors carry nothing."""
    client = Client(env.client.service, namespace=env.client.namespace)
    async with _worker(client, env):
        result = await asyncio.create_task(_traced_calls(client, env))
    assert result == [""] * 8
