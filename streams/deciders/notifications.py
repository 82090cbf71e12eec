"""Deciders of what other shards and the archiver report back: children, external requests, archives."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.deciders.common import task_run, wake
from ostinato.streams.model import RunState
from ostinato.streams.schedules import progress
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]

_CHILD_CLOSED = {
    "COMPLETED": ev.CHILD_WORKFLOW_EXECUTION_COMPLETED,
    "FAILED": ev.CHILD_WORKFLOW_EXECUTION_FAILED,
    "CANCELED": ev.CHILD_WORKFLOW_EXECUTION_CANCELED,
    "TIMED_OUT": ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
    "TERMINATED": ev.CHILD_WORKFLOW_EXECUTION_TERMINATED,
}


def _child(w: Writer, body: Record, want_started: bool | None) -> Any:
    run = task_run(w)
    child = run.children.get(body["initiated_event_id"]) if run is not None and run.open else None
    if child is None or (want_started is not None and bool(child.started_event_id) != want_started):
        return None
    return run, child


def _schedule(w: Writer) -> RunState | None:
    """The schedule whose action reports back (its runs name the schedule as their parent), if it is one."""
    run = task_run(w)
    return run if run is not None and run.open and run.schedule is not None else None


def child_started(w: Writer, body: Record) -> Step:
    if (schedule := _schedule(w)) is not None:
        progress.action_started(w, schedule, body)
        return w.step
    found = _child(w, body, want_started=False)
    if found is None:
        return w.reject("STALE_TASK", f"no child initiated at event {body['initiated_event_id']} waits to start")
    run, child = found
    w.append(run.run_id, ev.CHILD_WORKFLOW_EXECUTION_STARTED, {
        "namespace": child.namespace, "initiated_event_id": child.initiated_event_id,
        "workflow_execution": body["child"], "workflow_type": body["workflow_type"]})
    wake(w, run.run_id)
    return w.step


def child_start_failed(w: Writer, body: Record) -> Step:
    if (schedule := _schedule(w)) is not None:
        progress.action_start_failed(w, schedule, body)
        return w.step
    found = _child(w, body, want_started=False)
    if found is None:
        return w.reject("STALE_TASK", f"no child initiated at event {body['initiated_event_id']} waits to start")
    run, child = found
    w.append(run.run_id, ev.START_CHILD_WORKFLOW_EXECUTION_FAILED, {
        "namespace": child.namespace, "workflow_id": child.workflow_id, "workflow_type": child.workflow_type,
        "cause": body["cause"], "initiated_event_id": child.initiated_event_id})
    wake(w, run.run_id)
    return w.step


def child_closed(w: Writer, body: Record) -> Step:
    if (schedule := _schedule(w)) is not None:
        progress.action_closed(w, schedule, body)
        return w.step
    found = _child(w, body, want_started=True)
    if found is None or body["status"] not in _CHILD_CLOSED:
        return w.reject("STALE_TASK", f"no running child initiated at event {body['initiated_event_id']}")
    run, child = found
    attrs: Record = {"namespace": child.namespace, "workflow_execution": body["child"],
                     "workflow_type": child.workflow_type, "initiated_event_id": child.initiated_event_id,
                     "started_event_id": child.started_event_id}
    status = body["status"]
    if status == "COMPLETED":
        attrs["result"] = body["result"]
    elif status == "FAILED":
        attrs["failure"] = body["failure"]
    if status in ("FAILED", "TIMED_OUT"):
        attrs["retry_state"] = body["retry_state"]
    w.append(run.run_id, _CHILD_CLOSED[status], attrs)
    wake(w, run.run_id)
    return w.step


def external_result(w: Writer, body: Record) -> Step:
    run = task_run(w)
    request = run.external_requests.get(body["initiated_event_id"]) if run is not None and run.open else None
    if request is None or run is None:
        return w.reject("STALE_TASK", f"no external request initiated at event {body['initiated_event_id']}")
    execution = {"workflow_id": request.workflow_id, "run_id": request.run_id}
    common = {"initiated_event_id": request.initiated_event_id, "namespace": request.namespace,
              "workflow_execution": execution}
    if body["failed_cause"] is not None:
        event_type = (ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED if request.kind == "SIGNAL"
                      else ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)
        w.append(run.run_id, event_type, {**common, "cause": body["failed_cause"]})
    else:
        event_type = (ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED if request.kind == "SIGNAL"
                      else ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
        w.append(run.run_id, event_type, common)
    wake(w, run.run_id)
    return w.step


def archival_completed(w: Writer, body: Record) -> Step:
    """The archive of a closed run is confirmed: remember where, and delete the run if retention is over."""
    from ostinato.streams.deciders.timers import delete_run

    run = task_run(w)
    if run is None or run.open:
        return w.reject("NOT_FOUND", f"no closed run {w.command['run_id']!r} to mark archived")
    w.edit(run.run_id).archive_uri = body["uri"]
    if (run.close_time_ms or 0) + w.config.retention_ms <= w.now_ms:
        delete_run(w, run.run_id)
    w.accept(run.run_id)
    return w.step


def delete(w: Writer, body: Record) -> Step:
    from ostinato.streams.deciders.timers import delete_run

    run = task_run(w)
    if run is None:
        return w.reject("NOT_FOUND", f"no run {w.command['run_id']!r}")
    if run.open:
        return w.reject("INVALID_ARGUMENT", f"run {run.run_id} is running: terminate it before deleting it")
    if w.config.archive and not run.archive_uri:
        return w.reject("INVALID_ARGUMENT", f"run {run.run_id} is not archived yet")
    delete_run(w, run.run_id)
    w.accept(run.run_id)
    return w.step
