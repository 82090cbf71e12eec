"""One workflow run in a worker: history events in, workflow commands out, deterministically.

History is cut into activations at each WORKFLOW_TASK_STARTED. An activation sees the events up to its task's
WORKFLOW_TASK_SCHEDULED (the STARTED's `scheduled_event_id`): the engine writes STARTED with the worker's answer, so
events that arrived while the task was out stand before it (and, in histories written before that, between STARTED
and COMPLETED); either way they belong to the next activation. For an activation that history shows completed, the
code is run again (replay) and the commands it produces must match, in order, the events that follow the
WORKFLOW_TASK_COMPLETED; any difference is a `NondeterminismError` (the task fails, history is untouched). The
activation of the task being worked on is live: its commands are the answer. Each command kind has its own sequence
number, so ids (`activity_id`, `timer_id`) are the same on every replay.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import random
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ostinato.schemas.wire import command_type
from ostinato.sdk import _context, _guards
from ostinato.sdk import exceptions as exc
from ostinato.sdk._definitions import UNFINISHED_ATTR, WorkflowDefinition, parameter_hints
from ostinato.sdk._loop import WorkflowLoop
from ostinato.sdk.common import RetryPolicy
from ostinato.sdk.data import DataConverter
from ostinato.sdk.search_attributes import TypedSearchAttributes
from ostinato.sdk.search_attributes import decode as decode_search_attributes
from ostinato.streams.schedules import is_schedule_parent

Record = dict[str, Any]
Command = tuple[str, Record]
PATCH_MARKER = "core_patch"
LOCAL_ACTIVITY_MARKER = "core_local_activity"  # Temporal's marker name for a local activity's outcome
NULL_ENCODING = b"binary/null"  # a memo value of None: upserting it removes the key (Temporal's rule)
CLOSING = {command_type(name) for name in ("CompleteWorkflowExecutionCommand", "FailWorkflowExecutionCommand",
                                           "CancelWorkflowExecutionCommand", "ContinueAsNewWorkflowExecutionCommand")}

# The event each command becomes, and the attribute that identifies it.
_EVENT_OF = {command_type(name): event for name, event in {
    "ScheduleActivityTaskCommand": ("ACTIVITY_TASK_SCHEDULED", "activity_id"),
    "RequestCancelActivityTaskCommand": ("ACTIVITY_TASK_CANCEL_REQUESTED", "scheduled_event_id"),
    "StartTimerCommand": ("TIMER_STARTED", "timer_id"),
    "CancelTimerCommand": ("TIMER_CANCELED", "timer_id"),
    "CompleteWorkflowExecutionCommand": ("WORKFLOW_EXECUTION_COMPLETED", None),
    "FailWorkflowExecutionCommand": ("WORKFLOW_EXECUTION_FAILED", None),
    "CancelWorkflowExecutionCommand": ("WORKFLOW_EXECUTION_CANCELED", None),
    "ContinueAsNewWorkflowExecutionCommand": ("WORKFLOW_EXECUTION_CONTINUED_AS_NEW", None),
    "StartChildWorkflowExecutionCommand": ("START_CHILD_WORKFLOW_EXECUTION_INITIATED", "workflow_id"),
    "SignalExternalWorkflowExecutionCommand": ("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED", "signal_name"),
    "RequestCancelExternalWorkflowExecutionCommand": ("REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED", None),
    "RecordMarkerCommand": ("MARKER_RECORDED", "marker_name"),
    "UpsertWorkflowSearchAttributesCommand": ("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", None),
    "ModifyWorkflowPropertiesCommand": ("WORKFLOW_PROPERTIES_MODIFIED", None),
    "PublishRecordCommand": ("RECORD_PUBLISHED", "topic"),
    "AcceptUpdateCommand": ("WORKFLOW_EXECUTION_UPDATE_ACCEPTED", "update_id"),
    "CompleteUpdateCommand": ("WORKFLOW_EXECUTION_UPDATE_COMPLETED", "update_id"),
}.items()}
COMMAND_EVENTS = frozenset(event for event, _ in _EVENT_OF.values())
TASK_EVENTS = frozenset({"WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED",
                         "WORKFLOW_TASK_FAILED", "WORKFLOW_TASK_TIMED_OUT"})

log = logging.getLogger("ostinato.workflow")


def current() -> WorkflowInstance:
    instance = _context.running()
    if not isinstance(instance, WorkflowInstance):
        raise RuntimeError("not in a workflow: this function can only be called from workflow code")
    return instance


# SDK behaviour flags (Temporal's `sdk_flags`), recorded on workflow task completions: a run has the flags of the
# SDK that completed its first task (`WorkflowInstance.flag`).
# 1: awaiting a cancelled activity raises ActivityError caused by CancelledError (Temporal's), not asyncio's
#    CancelledError.
ACTIVITY_CANCEL_IS_ACTIVITY_ERROR = 1
SDK_FLAGS = frozenset({ACTIVITY_CANCEL_IS_ACTIVITY_ERROR})


@dataclass(frozen=True)
class WorkflowInfo:
    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    attempt: int
    first_execution_run_id: str
    continued_run_id: str
    parent: Record | None
    start_time: datetime
    run_timeout: timedelta | None
    execution_timeout: timedelta | None
    cron_schedule: str | None = None  # None when the workflow has none, as in Temporal
    retry_policy: RetryPolicy | None = None
    # The run's typed attributes (Temporal's `Info.typed_search_attributes`), kept current by upserts.
    typed_search_attributes: TypedSearchAttributes = TypedSearchAttributes.empty

    @property
    def search_attributes(self) -> dict[str, list[Any]]:
        """Deprecated in temporalio, kept for code that ports: name -> list of values (a KeywordList's elements)."""
        return {p.key.name: list(p.value) if isinstance(p.value, list) else [p.value]
                for p in self.typed_search_attributes}

    # Temporal asks these of `workflow.info()`; they read the running instance (the same as
    # `workflow.history_length()` and `workflow.continue_as_new_suggested()`).
    def get_current_history_length(self) -> int:
        return current().history_length

    def is_continue_as_new_suggested(self) -> bool:
        return current().suggest_continue_as_new

    def get_current_build_id(self) -> str:
        """The build of the worker running this activation; on replay, the build that ran it then (worker
        versioning; empty for an unversioned worker that named none)."""
        return current().current_build_id


@dataclass
class TaskOutcome:
    """The answer to a workflow task: commands, or why the task failed (then history stays untouched)."""

    commands: list[Command] = field(default_factory=list)
    failure: BaseException | None = None
    cause: str = "UNSPECIFIED"
    rejected_updates: list[Record] = field(default_factory=list)  # {update_id, failure}: nothing in history
    # Local activities (live only): requests for the worker to start, runs to stop, and the ones the workflow waits
    # for (the task is answered once none is left, or heartbeated while some run on).
    local_activities: list[Record] = field(default_factory=list)
    local_cancels: list[int] = field(default_factory=list)
    local_waiting: frozenset[int] = frozenset()
    heartbeat: bool = False  # answered while local activities still run: the engine starts a new task at once


@dataclass
class _Pending:
    """A command sent (or about to be) and what resolves when its events arrive."""

    name: str
    body: Record
    on_event: Callable[[Record], None] | None = None
    local_seq: int = 0  # a local activity's marker: the seq of the local activity it records


class LocalActivityHandle(Protocol):
    """A local activity the workflow started (`workflow.start_local_activity`), as the instance sees it."""

    seq: int
    activity_type: str
    requested: bool  # handed to the worker to run in this instance's live activations

    def request(self) -> Record:
        """What the worker runs (and marks the handle requested)."""

    def resolve(self, resolution: Record) -> None:
        """An outcome: live from the worker, or on replay from its marker."""


class ReadOnlyContextError(exc.OstinatoError):
    """Workflow code that may not change anything (a query handler, an update validator) tried to: a command,
    `workflow.random()`, `uuid4()` or `patched()`. Temporal's name (`workflow.ReadOnlyContextError`)."""


class ContinueAsNew(BaseException):
    def __init__(self, body: Record) -> None:
        super().__init__("continue as new")
        self.body = body


def _attrs(event: Record) -> Record:
    attrs: Record = event["attributes"][1]
    return attrs


class Calls:
    """How an instance calls the workflow's code: directly. `ostinato.sdk.interceptor.InterceptedCalls` goes
    through the worker's workflow interceptors instead, which see each call's `header` (the wire's payload map)."""

    def execute_workflow(self, instance: WorkflowInstance, args: list[Any],
                         header: Mapping[str, Record]) -> Coroutine[Any, Any, Any]:
        coro: Coroutine[Any, Any, Any] = instance.defn.run(instance.obj, *args)
        return coro

    async def handle_signal(self, name: str, call: Callable[..., Any], args: list[Any],
                            header: Mapping[str, Record]) -> None:
        result = call(*args)
        if asyncio.iscoroutine(result):
            await result

    def handle_query(self, name: str, call: Callable[..., Any], args: list[Any],
                     header: Mapping[str, Record]) -> Any:
        return call(*args)

    def validate_update(self, update_id: str, name: str, check: Callable[..., Any], args: list[Any],
                        header: Mapping[str, Record]) -> None:
        check(*args)

    async def handle_update(self, update_id: str, name: str, call: Callable[..., Any], args: list[Any],
                            header: Mapping[str, Record]) -> Any:
        result = call(*args)
        if asyncio.iscoroutine(result):
            result = await result
        return result


DIRECT = Calls()


class WorkflowInstance:
    """The workflow object, its event loop, and everything in flight."""

    def __init__(self, defn: WorkflowDefinition, namespace: str, workflow_id: str, run_id: str,
                 converter: DataConverter) -> None:
        self.defn = defn
        self.namespace, self.workflow_id, self.run_id = namespace, workflow_id, run_id
        self.converter = converter
        # typeshed marks every loop method abstract; the ones workflows may not use raise at runtime instead.
        self.loop = WorkflowLoop(self)  # type: ignore[abstract]
        self.random = random.Random(int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big"))
        self.info: WorkflowInfo | None = None
        # Worker versioning: the build that runs the live activation, and that a replayed one ran on (its
        # WORKFLOW_TASK_COMPLETED says), for `workflow.info().get_current_build_id()`.
        self.worker_build_id = ""
        self.current_build_id = ""
        self.last_failure: Record | None = None
        self.last_completion_result: list[Record] = []
        self.obj: Any = None
        self.main: asyncio.Task[Any] | None = None
        self.replaying = False
        self.now = datetime.fromtimestamp(0, UTC)
        self.history_length = 0
        self.suggest_continue_as_new = False
        self.last_started_event_id = 0  # the last workflow task this instance answered (live or replayed)
        self.memo: dict[str, Record] = {}  # the run's memo as payloads: from its start, changed by upsert_memo
        self.closed = False
        self.cancel_requested = False  # the run was asked to cancel: a failure the cancellation caused cancels it
        self.read_only: str = ""  # what runs now that may not change the workflow (a validator, a query)
        self.calls: Calls = DIRECT  # how workflow code is called (through interceptors, when the worker has any)
        self.outbound: Any = None  # the run's workflow outbound interceptor chain, when the worker has interceptors
        self._defer_main = False
        self._main_coro: Any = None  # the run coroutine, while updates of the first activation go first
        self._seq: dict[str, int] = {}
        self._new: list[_Pending] = []  # commands of the activation running now
        self._expected: list[_Pending] = []  # commands of the last activation, waiting for their events
        self._by_event: dict[tuple[str, int], Callable[[Record], None]] = {}  # (kind, event id) -> resolver
        self._timers: dict[str, Callable[[], None]] = {}
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._buffered_signals: dict[str, list[Record]] = {}
        # Handlers set while running (`workflow.set_signal_handler`...): plain callables, ahead of the class's.
        self._signal_handlers: dict[str, Callable[..., Any]] = {}
        self._query_handlers: dict[str, Callable[..., Any]] = {}
        self._update_handlers: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
        self._known_patches: set[str] = set()
        self._locals: dict[int, LocalActivityHandle] = {}  # seq -> local activities without an outcome yet
        self._local_requests: list[Record] = []
        self._local_cancels: list[int] = []
        self._patches: dict[str, bool] = {}
        self._task_failure: BaseException | None = None
        self._hinted = False
        self._rejected: list[Record] = []  # updates the live activation's validators refused
        self._handlers: dict[asyncio.Task[Any], tuple[str, str, int]] = {}  # running: (kind, name, unfinished policy)
        self.sdk_flags: frozenset[int] | None = None  # the run's SDK behaviour flags: known at its first activation
        self._resolving_local = False  # replaying a local activity's outcome (`_match_local`)

    def flag(self, flag: int) -> bool:
        """Whether this run has the SDK behaviour `flag` (`SDK_FLAGS`), as Temporal's SDK flags: a run keeps the
        behaviour of the SDK that completed its first workflow task, so a change in what workflow code sees
        never makes an older run non-deterministic on replay."""
        return self.sdk_flags is not None and flag in self.sdk_flags

    def _learn_sdk_flags(self, events: list[Record]) -> None:
        """The flags the run's first completed workflow task recorded; a run without one yet takes this SDK's."""
        if self.sdk_flags is not None:
            return
        first = next((e for e in events if e["event_type"] == "WORKFLOW_TASK_COMPLETED"), None)
        self.sdk_flags = SDK_FLAGS if first is None else frozenset(_attrs(first).get("sdk_flags") or ())

    # -- feeding history ------------------------------------------------------------------------------------------

    def process(self, events: list[Record], live_started_event_id: int | None,
                updates: list[Record] | None = None) -> TaskOutcome:
        """Consume `events` (everything after what this instance has seen, up to and including the task's
        WORKFLOW_TASK_STARTED) and return the live activation's commands, and its answer to the `updates` the task
        carries. With no live task (to answer a query), replay every completed activation and stop."""
        self._learn_sdk_flags(events)  # a fresh instance gets its run's history from the start
        outcome_of = {_attrs(e)["started_event_id"]: e["event_type"] for e in events
                      if e["event_type"] in ("WORKFLOW_TASK_COMPLETED", "WORKFLOW_TASK_FAILED",
                                             "WORKFLOW_TASK_TIMED_OUT")}
        built_by = {_attrs(e)["started_event_id"]: _attrs(e).get("build_id") or "" for e in events
                    if e["event_type"] == "WORKFLOW_TASK_COMPLETED"}
        jobs: list[Record] = []
        matching = False
        try:
            for index, event in enumerate(events):
                kind = event["event_type"]
                if kind == "WORKFLOW_TASK_STARTED":
                    seen = _attrs(event)["scheduled_event_id"]
                    if event["event_id"] != live_started_event_id and seen + 1 == self.last_started_event_id:
                        continue  # this instance ran that activation live; history now shows its start
                    self._unmatched_check(event)
                    if event["event_id"] == live_started_event_id:
                        self.current_build_id = self.worker_build_id
                        return self._activate(jobs, event, replaying=False, updates=updates or [])
                    if outcome_of.get(event["event_id"]) != "WORKFLOW_TASK_COMPLETED":
                        continue  # a failed or timed-out task: what it saw comes again in the next one
                    # Later arrivals, written before this STARTED, are the next activation's.
                    now = [job for job in jobs if job["event_id"] <= seen]
                    jobs = [job for job in jobs if job["event_id"] > seen]
                    accepted = self._learn_patches(events, index)
                    self.current_build_id = built_by.get(event["event_id"], "")
                    self._activate(now, event, replaying=True, updates=accepted)
                elif kind == "WORKFLOW_TASK_COMPLETED":
                    matching = True
                elif kind in COMMAND_EVENTS and matching:
                    self._match(event)
                elif kind in TASK_EVENTS or kind == "ACTIVITY_TASK_STARTED":
                    continue
                else:
                    if matching:
                        self._unmatched_check(event)
                    matching = False
                    jobs.append(event)
        except exc.NondeterminismError as error:
            return TaskOutcome(failure=error, cause="NONDETERMINISM")
        if live_started_event_id is None:
            return TaskOutcome()
        missing = f"the task's WORKFLOW_TASK_STARTED {live_started_event_id} is not in the events given"
        return TaskOutcome(failure=exc.NondeterminismError(missing), cause="UNSPECIFIED")

    def _unmatched_check(self, event: Record) -> None:
        if self._expected:
            pending = self._expected[0]
            raise exc.NondeterminismError(
                f"workflow code produced {_describe(pending.name, pending.body)} but history has no such event "
                f"(found {event['event_type']} at event {event['event_id']} instead)")

    def _match(self, event: Record) -> None:
        if event["event_type"] == "MARKER_RECORDED" and _attrs(event)["marker_name"] == LOCAL_ACTIVITY_MARKER:
            self._match_local(event)
            return
        if not self._expected:
            raise exc.NondeterminismError(
                f"history has {event['event_type']} at event {event['event_id']} "
                f"({_event_id_text(event)}) but workflow code did not produce it")
        pending = self._expected.pop(0)
        kind, key = _EVENT_OF[pending.name]
        attrs = _attrs(event)
        if event["event_type"] != kind or (key is not None and key in attrs and key in pending.body
                                           and attrs[key] != pending.body[key]):
            raise exc.NondeterminismError(
                f"history has {event['event_type']} ({_event_id_text(event)}) at event {event['event_id']} but "
                f"workflow code now produces {_describe(pending.name, pending.body)}")
        if pending.name == command_type("ScheduleActivityTaskCommand") and attrs["activity_type"] != \
                pending.body["activity_type"]:
            raise exc.NondeterminismError(
                f"history schedules activity {attrs['activity_id']!r} as {attrs['activity_type']!r} at event "
                f"{event['event_id']} but workflow code now runs {pending.body['activity_type']!r}")
        if pending.on_event is not None:
            pending.on_event(event)

    def _match_local(self, event: Record) -> None:
        """A local activity's marker. Recorded where its outcome came (a live activation's answer carries it after the
        commands made before): here the code's commands must all be matched, unless this copy made the marker itself
        (live). On replay the marker's outcome resolves the local activity, and what the code then does must match
        the events that follow. A command still unmatched here is one the live run took back when the outcome came
        in the same task (the timer of `asyncio.wait_for` around the local activity, say): the outcome must take it
        back again now, or the code has changed."""
        resolution = read_local_marker(self.converter, _attrs(event))
        seq, kind = resolution["seq"], resolution["activity_type"]
        if self._expected and self._expected[0].local_seq == seq:
            self._expected.pop(0)
            return
        handle = self._locals.pop(seq, None)
        if handle is None or any(p.local_seq == seq for p in self._expected):
            if self._expected:
                raise exc.NondeterminismError(
                    f"history has the outcome of local activity {kind!r} (seq {seq}) at event {event['event_id']} "
                    f"but workflow code now produces {_describe(self._expected[0].name, self._expected[0].body)}")
            raise exc.NondeterminismError(
                f"history has the outcome of local activity {kind!r} (seq {seq}) at event {event['event_id']} but "
                "workflow code did not start it")
        if handle.activity_type != kind:
            raise exc.NondeterminismError(
                f"history has local activity {seq} as {kind!r} at event {event['event_id']} but workflow code now "
                f"runs {handle.activity_type!r}")
        unmatched = list(self._expected)
        before = {id(p) for p in self._new}  # (the outcome may take some of these back: counting would skew)
        self._resolving_local = True
        try:
            failure = self._step(lambda: handle.resolve(resolution))
        finally:
            self._resolving_local = False
        if failure is not None:
            raise failure if isinstance(failure, exc.NondeterminismError) else exc.NondeterminismError(
                f"replaying failed: {type(failure).__name__}: {failure}") from failure
        kept = next((p for p in unmatched if p in self._expected), None)
        if kept is not None:
            raise exc.NondeterminismError(
                f"history has the outcome of local activity {kind!r} (seq {seq}) at event {event['event_id']} but "
                f"workflow code now produces {_describe(kept.name, kept.body)}")
        self._expected.extend(p for p in self._new if id(p) not in before)

    def _learn_patches(self, events: list[Record], started_index: int) -> list[Record]:
        """What a replayed activation recorded among the command events after its COMPLETED: patches (markers),
        since `patched()` must answer as it did live; and the updates it accepted, returned, which the activation
        is given again (without their validators) so their handlers run as they did."""
        started_id = events[started_index]["event_id"]
        rest = iter(events[started_index + 1:])
        accepted: list[Record] = []
        for event in rest:
            if event["event_type"] == "WORKFLOW_TASK_COMPLETED" and _attrs(event)["started_event_id"] == started_id:
                break
        for event in rest:
            if event["event_type"] not in COMMAND_EVENTS:
                break
            attrs = _attrs(event)
            if event["event_type"] == "MARKER_RECORDED" and attrs["marker_name"] == PATCH_MARKER:
                self._known_patches.update(self.converter.decode(attrs["details"].get("patch_id", [])))
            elif event["event_type"] == "WORKFLOW_EXECUTION_UPDATE_ACCEPTED":
                accepted.append(attrs)
        return accepted

    # -- one activation -------------------------------------------------------------------------------------------

    def _activate(self, jobs: list[Record], started: Record, replaying: bool,
                  updates: list[Record] | None = None) -> TaskOutcome:
        self.replaying = replaying
        self.now = datetime.fromtimestamp(started["event_time_ms"] / 1000, UTC)
        self.loop.set_time(started["event_time_ms"] / 1000)
        self.history_length = _attrs(started)["history_length"]
        self.suggest_continue_as_new = _attrs(started)["suggest_continue_as_new"]
        if self.suggest_continue_as_new and not replaying and not self._hinted:
            self._hinted = True
            log.warning("workflow %s/%s: history has %d events, past the warning threshold; call "
                        "workflow.continue_as_new(...) soon, carrying the state over (the engine terminates runs at "
                        "its hard limit)", self.workflow_id, self.run_id, self.history_length)
        # As the task showed it: SCHEDULED + 1, whatever id history gives the STARTED once the answer is in.
        self.last_started_event_id = _attrs(started)["scheduled_event_id"] + 1
        self._new = []
        self._rejected = []
        self._task_failure = None
        self._local_cancels = []
        if not replaying:  # local activities replay left without an outcome run now (the copy that ran them is gone)
            self._local_requests.extend(h.request() for h in self._locals.values() if not h.requested)

        def run_jobs() -> None:
            # An activation that starts the run and carries updates runs their handlers before the workflow's `run`
            # (Temporal's order), so an update-with-start is handled before `run` can finish without it.
            self._defer_main = bool(updates)
            for job in jobs:
                if not self.closed:
                    self._apply(job)
            for request in updates or ():
                self._update(request, validate=not replaying)
            self._defer_main = False
            if self._main_coro is not None:
                self._create_main(self._main_coro)

        failure = self._step(run_jobs)
        if failure is not None:
            self._new = []
            if replaying:
                raise failure if isinstance(failure, exc.NondeterminismError) else exc.NondeterminismError(
                    f"replaying failed: {type(failure).__name__}: {failure}") from failure
            return self._failed(failure)
        self._expected = list(self._new)
        return self._outcome()

    def _step(self, body: Callable[[], None]) -> BaseException | None:
        """Run `body` in this workflow, then its event loop until it waits: the failure that fails the task, if any."""
        _guards.install()
        _context.set_running(self)
        try:
            body()
            self._run()
        except (exc.NondeterminismError, exc.RestrictedWorkflowAccessError) as error:
            self._task_failure = error
        finally:
            _context.set_running(None)
        failure, self._task_failure = self._task_failure, None
        return failure

    @staticmethod
    def _failed(failure: BaseException) -> TaskOutcome:
        nondeterministic = isinstance(failure, exc.NondeterminismError)
        return TaskOutcome(failure=failure,
                           cause="NONDETERMINISM" if nondeterministic else "WORKFLOW_WORKER_UNHANDLED_FAILURE")

    def _outcome(self) -> TaskOutcome:
        requests, self._local_requests = self._local_requests, []
        cancels, self._local_cancels = self._local_cancels, []
        return TaskOutcome(commands=[(p.name, p.body) for p in self._new], rejected_updates=self._rejected,
                           local_activities=requests, local_cancels=cancels,
                           local_waiting=frozenset(seq for seq, h in self._locals.items() if h.requested))

    # -- local activities -----------------------------------------------------------------------------------------

    def schedule_local(self, handle: LocalActivityHandle) -> None:
        """A local activity (or its next attempt after a backoff timer) starts: live, the worker runs it; on replay it
        waits for its marker."""
        self.check_writable("start_local_activity")
        if self.closed:
            raise exc.ApplicationError("the workflow already closed: no more commands") from None
        self._locals[handle.seq] = handle
        if not self.replaying:
            self._local_requests.append(handle.request())

    def cancel_local(self, handle: LocalActivityHandle, *, wait: bool) -> bool:
        """Stop a local activity: True when the worker was asked to and its outcome will still come (`wait`);
        otherwise it is forgotten (nothing is recorded: replay cancels it again at the same point)."""
        if self._locals.get(handle.seq) is not handle:
            return False
        if handle.requested and not self.replaying:
            self._local_cancels.append(handle.seq)
        if wait and (handle.requested or self.replaying):
            return True
        del self._locals[handle.seq]
        return False

    def resolve_local_activity(self, resolution: Record) -> TaskOutcome:
        """The worker ran a local activity (one attempt, or its retries, to an outcome): record its marker and let
        the workflow go on, in the live activation."""
        handle = self._locals.get(resolution["seq"])
        if handle is None or not handle.requested or self.closed:
            return self._outcome()  # cancelled meanwhile, or the run closed: the outcome is dropped
        del self._locals[handle.seq]

        def record() -> None:
            self.command("RecordMarkerCommand", local_marker(self.converter, resolution)).local_seq = handle.seq
            handle.resolve(resolution)

        failure = self._step(record)
        if failure is not None:
            self._new = []
            return self._failed(failure)
        self._expected = list(self._new)
        return self._outcome()

    def record_violation(self, error: BaseException) -> None:
        """A determinism guard caught `error` in workflow code: the activation fails with the first one, even if the
        code swallows the exception."""
        if self._task_failure is None:
            self._task_failure = error

    def _run(self) -> None:
        """Run the loop until nothing is ready and no wait_condition became true."""
        while True:
            self.loop.run_ready()
            woke = False
            for predicate, future in list(self._conditions):
                if future.done():
                    self._conditions.remove((predicate, future))
                elif predicate():
                    future.set_result(None)
                    self._conditions.remove((predicate, future))
                    woke = True
            if not woke and self.loop.idle:
                return

    def _apply(self, event: Record) -> None:
        kind, attrs = event["event_type"], _attrs(event)
        if kind == "WORKFLOW_EXECUTION_STARTED":
            self._start(event)
        elif kind == "WORKFLOW_EXECUTION_SIGNALED":
            self._signal(attrs["signal_name"], attrs["input"], attrs.get("header") or {})
        elif kind == "WORKFLOW_EXECUTION_CANCEL_REQUESTED":
            self.cancel_requested = True
            if self.main is not None and not self.main.done():
                self.main.cancel()
        elif kind == "TIMER_FIRED":
            callback = self._timers.pop(attrs["timer_id"], None)
            if callback is not None:
                callback()
        else:
            ref = attrs.get("scheduled_event_id") or attrs.get("initiated_event_id")
            resolver = self._by_event.get((_family(kind), ref)) if ref else None
            if resolver is not None:
                resolver(event)

    def _start(self, event: Record) -> None:
        attrs = _attrs(event)
        run_timeout, exec_timeout = attrs["run_timeout_ms"], attrs["execution_timeout_ms"]
        self.info = WorkflowInfo(
            self.namespace, self.workflow_id, self.run_id, attrs["workflow_type"], attrs["task_queue"],
            attrs["attempt"], attrs["first_execution_run_id"], attrs["continued_execution_run_id"],
            None if is_schedule_parent(attrs["parent"]) else attrs["parent"],
            datetime.fromtimestamp(event["event_time_ms"] / 1000, UTC),
            None if run_timeout is None else timedelta(milliseconds=run_timeout),
            None if exec_timeout is None else timedelta(milliseconds=exec_timeout),
            attrs.get("cron_schedule") or None,  # .get: histories saved as JSON before it existed lack it
            RetryPolicy.from_record(attrs["retry_policy"]),
            typed_search_attributes=decode_search_attributes(attrs["search_attributes"]))
        # What the previous run of a retried or cron chain left: `workflow.get_last_failure()` and
        # `workflow.get_last_completion_result()` read them.
        self.last_failure = attrs.get("continued_failure")
        self.last_completion_result = list(attrs.get("last_completion_result") or [])
        self.memo = dict(attrs["memo"])
        args = self.converter.decode(attrs["input"], self.defn.arg_hints(self.defn.run)[:len(attrs["input"])])
        self.obj = self.defn.cls(*args) if self.defn.init_takes_args else self.defn.cls()
        coro = self.calls.execute_workflow(self, args, attrs.get("header") or {})
        if self._defer_main:
            self._main_coro = coro
        else:
            self._create_main(coro)

    def _create_main(self, coro: Any) -> None:
        self._main_coro = None
        self.main = self.loop.create_task(coro, name="workflow.run")
        self.main.add_done_callback(self._main_done)

    def _main_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._close("CancelWorkflowExecutionCommand", {"details": []})
            return
        error = task.exception()
        if error is None:
            self._close("CompleteWorkflowExecutionCommand", {"result": self.converter.encode([task.result()])})
        elif isinstance(error, ContinueAsNew):
            self._close("ContinueAsNewWorkflowExecutionCommand", error.body)
        elif isinstance(error, asyncio.CancelledError | exc.CancelledError) or (
                self.cancel_requested and _caused_by_cancellation(error)):
            # Temporal's rule: a run asked to cancel whose code fails because of it (an activity or child that
            # was cancelled in turn) is cancelled, not failed.
            self._close("CancelWorkflowExecutionCommand", {"details": []})
        elif isinstance(error, exc.FailureError):
            self._close("FailWorkflowExecutionCommand", {"failure": self.converter.encode_failure(error)})
        else:
            # A bug (TypeError, KeyError...) fails the workflow task, not the workflow: fix the code and the
            # workflow goes on from where it was.
            self._task_failure = error

    def _close(self, name: str, body: Record) -> None:
        self.closed = True
        self.command(name, body)
        if self._handlers:
            self._warn_unfinished()

    def _signal(self, name: str, payloads: list[Record], header: Mapping[str, Record]) -> None:
        handler = self.defn.signals.get(name) if name else None
        runtime_handler = self._signal_handlers.get(name) if name else None
        if handler is None and runtime_handler is None:
            dynamic_runtime, dynamic = self._signal_handlers.get(""), self.defn.signals.get("")
            if dynamic_runtime is None and dynamic is None:
                self._buffered_signals.setdefault(name, []).append({"input": payloads, "header": header})
                return
            # A dynamic handler (set while running first, as for named ones): (name, args as plain JSON values).
            values = self.converter.decode(payloads)
            if dynamic_runtime is not None:
                self._deliver(name, functools.partial(dynamic_runtime, name, values), [], dynamic_runtime, header)
            else:
                assert dynamic is not None
                self._deliver(name, functools.partial(dynamic, self.obj, name, values), [], dynamic, header)
            return
        if runtime_handler is not None:
            call = runtime_handler
            args = self.converter.decode(payloads, parameter_hints(runtime_handler)[:len(payloads)])
        else:
            assert handler is not None
            call = functools.partial(handler, self.obj)
            args = self.converter.decode(payloads, self.defn.arg_hints(handler)[:len(payloads)])
        self._deliver(name, call, args, call, header)

    def _deliver(self, name: str, call: Callable[..., Any], args: list[Any], handler: Callable[..., Any],
                 header: Mapping[str, Record]) -> None:
        async def deliver() -> None:
            await self.calls.handle_signal(name, call, args, header)

        self._track(self.loop.create_task(deliver(), name=f"signal {name}"), "signal", name, handler)

    def _track(self, task: asyncio.Task[Any], kind: str, name: str, handler: Callable[..., Any]) -> None:
        policy = int(getattr(handler, UNFINISHED_ATTR, 1))
        self._handlers[task] = (kind, name, policy)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        self._handlers.pop(task, None)
        if not task.cancelled() and task.exception() is not None and self._task_failure is None:
            self._task_failure = task.exception()

    def all_handlers_finished(self) -> bool:
        return not self._handlers

    def set_signal_handler(self, name: str, handler: Callable[..., Any] | None) -> None:
        """Handle signal `name` with `handler` from now on (None removes it); signals that waited for a handler
        are delivered to it at once, in the order they came."""
        if handler is None:
            self._signal_handlers.pop(name, None)
            return
        self._signal_handlers[name] = handler
        # A dynamic handler ("") takes every signal still waiting for one, in the order each name first came.
        for waiting in ([name] if name else list(self._buffered_signals)):
            for buffered in self._buffered_signals.pop(waiting, []):
                self._signal(waiting, buffered["input"], buffered["header"])

    def set_query_handler(self, name: str, handler: Callable[..., Any] | None) -> None:
        if handler is None:
            self._query_handlers.pop(name, None)
        else:
            self._query_handlers[name] = handler

    def set_update_handler(self, name: str, handler: Callable[..., Any] | None,
                           validator: Callable[..., Any] | None = None) -> None:
        if handler is None:
            self._update_handlers.pop(name, None)
        else:
            self._update_handlers[name] = (handler, validator)

    def _update(self, request: Record, validate: bool) -> None:
        """Deliver an update: validate it (live only: a replay gives the accepted ones again), accept it, and run
        its handler, whose return or `FailureError` completes it. A refused update goes in the task's answer, not
        in history."""
        update_id, name = request["update_id"], request["name"]
        found = self._update_callables(name)
        if found is None:
            if not validate:
                raise exc.NondeterminismError(f"history accepted update {name!r} ({update_id}) but workflow "
                                              f"{self.defn.name} has no handler for it now")
            known = ", ".join(sorted(n for n in [*self.defn.updates, *self._update_handlers] if n)) or "none"
            self._reject(update_id, exc.ApplicationError(
                f"workflow {self.defn.name} has no update {name!r} (known: {known})", type="UpdateNotFound"))
            return
        call, check, hints, handler = found
        try:
            args = self.converter.decode(request["input"], None if hints is None else hints[:len(request["input"])])
            if validate and check is not None:
                self.read_only = f"the validator of update {name!r}"
                try:
                    self.calls.validate_update(update_id, name, check, args, request.get("header") or {})
                finally:
                    self.read_only = ""
        except Exception as error:
            if not validate:
                raise
            self._reject(update_id, error)
            return
        self.command("AcceptUpdateCommand", {"update_id": update_id})
        self._track(self.loop.create_task(self._run_update(update_id, name, call, args, request.get("header") or {}),
                                          name=f"update {name}"), "update", name, handler)

    def _update_callables(self, name: str) -> tuple[Callable[..., Any], Callable[..., Any] | None, list[Any] | None,
                                                      Callable[..., Any]] | None:
        """Update `name`'s handler and validator as callables taking the update's arguments, the hints to decode
        them with (None: plain JSON), and the handler as defined (it carries its unfinished policy); None when the
        workflow has none. A handler set while running comes first, then the class's, then the dynamic one."""
        if name in self._update_handlers:
            runtime_handler, runtime_validator = self._update_handlers[name]
            return runtime_handler, runtime_validator, parameter_hints(runtime_handler), runtime_handler
        handler, dynamic = self.defn.update_handler(name)
        if handler is None:
            return None
        validator = self.defn.validators.get("" if dynamic else name)
        if dynamic:  # called as (self, name, args)
            def bind(fn: Callable[..., Any]) -> Callable[..., Any]:
                return lambda *args: fn(self.obj, name, list(args))

            return bind(handler), None if validator is None else bind(validator), None, handler
        check = None if validator is None else functools.partial(validator, self.obj)
        return functools.partial(handler, self.obj), check, self.defn.arg_hints(handler), handler

    async def _run_update(self, update_id: str, name: str, call: Callable[..., Any], args: list[Any],
                          header: Mapping[str, Record]) -> None:
        try:
            result = await self.calls.handle_update(update_id, name, call, args, header)
        except (exc.FailureError, asyncio.CancelledError) as error:
            failure = error if isinstance(error, exc.FailureError) else exc.CancelledError("update handler cancelled")
            if not self.closed:
                self.command("CompleteUpdateCommand", {"update_id": update_id, "result": [],
                                                       "failure": self.converter.encode_failure(failure)})
            return
        if not self.closed:
            self.command("CompleteUpdateCommand", {"update_id": update_id,
                                                   "result": self.converter.encode([result]), "failure": None})

    def _reject(self, update_id: str, error: BaseException) -> None:
        self._rejected.append({"update_id": update_id, "failure": self.converter.encode_failure(error)})

    def _warn_unfinished(self) -> None:
        """Temporal's warning for a run that finishes while handlers run: their callers get no result."""
        if self.replaying:
            return
        unfinished = sorted({(kind, name) for kind, name, policy in self._handlers.values() if policy == 1})
        for kind in ("update", "signal"):
            names = [name or "(dynamic)" for k, name in unfinished if k == kind]
            if names:
                log.warning("workflow %s/%s finished while %s handlers were still running: %s. Their work was "
                            "interrupted%s. Wait for them before returning with `await workflow.wait_condition("
                            "workflow.all_handlers_finished)`, or give the handler unfinished_policy="
                            "HandlerUnfinishedPolicy.ABANDON", self.workflow_id, self.run_id, kind, ", ".join(names),
                            " and the clients waiting for them get no result" if kind == "update" else "")

    # -- what the workflow API calls ------------------------------------------------------------------------------

    def next_seq(self, kind: str) -> int:
        self._seq[kind] = self._seq.get(kind, 0) + 1
        return self._seq[kind]

    def check_writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyContextError(f"{what} in {self.read_only}: it may not change the workflow (nor draw from "
                                       "its random numbers), since replay does not run it")

    def command(self, name: str, body: Record, on_event: Callable[[Record], None] | None = None) -> _Pending:
        self.check_writable(name.rpartition(".")[2].removesuffix("Command"))
        if self.closed and command_type(name) not in CLOSING:
            raise exc.ApplicationError("the workflow already closed: no more commands") from None
        pending = _Pending(command_type(name), body, on_event)
        self._new.append(pending)
        return pending

    def withdraw(self, pending: _Pending) -> bool:
        """Take back a command not yet sent (cancelled within the activation that made it). Replaying a local
        activity's outcome, the commands still unmatched are ones the live run took back then (`_match_local`)."""
        taken = False
        if self._resolving_local and pending in self._expected:
            self._expected.remove(pending)
            taken = True
        if pending in self._new:
            self._new.remove(pending)
            taken = True
        return taken

    def on(self, family: str, event_id: int, resolver: Callable[[Record], None]) -> None:
        self._by_event[(family, event_id)] = resolver

    def start_timer(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        timer_id = str(self.next_seq("timer"))
        pending = self.command("StartTimerCommand", {"timer_id": timer_id,
                                                     "start_to_fire_timeout_ms": max(1, round(delay_s * 1000))})
        self._timers[timer_id] = callback

        def cancel() -> None:
            if self._timers.pop(timer_id, None) is not None and not self.withdraw(pending) and not self.closed:
                self.command("CancelTimerCommand", {"timer_id": timer_id})

        return cancel

    def condition(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        self._conditions.append((predicate, future))
        return future

    def upsert_memo(self, changes: dict[str, Record]) -> None:
        """Record a memo change (a `binary/null` payload removes the key, as the engine's applier does) and keep
        `memo` current at once, live and on replay alike, since the workflow code makes the same call again."""
        self.command("ModifyWorkflowPropertiesCommand", {"upserted_memo": changes})
        for key, payload in changes.items():
            if payload["metadata"].get("encoding") == NULL_ENCODING:
                self.memo.pop(key, None)
            else:
                self.memo[key] = payload

    def patched(self, patch_id: str, deprecated: bool = False) -> bool:
        if patch_id in self._patches:
            return self._patches[patch_id]
        use = deprecated or not self.replaying or patch_id in self._known_patches
        self._patches[patch_id] = use
        if use:
            self.command("RecordMarkerCommand", {"marker_name": PATCH_MARKER,
                                                 "details": {"patch_id": self.converter.encode([patch_id])},
                                                 "header": {}, "failure": None})
        return use

    # -- queries --------------------------------------------------------------------------------------------------

    def query(self, name: str, args: list[Record], header: Mapping[str, Record] | None = None) -> list[Record]:
        runtime_handler = self._query_handlers.get(name)
        if runtime_handler is not None:
            values = self.converter.decode(args, parameter_hints(runtime_handler)[:len(args)])
            return self._read_only_call(name, runtime_handler, values, header or {})
        handler = self.defn.queries.get(name) if name else None
        if handler is None and (dynamic_runtime := self._query_handlers.get("")) is not None:
            return self._read_only_call(name, dynamic_runtime, [name, self.converter.decode(args)], header or {})
        if handler is None and (dynamic := self.defn.queries.get("")) is not None:
            return self._read_only_call(name, functools.partial(dynamic, self.obj),
                                        [name, self.converter.decode(args)], header or {})
        if handler is None:
            known = ", ".join(sorted(q for q in self.defn.queries if q)) or "none"
            raise exc.QueryRejectedError(f"workflow {self.defn.name} has no query {name!r} (known: {known})")
        values = self.converter.decode(args, self.defn.arg_hints(handler)[:len(args)])
        return self._read_only_call(name, functools.partial(handler, self.obj), values, header or {})

    def _read_only_call(self, name: str, call: Callable[..., Any], values: list[Any],
                        header: Mapping[str, Record]) -> list[Record]:
        _context.set_running(self)
        self.read_only = f"query {name!r}"
        try:
            return self.converter.encode([self.calls.handle_query(name, call, values, header)])
        finally:
            self.read_only = ""
            _context.set_running(None)


def _caused_by_cancellation(error: BaseException) -> bool:
    """An activity's or a child's error whose cause is a cancellation (Temporal's `is_cancelled_exception`)."""
    return isinstance(error, exc.ActivityError | exc.ChildWorkflowError) and isinstance(
        error.__cause__ or getattr(error, "cause", None), exc.CancelledError)


def _family(event_type: str) -> str:
    if event_type.startswith("ACTIVITY_TASK"):
        return "activity"
    if "CHILD_WORKFLOW" in event_type:
        return "child"
    return "external"


def _describe(name: str, body: Record) -> str:
    short = name.rpartition(".")[2].removesuffix("Command")
    details = {k: body[k] for k in ("activity_id", "activity_type", "timer_id", "workflow_id", "marker_name",
                                    "signal_name") if k in body}
    return f"{short}({', '.join(f'{k}={v!r}' for k, v in details.items())})"


def _event_id_text(event: Record) -> str:
    attrs = _attrs(event)
    details = {k: attrs[k] for k in ("activity_id", "activity_type", "timer_id", "workflow_id", "marker_name")
               if k in attrs}
    return ", ".join(f"{k}={v!r}" for k, v in details.items()) or event["event_type"].lower()


def local_marker(converter: DataConverter, resolution: Record) -> Record:
    """The RecordMarkerCommand of a local activity's outcome, in Temporal's shape: marker `core_local_activity`,
    `details["data"]` what it was (seq, id, type, attempt, when, and the backoff when a timer takes the next
    attempt), `details["result"]` its result, or the marker's `failure`."""
    data = {key: resolution[key] for key in ("seq", "activity_id", "activity_type", "attempt", "complete_time_ms",
                                             "original_schedule_time_ms", "backoff_ms", "retry_state")}
    details = {"data": converter.encode([data])}
    if resolution["result"] is not None:
        details["result"] = resolution["result"]
    return {"marker_name": LOCAL_ACTIVITY_MARKER, "details": details, "header": {}, "failure": resolution["failure"]}


def read_local_marker(converter: DataConverter, attrs: Record) -> Record:
    """The outcome a local activity marker records (the inverse of `local_marker`)."""
    data: Record = converter.decode(attrs["details"]["data"])[0]
    return {**data, "result": attrs["details"].get("result"), "failure": attrs.get("failure")}
