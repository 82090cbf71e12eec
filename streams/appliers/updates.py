"""Appliers of updates: accepted (the handler started), then completed (its outcome).

A rejected update writes nothing, and an admitted one lives only in the changelog (`RunState.admitted_updates`):
accepting it takes it out of there, which replay, having never seen it, skips harmlessly.
"""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import ReplayError, applier
from ostinato.streams.model import UpdateState, Workflow

Record = dict[str, Any]


@applier(ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
def accepted(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    update_id = attrs["update_id"]
    if update_id in run.updates:
        raise ReplayError(f"run {run_id}: update {update_id!r} accepted twice (event {event['event_id']})")
    run.updates[update_id] = UpdateState(update_id, event["event_id"])
    run.admitted_updates = [u for u in run.admitted_updates if u["update_id"] != update_id]


@applier(ev.WORKFLOW_EXECUTION_UPDATE_COMPLETED)
def completed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    update = wf.runs[run_id].updates.get(attrs["update_id"])
    if update is None or update.completed_event_id:
        raise ReplayError(f"run {run_id}: update {attrs['update_id']!r} completed (event {event['event_id']}) "
                          "without being in progress")
    update.completed_event_id = event["event_id"]
