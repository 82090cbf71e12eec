"""The reset decider (Temporal's ResetWorkflowExecution): a new run of the workflow whose history is a copy of a run's
up to a completed workflow task, then a failed task (cause RESET_WORKFLOW), the signals received after the cut, and
a fresh workflow task, so the workflow continues from that point with whatever code its workers run now. Updates
accepted after the cut are admitted again (carried by that task), as Temporal re-applies signals and updates.

```
  base run:  1 STARTED ... k WFT_STARTED  k+1 WFT_COMPLETED ... SIGNALED ... (terminated if still open)
                               │ cut
  new run:   1 STARTED ... k WFT_STARTED  k+1 WFT_FAILED(RESET_WORKFLOW)  SIGNALED ...  WFT_SCHEDULED
```

Everything is written by this one command, in the owner's one transaction: the base's termination, the copied
events (each applied, so the new run's state is the replay of its history), the new task. The copy is read through
the writer's history reader, the store's committed log, so the decision is still a function of the log. A long
history becomes many history records in that transaction, each under the record limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.actions import DispatchActivityTask, UpsertVisibility
from ostinato.streams.appliers import ReplayError, replay
from ostinato.streams.deciders.common import addressed_run, close_run, new_run_id, schedule_workflow_task
from ostinato.streams.failures import failure
from ostinato.streams.model import Workflow
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]

FIRST, LAST = "FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK"


def reset(w: Writer, body: Record) -> Step:
    base = addressed_run(w)
    if base is None:
        return w.reject("NOT_FOUND", f"workflow {w.workflow.workflow_id} (run {w.command['run_id'] or 'current'}) "
                                     "does not exist")
    ns, wf = base.namespace, base.workflow_id
    new_id = new_run_id(ns, wf, base.run_id, "reset", w.command["request_id"])
    if new_id in w.workflow.runs:  # a retried request: reset once already
        w.accept(new_id)
        return w.step
    history = w.history(base)
    point = reset_point(history, body["event_id"], body["reset_type"])
    if isinstance(point, str):
        return w.reject("INVALID_ARGUMENT", point)
    cut = point
    copied = list(history[:cut])
    problem = _unsupported(Workflow(ns, wf), new_id, copied)
    if problem is not None:
        return w.reject("INVALID_ARGUMENT", problem)
    reason = body["reason"] or "reset"
    identity, request_id = w.command["identity"], w.command["request_id"]
    current = w.workflow.current_run()
    if current is not None and current.open:
        # The new run inherits the base's parent (its copied start names it): when the run it replaces has the
        # same parent, the parent (or schedule) hears of the new run's close, not of this termination.
        close_run(w, current.run_id, ev.WORKFLOW_EXECUTION_TERMINATED, {
            "reason": f"reset to run {new_id}: {reason}", "details": [], "identity": identity,
            "request_id": request_id}, notify_parent=current.parent != base.parent)
    w.edit(base.run_id).reset_run_id = new_id
    for event in copied:
        w.copy(new_id, event)
    task = w.run(new_id).workflow_task
    assert task is not None  # the cut is a task's STARTED (reset_point)
    w.append(new_id, ev.WORKFLOW_TASK_FAILED, {
        "scheduled_event_id": task.scheduled_event_id, "started_event_id": cut, "cause": "RESET_WORKFLOW",
        "failure": failure(f"reset from run {base.run_id}: {reason}"), "identity": identity,
        "base_run_id": base.run_id, "new_run_id": new_id})
    if body["reapply_signals"]:  # Temporal's default reapply type: signals and updates
        readmitted: list[Record] = []
        for event in history[cut:]:
            if event["event_type"] == ev.WORKFLOW_EXECUTION_SIGNALED:
                w.append(new_id, ev.WORKFLOW_EXECUTION_SIGNALED, dict(ev.attributes(event)))
            elif event["event_type"] == ev.WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                # An update the base run accepted after the cut is admitted again (state, not history, as any
                # admitted update), so the new code runs its handler; its caller's wait ended with the base run.
                a = ev.attributes(event)
                readmitted.append({"update_id": a["update_id"], "name": a["name"], "input": a["input"],
                                   "header": a["header"], "admitted_time_ms": w.now_ms, "delivered_task": 0})
        if readmitted:
            w.edit(new_id).admitted_updates = [*w.run(new_id).admitted_updates, *readmitted]
    run = w.run(new_id)
    for activity in sorted(run.activities.values(), key=lambda a: a.scheduled_event_id):
        w.act(DispatchActivityTask(ns, wf, new_id, activity.scheduled_event_id, activity.attempt))
    schedule_workflow_task(w, new_id)
    w.act(UpsertVisibility(ns, wf, new_id))
    w.accept(new_id)
    return w.step


def reset_point(history: Sequence[Record], event_id: int, reset_type: str) -> int | str:
    """The id of the WORKFLOW_TASK_STARTED the new run's history ends with, or why there is none.

    The point is a WORKFLOW_TASK_COMPLETED (by id, or the first or last one): the run is cut just after that task's
    STARTED, so the task's own answer and everything after it are the part the new code decides again.
    """
    completed = [i for i in range(len(history)) if history[i]["event_type"] == ev.WORKFLOW_TASK_COMPLETED]
    if event_id:
        if not 0 < event_id <= len(history) or history[event_id - 1]["event_type"] != ev.WORKFLOW_TASK_COMPLETED:
            return f"event {event_id} is not a WORKFLOW_TASK_COMPLETED event of the run"
        index = event_id - 1
    elif reset_type in (FIRST, LAST):
        if not completed:
            return "the run has no completed workflow task to reset to"
        index = completed[0] if reset_type == FIRST else completed[-1]
    else:
        return "give an event id or a reset type (FIRST_WORKFLOW_TASK or LAST_WORKFLOW_TASK)"
    for i in range(index - 1, -1, -1):
        if history[i]["event_type"] == ev.WORKFLOW_TASK_STARTED:
            return int(history[i]["event_id"])
    return f"no WORKFLOW_TASK_STARTED precedes event {index + 1}"


def _unsupported(scratch: Workflow, run_id: str, copied: list[Record]) -> str | None:
    """Why the copy cannot make a run (replayed on a scratch workflow first: deciders validate before they write).

    Children and external requests in flight at the cut are refused: their answers would go to the base run, and
    starting them again would start a second child with the same id."""
    try:
        replay(scratch, [(run_id, event) for event in copied])
    except ReplayError as exc:
        return f"the run's history up to the reset point does not replay: {exc}"
    run = scratch.runs[run_id]
    if run.children or run.external_requests:
        return ("the run has child workflows or external signals/cancellations in flight at the reset point; "
                "reset to an earlier or later workflow task")
    return None
