"""The workflow's commands, carried by a completed workflow task: validated together, then applied in order.

A batch with a bad command fails the task (BAD_COMMAND) before anything is written, so a workflow never sees
half of what it asked for.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from ostinato.schemas import wire
from ostinato.schemas.topics import task_queue_problem
from ostinato.streams import events as ev
from ostinato.streams import routing
from ostinato.streams.actions import DispatchActivityTask, EagerActivity, Publish, UpsertVisibility
from ostinato.streams.config import Config
from ostinato.streams.deadlines import fitting
from ostinato.streams.deciders import chain, updates
from ostinato.streams.deciders.common import close_run, new_run_id, send
from ostinato.streams.model import RunState
from ostinato.streams.retry import with_defaults
from ostinato.streams.search_attributes import checked
from ostinato.streams.writer import Writer

Record = dict[str, Any]
Handler = Callable[[Writer, str, Record, int], None]

COMPLETE = wire.command_type("CompleteWorkflowExecutionCommand")
FAIL = wire.command_type("FailWorkflowExecutionCommand")
CANCEL = wire.command_type("CancelWorkflowExecutionCommand")
CONTINUE = wire.command_type("ContinueAsNewWorkflowExecutionCommand")
CLOSING = frozenset({COMPLETE, FAIL, CANCEL, CONTINUE})
PUBLISH = wire.command_type("PublishRecordCommand")
ACCEPT_UPDATE = wire.command_type("AcceptUpdateCommand")
UPSERT = wire.command_type("UpsertWorkflowSearchAttributesCommand")
CHILD = wire.command_type("StartChildWorkflowExecutionCommand")
COMPLETE_UPDATE = wire.command_type("CompleteUpdateCommand")
# Kafka's internal topics. The cluster's own (`<prefix>.commands`...) depend on a prefix the core does not know: the
# server refuses `--egress-topics` patterns that match one, and the shell refuses to produce there.
ENGINE_TOPIC_PREFIXES = ("__",)


def validate_commands(run: RunState, commands: list[tuple[str, Record]], config: Config,
                      rejected_updates: list[Record] | tuple[Record, ...] = ()) -> str | None:
    """Why this batch (and the updates the answer rejects) cannot be applied to `run`, or None."""
    limits = config.limits
    task = run.workflow_task
    carried = {u["update_id"] for u in run.admitted_updates
               if task is not None and u["delivered_task"] == task.scheduled_event_id}
    answered: set[str] = set()
    # Accepted updates still running: only scanned (up to max_updates of them) when the answer completes any.
    in_progress = {u.update_id for u in run.updates.values() if not u.completed_event_id} \
        if any(name == COMPLETE_UPDATE for name, _ in commands) else set()
    activity_ids = {a.activity_id for a in run.activities.values()}
    timers = set(run.timers)
    cancel_requested = {a.scheduled_event_id for a in run.activities.values() if a.cancel_requested}
    activities = len(run.activities)
    children = len(run.children)
    external = len(run.external_requests)
    for i, (name, c) in enumerate(commands):
        short = name.removeprefix(wire.COMMAND_PREFIX)
        queue = c.get("task_queue") if isinstance(c, dict) else None
        if queue and (problem := task_queue_problem(queue)) is not None:
            return f"command {i} ({short}): {problem}"
        if name in CLOSING and i != len(commands) - 1:
            return f"command {i} ({short}) closes the workflow but is not the last command"
        if name == wire.command_type("ScheduleActivityTaskCommand"):
            if not c["activity_id"] or not c["activity_type"]:
                return f"command {i}: activity_id and activity_type are required"
            if c["activity_id"] in activity_ids:
                return f"command {i}: activity id {c['activity_id']!r} is already in use"
            if c["schedule_to_close_timeout_ms"] is None and c["start_to_close_timeout_ms"] is None:
                return f"command {i}: an activity needs start_to_close_timeout or schedule_to_close_timeout"
            for field in ("schedule_to_close_timeout_ms", "schedule_to_start_timeout_ms", "start_to_close_timeout_ms",
                          "heartbeat_timeout_ms"):
                if c[field] is not None and c[field] <= 0:
                    return f"command {i}: {field} must be positive"
            activity_ids.add(c["activity_id"])
            activities += 1
            if activities > limits.max_pending_activities:
                return f"more than {limits.max_pending_activities} pending activities (max_pending_activities)"
        elif name == wire.command_type("RequestCancelActivityTaskCommand"):
            if c["scheduled_event_id"] not in run.activities:
                return f"command {i}: no pending activity scheduled at event {c['scheduled_event_id']}"
            if c["scheduled_event_id"] in cancel_requested:
                return f"command {i}: cancellation of activity {c['scheduled_event_id']} was already requested"
            cancel_requested.add(c["scheduled_event_id"])
        elif name == wire.command_type("StartTimerCommand"):
            if not c["timer_id"] or c["timer_id"] in timers:
                return f"command {i}: timer id {c['timer_id']!r} is empty or already in use"
            if c["start_to_fire_timeout_ms"] <= 0:
                return f"command {i}: start_to_fire_timeout must be positive"
            timers.add(c["timer_id"])
        elif name == wire.command_type("CancelTimerCommand"):
            if c["timer_id"] not in timers:
                return f"command {i}: no timer {c['timer_id']!r} to cancel"
            timers.discard(c["timer_id"])
        elif name == wire.command_type("StartChildWorkflowExecutionCommand"):
            if not c["workflow_id"] or not c["workflow_type"]:
                return f"command {i}: a child needs workflow_id and workflow_type"
            children += 1
            if children > limits.max_pending_children:
                return f"more than {limits.max_pending_children} pending children (max_pending_children)"
        elif name in (wire.command_type("SignalExternalWorkflowExecutionCommand"),
                      wire.command_type("RequestCancelExternalWorkflowExecutionCommand")):
            if not c["execution"]["workflow_id"]:
                return f"command {i}: the target workflow_id is required"
            external += 1
            if external > limits.max_pending_external_requests:
                return (f"more than {limits.max_pending_external_requests} pending external signals and "
                        "cancellations (max_pending_external_requests)")
        elif name == wire.command_type("RecordMarkerCommand") and not c["marker_name"]:
            return f"command {i}: marker_name is required"
        elif name == PUBLISH and (problem := egress_problem(c["topic"], config)) is not None:
            return f"command {i}: {problem}"
        elif name == ACCEPT_UPDATE:
            if c["update_id"] not in carried or c["update_id"] in answered:
                return f"command {i}: update {c['update_id']!r} was not carried by this task, or is answered twice"
            answered.add(c["update_id"])
            in_progress.add(c["update_id"])
        elif name == COMPLETE_UPDATE:
            if c["update_id"] not in in_progress:
                return f"command {i}: update {c['update_id']!r} is not accepted and in progress"
            in_progress.discard(c["update_id"])
        elif name not in HANDLERS:
            return f"command {i}: unknown command {name}"
        if (problem := _search_attributes_problem(run, name, c, config)) is not None:
            return f"command {i} ({short}): {problem}"
    for rejection in rejected_updates:
        if rejection["update_id"] not in carried or rejection["update_id"] in answered:
            return f"rejected update {rejection['update_id']!r} was not carried by this task, or is answered twice"
        answered.add(rejection["update_id"])
    return None


def _search_attributes_problem(run: RunState, name: str, c: Record, config: Config) -> str | None:
    """What the namespace's registry refuses in a command's search attributes (a child in another namespace is
    checked by its own start)."""
    if name == CHILD and (c["namespace"] or run.namespace) != run.namespace:
        return None
    if name not in (UPSERT, CHILD, CONTINUE) or c["search_attributes"] is None:
        return None
    return checked(c["search_attributes"], config.search_attributes, run.namespace)[0]


def schedule_activity(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    run = w.run(run_id)
    start_to_close = c["start_to_close_timeout_ms"] or c["schedule_to_close_timeout_ms"]
    schedule_to_start = c["schedule_to_start_timeout_ms"]
    if schedule_to_start is not None and c["schedule_to_close_timeout_ms"] is not None:
        schedule_to_start = min(schedule_to_start, c["schedule_to_close_timeout_ms"])
    event = w.append(run_id, ev.ACTIVITY_TASK_SCHEDULED, {
        "activity_id": c["activity_id"], "activity_type": c["activity_type"],
        "task_queue": c["task_queue"] or run.task_queue, "header": c["header"], "input": c["input"],
        "schedule_to_close_timeout_ms": c["schedule_to_close_timeout_ms"],
        "schedule_to_start_timeout_ms": schedule_to_start, "start_to_close_timeout_ms": start_to_close,
        "heartbeat_timeout_ms": c["heartbeat_timeout_ms"], "workflow_task_completed_event_id": completed_id,
        "retry_policy": with_defaults(c["retry_policy"])})
    queue = c["task_queue"] or run.task_queue
    if c.get("request_eager_execution") and w.answered and queue not in w.config.rate_limited_queues \
            and routing.worker_serves_activity(run, ev.attributes(event)["task_queue"], w.config,
                                               routing.answering_build(w.command["body"][1])):
        # Eager activity dispatch: the worker answering this task runs the first attempt itself. It is started
        # for that worker here, as RecordActivityTaskStarted would, and handed back in the reply; from now on
        # the attempt's timeouts protect it exactly as for a task taken off the activity topic. Not on a
        # rate-limited queue: that would start the attempt without passing the queue's limiter.
        activity = w.edit(run_id).activities[event["event_id"]]
        activity.started_time_ms = w.now_ms
        activity.started_identity = w.command["identity"]
        w.eager_activities.append(EagerActivity(run_id, event["event_id"], activity.attempt))
        return
    w.act(DispatchActivityTask(run.namespace, run.workflow_id, run_id, event["event_id"], 1))


def request_cancel_activity(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    """An activity not running (queued, or between attempts) is canceled at once; a running one is told at
    its next heartbeat and answers with RespondActivityTaskCanceled."""
    activity = w.run(run_id).activities[c["scheduled_event_id"]]
    requested = w.append(run_id, ev.ACTIVITY_TASK_CANCEL_REQUESTED, {
        "scheduled_event_id": activity.scheduled_event_id, "workflow_task_completed_event_id": completed_id})
    if activity.started_time_ms is None:
        w.append(run_id, ev.ACTIVITY_TASK_CANCELED, {
            "details": [], "latest_cancel_requested_event_id": requested["event_id"],
            "scheduled_event_id": activity.scheduled_event_id, "started_event_id": 0, "identity": ""})
        w.wake_after_task(run_id)  # the workflow must hear of it: a task follows this one


def start_timer(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    w.append(run_id, ev.TIMER_STARTED, {"timer_id": c["timer_id"],
                                        "start_to_fire_timeout_ms": fitting(w.now_ms, c["start_to_fire_timeout_ms"]),
                                        "workflow_task_completed_event_id": completed_id})


def cancel_timer(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    timer = w.run(run_id).timers[c["timer_id"]]
    w.append(run_id, ev.TIMER_CANCELED, {"timer_id": timer.timer_id, "started_event_id": timer.started_event_id,
                                         "workflow_task_completed_event_id": completed_id,
                                         "identity": w.command["identity"]})


def complete(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    chain.complete(w, run_id, c["result"], completed_id)  # or the next cron run


def fail(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    chain.fail(w, run_id, c["failure"], completed_id)  # or a retry, or the next cron run


def cancel(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    close_run(w, run_id, ev.WORKFLOW_EXECUTION_CANCELED,
              {"details": c["details"], "workflow_task_completed_event_id": completed_id})


def continue_as_new(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    """Close this run and start the next one with the same workflow id, carrying over what the command omits."""
    from ostinato.streams.deciders.start import start_run

    run = w.run(run_id)
    new_id = new_run_id(run.namespace, run.workflow_id, run_id, "continued")
    memo = run.memo if c["memo"] is None else c["memo"]
    search_attributes = run.search_attributes if c["search_attributes"] is None else \
        checked(c["search_attributes"], w.config.search_attributes, run.namespace)[1]
    workflow_type = c["workflow_type"] or run.workflow_type
    task_queue = c["task_queue"] or run.task_queue
    task_timeout = c["task_timeout_ms"] or run.task_timeout_ms
    run_timeout = c["run_timeout_ms"]
    if run_timeout is None and run.run_expiration_time_ms is not None:
        run_timeout = max(1, run.run_expiration_time_ms - run.execution_time_ms)
    run_timeout = None if run_timeout is None else fitting(w.now_ms, run_timeout)  # the applier adds it to now
    carried = {"parent": run.parent, "first": run.first_execution_run_id, "expires": run.execution_expiration_time_ms,
               "request": w.workflow.current.start_request_id if w.workflow.current else "", "retry": run.retry_policy}
    close_run(w, run_id, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW, {
        "new_execution_run_id": new_id, "workflow_type": workflow_type, "task_queue": task_queue,
        "input": c["input"], "run_timeout_ms": run_timeout, "task_timeout_ms": task_timeout,
        "backoff_start_interval_ms": c["backoff_start_interval_ms"], "initiator": "WORKFLOW", "header": c["header"],
        "memo": memo, "search_attributes": search_attributes, "workflow_task_completed_event_id": completed_id})
    start_run(w, new_id, {
        "workflow_type": workflow_type, "task_queue": task_queue, "input": c["input"], "execution_timeout_ms": None,
        "run_timeout_ms": run_timeout, "task_timeout_ms": task_timeout,
        "retry_policy": c["retry_policy"] or carried["retry"], "memo": dict(memo),
        "search_attributes": dict(search_attributes), "header": c["header"], "parent": carried["parent"],
        "first_execution_run_id": carried["first"], "continued_execution_run_id": run_id,
        "execution_expiration_time_ms": carried["expires"], "identity": w.command["identity"],
        "request_id": carried["request"], "cron_schedule": run.cron_schedule,
        "last_completion_result": list(run.last_completion_result),
        "first_workflow_task_backoff_ms": fitting(w.now_ms, max(0, c["backoff_start_interval_ms"]))})


def start_child(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    run = w.run(run_id)
    namespace = c["namespace"] or run.namespace
    policy = c["parent_close_policy"] if c["parent_close_policy"] != "UNSPECIFIED" else "TERMINATE"
    task_queue = c["task_queue"] or run.task_queue
    task_timeout = c["task_timeout_ms"] or run.task_timeout_ms
    event = w.append(run_id, ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED, {
        "namespace": namespace, "workflow_id": c["workflow_id"], "workflow_type": c["workflow_type"],
        "task_queue": task_queue, "input": c["input"], "execution_timeout_ms": c["execution_timeout_ms"],
        "run_timeout_ms": c["run_timeout_ms"], "task_timeout_ms": task_timeout, "parent_close_policy": policy,
        "workflow_task_completed_event_id": completed_id, "id_reuse_policy": c["id_reuse_policy"],
        "retry_policy": c["retry_policy"], "header": c["header"], "memo": c["memo"],
        "search_attributes": c["search_attributes"], "cron_schedule": c["cron_schedule"]})
    send(w, namespace, c["workflow_id"], "", f"{run_id}/child/{event['event_id']}", (
        wire.command_type("StartWorkflowExecution"), {
            "workflow_type": c["workflow_type"], "task_queue": task_queue, "input": c["input"],
            "execution_timeout_ms": c["execution_timeout_ms"], "run_timeout_ms": c["run_timeout_ms"],
            "task_timeout_ms": task_timeout, "id_reuse_policy": c["id_reuse_policy"], "id_conflict_policy": "FAIL",
            "retry_policy": c["retry_policy"], "memo": c["memo"], "search_attributes": c["search_attributes"],
            "header": c["header"], "cron_schedule": c["cron_schedule"], "parent": {
                "namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run_id,
                "initiated_event_id": event["event_id"], "parent_close_policy": policy}}))


def _external(w: Writer, run_id: str, c: Record, completed_id: int, event_type: str,
              body: tuple[str, Record], extra: Record, chain: str = "") -> None:
    run = w.run(run_id)
    namespace = c["namespace"] or run.namespace
    event = w.append(run_id, event_type, {
        "workflow_task_completed_event_id": completed_id, "namespace": namespace, "workflow_execution": c["execution"],
        "child_workflow_only": c["child_workflow_only"], **extra})
    origin = {"namespace": run.namespace, "workflow_id": run.workflow_id, "run_id": run_id,
              "initiated_event_id": event["event_id"], "child_workflow_only": c["child_workflow_only"]}
    target = c["execution"]
    addressed = (target["run_id"], {}) if not chain else ("", {"first_execution_run_id": chain})
    send(w, namespace, target["workflow_id"], addressed[0], f"{run_id}/external/{event['event_id']}",
         (body[0], {**body[1], **addressed[1], "external": origin}))


def signal_external(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    _external(w, run_id, c, completed_id, ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
              (wire.command_type("SignalWorkflowExecution"),
               {"signal_name": c["signal_name"], "input": c["input"], "header": c["header"]}),
              {"signal_name": c["signal_name"], "input": c["input"], "header": c["header"]})


def cancel_external(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    # A child named by the run it started as may have moved on since (retried, cron, continue-as-new): the request
    # goes to its chain's current run, never to a later unrelated workflow with the same id.
    target = c["execution"]
    chain = target["run_id"] if any(
        child.workflow_id == target["workflow_id"] and child.run_id == target["run_id"] and target["run_id"]
        for child in w.run(run_id).children.values()) else ""
    _external(w, run_id, c, completed_id, ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
              (wire.command_type("RequestCancelWorkflowExecution"), {"reason": c["reason"]}), {"reason": c["reason"]},
              chain)


def record_marker(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    w.append(run_id, ev.MARKER_RECORDED, {"marker_name": c["marker_name"], "details": c["details"],
                                          "workflow_task_completed_event_id": completed_id, "header": c["header"],
                                          "failure": c["failure"]})


def upsert_search_attributes(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    typed = checked(c["search_attributes"], w.config.search_attributes, w.workflow.namespace)[1]
    w.append(run_id, ev.UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, {"workflow_task_completed_event_id": completed_id,
                                                            "search_attributes": typed})
    w.act(UpsertVisibility(w.workflow.namespace, w.workflow.workflow_id, run_id))


def egress_problem(topic: str, config: Config) -> str | None:
    """Why a workflow may not publish to `topic`, or None. Only topics the servers allow (`--egress-topics`), never
    the engine's own (whose records only the engine may write), and only names Kafka accepts."""
    if not topic or len(topic) > 249 or not all(ch.isascii() and (ch.isalnum() or ch in "._-") for ch in topic):
        return f"{topic!r} is not a Kafka topic name (1-249 of [A-Za-z0-9._-])"
    if topic.startswith(ENGINE_TOPIC_PREFIXES):
        return f"topic {topic!r} looks like one of the engine's own topics; a workflow may not publish there"
    if not any(fnmatch.fnmatchcase(topic, pattern) for pattern in config.egress_topics):
        allowed = ", ".join(config.egress_topics) or "none"
        return (f"publishing to {topic!r} is not allowed on this cluster (allowed: {allowed}); start the servers "
                "with --egress-topics to allow it")
    return None


def publish_record(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    w.append(run_id, ev.RECORD_PUBLISHED, {"workflow_task_completed_event_id": completed_id, "topic": c["topic"],
                                           "key": c["key"], "value": c["value"], "headers": c["headers"]})
    w.act(Publish(w.workflow.namespace, w.workflow.workflow_id, c["topic"], c["key"], c["value"],
                  tuple(sorted(c["headers"].items()))))


def modify_properties(w: Writer, run_id: str, c: Record, completed_id: int) -> None:
    w.append(run_id, ev.WORKFLOW_PROPERTIES_MODIFIED, {"workflow_task_completed_event_id": completed_id,
                                                       "upserted_memo": c["upserted_memo"]})
    w.act(UpsertVisibility(w.workflow.namespace, w.workflow.workflow_id, run_id))


HANDLERS: dict[str, Handler] = {
    wire.command_type("ScheduleActivityTaskCommand"): schedule_activity,
    wire.command_type("RequestCancelActivityTaskCommand"): request_cancel_activity,
    wire.command_type("StartTimerCommand"): start_timer,
    wire.command_type("CancelTimerCommand"): cancel_timer,
    COMPLETE: complete,
    FAIL: fail,
    CANCEL: cancel,
    CONTINUE: continue_as_new,
    wire.command_type("StartChildWorkflowExecutionCommand"): start_child,
    wire.command_type("SignalExternalWorkflowExecutionCommand"): signal_external,
    wire.command_type("RequestCancelExternalWorkflowExecutionCommand"): cancel_external,
    wire.command_type("RecordMarkerCommand"): record_marker,
    wire.command_type("UpsertWorkflowSearchAttributesCommand"): upsert_search_attributes,
    wire.command_type("ModifyWorkflowPropertiesCommand"): modify_properties,
    PUBLISH: publish_record,
    ACCEPT_UPDATE: updates.accept,
    COMPLETE_UPDATE: updates.complete,
}
