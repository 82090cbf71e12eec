"""Worker interceptors (`from ostinato.worker import Interceptor, WorkflowInboundInterceptor, ...`): Temporal's
names and shapes, so tracing, context propagation and auth headers written for `temporalio.worker` port by changing
imports.

An interceptor wraps the next one in a chain whose end does the real work. Inbound interceptors see what comes
into a workflow (its run, signals, queries, updates) or an activity; outbound ones see what the code sends out
(activities, child workflows, signals, continue-as-new) and can add `headers`, which travel with the command to
the other side (`ostinato.Payload` maps on the wire: start, signal, update, query, scheduled activity, child start).

Workflow interceptors run inside the workflow, during replay too: they must be as deterministic as workflow code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from ostinato.schemas.payloads import Payload
from ostinato.sdk import _instance as runtime
from ostinato.sdk.activity import ActivityInfo
from ostinato.sdk.common import RetryPolicy
from ostinato.sdk.data import from_record, to_record

__all__ = [
    "ActivityInboundInterceptor",
    "ActivityOutboundInterceptor",
    "ContinueAsNewInput",
    "ExecuteActivityInput",
    "ExecuteWorkflowInput",
    "HandleQueryInput",
    "HandleSignalInput",
    "HandleUpdateInput",
    "Interceptor",
    "SignalChildWorkflowInput",
    "SignalExternalWorkflowInput",
    "StartActivityInput",
    "StartChildWorkflowInput",
    "WorkflowInboundInterceptor",
    "WorkflowInterceptorClassInput",
    "WorkflowOutboundInterceptor",
]

Record = dict[str, Any]


class Interceptor:
    """A worker interceptor: give it to `Worker(..., interceptors=[...])` (or to `Client.connect`, when the same
    object is also a client interceptor: workers built from that client use it too)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """The inbound interceptor of each activity attempt: `next` wrapped, or `next` itself."""
        return next

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput,
                                   ) -> type[WorkflowInboundInterceptor] | None:
        """The class built (`cls(next)`) for each workflow run the worker holds, or None; asked once, when the
        worker (or replayer) is made."""
        return None


@dataclass(frozen=True)
class WorkflowInterceptorClassInput:
    """What `Interceptor.workflow_interceptor_class` is given. Ostinato runs workflows without a sandbox, so
    `unsafe_extern_functions` is only kept for code written against Temporal's shape."""

    unsafe_extern_functions: MutableMapping[str, Callable[..., Any]]


# -- activities -------------------------------------------------------------------------------------------------

@dataclass
class ExecuteActivityInput:
    """An activity attempt about to run: `fn(*args)`, in `executor` when it is a plain function. `headers` are
    those the workflow (its outbound interceptors) scheduled the activity with."""

    fn: Callable[..., Any]
    args: Sequence[Any]
    executor: concurrent.futures.Executor | None
    headers: Mapping[str, Payload]


class ActivityInboundInterceptor:
    """Wraps an activity attempt's execution; subclass it and override what you need."""

    def __init__(self, next: ActivityInboundInterceptor) -> None:
        self.next = next

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        """Called before `execute_activity`; wrap `outbound` before passing it on to add an outbound interceptor."""
        self.next.init(outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await self.next.execute_activity(input)


class ActivityOutboundInterceptor:
    """Wraps what a running activity asks of its worker (`activity.info()`, `activity.heartbeat()`)."""

    def __init__(self, next: ActivityOutboundInterceptor) -> None:
        self.next = next

    def info(self) -> ActivityInfo:
        return self.next.info()

    def heartbeat(self, *details: Any) -> None:
        self.next.heartbeat(*details)


class ActivityInboundRoot(ActivityInboundInterceptor):
    """The end of an activity's inbound chain: runs the function (a plain one in the input's executor, with the
    context the interceptors left, so what they set in context variables reaches the activity's thread)."""

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async
        self.outbound: ActivityOutboundInterceptor | None = None

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self.outbound = outbound

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if self.is_async:
            return await input.fn(*input.args)
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(input.executor, context.run, input.fn, *input.args)


class ActivityOutboundRoot(ActivityOutboundInterceptor):
    """The end of an activity's outbound chain: the attempt's own info and heartbeat."""

    def __init__(self, info: ActivityInfo, heartbeat: Callable[[Sequence[Any]], None]) -> None:
        self._info = info
        self._heartbeat = heartbeat

    def info(self) -> ActivityInfo:
        return self._info

    def heartbeat(self, *details: Any) -> None:
        self._heartbeat(details)


def activity_chain(interceptors: Sequence[Interceptor], is_async: bool, info: ActivityInfo,
                   heartbeat: Callable[[Sequence[Any]], None],
                   ) -> tuple[ActivityInboundInterceptor, ActivityOutboundInterceptor]:
    """An attempt's inbound chain (the first interceptor outermost, as in Temporal) and the outbound chain its
    interceptors built in `init`."""
    root = ActivityInboundRoot(is_async)
    inbound: ActivityInboundInterceptor = root
    for interceptor in reversed(interceptors):
        inbound = interceptor.intercept_activity(inbound)
    inbound.init(ActivityOutboundRoot(info, heartbeat))
    assert root.outbound is not None, "an interceptor's init did not pass the outbound interceptor on"
    return inbound, root.outbound


# -- workflows: inputs ------------------------------------------------------------------------------------------

@dataclass
class ExecuteWorkflowInput:
    """The workflow's run: `run_fn` is the unbound `@workflow.run` method, called with the workflow object and
    `args`; `headers` came with the start (from the client's or the parent's outbound interceptors)."""

    type: type
    run_fn: Callable[..., Awaitable[Any]]
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclass
class HandleSignalInput:
    signal: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]
    _handler: Callable[..., Any] | None = field(default=None, repr=False, compare=False)  # what the end calls


@dataclass
class HandleQueryInput:
    id: str
    query: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]
    _handler: Callable[..., Any] | None = field(default=None, repr=False, compare=False)


@dataclass
class HandleUpdateInput:
    id: str
    update: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]
    _handler: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    _validator: Callable[..., Any] | None = field(default=None, repr=False, compare=False)


@dataclass
class StartActivityInput:
    """An activity the workflow schedules. `activity` is its type name; `cancellation_type` a
    `workflow.ActivityCancellationType`."""

    activity: str
    args: Sequence[Any]
    activity_id: str | None
    task_queue: str | None
    schedule_to_close_timeout: timedelta | None
    schedule_to_start_timeout: timedelta | None
    start_to_close_timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    retry_policy: RetryPolicy | None
    cancellation_type: str
    headers: Mapping[str, Payload]
    ret_type: Any = None
    arg_types: list[type] | None = None


@dataclass
class StartChildWorkflowInput:
    """A child the workflow starts. `cancellation_type` is a `workflow.ChildWorkflowCancellationType`,
    `parent_close_policy` a `workflow.ParentClosePolicy`."""

    workflow: str
    args: Sequence[Any]
    id: str
    task_queue: str | None
    cancellation_type: str
    parent_close_policy: str
    execution_timeout: timedelta | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    retry_policy: RetryPolicy | None
    memo: Mapping[str, Any] | None
    headers: Mapping[str, Payload]
    ret_type: Any = None
    arg_types: list[type] | None = None
    # `common.TypedSearchAttributes` (or temporalio's deprecated dict form), and a cron schedule ("" for none)
    search_attributes: Any = None
    cron_schedule: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # the call's other options, passed on as they are


@dataclass
class SignalChildWorkflowInput:
    signal: str
    args: Sequence[Any]
    child_workflow_id: str
    headers: Mapping[str, Payload]


@dataclass
class SignalExternalWorkflowInput:
    signal: str
    args: Sequence[Any]
    namespace: str
    workflow_id: str
    workflow_run_id: str | None
    headers: Mapping[str, Payload]


@dataclass
class ContinueAsNewInput:
    workflow: str | None
    args: Sequence[Any]
    task_queue: str | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    memo: Mapping[str, Any] | None
    headers: Mapping[str, Payload]
    retry_policy: RetryPolicy | None = None
    search_attributes: Any = None  # `common.TypedSearchAttributes` or the deprecated dict; None: carried over
    arg_types: list[type] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # the call's other options, passed on as they are


# -- workflows: interceptors ------------------------------------------------------------------------------------

class WorkflowInboundInterceptor:
    """Wraps what comes into a workflow run; subclass it and return the class from
    `Interceptor.workflow_interceptor_class`. Its methods run inside the workflow (deterministically)."""

    def __init__(self, next: WorkflowInboundInterceptor) -> None:
        self.next = next

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        """Called once per run; wrap `outbound` before passing it on to add an outbound interceptor."""
        self.next.init(outbound)

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await self.next.execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        await self.next.handle_signal(input)

    async def handle_query(self, input: HandleQueryInput) -> Any:
        """A query answers at once: this coroutine may not wait for anything (no activity, timer or condition)."""
        return await self.next.handle_query(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        self.next.handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        return await self.next.handle_update_handler(input)


class WorkflowOutboundInterceptor:
    """Wraps what workflow code sends out; set `headers` on the input to send context along."""

    def __init__(self, next: WorkflowOutboundInterceptor) -> None:
        self.next = next

    def info(self) -> runtime.WorkflowInfo:
        return self.next.info()

    def start_activity(self, input: StartActivityInput) -> asyncio.Task[Any]:
        return self.next.start_activity(input)

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> Any:
        """Returns the started child's `workflow.ChildWorkflowHandle`."""
        return await self.next.start_child_workflow(input)

    async def signal_child_workflow(self, input: SignalChildWorkflowInput) -> None:
        await self.next.signal_child_workflow(input)

    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        await self.next.signal_external_workflow(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        self.next.continue_as_new(input)


def headers_of(records: Mapping[str, Record] | None) -> dict[str, Payload]:
    """The wire's header map as the interceptors see it."""
    return {key: from_record(record) for key, record in (records or {}).items()}


def header_records(headers: Mapping[str, Payload]) -> dict[str, Record]:
    """Interceptors' headers as the wire carries them (payloads, not passed through codecs, as in Temporal)."""
    return {key: to_record(payload) for key, payload in headers.items()}


class _WorkflowInboundRoot(WorkflowInboundInterceptor):
    """The end of a run's inbound chain: calls the handlers the instance resolved for the call."""

    def __init__(self, instance: runtime.WorkflowInstance) -> None:
        self.instance = instance
        self.outbound: WorkflowOutboundInterceptor | None = None

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self.outbound = outbound

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await input.run_fn(self.instance.obj, *input.args)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        result = _resolved(input._handler, f"signal {input.signal!r}")(*input.args)
        if asyncio.iscoroutine(result):
            await result

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return _resolved(input._handler, f"query {input.query!r}")(*input.args)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        _resolved(input._validator, f"the validator of update {input.update!r}")(*input.args)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        result = _resolved(input._handler, f"update {input.update!r}")(*input.args)
        if asyncio.iscoroutine(result):
            result = await result
        return result


def _resolved(handler: Callable[..., Any] | None, what: str) -> Callable[..., Any]:
    if handler is None:
        raise RuntimeError(f"{what} reached the end of the interceptor chain with an input the worker did not make: "
                           "pass the input you were given on (changed, or copied with dataclasses.replace)")
    return handler


class InterceptedCalls(runtime.Calls):
    """How an instance calls workflow code when the worker has workflow interceptors: through the run's inbound
    chain (built once per run, the first interceptor outermost)."""

    def __init__(self, instance: runtime.WorkflowInstance, classes: Sequence[type[WorkflowInboundInterceptor]],
                 outbound_root: WorkflowOutboundInterceptor) -> None:
        self.root = _WorkflowInboundRoot(instance)
        inbound: WorkflowInboundInterceptor = self.root
        for cls in reversed(classes):
            inbound = cls(inbound)
        self.inbound = inbound
        inbound.init(outbound_root)
        assert self.root.outbound is not None, "an interceptor's init did not pass the outbound interceptor on"
        instance.outbound = self.root.outbound

    def execute_workflow(self, instance: runtime.WorkflowInstance, args: list[Any],
                         header: Mapping[str, Record]) -> Coroutine[Any, Any, Any]:
        return self.inbound.execute_workflow(ExecuteWorkflowInput(instance.defn.cls, instance.defn.run, args,
                                                                  headers_of(header)))

    async def handle_signal(self, name: str, call: Callable[..., Any], args: list[Any],
                            header: Mapping[str, Record]) -> None:
        await self.inbound.handle_signal(HandleSignalInput(name, args, headers_of(header), _handler=call))

    def handle_query(self, name: str, call: Callable[..., Any], args: list[Any],
                     header: Mapping[str, Record]) -> Any:
        input = HandleQueryInput("", name, args, headers_of(header), _handler=call)
        # In a context of its own: what the interceptors set there stays with this query.
        return contextvars.copy_context().run(self._answer, name, self.inbound.handle_query(input))

    @staticmethod
    def _answer(name: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run the query's coroutine, which may not wait: it has no event loop to wait on."""
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError(f"query {name!r} waited for something: a query handler (and its interceptors) must "
                           "answer at once")

    def validate_update(self, update_id: str, name: str, check: Callable[..., Any], args: list[Any],
                        header: Mapping[str, Record]) -> None:
        input = HandleUpdateInput(update_id, name, args, headers_of(header), _validator=check)
        contextvars.copy_context().run(self.inbound.handle_update_validator, input)

    async def handle_update(self, update_id: str, name: str, call: Callable[..., Any], args: list[Any],
                            header: Mapping[str, Record]) -> Any:
        input = HandleUpdateInput(update_id, name, args, headers_of(header), _handler=call)
        return await self.inbound.handle_update_handler(input)


def workflow_interceptor_classes(interceptors: Sequence[Interceptor]) -> list[type[WorkflowInboundInterceptor]]:
    """The classes the worker's interceptors want for its runs (asked once per worker, as Temporal does)."""
    classes = []
    for interceptor in interceptors:
        cls = interceptor.workflow_interceptor_class(WorkflowInterceptorClassInput({}))
        if cls is not None:
            classes.append(cls)
    return classes
