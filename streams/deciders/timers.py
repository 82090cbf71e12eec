"""The FireTimer decider: every deadline of a run comes due here, inside the owner's transaction."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.actions import Deadline, DeleteRun, DispatchActivityTask
from ostinato.streams.deadlines import deadlines
from ostinato.streams.deciders import activities, chain, workflow_task
from ostinato.streams.deciders.common import dispatch_transient, schedule_workflow_task, wake
from ostinato.streams.failures import failure, timeout_failure
from ostinato.streams.model import RunState
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]


def fire(w: Writer, body: Record) -> Step:
    run = w.workflow.runs.get(w.command["run_id"])
    due = Deadline(body["fire_at_ms"], body["kind"], w.command["run_id"], body["timer_id"],
                   body["scheduled_event_id"], body["attempt"])
    if run is None or due not in deadlines(run, w.config):
        return w.step  # the state moved on (completed, canceled, retried): a stale deadline does nothing
    _FIRE[due.kind](w, run, due)
    return w.step


def _user_timer(w: Writer, run: RunState, due: Deadline) -> None:
    timer = run.timers[due.timer_id]
    w.append(run.run_id, ev.TIMER_FIRED, {"timer_id": timer.timer_id, "started_event_id": timer.started_event_id})
    wake(w, run.run_id)


def _workflow_task_timeout(w: Writer, run: RunState, due: Deadline) -> None:
    workflow_task.timed_out(w, run)


def _workflow_task_retry(w: Writer, run: RunState, due: Deadline) -> None:
    task = w.edit(run.run_id).workflow_task
    assert task is not None
    task.retry_at_ms = None
    task.started_time_ms = w.now_ms
    dispatch_transient(w, run)


def _activity_timeout(w: Writer, run: RunState, due: Deadline) -> None:
    activity = run.activities[due.scheduled_event_id]
    kind = due.kind.removeprefix("ACTIVITY_")
    failure = timeout_failure(kind, activity.heartbeat_details)
    retryable = kind in ("START_TO_CLOSE", "HEARTBEAT")
    if retryable and activities.retry(w, activity, failure):
        return
    retry_state = "TIMEOUT" if not retryable else activities._last_retry_state(w, activity, failure)
    activities.finish(w, activity, ev.ACTIVITY_TASK_TIMED_OUT, {"failure": failure, "retry_state": retry_state},
                      run_id=run.run_id)


def _activity_retry(w: Writer, run: RunState, due: Deadline) -> None:
    activity = w.edit(run.run_id).activities[due.scheduled_event_id]
    activity.next_attempt_time_ms = None
    activity.current_attempt_scheduled_time_ms = w.now_ms
    w.act(DispatchActivityTask(run.namespace, run.workflow_id, run.run_id, activity.scheduled_event_id,
                               activity.attempt))


def _first_task(w: Writer, run: RunState, due: Deadline) -> None:
    schedule_workflow_task(w, run.run_id)


def _run_timeout(w: Writer, run: RunState, due: Deadline) -> None:
    whole = due.kind == "WORKFLOW_EXECUTION_TIMEOUT"
    chain.time_out(w, run.run_id, failure("workflow " + ("execution" if whole else "run") + " timeout", "TIMEOUT",
                                          timeout_type="START_TO_CLOSE"), whole_execution=whole)


def _retention(w: Writer, run: RunState, due: Deadline) -> None:
    """Delete a closed run whose retention is over, once it is archived (when archiving is on)."""
    if w.config.archive and not run.archive_uri:
        return  # ArchivalCompleted deletes it when the archive is confirmed
    delete_run(w, run.run_id)


def _schedule_action(w: Writer, run: RunState, due: Deadline) -> None:
    from ostinato.streams.schedules.deciders import fire as fire_schedule

    fire_schedule(w, run)


def delete_run(w: Writer, run_id: str) -> None:
    w.edit(run_id)
    wf = w.workflow
    del wf.runs[run_id]
    if wf.current is not None and wf.current.run_id == run_id:
        wf.current = None
    w.act(DeleteRun(wf.namespace, wf.workflow_id, run_id))


_FIRE = {
    "USER_TIMER": _user_timer,
    "WORKFLOW_TASK_TIMEOUT": _workflow_task_timeout,
    "WORKFLOW_TASK_RETRY": _workflow_task_retry,
    "ACTIVITY_SCHEDULE_TO_START": _activity_timeout,
    "ACTIVITY_START_TO_CLOSE": _activity_timeout,
    "ACTIVITY_SCHEDULE_TO_CLOSE": _activity_timeout,
    "ACTIVITY_HEARTBEAT": _activity_timeout,
    "ACTIVITY_RETRY": _activity_retry,
    "WORKFLOW_RUN_TIMEOUT": _run_timeout,
    "WORKFLOW_EXECUTION_TIMEOUT": _run_timeout,
    "WORKFLOW_BACKOFF": _first_task,
    "RETENTION": _retention,
    "SCHEDULE_ACTION": _schedule_action,
}
