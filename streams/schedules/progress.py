"""Taking a schedule's actions: overlap policies, buffers, limited actions, and what an action's run reports back.

A `Draft` is a working copy of the schedule's state and progress; `commit` writes it as one SCHEDULE_PROGRESSED
event (whose applier sets it), together with the start, cancel and terminate commands sent on the way. Each action
starts workflow `<action workflow id>-<nominal time>` with the schedule as its parent (ParentExecutionInfo with
initiated_event_id 0), so the run's shard reports its start and its close back here, as it does to a parent: that
is what the overlap policies and `pause_on_failure` decide on.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.deciders.common import send
from ostinato.streams.model import RunState
from ostinato.streams.schedules.spec import action_workflow_id
from ostinato.streams.writer import Writer

Record = dict[str, Any]

RECENT_ACTIONS = 10  # Temporal's describe shows the last ten
_FAILURES = frozenset({"FAILED", "TIMED_OUT"})  # what pauses a schedule with pause_on_failure


@dataclass
class Draft:
    run: RunState
    state: Record
    progress: Record
    started: list[Record] = field(default_factory=list)
    changed: bool = False

    @property
    def definition(self) -> Record:
        info = self.run.schedule
        assert info is not None
        definition: Record = info["definition"]
        return definition

MAX_BUFFERED = 1_000  # actions waiting behind a running one (BUFFER_ALL); beyond, they count as skipped


def draft(run: RunState) -> Draft:
    info = run.schedule
    assert info is not None, f"run {run.run_id} is no schedule"
    return Draft(run, dict(info["definition"]["state"]), copy.deepcopy(info["progress"]))


def commit(w: Writer, d: Draft, cause: str) -> None:
    if d.changed:
        w.append(d.run.run_id, ev.SCHEDULE_PROGRESSED, {"state": d.state, "progress": d.progress,
                                                        "started": d.started, "cause": cause})


def overlap_of(d: Draft, overlap: str | None) -> str:
    """The overlap policy an action goes by: its own (trigger, backfill), else the schedule's, else SKIP."""
    for choice in (overlap, d.definition["policy"]["overlap"]):
        if choice and choice != "UNSPECIFIED":
            return choice
    return "SKIP"


def take(w: Writer, d: Draft, nominal_ms: int, overlap: str | None, manual: bool) -> None:
    """The action due at `nominal_ms`, taken now: started, buffered or skipped as the overlap policy says.
    Actions of the spec count against limited actions; manual ones (trigger, backfill) do not."""
    limited = not manual and d.state["limited_actions"]
    if limited and d.state["remaining_actions"] <= 0:
        return
    d.changed = True
    policy = overlap_of(d, overlap)
    buffered = {"schedule_time_ms": nominal_ms, "actual_time_ms": w.now_ms, "overlap": policy}
    full = len(d.progress["buffered"]) >= MAX_BUFFERED  # Temporal's bound: the state record must stay small
    if d.progress["running"] and (policy == "SKIP" or (policy == "BUFFER_ONE" and d.progress["buffered"])
                                  or (policy == "BUFFER_ALL" and full)):
        d.progress["num_actions_skipped_overlap"] += 1  # skipped: it does not count against limited actions
        return
    if limited:
        d.state["remaining_actions"] -= 1
    if not d.progress["running"] or policy == "ALLOW_ALL":
        _start(w, d, nominal_ms)
    elif policy in ("BUFFER_ONE", "BUFFER_ALL"):
        d.progress["buffered"].append(buffered)
    else:  # CANCEL_OTHER, TERMINATE_OTHER: stop what runs, and start this one once it has closed
        _stop_running(w, d, policy)
        d.progress["num_actions_skipped_overlap"] += len(d.progress["buffered"])
        d.progress["buffered"] = [buffered]


def _start(w: Writer, d: Draft, nominal_ms: int) -> None:
    action, run = d.definition["action"], d.run
    workflow_id = action_workflow_id(action["workflow_id"], nominal_ms)
    result = {"schedule_time_ms": nominal_ms, "actual_time_ms": w.now_ms, "workflow_id": workflow_id, "run_id": "",
              "status": "RUNNING"}
    progress = d.progress
    progress["num_actions"] += 1
    progress["running"].append(dict(result))
    progress["recent_actions"] = [*progress["recent_actions"], dict(result)][-RECENT_ACTIONS:]
    d.started.append(dict(result))
    d.changed = True
    # Numbered by the schedule's count of actions: unique even when two actions share a nominal time (a trigger).
    send(w, run.namespace, workflow_id, "", f"{run.run_id}/action/{progress['num_actions']}", (
        wire.command_type("StartWorkflowExecution"), {
            "workflow_type": action["workflow_type"], "task_queue": action["task_queue"], "input": action["input"],
            "execution_timeout_ms": action["execution_timeout_ms"], "run_timeout_ms": action["run_timeout_ms"],
            "task_timeout_ms": action["task_timeout_ms"], "id_reuse_policy": "ALLOW_DUPLICATE",
            "id_conflict_policy": "FAIL", "retry_policy": action["retry_policy"], "memo": action["memo"],
            "search_attributes": action["search_attributes"], "header": action["header"], "cron_schedule": "",
            "parent": {"namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run.run_id,
                       "initiated_event_id": 0, "parent_close_policy": "ABANDON"}}))


def _stop_running(w: Writer, d: Draft, policy: str) -> None:
    run = d.run
    for action in d.progress["running"]:
        request = f"{run.run_id}/stop/{action['workflow_id']}/{d.progress['num_actions']}"
        reason = f"schedule {run.schedule and run.schedule['schedule_id']}: overlap policy {policy}"
        if policy == "CANCEL_OTHER":
            body: Record = {"reason": reason, "external": None, "first_execution_run_id": action["run_id"]}
            send(w, run.namespace, action["workflow_id"], "", request,
                 (wire.command_type("RequestCancelWorkflowExecution"), body))
        else:
            body = {"reason": reason, "details": [], "first_execution_run_id": action["run_id"]}
            send(w, run.namespace, action["workflow_id"], "", request,
                 (wire.command_type("TerminateWorkflowExecution"), body))


def drain(w: Writer, d: Draft) -> None:
    """Start buffered actions while nothing runs (one at a time: each waits for the one before to close)."""
    while d.progress["buffered"] and not d.progress["running"] and not d.state["paused"]:
        first = d.progress["buffered"].pop(0)
        _start(w, d, first["schedule_time_ms"])


def _find(d: Draft, workflow_id: str) -> Record | None:
    return next((a for a in d.progress["running"] if a["workflow_id"] == workflow_id), None)


def _set_recent(d: Draft, workflow_id: str, run_id: str, status: str) -> None:
    for action in d.progress["recent_actions"]:
        if action["workflow_id"] == workflow_id and action["status"] == "RUNNING":
            action["run_id"] = action["run_id"] or run_id
            action["status"] = status


def action_started(w: Writer, run: RunState, body: Record) -> None:
    """An action's run started (its shard reports it): remember the run id."""
    d = draft(run)
    child = body["child"]
    action = _find(d, child["workflow_id"])
    if action is None:
        return
    action["run_id"] = child["run_id"]
    _set_recent(d, child["workflow_id"], child["run_id"], "RUNNING")
    d.changed = True
    commit(w, d, "STARTED")


def action_closed(w: Writer, run: RunState, body: Record) -> None:
    """An action's run (or the last of its chain) closed: free its place, maybe pause, start what was buffered."""
    d = draft(run)
    child = body["child"]
    action = _find(d, child["workflow_id"])
    if action is None:
        return
    d.progress["running"].remove(action)
    _set_recent(d, child["workflow_id"], child["run_id"], body["status"])
    if body["status"] in _FAILURES and d.definition["policy"]["pause_on_failure"]:
        d.state["paused"] = True
        d.state["note"] = f"paused: action {child['workflow_id']} {body['status'].lower().replace('_', ' ')}"
    d.changed = True
    drain(w, d)
    commit(w, d, "CLOSED")


def action_start_failed(w: Writer, run: RunState, body: Record) -> None:
    """An action could not start (its workflow id is taken): it ran nowhere; go on with what was buffered."""
    d = draft(run)
    action = _find(d, body["workflow_id"])
    if action is None:
        return
    d.progress["running"].remove(action)
    _set_recent(d, body["workflow_id"], "", "START_FAILED")
    d.changed = True
    drain(w, d)
    commit(w, d, "START_FAILED")
