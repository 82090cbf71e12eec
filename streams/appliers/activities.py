"""Appliers of activities. Only the last attempt's outcome is in history; retries are attempt state."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.appliers._common import note_new_event
from ostinato.streams.lifecycle import ACTIVITY
from ostinato.streams.model import ActivityState, Workflow

Record = dict[str, Any]


def _state(activity: ActivityState | None) -> str:
    if activity is None:
        return "NONE"
    return "CANCEL_REQUESTED" if activity.cancel_requested else "SCHEDULED"


@applier(ev.ACTIVITY_TASK_SCHEDULED)
def scheduled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    ACTIVITY.check(_state(run.activities.get(event["event_id"])), "SCHEDULED")
    now = event["event_time_ms"]
    run.activities[event["event_id"]] = ActivityState(
        scheduled_event_id=event["event_id"], activity_id=attrs["activity_id"], activity_type=attrs["activity_type"],
        task_queue=attrs["task_queue"], scheduled_time_ms=now,
        schedule_to_close_timeout_ms=attrs["schedule_to_close_timeout_ms"],
        schedule_to_start_timeout_ms=attrs["schedule_to_start_timeout_ms"],
        start_to_close_timeout_ms=attrs["start_to_close_timeout_ms"],
        heartbeat_timeout_ms=attrs["heartbeat_timeout_ms"], retry_policy=attrs["retry_policy"],
        current_attempt_scheduled_time_ms=now,
    )


@applier(ev.ACTIVITY_TASK_STARTED)
def started(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    """Written just before the outcome of the attempt that ends the activity: it records, it changes nothing."""


def _finish(wf: Workflow, run_id: str, scheduled_event_id: int) -> None:
    run = wf.runs[run_id]
    activity = run.activities.get(scheduled_event_id)
    ACTIVITY.check(_state(activity), "NONE")
    del run.activities[scheduled_event_id]
    note_new_event(run)


@applier(ev.ACTIVITY_TASK_COMPLETED)
def completed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id, attrs["scheduled_event_id"])


@applier(ev.ACTIVITY_TASK_FAILED)
def failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id, attrs["scheduled_event_id"])


@applier(ev.ACTIVITY_TASK_TIMED_OUT)
def timed_out(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id, attrs["scheduled_event_id"])


@applier(ev.ACTIVITY_TASK_CANCELED)
def canceled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id, attrs["scheduled_event_id"])


@applier(ev.ACTIVITY_TASK_CANCEL_REQUESTED)
def cancel_requested(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    activity = wf.runs[run_id].activities.get(attrs["scheduled_event_id"])
    ACTIVITY.check(_state(activity), "CANCEL_REQUESTED")
    assert activity is not None
    activity.cancel_requested = True
    activity.cancel_requested_event_id = event["event_id"]
