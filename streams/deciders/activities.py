"""Deciders of what activity workers report: started, heartbeat, completed, failed, canceled."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.deadlines import after
from ostinato.streams.deciders.common import task_run, wake
from ostinato.streams.model import ActivityState
from ostinato.streams.retry import decide_retry
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]


def _current_attempt(w: Writer, body: Record) -> ActivityState | Step:
    """The activity attempt this report is about, or the rejection of a stale or duplicate report."""
    run = task_run(w)
    if run is None:
        return w.reject("NOT_FOUND", f"no run {w.command['run_id']!r} of workflow {w.workflow.workflow_id}")
    activity = run.activities.get(body["scheduled_event_id"]) if run.open else None
    if activity is None or activity.attempt != body["attempt"] or activity.next_attempt_time_ms is not None:
        return w.reject("STALE_TASK", f"activity {body['scheduled_event_id']} attempt {body['attempt']} of run "
                                      f"{run.run_id} is not pending")
    return activity


def started(w: Writer, body: Record) -> Step:
    found = _current_attempt(w, body)
    if isinstance(found, Step):
        return found
    identity = w.command["identity"]
    if found.started_time_ms is not None:
        if found.started_identity != identity:  # redelivered to a second worker: one of them runs it
            return w.reject("STALE_TASK", f"attempt {found.attempt} already started by {found.started_identity!r}")
    else:
        activity = w.edit(w.command["run_id"]).activities[found.scheduled_event_id]
        activity.started_time_ms = w.now_ms
        activity.started_identity = identity
    w.accept(w.command["run_id"], cancel_requested=found.cancel_requested)
    return w.step


def heartbeat(w: Writer, body: Record) -> Step:
    found = _current_attempt(w, body)
    if isinstance(found, Step):
        return found
    activity = w.edit(w.command["run_id"]).activities[found.scheduled_event_id]
    if activity.started_time_ms is None:  # the started report may still be on its way: a heartbeat implies it
        activity.started_time_ms = w.now_ms
        activity.started_identity = w.command["identity"]
    activity.last_heartbeat_time_ms = w.now_ms
    activity.heartbeat_details = body["details"]
    w.accept(w.command["run_id"], cancel_requested=activity.cancel_requested)
    return w.step


def completed(w: Writer, body: Record) -> Step:
    found = _current_attempt(w, body)
    if isinstance(found, Step):
        return found
    finish(w, found, ev.ACTIVITY_TASK_COMPLETED, {"result": body["result"], "identity": w.command["identity"]})
    w.accept(w.command["run_id"])
    return w.step


def failed(w: Writer, body: Record) -> Step:
    found = _current_attempt(w, body)
    if isinstance(found, Step):
        return found
    failure = body["failure"]
    if not failure["last_heartbeat_details"] and found.heartbeat_details:
        failure = {**failure, "last_heartbeat_details": found.heartbeat_details}
    if not retry(w, found, failure):
        finish(w, found, ev.ACTIVITY_TASK_FAILED, {"failure": failure, "identity": w.command["identity"],
                                                   "retry_state": _last_retry_state(w, found, failure)})
    w.accept(w.command["run_id"])
    return w.step


def canceled(w: Writer, body: Record) -> Step:
    found = _current_attempt(w, body)
    if isinstance(found, Step):
        return found
    if not found.cancel_requested:
        return w.reject("INVALID_ARGUMENT", f"activity {found.activity_id} was not asked to cancel")
    finish(w, found, ev.ACTIVITY_TASK_CANCELED, {"details": body["details"], "identity": w.command["identity"],
                                                 "latest_cancel_requested_event_id": found.cancel_requested_event_id})
    w.accept(w.command["run_id"])
    return w.step


def _deadline(activity: ActivityState) -> int | None:
    s2c = activity.schedule_to_close_timeout_ms
    return None if s2c is None else activity.scheduled_time_ms + s2c


def retry(w: Writer, activity: ActivityState, failure: Record) -> bool:
    """Schedule the next attempt if the policy allows; the attempt state changes, history does not."""
    if activity.cancel_requested:
        return False
    decision = decide_retry(activity.retry_policy, activity.attempt, failure, w.now_ms, _deadline(activity))
    if decision.retry_state != "IN_PROGRESS":
        return False
    run_id = w.command["run_id"]
    a = w.edit(run_id).activities[activity.scheduled_event_id]
    a.attempt += 1
    a.next_attempt_time_ms = after(w.now_ms, decision.delay_ms)
    a.started_time_ms = None
    a.started_identity = ""
    a.last_heartbeat_time_ms = None
    a.last_failure = failure
    return True


def _last_retry_state(w: Writer, activity: ActivityState, failure: Record) -> str:
    if activity.cancel_requested:
        return "CANCEL_REQUESTED"
    return decide_retry(activity.retry_policy, activity.attempt, failure, w.now_ms, _deadline(activity)).retry_state


def finish(w: Writer, activity: ActivityState, event_type: str, attrs: Record, run_id: str | None = None) -> None:
    """End an activity: its last attempt's started event (when it started), then the outcome, then wake the run."""
    run_id = run_id or w.command["run_id"]
    started_id = 0
    if activity.started_time_ms is not None or event_type != ev.ACTIVITY_TASK_TIMED_OUT:
        started = w.append(run_id, ev.ACTIVITY_TASK_STARTED, {
            "scheduled_event_id": activity.scheduled_event_id, "identity": activity.started_identity,
            "attempt": activity.attempt, "last_failure": activity.last_failure})
        started_id = started["event_id"]
    w.append(run_id, event_type, {**attrs, "scheduled_event_id": activity.scheduled_event_id,
                                  "started_event_id": started_id})
    wake(w, run_id)
