"""The records built from the core's actions (tasks, visibility, replies), from a run's state and history; used
by the one interpreter of actions, `streams.perform`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.actions import DispatchActivityTask, DispatchQueryTask, DispatchWorkflowTask, Reply
from ostinato.streams.config import Config
from ostinato.streams.deciders.common import transient_task_events
from ostinato.streams.model import RunState

Record = dict[str, Any]

class HistorySequence(Sequence[Record]):
    """A run's history as the task builders index it (event n at n - 1): subclasses say how long it is and how
    to read one event; slices and negative indexes are handled once, here."""

    def __len__(self) -> int:
        raise NotImplementedError

    def event_at(self, index: int) -> Record:
        """The event at 0 <= index < len(self)."""
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self.event_at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.event_at(index)


WORKFLOW_TASK = wire.WORKFLOW_TASK
ACTIVITY_TASK = wire.ACTIVITY_TASK
QUERY_TASK = wire.QUERY_TASK
VISIBILITY = wire.VISIBILITY
REPLY = wire.REPLY


def workflow_task(run: RunState, action: DispatchWorkflowTask, history: Sequence[Record], config: Config,
                  ) -> Record | None:
    """The WorkflowTask record for `action`, or None when the task it names is no longer the run's.

    `history` is the run's history, event `n` at index `n - 1`. A transient attempt's scheduled/started events
    are not in history (so a workflow stuck on broken code does not grow it); they are synthesised here under
    the ids the core reserved, and written for real only if the attempt completes.
    """
    if action.transient:
        return _transient_task(run, action, history, config)
    if len(history) < action.started_event_id:
        return None
    scheduled = history[action.scheduled_event_id - 1]
    started = history[action.started_event_id - 1]
    started_attrs = ev.attributes(started)
    return _task_record(run, action, history[action.previous_started_event_id:action.started_event_id],
                        history_length=started_attrs["history_length"],
                        suggest=started_attrs["suggest_continue_as_new"], scheduled_time_ms=scheduled["event_time_ms"],
                        deadline_ms=started["event_time_ms"]
                        + ev.attributes(scheduled)["start_to_close_timeout_ms"])


def _transient_task(run: RunState, action: DispatchWorkflowTask, history: Sequence[Record], config: Config,
                    ) -> Record | None:
    task = run.workflow_task
    if (task is None or not task.transient or task.scheduled_event_id != action.scheduled_event_id
            or task.attempt != action.attempt):
        return None  # superseded within the same command: an event took the reserved ids
    scheduled, started = transient_task_events(run, config)
    length = task.started_event_id
    suggest = ev.attributes(started)["suggest_continue_as_new"]
    events = [*history[action.previous_started_event_id:task.scheduled_event_id - 1], scheduled, started]
    return _task_record(run, action, events, history_length=length, suggest=suggest,
                        scheduled_time_ms=task.scheduled_time_ms, deadline_ms=task.started_time_ms + task.timeout_ms)


def _task_record(run: RunState, action: DispatchWorkflowTask, events: Sequence[Record], *, history_length: int,
                 suggest: bool, scheduled_time_ms: int, deadline_ms: int) -> Record:
    return {
        "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "task_queue": action.task_queue,
        "scheduled_event_id": action.scheduled_event_id, "started_event_id": action.started_event_id,
        "attempt": action.attempt, "previous_started_event_id": action.previous_started_event_id,
        "events": list(events), "history_length": history_length, "suggest_continue_as_new": suggest,
        "scheduled_time_ms": scheduled_time_ms, "deadline_ms": deadline_ms, "events_omitted": False,
    }


def without_events(task: Record, transient: bool) -> Record:
    """The WorkflowTask record without the events history has (`events_omitted`), for when they would make it larger
    than a record may be. A transient attempt keeps its scheduled/started events: they are not in history (they are
    small, and written only if the attempt completes), and the worker's fetched history ends just before them."""
    return {**task, "events": task["events"][-2:] if transient else [], "events_omitted": True}


def activity_task(run: RunState, action: DispatchActivityTask, history: Sequence[Record]) -> Record | None:
    """The ActivityTask record for `action`: input and header from the scheduled event, attempt state from the
    run. None when that attempt is no longer pending (canceled or timed out within the same command)."""
    activity = run.activities.get(action.scheduled_event_id)
    if activity is None or activity.attempt != action.attempt or activity.next_attempt_time_ms is not None:
        return None
    scheduled = ev.attributes(history[action.scheduled_event_id - 1])
    return {
        "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "activity_id": activity.activity_id,
        "activity_type": activity.activity_type, "task_queue": activity.task_queue,
        "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt,
        "input": scheduled["input"], "header": scheduled["header"], "heartbeat_details": activity.heartbeat_details,
        "scheduled_time_ms": activity.scheduled_time_ms,
        "current_attempt_scheduled_time_ms": activity.current_attempt_scheduled_time_ms,
        "start_to_close_timeout_ms": activity.start_to_close_timeout_ms,
        "schedule_to_close_timeout_ms": activity.schedule_to_close_timeout_ms,
        "heartbeat_timeout_ms": activity.heartbeat_timeout_ms, "retry_policy": activity.retry_policy,
    }


def query_task(run: RunState, action: DispatchQueryTask) -> Record:
    """The QueryTask record: it travels beside workflow tasks so the worker caching the workflow answers."""
    query = action.query
    return {
        "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "task_queue": action.task_queue, "request_id": action.request_id,
        "reply_partition": action.reply_partition, "query_type": query["query_type"],
        "query_args": query["query_args"], "header": query["header"], "history_length": run.history_length,
        "deadline_ms": query["deadline_ms"],
    }


def visibility_record(run: RunState, history_size_bytes: int) -> Record:
    """The searchable summary of a run; `version` is the last event it reflects, so a late one never wins."""
    parent = run.parent
    return {
        "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "task_queue": run.task_queue, "status": run.status,
        "start_time_ms": run.start_time_ms, "execution_time_ms": run.execution_time_ms,
        "close_time_ms": run.close_time_ms, "history_length": run.history_length,
        "history_size_bytes": history_size_bytes, "memo": run.memo, "search_attributes": run.search_attributes,
        "parent": None if parent is None else {"workflow_id": parent["workflow_id"], "run_id": parent["run_id"]},
        "first_execution_run_id": run.first_execution_run_id, "version": run.history_length,
    }


def reply_record(action: Reply) -> Record:
    return wire.reply(action.request_id, action.namespace, action.workflow_id, action.body)
