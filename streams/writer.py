"""The step writer: appending an event applies it, so deciding and replaying share one code path.

A decider validates first and then writes; it never mutates state except through `append` (history) and
`edit` (attempt state kept out of history). The writer collects the events, the actions and the set of changed
runs, and at the end derives the timer actions from how each run's deadlines moved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams import routing
from ostinato.streams.actions import (
    Action,
    CancelTimer,
    DispatchWorkflowTask,
    EagerActivity,
    Reply,
    ScheduleTimer,
)
from ostinato.streams.appliers import CURRENT_VERSION, apply
from ostinato.streams.config import Config
from ostinato.streams.deadlines import deadlines
from ostinato.streams.model import RunState, Workflow

Record = dict[str, Any]
HistoryReader = Callable[[RunState], Sequence[Record]]  # a run's history, event n at index n - 1


def no_history(run: RunState) -> Sequence[Record]:
    raise LookupError(f"no history reader was given to decide a command that reads run {run.run_id}'s history")


@dataclass
class Step:
    """What one command did: events per run, in order; actions; or the rejection that changed nothing."""

    events: list[tuple[str, Record]] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    rejection: Record | None = None  # an ostinato.reply.Rejected record
    changed_runs: list[str] = field(default_factory=list)
    pointer_changed: bool = False


class Writer:
    def __init__(self, workflow: Workflow, now_ms: int, config: Config, command: Record, offset: int = 0,
                 history: HistoryReader = no_history) -> None:
        self.workflow = workflow
        # Recorded history, read by the few deciders that copy it (reset): the shell's store or the engine's log,
        # both already committed, so the decision stays a function of the log.
        self.history = history
        self.now_ms = now_ms
        self.offset = offset
        self.config = config
        self.command = command
        self.step = Step()
        self._before: dict[str, set[Any]] = {}
        self._pointer = _pointer_key(workflow)
        self._lost_transient: dict[str, int] = {}  # run id -> attempt of a transient task invalidated by an event
        self.wake_after: set[str] = set()  # runs that need a new workflow task once the current one completes
        self.eager_activities: list[EagerActivity] = []  # started for the answering worker, sent in the reply
        self.eager_workflow_task: DispatchWorkflowTask | None = None  # for the answering worker, in the reply

    # -- state ---------------------------------------------------------------------------------------------------

    def run(self, run_id: str) -> RunState:
        return self.workflow.runs[run_id]

    def edit(self, run_id: str) -> RunState:
        """The run, for a change that is not an event (attempt state); call before changing it."""
        self._remember(run_id)
        return self.workflow.runs[run_id]

    def append(self, run_id: str, event_type: str, attrs: Record, time_ms: int | None = None) -> Record:
        """Write one event to run `run_id`'s history and apply it, at `time_ms` (the step's time if None)."""
        run = self.workflow.runs.get(run_id)
        self._remember(run_id)
        if run is not None and run.workflow_task is not None and run.workflow_task.transient:
            # The transient task's ids were reserved at the end of history; this event takes them. The task is
            # now stale, and a real one is scheduled when the command is done (see `finish`).
            self._lost_transient[run_id] = run.workflow_task.attempt
            run.workflow_task = None
        event = ev.make_event(event_type, run.next_event_id if run else 1, self.now_ms if time_ms is None else time_ms,
                              attrs,
                              CURRENT_VERSION[event_type])
        self._write(run_id, event)
        return event

    def copy(self, run_id: str, event: Record) -> None:
        """Write an event recorded elsewhere (a reset copies its base run's history) exactly as it was: same id,
        time and applier version, so the new run replays like the old one up to the cut."""
        self._remember(run_id)
        self._write(run_id, dict(event))

    def _write(self, run_id: str, event: Record) -> None:
        apply(self.workflow, run_id, event)
        self.step.events.append((run_id, event))

    def materialize_transient_task(self, run_id: str, started_ms: int) -> None:
        """Write the scheduled/started events of the transient task being completed, exactly as the worker saw
        them in the task (ids, times and attributes), so live processing and replay agree: the started event at
        `started_ms`, when the worker took it, and naming the worker."""
        from ostinato.streams.deciders.common import transient_task_events

        run = self.edit(run_id)
        task = run.workflow_task
        assert task is not None and task.transient
        scheduled, started = transient_task_events(run, self.config)
        ev.attributes(started)["identity"] = self.command["identity"]
        started["event_time_ms"] = started_ms
        run.workflow_task = None
        self._write(run_id, scheduled)
        self._write(run_id, started)

    def wake_after_task(self, run_id: str) -> None:
        """Something the completing task itself caused needs the workflow's attention in a new task."""
        self.wake_after.add(run_id)

    def lost_transient_attempt(self, run_id: str) -> int:
        """The attempt of a transient task an event invalidated in this command (1 if none): the next task
        continues that count, so a failing workflow keeps its backoff when a signal arrives."""
        return self._lost_transient.get(run_id, 1)

    def _remember(self, run_id: str) -> None:
        if run_id not in self._before:
            run = self.workflow.runs.get(run_id)
            self._before[run_id] = deadlines(run, self.config) if run is not None else set()
            self.step.changed_runs.append(run_id)

    # -- actions and answers -------------------------------------------------------------------------------------

    def act(self, action: Action) -> None:
        if isinstance(action, DispatchWorkflowTask) and self._wants_eager_task(action):
            self.eager_workflow_task = action  # goes out in the reply (`reply`), not on the task topic
            return
        self.step.actions.append(action)

    def _wants_eager_task(self, action: DispatchWorkflowTask) -> bool:
        """The answering worker caches this run and waits for a reply: hand it the run's next task directly."""
        body = self.command["body"][1]
        return (self.answered and self.eager_workflow_task is None and not action.transient
                and isinstance(body, dict) and bool(body.get("request_eager_workflow_task"))
                and action.run_id == self.command.get("run_id")
                and routing.worker_serves_workflow(self.run(action.run_id), self.config,
                                                   routing.answering_build(body)))

    def reply(self, body: tuple[str, Record]) -> None:
        """Answer the command's sender, if it waits for an answer (with any activities started for it)."""
        partition = self.command.get("reply_partition")
        if partition is not None:
            self.act(Reply(self.command["request_id"], partition, self.command["namespace"],
                           self.command["workflow_id"], body, tuple(self.eager_activities),
                           self.eager_workflow_task))
            self.eager_workflow_task = None

    @property
    def answered(self) -> bool:
        """Whether the sender waits for a reply (so work can be handed back in it)."""
        return self.command.get("reply_partition") is not None

    def reject(self, code: str, message: str, existing_run_id: str = "") -> Step:
        """Change nothing, record why, and tell the sender."""
        assert not self.step.events, "deciders validate before they write"
        rejected = {"code": code, "message": message, "existing_run_id": existing_run_id}
        self.step.rejection = rejected
        self.reply((wire.REJECTED, rejected))
        return self.step

    def accept(self, run_id: str = "", cancel_requested: bool = False) -> None:
        self.reply((wire.ACCEPTED, {"run_id": run_id, "cancel_requested": cancel_requested}))

    def _attach_eager_task(self, task: DispatchWorkflowTask) -> None:
        for i, action in enumerate(self.step.actions):
            if isinstance(action, Reply) and action.request_id == self.command["request_id"]:
                self.step.actions[i] = replace(action, eager_workflow_task=task)
                return
        self.step.actions.append(task)  # no reply after all: the task topic carries it

    # -- the end of a command --------------------------------------------------------------------------------------

    def finish(self) -> Step:
        common = _deciders_common()
        for run_id, attempt in self._lost_transient.items():
            run = self.workflow.runs.get(run_id)
            if run is not None and run.open and run.workflow_task is None:
                common.schedule_workflow_task(self, run_id, attempt=attempt)
        for run_id in list(self._before):
            if run_id in self.workflow.runs:
                common.enforce_history_limit(self, run_id)
        if self.eager_workflow_task is not None:  # a task diverted after the reply went out: add it to the reply
            self._attach_eager_task(self.eager_workflow_task)
            self.eager_workflow_task = None
        for run_id, before in self._before.items():
            run = self.workflow.runs.get(run_id)
            after = deadlines(run, self.config) if run is not None else set()
            ns, wf = self.workflow.namespace, self.workflow.workflow_id
            self.step.actions.extend(CancelTimer(ns, wf, d) for d in sorted(before - after, key=_order))
            self.step.actions.extend(ScheduleTimer(ns, wf, d) for d in sorted(after - before, key=_order))
        self.step.pointer_changed = _pointer_key(self.workflow) != self._pointer
        return self.step


_COMMON: Any = None  # `ostinato.streams.deciders.common`, which imports this module: bound at first use


def _deciders_common() -> Any:
    """The deciders' helpers `finish` calls at every command: an import statement there cost 0.6 µs a call."""
    global _COMMON
    if _COMMON is None:
        from ostinato.streams.deciders import common

        _COMMON = common
    return _COMMON


def _order(deadline: Any) -> tuple[int, str, str, int]:
    return (deadline.fire_at_ms, deadline.kind, deadline.timer_id, deadline.scheduled_event_id)


def _pointer_key(workflow: Workflow) -> tuple[Any, ...] | None:
    c = workflow.current
    return None if c is None else (c.run_id, c.status, c.start_request_id, c.close_time_ms)
