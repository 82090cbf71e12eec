"""Deciders of workflow task answers: completed (with the workflow's commands) and failed."""

from __future__ import annotations

from typing import Any

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.actions import UpsertVisibility
from ostinato.streams.deciders import updates
from ostinato.streams.deciders.commands import CLOSING, HANDLERS, validate_commands
from ostinato.streams.deciders.common import (
    record_start,
    reject_update,
    schedule_transient_task,
    schedule_workflow_task,
    start_problem,
    task_run,
)
from ostinato.streams.failures import failure as make_failure
from ostinato.streams.model import RunState
from ostinato.streams.routing import run_build_ids, waits_for_build
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]


def _current_task(w: Writer, body: Record) -> RunState | Step:
    """The run whose in-flight task this answer is for, or the rejection of a stale or duplicate answer."""
    run = task_run(w)
    if run is None:
        return w.reject("NOT_FOUND", f"no run {w.command['run_id']!r} of workflow {w.workflow.workflow_id}")
    task = run.workflow_task
    if (not run.open or task is None or task.retry_at_ms is not None
            or task.scheduled_event_id != body["scheduled_event_id"] or task.attempt != body["attempt"]):
        return w.reject("STALE_TASK", f"workflow task {body['scheduled_event_id']} attempt {body['attempt']} of run "
                                      f"{run.run_id} is not the one in flight")
    return run


def completed(w: Writer, body: Record) -> Step:
    found = _current_task(w, body)
    if isinstance(found, Step):
        return found
    run = found
    task = run.workflow_task
    assert task is not None
    commands = body["commands"]
    rejections = body.get("rejected_updates") or []
    reported = body.get("started_time_ms")
    problem = validate_commands(run, commands, w.config, rejections)
    if problem is None and reported is not None:
        problem = start_problem(task, reported, w.now_ms)
    cause = "BAD_COMMAND" if problem is not None else None
    if cause is None and task.new_events_while_started and any(name in CLOSING for name, _ in commands):
        cause, problem = "UNHANDLED_COMMAND", "new events arrived while the task ran; the workflow must see them " \
                                              "before it closes"
    if cause is None and any(name in CLOSING for name, _ in commands) and any(
            u["delivered_task"] != task.scheduled_event_id for u in run.admitted_updates):
        cause, problem = "UNHANDLED_COMMAND", "updates arrived while the task ran; the workflow must see them " \
                                              "before it closes"
    if cause is not None:
        fail_task(w, run, cause, problem or cause, reported)
        # The task failed (that is written), and the worker hears why; the command itself was not refused.
        w.reply((wire.REJECTED, {"code": "INVALID_ARGUMENT", "message": f"{cause}: {problem}",
                                             "existing_run_id": ""}))
        return w.step
    carried = [u["update_id"] for u in run.admitted_updates if u["delivered_task"] == task.scheduled_event_id]
    if task.speculative and not commands and not body["force_create_new_task"]:
        # Only updates, all rejected: the task leaves no trace in history (nor does the update).
        w.edit(run.run_id).workflow_task = None
        _settle_updates(w, run.run_id, carried, rejections)
        updates.follow_up(w, run.run_id)
        w.accept(run.run_id)
        return w.step
    more_to_see = task.new_events_while_started
    started_event_id = record_start(w, run, reported)
    builds_before = run_build_ids(run)
    done = w.append(run.run_id, ev.WORKFLOW_TASK_COMPLETED, {
        "scheduled_event_id": task.scheduled_event_id, "started_event_id": started_event_id,
        "identity": w.command["identity"], "build_id": body["build_id"], "sdk_flags": body["sdk_flags"],
        "versioning_behavior": body.get("versioning_behavior") or ""})
    if run_build_ids(w.run(run.run_id)) != builds_before:  # drain visibility: `BuildIds` changed
        w.act(UpsertVisibility(run.namespace, run.workflow_id, run.run_id))
    for name, attrs in commands:
        HANDLERS[name](w, run.run_id, attrs, done["event_id"])
    _settle_updates(w, run.run_id, carried, rejections)
    if more_to_see or body["force_create_new_task"] or run.run_id in w.wake_after:
        schedule_workflow_task(w, run.run_id)
    updates.follow_up(w, run.run_id)
    w.accept(run.run_id)
    return w.step


def _settle_updates(w: Writer, run_id: str, carried: list[str], rejections: list[Record]) -> None:
    """Forget the updates the answer rejected, and refuse those it carried and left unanswered (a worker that does
    not know updates): every caller hears an outcome. Called after the commands, which accept updates."""
    for rejection in rejections:
        reject_update(w, run_id, rejection["update_id"], rejection["failure"])
    still_admitted = {u["update_id"] for u in w.run(run_id).admitted_updates}
    for update_id in carried:
        if update_id in still_admitted and all(r["update_id"] != update_id for r in rejections):
            reject_update(w, run_id, update_id, make_failure(
                f"the workflow task carried update {update_id!r} and its answer neither accepted nor rejected it: "
                "is the worker's SDK too old for updates?", type="UpdateNotHandled"))


def failed(w: Writer, body: Record) -> Step:
    found = _current_task(w, body)
    if isinstance(found, Step):
        return found
    fail_task(w, found, body["cause"], body["failure"], body.get("started_time_ms"))
    w.accept(found.run_id)
    return w.step


def fail_task(w: Writer, run: RunState, cause: str, failure: Record | str, started_ms: int | None = None) -> None:
    """Record the first failure of a task in history, after its start (the worker did take it); retry it
    transiently, with backoff from the third attempt."""
    if isinstance(failure, str):
        failure = make_failure(failure)
    _end_and_retry(w, run, ev.WORKFLOW_TASK_FAILED,
                   {"cause": cause, "failure": failure, "identity": w.command["identity"]}, started=True,
                   started_ms=started_ms)


def timed_out(w: Writer, run: RunState) -> None:
    """No answer within the task's timeout, counted from dispatch. A task whose start history shows (one dispatched
    before version 2 of these events) timed out START_TO_CLOSE; any other is not known to have started at all."""
    task = run.workflow_task
    started = task is not None and not task.transient and bool(task.started_time_ms)
    _end_and_retry(w, run, ev.WORKFLOW_TASK_TIMED_OUT,
                   {"timeout_type": "START_TO_CLOSE" if started else "SCHEDULE_TO_CLOSE"}, started=False)


def _end_and_retry(w: Writer, run: RunState, event_type: str, attrs: Record, *, started: bool,
                   started_ms: int | None = None) -> None:
    """End the task in flight (an event, unless it was a transient attempt; after its STARTED if the worker
    `started` it) and dispatch the next attempt."""
    task = run.workflow_task
    assert task is not None
    if task.transient:
        w.edit(run.run_id).workflow_task = None
    else:
        started_event_id = record_start(w, run, started_ms) if started else (
            task.started_event_id if task.started_time_ms else 0)
        w.append(run.run_id, event_type, {"scheduled_event_id": task.scheduled_event_id,
                                          "started_event_id": started_event_id, **attrs})
    failure = attrs.get("failure") or make_failure(f"workflow task timed out ({attrs.get('timeout_type', '')})",
                                                    "TIMEOUT")
    # A task no worker answered, on a build's topic: the build's workers may be gone for a while (a pinned run waits
    # for its build to come back), so the retry backs off no longer than one task timeout: the run resumes within
    # about two timeouts of the build's return, not after the usual backoff of up to ten minutes.
    cap = task.timeout_ms if not started and waits_for_build(run, w.config) else None
    schedule_transient_task(w, run.run_id, task.attempt + 1, last_failure={**failure, "stack_trace": failure.get(
        "stack_trace", "")[:4000]}, last_failure_cause=attrs.get("cause", "TIMED_OUT"), max_delay_ms=cap)
