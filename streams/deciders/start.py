"""Deciders that start runs: start, signal-with-start, and the id reuse and conflict policies between them."""

from __future__ import annotations

from typing import Any

from ostinato.schemas import wire
from ostinato.schemas.topics import task_queue_problem
from ostinato.streams import cron
from ostinato.streams import events as ev
from ostinato.streams.actions import UpsertVisibility
from ostinato.streams.deadlines import after, fitting
from ostinato.streams.deciders.common import close_run, new_run_id, schedule_workflow_task, send
from ostinato.streams.search_attributes import checked
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]

_FAILED_ONLY_ALLOWED = frozenset({"FAILED", "CANCELED", "TERMINATED", "TIMED_OUT"})


def start(w: Writer, body: Record) -> Step:
    return _start(w, body, signal=None)


def signal_with_start(w: Writer, body: Record) -> Step:
    from ostinato.streams.deciders.signals import deliver_signal

    current = w.workflow.current_run()
    signal = {"signal_name": body["signal_name"], "input": body["signal_input"], "header": body["signal_header"]}
    if current is not None and current.open:
        return deliver_signal(w, current, signal, external=None, with_start=True)
    return _start(w, body["start"], signal=signal)


def update_with_start(w: Writer, body: Record) -> Step:
    """Update the running workflow, or start it with the update admitted, in one command: the update reaches the
    new run's first workflow task. Temporal's rules: the start's id conflict policy must be USE_EXISTING (update
    a running workflow) or FAIL (refuse one)."""
    from ostinato.streams.deciders import updates

    start_body, update = body["start"], body["update"]
    conflict = start_body["id_conflict_policy"]
    if conflict not in ("USE_EXISTING", "FAIL"):
        return w.reject("INVALID_ARGUMENT", "update-with-start needs id_conflict_policy USE_EXISTING or FAIL, not "
                                            f"{conflict}")
    if not update["update_id"] or not update["name"]:
        return w.reject("INVALID_ARGUMENT", "an update needs update_id and name")
    if start_body["parent"] is not None:
        return w.reject("INVALID_ARGUMENT", "update-with-start comes from a client, never a parent's child start")
    if start_body.get("cron_schedule"):  # its first run waits for the schedule: the update would wait with it
        return w.reject("INVALID_ARGUMENT", "update-with-start cannot start a cron workflow (as in Temporal)")
    current = w.workflow.current_run()
    retried = next((r for r in w.workflow.runs.values() if r.start_request_id == w.command["request_id"]), None)
    target = retried or (current if current is not None and current.open and conflict == "USE_EXISTING" else None)
    if target is not None:
        if not updates.known(target, update["update_id"]):
            if not target.open:
                return w.reject("ALREADY_CLOSED", f"run {target.run_id} of {target.workflow_id} is {target.status}: "
                                                  "an update needs a running workflow", target.run_id)
            if (problem := updates.limit_problem(target, w)) is not None:
                return w.reject("LIMIT_EXCEEDED", problem, target.run_id)
            updates.admit(w, target.run_id, update)
        w.reply((wire.WORKFLOW_STARTED, {"run_id": target.run_id, "started": retried is not None}))
        return w.step
    return _start(w, start_body, signal=None, update=update)


def _reuse_forbidden(reuse: str, closed_status: str) -> bool:
    if reuse == "REJECT_DUPLICATE":
        return True
    return reuse == "ALLOW_DUPLICATE_FAILED_ONLY" and closed_status not in _FAILED_ONLY_ALLOWED


def _invalid(body: Record) -> str | None:
    if not body["workflow_type"]:
        return "workflow_type is required"
    if (problem := task_queue_problem(body["task_queue"])) is not None:
        return problem
    for name in ("execution_timeout_ms", "run_timeout_ms"):
        if body[name] is not None and body[name] <= 0:
            return f"{name} must be positive"
    if body["task_timeout_ms"] < 0:
        return "task_timeout_ms must not be negative"
    if body["cron_schedule"]:
        try:
            cron.parse(body["cron_schedule"])
        except cron.CronError as error:
            return str(error)
    return None


def _start(w: Writer, body: Record, signal: Record | None, update: Record | None = None) -> Step:
    wf, cmd = w.workflow, w.command
    parent = body["parent"]
    current = wf.current
    retried = next((r.run_id for r in wf.runs.values() if r.start_request_id == cmd["request_id"]), None)
    if retried is not None:  # a retried start, perhaps of a run that is no longer current
        w.reply((wire.WORKFLOW_STARTED, {"run_id": retried, "started": True}))
        return w.step
    if (problem := _invalid(body)) is not None:
        return _refuse(w, body, "INVALID_ARGUMENT", problem)
    problem, search_attributes = checked(body["search_attributes"], w.config.search_attributes, wf.namespace)
    if problem is not None:
        return _refuse(w, body, "INVALID_ARGUMENT", problem)
    reuse = body["id_reuse_policy"] if body["id_reuse_policy"] != "UNSPECIFIED" else "ALLOW_DUPLICATE"
    conflict = body["id_conflict_policy"] if body["id_conflict_policy"] != "UNSPECIFIED" else "FAIL"
    if reuse == "TERMINATE_IF_RUNNING":
        conflict = "TERMINATE_EXISTING"
    if current is not None and current.status == "RUNNING":
        if conflict == "USE_EXISTING" and parent is None:
            w.reply((wire.WORKFLOW_STARTED, {"run_id": current.run_id, "started": False}))
            return w.step
        if conflict != "TERMINATE_EXISTING":
            return _refuse(w, body, "ALREADY_STARTED",
                           f"workflow {wf.workflow_id} is already running as run {current.run_id}", current.run_id)
        close_run(w, current.run_id, ev.WORKFLOW_EXECUTION_TERMINATED, {
            "reason": "terminated by a new start (id conflict policy)", "identity": cmd["identity"],
            "request_id": cmd["request_id"]})
    elif current is not None and _reuse_forbidden(reuse, current.status):
        return _refuse(w, body, "ALREADY_STARTED", f"workflow {wf.workflow_id} already ran ({current.status}) and "
                                                   f"the id reuse policy {reuse} forbids another run", current.run_id)
    now = w.now_ms
    # Unique for ever (archives are keyed by it: the command's offset never repeats in its shard), yet a pure
    # function of the command, so processing it again after an aborted transaction gives the same id.
    run_id = new_run_id(wf.namespace, wf.workflow_id, cmd["request_id"], str(w.offset))
    timeout = body["task_timeout_ms"] or w.config.default_task_timeout_ms
    start_run(w, run_id, {
        "workflow_type": body["workflow_type"], "task_queue": body["task_queue"], "input": body["input"],
        "execution_timeout_ms": body["execution_timeout_ms"],
        "run_timeout_ms": None if body["run_timeout_ms"] is None else fitting(now, body["run_timeout_ms"]),
        "task_timeout_ms": min(timeout, w.config.max_task_timeout_ms), "retry_policy": body["retry_policy"],
        "memo": body["memo"], "search_attributes": search_attributes, "header": body["header"],
        "parent": parent, "first_execution_run_id": run_id,
        "execution_expiration_time_ms": None if body["execution_timeout_ms"] is None
        else after(now, body["execution_timeout_ms"]),
        "identity": cmd["identity"], "request_id": cmd["request_id"], "cron_schedule": body["cron_schedule"],
        # A cron workflow's first run waits for the schedule's next time, as every later run does.
        "first_workflow_task_backoff_ms": cron.backoff_ms(body["cron_schedule"], now) if body["cron_schedule"] else 0,
    }, signal, update)
    w.reply((wire.WORKFLOW_STARTED, {"run_id": run_id, "started": True}))
    if parent is not None:
        send(w, parent["namespace"], parent["workflow_id"], parent["run_id"], f"{run_id}/started", (
            wire.command_type("ChildWorkflowExecutionStartedNotification"), {
                "initiated_event_id": parent["initiated_event_id"],
                "child": {"workflow_id": wf.workflow_id, "run_id": run_id}, "workflow_type": body["workflow_type"]}))
    return w.step


def start_run(w: Writer, run_id: str, attrs: Record, signal: Record | None = None,
              update: Record | None = None) -> None:
    """Write a run's first events and dispatch its first workflow task (carrying `update`, admitted first)."""
    w.append(run_id, ev.WORKFLOW_EXECUTION_STARTED, attrs)
    if signal is not None:
        w.append(run_id, ev.WORKFLOW_EXECUTION_SIGNALED, {**signal, "identity": w.command["identity"],
                                                          "request_id": w.command["request_id"]})
    if update is not None:
        w.edit(run_id).admitted_updates = [{
            "update_id": update["update_id"], "name": update["name"], "input": update["input"],
            "header": update["header"], "admitted_time_ms": w.now_ms, "delivered_task": 0}]
    if not attrs.get("first_workflow_task_backoff_ms"):  # otherwise the WORKFLOW_BACKOFF deadline schedules it
        schedule_workflow_task(w, run_id)
    w.act(UpsertVisibility(w.workflow.namespace, w.workflow.workflow_id, run_id))


def _refuse(w: Writer, body: Record, code: str, message: str, existing_run_id: str = "") -> Step:
    parent = body["parent"]
    if parent is not None:  # the parent waits for word of its child, not a reply
        send(w, parent["namespace"], parent["workflow_id"], parent["run_id"],
             f"{w.command['request_id']}/start-failed", (
                 wire.command_type("StartChildWorkflowExecutionFailedNotification"), {
                     "initiated_event_id": parent["initiated_event_id"], "workflow_id": w.workflow.workflow_id,
                     "workflow_type": body["workflow_type"],
                     "cause": "WORKFLOW_ALREADY_EXISTS" if code == "ALREADY_STARTED" else "UNSPECIFIED"}))
        rejected = {"code": code, "message": message, "existing_run_id": existing_run_id}
        w.step.rejection = rejected
        return w.step
    return w.reject(code, message, existing_run_id)
