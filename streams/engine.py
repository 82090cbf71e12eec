"""The in-memory engine: the core's deciders and appliers driven over an in-memory partitioned log and a fake
clock, for tests and the SDK's time-skipping `WorkflowEnvironment`. No Kafka, no threads, no wall clock."""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import run_key, workflow_key
from ostinato.streams.actions import Action, Deadline, Publish, Reply
from ostinato.streams.clock import FakeClock
from ostinato.streams.config import Config
from ostinato.streams.deadlines import timer_command
from ostinato.streams.deciders import decide
from ostinato.streams.engine_outbox import EngineOutbox, TimerKey
from ostinato.streams.model import Workflow, encode_current, encode_run, to_record
from ostinato.streams.perform import RecordTooLarge, perform
from ostinato.streams.quarantine import quarantinable, quarantine, quarantined_message
from ostinato.streams.writer import Step

Record = dict[str, Any]
Task = tuple[str, Record]  # a record off a task topic, as the codec decodes it: (type name, record)

SHELL_IDENTITY = "ostinato"
QUERY_TIMEOUT_MS = 10_000
MAX_COMMANDS_PER_RUN = 1_000_000  # a bound on run_until_idle: commands that beget commands forever are a bug

DEFAULT_CONFIG = Config()  # frozen, so one instance serves every engine


@dataclass
class Shard:
    """One partition of the commands topic and what its owner keeps: the log, how far it has read, the
    workflows it owns, and their state changelog (encoded as the Kafka shell writes it)."""

    index: int
    log: list[bytes] = field(default_factory=list)
    offset: int = 0
    workflows: dict[tuple[str, str], Workflow] = field(default_factory=dict)
    state: dict[str, bytes] = field(default_factory=dict)
    failed_at: int | None = None  # the offset whose decision raised once: processed again, it is quarantined

    @property
    def pending(self) -> int:
        return len(self.log) - self.offset


class InMemoryEngine:
    """Runs workflows on the pure core with every topic of DESIGN.md §1 as an in-memory structure.

    Commands go to the log of the shard `partition_for(workflow_key)` picks, and `run_until_idle` processes
    them shard by shard: decide on a copy of the workflow, encode every record of the step (each must fit its
    schema and the 4 MiB record limit, as on Kafka), then commit its events, state and actions together (a failed
    decision leaves everything as it was, like an aborted transaction). Deadlines fire only when the fake clock
    reaches them, each as a FireTimer command. Worker and client helpers produce the same command records a
    worker or the frontend writes to Kafka, so tests exercise the real wire shapes.

    A command that fails is handled as the Kafka shard handles it: rejected alone (`TOO_LARGE` for a record over
    the limit, `INTERNAL` for an exception in the core) and, when nobody was told, quarantined in its run
    (`streams/quarantine.py`). An exception in the core first propagates to whoever drives the engine (a test
    sees the bug) with the command left in the log, as an aborted transaction would leave it; processed again,
    the command is quarantined and the shard goes on, so no shard wedges on a command.
    """

    def __init__(self, shards: int = 4, config: Config = DEFAULT_CONFIG, clock: FakeClock | None = None) -> None:
        if shards < 1:
            raise ValueError(f"an engine needs at least one shard, not {shards}")
        self.config = config
        self.clock = clock if clock is not None else FakeClock()
        self.shards = [Shard(i) for i in range(shards)]
        self.histories: dict[tuple[str, str, str], list[Record]] = {}
        self.history_bytes: dict[tuple[str, str, str], int] = {}
        self.timers: list[TimerKey] = []
        self.workflow_tasks: dict[str, deque[bytes]] = {}
        self.activity_tasks: dict[str, deque[bytes]] = {}
        self.visibility: dict[tuple[str, str, str], Record] = {}
        self.replies: dict[str, Record] = {}
        self.rejections: Counter[str] = Counter()
        self.rejected: list[tuple[Record | None, Record]] = []  # (command if readable, Rejected record)
        self.quarantined: list[tuple[str, str, str]] = []  # (code, command type, run id) of each command kept
        self.archive_requests: list[tuple[str, str, str]] = []
        self.published: list[Publish] = []  # records workflows published (workflow.publish), in commit order
        self.archives: dict[str, list[Record]] = {}  # uri -> the archived history
        self._requests = 0
        self._outbox = EngineOutbox(self)

    # -- the commands log ---------------------------------------------------------------------------------------

    def shard_of(self, namespace: str, workflow_id: str) -> int:
        return partition_for(workflow_key(namespace, workflow_id), len(self.shards))

    def submit(self, command: Any) -> int | None:
        """Append a command (an `ostinato.command.Command` record) to its shard's log; return the shard.

        The record is encoded and decoded as Kafka would carry it, so a malformed one is caught here: it becomes
        a recorded MALFORMED rejection (answered, if it names a request id and reply partition), never an
        exception, and None is returned.
        """
        try:
            data = codec.encode(wire.COMMAND, command)
            decoded = codec.decode(data)[1]
            shard = self.shard_of(decoded["namespace"], decoded["workflow_id"])
        except (ValueError, TypeError) as exc:
            self._malformed(command, str(exc))
            return None
        self.shards[shard].log.append(data)
        return shard

    def submit_raw(self, namespace: str, workflow_id: str, data: bytes) -> int:
        """Append bytes as another client (in any language) might produce them, keyed by `namespace/workflow_id`."""
        shard = self.shard_of(namespace, workflow_id)
        self.shards[shard].log.append(data)
        return shard

    @property
    def pending_commands(self) -> int:
        return sum(s.pending for s in self.shards)

    def run_until_idle(self) -> int:
        """Process every pending command of every shard, and fire deadlines due now, until nothing is left.

        Cross-shard commands land on their shard's log and are processed in a later round, as with Kafka.
        Returns how many commands were processed.
        """
        processed = 0
        while True:
            for shard in self.shards:
                end = len(shard.log)  # one bounded batch per shard per round
                while shard.offset < end:
                    self._process(shard, shard.log[shard.offset])
                    shard.offset += 1  # after the commit: a decision that raised is retried (then quarantined)
                    processed += 1
            if processed > MAX_COMMANDS_PER_RUN:
                raise RuntimeError(f"more than {MAX_COMMANDS_PER_RUN} commands without becoming idle: a loop")
            if self.pending_commands:
                continue
            if not (self.timers and self.timers[0][0] <= self.clock.now_ms):
                return processed
            self._fire(self.timers.pop(0))

    def _process(self, shard: Shard, data: bytes) -> None:
        command = self._read(data)
        if command is None:
            return
        key = (command["namespace"], command["workflow_id"])
        if self.shard_of(*key) != shard.index:
            self._reject(command, "WRONG_SHARD", f"{key[0]}/{key[1]} belongs to shard {self.shard_of(*key)}")
            return
        owned = shard.workflows.get(key)
        workflow = copy.deepcopy(owned) if owned is not None else Workflow(*key)
        try:
            step = decide(workflow, command, self.clock.now_ms, self.config, offset=shard.offset,
                          history=self._outbox.history)
            if step.rejection is not None:
                workflow = owned if owned is not None else Workflow(*key)  # a rejection changes nothing
            else:
                self._stage(shard, workflow, step)
            for action in step.actions:
                perform(workflow, action, self._outbox)
        except RecordTooLarge as exc:
            self._outbox.discard()
            self._fail(shard, command, "TOO_LARGE", type(exc).__name__, str(exc))
            return
        except Exception as exc:
            self._outbox.discard()
            if shard.failed_at != shard.offset:
                shard.failed_at = shard.offset
                raise
            self._fail(shard, command, "INTERNAL", type(exc).__name__, f"{type(exc).__name__}: {exc}")
            return
        shard.failed_at = None
        if step.rejection is not None:
            self._record_rejection(command, step.rejection)
        self._outbox.commit()

    def _fail(self, shard: Shard, command: Record, code: str, error_type: str, message: str) -> None:
        """Reject a command whose processing failed, after keeping it in its run when nobody was told."""
        shard.failed_at = None
        key = (command["namespace"], command["workflow_id"])
        run_id = None
        if quarantinable(command, code):
            owned = shard.workflows.get(key)
            workflow = copy.deepcopy(owned) if owned is not None else Workflow(*key)
            try:
                step = quarantine(workflow, command, shard.offset, code, error_type, message, self.clock.now_ms,
                                  self.config)
                if step is not None:
                    self._stage(shard, workflow, step)
                    for action in step.actions:
                        perform(workflow, action, self._outbox)
                    run_id = step.changed_runs[0]
            except Exception:  # noqa: BLE001 - e.g. the state record would be too large: the rejection stands
                run_id = None
            if run_id is None:
                self._outbox.discard()
            else:
                self._outbox.commit()
                self.quarantined.append((code, wire.short_name(command["body"][0]), run_id))
        self._reject(command, code, message if run_id is None else quarantined_message(message, run_id))

    def _read(self, data: bytes) -> Record | None:
        try:
            name, command = codec.decode(data)
        except codec.DecodeError as exc:
            self._malformed(None, str(exc))
            return None
        if name != wire.COMMAND:
            self._malformed(None, f"expected a {wire.COMMAND} on the commands topic, found {name}")
            return None
        return command

    def _stage(self, shard: Shard, workflow: Workflow, step: Step) -> None:
        """Encode what the step writes (history, state, the current-run pointer) and stage it in the outbox, to be
        committed with the step's actions; a record that cannot be written raises here, before anything changed."""
        key = (workflow.namespace, workflow.workflow_id)
        outbox = self._outbox
        for run_id, event in step.events:
            data = outbox.encoded("history", wire.HISTORY_EVENT, event)
            outbox.add_event((*key, run_id), codec.decode(data)[1], len(data))
        states: dict[str, bytes | None] = {}
        for run_id in step.changed_runs:
            state = workflow.runs.get(run_id)
            states[run_key(*key, run_id)] = None if state is None else outbox.checked("state", encode_run(state))
        if step.pointer_changed:
            current = workflow.current
            states[workflow_key(*key)] = None if current is None else outbox.checked("state", encode_current(current))

        def commit() -> None:
            if workflow.runs or workflow.current is not None:
                shard.workflows[key] = workflow
            else:
                shard.workflows.pop(key, None)
            for state_key, value in states.items():
                if value is None:
                    shard.state.pop(state_key, None)
                else:
                    shard.state[state_key] = value

        outbox.later(commit)

    # -- rejections ---------------------------------------------------------------------------------------------

    def _reject(self, command: Record, code: str, message: str) -> None:
        body = wire.rejected(code, message)
        self._record_rejection(command, body[1])
        if command["reply_partition"] is not None:
            self._perform_now(Reply(command["request_id"], command["reply_partition"], command["namespace"],
                                    command["workflow_id"], body))

    def _record_rejection(self, command: Record | None, rejected: Record) -> None:
        self.rejections[rejected["code"]] += 1
        self.rejected.append((command, rejected))

    def _malformed(self, command: Any, message: str) -> None:
        """Count an unreadable command, and answer it if it says where (the frontend's sender waits)."""
        body = wire.rejected("MALFORMED", message)
        self._record_rejection(None, body[1])
        fields: dict[Any, Any] = command if isinstance(command, dict) else {}
        request_id, partition = fields.get("request_id"), fields.get("reply_partition")
        if isinstance(request_id, str) and isinstance(partition, int):
            ns, wf = fields.get("namespace"), fields.get("workflow_id")
            self._perform_now(Reply(request_id, partition, ns if isinstance(ns, str) else "",
                                    wf if isinstance(wf, str) else "", body))

    def _perform_now(self, action: Action) -> None:
        """Perform an answer given outside any step (a refusal, a worker's query answer), committed at once."""
        perform(None, action, self._outbox)
        self._outbox.commit()

    # -- time ---------------------------------------------------------------------------------------------------

    def _fire(self, key: TimerKey) -> None:
        """Turn a due deadline into a FireTimer command for its workflow; `run_until_idle` processes it."""
        fire_at, ns, wf, run_id, kind, timer_id, scheduled_event_id, attempt = key
        deadline = Deadline(fire_at, kind, run_id, timer_id, scheduled_event_id, attempt)
        self.submit(timer_command(ns, wf, deadline, self.clock.now_ms, SHELL_IDENTITY))

    @property
    def next_deadline_ms(self) -> int | None:
        return self.timers[0][0] if self.timers else None

    def pending_deadlines(self) -> list[tuple[str, str, Deadline]]:
        """Every deadline in the index, in fire order, as (namespace, workflow id, deadline)."""
        return [(k[1], k[2], Deadline(k[0], k[4], k[3], k[5], k[6], k[7])) for k in self.timers]

    def advance(self, ms: int) -> int:
        """Let `ms` milliseconds pass: fire every deadline up to then in fire-time order, each at its own time.

        The clock stops at each deadline while it fires, so events carry the time they were due, and whatever a
        firing schedules inside the window fires too. Returns the new time.
        """
        if ms < 0:
            raise ValueError(f"time only moves forward: cannot advance by {ms} ms")
        target = self.clock.now_ms + ms
        self.run_until_idle()
        while self.timers and self.timers[0][0] <= target:
            self.clock.set(max(self.clock.now_ms, self.timers[0][0]))
            self.run_until_idle()
        self.clock.set(target)
        self.run_until_idle()
        return target

    def advance_to_next_timer(self) -> int | None:
        """Jump to the earliest deadline and fire everything due then; None (and no jump) if there is none."""
        self.run_until_idle()
        if not self.timers:
            return None
        self.clock.set(max(self.clock.now_ms, self.timers[0][0]))
        self.run_until_idle()
        return self.clock.now_ms

    def skip_time_until_idle(self) -> int:
        """Time skipping: jump from deadline to deadline while no task waits for a worker.

        Stops as soon as a workflow or activity task is queued, or when only retention deadlines are left
        (housekeeping, not workflow progress; use `advance` to reach them). Tasks a worker has polled but not
        answered are the caller's to finish first: skipping would time them out. Returns the new time.
        """
        self.run_until_idle()
        while not self.has_queued_tasks():
            due = next((k[0] for k in self.timers if k[4] != "RETENTION"), None)
            if due is None:
                break
            self.clock.set(max(self.clock.now_ms, due))
            self.run_until_idle()
        return self.clock.now_ms

    # -- what workers do ----------------------------------------------------------------------------------------

    def has_queued_tasks(self) -> bool:
        return any(self.workflow_tasks.values()) or any(self.activity_tasks.values())

    def poll_workflow_task(self, queue: str) -> Task | None:
        """Take the next record off `queue`'s workflow task topic: a WorkflowTask or a QueryTask, as (type name,
        record), the shape a Kafka worker decodes. None if the queue is empty."""
        tasks = self.workflow_tasks.get(queue)
        return codec.decode(tasks.popleft()) if tasks else None

    def poll_activity_task(self, queue: str) -> Record | None:
        """Take the next ActivityTask record off `queue`'s activity topic, or None."""
        tasks = self.activity_tasks.get(queue)
        return codec.decode(tasks.popleft())[1] if tasks else None

    def complete_workflow_task(self, task: Record, commands: Iterable[tuple[str, Record]] = (), *,
                               identity: str = "worker", force_create_new_task: bool = False,
                               sdk_flags: Sequence[int] = (), build_id: str = "",
                               started_time_ms: int | None = None) -> Record | None:
        """Answer a workflow task with the workflow's commands, e.g. `("StartTimerCommand", {...})`; a command
        name without a namespace is taken from `ostinato.command`. `started_time_ms`: when the worker took the
        task (None: the time its STARTED carried)."""
        return self._answer(task, "RespondWorkflowTaskCompleted", {
            "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"],
            "commands": [(_full_name(name), body) for name, body in commands],
            "force_create_new_task": force_create_new_task, "sdk_flags": list(sdk_flags), "build_id": build_id,
            "started_time_ms": started_time_ms,
        }, identity)

    def fail_workflow_task(self, task: Record, failure: Record | str = "workflow task failed", *,
                           cause: str = "WORKFLOW_WORKER_UNHANDLED_FAILURE", identity: str = "worker",
                           started_time_ms: int | None = None) -> Record | None:
        return self._answer(task, "RespondWorkflowTaskFailed", {
            "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"], "cause": cause,
            "failure": _failure(failure), "started_time_ms": started_time_ms}, identity)

    def start_activity(self, task: Record, identity: str = "worker") -> Record | None:
        """Report that a worker took the task (a Kafka worker commits the task's offset once this is accepted)."""
        return self._answer(task, "RecordActivityTaskStarted", _attempt_of(task), identity)

    def heartbeat(self, task: Record, details: Sequence[Record] = (), identity: str = "worker") -> Record | None:
        """Report progress; the Accepted reply's `cancel_requested` says whether the workflow wants it to stop."""
        return self._answer(task, "RecordActivityTaskHeartbeat", {**_attempt_of(task), "details": list(details)},
                            identity)

    def complete_activity(self, task: Record, result: Sequence[Record] = (), identity: str = "worker",
                          ) -> Record | None:
        return self._answer(task, "RespondActivityTaskCompleted", {**_attempt_of(task), "result": list(result)},
                            identity)

    def fail_activity(self, task: Record, failure: Record | str, identity: str = "worker") -> Record | None:
        """Report a failed attempt; the activity's retry policy decides whether another one follows."""
        return self._answer(task, "RespondActivityTaskFailed", {**_attempt_of(task), "failure": _failure(failure)},
                            identity)

    def activity_canceled(self, task: Record, details: Sequence[Record] = (), identity: str = "worker",
                          ) -> Record | None:
        """Report that the activity stopped because the workflow asked it to."""
        return self._answer(task, "RespondActivityTaskCanceled", {**_attempt_of(task), "details": list(details)},
                            identity)

    def answer_query(self, task: Record, result: Sequence[Record] = (), failure: Record | str | None = None) -> None:
        """Answer a QueryTask on the replies topic, as a worker does, keyed by the query's request id."""
        body = {"result": list(result), "failure": None if failure is None else _failure(failure)}
        self._perform_now(Reply(task["request_id"], task["reply_partition"], task["namespace"],
                                task["workflow_id"], (wire.QUERY_RESULT, body)))

    def respond(self, task: Record, name: str, body: Record, identity: str = "worker") -> Record | None:
        """Answer a task with any command (`name` with or without its `ostinato.command.` namespace), as an SDK
        worker does; returns the reply."""
        return self._answer(task, wire.short_name(name), body, identity)

    def _answer(self, task: Record, name: str, body: Record, identity: str) -> Record | None:
        return self._send(task["namespace"], task["workflow_id"], name, body, run_id=task["run_id"],
                          identity=identity)

    # -- what clients do ----------------------------------------------------------------------------------------

    def start_workflow(self, namespace: str, workflow_id: str, workflow_type: str, task_queue: str,
                       args: Sequence[Record] = (), *, request_id: str | None = None, identity: str = "client",
                       **options: Any) -> Record | None:
        """Start a run; `options` are further StartWorkflowExecution fields (memo, run_timeout_ms, ...).

        Returns the Reply record: its body is WorkflowStarted (with the run id) or Rejected.
        """
        return self._send(namespace, workflow_id, "StartWorkflowExecution", {
            "workflow_type": workflow_type, "task_queue": task_queue, "input": list(args), **options},
            request_id=request_id, identity=identity)

    def signal(self, namespace: str, workflow_id: str, signal_name: str, args: Sequence[Record] = (), *,
               run_id: str = "", request_id: str | None = None, identity: str = "client") -> Record | None:
        return self._send(namespace, workflow_id, "SignalWorkflowExecution", {
            "signal_name": signal_name, "input": list(args)}, run_id=run_id, request_id=request_id, identity=identity)

    def cancel(self, namespace: str, workflow_id: str, reason: str = "", *, run_id: str = "",
               identity: str = "client") -> Record | None:
        return self._send(namespace, workflow_id, "RequestCancelWorkflowExecution", {"reason": reason},
                          run_id=run_id, identity=identity)

    def terminate(self, namespace: str, workflow_id: str, reason: str = "", *, run_id: str = "",
                  identity: str = "client") -> Record | None:
        return self._send(namespace, workflow_id, "TerminateWorkflowExecution", {"reason": reason},
                          run_id=run_id, identity=identity)

    def query(self, namespace: str, workflow_id: str, query_type: str, args: Sequence[Record] = (), *,
              run_id: str = "", timeout_ms: int = QUERY_TIMEOUT_MS, header: Mapping[str, Record] | None = None) -> str:
        """Ask the workflow a question; returns the request id whose `reply` a worker's answer fills in."""
        request_id = self._request_id()
        self._send(namespace, workflow_id, "QueryWorkflow", {
            "query_type": query_type, "query_args": list(args), "deadline_ms": self.clock.now_ms + timeout_ms,
            "header": dict(header or {})},
            run_id=run_id, request_id=request_id, identity="client")
        return request_id

    def redrive(self, namespace: str, workflow_id: str, reason: str = "", *, run_id: str = "",
                identity: str = "client") -> Record | None:
        """Decide the run's quarantined commands again (once the bug that failed them is fixed); the reply's body is
        a `Redriven` record with one outcome per command."""
        return self._send(namespace, workflow_id, "RedriveWorkflowExecution", {"reason": reason}, run_id=run_id,
                          identity=identity)

    def reset(self, namespace: str, workflow_id: str, *, event_id: int = 0, reset_type: str = "UNSPECIFIED",
              reason: str = "", reapply_signals: bool = True, run_id: str = "", request_id: str | None = None,
              identity: str = "client") -> Record | None:
        """Reset the run to a completed workflow task (by id, or FIRST/LAST_WORKFLOW_TASK); the reply's `Accepted`
        names the new run."""
        return self._send(namespace, workflow_id, "ResetWorkflowExecution", {
            "event_id": event_id, "reset_type": reset_type, "reason": reason, "reapply_signals": reapply_signals},
            run_id=run_id, request_id=request_id, identity=identity)

    def archive_completed(self, namespace: str, workflow_id: str, run_id: str, uri: str = "") -> Record | None:
        """Play the archiver: store the closed run's history under `uri` and confirm it to the owner."""
        events = list(self.histories.get((namespace, workflow_id, run_id), []))
        uri = uri or f"mem://{namespace}/{workflow_id}/{run_id}.avro"
        self.archives[uri] = events
        if (namespace, workflow_id, run_id) in self.archive_requests:
            self.archive_requests.remove((namespace, workflow_id, run_id))
        return self._send(namespace, workflow_id, "ArchivalCompleted", {"uri": uri, "event_count": len(events)},
                          run_id=run_id, identity="archiver")

    def reply(self, request_id: str) -> Record | None:
        """The `ostinato.reply.Reply` record answering `request_id`, if there is one yet."""
        return self.replies.get(request_id)

    # -- what the owner's read API serves -----------------------------------------------------------------------

    def workflow(self, namespace: str, workflow_id: str) -> Workflow | None:
        return self.shards[self.shard_of(namespace, workflow_id)].workflows.get((namespace, workflow_id))

    def current_run_id(self, namespace: str, workflow_id: str) -> str:
        wf = self.workflow(namespace, workflow_id)
        return wf.current.run_id if wf is not None and wf.current is not None else ""

    def describe(self, namespace: str, workflow_id: str, run_id: str = "") -> Record | None:
        """The run's state as an `ostinato.state.MutableState` record (current run unless named), or None."""
        wf = self.workflow(namespace, workflow_id)
        run = wf.runs.get(run_id or self.current_run_id(namespace, workflow_id)) if wf is not None else None
        return None if run is None else to_record(run)

    def history(self, namespace: str, workflow_id: str, run_id: str = "") -> list[Record]:
        """The run's history events (current run unless named); empty once the run is deleted."""
        run_id = run_id or self.current_run_id(namespace, workflow_id)
        return list(self.histories.get((namespace, workflow_id, run_id), []))

    def visibility_of(self, namespace: str, workflow_id: str, run_id: str = "") -> Record | None:
        run_id = run_id or self.current_run_id(namespace, workflow_id)
        return self.visibility.get((namespace, workflow_id, run_id))

    # -- plumbing -----------------------------------------------------------------------------------------------

    def _request_id(self) -> str:
        self._requests += 1
        return f"req-{self._requests}"

    def _send(self, namespace: str, workflow_id: str, name: str, body: Record, *, run_id: str = "",
              request_id: str | None = None, identity: str) -> Record | None:
        """Submit a command that waits for an answer, process until idle, and return the answer."""
        request_id = request_id or self._request_id()
        self.submit(wire.command(namespace, workflow_id, (name, body), run_id=run_id, request_id=request_id,
                                 identity=identity, time_ms=self.clock.now_ms, reply_partition=0))
        self.run_until_idle()
        return self.reply(request_id)


def _full_name(name: str) -> str:
    return wire.command_type(name)


def _attempt_of(task: Record) -> Record:
    return {"scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"]}


def _failure(failure: Record | str) -> Record:
    return {"message": failure} if isinstance(failure, str) else failure
