"""Side effects as data. The core returns them; the Kafka shell performs them inside the same transaction as
the events, and replay ignores them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DispatchWorkflowTask:
    """Produce a WorkflowTask record; the shell adds the events since `previous_started_event_id`."""

    namespace: str
    workflow_id: str
    run_id: str
    task_queue: str
    scheduled_event_id: int
    started_event_id: int
    attempt: int
    previous_started_event_id: int
    transient: bool  # the scheduled/started events are not in history (the shell synthesises them for the task)


@dataclass(frozen=True, slots=True)
class DispatchActivityTask:
    """Produce an ActivityTask record; the shell reads input and header from the ActivityTaskScheduled event."""

    namespace: str
    workflow_id: str
    run_id: str
    scheduled_event_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class DispatchQueryTask:
    namespace: str
    workflow_id: str
    run_id: str
    task_queue: str
    request_id: str
    reply_partition: int
    query: Record  # the QueryWorkflow command body


@dataclass(frozen=True, slots=True)
class Publish:
    """Produce a record the workflow published (RECORD_PUBLISHED) to its topic, in this transaction."""

    namespace: str
    workflow_id: str
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class UpsertVisibility:
    namespace: str
    workflow_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class DeleteRun:
    """Remove a closed run from the stores and tombstone its history, state and visibility keys."""

    namespace: str
    workflow_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class Archive:
    namespace: str
    workflow_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class SendCommand:
    """A command for another workflow (perhaps on another shard): child starts, notifications, external calls."""

    command: Record  # a complete ostinato.command.Command envelope


@dataclass(frozen=True, slots=True)
class EagerActivity:
    """An activity attempt started for the worker that scheduled it: its task travels in the reply."""

    run_id: str
    scheduled_event_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Reply:
    request_id: str
    reply_partition: int
    namespace: str
    workflow_id: str
    body: tuple[str, Record]  # a branch of ostinato.reply.Reply.body
    # Eager activity dispatch: the shell builds these activities' tasks (from state and history, as for the task
    # topic) into the Accepted body's `activity_tasks`.
    eager_activities: tuple[EagerActivity, ...] = ()
    # Eager workflow task: the task an activity answer caused, built into the Accepted body's `workflow_task` for
    # the worker that caches the workflow, instead of the workflow task topic.
    eager_workflow_task: DispatchWorkflowTask | None = None


class Deadline(NamedTuple):
    """A moment the owner must act at; the shell keeps an index of these, ordered by time, and fires each once.

    A NamedTuple, not a frozen dataclass like the actions: every command derives its runs' deadlines twice (before
    and after) and diffs the two sets, and a tuple is built and hashed in C (a set of two: 0.93 µs against 2.84 µs
    for the frozen dataclass, timed alone; `bench/processor.py` is too noisy to show it)."""

    fire_at_ms: int
    kind: str  # a TimerKind symbol
    run_id: str
    timer_id: str = ""
    scheduled_event_id: int = 0
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    namespace: str
    workflow_id: str
    deadline: Deadline


@dataclass(frozen=True, slots=True)
class CancelTimer:
    namespace: str
    workflow_id: str
    deadline: Deadline


Action = (DispatchWorkflowTask | DispatchActivityTask | DispatchQueryTask | UpsertVisibility | DeleteRun | Archive
          | SendCommand | Reply | ScheduleTimer | CancelTimer | Publish)
