"""Deciders of what clients and other workflows ask of a running workflow: signal, cancel, terminate, query."""

from __future__ import annotations

from typing import Any

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.actions import DispatchQueryTask
from ostinato.streams.deciders.common import addressed_run, close_run, send, wake
from ostinato.streams.model import RunState
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]


def _not_running(w: Writer, run: RunState | None, external: Record | None, kind: str) -> Step:
    if run is not None and w.command["request_id"] in run.recent_request_ids:
        w.accept(run.run_id)  # a retried request that closed the run the first time
        return w.step
    if external is not None:
        _tell_origin(w, run, external, kind, failed_cause="EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND")
    if run is None:
        return w.reject("NOT_FOUND", f"workflow {w.workflow.workflow_id} (run {w.command['run_id'] or 'current'}) "
                                     "does not exist")
    return w.reject("ALREADY_CLOSED", f"run {run.run_id} of {run.workflow_id} is {run.status}", run.run_id)


def _tell_origin(w: Writer, run: RunState | None, external: Record, kind: str, failed_cause: str | None) -> None:
    """Tell the workflow that sent a signal or cancel whether it arrived (and at which run)."""
    target_run = run.run_id if run is not None else w.command["run_id"]
    send(w, external["namespace"], external["workflow_id"], external["run_id"],
         f"{w.command['request_id']}/result", (
             wire.command_type("ExternalRequestResultNotification"), {
                 "initiated_event_id": external["initiated_event_id"], "kind": kind,
                 "target": {"workflow_id": w.workflow.workflow_id, "run_id": target_run},
                 "failed_cause": failed_cause}))


def _outside_chain(run: RunState | None, first_execution_run_id: str) -> bool:
    return run is not None and bool(first_execution_run_id) and run.first_execution_run_id != first_execution_run_id


def signal(w: Writer, body: Record) -> Step:
    run = addressed_run(w)
    if run is None or not run.open:
        return _not_running(w, run, body["external"], "SIGNAL")
    return deliver_signal(w, run, {"signal_name": body["signal_name"], "input": body["input"],
                                   "header": body["header"]}, body["external"])


def deliver_signal(w: Writer, run: RunState, signal: Record, external: Record | None,
                   with_start: bool = False) -> Step:
    cmd = w.command
    def answer() -> None:
        if with_start:
            w.reply((wire.WORKFLOW_STARTED, {"run_id": run.run_id, "started": False}))
        else:
            w.accept(run.run_id)

    if cmd["request_id"] in run.recent_request_ids:
        answer()  # a retried signal: applied once already
        return w.step
    if run.signal_count >= w.config.limits.max_signals:
        if external is not None:
            _tell_origin(w, run, external, "SIGNAL", failed_cause="UNSPECIFIED")
        return w.reject("LIMIT_EXCEEDED", f"run {run.run_id} has received {run.signal_count} signals, the limit "
                                          "(max_signals); continue-as-new starts a fresh count")
    w.append(run.run_id, ev.WORKFLOW_EXECUTION_SIGNALED, {
        **signal, "identity": cmd["identity"], "external": external, "request_id": cmd["request_id"]})
    wake(w, run.run_id)
    answer()
    if external is not None:
        _tell_origin(w, run, external, "SIGNAL", failed_cause=None)
    return w.step


def request_cancel(w: Writer, body: Record) -> Step:
    run = addressed_run(w)
    external = body["external"]
    if _outside_chain(run, body["first_execution_run_id"]):
        return w.reject("NOT_FOUND", f"the current run of {w.workflow.workflow_id} is not of chain "
                                     f"{body['first_execution_run_id']}")
    if run is None or not run.open:
        return _not_running(w, run, external, "CANCEL")
    if not run.cancel_requested:
        w.append(run.run_id, ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED, {
            "reason": body["reason"], "external": external, "identity": w.command["identity"],
            "request_id": w.command["request_id"]})
        wake(w, run.run_id)
    w.accept(run.run_id)
    if external is not None:
        _tell_origin(w, run, external, "CANCEL", failed_cause=None)
    return w.step


def terminate(w: Writer, body: Record) -> Step:
    run = addressed_run(w)
    if _outside_chain(run, body["first_execution_run_id"]):
        return w.reject("NOT_FOUND", f"the current run of {w.workflow.workflow_id} is not of chain "
                                     f"{body['first_execution_run_id']}")
    if run is None or not run.open:
        return _not_running(w, run, None, "CANCEL")
    close_run(w, run.run_id, ev.WORKFLOW_EXECUTION_TERMINATED, {
        "reason": body["reason"], "details": body["details"], "identity": w.command["identity"],
        "request_id": w.command["request_id"]})
    w.accept(run.run_id)
    return w.step


def query(w: Writer, body: Record) -> Step:
    run = addressed_run(w)
    if run is None:
        return w.reject("NOT_FOUND", f"workflow {w.workflow.workflow_id} does not exist")
    partition = w.command["reply_partition"]
    if partition is None:
        return w.reject("INVALID_ARGUMENT", "a query needs reply_partition: its answer is the whole point")
    w.act(DispatchQueryTask(run.namespace, run.workflow_id, run.run_id, run.task_queue, w.command["request_id"],
                            partition, body))
    return w.step
