"""Appliers of the workflow task: scheduled, started, then completed, failed or timed out."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.lifecycle import WORKFLOW_TASK
from ostinato.streams.model import Workflow, WorkflowTaskState

Record = dict[str, Any]


def _state(task: WorkflowTaskState | None) -> str:
    if task is None:
        return "NONE"
    return "STARTED" if task.started_event_id else "SCHEDULED"


@applier(ev.WORKFLOW_TASK_SCHEDULED)
def scheduled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    WORKFLOW_TASK.check(_state(run.workflow_task), "SCHEDULED")
    run.workflow_task = WorkflowTaskState(
        scheduled_event_id=event["event_id"], started_event_id=0, attempt=attrs["attempt"],
        task_queue=attrs["task_queue"], scheduled_time_ms=event["event_time_ms"], started_time_ms=0,
        timeout_ms=attrs["start_to_close_timeout_ms"],
    )


@applier(ev.WORKFLOW_TASK_STARTED)
def started(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    task = wf.runs[run_id].workflow_task
    WORKFLOW_TASK.check(_state(task), "STARTED")
    assert task is not None
    task.started_event_id = event["event_id"]
    task.started_time_ms = event["event_time_ms"]


def _finish(wf: Workflow, run_id: str) -> None:
    run = wf.runs[run_id]
    WORKFLOW_TASK.check(_state(run.workflow_task), "NONE")
    run.workflow_task = None


@applier(ev.WORKFLOW_TASK_COMPLETED)
def completed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    wf.runs[run_id].last_workflow_task_started_event_id = attrs["started_event_id"]
    _finish(wf, run_id)


@applier(ev.WORKFLOW_TASK_FAILED)
def failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id)


@applier(ev.WORKFLOW_TASK_TIMED_OUT)
def timed_out(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id)
