"""Deciders of updates: admit a request, then let the workflow's answer accept, complete or reject it.

An update is admitted into the run's state (not history: a rejected update must leave no event) and carried by the
run's next workflow task. When the run is idle that task is *speculative*: a transient task whose events are
written only if the workflow accepts something or commands anything, so a rejected update costs history nothing.
The answer accepts an update (AcceptUpdateCommand: UPDATE_ACCEPTED, the handler runs), rejects it
(`rejected_updates`: nothing written), and later completes it (CompleteUpdateCommand: UPDATE_COMPLETED). Callers
read the stage and outcome from the owner (`GET .../updates/{id}`), woken by its commits.
"""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.deadlines import in_first_task_backoff
from ostinato.streams.deciders.common import addressed_run, schedule_transient_task
from ostinato.streams.model import RunState
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]


def known(run: RunState, update_id: str) -> bool:
    """Whether the run has this update already (admitted, accepted, completed or recently rejected): the same id
    again joins it instead of running the handler twice."""
    return (update_id in run.updates or any(u["update_id"] == update_id for u in run.admitted_updates)
            or any(u["update_id"] == update_id for u in run.rejected_updates))


def limit_problem(run: RunState, w: Writer) -> str | None:
    limits = w.config.limits
    in_flight = len(run.admitted_updates) + sum(1 for u in run.updates.values() if not u.completed_event_id)
    if in_flight >= limits.max_updates_in_flight:
        return (f"run {run.run_id} has {in_flight} updates in flight, the limit (max_updates_in_flight); wait for "
                "some to complete")
    if len(run.updates) >= limits.max_updates:
        return (f"run {run.run_id} has accepted {len(run.updates)} updates, the limit (max_updates); "
                "continue-as-new starts a fresh count")
    return None


def update(w: Writer, body: Record) -> Step:
    run = addressed_run(w)
    chain = body["first_execution_run_id"]
    if run is None or (chain and run.first_execution_run_id != chain):
        return w.reject("NOT_FOUND", f"workflow {w.workflow.workflow_id} (run {w.command['run_id'] or 'current'}) "
                                     "does not exist")
    if not body["update_id"] or not body["name"]:
        return w.reject("INVALID_ARGUMENT", "an update needs update_id and name")
    if known(run, body["update_id"]):
        w.accept(run.run_id)  # the caller reads its stage and outcome from the owner
        return w.step
    if not run.open:
        return w.reject("ALREADY_CLOSED", f"run {run.run_id} of {run.workflow_id} is {run.status}: an update needs "
                                          "a running workflow", run.run_id)
    if (problem := limit_problem(run, w)) is not None:
        return w.reject("LIMIT_EXCEEDED", problem, run.run_id)
    admit(w, run.run_id, body)
    w.accept(run.run_id)
    return w.step


def admit(w: Writer, run_id: str, body: Record) -> None:
    """Keep the request in the run's state and get it to the workflow: in the next task, or in a speculative one
    now if none is in flight."""
    run = w.edit(run_id)
    run.admitted_updates = [*run.admitted_updates, {
        "update_id": body["update_id"], "name": body["name"], "input": body["input"], "header": body["header"],
        "admitted_time_ms": w.now_ms, "delivered_task": 0}]
    follow_up(w, run_id)


def follow_up(w: Writer, run_id: str) -> None:
    """A speculative task for updates no task has carried yet, if the run is idle."""
    run = w.run(run_id)
    if (run.open and run.workflow_task is None and not in_first_task_backoff(run, w.now_ms)
            and any(not u["delivered_task"] for u in run.admitted_updates)):
        schedule_transient_task(w, run_id, 1, speculative=True)


def accept(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    request = next(u for u in w.run(run_id).admitted_updates if u["update_id"] == c["update_id"])
    w.append(run_id, ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED, {
        "update_id": request["update_id"], "name": request["name"], "input": request["input"],
        "header": request["header"], "identity": w.command["identity"],
        "workflow_task_completed_event_id": completed_id})


def complete(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    accepted = w.run(run_id).updates[c["update_id"]]
    w.append(run_id, ev.WORKFLOW_EXECUTION_UPDATE_COMPLETED, {
        "update_id": c["update_id"], "accepted_event_id": accepted.accepted_event_id, "result": c["result"],
        "failure": c["failure"], "workflow_task_completed_event_id": completed_id})
