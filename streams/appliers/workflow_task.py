"""Appliers of the workflow task: scheduled, started, then completed, failed or timed out.

Version 1 histories write STARTED at dispatch, right after SCHEDULED. From version 2 on, a task goes out through
Kafka when it is scheduled and its STARTED is written with the worker's answer, at the time the worker took it
(issue 15): in between, the task holds the id its STARTED had in the task the worker saw (SCHEDULED + 1), so events
arriving meanwhile still mark it as running, and `started_time_ms` stays 0 until the start is reported.
"""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import ReplayError, applier
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


@applier(ev.WORKFLOW_TASK_SCHEDULED, 2)
def scheduled_v2(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    WORKFLOW_TASK.check(_state(run.workflow_task), "SCHEDULED")
    run.workflow_task = WorkflowTaskState(
        scheduled_event_id=event["event_id"], started_event_id=event["event_id"] + 1, attempt=attrs["attempt"],
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


@applier(ev.WORKFLOW_TASK_STARTED, 2)
def started_v2(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    task = wf.runs[run_id].workflow_task
    if task is None or task.started_time_ms or task.scheduled_event_id != attrs["scheduled_event_id"]:
        raise ReplayError(f"run {run_id}: WORKFLOW_TASK_STARTED (event {event['event_id']}) names workflow task "
                          f"{attrs['scheduled_event_id']}, which is not scheduled and waiting for its start")
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


@applier(ev.WORKFLOW_TASK_COMPLETED, 2)
def completed_v2(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    """Version 1, and worker versioning: the completing worker's build and declared behaviour; the first PINNED
    completion pins the run to its build, an AUTO_UPGRADE one unpins it (Temporal lets a run's behaviour change)."""
    run = wf.runs[run_id]
    run.last_workflow_task_started_event_id = attrs["started_event_id"]
    _finish(wf, run_id)
    behavior = attrs.get("versioning_behavior") or ""
    run.build_id = attrs["build_id"]
    if behavior:
        run.versioning_behavior = behavior
        if behavior == "PINNED" and not run.pinned_build:
            run.pinned_build = attrs["build_id"]
        elif behavior != "PINNED":
            run.pinned_build = ""


@applier(ev.WORKFLOW_TASK_FAILED)
def failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id)


@applier(ev.WORKFLOW_TASK_TIMED_OUT)
def timed_out(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _finish(wf, run_id)
