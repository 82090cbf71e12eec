"""Appliers of user timers."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.appliers import applier
from ostinato.streams.appliers._common import note_new_event
from ostinato.streams.lifecycle import TIMER
from ostinato.streams.model import TimerState, Workflow

Record = dict[str, Any]


@applier(ev.TIMER_STARTED)
def started(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    run = wf.runs[run_id]
    TIMER.check("STARTED" if attrs["timer_id"] in run.timers else "NONE", "STARTED")
    run.timers[attrs["timer_id"]] = TimerState(
        attrs["timer_id"], event["event_id"], event["event_time_ms"] + attrs["start_to_fire_timeout_ms"]
    )


def _end(wf: Workflow, run_id: str, timer_id: str) -> None:
    run = wf.runs[run_id]
    TIMER.check("STARTED" if timer_id in run.timers else "NONE", "NONE")
    del run.timers[timer_id]


@applier(ev.TIMER_FIRED)
def fired(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs["timer_id"])
    note_new_event(wf.runs[run_id])


@applier(ev.TIMER_CANCELED)
def canceled(wf: Workflow, run_id: str, attrs: Record, event: Record) -> None:
    _end(wf, run_id, attrs["timer_id"])
