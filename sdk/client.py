"""The client (`from ostinato.client import Client`): start workflows, signal, query, cancel, terminate, describe
and wait for results. It talks to a `ClientTransport` (also exported as `WorkflowService`): the HTTP API of a
server, or the in-memory engine of `WorkflowEnvironment`, so tests and production code use the same calls."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

from ostinato.schemas.payloads import Payload
from ostinato.schemas.wire import REDRIVEN, REJECTED, command_type
from ostinato.sdk import _definitions as defs
from ostinato.sdk import deployments, schedules
from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import ClientTransport
from ostinato.sdk.activity import parse_task_token
from ostinato.sdk.batch import BatchAction, BatchOperationHandle, start_batch_operation
from ostinato.sdk.common import RetryPolicy, WorkflowIDConflictPolicy, WorkflowIDReusePolicy, to_ms
from ostinato.sdk.data import DEFAULT, DataConverter
from ostinato.sdk.deployments import TaskQueueVersioningInfo
from ostinato.sdk.exceptions import ScheduleAlreadyRunningError
from ostinato.sdk.interceptor import header_records
from ostinato.sdk.replayer import WorkflowHistory
from ostinato.sdk.reset import ResetType, reset_body, reset_run
from ostinato.sdk.schedules import *  # noqa: F403 (temporalio has the schedule classes in its client module)
from ostinato.sdk.schedules import Schedule, ScheduleAsyncIterator, ScheduleBackfill, ScheduleHandle
from ostinato.sdk.search_attributes import SearchAttributeKey, TypedSearchAttributes, from_json_values, to_payloads
from ostinato.sdk.search_attributes import decode as decode_search_attributes
from ostinato.streams.schedules import is_schedule_parent

__all__ = [
    "AsyncActivityCancelledError",
    "AsyncActivityHandle",
    "AsyncActivityIDReference",
    "CancelWorkflowInput",
    "Client",
    "CompleteAsyncActivityInput",
    "CountWorkflowsInput",
    "DescribeWorkflowInput",
    "FailAsyncActivityInput",
    "FetchWorkflowHistoryEventsInput",
    "HeartbeatAsyncActivityInput",
    "Interceptor",
    "ListWorkflowsInput",
    "OutboundInterceptor",
    "QueryWorkflowInput",
    "ReportCancellationAsyncActivityInput",
    "ResetType",
    "SignalWorkflowInput",
    "StartWorkflowInput",
    "StartWorkflowUpdateInput",
    "StartWorkflowUpdateWithStartInput",
    "TerminateWorkflowInput",
    "UpdateWithStartStartWorkflowInput",
    "UpdateWithStartUpdateWorkflowInput",
    "WithStartWorkflowOperation",
    "WorkflowExecution",
    "WorkflowExecutionDescription",
    "WorkflowExecutionStatus",
    "WorkflowFailureError",
    "WorkflowHandle",
    "WorkflowHistory",
    "WorkflowService",
    "WorkflowUpdateFailedError",
    "WorkflowUpdateHandle",
    "WorkflowUpdateRPCTimeoutOrCancelledError",
    "WorkflowUpdateStage",
]
__all__ += [*schedules.__all__, "ScheduleAlreadyRunningError"]

Record = dict[str, Any]
WorkflowFailureError = exc.WorkflowFailureError  # where Temporal's code imports it from (temporalio.client)
WorkflowService = ClientTransport  # the name this module has always exported for the client's transport
_NO_ARG = object()  # an update called without an argument (None is an argument)
_NO_DEFAULT = object()  # memo_value called without a default


def _from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


class WorkflowExecutionStatus(IntEnum):
    """A run's status, as `describe()` and `list_workflows()` report it; members and values are Temporal's.

    A member also equals its name (`WorkflowExecutionStatus.COMPLETED == "COMPLETED"`), the string the engine
    reports, so code that compares `.status` with strings keeps working. Hashing stays the integer's: a set or dict
    keyed by members does not find the strings.
    """

    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    CANCELED = 4
    TERMINATED = 5
    CONTINUED_AS_NEW = 6
    TIMED_OUT = 7

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.name == other
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = IntEnum.__hash__

    @classmethod
    def from_name(cls, name: str) -> WorkflowExecutionStatus | None:
        """The member the engine's status string names; None for UNSPECIFIED (a run that has not started)."""
        return cls.__members__.get(name)


@dataclass(frozen=True)
class WorkflowExecution:
    """A run as visibility lists it."""

    id: str
    run_id: str
    workflow_type: str
    task_queue: str
    status: WorkflowExecutionStatus | None
    start_time_ms: int
    close_time_ms: int | None
    history_length: int
    search_attributes: dict[str, Any]
    raw: Record

    @classmethod
    def from_row(cls, row: Record) -> WorkflowExecution:
        return cls(row["workflow_id"], row["run_id"], row["workflow_type"], row["task_queue"],
                   WorkflowExecutionStatus.from_name(row["status"]),
                   row["start_time_ms"], row.get("close_time_ms"), row["history_length"],
                   dict(row.get("search_attributes") or {}), row)

    @property
    def typed_search_attributes(self) -> TypedSearchAttributes:
        """The run's custom attributes with the types the visibility store indexed them by."""
        return from_json_values(self.search_attributes, self.raw.get("search_attribute_types") or {})


@dataclass(frozen=True)
class WorkflowExecutionDescription:
    """A run's state, as its owner holds it.

    Attributes:
        quarantined: commands the engine failed to process for this run (a bug in the engine, or an output too large
            for a record), oldest first, each an `ostinato.state.QuarantinedCommand` record (`command_type`,
            `request_id`, `code`, `error_type`, `error_message`, `failures`, times and the command itself). A run
            with any may be waiting for what they would have recorded: `WorkflowHandle.redrive()` decides them again
            once the engine is fixed.
    """

    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    status: WorkflowExecutionStatus | None
    history_length: int
    raw: Record
    quarantined: list[Record] = field(default_factory=list)
    data_converter: DataConverter = field(default=DEFAULT, repr=False, compare=False)  # decodes memo()

    # -- Temporal's names for what `raw` holds ----------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.workflow_id

    @property
    def reset_run_id(self) -> str:
        """The run a reset of this run started (empty if it was never reset): Temporal's resetRunId."""
        return str(self.raw.get("reset_run_id") or "")

    @property
    def versioning_info(self) -> deployments.WorkflowVersioningInfo:
        """The run's versioning behaviour, the build that completed its last task and a pinned run's build."""
        return deployments.WorkflowVersioningInfo.from_state(self.raw)

    @property
    def start_time(self) -> datetime | None:
        return _from_ms(self.raw.get("start_time_ms"))

    @property
    def execution_time(self) -> datetime | None:
        """When the run's first task was due (after a retry's or cron's backoff)."""
        return _from_ms(self.raw.get("execution_time_ms"))

    @property
    def close_time(self) -> datetime | None:
        """None while the run is open."""
        return _from_ms(self.raw.get("close_time_ms"))

    @property
    def parent_id(self) -> str | None:
        parent = self.raw.get("parent")
        return None if parent is None or is_schedule_parent(parent) else parent.get("workflow_id")

    @property
    def parent_run_id(self) -> str | None:
        parent = self.raw.get("parent")
        return None if parent is None or is_schedule_parent(parent) else parent.get("run_id")

    @property
    def search_attributes(self) -> dict[str, list[Any]]:
        """temporalio's deprecated form: name -> list of values (`typed_search_attributes` is the typed one)."""
        return {pair.key.name: list(pair.value) if isinstance(pair.value, list) else [pair.value]
                for pair in self.typed_search_attributes}

    async def memo(self) -> dict[str, Any]:
        """The run's memo, decoded (async as in Temporal, whose codecs may do I/O)."""
        return {key: self.data_converter.decode_one([value]) for key, value in (self.raw.get("memo") or {}).items()}

    async def memo_value(self, key: str, default: Any = _NO_DEFAULT, *, type_hint: Any = None) -> Any:
        """One memo value decoded as `type_hint`; KeyError for a missing key without a default, as in Temporal."""
        memo = self.raw.get("memo") or {}
        if key not in memo:
            if default is _NO_DEFAULT:
                raise KeyError(f"memo has no key {key!r}")
            return default
        return self.data_converter.decode_one([memo[key]], type_hint)

    @property
    def last_workflow_task_failure(self) -> Record | None:
        """Why the workflow task in flight's previous attempt failed or timed out (an `ostinato.Failure` record,
        plus `cause`), or None: what to look at when a run is stuck on broken code. History records only the first
        failure of such a series."""
        task = self.raw.get("workflow_task") or {}
        failure = task.get("last_failure")
        return None if failure is None else {**failure, "cause": task.get("last_failure_cause", "")}

    @property
    def typed_search_attributes(self) -> TypedSearchAttributes:
        """The run's custom search attributes, typed as the engine accepted them (Temporal's name)."""
        return decode_search_attributes(self.raw.get("search_attributes") or {})


class Interceptor:
    """A client interceptor (Temporal's `client.Interceptor`): give it to `Client.connect(..., interceptors=[...])`.
    An object that is also an `ostinato.worker.Interceptor` intercepts the workers built from the client too."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        """The client's calls, `next` wrapped (or `next` itself)."""
        return next


@dataclass
class StartWorkflowInput:
    """A start (`Client.start_workflow`): set `headers` to send context to the workflow's inbound interceptors."""

    workflow: str
    args: Sequence[Any]
    id: str
    task_queue: str
    execution_timeout: timedelta | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    id_reuse_policy: WorkflowIDReusePolicy | str
    id_conflict_policy: WorkflowIDConflictPolicy | str
    retry_policy: RetryPolicy | None
    memo: Mapping[str, Any] | None
    search_attributes: Any  # `common.TypedSearchAttributes`, or temporalio's deprecated dict form
    headers: Mapping[str, Payload]
    ret_type: Any = None
    request_id: str | None = None
    cron_schedule: str = ""


@dataclass
class SignalWorkflowInput:
    id: str
    run_id: str | None
    signal: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclass
class QueryWorkflowInput:
    id: str
    run_id: str | None
    query: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]
    ret_type: Any = None
    rpc_timeout: timedelta | None = None


@dataclass
class StartWorkflowUpdateInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    update_id: str | None
    update: str
    args: Sequence[Any]
    wait_for_stage: WorkflowUpdateStage
    headers: Mapping[str, Payload]
    ret_type: Any = None
    rpc_timeout: timedelta | None = None


@dataclass
class UpdateWithStartStartWorkflowInput(StartWorkflowInput):
    """The start half of an update-with-start (`WithStartWorkflowOperation`), as the interceptors see it."""


@dataclass
class UpdateWithStartUpdateWorkflowInput:
    update_id: str | None
    update: str
    args: Sequence[Any]
    wait_for_stage: WorkflowUpdateStage
    headers: Mapping[str, Payload]
    ret_type: Any = None


@dataclass
class StartWorkflowUpdateWithStartInput:
    """An update-with-start: both halves' `headers` travel (to `execute_workflow` and the update's handlers)."""

    start_workflow_input: UpdateWithStartStartWorkflowInput
    update_workflow_input: UpdateWithStartUpdateWorkflowInput
    _on_start: Callable[[WorkflowHandle], None]
    _on_start_error: Callable[[BaseException], None]


@dataclass
class HeartbeatAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    details: Sequence[Any]


@dataclass
class CompleteAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    result: Any


@dataclass
class FailAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    error: Exception
    last_heartbeat_details: Sequence[Any]


@dataclass
class ReportCancellationAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    details: Sequence[Any]


@dataclass
class CancelWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    reason: str = ""


@dataclass
class TerminateWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    args: Sequence[Any]
    reason: str | None


@dataclass
class DescribeWorkflowInput:
    id: str
    run_id: str | None


@dataclass
class FetchWorkflowHistoryEventsInput:
    id: str
    run_id: str | None


@dataclass
class ListWorkflowsInput:
    query: str | None
    page_size: int


@dataclass
class CountWorkflowsInput:
    query: str | None


class OutboundInterceptor:
    """Wraps the client's calls (Temporal's `client.OutboundInterceptor`); subclass it and override what you need.
    The end of the chain sends the call."""

    def __init__(self, next: OutboundInterceptor) -> None:
        self.next = next

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        return await self.next.start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await self.next.signal_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await self.next.query_workflow(input)

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle:
        return await self.next.start_workflow_update(input)

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput,
                                               ) -> WorkflowUpdateHandle:
        return await self.next.start_update_with_start_workflow(input)

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        await self.next.cancel_workflow(input)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        await self.next.terminate_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        return await self.next.describe_workflow(input)

    def fetch_workflow_history_events(self, input: FetchWorkflowHistoryEventsInput) -> AsyncIterator[Record]:
        return self.next.fetch_workflow_history_events(input)

    def list_workflows(self, input: ListWorkflowsInput) -> AsyncIterator[WorkflowExecution]:
        return self.next.list_workflows(input)

    async def count_workflows(self, input: CountWorkflowsInput) -> int:
        return await self.next.count_workflows(input)

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
        await self.next.heartbeat_async_activity(input)

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        await self.next.complete_async_activity(input)

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None:
        await self.next.fail_async_activity(input)

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None:
        await self.next.report_cancellation_async_activity(input)


class _ClientImpl(OutboundInterceptor):
    """The end of a client's interceptor chain: the calls as commands and reads of its transport."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        client = self.client
        body = _start_input_body(client.data_converter, input)
        name_, record = await client.service.send(client.namespace, input.id, "",
                                                  (command_type("StartWorkflowExecution"), body),
                                                  input.request_id or uuid.uuid4().hex, client.identity)
        if name_ == REJECTED:
            if record["code"] == "ALREADY_STARTED":
                raise exc.WorkflowAlreadyStartedError(input.id, input.workflow, str(record["existing_run_id"]))
            raise exc.RPCError(record["message"], code=record["code"])
        # An existing run (USE_EXISTING) may have continued from another: its chain's first run is not known here.
        return WorkflowHandle(client, input.id, run_id=record["run_id"],
                              first_execution_run_id=record["run_id"] if record["started"] else "",
                              result_type=input.ret_type)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await self._send(input.id, input.run_id, "SignalWorkflowExecution", {
            "signal_name": input.signal, "input": self.client.data_converter.encode(list(input.args)),
            "header": header_records(input.headers), "external": None})

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        client = self.client
        converter = client.data_converter
        reply_type, record = await client.service.query(
            client.namespace, input.id, input.run_id or "", input.query, converter.encode(list(input.args)),
            input.rpc_timeout or timedelta(seconds=10), header=header_records(input.headers))
        if reply_type == REJECTED:
            raise exc.QueryRejectedError(record["message"])
        if record.get("failure"):
            raise exc.QueryRejectedError(converter.decode_failure(record["failure"]).message)
        return converter.decode_one(record["result"], input.ret_type)

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle:
        client = self.client
        update_id = input.update_id or str(uuid.uuid4())
        reply_type, record = await client.service.send(
            client.namespace, input.id, input.run_id or "", (command_type("UpdateWorkflowExecution"), {
                "update_id": update_id, "name": input.update, "input": client.data_converter.encode(list(input.args)),
                "header": header_records(input.headers),
                "first_execution_run_id": input.first_execution_run_id or ""}),
            uuid.uuid4().hex, client.identity)
        if reply_type == REJECTED:
            raise exc.RPCError(record["message"], code=record["code"],
                               status=404 if record["code"] == "NOT_FOUND" else 400)
        handle = WorkflowUpdateHandle(client, update_id, input.update, input.id, workflow_run_id=record["run_id"],
                                      result_type=input.ret_type)
        await handle._wait(input.wait_for_stage, input.rpc_timeout)
        return handle

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput,
                                               ) -> WorkflowUpdateHandle:
        client, start, update = self.client, input.start_workflow_input, input.update_workflow_input
        update_id = update.update_id or str(uuid.uuid4())
        body = {"start": _start_input_body(client.data_converter, start), "update": {
            "update_id": update_id, "name": update.update, "input": client.data_converter.encode(list(update.args)),
            "header": header_records(update.headers), "first_execution_run_id": ""}}
        try:
            reply_type, record = await client.service.send(
                client.namespace, start.id, "", (command_type("UpdateWithStartWorkflowExecution"), body),
                start.request_id or uuid.uuid4().hex, client.identity)
        except BaseException as error:
            input._on_start_error(error)
            raise
        if reply_type == REJECTED:
            refused: exc.OstinatoError = exc.WorkflowAlreadyStartedError(
                start.id, start.workflow, str(record["existing_run_id"])) if record["code"] == "ALREADY_STARTED" \
                else exc.RPCError(record["message"], code=record["code"])
            input._on_start_error(refused)
            raise refused
        input._on_start(WorkflowHandle(client, start.id, run_id=record["run_id"],
                                       first_execution_run_id=record["run_id"] if record["started"] else "",
                                       result_type=start.ret_type))
        handle = WorkflowUpdateHandle(client, update_id, update.update, start.id, workflow_run_id=record["run_id"],
                                      result_type=update.ret_type)
        await handle._wait(update.wait_for_stage)
        return handle

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        await self._send(input.id, input.run_id, "RequestCancelWorkflowExecution", {
            "reason": input.reason, "external": None, "first_execution_run_id": input.first_execution_run_id or ""})

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        await self._send(input.id, input.run_id, "TerminateWorkflowExecution", {
            "reason": input.reason or "", "details": self.client.data_converter.encode(list(input.args)),
            "first_execution_run_id": input.first_execution_run_id or ""})

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        client = self.client
        state = await client.service.describe(client.namespace, input.id, input.run_id or "")
        if state is None:
            raise exc.RPCError(f"no workflow {input.id!r}", status=404, code="not_found")
        return WorkflowExecutionDescription(state["workflow_id"], state["run_id"], state["workflow_type"],
                                            state["task_queue"], WorkflowExecutionStatus.from_name(state["status"]),
                                            state["next_event_id"] - 1, state, list(state.get("quarantine") or []),
                                            client.data_converter)

    async def fetch_workflow_history_events(self, input: FetchWorkflowHistoryEventsInput) -> AsyncIterator[Record]:
        for event in await self.client.service.history(self.client.namespace, input.id, input.run_id or ""):
            yield event

    async def list_workflows(self, input: ListWorkflowsInput) -> AsyncIterator[WorkflowExecution]:
        token = ""
        while True:
            rows, token = await self.client.service.list_page(self.client.namespace, input.query or "",
                                                              input.page_size, token)
            for row in rows:
                yield WorkflowExecution.from_row(row)
            if not token:
                return

    async def count_workflows(self, input: CountWorkflowsInput) -> int:
        return int(await self.client.service.count(self.client.namespace, input.query or ""))

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
        record = await self._answer(input.id_or_token, "RecordActivityTaskHeartbeat", {
            "details": self.client.data_converter.encode(list(input.details))})
        if record.get("cancel_requested"):
            raise AsyncActivityCancelledError(f"activity {record.get('activity_id') or ''!r} was asked to cancel")

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        await self._answer(input.id_or_token, "RespondActivityTaskCompleted", {
            "result": self.client.data_converter.encode([input.result])})

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None:
        if input.last_heartbeat_details:
            await self._answer(input.id_or_token, "RecordActivityTaskHeartbeat", {
                "details": self.client.data_converter.encode(list(input.last_heartbeat_details))})
        await self._answer(input.id_or_token, "RespondActivityTaskFailed", {
            "failure": self.client.data_converter.encode_failure(input.error)})

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None:
        await self._answer(input.id_or_token, "RespondActivityTaskCanceled", {
            "details": self.client.data_converter.encode(list(input.details))})

    async def _answer(self, id_or_token: AsyncActivityIDReference | bytes, name: str, body: Record) -> Record:
        client = self.client
        attempt = await self._attempt(id_or_token)
        reply_type, record = await client.service.send(
            attempt["namespace"], attempt["workflow_id"], attempt["run_id"], (command_type(name), {
                "scheduled_event_id": attempt["scheduled_event_id"], "attempt": attempt["attempt"], **body}),
            uuid.uuid4().hex, client.identity)
        if reply_type == REJECTED:  # a stale token: the attempt timed out, was answered, or the run closed
            raise exc.RPCError(record["message"], code=record["code"], status=404)
        return {"activity_id": attempt["activity_id"], **record}

    async def _attempt(self, id_or_token: AsyncActivityIDReference | bytes) -> Record:
        """The attempt to answer: the token's, or the activity's pending attempt (found by its id)."""
        if isinstance(id_or_token, bytes):
            return parse_task_token(id_or_token)
        client, ref = self.client, id_or_token
        state = await client.service.describe(client.namespace, ref.workflow_id, ref.run_id or "")
        pending = [a for a in (state or {}).get("activities", []) if a["activity_id"] == ref.activity_id]
        if state is None or not pending:
            raise exc.RPCError(f"workflow {ref.workflow_id!r} has no pending activity {ref.activity_id!r}",
                               status=404, code="not_found")
        return {"namespace": client.namespace, "workflow_id": ref.workflow_id, "run_id": state["run_id"],
                "activity_id": ref.activity_id, "scheduled_event_id": pending[0]["scheduled_event_id"],
                "attempt": pending[0]["attempt"]}

    async def _send(self, workflow_id: str, run_id: str | None, name: str, body: Record) -> None:
        client = self.client
        reply_type, record = await client.service.send(client.namespace, workflow_id, run_id or "",
                                                       (command_type(name), body), uuid.uuid4().hex, client.identity)
        if reply_type == REJECTED:
            raise exc.RPCError(record["message"], code=record["code"],
                               status=404 if record["code"] == "NOT_FOUND" else 400)


class Client:
    def __init__(self, service: ClientTransport, *, namespace: str = "default",
                 data_converter: DataConverter = DEFAULT, identity: str = "",
                 interceptors: Sequence[Interceptor] = ()) -> None:
        self.service = service
        self.namespace = namespace
        self.data_converter = data_converter
        self.identity = identity or f"client-{uuid.uuid4().hex[:8]}"
        self.interceptors = list(interceptors)
        impl: OutboundInterceptor = _ClientImpl(self)
        for interceptor in reversed(self.interceptors):
            impl = interceptor.intercept_client(impl)
        self._impl = impl

    @classmethod
    async def connect(cls, target: str, *, namespace: str = "default", data_converter: DataConverter = DEFAULT,
                      identity: str = "", api_key: str | None = None,
                      interceptors: Sequence[Interceptor] = ()) -> Client:
        """A client of the server at `target` (e.g. "http://127.0.0.1:7243"); `api_key` when the server has auth.
        `interceptors` wrap the client's calls, the first outermost; those that are also `ostinato.worker`
        interceptors apply to the workers built from this client too (Temporal's rule)."""
        from ostinato.sdk._http import HttpService

        service = await HttpService.connect(target, api_key=api_key)
        return cls(service, namespace=namespace, data_converter=data_converter, identity=identity,
                   interceptors=interceptors)

    async def close(self) -> None:
        """Release the connections of the client's transport. Optional, as with Temporal's client (which has no
        `close`): a client never closed is closed quietly once garbage-collected or when its event loop shuts down.
        """
        await self.service.close()

    async def __aenter__(self) -> Client:
        """`async with await Client.connect(...) as client:` closes the client at the end of the block."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start_workflow(self, workflow: type | Callable[..., Any] | str, *args_: Any, id: str, task_queue: str,
                             execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
                             task_timeout: timedelta | None = None,
                             id_reuse_policy: WorkflowIDReusePolicy | str = "UNSPECIFIED",
                             id_conflict_policy: WorkflowIDConflictPolicy | str = "UNSPECIFIED",
                             retry_policy: RetryPolicy | None = None,
                             memo: dict[str, Any] | None = None,
                             search_attributes: TypedSearchAttributes | dict[str, Any] | None = None,
                             request_id: str | None = None, result_type: Any = None,
                             args: Sequence[Any] | None = None, cron_schedule: str = "") -> WorkflowHandle:
        """Start a workflow; raises WorkflowAlreadyStartedError when the id is taken (per the policies). Arguments
        go positionally or, as in Temporal's SDK, as `args=[...]`.

        `id_reuse_policy` and `id_conflict_policy` take the `ostinato.common` enums (or their names); left
        unspecified, the engine allows reusing a closed run's id and fails a start while a run is open.

        `retry_policy` retries a failed (or run-timed-out) run as a new run of the same id; `cron_schedule` (5-field
        cron, UTC) starts a run at each of its times, the first one included, until the workflow is terminated or
        canceled. The handle's `result()` follows such a chain to its final outcome."""
        name, hint = _workflow_name(workflow)
        return await self._impl.start_workflow(StartWorkflowInput(
            name, defs.call_arguments(args_, args), id, task_queue, execution_timeout, run_timeout, task_timeout,
            id_reuse_policy, id_conflict_policy, retry_policy, memo, search_attributes, {},
            ret_type=result_type or hint, request_id=request_id, cron_schedule=cron_schedule))

    async def execute_workflow(self, workflow: type | Callable[..., Any] | str, *args: Any, **options: Any) -> Any:
        """Start a workflow and wait for its result."""
        handle = await self.start_workflow(workflow, *args, **options)
        return await handle.result()

    async def start_update_with_start_workflow(
            self, update: str | Callable[..., Any], arg: Any = _NO_ARG, *, start_workflow_operation:
            WithStartWorkflowOperation, wait_for_stage: WorkflowUpdateStage, args: Sequence[Any] | None = None,
            id: str | None = None, result_type: Any = None) -> WorkflowUpdateHandle:
        """Start the operation's workflow unless it runs already (its id_conflict_policy: USE_EXISTING, or FAIL to
        refuse a running one) and send it the update, in one command; `start_workflow_operation.workflow_handle()`
        then gives the run."""
        op = start_workflow_operation
        name, update_args, hint = _update_call(update, arg, args)
        return await self._impl.start_update_with_start_workflow(StartWorkflowUpdateWithStartInput(
            op.start_input(),
            UpdateWithStartUpdateWorkflowInput(id, name, update_args, wait_for_stage, {}, ret_type=result_type or hint),
            op._set_handle, op._set_failed))

    async def execute_update_with_start_workflow(
            self, update: str | Callable[..., Any], arg: Any = _NO_ARG, *, start_workflow_operation:
            WithStartWorkflowOperation, args: Sequence[Any] | None = None, id: str | None = None,
            result_type: Any = None) -> Any:
        """`start_update_with_start_workflow` waiting for the update's completion: its result."""
        handle = await self.start_update_with_start_workflow(
            update, arg, start_workflow_operation=start_workflow_operation, args=args, id=id,
            wait_for_stage=WorkflowUpdateStage.COMPLETED, result_type=result_type)
        return await handle.result()

    def get_async_activity_handle(self, *, task_token: bytes | None = None, workflow_id: str | None = None,
                                  run_id: str | None = None, activity_id: str | None = None) -> AsyncActivityHandle:
        """Answer an activity that called `activity.raise_complete_async()`: by its `task_token`
        (`activity.info().task_token`), or by `workflow_id` + `activity_id` (and `run_id`; the current run if
        none), in which case the attempt answered is the one pending when the handle is used."""
        if task_token is not None:
            return AsyncActivityHandle(self, task_token)
        if not workflow_id or not activity_id:
            raise ValueError("give task_token, or workflow_id and activity_id")
        return AsyncActivityHandle(self, AsyncActivityIDReference(workflow_id, run_id, activity_id))

    async def start_batch_operation(self, query: str, action: BatchAction, *, job_id: str,
                                    rps: float | None = None) -> BatchOperationHandle:
        """Terminate, cancel, signal or reset every run `query` selects (Ostinato's own API, `sdk/batch.py`): a
        durable job with an id, progress and an optional rate limit (`rps`), run by the servers."""
        return await start_batch_operation(self, query, action, job_id=job_id, rps=rps)

    def get_batch_operation_handle(self, job_id: str) -> BatchOperationHandle:
        return BatchOperationHandle(self, job_id)

    def get_workflow_handle(self, workflow_id: str, *, run_id: str = "", first_execution_run_id: str = "",
                            result_type: Any = None) -> WorkflowHandle:
        return WorkflowHandle(self, workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id,
                              result_type=result_type)

    def get_workflow_handle_for(self, workflow: Callable[..., Any], workflow_id: str, *, run_id: str = "",
                                first_execution_run_id: str = "") -> WorkflowHandle:
        """A handle whose `result()` decodes as `workflow`'s run method returns (Temporal's typed variant)."""
        _, hint = _workflow_name(workflow)
        return self.get_workflow_handle(workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id,
                                        result_type=hint)

    async def add_search_attributes(self, keys: Sequence[SearchAttributeKey[Any]]) -> None:
        """Register custom search attributes in this client's namespace (what Temporal does through
        `operator_service.add_search_attributes`, or `temporal operator search-attribute create`). Registering one
        again with the same type is a no-op; another type raises RPCError (409): a type never changes."""
        await self.service.add_search_attributes(
            self.namespace, {k.name: k.indexed_value_type.metadata_type for k in keys})

    async def list_search_attributes(self) -> list[SearchAttributeKey[Any]]:
        """The custom search attributes registered in this client's namespace."""
        found = await self.service.list_search_attributes(self.namespace)
        keys = (SearchAttributeKey.from_metadata_type(name, sa_type) for name, sa_type in sorted(found.items()))
        return [k for k in keys if k is not None]

    def list_workflows(self, query: str = "", *, page_size: int = 100) -> AsyncIterator[WorkflowExecution]:
        """Runs matching a visibility query (`WorkflowType = 'Order' AND ExecutionStatus = 'Running'`), page by
        page. Visibility trails the engine by a moment: a run just started may not be listed yet."""
        return self._impl.list_workflows(ListWorkflowsInput(query, page_size))

    async def count_workflows(self, query: str = "") -> int:
        return await self._impl.count_workflows(CountWorkflowsInput(query))

    async def create_schedule(self, id: str, schedule: Schedule, *, trigger_immediately: bool = False,
                              backfill: Sequence[ScheduleBackfill] = ()) -> ScheduleHandle:
        """Create schedule `id` (engine state on the shard its id hashes to); ScheduleAlreadyRunningError if it
        exists. `trigger_immediately` takes one action now; `backfill` takes those of past ranges now."""
        return await schedules.create_schedule(self, id, schedule, trigger_immediately=trigger_immediately,
                                               backfill=backfill)

    def get_schedule_handle(self, id: str) -> ScheduleHandle:
        return ScheduleHandle(self, id)

    async def list_schedules(self, query: str | None = None) -> ScheduleAsyncIterator:
        """The namespace's schedules (`async for s in await client.list_schedules()`), from visibility."""
        return ScheduleAsyncIterator(self, query)
    # -- worker versioning (the code is in sdk/deployments.py) ------------------------------------------------------

    async def set_current_deployment_version(self, task_queue: str, build_id: str) -> TaskQueueVersioningInfo:
        """Make `build_id` the current build of `task_queue` (Temporal's SetWorkerDeploymentCurrentVersion, per
        queue): new and auto-upgrade workflow tasks go to its workers from now on; pinned runs stay where they are."""
        return await deployments.set_current_build(self, task_queue, build_id)

    async def set_ramping_deployment_version(self, task_queue: str, build_id: str,
                                             percentage: float) -> TaskQueueVersioningInfo:
        """Send `percentage` percent of the queue's workflow ids to `build_id` ("" or 0 ends the ramp)."""
        return await deployments.set_ramping_build(self, task_queue, build_id, percentage)

    async def describe_task_queue_versioning(self, task_queue: str) -> TaskQueueVersioningInfo:
        """The queue's current and ramping build."""
        return await deployments.describe(self, task_queue)


class WorkflowHandle:
    """One workflow execution (its current run unless `run_id` pins one)."""

    def __init__(self, client: Client, workflow_id: str, *, run_id: str = "", first_execution_run_id: str = "",
                 result_type: Any = None) -> None:
        self.client = client
        self.id = workflow_id
        self.run_id = run_id
        self.first_execution_run_id = first_execution_run_id
        self.result_type = result_type

    async def result(self, *, follow_runs: bool = True) -> Any:
        """Wait for the workflow to close; its result, or WorkflowFailureError with the cause."""
        converter = self.client.data_converter
        run_id = self.run_id
        while True:
            event = await self.client.service.wait_closed(self.client.namespace, self.id, run_id)
            kind, attrs = event["event_type"], event["attributes"][1]
            if kind == "WORKFLOW_EXECUTION_COMPLETED":
                return converter.decode_one(attrs["result"], self.result_type)
            if kind == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW" and follow_runs:
                run_id = attrs["new_execution_run_id"]
                continue
            status = kind.removeprefix("WORKFLOW_EXECUTION_")
            cause: BaseException | None
            if kind == "WORKFLOW_EXECUTION_FAILED":
                cause = converter.decode_failure(attrs["failure"])
            elif kind == "WORKFLOW_EXECUTION_CANCELED":
                cause = exc.CancelledError("workflow cancelled", *converter.decode(attrs["details"]))
            elif kind == "WORKFLOW_EXECUTION_TERMINATED":
                cause = exc.TerminatedError(attrs.get("reason") or "workflow terminated")
            elif kind == "WORKFLOW_EXECUTION_TIMED_OUT":
                cause = exc.TimeoutError("workflow timed out", type="START_TO_CLOSE")
            else:
                cause = None
            raise exc.WorkflowFailureError(f"workflow {self.id} {status.lower()}", cause=cause, status=status)

    async def signal(self, signal: str | Callable[..., Any], *args: Any) -> None:
        name = signal if isinstance(signal, str) else getattr(signal, defs.SIGNAL_ATTR, signal.__name__)
        await self.client._impl.signal_workflow(SignalWorkflowInput(self.id, self.run_id, name, args, {}))

    async def query(self, query: str | Callable[..., Any], *args: Any, result_type: Any = None,
                    timeout: timedelta = timedelta(seconds=10)) -> Any:
        name = query if isinstance(query, str) else getattr(query, defs.QUERY_ATTR, query.__name__)
        if result_type is None and not isinstance(query, str):
            result_type = defs._hints(query).get("return")
        return await self.client._impl.query_workflow(QueryWorkflowInput(
            self.id, self.run_id, name, args, {}, ret_type=result_type, rpc_timeout=timeout))

    async def cancel(self, reason: str = "") -> None:
        await self.client._impl.cancel_workflow(CancelWorkflowInput(self.id, self.run_id, "", reason))

    async def terminate(self, reason: str = "") -> None:
        await self.client._impl.terminate_workflow(TerminateWorkflowInput(self.id, self.run_id, "", [], reason))

    async def describe(self) -> WorkflowExecutionDescription:
        return await self.client._impl.describe_workflow(DescribeWorkflowInput(self.id, self.run_id))

    async def redrive(self, reason: str = "") -> list[Record]:
        """Have the engine decide this run's quarantined commands again (see `describe().quarantined`), after an
        upgrade that fixed what failed them. Returns one outcome per command, oldest first: `{"request_id",
        "command_type", "outcome", "message"}` where outcome is APPLIED, REJECTED (today's engine refuses it, e.g. a
        stale task answer; it leaves the quarantine too) or FAILED (it stays)."""
        reply_type, record = await self.client.service.send(
            self.client.namespace, self.id, self.run_id, (command_type("RedriveWorkflowExecution"), {"reason": reason}),
            uuid.uuid4().hex, self.client.identity)
        if reply_type == REJECTED:
            raise exc.RPCError(record["message"], code=record["code"],
                               status=404 if record["code"] == "NOT_FOUND" else 400)
        if reply_type != REDRIVEN:
            raise exc.RPCError(f"expected a {REDRIVEN} answer, got {reply_type}", status=200, code="malformed")
        outcomes: list[Record] = record["outcomes"]
        return outcomes

    async def reset(self, event_id: int | None = None, *, reset_type: ResetType | str | None = None,
                    reason: str = "", reapply: bool = True, request_id: str = "") -> str:
        """Reset this run (Ostinato's own API; temporalio has none on the handle): start a new run of the workflow
        whose history is this run's up to a WORKFLOW_TASK_COMPLETED event (`event_id`, or `reset_type` FIRST or
        LAST_WORKFLOW_TASK), then continue it with the code the workers run now. Signals received after that point
        (and updates accepted after it) are delivered again unless `reapply` is False; the workflow's current run,
        if open, is terminated, and `describe().reset_run_id` of this run names the new one. Returns the new run's
        id.
        """
        return await reset_run(self.client.service, self.client.namespace, self.id, self.run_id or "",
                               self.client.identity, reset_body(event_id, reset_type, reason, reapply), request_id)

    async def fetch_history(self) -> WorkflowHistory:
        """The run's history (a `WorkflowHistory`: the list of its events, with workflow and run ids), for
        `Replayer.replay_workflow` or a look at what happened."""
        return WorkflowHistory(self.id, [event async for event in self.fetch_history_events()], self.run_id)

    async def fetch_history_events(self) -> AsyncIterator[Record]:
        """The run's history events one by one (Temporal's name; the page size is the transport's)."""
        async for event in self.client._impl.fetch_workflow_history_events(
                FetchWorkflowHistoryEventsInput(self.id, self.run_id)):
            yield event

    @property
    def result_run_id(self) -> str:
        """The run whose result `result()` starts from (Temporal's name; the handle's own run here)."""
        return self.run_id

    async def start_update(self, update: str | Callable[..., Any], arg: Any = _NO_ARG, *,
                           wait_for_stage: WorkflowUpdateStage, args: Sequence[Any] | None = None,
                           id: str | None = None, result_type: Any = None,
                           rpc_timeout: timedelta | None = None) -> WorkflowUpdateHandle:
        """Send an update and wait until it is ACCEPTED (its validator passed and its handler runs) or COMPLETED;
        a rejected update raises WorkflowUpdateFailedError here. The same `id` again joins the first update."""
        if wait_for_stage == WorkflowUpdateStage.ADMITTED:
            raise ValueError("wait_for_stage ADMITTED is not supported (as in Temporal): use ACCEPTED or COMPLETED")
        name, update_args, hint = _update_call(update, arg, args)
        return await self.client._impl.start_workflow_update(StartWorkflowUpdateInput(
            self.id, self.run_id, self.first_execution_run_id, id or str(uuid.uuid4()), name, update_args,
            wait_for_stage, {}, ret_type=result_type or hint, rpc_timeout=rpc_timeout))

    async def execute_update(self, update: str | Callable[..., Any], arg: Any = _NO_ARG, *,
                             args: Sequence[Any] | None = None, id: str | None = None,
                             result_type: Any = None, rpc_timeout: timedelta | None = None) -> Any:
        """Send an update and wait for its result; WorkflowUpdateFailedError if it was rejected or failed,
        WorkflowUpdateRPCTimeoutOrCancelledError if `rpc_timeout` passed first (the update goes on)."""
        handle = await self.start_update(update, arg, args=args, id=id, result_type=result_type,
                                         wait_for_stage=WorkflowUpdateStage.COMPLETED, rpc_timeout=rpc_timeout)
        return await handle.result()

    def get_update_handle(self, id: str, *, workflow_run_id: str | None = None,
                          result_type: Any = None) -> WorkflowUpdateHandle:
        """A handle to an update sent before (by this or another client), by its id."""
        return WorkflowUpdateHandle(self.client, id, "", self.id, workflow_run_id=workflow_run_id or self.run_id,
                                    result_type=result_type)

    def get_update_handle_for(self, update: Callable[..., Any], id: str, *,
                              workflow_run_id: str | None = None) -> WorkflowUpdateHandle:
        """`get_update_handle`, with the result typed as `update` returns."""
        name, _, hint = _update_call(update, _NO_ARG, None)
        handle = self.get_update_handle(id, workflow_run_id=workflow_run_id, result_type=hint)
        handle.name = name
        return handle


class AsyncActivityCancelledError(exc.OstinatoError):
    """A heartbeat of an asynchronously completed activity learnt that its workflow asked it to stop: report the
    cancellation (`report_cancellation`) or complete it anyway."""


@dataclass(frozen=True)
class AsyncActivityIDReference:
    """An activity named by its workflow and id rather than a task token (the attempt pending when used)."""

    workflow_id: str
    run_id: str | None
    activity_id: str


class AsyncActivityHandle:
    """An activity attempt answered from outside its worker (Temporal's async activity completion)."""

    def __init__(self, client: Client, id_or_token: AsyncActivityIDReference | bytes) -> None:
        self.client = client
        self._id_or_token = id_or_token
        if isinstance(id_or_token, bytes):
            parse_task_token(id_or_token)  # a malformed token fails here, not at first use

    async def complete(self, result: Any = None) -> None:
        await self.client._impl.complete_async_activity(CompleteAsyncActivityInput(self._id_or_token, result))

    async def fail(self, error: Exception, *, last_heartbeat_details: Sequence[Any] = ()) -> None:
        await self.client._impl.fail_async_activity(FailAsyncActivityInput(self._id_or_token, error,
                                                                           last_heartbeat_details))

    async def report_cancellation(self, *details: Any) -> None:
        await self.client._impl.report_cancellation_async_activity(
            ReportCancellationAsyncActivityInput(self._id_or_token, details))

    async def heartbeat(self, *details: Any) -> None:
        """Record progress (the attempt's heartbeat timeout counts from here); AsyncActivityCancelledError when the
        workflow asked the activity to stop."""
        await self.client._impl.heartbeat_async_activity(HeartbeatAsyncActivityInput(self._id_or_token, details))


class WorkflowUpdateStage(IntEnum):
    """How far an update has got (Temporal's values)."""

    ADMITTED = 1  # the engine has it; not yet seen by the workflow
    ACCEPTED = 2  # the validator passed (or there is none): it is in history and its handler runs
    COMPLETED = 3  # its handler returned or failed, or it was rejected


class WorkflowUpdateFailedError(exc.OstinatoError):
    """The update was rejected (its validator raised; nothing was written) or its handler failed: `cause` says
    why, as an ApplicationError (or the failure the handler raised)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("Workflow update failed")
        self.__cause__ = cause

    @property
    def cause(self) -> BaseException:
        assert self.__cause__ is not None
        return self.__cause__


class WorkflowUpdateRPCTimeoutOrCancelledError(exc.RPCError):
    """Nobody could tell, within the wait, whether the update reached the stage asked for; it may still."""

    def __init__(self, message: str = "Timeout or cancellation waiting for update") -> None:
        super().__init__(message, status=504, code="timeout")


class WorkflowUpdateHandle:
    """One update of one workflow: its id, and its outcome (`result()`)."""

    POLL = timedelta(seconds=50)  # each long-poll of the owner; the handle asks again until there is an answer

    def __init__(self, client: Client, id: str, name: str, workflow_id: str, *, workflow_run_id: str = "",
                 result_type: Any = None) -> None:
        self.client = client
        self.id = id
        self.name = name
        self.workflow_id = workflow_id
        self.workflow_run_id = workflow_run_id
        self.result_type = result_type
        self._status: Record | None = None

    async def _wait(self, stage: WorkflowUpdateStage, rpc_timeout: timedelta | None = None) -> Record:
        deadline = None if rpc_timeout is None else asyncio.get_running_loop().time() + rpc_timeout.total_seconds()
        while True:
            wait = self.POLL
            if deadline is not None:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise WorkflowUpdateRPCTimeoutOrCancelledError()
                wait = min(wait, timedelta(seconds=left))
            status = await self.client.service.poll_update(self.client.namespace, self.workflow_id,
                                                           self.workflow_run_id, self.id, stage.name, wait)
            if status is None:
                raise exc.RPCError(f"workflow {self.workflow_id!r} has no update {self.id!r} (never sent, or the run "
                                   "forgot it before accepting it: send it again with the same id)", status=404,
                                   code="not_found")
            self._status = status
            self.workflow_run_id = status["run_id"]
            failure = (status["outcome"] or {}).get("failure")
            if failure is not None and status["rejected"] and failure.get("type") == "WorkflowClosed":
                raise exc.RPCError("workflow execution already completed (before it accepted the update)",
                                   status=404, code="not_found")
            if failure is not None and (status["rejected"] or stage == WorkflowUpdateStage.COMPLETED):
                raise WorkflowUpdateFailedError(self.client.data_converter.decode_failure(failure))
            if WorkflowUpdateStage[status["stage"]] >= stage:
                return status

    async def result(self, *, rpc_timeout: timedelta | None = None) -> Any:
        """The update's result once it completes; WorkflowUpdateFailedError if it was rejected or failed."""
        status = self._status
        if status is None or status["stage"] != "COMPLETED":
            status = await self._wait(WorkflowUpdateStage.COMPLETED, rpc_timeout)
        outcome = status["outcome"]
        if "failure" in outcome:
            raise WorkflowUpdateFailedError(self.client.data_converter.decode_failure(outcome["failure"]))
        return self.client.data_converter.decode_one(outcome["result"], self.result_type)


class WithStartWorkflowOperation:
    """The start half of update-with-start (`Client.execute_update_with_start_workflow`): the workflow to start if
    it is not running. `id_conflict_policy` is required, as in Temporal: USE_EXISTING (update the running workflow)
    or FAIL."""

    def __init__(self, workflow: type | Callable[..., Any] | str, *args_: Any, id: str, task_queue: str,
                 id_conflict_policy: WorkflowIDConflictPolicy | str, args: Sequence[Any] | None = None,
                 execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
                 task_timeout: timedelta | None = None,
                 id_reuse_policy: WorkflowIDReusePolicy | str = "UNSPECIFIED", retry_policy: RetryPolicy | None = None,
                 memo: dict[str, Any] | None = None,
                 search_attributes: TypedSearchAttributes | dict[str, Any] | None = None,
                 request_id: str | None = None, result_type: Any = None, cron_schedule: str = "") -> None:
        self.workflow_name, hint = _workflow_name(workflow)
        self.id = id
        self.request_id = request_id
        self.result_type = result_type or hint
        self._arguments = defs.call_arguments(args_, args)
        self._options: Record = dict(task_queue=task_queue, execution_timeout=execution_timeout,
                                     run_timeout=run_timeout, task_timeout=task_timeout,
                                     id_reuse_policy=id_reuse_policy, id_conflict_policy=id_conflict_policy,
                                     retry_policy=retry_policy, memo=memo, search_attributes=search_attributes,
                                     cron_schedule=cron_schedule)
        self._handle: asyncio.Future[WorkflowHandle] | None = None

    def body(self, converter: DataConverter) -> Record:
        return _start_input_body(converter, self.start_input())

    def start_input(self) -> UpdateWithStartStartWorkflowInput:
        """The start as the client's interceptors see it (`start_workflow_input` of the update-with-start)."""
        o = self._options
        return UpdateWithStartStartWorkflowInput(
            self.workflow_name, self._arguments, self.id, o["task_queue"], o["execution_timeout"], o["run_timeout"],
            o["task_timeout"], o["id_reuse_policy"], o["id_conflict_policy"], o["retry_policy"], o["memo"],
            o["search_attributes"], {}, ret_type=self.result_type, request_id=self.request_id,
            cron_schedule=o["cron_schedule"])

    def _future(self) -> asyncio.Future[WorkflowHandle]:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().create_future()
        return self._handle

    def _set_handle(self, handle: WorkflowHandle) -> None:
        if not self._future().done():
            self._future().set_result(handle)

    def _set_failed(self, error: BaseException) -> None:
        if not self._future().done():
            self._future().set_exception(error)

    async def workflow_handle(self) -> WorkflowHandle:
        """The workflow's handle, once the update-with-start call has sent its command."""
        return await self._future()


def _update_call(update: str | Callable[..., Any], arg: Any, args: Sequence[Any] | None,
                 ) -> tuple[str, list[Any], Any]:
    """The update's name, its arguments and the result's type hint (from the handler's annotations)."""
    if isinstance(update, str):
        name, hint = update, None
    else:
        found: str | None = getattr(update, defs.UPDATE_ATTR, None)
        if not found:
            raise TypeError(f"{getattr(update, '__qualname__', update)!r} is not a @workflow.update method")
        name, hint = found, defs._hints(update).get("return")
    if arg is not _NO_ARG and args:
        raise TypeError("pass the update's argument or args=[...], not both")
    return name, list(args or ([] if arg is _NO_ARG else [arg])), hint


def _start_body(converter: DataConverter, name: str, arguments: Sequence[Any], *, task_queue: str,
                execution_timeout: timedelta | None, run_timeout: timedelta | None, task_timeout: timedelta | None,
                id_reuse_policy: WorkflowIDReusePolicy | str, id_conflict_policy: WorkflowIDConflictPolicy | str,
                retry_policy: RetryPolicy | None, memo: Mapping[str, Any] | None,
                search_attributes: TypedSearchAttributes | Mapping[str, Any] | None, cron_schedule: str = "",
                headers: Mapping[str, Payload] | None = None) -> Record:
    return {
        "workflow_type": name, "task_queue": task_queue, "input": converter.encode(list(arguments)),
        "execution_timeout_ms": to_ms(execution_timeout), "run_timeout_ms": to_ms(run_timeout),
        "task_timeout_ms": to_ms(task_timeout) or 0, "id_reuse_policy": _policy_name(id_reuse_policy),
        "id_conflict_policy": _policy_name(id_conflict_policy),
        "retry_policy": None if retry_policy is None else retry_policy.to_record(),
        "memo": {k: converter.encode([v])[0] for k, v in (memo or {}).items()},
        "search_attributes": to_payloads(search_attributes, lambda v: converter.encode([v])[0], stacklevel=4),
        "header": header_records(headers or {}), "parent": None, "cron_schedule": cron_schedule,
    }


def _start_input_body(converter: DataConverter, input: StartWorkflowInput) -> Record:
    return _start_body(converter, input.workflow, input.args, task_queue=input.task_queue,
                       execution_timeout=input.execution_timeout, run_timeout=input.run_timeout,
                       task_timeout=input.task_timeout, id_reuse_policy=input.id_reuse_policy,
                       id_conflict_policy=input.id_conflict_policy, retry_policy=input.retry_policy,
                       memo=input.memo, search_attributes=input.search_attributes, headers=input.headers,
                       cron_schedule=input.cron_schedule)


def _workflow_name(workflow: type | Callable[..., Any] | str) -> tuple[str, Any]:
    if isinstance(workflow, str):
        return workflow, None
    definition = defs.definition_of(workflow)
    return definition.name, definition.result_hint()


def _policy_name(policy: WorkflowIDReusePolicy | WorkflowIDConflictPolicy | str) -> str:
    """The wire's symbol for a start policy: the enum member's name (a name given as a string goes as it is)."""
    return policy.name if isinstance(policy, WorkflowIDReusePolicy | WorkflowIDConflictPolicy) else policy
