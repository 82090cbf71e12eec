"""What several deciders do alike: find the run a command is for, schedule workflow tasks, close runs."""

from __future__ import annotations

import hashlib
from typing import Any

from ostinato.schemas import wire
from ostinato.streams import events as ev
from ostinato.streams.actions import Archive, DispatchWorkflowTask, SendCommand, UpsertVisibility
from ostinato.streams.appliers import CURRENT_VERSION
from ostinato.streams.config import Config
from ostinato.streams.deadlines import in_first_task_backoff
from ostinato.streams.failures import failure as make_failure
from ostinato.streams.model import RunState, WorkflowTaskState
from ostinato.streams.retry import exponential_backoff_ms
from ostinato.streams.writer import Writer

Record = dict[str, Any]

SHARD_IDENTITY = "ostinato"


def new_run_id(*seed: str) -> str:
    """A run id derived from what caused the run, so deciding twice on the same input gives the same id."""
    digest = hashlib.sha256("\x1f".join(seed).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def addressed_run(w: Writer) -> RunState | None:
    """The run a command names, or the current run when it names none."""
    wf = w.workflow
    run_id = w.command["run_id"] or (wf.current.run_id if wf.current else "")
    return wf.runs.get(run_id)


def task_run(w: Writer) -> RunState | None:
    """The run a task answer is for: it must name it, so an answer never lands on a later run."""
    return w.workflow.runs.get(w.command["run_id"]) if w.command["run_id"] else None


def schedule_workflow_task(w: Writer, run_id: str, attempt: int | None = None) -> None:
    """Schedule and dispatch a workflow task, unless one is in flight or the run is closed.

    Only SCHEDULED is written: the task goes out through Kafka now, with its STARTED synthesised under the next id
    (`started_event`), and the STARTED of history is written with the worker's answer, at the time the worker took
    the task (`record_start`). Its timeout counts from here, since nothing tells the engine when a worker takes it.
    """
    run = w.run(run_id)
    if not run.open or run.workflow_task is not None:
        return
    attempt = attempt or w.lost_transient_attempt(run_id)
    scheduled = w.append(run_id, ev.WORKFLOW_TASK_SCHEDULED, {
        "task_queue": run.task_queue, "start_to_close_timeout_ms": run.task_timeout_ms, "attempt": attempt})
    carry_updates(w, run_id, scheduled["event_id"])
    w.act(DispatchWorkflowTask(run.namespace, run.workflow_id, run_id, run.task_queue, scheduled["event_id"],
                               scheduled["event_id"] + 1, attempt, run.last_workflow_task_started_event_id, False))


def schedule_transient_task(w: Writer, run_id: str, attempt: int, speculative: bool = False,
                            last_failure: Record | None = None, last_failure_cause: str = "",
                            max_delay_ms: int | None = None) -> None:
    """Retry a failed or timed-out workflow task without writing its scheduled/started events.

    The second attempt goes out at once; later ones back off exponentially, so a workflow waiting for fixed code
    neither spins nor grows its history. The task's event ids are reserved at the end of history. A `speculative`
    first attempt carries updates to an idle workflow the same way: if it rejects them all and commands nothing, it
    leaves no trace in history (`workflow_task.completed`).
    """
    run = w.edit(run_id)
    if not run.open:
        return
    delay = 0
    if attempt > 2:
        cfg = w.config
        delay = exponential_backoff_ms(cfg.workflow_task_retry_initial_ms, 2.0, cfg.workflow_task_retry_max_ms,
                                       attempt - 2)
        if max_delay_ms is not None:
            delay = min(delay, max_delay_ms)
    run.workflow_task = WorkflowTaskState(
        scheduled_event_id=run.next_event_id, started_event_id=run.next_event_id + 1, attempt=attempt,
        task_queue=run.task_queue, scheduled_time_ms=w.now_ms, started_time_ms=w.now_ms + delay,
        timeout_ms=run.task_timeout_ms, transient=True, retry_at_ms=w.now_ms + delay if delay else None,
        speculative=speculative, last_failure=last_failure, last_failure_cause=last_failure_cause,
    )
    if not delay:
        dispatch_transient(w, run)


def started_attributes(scheduled_event_id: int, config: Config, identity: str = "") -> Record:
    """A WORKFLOW_TASK_STARTED's attributes: the task saw history through its SCHEDULED, and its STARTED follows."""
    length = scheduled_event_id + 1
    return {"scheduled_event_id": scheduled_event_id, "history_length": length,
            "suggest_continue_as_new": length >= config.limits.history_warn_events, "identity": identity}


def shown_start_ms(task: WorkflowTaskState) -> int:
    """The time of the STARTED a task in flight carries to its worker: when it was dispatched."""
    return task.started_time_ms if task.transient or task.started_time_ms else task.scheduled_time_ms


def started_event(task: WorkflowTaskState, config: Config) -> Record:
    """The STARTED a task in flight carries to its worker: history does not have it (yet), so it is synthesised
    under the id the core reserved for it; the worker sets its time to when it took the task, and reports it."""
    return ev.make_event(ev.WORKFLOW_TASK_STARTED, task.started_event_id, shown_start_ms(task),
                         started_attributes(task.scheduled_event_id, config), CURRENT_VERSION[ev.WORKFLOW_TASK_STARTED])


def transient_task_events(run: RunState, config: Config) -> tuple[Record, Record]:
    """The scheduled/started events of a transient task, under its reserved ids and times: what the dispatched
    task shows the worker, and what is written if the attempt completes (with the start it reports)."""
    task = run.workflow_task
    assert task is not None and task.transient
    scheduled = ev.make_event(ev.WORKFLOW_TASK_SCHEDULED, task.scheduled_event_id, task.scheduled_time_ms, {
        "task_queue": task.task_queue, "start_to_close_timeout_ms": task.timeout_ms, "attempt": task.attempt},
        CURRENT_VERSION[ev.WORKFLOW_TASK_SCHEDULED])
    return scheduled, started_event(task, config)


# How far ahead of the engine's clock a worker's reported start may be. Further means a broken clock: the
# answer is refused (the task fails, saying so) rather than history getting a start from the future.
MAX_START_AHEAD_MS = 60_000


def start_problem(task: WorkflowTaskState, reported_ms: int, now_ms: int) -> str | None:
    """Why a worker's reported start cannot be recorded, or None. The worker clamps it to the task's own
    STARTED time, so earlier than that is never an honest worker."""
    shown = shown_start_ms(task)
    if reported_ms < shown or reported_ms > now_ms + MAX_START_AHEAD_MS:
        return (f"the worker reports taking the task at {reported_ms} ms, before it was dispatched ({shown}) or "
                f"more than {MAX_START_AHEAD_MS // 1000} s after the engine's clock ({now_ms}): check the worker's "
                "clock")
    return None


def record_start(w: Writer, run: RunState, reported_ms: int | None) -> int:
    """Write the STARTED of the task being answered, at the time its worker took it (the time the task showed, for
    a worker that reports none), unless history has it already (a task dispatched before version 2 of these
    events); the id of the STARTED. A transient attempt's SCHEDULED is written with it."""
    task = run.workflow_task
    assert task is not None
    if not task.transient and task.started_time_ms:
        return task.started_event_id
    at = shown_start_ms(task) if reported_ms is None else min(max(reported_ms, shown_start_ms(task)),
                                                                 w.now_ms + MAX_START_AHEAD_MS)
    if task.transient:
        w.materialize_transient_task(run.run_id, at)
        return task.started_event_id
    started = w.append(run.run_id, ev.WORKFLOW_TASK_STARTED,
                       started_attributes(task.scheduled_event_id, w.config, w.command["identity"]), time_ms=at)
    return int(started["event_id"])


def dispatch_transient(w: Writer, run: RunState) -> None:
    task = run.workflow_task
    assert task is not None
    carry_updates(w, run.run_id, task.scheduled_event_id)
    w.act(DispatchWorkflowTask(run.namespace, run.workflow_id, run.run_id, task.task_queue, task.scheduled_event_id,
                               task.started_event_id, task.attempt, run.last_workflow_task_started_event_id, True))


def carry_updates(w: Writer, run_id: str, scheduled_event_id: int) -> None:
    """The task being dispatched carries every update admitted and not yet answered (its record lists them): its
    answer must accept or reject each of them (`workflow_task.completed`)."""
    run = w.run(run_id)
    if run.admitted_updates:
        for update in w.edit(run_id).admitted_updates:
            update["delivered_task"] = scheduled_event_id


def reject_update(w: Writer, run_id: str, update_id: str, failure: Record) -> None:
    """Forget an admitted update, keeping why it was refused for its callers (the newest `KEEP_REJECTED`)."""
    run = w.edit(run_id)
    run.admitted_updates = [u for u in run.admitted_updates if u["update_id"] != update_id]
    kept = [u for u in run.rejected_updates if u["update_id"] != update_id]
    # Without its stack trace: the run's state is written at every step, and callers want the message.
    failure = {**failure, "stack_trace": ""}
    run.rejected_updates = [*kept, {"update_id": update_id, "failure": failure, "time_ms": w.now_ms}][-KEEP_REJECTED:]


KEEP_REJECTED = 100


def wake(w: Writer, run_id: str) -> None:
    """Something new for the workflow: a task now, or (if one is running) right after it (the applier noted it)."""
    run = w.run(run_id)
    if run.open and run.workflow_task is None and not in_first_task_backoff(run, w.now_ms):
        schedule_workflow_task(w, run_id)


def send(w: Writer, namespace: str, workflow_id: str, run_id: str, request_id: str, body: tuple[str, Record]) -> None:
    """A command for another workflow, produced in this transaction to that workflow's shard."""
    w.act(SendCommand(wire.command(namespace, workflow_id, body, run_id=run_id, request_id=request_id,
                                   identity=SHARD_IDENTITY, time_ms=w.now_ms)))


def close_run(w: Writer, run_id: str, event_type: str, attrs: Record, *, notify_parent: bool = True) -> None:
    """Close a run: the close event, then what closing means for its children, its parent and visibility.
    `notify_parent` False: a run that takes its place reports to the parent instead (a reset's new run)."""
    run = w.run(run_id)
    children = list(run.children.values())
    parent = run.parent
    w.append(run_id, event_type, attrs)
    for update in list(run.admitted_updates):  # never accepted: their callers hear the run closed first
        reject_update(w, run_id, update["update_id"], make_failure(
            f"the workflow run closed ({ev.CLOSE_STATUS.get(event_type, event_type)}) before it accepted the update",
            type="WorkflowClosed"))
    w.act(UpsertVisibility(run.namespace, run.workflow_id, run_id))
    if w.config.archive:
        w.act(Archive(run.namespace, run.workflow_id, run_id))
    for child in children:
        # The child may have continued-as-new since it started: address its current run, but only within the
        # chain that began with the run this parent started (child.run_id), never a later unrelated workflow.
        request = f"{run_id}/close/{child.initiated_event_id}"
        if child.parent_close_policy == "REQUEST_CANCEL":
            send(w, child.namespace, child.workflow_id, "", request, (
                wire.command_type("RequestCancelWorkflowExecution"),
                {"reason": "parent closed (parent close policy REQUEST_CANCEL)", "external": None,
                 "first_execution_run_id": child.run_id}))
        elif child.parent_close_policy != "ABANDON":  # TERMINATE, the default
            send(w, child.namespace, child.workflow_id, "", request, (
                wire.command_type("TerminateWorkflowExecution"),
                {"reason": "parent closed (parent close policy TERMINATE)", "details": [],
                 "first_execution_run_id": child.run_id}))
    if parent is not None and notify_parent and event_type != ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        notify_parent_of_close(w, run, parent, event_type, attrs)


def notify_parent_of_close(w: Writer, run: RunState, parent: Record, event_type: str, attrs: Record) -> None:
    status = ev.CLOSE_STATUS[event_type]
    send(w, parent["namespace"], parent["workflow_id"], parent["run_id"], f"{run.run_id}/closed", (
        wire.command_type("ChildWorkflowExecutionClosedNotification"), {
            "initiated_event_id": parent["initiated_event_id"],
            "child": {"workflow_id": run.workflow_id, "run_id": run.run_id},
            "workflow_type": run.workflow_type, "status": status,
            "result": attrs.get("result", []) if status == "COMPLETED" else [],
            "failure": attrs.get("failure") if status == "FAILED" else None,
            "retry_state": attrs.get("retry_state", "UNSPECIFIED"),
        }))


def enforce_history_limit(w: Writer, run_id: str) -> None:
    """Terminate a run whose history reached the hard cap, saying why (continue-as-new avoids it)."""
    run = w.run(run_id)
    cap = w.config.limits.history_max_events
    if run.schedule is not None:
        return  # a schedule cannot continue-as-new: terminating it would delete it (its history grows instead)
    if run.open and run.history_length >= cap:
        close_run(w, run_id, ev.WORKFLOW_EXECUTION_TERMINATED, {
            "reason": f"history reached {run.history_length} events, the limit is {cap} (history_max_events); "
                      "use continue-as-new to keep long-running workflows small",
            "identity": SHARD_IDENTITY})
