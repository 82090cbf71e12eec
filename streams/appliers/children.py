"""Appliers of child workflows, from the parent's side."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.appliers._common import note_new_event
from ostinato.streams.lifecycle import CHILD
from ostinato.streams.model import ChildState, Workflow

Record = dict[str, Any]


def _state(child: ChildState | None) -> str:
    if child is None:
        return "NONE"
    return "STARTED" if child.started_event_id else "INITIATED"


@applier(ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED)
def initiated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    CHILD.check(_state(run.children.get(event["event_id"])), "INITIATED")
    run.children[event["event_id"]] = ChildState(
        initiated_event_id=event["event_id"], namespace=attrs["namespace"], workflow_id=attrs["workflow_id"],
        workflow_type=attrs["workflow_type"], parent_close_policy=attrs["parent_close_policy"],
    )


@applier(ev.CHILD_WORKFLOW_EXECUTION_STARTED)
def started(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    child = run.children.get(attrs["initiated_event_id"])
    CHILD.check(_state(child), "STARTED")
    assert child is not None
    child.run_id = attrs["workflow_execution"]["run_id"]
    child.started_event_id = event["event_id"]
    note_new_event(run)


def _end(wf: Workflow, run_id: str, attrs: Record) -> None:
    run = wf.runs[run_id]
    CHILD.check(_state(run.children.get(attrs["initiated_event_id"])), "NONE")
    del run.children[attrs["initiated_event_id"]]
    note_new_event(run)


@applier(ev.START_CHILD_WORKFLOW_EXECUTION_FAILED)
def start_failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)


@applier(ev.CHILD_WORKFLOW_EXECUTION_COMPLETED)
def completed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)


@applier(ev.CHILD_WORKFLOW_EXECUTION_FAILED)
def failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)


@applier(ev.CHILD_WORKFLOW_EXECUTION_CANCELED)
def canceled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)


@applier(ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT)
def timed_out(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)


@applier(ev.CHILD_WORKFLOW_EXECUTION_TERMINATED)
def terminated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs)
