"""Appliers of a schedule's events: they set the `ScheduleInfo` record its run carries (streams/schedules)."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.model import Workflow

Record = dict[str, Any]


@applier(ev.SCHEDULE_CREATED)
def created(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    wf.runs[run_id].schedule = {
        "schedule_id": attrs["schedule_id"], "definition": attrs["schedule"], "created_time_ms": event["event_time_ms"],
        "updated_time_ms": None, "progress": {
            "last_processed_ms": event["event_time_ms"], "num_actions": 0, "num_actions_missed_catchup_window": 0,
            "num_actions_skipped_overlap": 0, "recent_actions": [], "running": [], "buffered": []}}


@applier(ev.SCHEDULE_UPDATED)
def updated(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    info = run.schedule
    assert info is not None, f"run {run_id}: {ev.SCHEDULE_UPDATED} on a run that is no schedule"
    definition = dict(attrs["schedule"] or info["definition"])
    definition["state"] = attrs["state"]
    # An update or an unpause takes effect from now: times that passed meanwhile are not caught up on.
    progress = {**info["progress"], "last_processed_ms": max(info["progress"]["last_processed_ms"],
                                                             event["event_time_ms"])}
    run.schedule = {**info, "definition": definition, "progress": progress, "updated_time_ms": event["event_time_ms"]}


@applier(ev.SCHEDULE_PROGRESSED)
def progressed(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    info = run.schedule
    assert info is not None, f"run {run_id}: {ev.SCHEDULE_PROGRESSED} on a run that is no schedule"
    run.schedule = {**info, "definition": {**info["definition"], "state": attrs["state"]},
                    "progress": attrs["progress"]}
