"""Deciders of schedule commands (create, update, patch, delete) and of a schedule's timer.

A schedule is a run of workflow id `ostinato-schedule:<id>` that never has a workflow task: its started event, then
SCHEDULE_* events. Its one deadline (streams/deadlines.py) is its next action time; firing it takes every action
due since the last one, inside the owner's transaction, so a restart or a shard move neither misses nor doubles one.
"""

from __future__ import annotations

from typing import Any

from ostinato.schemas import wire
from ostinato.schemas.topics import task_queue_problem
from ostinato.streams import events as ev
from ostinato.streams.actions import UpsertVisibility
from ostinato.streams.deciders.common import close_run, new_run_id
from ostinato.streams.model import RunState
from ostinato.streams.schedules import SCHEDULE_WORKFLOW_TYPE, schedule_workflow_id
from ostinato.streams.schedules import progress as pg
from ostinato.streams.schedules.spec import spec_problem, times_between
from ostinato.streams.schedules.timing import action_time, next_nominal
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]

MAX_ACTIONS_PER_STEP = 1_000  # a long outage is caught up on in steps of this many (the timer stays due)
MAX_BACKFILL_ACTIONS = 1_000  # per range, as Temporal bounds its buffer


def definition_problem(definition: Record) -> str | None:
    """Why a ScheduleDefinition cannot be used, or None."""
    action, policy, state = definition["action"], definition["policy"], definition["state"]
    if (problem := spec_problem(definition["spec"])) is not None:
        return problem
    if not action["workflow_id"] or not action["workflow_type"]:
        return "the action needs a workflow id and a workflow type"
    if (problem := task_queue_problem(action["task_queue"])) is not None:
        return problem
    if policy["catchup_window_ms"] < 0 or state["remaining_actions"] < 0:
        return "catchup window and remaining actions must not be negative"
    return None


def _schedule_run(w: Writer) -> RunState | None:
    run = w.workflow.current_run()
    return run if run is not None and run.open and run.schedule is not None else None


def _not_found(w: Writer) -> Step:
    return w.reject("NOT_FOUND", f"no schedule {w.workflow.workflow_id.split(':', 1)[-1]!r}")


def create(w: Writer, body: Record) -> Step:
    wf, cmd = w.workflow, w.command
    if schedule_workflow_id(body["schedule_id"]) != wf.workflow_id:
        return w.reject("INVALID_ARGUMENT", f"schedule {body['schedule_id']!r} is created through workflow id "
                                            f"{schedule_workflow_id(body['schedule_id'])!r}")
    retried = next((r.run_id for r in wf.runs.values() if r.start_request_id == cmd["request_id"]), None)
    if retried is not None:
        w.accept(retried)
        return w.step
    if _schedule_run(w) is not None or (wf.current is not None and wf.current.status == "RUNNING"):
        return w.reject("ALREADY_STARTED", f"schedule {body['schedule_id']!r} already exists")
    definition = body["schedule"]
    if (problem := definition_problem(definition)) is not None:
        return w.reject("INVALID_ARGUMENT", problem)
    run_id = new_run_id(wf.namespace, wf.workflow_id, cmd["request_id"], str(w.offset))
    w.append(run_id, ev.WORKFLOW_EXECUTION_STARTED, {
        "workflow_type": SCHEDULE_WORKFLOW_TYPE, "task_queue": definition["action"]["task_queue"],
        "first_execution_run_id": run_id, "identity": cmd["identity"], "request_id": cmd["request_id"]})
    w.append(run_id, ev.SCHEDULE_CREATED, {"schedule_id": body["schedule_id"], "schedule": definition,
                                           "identity": cmd["identity"], "request_id": cmd["request_id"]})
    w.act(UpsertVisibility(wf.namespace, wf.workflow_id, run_id))
    _manual(w, w.run(run_id), "UNSPECIFIED" if body["trigger_immediately"] else None, body["backfill"])
    w.accept(run_id)
    return w.step


def update(w: Writer, body: Record) -> Step:
    run = _schedule_run(w)
    if run is None:
        return _not_found(w)
    if (problem := definition_problem(body["schedule"])) is not None:
        return w.reject("INVALID_ARGUMENT", problem)
    w.append(run.run_id, ev.SCHEDULE_UPDATED, {"schedule": body["schedule"], "state": body["schedule"]["state"],
                                               "identity": w.command["identity"],
                                               "request_id": w.command["request_id"]})
    d = pg.draft(w.run(run.run_id))
    pg.drain(w, d)  # a new state may have unpaused it
    pg.commit(w, d, "UPDATED")
    w.accept(run.run_id)
    return w.step


def patch(w: Writer, body: Record) -> Step:
    """Pause or unpause (with a note), trigger now, backfill ranges: Temporal's SchedulePatch."""
    run = _schedule_run(w)
    if run is None:
        return _not_found(w)
    for backfill in body["backfill"]:
        if backfill["end_at_ms"] < backfill["start_at_ms"]:
            return w.reject("INVALID_ARGUMENT", "a backfill's end is before its start")
    assert run.schedule is not None
    state = run.schedule["definition"]["state"]
    if body["pause"] is not None or body["unpause"] is not None:
        paused = body["pause"] is not None
        note = body["pause"] if paused else body["unpause"]
        w.append(run.run_id, ev.SCHEDULE_UPDATED, {
            "schedule": None, "state": {**state, "paused": paused, "note": note or ""},
            "identity": w.command["identity"], "request_id": w.command["request_id"]})
    _manual(w, w.run(run.run_id), body["trigger_immediately"], body["backfill"], unpaused=body["unpause"] is not None)
    w.accept(run.run_id)
    return w.step


def _manual(w: Writer, run: RunState, trigger: str | None, backfills: list[Record], unpaused: bool = False) -> None:
    """Actions asked for by hand: trigger now (`trigger` is its overlap policy, UNSPECIFIED for the schedule's
    own; None: no trigger) and backfills (every spec time of each range, taken now)."""
    d = pg.draft(run)
    if unpaused:
        pg.drain(w, d)
    if trigger is not None:
        pg.take(w, d, w.now_ms, trigger, manual=True)
    for backfill in backfills:
        for nominal in times_between(d.definition["spec"], backfill["start_at_ms"], backfill["end_at_ms"],
                                     MAX_BACKFILL_ACTIONS):
            pg.take(w, d, nominal, backfill["overlap"], manual=True)
    pg.commit(w, d, "BACKFILL" if backfills else "TRIGGER")


def delete(w: Writer, body: Record) -> Step:
    """Close the schedule's run (TERMINATED): no more actions; runs it started go on, as in Temporal."""
    run = _schedule_run(w)
    if run is None:
        return _not_found(w)
    close_run(w, run.run_id, ev.WORKFLOW_EXECUTION_TERMINATED, {
        "reason": body["reason"] or "schedule deleted", "details": [], "identity": w.command["identity"],
        "request_id": w.command["request_id"]})
    w.accept(run.run_id)
    return w.step


def fire(w: Writer, run: RunState) -> None:
    """The schedule's timer: take every action due by now (missed if later than the catch-up window)."""
    d = pg.draft(run)
    info = run.schedule
    assert info is not None
    catchup = d.definition["policy"]["catchup_window_ms"]
    t = d.progress["last_processed_ms"]
    for _ in range(MAX_ACTIONS_PER_STEP):
        if d.state["paused"] or (d.state["limited_actions"] and d.state["remaining_actions"] <= 0):
            break
        nominal = next_nominal(info, t)
        if nominal is None or action_time(info, nominal) > w.now_ms:
            break
        if w.now_ms - nominal > catchup:
            d.progress["num_actions_missed_catchup_window"] += 1
        else:
            pg.take(w, d, nominal, None, manual=False)
        t = nominal
    d.progress["last_processed_ms"] = t
    d.changed = True
    pg.commit(w, d, "SPEC")


COMMANDS = {
    wire.command_type("CreateSchedule"): create,
    wire.command_type("UpdateSchedule"): update,
    wire.command_type("PatchSchedule"): patch,
    wire.command_type("DeleteSchedule"): delete,
}
