"""The one interpreter of the core's actions (STYLE.md 4): what each action becomes, written once.

Both shells, the Kafka shard (`services/history/shard.py`) and the in-memory engine (`streams/engine.py`), call
`perform` for every action of a decided step, inside the same transaction (or its in-memory equivalent) as the
step's events. Which records an action yields, and from which state and history, is decided here; the shell's
`Outbox` only says where a record goes (a topic and partition, or an in-memory queue) and how its stores change.
A new action is added here, and in the `Outbox` protocol if it needs a new kind of output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ostinato.schemas import wire
from ostinato.streams import records, routing
from ostinato.streams.actions import (
    Action,
    Archive,
    CancelTimer,
    Deadline,
    DeleteRun,
    DispatchActivityTask,
    DispatchQueryTask,
    DispatchWorkflowTask,
    Publish,
    Reply,
    ScheduleTimer,
    SendCommand,
    UpsertVisibility,
)
from ostinato.streams.config import Config
from ostinato.streams.model import RunState, Workflow

Record = dict[str, Any]


class RecordTooLarge(Exception):
    """A record over the limit Kafka enforces (`schemas.topics.MAX_RECORD_BYTES`). An `Outbox` raises it before it
    writes anything, so the command that caused it can be rejected alone (`TOO_LARGE`)."""

    def __init__(self, topic: str, size: int, limit: int) -> None:
        super().__init__(f"a {topic} record of {size} bytes exceeds the {limit}-byte record limit")
        self.size = size
        self.limit = limit


class EgressRefused(Exception):
    """A published record's topic cannot take it (it does not exist, or it is one of the engine's own). An `Outbox`
    raises it before it writes anything; the command is kept in its run (`EGRESS_REFUSED`) until an operator creates
    the topic and redrives it."""


class Outbox(Protocol):
    """Where a shell puts what the actions of one step produce. Records are given by type name (`schemas.wire`)
    and content; the shell encodes and addresses them, and raises `RecordTooLarge` for one over the limit."""

    def config(self, namespace: str) -> Config:
        """The settings that apply to runs of `namespace`."""
        ...

    def history(self, run: RunState) -> Sequence[Record]:
        """The run's history so far, including this step's events: event `n` at index `n - 1`."""
        ...

    def history_size(self, run: RunState) -> int:
        """The run's history in encoded bytes, including this step's events."""
        ...

    def command(self, command: Record) -> None:
        """An `ostinato.command.Command` for the shard of its workflow (maybe another shard)."""
        ...

    def reply(self, reply_partition: int, request_id: str, reply: Record) -> None:
        """An `ostinato.reply.Reply` on the replies partition where its sender waits."""
        ...

    def workflow_task(self, task_queue: str, namespace: str, workflow_id: str, type_name: str, task: Record) -> None:
        """A record for the queue's workflow task topic (a WorkflowTask or a QueryTask), keyed by workflow."""
        ...

    def activity_task(self, task_queue: str, namespace: str, workflow_id: str, activity_id: str,
                      task: Record) -> None:
        """An ActivityTask for the queue's activity topic, keyed by activity."""
        ...

    def visibility(self, run: RunState, record: Record) -> None:
        """The run's searchable summary."""
        ...

    def timer(self, namespace: str, workflow_id: str, deadline: Deadline, scheduled: bool) -> None:
        """Put the deadline into the timer index (`scheduled`) or take it out."""
        ...

    def delete_run(self, namespace: str, workflow_id: str, run_id: str) -> None:
        """Remove a closed run's history and visibility (its state goes with the step's changelog)."""
        ...

    def publish(self, action: Publish) -> None:
        """Produce a record a workflow published to its topic (in the transaction that records it)."""
        ...

    def archive(self, namespace: str, workflow_id: str, run_id: str) -> None:
        """A closed run should be archived before it is deleted."""
        ...


def perform(workflow: Workflow | None, action: Action, outbox: Outbox) -> None:
    """Carry out one action into `outbox`. `workflow` is the workflow the step was about (None for an answer
    given outside any workflow, such as a malformed command's rejection)."""
    if isinstance(action, Reply):
        reply = records.reply_record(action)
        if action.eager_activities or action.eager_workflow_task is not None:
            if workflow is None:
                raise ValueError("a reply handing over work needs the workflow it belongs to")
            reply["activity_tasks"] = _eager_tasks(workflow, action, outbox)
            reply["workflow_task"] = _eager_workflow_task(workflow, action.eager_workflow_task, outbox)
        _reply_within_limit(action, reply, outbox)
    elif isinstance(action, SendCommand):
        outbox.command(action.command)
    elif isinstance(action, ScheduleTimer | CancelTimer):
        outbox.timer(action.namespace, action.workflow_id, action.deadline, isinstance(action, ScheduleTimer))
    elif isinstance(action, DeleteRun):
        outbox.delete_run(action.namespace, action.workflow_id, action.run_id)
    elif isinstance(action, Archive):
        outbox.archive(action.namespace, action.workflow_id, action.run_id)
    elif isinstance(action, Publish):
        outbox.publish(action)
    else:
        if workflow is None:
            raise ValueError(f"{type(action).__name__} needs the workflow it is about")
        _perform_on_run(workflow, action, outbox)


def _reply_within_limit(action: Reply, reply: Record, outbox: Outbox) -> None:
    """A reply handing over work must fit one record: first the eager workflow task goes without its events (the
    worker reads them from history, as for the topic), then the eager activities are left out (already started
    for the worker, they retry after their start-to-close timeout). The answer itself always goes."""
    try:
        outbox.reply(action.reply_partition, action.request_id, reply)
        return
    except RecordTooLarge:
        if not reply.get("activity_tasks") and reply.get("workflow_task") is None:
            raise
    task = reply.get("workflow_task")
    if task is not None:
        reply["workflow_task"] = records.without_events(task, action.eager_workflow_task is not None
                                                        and action.eager_workflow_task.transient)
        try:
            outbox.reply(action.reply_partition, action.request_id, reply)
            return
        except RecordTooLarge:
            pass
    reply["activity_tasks"] = []
    outbox.reply(action.reply_partition, action.request_id, reply)


def _eager_tasks(workflow: Workflow, action: Reply, outbox: Outbox) -> list[Record]:
    """The ActivityTask records of the activities started for the replying worker, built as for the topic."""
    tasks = []
    for eager in action.eager_activities:
        run = workflow.runs.get(eager.run_id)
        if run is None:
            continue
        dispatch = DispatchActivityTask(run.namespace, run.workflow_id, run.run_id, eager.scheduled_event_id,
                                        eager.attempt)
        task = records.activity_task(run, dispatch, outbox.history(run))
        if task is not None:  # None: the same completion already ended it (the run closed)
            tasks.append(task)
    return tasks


def _eager_workflow_task(workflow: Workflow, action: DispatchWorkflowTask | None, outbox: Outbox) -> Record | None:
    """The WorkflowTask record for the worker that caches the run, built as for the topic."""
    if action is None:
        return None
    run = workflow.runs.get(action.run_id)
    if run is None:
        return None
    return records.workflow_task(run, action, outbox.history(run), outbox.config(run.namespace))


def _perform_on_run(workflow: Workflow, action: Action, outbox: Outbox) -> None:
    """The actions whose records are built from the run's state and history; a run gone within the same step
    (deleted) produces nothing."""
    assert isinstance(action, DispatchWorkflowTask | DispatchActivityTask | DispatchQueryTask | UpsertVisibility)
    run = workflow.runs.get(action.run_id)
    if run is None:
        return
    ns, wf = run.namespace, run.workflow_id
    config = outbox.config(ns)
    if isinstance(action, DispatchWorkflowTask):
        task = records.workflow_task(run, action, outbox.history(run), config)
        if task is not None:
            # Worker versioning: the topic is chosen here, at dispatch, from the run's pinned build or its queue's
            # current build; the record keeps the queue's own name (what the workflow and its worker call it).
            queue = routing.workflow_queue(run, config)
            try:
                outbox.workflow_task(queue, ns, wf, wire.WORKFLOW_TASK, task)
            except RecordTooLarge:
                # The events since the previous task (signals of 200 KiB, say) do not fit one record: the task goes
                # without them, marked so, and the worker reads them from history. Never a task that cannot go.
                lean = records.without_events(task, action.transient)
                outbox.workflow_task(queue, ns, wf, wire.WORKFLOW_TASK, lean)
    elif isinstance(action, DispatchActivityTask):
        activity = records.activity_task(run, action, outbox.history(run))
        if activity is not None:
            queue = routing.activity_queue(run, activity["task_queue"], config)
            outbox.activity_task(queue, ns, wf, activity["activity_id"], activity)
    elif isinstance(action, DispatchQueryTask):
        # A query goes where the run's tasks go: a pinned run is answered by its own build's code.
        outbox.workflow_task(routing.workflow_queue(run, config), ns, wf, wire.QUERY_TASK,
                             records.query_task(run, action))
    else:
        outbox.visibility(run, records.visibility_record(run, outbox.history_size(run)))
