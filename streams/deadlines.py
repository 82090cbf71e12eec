"""Every moment a run's owner must act at, derived from its state alone.

The shell keeps these in an index ordered by fire time (rebuilt from state on restore, kept current from the
ScheduleTimer/CancelTimer actions) and turns each due one into a FireTimer command, processed like any other.
"""

from __future__ import annotations

from ostinato.schemas import wire
from ostinato.streams.actions import Deadline
from ostinato.streams.config import Config
from ostinato.streams.model import RunState


def deadlines(run: RunState, config: Config) -> set[Deadline]:
    rid = run.run_id
    if not run.open:
        return {Deadline((run.close_time_ms or 0) + config.retention_ms, "RETENTION", rid)}
    out = {Deadline(t.fire_at_ms, "USER_TIMER", rid, timer_id=t.timer_id) for t in run.timers.values()}
    task = run.workflow_task
    if in_first_task_backoff(run):
        out.add(Deadline(run.execution_time_ms, "WORKFLOW_BACKOFF", rid))
    if task is not None:
        if task.retry_at_ms is not None:
            out.add(Deadline(task.retry_at_ms, "WORKFLOW_TASK_RETRY", rid, "", task.scheduled_event_id, task.attempt))
        else:
            out.add(Deadline(task.started_time_ms + task.timeout_ms, "WORKFLOW_TASK_TIMEOUT", rid, "",
                             task.scheduled_event_id, task.attempt))
    for a in run.activities.values():
        sid = a.scheduled_event_id
        if a.schedule_to_close_timeout_ms is not None:
            out.add(Deadline(a.scheduled_time_ms + a.schedule_to_close_timeout_ms, "ACTIVITY_SCHEDULE_TO_CLOSE",
                             rid, "", sid, 0))
        if a.next_attempt_time_ms is not None:
            out.add(Deadline(a.next_attempt_time_ms, "ACTIVITY_RETRY", rid, "", sid, a.attempt))
        elif a.started_time_ms is None:
            if a.schedule_to_start_timeout_ms is not None:
                out.add(Deadline(a.current_attempt_scheduled_time_ms + a.schedule_to_start_timeout_ms,
                                 "ACTIVITY_SCHEDULE_TO_START", rid, "", sid, a.attempt))
        else:
            out.add(Deadline(a.started_time_ms + a.start_to_close_timeout_ms, "ACTIVITY_START_TO_CLOSE", rid, "",
                             sid, a.attempt))
            if a.heartbeat_timeout_ms is not None:
                last = a.last_heartbeat_time_ms or a.started_time_ms
                out.add(Deadline(last + a.heartbeat_timeout_ms, "ACTIVITY_HEARTBEAT", rid, "", sid, a.attempt))
    if run.run_expiration_time_ms is not None:
        out.add(Deadline(run.run_expiration_time_ms, "WORKFLOW_RUN_TIMEOUT", rid))
    if run.execution_expiration_time_ms is not None:
        out.add(Deadline(run.execution_expiration_time_ms, "WORKFLOW_EXECUTION_TIMEOUT", rid))
    return out


def in_first_task_backoff(run: RunState, now_ms: int | None = None) -> bool:
    """A run waiting out the backoff its start asked for (continue-as-new with backoff): no task yet."""
    waiting = run.workflow_task is None and run.last_workflow_task_started_event_id == 0
    return waiting and run.execution_time_ms > (run.start_time_ms if now_ms is None else now_ms)


def fire_timer_body(deadline: Deadline) -> tuple[str, dict[str, object]]:
    """The FireTimer command body for a due deadline."""
    return (wire.command_type("FireTimer"), {
        "kind": deadline.kind, "fire_at_ms": deadline.fire_at_ms, "timer_id": deadline.timer_id,
        "scheduled_event_id": deadline.scheduled_event_id, "attempt": deadline.attempt,
    })
