"""Where an update stands, read from its run's state (and, for its outcome, the run's history): what callers
waiting for an update see. Pure: the owner's HTTP read and the in-memory test engine share it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.failures import failure
from ostinato.streams.model import RunState

Record = dict[str, Any]

STAGES = ("ADMITTED", "ACCEPTED", "COMPLETED")  # Temporal's WorkflowUpdateStage, in order


def update_status(run: RunState, update_id: str, event_at: Callable[[int], Record | None]) -> Record | None:
    """`{run_id, update_id, stage, outcome, run_closed}` or None for an update the run does not know (never sent,
    or forgotten: an admitted update does not survive a rebuild of the run from history; send it again).

    `outcome` is `{"result": payloads}` or `{"failure": failure}` once COMPLETED (a rejected update is COMPLETED
    with its failure and `rejected`); an accepted update whose run closed before its handler finished is COMPLETED
    with Temporal's failure for it, and `run_closed`."""
    base = {"run_id": run.run_id, "update_id": update_id, "outcome": None, "run_closed": False, "rejected": False}
    accepted = run.updates.get(update_id)
    if accepted is not None:
        if not accepted.completed_event_id and not run.open:
            # Temporal's outcome for an update whose workflow finished before its handler did.
            return {**base, "stage": "COMPLETED", "run_closed": True, "outcome": {"failure": failure(
                "Workflow Update failed because the Workflow completed before the Update completed.",
                type="AcceptedUpdateCompletedWorkflow")}}
        if not accepted.completed_event_id:
            return {**base, "stage": "ACCEPTED"}
        event = event_at(accepted.completed_event_id)
        if event is None:
            return {**base, "stage": "ACCEPTED"}  # a store catching up: ask again
        attrs = ev.attributes(event)
        outcome = {"failure": attrs["failure"]} if attrs["failure"] is not None else {"result": attrs["result"]}
        return {**base, "stage": "COMPLETED", "outcome": outcome}
    if any(u["update_id"] == update_id for u in run.admitted_updates):
        return {**base, "stage": "ADMITTED"}
    rejected = next((u for u in run.rejected_updates if u["update_id"] == update_id), None)
    if rejected is not None:
        return {**base, "stage": "COMPLETED", "outcome": {"failure": rejected["failure"]}, "rejected": True}
    return None


def reached(status: Record, wanted: str) -> bool:
    """Whether a waiter for stage `wanted` has its answer: the stage, or an update that cannot get there."""
    return STAGES.index(status["stage"]) >= STAGES.index(wanted) or status["run_closed"]
