"""Schedules (Temporal's model) as engine state: each schedule is a run of its own workflow id on the shard that id
hashes to, whose state carries the schedule and whose only deadline is its next action time."""

from __future__ import annotations

SCHEDULE_WORKFLOW_PREFIX = "ostinato-schedule:"  # Temporal names its scheduler workflows the same way
SCHEDULE_WORKFLOW_TYPE = "ostinato-schedule"
# The visibility query that lists a namespace's schedules (their runs are in visibility like any run).
SCHEDULES_QUERY = f"WorkflowType = '{SCHEDULE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"


def schedule_workflow_id(schedule_id: str) -> str:
    """The workflow id whose run holds schedule `schedule_id`: its commands, history and timer live there."""
    return SCHEDULE_WORKFLOW_PREFIX + schedule_id


def schedule_id_of(workflow_id: str) -> str | None:
    """The schedule id a schedule's workflow id stands for; None for any other workflow."""
    return workflow_id[len(SCHEDULE_WORKFLOW_PREFIX):] if workflow_id.startswith(SCHEDULE_WORKFLOW_PREFIX) else None


def is_schedule_parent(parent: dict[str, object] | None) -> bool:
    """Whether a run's parent record names the schedule that started it (how its close reaches the schedule)
    rather than a parent workflow: the SDK shows such a run without a parent, as Temporal does."""
    return (parent is not None and parent.get("initiated_event_id") == 0
            and str(parent.get("workflow_id", "")).startswith(SCHEDULE_WORKFLOW_PREFIX))
