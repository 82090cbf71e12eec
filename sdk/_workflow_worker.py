"""Workflow tasks in, answers out: the transport-independent half of a worker (the Kafka worker and the test
environment both use it). Keeps a sticky LRU cache of running workflows; a task whose previous started event is
not where the cached instance stopped (another worker ran it, or the last task failed) replays full history."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ostinato.schemas.wire import command_type
from ostinato.sdk import exceptions as exc
from ostinato.sdk._definitions import WorkflowDefinition, definition_of
from ostinato.sdk._instance import TaskOutcome, WorkflowInstance
from ostinato.sdk._local_activities import LocalActivityRunner
from ostinato.sdk.data import DataConverter
from ostinato.sdk.interceptor import (
    InterceptedCalls,
    Interceptor,
    WorkflowInboundInterceptor,
    workflow_interceptor_classes,
)
from ostinato.sdk.versioning import VersioningBehavior, WorkerVersioning
from ostinato.sdk.workflow import OUTBOUND_ROOT

Record = dict[str, Any]
Command = tuple[str, Record]
log = logging.getLogger("ostinato.worker")
# A task whose local activities still run at this share of its timeout is answered (with what the workflow did so
# far and force_create_new_task) so it does not time out; the next task, at once, waits on for them (Temporal's
# workflow task heartbeat, at Temporal's 80%).
HEARTBEAT_FRACTION = 0.8


class WorkflowTaskHandler:
    def __init__(self, workflows: Sequence[type], converter: DataConverter, *, max_cached: int = 1000,
                 identity: str = "", local_activities: LocalActivityRunner | None = None,
                 max_concurrent: int = 100, interceptors: Sequence[Interceptor] = (),
                 versioning: WorkerVersioning | None = None) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent_workflow_tasks must be at least 1, not {max_concurrent}")
        self.definitions: dict[str, WorkflowDefinition] = {}
        for workflow in workflows:
            definition = definition_of(workflow)
            if definition.name in self.definitions:
                raise ValueError(f"two workflows registered as {definition.name!r}")
            self.definitions[definition.name] = definition
        self.converter = converter
        self.identity = identity
        self.versioning = versioning or WorkerVersioning()  # recorded on every answer (worker versioning)
        # Asked once, when the worker is made, as Temporal does; each run builds its own chain of these classes.
        self.interceptor_classes = workflow_interceptor_classes(interceptors)
        self.max_cached = max_cached
        self.cache: OrderedDict[str, WorkflowInstance] = OrderedDict()
        self.replays = 0  # full-history replays (cache misses), for tests and metrics
        self.failures = FailingRuns()
        self.local_activities = local_activities or LocalActivityRunner(None, converter)
        # Local activities running, per run: they outlive a heartbeated task, and the run's next task waits for them.
        # (job, its cancel event, activity type) by seq: they outlive a cached copy, and a fresh copy adopts them
        self.local_runs: dict[str, dict[int, tuple[asyncio.Task[Record], asyncio.Event, str]]] = {}
        self.max_concurrent = max_concurrent
        self.running = 0  # tasks being handled now (at most max_concurrent)
        self._slots: asyncio.Semaphore | None = None

    async def handle(self, task: Record, full_history: Callable[[], list[Record]],
                     taken_ms: int | None = None) -> Command:
        """The command answering a WorkflowTask: RespondWorkflowTaskCompleted, or Failed (history untouched). At
        most `max_concurrent` (the worker's max_concurrent_workflow_tasks) are handled at once; the others wait.

        `taken_ms` is when the worker took the task (None: the time the task's STARTED carries, as the test
        environment's virtual clock wants): the activation's `workflow.now()`, and reported in the answer, so
        history's STARTED has the same time when the run is replayed."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        async with self._slots:
            self.running += 1
            try:
                return await self._handle(task, full_history, taken_ms)
            finally:
                self.running -= 1

    async def _handle(self, task: Record, full_history: Callable[[], list[Record]], taken_ms: int | None) -> Command:
        budget_s = _heartbeat_after_s(task, taken_ms)
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
        if outcome.failure is None:
            outcome = await self._run_local_activities(task, instance, outcome, time.monotonic() + budget_s)
        if outcome.failure is not None or instance.closed:
            self._stop_local_activities(task["run_id"])
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
            "commands": outcome.commands, "force_create_new_task": outcome.heartbeat,
            "sdk_flags": sorted(instance.sdk_flags or ()), "build_id": self.versioning.build_id,
            "versioning_behavior": self._behavior(task),
            "started_time_ms": started_time_ms(task), "rejected_updates": outcome.rejected_updates})

    async def _run_local_activities(self, task: Record, instance: WorkflowInstance, outcome: TaskOutcome,
                                    heartbeat_at: float) -> TaskOutcome:
        """Run the live activation's local activities, giving each outcome to the workflow as it comes (which may
        start more), until the workflow waits for none; or, at `heartbeat_at`, answer with what it did so far and
        let them run on into the next task."""
        runs = self.local_runs.setdefault(task["run_id"], {})
        ready: list[Record] = []
        while True:
            for request in outcome.local_activities:
                running = runs.get(request["seq"])
                if running is not None and running[2] == request["activity_type"]:
                    continue  # still running from an earlier copy of the run (evicted, or none cached): adopted
                if running is not None:
                    running[0].cancel()
                cancel = asyncio.Event()
                job = asyncio.ensure_future(self.local_activities.run(request, task, cancel))
                runs[request["seq"]] = (job, cancel, request["activity_type"])
            for seq in outcome.local_cancels:  # after the starts: one may be cancelled in the activation that made it
                if seq in runs:
                    runs[seq][1].set()
            for seq in [seq for seq in runs if seq not in outcome.local_waiting]:
                job, _, _ = runs.pop(seq)  # abandoned (cancelled without waiting): its outcome would be dropped
                job.cancel()
            if ready:
                outcome = instance.resolve_local_activity(ready.pop(0))
            elif not outcome.local_waiting or instance.closed:
                break
            else:
                waiting = {runs[seq][0] for seq in outcome.local_waiting if seq in runs}
                if not waiting:  # runs and cached copies are dropped together; a fresh copy replays and reruns them
                    self.cache.pop(task["run_id"], None)
                    raise RuntimeError(f"the local activities of {task['workflow_id']}/{task['run_id']} are not "
                                       "running here any more; the task is retried on a fresh copy")
                done, _ = await asyncio.wait(waiting, timeout=max(0.0, heartbeat_at - time.monotonic()),
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    outcome.heartbeat = True
                    break
                for seq in sorted(outcome.local_waiting):
                    if seq in runs and runs[seq][0] in done:
                        ready.append(runs.pop(seq)[0].result())
                outcome = TaskOutcome(commands=outcome.commands, rejected_updates=outcome.rejected_updates,
                                      local_waiting=outcome.local_waiting)
            if outcome.failure is not None:
                break
        if not runs:
            self.local_runs.pop(task["run_id"], None)
        return outcome

    def _stop_local_activities(self, run_id: str) -> None:
        for job, _, _ in self.local_runs.pop(run_id, {}).values():
            job.cancel()

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
        # A copy's local activities still running are adopted by this one when it asks for them at the same seq
        # (`_run_local_activities`): a local activity longer than a task is not started again on every cache miss.
        return self.new_instance(definition, task), _through(full_history(), 0, first, task) + task["events"]

    def new_instance(self, definition: WorkflowDefinition, task: Record) -> WorkflowInstance:
        """A fresh instance of the task's run, calling its code through the worker's interceptors."""
        instance = WorkflowInstance(definition, task["namespace"], task["workflow_id"], task["run_id"],
                                    self.converter)
        instance.worker_build_id = self.versioning.build_id
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
            "failure": self.converter.encode_failure(error), "build_id": self.versioning.build_id,
            "started_time_ms": started_time_ms(task)})

    def _behavior(self, task: Record) -> str:
        """The versioning behaviour the answer records: the workflow type's own, else the worker's default."""
        definition = self.definitions.get(task.get("workflow_type") or "")
        declared = definition.versioning_behavior if definition is not None else VersioningBehavior.UNSPECIFIED
        return self.versioning.behavior_of(declared)


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


def _heartbeat_after_s(task: Record, taken_ms: int | None) -> float:
    """How long local activities may keep the task before it is answered: 80% of its timeout, less what it waited
    before this worker took it."""
    timeout_ms = int(task["deadline_ms"]) - int(task["scheduled_time_ms"])
    waited_ms = 0 if taken_ms is None else max(0, taken_ms - task["scheduled_time_ms"])
    return max(0.05, (HEARTBEAT_FRACTION * timeout_ms - waited_ms) / 1000)


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
