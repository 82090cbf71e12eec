"""Workflow tasks in, answers out: the transport-independent half of a worker (the Kafka worker and the test
environment both use it). Keeps a sticky LRU cache of running workflows; a task whose previous started event is
not where the cached instance stopped (another worker ran it, or the last task failed) replays full history."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ostinato.schemas.wire import command_type
from ostinato.sdk import exceptions as exc
from ostinato.sdk._definitions import WorkflowDefinition, definition_of
from ostinato.sdk._instance import TaskOutcome, WorkflowInstance
from ostinato.sdk.data import DataConverter
from ostinato.sdk.interceptor import (
    InterceptedCalls,
    Interceptor,
    WorkflowInboundInterceptor,
    workflow_interceptor_classes,
)
from ostinato.sdk.workflow import OUTBOUND_ROOT

Record = dict[str, Any]
Command = tuple[str, Record]
log = logging.getLogger("ostinato.worker")


class WorkflowTaskHandler:
    def __init__(self, workflows: Sequence[type], converter: DataConverter, *, max_cached: int = 1000,
                 identity: str = "", interceptors: Sequence[Interceptor] = ()) -> None:
        self.definitions: dict[str, WorkflowDefinition] = {}
        for workflow in workflows:
            definition = definition_of(workflow)
            if definition.name in self.definitions:
                raise ValueError(f"two workflows registered as {definition.name!r}")
            self.definitions[definition.name] = definition
        self.converter = converter
        self.identity = identity
        # Asked once, when the worker is made, as Temporal does; each run builds its own chain of these classes.
        self.interceptor_classes = workflow_interceptor_classes(interceptors)
        self.max_cached = max_cached
        self.cache: OrderedDict[str, WorkflowInstance] = OrderedDict()
        self.replays = 0  # full-history replays (cache misses), for tests and metrics
        self.failures = FailingRuns()

    def handle(self, task: Record, full_history: Callable[[], list[Record]], taken_ms: int | None = None) -> Command:
        """The command answering a WorkflowTask: RespondWorkflowTaskCompleted, or Failed (history untouched).

        `taken_ms` is when the worker took the task (None: the time the task's STARTED carries, as the test
        environment's virtual clock wants): the activation's `workflow.now()`, and reported in the answer, so
        history's STARTED has the same time when the run is replayed."""
        task = taking(task, taken_ms)
        definition = self.definitions.get(task["workflow_type"])
        if definition is None:
            known = ", ".join(sorted(self.definitions)) or "none"
            unknown = exc.ApplicationError(
                f"workflow type {task['workflow_type']!r} is not registered on this worker (registered: {known})",
                type="WorkflowNotRegistered")
            self.failures.failed(task, unknown, "UNKNOWN_WORKFLOW_TYPE")
            return self._failed(task, unknown, "UNKNOWN_WORKFLOW_TYPE")
        instance, events = self._instance(task, definition, full_history)
        try:
            outcome = instance.process(events, task["started_event_id"], task.get("updates") or [])
        except Exception as error:  # noqa: BLE001 - the worker's own bug fails the task like the workflow's would
            outcome = TaskOutcome(failure=error, cause="WORKFLOW_WORKER_UNHANDLED_FAILURE")
        if outcome.failure is not None:
            self.cache.pop(task["run_id"], None)
            self.failures.failed(task, outcome.failure, outcome.cause)
            return self._failed(task, outcome.failure, outcome.cause)
        self.failures.completed(task)
        if instance.closed or (outcome.rejected_updates and not outcome.commands):
            # Closed; or an answer that only rejects updates, after which the engine may write nothing (a
            # speculative task): this copy has seen a task history will not have, so the next task replays.
            self.cache.pop(task["run_id"], None)
        else:
            self.cache[task["run_id"]] = instance
            self.cache.move_to_end(task["run_id"])
            while len(self.cache) > self.max_cached:
                self.cache.popitem(last=False)
        return (command_type("RespondWorkflowTaskCompleted"), {
            "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"],
            "commands": outcome.commands, "force_create_new_task": False, "sdk_flags": [], "build_id": "",
            "started_time_ms": started_time_ms(task), "rejected_updates": outcome.rejected_updates})

    def _instance(self, task: Record, definition: WorkflowDefinition,
                  full_history: Callable[[], list[Record]]) -> tuple[WorkflowInstance, list[Record]]:
        """The instance to run the task on and the events to give it: the cached one and the task's events when it
        stopped where the task starts (sticky), else a new one and the whole history. A task whose events did not
        fit one record says so (`events_omitted`); its events are then read from history, cached copy or not."""
        cached = self.cache.pop(task["run_id"], None)
        # Events before `first` come from history; the task's own events (all of them, or a retried task's
        # scheduled/started, which are not in history) follow.
        first = history_needed_through(task) + 1
        if cached is not None and cached.last_started_event_id == task["previous_started_event_id"]:
            if not task.get("events_omitted"):
                return cached, task["events"]
            seen = task["previous_started_event_id"] - 1  # the previous task's SCHEDULED: what the copy has seen
            return cached, _through(full_history(), seen, first, task) + task["events"]
        self.replays += 1
        return self.new_instance(definition, task), _through(full_history(), 0, first, task) + task["events"]

    def new_instance(self, definition: WorkflowDefinition, task: Record) -> WorkflowInstance:
        """A fresh instance of the task's run, calling its code through the worker's interceptors."""
        instance = WorkflowInstance(definition, task["namespace"], task["workflow_id"], task["run_id"],
                                    self.converter)
        return intercepted(instance, self.interceptor_classes)

    def query(self, task: Record, full_history: Callable[[], list[Record]]) -> tuple[list[Record], Record | None]:
        """Answer a QueryTask: (result payloads, None) or ([], failure record)."""
        definition = self.definitions.get(task["workflow_type"])
        try:
            if definition is None:
                raise exc.QueryRejectedError(f"workflow type {task['workflow_type']!r} is not registered here")
            instance = self.cache.get(task["run_id"])
            if instance is None:
                instance = self.new_instance(definition, task)
                outcome = instance.process(full_history(), None)
                if outcome.failure is not None:
                    raise outcome.failure
            return instance.query(task["query_type"], task["query_args"], task.get("header") or {}), None
        except Exception as error:  # noqa: BLE001 - any failure is the query's answer, not the worker's problem
            return [], self.converter.encode_failure(error)

    def evict(self, run_id: str) -> None:
        self.cache.pop(run_id, None)

    def _failed(self, task: Record, error: BaseException, cause: str) -> Command:
        return (command_type("RespondWorkflowTaskFailed"), {
            "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"], "cause": cause,
            "failure": self.converter.encode_failure(error), "build_id": "", "started_time_ms": started_time_ms(task)})


def intercepted(instance: WorkflowInstance,
                classes: Sequence[type[WorkflowInboundInterceptor]]) -> WorkflowInstance:
    """`instance`, calling workflow code through a chain of `classes` (the first outermost) when there are any."""
    if classes:
        instance.calls = InterceptedCalls(instance, classes, OUTBOUND_ROOT)
    return instance


class FailingRuns:
    """Logs failed workflow tasks once per failure series, as Temporal logs a failed activation: the engine retries
    such a task (with backoff from its third attempt) until deployed code gets past it, and a line per attempt would
    drown the log. A series is logged again when its run recovers (at INFO) and when a new one starts; the runs
    remembered are bounded (the oldest are forgotten: a series of one of them is then logged once more)."""

    def __init__(self, max_remembered: int = 10_000) -> None:
        self.max_remembered = max_remembered
        self.attempts: OrderedDict[str, int] = OrderedDict()  # run id -> the last failed task attempt seen

    def failed(self, task: Record, failure: BaseException, cause: str) -> None:
        run_id, attempt = task["run_id"], int(task["attempt"])
        last = self.attempts.pop(run_id, None)
        self.attempts[run_id] = attempt
        while len(self.attempts) > self.max_remembered:
            self.attempts.popitem(last=False)
        if last is not None and attempt > last:
            return  # a retry of a series already logged
        level = logging.ERROR if cause == "NONDETERMINISM" else logging.WARNING
        log.log(level, "Failed activation on workflow %s with ID %s and run ID %s (task attempt %d, %s): the task "
                "fails and is retried until deployed code gets past it; its retries are not logged",
                task["workflow_type"], task["workflow_id"], run_id, attempt, cause,
                exc_info=(type(failure), failure, failure.__traceback__),
                extra={"temporal_workflow": {"workflow_type": task["workflow_type"],
                                             "workflow_id": task["workflow_id"], "run_id": run_id,
                                             "namespace": task["namespace"], "task_queue": task["task_queue"],
                                             "attempt": attempt}})

    def completed(self, task: Record) -> None:
        last = self.attempts.pop(task["run_id"], None)
        if last is not None:
            log.info("workflow %s with ID %s and run ID %s recovered: task attempt %d completed after failed "
                     "attempts", task["workflow_type"], task["workflow_id"], task["run_id"], task["attempt"])


def _live_started(task: Record) -> Record | None:
    """The task's own WORKFLOW_TASK_STARTED (the last of its events; not in history until the answer is in)."""
    events: list[Record] = task["events"]
    last = events[-1] if events else None
    if last is None or last["event_type"] != "WORKFLOW_TASK_STARTED" or last["event_id"] != task["started_event_id"]:
        return None
    return last


def taking(task: Record, taken_ms: int | None) -> Record:
    """`task` with its STARTED at `taken_ms`, never earlier than the time the task carried (clocks differ)."""
    started = _live_started(task)
    if taken_ms is None or started is None or taken_ms <= started["event_time_ms"]:
        return task
    return {**task, "events": [*task["events"][:-1], {**started, "event_time_ms": taken_ms}]}


def started_time_ms(task: Record) -> int | None:
    """When the activation says the task was taken: reported with the answer, recorded as history's STARTED."""
    started = _live_started(task)
    return None if started is None else int(started["event_time_ms"])


def history_needed_through(task: Record) -> int:
    """The last event id a worker must read from history to run `task` without a cached copy: the events before
    the task's own (all of history up to its started event when the task left its events out)."""
    first = task["events"][0]["event_id"] if task["events"] else task["started_event_id"] + 1
    return int(first) - 1


class HistoryBehind(Exception):
    """The history read for a task ends before the task's events begin: the owner's store has not caught up with
    the transaction that dispatched the task yet. Read it again shortly."""


def _through(history: list[Record], after: int, first: int, task: Record) -> list[Record]:
    """The events with ids in (`after`, `first`), which must all be there."""
    events = [e for e in history if after < e["event_id"] < first]
    if first - 1 > after and (not events or events[-1]["event_id"] != first - 1):
        last = history[-1]["event_id"] if history else 0
        raise HistoryBehind(f"the history of {task['workflow_id']}/{task['run_id']} ends at event {last}; the task "
                            f"needs it through event {first - 1}")
    return events
