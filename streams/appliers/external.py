"""Appliers of signals and cancellations this run sends to other workflows."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.appliers._common import note_new_event
from ostinato.streams.lifecycle import IllegalTransition
from ostinato.streams.model import ExternalRequestState, Workflow

Record = dict[str, Any]


def _initiate(wf: Workflow, run_id: str, attrs: Record, event: Record, kind: str) -> None:
    execution = attrs["workflow_execution"]
    wf.runs[run_id].external_requests[event["event_id"]] = ExternalRequestState(
        event["event_id"], kind, attrs["namespace"], execution["workflow_id"], execution["run_id"]
    )


def _resolve(wf: Workflow, run_id: str, attrs: Record) -> None:
    run = wf.runs[run_id]
    if run.external_requests.pop(attrs["initiated_event_id"], None) is None:
        raise IllegalTransition(f"external request: no request initiated at event {attrs['initiated_event_id']}")
    note_new_event(run)


@applier(ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
def signal_initiated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _initiate(wf, run_id, attrs, event, "SIGNAL")


@applier(ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
def cancel_initiated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _initiate(wf, run_id, attrs, event, "CANCEL")


@applier(ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED)
def signaled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _resolve(wf, run_id, attrs)


@applier(ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)
def signal_failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _resolve(wf, run_id, attrs)


@applier(ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
def cancel_requested(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _resolve(wf, run_id, attrs)


@applier(ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)
def cancel_failed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _resolve(wf, run_id, attrs)
