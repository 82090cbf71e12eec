"""Schedules with temporalio's names and shapes: `Schedule`, its spec, action, policy and state, and the handle
that describes, pauses, triggers, backfills, updates and deletes one.

A schedule is engine state (`streams/schedules`): each is a run of workflow id `ostinato-schedule:<id>` on the shard
that id hashes to, driven by commands (CreateSchedule, UpdateSchedule, PatchSchedule, DeleteSchedule) and by its own
timer. This module only turns these classes into those commands' records and the run's state back into them.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any, Protocol

from ostinato.schemas.wire import REJECTED, command_type
from ostinato.sdk import _definitions as defs
from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import ClientTransport
from ostinato.sdk.common import RetryPolicy, to_ms
from ostinato.sdk.data import DataConverter
from ostinato.sdk.search_attributes import to_payloads
from ostinato.streams.schedules import schedule_id_of, schedule_workflow_id
from ostinato.streams.schedules.timing import upcoming


class Client(Protocol):
    """What schedules need of `ostinato.client.Client` (which sits above this module)."""

    service: ClientTransport
    namespace: str
    data_converter: DataConverter
    identity: str

__all__ = [
    "Schedule", "ScheduleActionExecutionStartWorkflow", "ScheduleActionResult", "ScheduleActionStartWorkflow",
    "ScheduleAsyncIterator", "ScheduleBackfill", "ScheduleCalendarSpec", "ScheduleDescription", "ScheduleHandle",
    "ScheduleInfo", "ScheduleIntervalSpec", "ScheduleListDescription", "ScheduleOverlapPolicy", "SchedulePolicy",
    "ScheduleRange", "ScheduleSpec", "ScheduleState", "ScheduleUpdate", "ScheduleUpdateInput",
]

Record = dict[str, Any]
_NO_ARG = object()  # an action started without an argument (None is an argument)


def _ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _td(ms: int | None) -> timedelta | None:
    return None if ms is None else timedelta(milliseconds=ms)


class ScheduleOverlapPolicy(IntEnum):
    """What an action does while one the schedule started still runs (Temporal's values)."""

    SKIP = 1
    BUFFER_ONE = 2
    BUFFER_ALL = 3
    CANCEL_OTHER = 4
    TERMINATE_OTHER = 5
    ALLOW_ALL = 6


@dataclass(frozen=True)
class ScheduleRange:
    """Values `start` to `end` (inclusive) every `step`; `end` below `start` means `start` alone."""

    start: int
    end: int = 0
    step: int = 0

    def _to_record(self) -> Record:
        return {"start": self.start, "end": self.end, "step": self.step}


@dataclass
class ScheduleCalendarSpec:
    """Wall-clock times matching every field (day of month and day of week both), in the spec's time zone."""

    second: Sequence[ScheduleRange] = (ScheduleRange(0),)
    minute: Sequence[ScheduleRange] = (ScheduleRange(0),)
    hour: Sequence[ScheduleRange] = (ScheduleRange(0),)
    day_of_month: Sequence[ScheduleRange] = (ScheduleRange(1, 31),)
    month: Sequence[ScheduleRange] = (ScheduleRange(1, 12),)
    year: Sequence[ScheduleRange] = ()
    day_of_week: Sequence[ScheduleRange] = (ScheduleRange(0, 6),)
    comment: str | None = None

    _FIELDS = ("second", "minute", "hour", "day_of_month", "month", "year", "day_of_week")

    def _to_record(self) -> Record:
        out: Record = {name: [r._to_record() for r in getattr(self, name)] for name in self._FIELDS}
        return {**out, "comment": self.comment or ""}

    @classmethod
    def _from_record(cls, rec: Record) -> ScheduleCalendarSpec:
        defaults = cls()
        values = {name: tuple(ScheduleRange(**r) for r in rec[name]) or getattr(defaults, name)
                  for name in cls._FIELDS}
        return cls(**values, comment=rec["comment"] or None)


@dataclass
class ScheduleIntervalSpec:
    """Every `every` since the Unix epoch, shifted by `offset`."""

    every: timedelta
    offset: timedelta | None = None


@dataclass
class ScheduleSpec:
    """When a schedule acts: calendars, cron expressions and intervals, minus `skip`, between `start_at` and
    `end_at`, each action delayed by up to `jitter` (the same delay every time for a given time)."""

    calendars: Sequence[ScheduleCalendarSpec] = ()
    intervals: Sequence[ScheduleIntervalSpec] = ()
    cron_expressions: Sequence[str] = ()
    skip: Sequence[ScheduleCalendarSpec] = ()
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter: timedelta | None = None
    time_zone_name: str | None = None

    def _to_record(self) -> Record:
        return {
            "calendars": [c._to_record() for c in self.calendars],
            "intervals": [{"every_ms": to_ms(i.every), "offset_ms": to_ms(i.offset) or 0} for i in self.intervals],
            "cron_expressions": list(self.cron_expressions), "skip": [c._to_record() for c in self.skip],
            "start_at_ms": None if self.start_at is None else _ms(self.start_at),
            "end_at_ms": None if self.end_at is None else _ms(self.end_at),
            "jitter_ms": to_ms(self.jitter) or 0, "time_zone_name": self.time_zone_name or ""}

    @classmethod
    def _from_record(cls, rec: Record) -> ScheduleSpec:
        return cls(
            calendars=[ScheduleCalendarSpec._from_record(c) for c in rec["calendars"]],
            intervals=[ScheduleIntervalSpec(timedelta(milliseconds=i["every_ms"]), _td(i["offset_ms"] or None))
                       for i in rec["intervals"]],
            cron_expressions=list(rec["cron_expressions"]),
            skip=[ScheduleCalendarSpec._from_record(c) for c in rec["skip"]],
            start_at=None if rec["start_at_ms"] is None else _dt(rec["start_at_ms"]),
            end_at=None if rec["end_at_ms"] is None else _dt(rec["end_at_ms"]),
            jitter=_td(rec["jitter_ms"] or None), time_zone_name=rec["time_zone_name"] or None)


class ScheduleActionStartWorkflow:
    """Start a workflow at each action, as workflow id `id` + "-" + the action's time (RFC 3339, UTC)."""

    def __init__(self, workflow: type | Callable[..., Any] | str, arg: Any = _NO_ARG, *,
                 args: Sequence[Any] = (), id: str, task_queue: str, execution_timeout: timedelta | None = None,
                 run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
                 retry_policy: RetryPolicy | None = None, memo: Mapping[str, Any] | None = None,
                 search_attributes: Mapping[str, Any] | None = None) -> None:
        self.workflow = workflow if isinstance(workflow, str) else defs.definition_of(workflow).name
        self.args: list[Any] = list(args) if arg is _NO_ARG else [arg, *args]
        self.id = id
        self.task_queue = task_queue
        self.execution_timeout = execution_timeout
        self.run_timeout = run_timeout
        self.task_timeout = task_timeout
        self.retry_policy = retry_policy
        self.memo = dict(memo or {})
        self.search_attributes = dict(search_attributes or {})
        self._raw: Record | None = None  # the payloads as read back: kept as they are unless args change

    def __repr__(self) -> str:
        return f"ScheduleActionStartWorkflow({self.workflow!r}, id={self.id!r}, task_queue={self.task_queue!r})"

    def _to_record(self, client: Client) -> Record:
        encode = client.data_converter.encode
        raw = self._raw
        return {
            "workflow_id": self.id, "workflow_type": self.workflow, "task_queue": self.task_queue,
            "input": raw["input"] if raw is not None and raw["args"] == self.args else encode(list(self.args)),
            "execution_timeout_ms": to_ms(self.execution_timeout), "run_timeout_ms": to_ms(self.run_timeout),
            "task_timeout_ms": to_ms(self.task_timeout) or 10_000,
            "retry_policy": None if self.retry_policy is None else self.retry_policy.to_record(),
            "memo": {k: encode([v])[0] for k, v in self.memo.items()},
            "search_attributes": to_payloads(self.search_attributes or None, lambda v: encode([v])[0], stacklevel=4),
            "header": {}}

    @classmethod
    def _from_record(cls, client: Client, rec: Record) -> ScheduleActionStartWorkflow:
        converter = client.data_converter
        args = converter.decode(rec["input"])
        action = cls(rec["workflow_type"], args=args, id=rec["workflow_id"], task_queue=rec["task_queue"],
                     execution_timeout=_td(rec["execution_timeout_ms"]), run_timeout=_td(rec["run_timeout_ms"]),
                     task_timeout=_td(rec["task_timeout_ms"]),
                     retry_policy=RetryPolicy.from_record(rec["retry_policy"]),
                     memo={k: converter.decode([v])[0] for k, v in rec["memo"].items()})
        action._raw = {"input": rec["input"], "args": list(args)}
        return action


_OVERLAP_NAMES = {p: p.name for p in ScheduleOverlapPolicy}


def _overlap_name(policy: ScheduleOverlapPolicy | None) -> str:
    return "UNSPECIFIED" if policy is None else _OVERLAP_NAMES[ScheduleOverlapPolicy(policy)]


@dataclass
class SchedulePolicy:
    overlap: ScheduleOverlapPolicy = ScheduleOverlapPolicy.SKIP
    catchup_window: timedelta = timedelta(days=365)
    pause_on_failure: bool = False


@dataclass
class ScheduleState:
    note: str | None = None
    paused: bool = False
    limited_actions: bool = False
    remaining_actions: int = 0


@dataclass
class Schedule:
    """What a schedule starts (`action`), when (`spec`), how (`policy`), and whether it is paused (`state`)."""

    action: ScheduleActionStartWorkflow
    spec: ScheduleSpec
    policy: SchedulePolicy = field(default_factory=SchedulePolicy)
    state: ScheduleState = field(default_factory=ScheduleState)

    def _to_record(self, client: Client) -> Record:
        return {
            "spec": self.spec._to_record(), "action": self.action._to_record(client),
            "policy": {"overlap": _overlap_name(self.policy.overlap),
                       "catchup_window_ms": to_ms(self.policy.catchup_window) or 0,
                       "pause_on_failure": self.policy.pause_on_failure},
            "state": {"note": self.state.note or "", "paused": self.state.paused,
                      "limited_actions": self.state.limited_actions,
                      "remaining_actions": self.state.remaining_actions}}

    @classmethod
    async def _from_record(cls, client: Client, rec: Record) -> Schedule:
        policy, state = rec["policy"], rec["state"]
        overlap = policy["overlap"]
        return cls(
            action=ScheduleActionStartWorkflow._from_record(client, rec["action"]),
            spec=ScheduleSpec._from_record(rec["spec"]),
            policy=SchedulePolicy(ScheduleOverlapPolicy.SKIP if overlap == "UNSPECIFIED"
                                  else ScheduleOverlapPolicy[overlap],
                                  timedelta(milliseconds=policy["catchup_window_ms"]), policy["pause_on_failure"]),
            state=ScheduleState(state["note"] or None, state["paused"], state["limited_actions"],
                                state["remaining_actions"]))


@dataclass
class ScheduleBackfill:
    """Take every action the spec names from `start_at` to `end_at` (both included) now."""

    start_at: datetime
    end_at: datetime
    overlap: ScheduleOverlapPolicy | None = None

    def _to_record(self) -> Record:
        return {"start_at_ms": _ms(self.start_at), "end_at_ms": _ms(self.end_at),
                "overlap": _overlap_name(self.overlap)}


@dataclass(frozen=True)
class ScheduleActionExecutionStartWorkflow:
    workflow_id: str
    first_execution_run_id: str


@dataclass(frozen=True)
class ScheduleActionResult:
    scheduled_at: datetime
    started_at: datetime
    action: ScheduleActionExecutionStartWorkflow
    status: str  # RUNNING, a close status (COMPLETED, FAILED...) or START_FAILED: an Ostinato addition

    @classmethod
    def _from_record(cls, rec: Record) -> ScheduleActionResult:
        return cls(_dt(rec["schedule_time_ms"]), _dt(rec["actual_time_ms"]),
                   ScheduleActionExecutionStartWorkflow(rec["workflow_id"], rec["run_id"]), rec["status"])


@dataclass(frozen=True)
class ScheduleInfo:
    num_actions: int
    num_actions_missed_catchup_window: int
    num_actions_skipped_overlap: int
    running_actions: Sequence[ScheduleActionExecutionStartWorkflow]
    recent_actions: Sequence[ScheduleActionResult]
    next_action_times: Sequence[datetime]
    created_at: datetime
    last_updated_at: datetime | None
    buffered_actions: int  # an Ostinato addition: actions waiting for a running one to close


@dataclass(frozen=True)
class ScheduleDescription:
    id: str
    schedule: Schedule
    info: ScheduleInfo
    raw: Record  # the schedule's `ostinato.schedule.ScheduleInfo` record


@dataclass(frozen=True)
class ScheduleListDescription:
    id: str
    schedule: Schedule
    info: ScheduleInfo


@dataclass
class ScheduleUpdateInput:
    description: ScheduleDescription


@dataclass
class ScheduleUpdate:
    schedule: Schedule


async def _describe(client: Client, schedule_id: str, now_ms: int) -> ScheduleDescription:
    state = await client.service.describe(client.namespace, schedule_workflow_id(schedule_id), "")
    info = None if state is None or state["status"] != "RUNNING" else state.get("schedule")
    if info is None:
        raise exc.RPCError(f"no schedule {schedule_id!r}", code="NOT_FOUND", status=404)
    progress = info["progress"]
    return ScheduleDescription(schedule_id, await Schedule._from_record(client, info["definition"]), ScheduleInfo(
        num_actions=progress["num_actions"],
        num_actions_missed_catchup_window=progress["num_actions_missed_catchup_window"],
        num_actions_skipped_overlap=progress["num_actions_skipped_overlap"],
        running_actions=[ScheduleActionExecutionStartWorkflow(a["workflow_id"], a["run_id"])
                         for a in progress["running"]],
        recent_actions=[ScheduleActionResult._from_record(a) for a in progress["recent_actions"]],
        next_action_times=[_dt(t) for t in upcoming(info, now_ms)], created_at=_dt(info["created_time_ms"]),
        last_updated_at=None if info["updated_time_ms"] is None else _dt(info["updated_time_ms"]),
        buffered_actions=len(progress["buffered"])), info)


async def _send(client: Client, schedule_id: str, name: str, body: Record) -> None:
    reply_type, record = await client.service.send(client.namespace, schedule_workflow_id(schedule_id), "",
                                                   (command_type(name), body), uuid.uuid4().hex, client.identity)
    if reply_type == REJECTED:
        code = record["code"]
        if code == "ALREADY_STARTED":
            raise exc.ScheduleAlreadyRunningError(record["message"])
        raise exc.RPCError(record["message"], code=code, status=404 if code == "NOT_FOUND" else 400)


async def create_schedule(client: Client, schedule_id: str, schedule: Schedule, *, trigger_immediately: bool,
                          backfill: Sequence[ScheduleBackfill]) -> ScheduleHandle:
    await _send(client, schedule_id, "CreateSchedule", {
        "schedule_id": schedule_id, "schedule": schedule._to_record(client),
        "trigger_immediately": trigger_immediately, "backfill": [b._to_record() for b in backfill]})
    return ScheduleHandle(client, schedule_id)


class ScheduleHandle:
    """A schedule by id (it need not exist: calls on a missing one raise RPCError NOT_FOUND)."""

    def __init__(self, client: Client, id: str) -> None:
        self._client = client
        self.id = id

    async def describe(self) -> ScheduleDescription:
        """The schedule, its counts, recent (last 10) and running actions, and its next 10 action times."""
        return await _describe(self._client, self.id, await self._client.service.now_ms())

    async def pause(self, *, note: str | None = None) -> None:
        await _send(self._client, self.id, "PatchSchedule", _patch(pause=note or "Paused via Python SDK"))

    async def unpause(self, *, note: str | None = None) -> None:
        await _send(self._client, self.id, "PatchSchedule", _patch(unpause=note or "Unpaused via Python SDK"))

    async def trigger(self, *, overlap: ScheduleOverlapPolicy | None = None) -> None:
        """Take an action now (it does not count against limited actions)."""
        await _send(self._client, self.id, "PatchSchedule",
                    _patch(trigger_immediately=_overlap_name(overlap)))

    async def backfill(self, *backfill: ScheduleBackfill) -> None:
        """Take, now, every action the spec names in each range (they do not count against limited actions)."""
        if not backfill:
            raise ValueError("at least one backfill is required")
        await _send(self._client, self.id, "PatchSchedule", _patch(backfill=[b._to_record() for b in backfill]))

    async def update(self, updater: Callable[[ScheduleUpdateInput],
                                             ScheduleUpdate | Awaitable[ScheduleUpdate | None] | None]) -> None:
        """Replace the schedule with what `updater` returns from its description (None: leave it as it is).
        Its progress (counts, running and recent actions) stays; its spec applies from now."""
        found = updater(ScheduleUpdateInput(await self.describe()))
        update = await found if inspect.isawaitable(found) else found
        if update is not None:
            await _send(self._client, self.id, "UpdateSchedule", {"schedule": update.schedule._to_record(self._client)})

    async def delete(self) -> None:
        """Delete the schedule: no more actions; the runs it started go on."""
        await _send(self._client, self.id, "DeleteSchedule", {"reason": "schedule deleted"})


def _patch(pause: str | None = None, unpause: str | None = None, trigger_immediately: str | None = None,
           backfill: list[Record] | None = None) -> Record:
    return {"pause": pause, "unpause": unpause, "trigger_immediately": trigger_immediately,
            "backfill": backfill or []}


class ScheduleAsyncIterator:
    """The schedules of the namespace (`async for s in await client.list_schedules()`), as temporalio's."""

    def __init__(self, client: Client, query: str | None) -> None:
        self._client = client
        self._query = query
        self._ids: list[str] | None = None

    def __aiter__(self) -> AsyncIterator[ScheduleListDescription]:
        return self._items()

    async def _items(self) -> AsyncIterator[ScheduleListDescription]:
        client = self._client
        now = await client.service.now_ms()
        for workflow_id in await client.service.list_schedule_workflows(client.namespace, self._query or ""):
            schedule_id = schedule_id_of(workflow_id)
            if schedule_id is None:
                continue
            try:
                found = await _describe(client, schedule_id, now)
            except exc.RPCError as e:
                if e.code != "NOT_FOUND":
                    raise
                continue  # deleted since it was listed
            yield ScheduleListDescription(found.id, found.schedule, found.info)

