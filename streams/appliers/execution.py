"""Appliers of a run's own lifecycle: started, signaled, cancel requested and the six ways to close."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.appliers._common import note_new_event, remember_request
from ostinato.streams.deadlines import after
from ostinato.streams.lifecycle import RUN
from ostinato.streams.model import CurrentRun, RunState, Workflow

Record = dict[str, Any]


@applier(ev.WORKFLOW_EXECUTION_STARTED)
def started(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    RUN.check("NONE" if run_id not in wf.runs else wf.runs[run_id].status, "RUNNING")
    now = event["event_time_ms"]
    run_timeout = attrs["run_timeout_ms"]
    run = RunState(
        namespace=wf.namespace, workflow_id=wf.workflow_id, run_id=run_id,
        workflow_type=attrs["workflow_type"], task_queue=attrs["task_queue"], status="RUNNING",
        start_time_ms=now, execution_time_ms=now + attrs["first_workflow_task_backoff_ms"],
        task_timeout_ms=attrs["task_timeout_ms"],
        first_execution_run_id=attrs["first_execution_run_id"] or run_id, start_request_id=attrs["request_id"],
        execution_expiration_time_ms=attrs["execution_expiration_time_ms"],
        run_expiration_time_ms=None if run_timeout is None else now + run_timeout,
        retry_policy=attrs["retry_policy"], attempt=attrs["attempt"],
        continued_from_run_id=attrs["continued_execution_run_id"], parent=attrs["parent"],
        search_attributes=dict(attrs["search_attributes"]), memo=dict(attrs["memo"]),
    )
    remember_request(run, attrs["request_id"])
    wf.runs[run_id] = run
    wf.current = CurrentRun(run_id, "RUNNING", attrs["request_id"], run.first_execution_run_id, now)


@applier(ev.WORKFLOW_EXECUTION_STARTED, 2)
def started_v2(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    """Version 2 (issue 17, retries and cron): the run timeout counts from the first workflow task, after the
    start's backoff (a cron run waits for its time, then has its whole run timeout), as in Temporal; and a run that
    may start another (retry policy, cron schedule) keeps what that run starts with."""
    started(wf, run_id, {**attrs, "run_timeout_ms": None}, event)
    run = wf.runs[run_id]
    if attrs["run_timeout_ms"] is not None:
        run.run_expiration_time_ms = after(run.execution_time_ms, attrs["run_timeout_ms"])
    run.cron_schedule = attrs["cron_schedule"]
    run.keeps_chain_inputs = True
    if attrs["retry_policy"] is not None or attrs["cron_schedule"]:
        run.input = list(attrs["input"])
        run.header = dict(attrs["header"])
        run.last_completion_result = list(attrs["last_completion_result"])


def _close(wf: Workflow, run_id: str, event: Record) -> None:
    run = wf.runs[run_id]
    run.status = RUN.check(run.status, ev.CLOSE_STATUS[event["event_type"]])
    run.close_time_ms = event["event_time_ms"]
    run.workflow_task = None
    run.activities.clear()
    run.timers.clear()
    run.children.clear()
    run.external_requests.clear()
    if wf.current is not None and wf.current.run_id == run_id:
        wf.current.status = run.status
        wf.current.close_time_ms = run.close_time_ms


@applier(ev.WORKFLOW_EXECUTION_COMPLETED)
def completed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_FAILED)
def failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_TIMED_OUT)
def timed_out(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_CANCELED)
def canceled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_TERMINATED)
def terminated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    remember_request(wf.runs[run_id], attrs["request_id"])
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
def continued_as_new(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _close(wf, run_id, event)


@applier(ev.WORKFLOW_EXECUTION_SIGNALED)
def signaled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    run.signal_count += 1
    remember_request(run, attrs["request_id"])
    note_new_event(run)


@applier(ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED)
def cancel_requested(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    run.cancel_requested = True
    run.cancel_reason = attrs["reason"]
    remember_request(run, attrs["request_id"])
    note_new_event(run)
