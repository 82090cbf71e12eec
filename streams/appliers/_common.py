"""Small helpers the appliers share."""

from __future__ import annotations

from ostinato.streams.model import RunState


def note_new_event(run: RunState) -> None:
    """Something the workflow must see arrived while its task ran: a new task has to follow that one."""
    task = run.workflow_task
    if task is not None and task.started_event_id:
        task.new_events_while_started = True


def remember_request(run: RunState, request_id: str, keep: int = 256) -> None:
    """Keep the latest request ids so a retried signal or cancel is applied once (bounded, oldest dropped)."""
    if request_id:
        run.recent_request_ids.append(request_id)
        del run.recent_request_ids[:-keep]
