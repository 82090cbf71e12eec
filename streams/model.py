"""The state of a workflow: plain data that appliers build from history events, and its Avro form.

Most of it is *durable*: a fold over the run's history rebuilds it exactly. A few fields are *ephemeral*
(marked so): attempt bookkeeping that Temporal, and Ostinato, deliberately keep out of history so retries and
heartbeats do not bloat it. They live only in the state changelog; replay-equality tests compare the durable
view (`durable_record`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ostinato.schemas import codec, wire

Record = dict[str, Any]  # an Avro record as the codec reads and writes it
Payloads = list[Record]
PayloadMap = dict[str, Record]

EPHEMERAL = {"ephemeral": True}


@dataclass(slots=True)
class WorkflowTaskState:
    """The one workflow task of a run in flight. `transient` attempts (retries after a failure) have no events
    in history until they complete, so a workflow stuck on broken code does not grow its history."""

    scheduled_event_id: int
    started_event_id: int
    attempt: int
    task_queue: str
    scheduled_time_ms: int
    started_time_ms: int
    timeout_ms: int
    new_events_while_started: bool = False  # a signal or result arrived: another task must follow this one
    transient: bool = field(default=False, metadata=EPHEMERAL)
    retry_at_ms: int | None = field(default=None, metadata=EPHEMERAL)  # a transient attempt waiting for backoff
    speculative: bool = field(default=False, metadata=EPHEMERAL)  # carries updates only: may leave no trace
    last_failure: Record | None = field(default=None, metadata=EPHEMERAL)  # why the previous attempt failed
    last_failure_cause: str = field(default="", metadata=EPHEMERAL)


@dataclass(slots=True)
class ActivityState:
    scheduled_event_id: int
    activity_id: str
    activity_type: str
    task_queue: str
    scheduled_time_ms: int
    schedule_to_close_timeout_ms: int | None
    schedule_to_start_timeout_ms: int | None
    start_to_close_timeout_ms: int
    heartbeat_timeout_ms: int | None
    retry_policy: Record | None
    cancel_requested: bool = False
    cancel_requested_event_id: int = 0
    # Attempt state: history records only the outcome of the last attempt.
    attempt: int = field(default=1, metadata=EPHEMERAL)
    current_attempt_scheduled_time_ms: int = field(default=0, metadata=EPHEMERAL)
    started_time_ms: int | None = field(default=None, metadata=EPHEMERAL)
    started_identity: str = field(default="", metadata=EPHEMERAL)
    last_heartbeat_time_ms: int | None = field(default=None, metadata=EPHEMERAL)
    heartbeat_details: Payloads = field(default_factory=list, metadata=EPHEMERAL)
    next_attempt_time_ms: int | None = field(default=None, metadata=EPHEMERAL)  # waiting for a retry backoff
    last_failure: Record | None = field(default=None, metadata=EPHEMERAL)


@dataclass(slots=True)
class TimerState:
    timer_id: str
    started_event_id: int
    fire_at_ms: int


@dataclass(slots=True)
class ChildState:
    initiated_event_id: int
    namespace: str
    workflow_id: str
    workflow_type: str
    parent_close_policy: str
    run_id: str = ""
    started_event_id: int = 0


@dataclass(slots=True)
class ExternalRequestState:
    """A signal or cancel this run sent to another workflow, waiting to hear whether it arrived."""

    initiated_event_id: int
    kind: str  # SIGNAL or CANCEL
    namespace: str
    workflow_id: str
    run_id: str


@dataclass(slots=True)
class UpdateState:
    """An update the workflow accepted: in progress until its outcome is written (`completed_event_id`)."""

    update_id: str
    accepted_event_id: int
    completed_event_id: int = 0


@dataclass(slots=True)
class RunState:
    """Everything needed to decide the next command for one run, without reading its history."""

    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    status: str
    start_time_ms: int
    execution_time_ms: int
    task_timeout_ms: int
    first_execution_run_id: str
    start_request_id: str = ""
    next_event_id: int = 1
    close_time_ms: int | None = None
    execution_expiration_time_ms: int | None = None
    run_expiration_time_ms: int | None = None
    retention_expiry_time_ms: int | None = None
    last_workflow_task_started_event_id: int = 0
    retry_policy: Record | None = None
    attempt: int = 1
    continued_from_run_id: str = ""
    parent: Record | None = None
    workflow_task: WorkflowTaskState | None = None
    activities: dict[int, ActivityState] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    children: dict[int, ChildState] = field(default_factory=dict)
    external_requests: dict[int, ExternalRequestState] = field(default_factory=dict)
    cancel_requested: bool = False
    cancel_reason: str = ""
    signal_count: int = 0
    search_attributes: PayloadMap = field(default_factory=dict)
    memo: PayloadMap = field(default_factory=dict)
    patches: list[str] = field(default_factory=list)
    recent_request_ids: list[str] = field(default_factory=list)
    archive_uri: str = field(default="", metadata=EPHEMERAL)  # learned after the close event, never in history
    # Commands whose processing failed, each an `ostinato.state.QuarantinedCommand` record (streams/quarantine.py).
    quarantine: list[Record] = field(default_factory=list, metadata=EPHEMERAL)
    updates: dict[str, UpdateState] = field(default_factory=dict)  # accepted, by update id
    # Updates received and not yet accepted or rejected (`ostinato.state.AdmittedUpdate` records, in arrival order):
    # out of history, since a rejected update must leave no event there.
    admitted_updates: list[Record] = field(default_factory=list, metadata=EPHEMERAL)
    rejected_updates: list[Record] = field(default_factory=list, metadata=EPHEMERAL)  # the newest, for their callers
    cron_schedule: str = ""
    # What another run of this chain starts with (a retry, the next cron run): kept only when the run has a retry
    # policy or a cron schedule, since the core never reads history and every other run would pay for the bytes.
    input: Payloads = field(default_factory=list)
    header: PayloadMap = field(default_factory=dict)
    last_completion_result: Payloads = field(default_factory=list)  # a cron chain's last successful result
    # Set by version 2 of the started applier only: a run started before kept no input, so it is never retried
    # (its retry policy was accepted and ignored then) rather than retried with empty input.
    keeps_chain_inputs: bool = False
    # The run a reset of this run created: set by the reset's decider, kept out of history as Temporal keeps it.
    reset_run_id: str = field(default="", metadata=EPHEMERAL)
    # Set on a schedule's own run only: an `ostinato.schedule.ScheduleInfo` record (streams/schedules).
    schedule: Record | None = None
    # Worker versioning (streams/versioning.py), set by version 2 of the WORKFLOW_TASK_COMPLETED applier: the behaviour
    # the last completing worker declared, the build a pinned run stays on, and the build that completed the last task.
    versioning_behavior: str = ""
    pinned_build: str = ""
    build_id: str = ""

    @property
    def open(self) -> bool:
        return self.status == "RUNNING"

    @property
    def history_length(self) -> int:
        return self.next_event_id - 1


@dataclass(slots=True)
class CurrentRun:
    """The current-run pointer of a workflow id: what id reuse and conflict policies decide on."""

    run_id: str
    status: str
    start_request_id: str
    first_execution_run_id: str
    start_time_ms: int
    close_time_ms: int | None = None


@dataclass(slots=True)
class Workflow:
    """One workflow id in one namespace: its runs (closed ones until retention) and the current-run pointer."""

    namespace: str
    workflow_id: str
    current: CurrentRun | None = None
    runs: dict[str, RunState] = field(default_factory=dict)

    def current_run(self) -> RunState | None:
        return self.runs.get(self.current.run_id) if self.current else None


# -- the Avro form ---------------------------------------------------------------------------------------------

_NESTED = {
    "workflow_task": WorkflowTaskState,
    "activities": ActivityState,
    "timers": TimerState,
    "children": ChildState,
    "external_requests": ExternalRequestState,
    "updates": UpdateState,
}
_KEYS = {"activities": "scheduled_event_id", "timers": "timer_id", "children": "initiated_event_id",
         "external_requests": "initiated_event_id", "updates": "update_id"}


_FieldPlan = tuple[tuple[str, bool, Any], ...]  # (name, ephemeral, default factory) per field
_PLANS: dict[type, _FieldPlan] = {}
_PLAINERS: dict[tuple[type, bool], Callable[[Any], Record]] = {}


def _plan(cls: type) -> _FieldPlan:
    """The fields of a state class, computed once: `dataclasses.fields` per record was a hot spot."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = tuple((f.name, bool(f.metadata.get("ephemeral")),
                      f.default_factory if f.default is MISSING else (lambda d=f.default: d))
                     for f in fields(cls))
        _PLANS[cls] = plan
    return plan


def _plainer(cls: type, durable_only: bool) -> Callable[[Any], Record]:
    """A function that copies an object of `cls` into a plain dict, generated once per class and view: a dict
    display over the fields builds a run's state (about 50 fields, at every step) in a third of the time of
    `dict(zip(names, attrgetter(*names)(obj)))`. An ephemeral field in the durable view gets its default."""
    found = _PLAINERS.get((cls, durable_only))
    if found is None:
        scope: dict[str, Any] = {}
        items = []
        for i, (name, ephemeral, default) in enumerate(_plan(cls)):
            assert name.isidentifier(), name  # dataclass fields are: nothing else reaches the generated source
            if durable_only and ephemeral:
                scope[f"_default{i}"] = default
                items.append(f"{name!r}: _default{i}()")
            else:
                items.append(f"{name!r}: obj.{name}")
        exec(f"def plain(obj):\n    return {{{', '.join(items)}}}\n", scope)  # source made of field names only
        found = _PLAINERS[(cls, durable_only)] = scope["plain"]
    return found


def _plain(obj: Any, durable_only: bool) -> Record:
    return _plainer(type(obj), durable_only)(obj)


def to_record(run: RunState, durable_only: bool = False) -> Record:
    """The run as an `ostinato.state.MutableState` record (collections sorted, so equal states encode equally)."""
    rec = _plain(run, durable_only)
    task = run.workflow_task
    # A transient task attempt has no events in history yet: replay cannot know it, so it is not durable.
    hidden = task is None or (durable_only and task.transient)
    rec["workflow_task"] = None if hidden else _plain(task, durable_only)
    for name, key in _KEYS.items():
        items = rec[name]  # the run's own dict, by key: most are empty
        rec[name] = sorted((_plain(i, durable_only) for i in items.values()), key=operator.itemgetter(key)) \
            if items else []
    return rec


def from_record(rec: Record) -> RunState:
    values = dict(rec)
    wt = values.pop("workflow_task")
    collections = {name: values.pop(name) for name in _KEYS}
    run = RunState(**values)
    run.workflow_task = None if wt is None else WorkflowTaskState(**wt)
    for name, key in _KEYS.items():
        cls = _NESTED[name]
        setattr(run, name, {item[key]: cls(**item) for item in collections[name]})
    return run




def encode_run(run: RunState) -> bytes:
    return codec.encode(wire.MUTABLE_STATE, to_record(run))


def durable_bytes(run: RunState) -> bytes:
    """The durable view, encoded: what a replay of the run's history must reproduce byte for byte."""
    return codec.encode(wire.MUTABLE_STATE, to_record(run, durable_only=True))


def decode_run(data: bytes) -> RunState:
    name, rec = codec.decode(data)
    if name != wire.MUTABLE_STATE:
        raise codec.DecodeError(f"expected {wire.MUTABLE_STATE}, found {name}")
    return from_record(rec)


def encode_current(current: CurrentRun) -> bytes:
    return codec.encode(wire.CURRENT_RUN, _plain(current, durable_only=False))


def decode_current(data: bytes) -> CurrentRun:
    name, rec = codec.decode(data)
    if name != wire.CURRENT_RUN:
        raise codec.DecodeError(f"expected {wire.CURRENT_RUN}, found {name}")
    return CurrentRun(**rec)
