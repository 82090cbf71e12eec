"""Every moment a run's owner must act at, derived from its state alone.

The shell keeps these in an index ordered by fire time (rebuilt from state on restore, kept current from the
ScheduleTimer/CancelTimer actions) and turns each due one into a FireTimer command, processed like any other.
"""

from __future__ import annotations

from ostinato.schemas import wire
from ostinato.streams.actions import Deadline
from ostinato.streams.config import Config
from ostinato.streams.model import RunState
from ostinato.streams.schedules.timing import next_fire_ms

# Timeouts that a command already on its way could pre-empt (a completion, a heartbeat, a start): the shell fires
# these only once it has read everything written to the shard's commands before they fell due, so a completion
# held up in Kafka (behind a crashed producer's open transaction) is never judged late. User timers, retries,
# backoffs and retention are moments, not verdicts: they fire on time.
TIMEOUTS = frozenset({
    "WORKFLOW_TASK_TIMEOUT", "ACTIVITY_SCHEDULE_TO_START", "ACTIVITY_START_TO_CLOSE", "ACTIVITY_SCHEDULE_TO_CLOSE",
    "ACTIVITY_HEARTBEAT", "WORKFLOW_RUN_TIMEOUT", "WORKFLOW_EXECUTION_TIMEOUT",
})


MAX_TIME_MS = 2**63 - 1  # the largest Avro long: a moment this far away never comes


def after(time_ms: int, delay_ms: int) -> int:
    """`time_ms + delay_ms`, saturated at MAX_TIME_MS: a timeout as long as an Avro long allows must not make a
    time that no record (and no timer index key) can hold."""
    return min(time_ms + delay_ms, MAX_TIME_MS)


def fitting(time_ms: int, delay_ms: int) -> int:
    """`delay_ms`, shortened so that `time_ms + delay_ms` is at most MAX_TIME_MS: what a decider writes into an
    event whose (frozen) applier adds the delay to the event's time."""
    return min(delay_ms, MAX_TIME_MS - time_ms)


def deadlines(run: RunState, config: Config) -> set[Deadline]:
    rid = run.run_id
    if not run.open:
        return {Deadline(after(run.close_time_ms or 0, config.retention_ms), "RETENTION", rid)}
    if run.schedule is not None:  # a schedule's run has no tasks: only its next action time
        fire_at = next_fire_ms(run.schedule)
        return set() if fire_at is None else {Deadline(fire_at, "SCHEDULE_ACTION", rid)}
    out = {Deadline(t.fire_at_ms, "USER_TIMER", rid, timer_id=t.timer_id) for t in run.timers.values()}
    task = run.workflow_task
    if in_first_task_backoff(run):
        out.add(Deadline(run.execution_time_ms, "WORKFLOW_BACKOFF", rid))
    if task is not None:
        if task.retry_at_ms is not None:
            out.add(Deadline(task.retry_at_ms, "WORKFLOW_TASK_RETRY", rid, "", task.scheduled_event_id, task.attempt))
        else:
            # From dispatch: a task's start is reported only with its answer (0 until then), and nothing tells the
            # engine whether a worker took it meanwhile.
            out.add(Deadline(after(task.started_time_ms or task.scheduled_time_ms, task.timeout_ms),
                             "WORKFLOW_TASK_TIMEOUT", rid, "", task.scheduled_event_id, task.attempt))
    for a in run.activities.values():
        sid = a.scheduled_event_id
        if a.schedule_to_close_timeout_ms is not None:
            out.add(Deadline(after(a.scheduled_time_ms, a.schedule_to_close_timeout_ms),
                             "ACTIVITY_SCHEDULE_TO_CLOSE", rid, "", sid, 0))
        if a.next_attempt_time_ms is not None:
            out.add(Deadline(a.next_attempt_time_ms, "ACTIVITY_RETRY", rid, "", sid, a.attempt))
        elif a.started_time_ms is None:
            if a.schedule_to_start_timeout_ms is not None:
                out.add(Deadline(after(a.current_attempt_scheduled_time_ms, a.schedule_to_start_timeout_ms),
                                 "ACTIVITY_SCHEDULE_TO_START", rid, "", sid, a.attempt))
        else:
            out.add(Deadline(after(a.started_time_ms, a.start_to_close_timeout_ms), "ACTIVITY_START_TO_CLOSE", rid,
                             "", sid, a.attempt))
            if a.heartbeat_timeout_ms is not None:
                last = a.last_heartbeat_time_ms or a.started_time_ms
                out.add(Deadline(after(last, a.heartbeat_timeout_ms), "ACTIVITY_HEARTBEAT", rid, "", sid,
                                 a.attempt))
    if run.run_expiration_time_ms is not None:
        out.add(Deadline(run.run_expiration_time_ms, "WORKFLOW_RUN_TIMEOUT", rid))
    if run.execution_expiration_time_ms is not None:
        out.add(Deadline(run.execution_expiration_time_ms, "WORKFLOW_EXECUTION_TIMEOUT", rid))
    return out


def in_first_task_backoff(run: RunState, now_ms: int | None = None) -> bool:
    """A run waiting out the backoff its start asked for (continue-as-new with backoff): no task yet."""
    waiting = run.workflow_task is None and run.last_workflow_task_started_event_id == 0
    return waiting and run.execution_time_ms > (run.start_time_ms if now_ms is None else now_ms)


def timer_command(namespace: str, workflow_id: str, deadline: Deadline, now_ms: int, identity: str,
                  ) -> dict[str, object]:
    """The FireTimer command for a due deadline, as the Kafka shard and the in-memory engine both process it: its
    request id names the deadline, so a deadline fired twice (a retried batch) is recognised as one."""
    request_id = (f"timer/{deadline.run_id}/{deadline.kind}/{deadline.timer_id}/{deadline.scheduled_event_id}/"
                  f"{deadline.attempt}/{deadline.fire_at_ms}")
    return wire.command(namespace, workflow_id, fire_timer_body(deadline), run_id=deadline.run_id,
                        request_id=request_id, identity=identity, time_ms=now_ms)


def fire_timer_body(deadline: Deadline) -> tuple[str, dict[str, object]]:
    """The FireTimer command body for a due deadline."""
    return (wire.command_type("FireTimer"), {
        "kind": deadline.kind, "fire_at_ms": deadline.fire_at_ms, "timer_id": deadline.timer_id,
        "scheduled_event_id": deadline.scheduled_event_id, "attempt": deadline.attempt,
    })
