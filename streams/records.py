"""The records built from the core's actions (tasks, visibility, replies), from a run's state and history; used
by the one interpreter of actions, `streams.perform`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, overload

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.actions import DispatchActivityTask, DispatchQueryTask, DispatchWorkflowTask, Reply
from ostinato.streams.config import Config
from ostinato.streams.deciders.common import started_event, transient_task_events
from ostinato.streams.model import RunState
from ostinato.streams.routing import run_build_ids

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

    `history` is the run's history, event `n` at index `n - 1`. The task's STARTED is not in history: it is
    written with the worker's answer (a transient attempt's SCHEDULED too, so a workflow stuck on broken code does
    not grow its history), so the record carries it synthesised under the id the core reserved. The events are
    those after what the worker saw last, the SCHEDULED of the run's previous task: a worker that cached the run
    gets what arrived since, the previous task's STARTED and answer among them.
    """
    task = run.workflow_task
    if (task is None or task.transient != action.transient or task.scheduled_event_id != action.scheduled_event_id
            or task.attempt != action.attempt or task.started_event_id != action.started_event_id):
        return None  # superseded within the same command: an event took the reserved ids, or the run closed
    if not action.transient and (task.started_time_ms or len(history) < task.scheduled_event_id):
        return None  # a task already answered (its start is in history), or history does not reach it yet
    seen = seen_through(history, action.previous_started_event_id)
    started = started_event(task, config)
    if action.transient:
        scheduled, _ = transient_task_events(run, config)
        events = [*history[seen:task.scheduled_event_id - 1], scheduled, started]
    else:
        events = [*history[seen:task.scheduled_event_id], started]
    started_attrs = ev.attributes(started)
    return {
        "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "task_queue": action.task_queue,
        "scheduled_event_id": action.scheduled_event_id, "started_event_id": action.started_event_id,
        "attempt": action.attempt, "previous_started_event_id": seen + 1 if action.previous_started_event_id else 0,
        "events": events, "history_length": started_attrs["history_length"],
        "suggest_continue_as_new": started_attrs["suggest_continue_as_new"],
        "scheduled_time_ms": task.scheduled_time_ms, "deadline_ms": started["event_time_ms"] + task.timeout_ms,
        "events_omitted": False,
        "updates": [{"update_id": u["update_id"], "name": u["name"], "input": u["input"], "header": u["header"]}
                    for u in run.admitted_updates if u["delivered_task"] == task.scheduled_event_id],
    }


def seen_through(history: Sequence[Record], previous_started_event_id: int) -> int:
    """The last event the run's previous workflow task showed its worker: that task's SCHEDULED (0 for none).

    A worker's cached copy of the run stopped there, with the task's STARTED as the task showed it, under the id
    SCHEDULED + 1; so `previous_started_event_id` of a record is that id, whatever id history gave the STARTED."""
    if not previous_started_event_id:
        return 0
    return int(ev.attributes(history[previous_started_event_id - 1])["scheduled_event_id"])


def without_events(task: Record, transient: bool) -> Record:
    """The WorkflowTask record without the events history has (`events_omitted`), for when they would make it larger
    than a record may be. It keeps the events history does not have: the task's STARTED, and a transient attempt's
    SCHEDULED (they are small); the worker's fetched history ends just before them."""
    return {**task, "events": task["events"][-2:] if transient else task["events"][-1:], "events_omitted": True}


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
        "history_size_bytes": history_size_bytes, "memo": run.memo, "search_attributes": _with_build_ids(run),
        "parent": None if parent is None else {"workflow_id": parent["workflow_id"], "run_id": parent["run_id"]},
        "first_execution_run_id": run.first_execution_run_id, "version": run.history_length,
    }


def _with_build_ids(run: RunState) -> Record:
    """The run's search attributes, plus the built-in `BuildIds` (a typed KeywordList, indexed by both visibility
    stores as any list attribute is) once a versioned worker answered it: drain visibility for operators."""
    ids = run_build_ids(run)
    if not ids:
        return run.search_attributes
    payload = {"metadata": {"encoding": b"json/plain", "type": b"KeywordList"},
               "data": json.dumps(ids, separators=(",", ":")).encode()}
    return {**run.search_attributes, "BuildIds": payload}


def reply_record(action: Reply) -> Record:
    return wire.reply(action.request_id, action.namespace, action.workflow_id, action.body)
