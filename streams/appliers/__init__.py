"""Appliers: one small function per (event type, version) that moves state forward by one history event.

Writing an event applies it (`streams.writer`), and replay applies the same functions to recorded events, so
live state and rebuilt state cannot drift. Appliers never read the clock, configuration or I/O: only the state
and the event. A shipped applier is frozen (`tests/unit/core/test_applier_golden.py` holds its hash); changing what an
event does means registering version n+1 and writing new events with it, while old histories keep replaying
through version n.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ostinato.streams.events import attributes
from ostinato.streams.model import Workflow

Record = dict[str, Any]
Applier = Callable[[Workflow, str, Record, Record], None]

APPLIERS: dict[tuple[str, int], Applier] = {}
CURRENT_VERSION: dict[str, int] = {}


class ReplayError(RuntimeError):
    """An event that cannot follow the state it is applied to (a gap, an unknown type or version)."""


def applier(event_type: str, version: int = 1) -> Callable[[Applier], Applier]:
    """Register `fn` for (event_type, version); new events use the highest version registered."""

    def register(fn: Applier) -> Applier:
        if (event_type, version) in APPLIERS:
            raise ValueError(f"two appliers for {event_type} v{version}")
        APPLIERS[(event_type, version)] = fn
        CURRENT_VERSION[event_type] = max(version, CURRENT_VERSION.get(event_type, 0))
        return fn

    return register


def apply(workflow: Workflow, run_id: str, event: Record) -> None:
    """Apply one event of run `run_id` to `workflow` (the run is created by its started event)."""
    key = (event["event_type"], event["applier_version"])
    fn = APPLIERS.get(key)
    if fn is None:
        raise ReplayError(f"no applier for {key[0]} version {key[1]}")
    run = workflow.runs.get(run_id)
    if run is None and key[0] != "WORKFLOW_EXECUTION_STARTED":
        raise ReplayError(f"run {run_id}: {key[0]} (event {event['event_id']}) does not follow a started event")
    expected = run.next_event_id if run is not None else 1
    if event["event_id"] != expected:
        raise ReplayError(f"run {run_id}: event {event['event_id']} ({key[0]}) does not follow event {expected - 1}")
    fn(workflow, run_id, attributes(event), event)
    workflow.runs[run_id].next_event_id = event["event_id"] + 1


def replay(workflow: Workflow, events: list[tuple[str, Record]]) -> Workflow:
    """Fold `(run_id, event)` pairs, in the order they were written, into `workflow`."""
    for run_id, event in events:
        apply(workflow, run_id, event)
    return workflow


# Importing the modules registers their appliers.
from ostinato.streams.appliers import (  # noqa: E402
    activities,
    children,
    execution,
    external,
    properties,
    schedules,
    timers,
    updates,
    workflow_task,
)

__all__ = ["APPLIERS", "CURRENT_VERSION", "ReplayError", "applier", "apply", "replay"]
_MODULES = (activities, children, execution, external, properties, schedules, timers, updates, workflow_task)
