"""Deciders: one function per command, `(writer, body) -> Step`. They validate, then write events through the
writer (which applies them) and return actions. A command that cannot apply becomes a recorded rejection,
never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ostinato.schemas import wire
from ostinato.streams.config import Config
from ostinato.streams.model import Workflow
from ostinato.streams.schedules import schedule_id_of
from ostinato.streams.writer import HistoryReader, Step, Writer, no_history

Record = dict[str, Any]
Decider = Callable[[Writer, Record], Step]


def _deciders() -> dict[str, Decider]:
    from ostinato.streams import quarantine
    from ostinato.streams.deciders import (
        activities,
        notifications,
        reset,
        signals,
        start,
        timers,
        updates,
        workflow_task,
    )
    from ostinato.streams.schedules import deciders as schedules

    c = wire.COMMAND_PREFIX
    return {
        c + "StartWorkflowExecution": start.start,
        c + "SignalWithStartWorkflowExecution": start.signal_with_start,
        c + "SignalWorkflowExecution": signals.signal,
        c + "RequestCancelWorkflowExecution": signals.request_cancel,
        c + "TerminateWorkflowExecution": signals.terminate,
        c + "QueryWorkflow": signals.query,
        c + "RespondWorkflowTaskCompleted": workflow_task.completed,
        c + "RespondWorkflowTaskFailed": workflow_task.failed,
        c + "RecordActivityTaskStarted": activities.started,
        c + "RecordActivityTaskHeartbeat": activities.heartbeat,
        c + "RespondActivityTaskCompleted": activities.completed,
        c + "RespondActivityTaskFailed": activities.failed,
        c + "RespondActivityTaskCanceled": activities.canceled,
        c + "FireTimer": timers.fire,
        c + "ChildWorkflowExecutionStartedNotification": notifications.child_started,
        c + "StartChildWorkflowExecutionFailedNotification": notifications.child_start_failed,
        c + "ChildWorkflowExecutionClosedNotification": notifications.child_closed,
        c + "ExternalRequestResultNotification": notifications.external_result,
        c + "ArchivalCompleted": notifications.archival_completed,
        c + "DeleteWorkflowExecution": notifications.delete,
        c + "RedriveWorkflowExecution": quarantine.redrive,
        c + "UpdateWorkflowExecution": updates.update,
        c + "UpdateWithStartWorkflowExecution": start.update_with_start,
        c + "ResetWorkflowExecution": reset.reset,
        **schedules.COMMANDS,
    }


_DECIDERS: dict[str, Decider] = {}
# What clients send to a workflow: refused for a schedule's own run, which only the schedule commands change.
_CLIENT_COMMANDS = frozenset(wire.command_type(n) for n in (
    "StartWorkflowExecution", "SignalWithStartWorkflowExecution", "SignalWorkflowExecution",
    "RequestCancelWorkflowExecution", "TerminateWorkflowExecution", "QueryWorkflow", "UpdateWorkflowExecution",
    "UpdateWithStartWorkflowExecution", "ResetWorkflowExecution"))


def decide(workflow: Workflow, command: Record, now_ms: int, config: Config, offset: int = 0,
           history: HistoryReader = no_history) -> Step:
    """Process one command (an `ostinato.command.Command` record) for `workflow`, at the owner's time `now_ms`.

    `offset` is the command's position in its commands partition: unique for ever within the shard and the same
    when the command is processed again after an abort, so ids derived from it (run ids) are unique and stable.
    `history` reads a run's recorded history (the reset copies it). `workflow` is changed in place; if this
    raises (a bug, never bad input), the caller must discard it.
    """
    if not _DECIDERS:
        _DECIDERS.update(_deciders())
    writer = Writer(workflow, now_ms, config, command, offset, history)
    name, body = command["body"]
    decider = _DECIDERS.get(name)
    if decider is None:
        return writer.reject("UNKNOWN_TYPE", f"no decider for {name}")
    if (command["namespace"], command["workflow_id"]) != (workflow.namespace, workflow.workflow_id):
        return writer.reject("WRONG_SHARD", "command addressed to another workflow than the one given")
    if name in _CLIENT_COMMANDS and schedule_id_of(workflow.workflow_id) is not None \
            and not body.get("external") and not body.get("parent"):
        return writer.reject("INVALID_ARGUMENT", f"{workflow.workflow_id} is the run of schedule "
                             f"{schedule_id_of(workflow.workflow_id)!r}: use the schedules API (client."
                             "get_schedule_handle, ostinato schedule ...) to change it")
    step = decider(writer, body)
    if step.rejection is not None or step is not writer.step:
        return step  # a rejection changes nothing; a decider that composes other decisions (redrive) is done
    return writer.finish()
