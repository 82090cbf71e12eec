"""Workflow task deciders: stale answers, every workflow command, invalid batches, failures, timeouts and transient
retries. Every step goes through `Harness`, which replays the history and compares the durable state byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ostinato.streams.actions import (
    CancelTimer,
    DispatchActivityTask,
    DispatchWorkflowTask,
    Publish,
    Reply,
    ScheduleTimer,
    SendCommand,
    UpsertVisibility,
)
from ostinato.streams.config import Config
from ostinato.streams.model import encode_run
from ostinato.streams.retry import DEFAULT_ACTIVITY_RETRY
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, wf_command
from tests.unit.core.task_support import (
    CANCEL,
    COMPLETE,
    CONTINUE,
    FAIL,
    NULL,
    PARENT,
    START,
    TASK_TIMEOUT,
    Command,
    Flow,
    Record,
    activity_cmd,
    assert_dispatched,
    attrs,
    cancel_ext_cmd,
    child_cmd,
    event,
    failure,
    of,
    payload,
    rejected,
    reply,
    signal_ext_cmd,
    started_flow,
    task_failed_reply,
    timer_cmd,
    timers,
    types,
    with_limits,
    with_task_in_flight,
)

# -- workflow task answers that are not for the task in flight ----------------------------------------------------

def _no_task_left(flow: Flow) -> dict[str, Any]:
    flow.complete_task()
    return {}


def _closed(flow: Flow) -> dict[str, Any]:
    task = flow.run.workflow_task
    assert task is not None
    flow.complete_task(COMPLETE)
    return {"scheduled_event_id": task.scheduled_event_id}


def _waiting_for_backoff(flow: Flow) -> dict[str, Any]:
    flow.fail_task()
    flow.fail_task()
    task = flow.run.workflow_task
    assert task is not None and task.retry_at_ms is not None
    return {"scheduled_event_id": task.scheduled_event_id, "attempt": task.attempt}


STALE_ANSWERS = [
    pytest.param(lambda f: {}, {"run_id": ""}, "NOT_FOUND", id="empty run id"),
    pytest.param(lambda f: {}, {"run_id": "no-such-run"}, "NOT_FOUND", id="unknown run id"),
    pytest.param(lambda f: {"scheduled_event_id": 99}, {}, "STALE_TASK", id="wrong scheduled event id"),
    pytest.param(lambda f: {"attempt": 2}, {}, "STALE_TASK", id="wrong attempt"),
    pytest.param(_no_task_left, {}, "STALE_TASK", id="duplicate answer after the task completed"),
    pytest.param(_closed, {}, "STALE_TASK", id="run already closed"),
    pytest.param(_waiting_for_backoff, {}, "STALE_TASK", id="transient attempt still waiting for its backoff"),
]


@pytest.mark.parametrize("answer", ["RespondWorkflowTaskCompleted", "RespondWorkflowTaskFailed"])
@pytest.mark.parametrize(("setup", "envelope", "code"), STALE_ANSWERS)
def test_stale_workflow_task_answer_is_rejected_and_changes_nothing(
        answer: str, setup: Callable[[Flow], dict[str, Any]], envelope: dict[str, Any], code: str) -> None:
    flow = started_flow()
    body = {"scheduled_event_id": 2, "attempt": 1}
    body.update(setup(flow))
    before = encode_run(flow.run)
    if answer == "RespondWorkflowTaskCompleted":
        body["commands"] = [COMPLETE]
    else:
        body["failure"] = failure()
    step = flow.send(answer, body, **{"run_id": flow.run_id, **envelope})
    assert rejected(step) == code
    assert step.actions == of(step, Reply)
    assert encode_run(flow.run) == before


# -- every workflow command ---------------------------------------------------------------------------------------

@dataclass
class CommandCase:
    commands: Callable[[Flow], list[Command]]
    events: list[str]  # after WORKFLOW_TASK_COMPLETED
    check: Callable[[Flow, Step], None]
    setup: Callable[[Flow], None] | None = None
    start: dict[str, Any] | None = None
    more: bool = False  # later events may follow (e.g. the task that reports an activity canceled before it started)


def _check_activity_defaults(flow: Flow, step: Step) -> None:
    a = attrs(step, "ACTIVITY_TASK_SCHEDULED")
    assert a["retry_policy"] == DEFAULT_ACTIVITY_RETRY
    assert a["task_queue"] == "orders"
    assert a["workflow_task_completed_event_id"] == event(step, "WORKFLOW_TASK_COMPLETED")["event_id"]
    sid = event(step, "ACTIVITY_TASK_SCHEDULED")["event_id"]
    assert of(step, DispatchActivityTask) == [DispatchActivityTask(NS, WF, flow.run_id, sid, 1)]
    activity = flow.run.activities[sid]
    assert (activity.activity_id, activity.attempt, activity.started_time_ms) == ("a1", 1, None)


def _check_activity_policy_normalised(flow: Flow, step: Step) -> None:
    assert attrs(step, "ACTIVITY_TASK_SCHEDULED")["retry_policy"] == {
        **DEFAULT_ACTIVITY_RETRY, "maximum_attempts": 3, "non_retryable_error_types": ["Bad"]}
    assert attrs(step, "ACTIVITY_TASK_SCHEDULED")["task_queue"] == "payments"


def _check_two_activities(flow: Flow, step: Step) -> None:
    sids = [e["event_id"] for _, e in step.events if e["event_type"] == "ACTIVITY_TASK_SCHEDULED"]
    assert [(a.scheduled_event_id, a.attempt) for a in of(step, DispatchActivityTask)] == [(sids[0], 1), (sids[1], 1)]
    assert sorted(a.activity_id for a in flow.run.activities.values()) == ["a1", "a2"]


def _schedule_activity(flow: Flow) -> None:
    flow.complete_task(activity_cmd())
    with_task_in_flight(flow)


def _schedule_and_start_activity(flow: Flow) -> None:
    _schedule_activity(flow)
    flow.activity("RecordActivityTaskStarted", 5)


def _check_cancel_unstarted(flow: Flow, step: Step) -> None:
    requested = event(step, "ACTIVITY_TASK_CANCEL_REQUESTED")
    canceled = attrs(step, "ACTIVITY_TASK_CANCELED")
    assert (canceled["scheduled_event_id"], canceled["started_event_id"]) == (5, 0)
    assert canceled["latest_cancel_requested_event_id"] == requested["event_id"]
    assert flow.run.activities == {}


def _check_cancel_started(flow: Flow, step: Step) -> None:
    requested = event(step, "ACTIVITY_TASK_CANCEL_REQUESTED")
    activity = flow.run.activities[5]
    assert (activity.cancel_requested, activity.cancel_requested_event_id) == (True, requested["event_id"])
    assert of(step, DispatchWorkflowTask) == []  # nothing for the workflow to see until the worker answers


def _start_timer(flow: Flow) -> None:
    flow.complete_task(timer_cmd())
    with_task_in_flight(flow)


def _check_timer_started(flow: Flow, step: Step) -> None:
    fired_at = START + 5_000
    assert flow.run.timers["t1"].fire_at_ms == fired_at
    assert ("USER_TIMER", fired_at, 0) in timers(step, ScheduleTimer)


def _check_timer_canceled(flow: Flow, step: Step) -> None:
    assert attrs(step, "TIMER_CANCELED")["started_event_id"] == 5
    assert flow.run.timers == {}
    assert ("USER_TIMER", START + 5_000, 0) in timers(step, CancelTimer)


def _check_timer_restarted(flow: Flow, step: Step) -> None:
    assert flow.run.timers["t1"].started_event_id == step.events[-1][1]["event_id"] == 7


def _check_closed(status: str) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        run = flow.run
        assert (run.status, run.close_time_ms, run.workflow_task) == (status, START, None)
        assert flow.workflow.current is not None and flow.workflow.current.status == status
        assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, flow.run_id)]
        assert of(step, DispatchWorkflowTask) == []
        assert timers(step, ScheduleTimer) == [("RETENTION", START + flow.config.retention_ms, 0)]
        assert step.pointer_changed
    return check


def _check_completed(flow: Flow, step: Step) -> None:
    _check_closed("COMPLETED")(flow, step)
    assert attrs(step, "WORKFLOW_EXECUTION_COMPLETED")["result"] == [payload(b"42")]


def _check_failed(flow: Flow, step: Step) -> None:
    _check_closed("FAILED")(flow, step)
    assert attrs(step, "WORKFLOW_EXECUTION_FAILED")["failure"]["message"] == "workflow failed"


def _check_child(policy: str) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        initiated = event(step, "START_CHILD_WORKFLOW_EXECUTION_INITIATED")
        a = initiated["attributes"][1]
        assert (a["namespace"], a["workflow_id"], a["task_queue"], a["parent_close_policy"]) == (
            NS, "child-1", "orders", policy)
        assert a["task_timeout_ms"] == TASK_TIMEOUT
        (sent,) = of(step, SendCommand)
        cmd = sent.command
        assert (cmd["namespace"], cmd["workflow_id"], cmd["run_id"]) == (NS, "child-1", "")
        assert cmd["request_id"] == f"{flow.run_id}/child/{initiated['event_id']}"
        name, body = cmd["body"]
        assert name == "ostinato.command.StartWorkflowExecution"
        assert (body["workflow_type"], body["task_queue"], body["id_conflict_policy"]) == ("Ship", "orders", "FAIL")
        assert body["parent"] == {"namespace": NS, "workflow_id": WF, "run_id": flow.run_id,
                                  "initiated_event_id": initiated["event_id"], "parent_close_policy": policy}
        child = flow.run.children[initiated["event_id"]]
        assert (child.workflow_id, child.parent_close_policy, child.started_event_id) == ("child-1", policy, 0)
    return check


def _check_external(event_type: str, command: str, kind: str, extra: Record) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        initiated = event(step, event_type)
        (sent,) = of(step, SendCommand)
        cmd = sent.command
        assert (cmd["namespace"], cmd["workflow_id"]) == (NS, "other-1")
        assert cmd["request_id"] == f"{flow.run_id}/external/{initiated['event_id']}"
        assert cmd["reply_partition"] is None
        name, body = cmd["body"]
        assert name == command
        assert body["external"] == {"namespace": NS, "workflow_id": WF, "run_id": flow.run_id,
                                    "initiated_event_id": initiated["event_id"], "child_workflow_only": False}
        assert {k: body[k] for k in extra} == extra
        request = flow.run.external_requests[initiated["event_id"]]
        assert (request.kind, request.workflow_id) == (kind, "other-1")
    return check


def _check_patches(expected: list[str]) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        assert flow.run.patches == expected
    return check


def _check_search_attributes(expected: Record) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        assert flow.run.search_attributes == expected
        assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, flow.run_id)]
    return check


def _check_memo(expected: Record) -> Callable[[Flow, Step], None]:
    def check(flow: Flow, step: Step) -> None:
        assert flow.run.memo == expected
        assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, flow.run_id)]
    return check


def _marker(name: str) -> Command:
    return wf_command("RecordMarkerCommand", {"marker_name": name})


def _upsert_sa(values: Record) -> Command:
    return wf_command("UpsertWorkflowSearchAttributesCommand", {"search_attributes": values})


def _modify_memo(values: Record) -> Command:
    return wf_command("ModifyWorkflowPropertiesCommand", {"upserted_memo": values})


EGRESS = Config(egress_topics=("orders.*",))


def _publish(topic: str = "orders.events", value: bytes | None = b'{"n":1}', key: bytes | None = b"o-1",
             headers: Record | None = None) -> Command:
    return wf_command("PublishRecordCommand", {"topic": topic, "key": key, "value": value,
                                               "headers": headers or {}})


def test_a_published_record_is_an_event_and_an_action_in_workflow_order() -> None:
    flow = started_flow(EGRESS)
    step = flow.complete_task(_publish(value=b"1"), _publish(value=b"2", key=None, headers={"h": b"v"}), COMPLETE)
    assert types(step)[2:] == ["RECORD_PUBLISHED", "RECORD_PUBLISHED", "WORKFLOW_EXECUTION_COMPLETED"]
    published = [a for _, e in step.events if e["event_type"] == "RECORD_PUBLISHED" for a in [e["attributes"][1]]]
    completed_id = event(step, "WORKFLOW_TASK_COMPLETED")["event_id"]
    assert [(p["topic"], p["key"], p["value"], p["headers"], p["workflow_task_completed_event_id"])
            for p in published] == [("orders.events", b"o-1", b"1", {}, completed_id),
                                    ("orders.events", None, b"2", {"h": b"v"}, completed_id)]
    assert of(step, Publish) == [Publish(NS, WF, "orders.events", b"o-1", b"1", ()),
                                 Publish(NS, WF, "orders.events", None, b"2", (("h", b"v"),))]


COMMAND_CASES = [
    pytest.param(CommandCase(lambda f: [activity_cmd()], ["ACTIVITY_TASK_SCHEDULED"], _check_activity_defaults),
                 id="schedule activity gets the default retry policy and the run's task queue"),
    pytest.param(CommandCase(
        lambda f: [activity_cmd(task_queue="payments", retry_policy={
            "initial_interval_ms": 0, "backoff_coefficient": 0.5, "maximum_attempts": 3,
            "non_retryable_error_types": ["Bad"]})],
        ["ACTIVITY_TASK_SCHEDULED"], _check_activity_policy_normalised),
        id="schedule activity normalises a partial retry policy"),
    pytest.param(CommandCase(lambda f: [activity_cmd("a1"), activity_cmd("a2")],
                             ["ACTIVITY_TASK_SCHEDULED", "ACTIVITY_TASK_SCHEDULED"], _check_two_activities),
                 id="two activities in one batch"),
    pytest.param(CommandCase(
        lambda f: [wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 5})],
        ["ACTIVITY_TASK_CANCEL_REQUESTED", "ACTIVITY_TASK_CANCELED"], _check_cancel_unstarted,
        setup=_schedule_activity, more=True), id="cancel activity before it started cancels it at once"),
    pytest.param(CommandCase(
        lambda f: [wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 5})],
        ["ACTIVITY_TASK_CANCEL_REQUESTED"], _check_cancel_started,
        setup=_schedule_and_start_activity), id="cancel activity after it started only requests it"),
    pytest.param(CommandCase(lambda f: [timer_cmd()], ["TIMER_STARTED"], _check_timer_started), id="start timer"),
    pytest.param(CommandCase(
        lambda f: [wf_command("CancelTimerCommand", {"timer_id": "t1"})], ["TIMER_CANCELED"], _check_timer_canceled,
        setup=_start_timer), id="cancel timer"),
    pytest.param(CommandCase(
        lambda f: [timer_cmd(), wf_command("CancelTimerCommand", {"timer_id": "t1"}), timer_cmd()],
        ["TIMER_STARTED", "TIMER_CANCELED", "TIMER_STARTED"], _check_timer_restarted),
        id="start, cancel and restart a timer in one batch"),
    pytest.param(CommandCase(lambda f: [COMPLETE], ["WORKFLOW_EXECUTION_COMPLETED"], _check_completed),
                 id="complete workflow"),
    pytest.param(CommandCase(lambda f: [FAIL], ["WORKFLOW_EXECUTION_FAILED"], _check_failed), id="fail workflow"),
    pytest.param(CommandCase(lambda f: [CANCEL], ["WORKFLOW_EXECUTION_CANCELED"], _check_closed("CANCELED")),
                 id="cancel workflow"),
    pytest.param(CommandCase(lambda f: [activity_cmd(), timer_cmd(), COMPLETE],
                             ["ACTIVITY_TASK_SCHEDULED", "TIMER_STARTED", "WORKFLOW_EXECUTION_COMPLETED"],
                             _check_closed("COMPLETED")),
                 id="closing command last after others"),
    pytest.param(CommandCase(lambda f: [child_cmd()], ["START_CHILD_WORKFLOW_EXECUTION_INITIATED"],
                             _check_child("TERMINATE")), id="start child with the default parent close policy"),
    pytest.param(CommandCase(lambda f: [child_cmd(parent_close_policy="ABANDON")],
                             ["START_CHILD_WORKFLOW_EXECUTION_INITIATED"], _check_child("ABANDON")),
                 id="start child with an explicit parent close policy"),
    pytest.param(CommandCase(lambda f: [signal_ext_cmd()], ["SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"],
                             _check_external("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
                                             "ostinato.command.SignalWorkflowExecution", "SIGNAL",
                                             {"signal_name": "poke"})), id="signal external workflow"),
    pytest.param(CommandCase(lambda f: [cancel_ext_cmd()], ["REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"],
                             _check_external("REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
                                             "ostinato.command.RequestCancelWorkflowExecution", "CANCEL",
                                             {"reason": "stop"})), id="cancel external workflow"),
    pytest.param(CommandCase(lambda f: [_marker("patch:fix-1"), _marker("patch:fix-1"), _marker("patch:fix-2")],
                             ["MARKER_RECORDED"] * 3, _check_patches(["fix-1", "fix-2"])),
                 id="patch markers fill patches once each"),
    pytest.param(CommandCase(lambda f: [_marker("SideEffect"), _marker("version")], ["MARKER_RECORDED"] * 2,
                             _check_patches([])), id="other markers leave patches alone"),
    pytest.param(CommandCase(lambda f: [_upsert_sa({"CustomerId": payload(b'"c-1"'), "Amount": payload(b"5")})],
                             ["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"],
                             _check_search_attributes({"CustomerId": payload(b'"c-1"'), "Amount": payload(b"5")})),
                 id="upsert search attributes"),
    pytest.param(CommandCase(lambda f: [_upsert_sa({"CustomerId": NULL, "Amount": payload(b"6")})],
                             ["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"], _check_search_attributes({"Amount": payload(b"6")}),
                             start={"search_attributes": {"CustomerId": payload(b'"c-1"'), "Amount": payload(b"5")}}),
                 id="null search attribute payload removes the key"),
    pytest.param(CommandCase(lambda f: [_modify_memo({"note": payload(b'"hi"')})], ["WORKFLOW_PROPERTIES_MODIFIED"],
                             _check_memo({"keep": payload(b"1"), "note": payload(b'"hi"')}),
                             start={"memo": {"keep": payload(b"1")}}), id="upsert memo"),
    pytest.param(CommandCase(lambda f: [_modify_memo({"keep": NULL, "gone-anyway": NULL})],
                             ["WORKFLOW_PROPERTIES_MODIFIED"], _check_memo({}),
                             start={"memo": {"keep": payload(b"1")}}),
                 id="null memo payload removes the key"),
]


@pytest.mark.parametrize("case", COMMAND_CASES)
def test_workflow_command(case: CommandCase) -> None:
    flow = started_flow(**(case.start or {}))
    if case.setup is not None:
        case.setup(flow)
    task = flow.run.workflow_task
    assert task is not None
    # scheduled, not started: the id of its STARTED is only reserved, and no start time is known
    scheduled_id, reserved, dispatched_at, attempt = (
        task.scheduled_event_id, task.started_event_id, task.scheduled_time_ms, task.attempt)
    assert (reserved, task.started_time_ms) == (scheduled_id + 1, 0)
    run_id = flow.run_id
    step = flow.complete_task(*case.commands(flow))
    assert step.rejection is None
    expected = ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", *case.events]
    assert (types(step)[:len(expected)] if case.more else types(step)) == expected
    started = event(step, "WORKFLOW_TASK_STARTED")
    # nothing arrived while the task was out, so STARTED takes the reserved id; no reported start: dispatch time
    assert (started["event_id"], started["event_time_ms"]) == (reserved, dispatched_at)
    assert started["attributes"][1]["scheduled_event_id"] == scheduled_id
    done = attrs(step, "WORKFLOW_TASK_COMPLETED")
    assert (done["scheduled_event_id"], done["started_event_id"]) == (scheduled_id, reserved)
    assert flow.run.last_workflow_task_started_event_id == reserved
    assert ("WORKFLOW_TASK_TIMEOUT", dispatched_at + TASK_TIMEOUT, attempt) in timers(step, CancelTimer)
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": run_id, "cancel_requested": False})
    case.check(flow, step)


def test_cancel_unstarted_activity_schedules_a_workflow_task_to_report_it() -> None:
    flow = started_flow()
    _schedule_activity(flow)
    step = flow.complete_task(wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 5}))
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "ACTIVITY_TASK_CANCEL_REQUESTED",
                           "ACTIVITY_TASK_CANCELED", "WORKFLOW_TASK_SCHEDULED"]
    assert_dispatched(step, flow, transient=False, attempt=1)


# -- schedule activity: timeout normalisation ------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "recorded", "scheduled_kinds"), [
    pytest.param({"start_to_close_timeout_ms": 3_000}, (None, None, 3_000, None), [],
                 id="start-to-close only: no deadline until started"),
    pytest.param({"start_to_close_timeout_ms": None, "schedule_to_close_timeout_ms": 9_000}, (9_000, None, 9_000, None),
                 [("ACTIVITY_SCHEDULE_TO_CLOSE", 9_000)], id="schedule-to-close only fills start-to-close"),
    pytest.param({"schedule_to_close_timeout_ms": 9_000, "schedule_to_start_timeout_ms": 20_000},
                 (9_000, 9_000, 5_000, None),
                 [("ACTIVITY_SCHEDULE_TO_CLOSE", 9_000), ("ACTIVITY_SCHEDULE_TO_START", 9_000)],
                 id="schedule-to-start capped by schedule-to-close"),
    pytest.param({"schedule_to_start_timeout_ms": 2_000, "heartbeat_timeout_ms": 1_000},
                 (None, 2_000, 5_000, 1_000), [("ACTIVITY_SCHEDULE_TO_START", 2_000)],
                 id="schedule-to-start without schedule-to-close kept"),
])
def test_schedule_activity_timeouts(given: Record, recorded: tuple[Any, ...],
                                    scheduled_kinds: list[tuple[str, int]]) -> None:
    flow = started_flow()
    step = flow.complete_task(activity_cmd(**given))
    a = attrs(step, "ACTIVITY_TASK_SCHEDULED")
    assert (a["schedule_to_close_timeout_ms"], a["schedule_to_start_timeout_ms"], a["start_to_close_timeout_ms"],
            a["heartbeat_timeout_ms"]) == recorded
    assert [(k, at - START) for k, at, _ in timers(step, ScheduleTimer)] == scheduled_kinds


# -- continue-as-new ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "command", "memo", "search_attributes", "run_timeout"), [
    pytest.param({"memo": {"m": payload(b"1")}, "search_attributes": {"s": payload(b"2")}}, {},
                 {"m": payload(b"1")}, {"s": payload(b"2")}, None, id="memo and search attributes carried"),
    pytest.param({"memo": {"m": payload(b"1")}, "search_attributes": {"s": payload(b"2")}},
                 {"memo": {"n": payload(b"3")}, "search_attributes": {"t": payload(b"4")}},
                 {"n": payload(b"3")}, {"t": payload(b"4")}, None, id="memo and search attributes replaced"),
    pytest.param({"memo": {"m": payload(b"1")}}, {"memo": {}}, {}, {}, None, id="an empty memo replaces it"),
    pytest.param({"run_timeout_ms": 60_000}, {}, {}, {}, 60_000, id="run timeout carried"),
    pytest.param({"run_timeout_ms": 60_000}, {"run_timeout_ms": 30_000}, {}, {}, 30_000, id="run timeout replaced"),
])
def test_continue_as_new(start: Record, command: Record, memo: Record, search_attributes: Record,
                         run_timeout: int | None) -> None:
    flow = started_flow(**start)
    old = flow.run_id
    first = flow.run.first_execution_run_id
    flow.now += 2_500
    step = flow.complete_task(wf_command("ContinueAsNewWorkflowExecutionCommand",
                                         {"input": [payload(b"7")], **command}))
    new = flow.run_id
    assert new != old and flow.workflow.workflow_id == WF
    assert types(step, old) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED",
                                "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"]
    assert types(step, new) == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED"]
    assert attrs(step, "WORKFLOW_EXECUTION_CONTINUED_AS_NEW")["new_execution_run_id"] == new
    started = attrs(step, "WORKFLOW_EXECUTION_STARTED")
    assert (started["continued_execution_run_id"], started["first_execution_run_id"]) == (old, first)
    assert started["input"] == [payload(b"7")]
    assert flow.workflow.runs[old].status == "CONTINUED_AS_NEW"
    run = flow.run
    assert (run.status, run.workflow_type, run.task_queue, run.continued_from_run_id) == (
        "RUNNING", "Order", "orders", old)
    assert (run.memo, run.search_attributes) == (memo, search_attributes)
    expected_expiry = None if run_timeout is None else flow.now + run_timeout
    assert run.run_expiration_time_ms == expected_expiry
    assert flow.workflow.current is not None and flow.workflow.current.status == "RUNNING"
    assert step.pointer_changed
    assert of(step, DispatchWorkflowTask)[0].run_id == new
    assert of(step, SendCommand) == []


@pytest.mark.parametrize(("closing", "status"), [
    pytest.param(COMPLETE, "COMPLETED", id="completed child notifies its parent"),
    pytest.param(FAIL, "FAILED", id="failed child notifies its parent"),
    pytest.param(CANCEL, "CANCELED", id="canceled child notifies its parent"),
    pytest.param(CONTINUE, None, id="continued-as-new child does not notify its parent"),
])
def test_closing_a_child_run_and_its_parent(closing: Command, status: str | None) -> None:
    flow = started_flow(parent=PARENT)
    old = flow.run_id
    step = flow.complete_task(closing)
    notes = [a.command for a in of(step, SendCommand)]
    if status is None:
        assert notes == []
        assert flow.run_id != old and flow.run.parent == PARENT  # the next run reports to the parent instead
        return
    assert len(notes) == 1
    name, body = notes[0]["body"]
    assert name == "ostinato.command.ChildWorkflowExecutionClosedNotification"
    assert (notes[0]["workflow_id"], notes[0]["run_id"]) == ("parent-1", "parent-run")
    assert (body["initiated_event_id"], body["status"], body["child"]) == (7, status, {"workflow_id": WF,
                                                                                       "run_id": old})


def test_continue_as_new_backoff_delays_the_first_task_of_the_new_run() -> None:
    flow = started_flow()
    step = flow.complete_task(wf_command("ContinueAsNewWorkflowExecutionCommand", {"backoff_start_interval_ms": 5_000}))
    assert of(step, DispatchWorkflowTask) == []


# -- invalid batches --------------------------------------------------------------------------------------------------



INVALID_BATCHES = [
    pytest.param(None, None, lambda f: [COMPLETE, timer_cmd()], "closes the workflow but is not the last",
                 id="closing command not last"),
    pytest.param(None, None, lambda f: [COMPLETE, FAIL], "closes the workflow but is not the last",
                 id="two closing commands"),
    pytest.param(None, None, lambda f: [activity_cmd("a1"), activity_cmd("a1")], "already in use",
                 id="duplicate activity id in the batch"),
    pytest.param(None, lambda f: (f.complete_task(activity_cmd("a1")), with_task_in_flight(f)),
                 lambda f: [activity_cmd("a1")], "already in use", id="activity id of a pending activity"),
    pytest.param(None, None, lambda f: [activity_cmd(start_to_close_timeout_ms=None)],
                 "needs start_to_close_timeout or schedule_to_close_timeout", id="activity without timeouts"),
    pytest.param(None, None, lambda f: [activity_cmd(heartbeat_timeout_ms=0)], "heartbeat_timeout_ms must be positive",
                 id="activity with a zero timeout"),
    pytest.param(None, None, lambda f: [activity_cmd(activity_type="")], "activity_id and activity_type are required",
                 id="activity without a type"),
    pytest.param(None, None, lambda f: [wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 3})],
                 "no pending activity", id="cancel of an unknown activity"),
    pytest.param(None, None, lambda f: [wf_command("CancelTimerCommand", {"timer_id": "nope"})], "no timer 'nope'",
                 id="cancel of an unknown timer"),
    pytest.param(None, None, lambda f: [timer_cmd("t1"), timer_cmd("t1")], "already in use",
                 id="duplicate timer id"),
    pytest.param(None, None, lambda f: [timer_cmd("")], "empty", id="empty timer id"),
    pytest.param(None, None, lambda f: [timer_cmd("t1", 0)], "start_to_fire_timeout must be positive",
                 id="timer of zero duration"),
    pytest.param(None, None, lambda f: [child_cmd("")], "a child needs workflow_id", id="child without workflow id"),
    pytest.param(None, None, lambda f: [signal_ext_cmd("")], "target workflow_id is required",
                 id="signal external without workflow id"),
    pytest.param(None, None, lambda f: [_marker("")], "marker_name is required", id="marker without a name"),
    pytest.param(None, None, lambda f: [_publish()], "not allowed on this cluster (allowed: none)",
                 id="publish with no topic allowed"),
    pytest.param(EGRESS, None, lambda f: [_publish("payments")], "'payments' is not allowed",
                 id="publish to a topic no pattern allows"),
    pytest.param(Config(egress_topics=("*",)), None, lambda f: [_publish("__consumer_offsets")],
                 "engine's own topics", id="publish to Kafka's internal topics"),
    pytest.param(EGRESS, None, lambda f: [_publish("orders.bad name")], "not a Kafka topic name",
                 id="publish to a name Kafka refuses"),
    pytest.param(with_limits(max_pending_activities=2), None,
                 lambda f: [activity_cmd("a1"), activity_cmd("a2"), activity_cmd("a3")], "max_pending_activities",
                 id="over max_pending_activities in one batch"),
    pytest.param(with_limits(max_pending_activities=1), lambda f: (f.complete_task(activity_cmd("a1")),
                                                               with_task_in_flight(f)),
                 lambda f: [activity_cmd("a2")], "max_pending_activities",
                 id="over max_pending_activities with one pending"),
    pytest.param(with_limits(max_pending_children=1), None, lambda f: [child_cmd("c1"), child_cmd("c2")],
                 "max_pending_children", id="over max_pending_children"),
    pytest.param(with_limits(max_pending_external_requests=1), None, lambda f: [signal_ext_cmd(), cancel_ext_cmd()],
                 "max_pending_external_requests", id="over max_pending_external_requests"),
]


@pytest.mark.parametrize(("config", "setup", "commands", "message"), INVALID_BATCHES)
def test_invalid_batch_fails_the_task_and_retries_it_transiently(
        config: Config | None, setup: Callable[[Flow], Any] | None, commands: Callable[[Flow], list[Command]],
        message: str) -> None:
    flow = started_flow(config)
    if setup is not None:
        setup(flow)
    task = flow.run.workflow_task
    assert task is not None
    scheduled_id, reserved = task.scheduled_event_id, task.started_event_id
    pending = (dict(flow.run.activities), dict(flow.run.timers), dict(flow.run.children))
    step = flow.complete_task(*commands(flow))
    assert step.rejection is None  # the answer is accepted; the task failed (after the worker started it)
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (reserved, "WORKFLOW_TASK_STARTED"), (reserved + 1, "WORKFLOW_TASK_FAILED")]
    assert attrs(step, "WORKFLOW_TASK_STARTED")["scheduled_event_id"] == scheduled_id
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert (failed["scheduled_event_id"], failed["started_event_id"], failed["cause"]) == (
        scheduled_id, reserved, "BAD_COMMAND")
    assert message in failed["failure"]["message"]
    assert task_failed_reply(step) == "BAD_COMMAND"
    assert (flow.run.activities, flow.run.timers, flow.run.children) == pending
    assert flow.run.status == "RUNNING"
    assert of(step, DispatchActivityTask) == of(step, SendCommand) == []
    assert_dispatched(step, flow, transient=True, attempt=2)


@pytest.mark.parametrize("batch", [
    pytest.param(1, id="in a later task"),
    pytest.param(2, id="twice in one batch"),
])
def test_repeated_activity_cancel_request_is_a_bad_command(batch: int) -> None:
    flow = started_flow()
    _schedule_and_start_activity(flow)
    cancel = wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 5})
    if batch == 1:
        flow.complete_task(cancel)
        with_task_in_flight(flow)
    step = flow.complete_task(*[cancel] * batch)
    assert attrs(step, "WORKFLOW_TASK_FAILED")["cause"] == "BAD_COMMAND"


# -- new events while a task runs ---------------------------------------------------------------------------------

def _activity_done(flow: Flow) -> None:
    flow.activity("RespondActivityTaskCompleted", 5)


def _timer_fired(flow: Flow) -> None:
    flow.fire_kind("USER_TIMER")


ARRIVALS = [
    pytest.param(lambda f: f.signal(), id="signal"),
    pytest.param(lambda f: f.send("RequestCancelWorkflowExecution", {"reason": "r"}, run_id=f.run_id),
                 id="cancel request"),
    pytest.param(_activity_done, id="activity completed"),
    pytest.param(_timer_fired, id="timer fired"),
]


def _flow_with_work_and_task() -> Flow:
    flow = started_flow()
    flow.complete_task(activity_cmd(), timer_cmd())
    with_task_in_flight(flow)
    return flow


@pytest.mark.parametrize("arrive", ARRIVALS)
@pytest.mark.parametrize("closing", [
    pytest.param(COMPLETE, id="complete"), pytest.param(FAIL, id="fail"), pytest.param(CANCEL, id="cancel"),
    pytest.param(CONTINUE, id="continue-as-new"),
])
def test_closing_while_new_events_arrived_is_unhandled(arrive: Callable[[Flow], Any], closing: Command) -> None:
    flow = _flow_with_work_and_task()
    task = flow.run.workflow_task
    assert task is not None
    arrived = arrive(flow)
    assert arrived is None or of(arrived, DispatchWorkflowTask) == []  # the running task will be followed instead
    assert flow.run.workflow_task is not None and flow.run.workflow_task.new_events_while_started
    run_id = flow.run_id
    step = flow.complete_task(closing)
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_FAILED"]
    started = event(step, "WORKFLOW_TASK_STARTED")
    # what arrived stands between the task's SCHEDULED and its STARTED, which names the SCHEDULED still
    assert started["event_id"] > task.scheduled_event_id + 1
    assert started["attributes"][1]["scheduled_event_id"] == task.scheduled_event_id
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert (failed["scheduled_event_id"], failed["started_event_id"], failed["cause"]) == (
        task.scheduled_event_id, started["event_id"], "UNHANDLED_COMMAND")
    assert task_failed_reply(step) == "UNHANDLED_COMMAND"
    assert (flow.run_id, flow.run.status) == (run_id, "RUNNING")
    assert_dispatched(step, flow, transient=True, attempt=2)


@pytest.mark.parametrize("arrive", ARRIVALS)
def test_new_events_during_a_task_lead_to_another_task(arrive: Callable[[Flow], Any]) -> None:
    flow = _flow_with_work_and_task()
    arrive(flow)
    step = flow.complete_task(timer_cmd("t2"))
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "TIMER_STARTED",
                           "WORKFLOW_TASK_SCHEDULED"]
    started_id = event(step, "WORKFLOW_TASK_STARTED")["event_id"]
    assert attrs(step, "WORKFLOW_TASK_COMPLETED")["started_event_id"] == started_id
    dispatched = assert_dispatched(step, flow, transient=False, attempt=1)
    assert dispatched.previous_started_event_id == started_id


@pytest.mark.parametrize(("force", "new_task"), [
    pytest.param(True, True, id="force_create_new_task schedules another task"),
    pytest.param(False, False, id="without it and nothing new, no task"),
])
def test_force_create_new_task(force: bool, new_task: bool) -> None:
    flow = started_flow()
    step = flow.complete_task(timer_cmd(), force_create_new_task=force)
    tail = ["WORKFLOW_TASK_SCHEDULED"] if new_task else []
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "TIMER_STARTED", *tail]
    if new_task:
        assert_dispatched(step, flow, transient=False, attempt=1)
    else:
        assert of(step, DispatchWorkflowTask) == [] and flow.run.workflow_task is None


def test_force_create_new_task_after_closing_schedules_nothing() -> None:
    flow = started_flow()
    step = flow.complete_task(COMPLETE, force_create_new_task=True)
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "WORKFLOW_EXECUTION_COMPLETED"]
    assert of(step, DispatchWorkflowTask) == []


# -- workflow task failure and timeout ----------------------------------------------------------------------------

def _by_answer(flow: Flow) -> Step:
    return flow.fail_task()


def _by_timeout(flow: Flow) -> Step:
    return flow.fire_kind("WORKFLOW_TASK_TIMEOUT")


HOW_TASKS_FAIL = [pytest.param(_by_answer, "WORKFLOW_TASK_FAILED", id="failed"),
                  pytest.param(_by_timeout, "WORKFLOW_TASK_TIMED_OUT", id="timed out")]


@pytest.mark.parametrize(("how", "event_type"), HOW_TASKS_FAIL)
def test_first_task_failure_is_recorded_and_attempt_2_dispatched_at_once(
        how: Callable[[Flow], Step], event_type: str) -> None:
    flow = started_flow()
    step = how(flow)
    a = attrs(step, event_type)
    if event_type == "WORKFLOW_TASK_FAILED":
        # the worker took the task: its STARTED is written with the answer, under the id the task showed
        assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
            (3, "WORKFLOW_TASK_STARTED"), (4, event_type)]
        assert (a["scheduled_event_id"], a["started_event_id"]) == (2, 3)
        assert (a["cause"], a["failure"]["message"]) == ("WORKFLOW_WORKER_UNHANDLED_FAILURE", "workflow code raised")
        reserved = 5
    else:
        # no answer, so no start is known: no STARTED, and the task timed out counted from its scheduling
        assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [(3, event_type)]
        assert (a["scheduled_event_id"], a["started_event_id"]) == (2, 0)
        assert a["timeout_type"] == "SCHEDULE_TO_CLOSE"
        reserved = 4
    dispatched = assert_dispatched(step, flow, transient=True, attempt=2)
    # reserved at the end of history
    assert (dispatched.scheduled_event_id, dispatched.started_event_id) == (reserved, reserved + 1)
    assert flow.run.next_event_id == reserved
    assert timers(step, CancelTimer) == [("WORKFLOW_TASK_TIMEOUT", START + TASK_TIMEOUT, 1)]
    assert timers(step, ScheduleTimer) == [("WORKFLOW_TASK_TIMEOUT", flow.now + TASK_TIMEOUT, 2)]
    answered = [("ostinato.reply.Accepted", {"run_id": flow.run_id, "cancel_requested": False})]
    assert [r.body for r in of(step, Reply)] == (answered if event_type == "WORKFLOW_TASK_FAILED" else [])


@pytest.mark.parametrize(("how", "event_type"), HOW_TASKS_FAIL)
@pytest.mark.parametrize(("config", "attempt", "delay"), [
    pytest.param(Config(), 3, 1_000, id="attempt 3 waits the initial backoff"),
    pytest.param(Config(), 4, 2_000, id="attempt 4 waits twice that"),
    pytest.param(Config(), 6, 8_000, id="attempt 6 waits 8x"),
    pytest.param(Config(workflow_task_retry_initial_ms=500, workflow_task_retry_max_ms=1_500), 5, 1_500,
                 id="capped by workflow_task_retry_max_ms"),
])
def test_later_task_attempts_back_off(how: Callable[[Flow], Step], event_type: str, config: Config, attempt: int,
                                      delay: int) -> None:
    flow = started_flow(config)
    how(flow)  # attempt 1 -> 2, recorded
    for _ in range(2, attempt - 1):
        step = how(flow)
        flow.fire_kind("WORKFLOW_TASK_RETRY")
    step = how(flow)  # attempt - 1 fails
    assert step.events == []  # a transient attempt's failure writes nothing
    task = flow.run.workflow_task
    assert task is not None
    assert (task.attempt, task.transient, task.retry_at_ms) == (attempt, True, flow.now + delay)
    assert of(step, DispatchWorkflowTask) == []
    assert timers(step, ScheduleTimer) == [("WORKFLOW_TASK_RETRY", flow.now + delay, attempt)]
    # an answer before the backoff is over is stale; when it is over the attempt goes out
    stale = flow.send("RespondWorkflowTaskCompleted", {"scheduled_event_id": task.scheduled_event_id,
                                                       "attempt": attempt}, run_id=flow.run_id)
    assert rejected(stale) == "STALE_TASK"
    step = flow.fire_kind("WORKFLOW_TASK_RETRY")
    assert step.events == []
    assert_dispatched(step, flow, transient=True, attempt=attempt)
    assert timers(step, ScheduleTimer) == [("WORKFLOW_TASK_TIMEOUT", flow.now + TASK_TIMEOUT, attempt)]
    assert flow.events().count(event_type) == 1


@pytest.mark.parametrize(("how", "event_type"), HOW_TASKS_FAIL)
def test_transient_attempt_failure_writes_no_events(how: Callable[[Flow], Step], event_type: str) -> None:
    flow = started_flow()
    how(flow)
    history = flow.events()
    step = how(flow)
    assert step.events == [] and flow.events() == history
    assert of(step, DispatchWorkflowTask) == []  # attempt 3 waits for its backoff
    assert flow.run.workflow_task is not None and flow.run.workflow_task.attempt == 3


@pytest.mark.parametrize(("how", "event_type"), HOW_TASKS_FAIL)
@pytest.mark.parametrize("attempts", [pytest.param(2, id="attempt 2"), pytest.param(3, id="attempt 3")])
def test_completing_a_transient_attempt_writes_its_events_under_the_reserved_ids(
        how: Callable[[Flow], Step], event_type: str, attempts: int) -> None:
    flow = started_flow()
    for _ in range(attempts - 1):
        how(flow)
        if flow.run.workflow_task is not None and flow.run.workflow_task.retry_at_ms is not None:
            flow.fire_kind("WORKFLOW_TASK_RETRY")
    task = flow.run.workflow_task
    assert task is not None and task.transient and task.attempt == attempts
    # the first failure wrote STARTED (3) and FAILED (4); a timeout wrote TIMED_OUT (3) alone, nothing having started
    first = 5 if event_type == "WORKFLOW_TASK_FAILED" else 4
    assert (task.scheduled_event_id, task.started_event_id) == (first, first + 1)
    step = flow.complete_task(timer_cmd())
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (first, "WORKFLOW_TASK_SCHEDULED"), (first + 1, "WORKFLOW_TASK_STARTED"),
        (first + 2, "WORKFLOW_TASK_COMPLETED"), (first + 3, "TIMER_STARTED")]
    assert attrs(step, "WORKFLOW_TASK_SCHEDULED")["attempt"] == attempts
    assert attrs(step, "WORKFLOW_TASK_STARTED")["scheduled_event_id"] == first
    assert (attrs(step, "WORKFLOW_TASK_COMPLETED")["scheduled_event_id"],
            attrs(step, "WORKFLOW_TASK_COMPLETED")["started_event_id"]) == (first, first + 1)
    assert flow.run.workflow_task is None and flow.run.last_workflow_task_started_event_id == first + 1


def test_materialised_transient_task_records_the_continue_as_new_suggestion() -> None:
    flow = started_flow(with_limits(history_warn_events=4))
    flow.fail_task()
    step = flow.complete_task()
    assert attrs(step, "WORKFLOW_TASK_STARTED")["history_length"] == 6
    assert attrs(step, "WORKFLOW_TASK_STARTED")["suggest_continue_as_new"] is True


@pytest.mark.parametrize("waiting", [pytest.param(False, id="in flight"), pytest.param(True, id="waiting backoff")])
def test_event_during_a_transient_attempt_replaces_it_with_a_real_task(waiting: bool) -> None:
    flow = started_flow()
    flow.fail_task()
    if waiting:
        flow.fail_task()
    stale = flow.run.workflow_task
    assert stale is not None and stale.transient and (stale.retry_at_ms is not None) is waiting
    step = flow.signal()
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (5, "WORKFLOW_EXECUTION_SIGNALED"), (6, "WORKFLOW_TASK_SCHEDULED")]
    assert_dispatched(step, flow, transient=False, attempt=stale.attempt)  # the count (and backoff) goes on
    assert attrs(step, "WORKFLOW_TASK_SCHEDULED")["attempt"] == stale.attempt
    canceled_kind = "WORKFLOW_TASK_RETRY" if waiting else "WORKFLOW_TASK_TIMEOUT"
    assert [k for k, _, _ in timers(step, CancelTimer)] == [canceled_kind]
    answer = flow.send("RespondWorkflowTaskCompleted", {"scheduled_event_id": stale.scheduled_event_id,
                                                        "attempt": stale.attempt}, run_id=flow.run_id)
    assert rejected(answer) == "STALE_TASK"


def test_failed_task_with_new_events_is_retried_with_them() -> None:
    flow = started_flow()
    flow.signal()
    step = flow.fail_task()
    # the signal (3) came while the task was out: the STARTED the answer writes follows it
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (4, "WORKFLOW_TASK_STARTED"), (5, "WORKFLOW_TASK_FAILED")]
    assert (attrs(step, "WORKFLOW_TASK_FAILED")["scheduled_event_id"],
            attrs(step, "WORKFLOW_TASK_FAILED")["started_event_id"]) == (2, 4)
    assert_dispatched(step, flow, transient=True, attempt=2)



# -- the STARTED of a workflow task is written with its answer --------------------------------------------------------

def test_scheduling_a_task_writes_no_started_and_only_reserves_its_id() -> None:
    flow = started_flow()
    assert flow.events() == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED"]
    task = flow.run.workflow_task
    assert task is not None
    assert (task.scheduled_event_id, task.started_event_id, task.started_time_ms, task.scheduled_time_ms) == (
        2, 3, 0, START)
    assert flow.run.next_event_id == 3
    dispatched = assert_dispatched(flow.steps[-1], flow, transient=False, attempt=1)
    assert (dispatched.scheduled_event_id, dispatched.started_event_id, dispatched.previous_started_event_id) == (
        2, 3, 0)


def test_a_reported_start_is_the_started_time_and_names_the_worker() -> None:
    flow = started_flow()
    flow.now = START + 2_000
    step = flow.send("RespondWorkflowTaskCompleted", {
        "scheduled_event_id": 2, "attempt": 1, "commands": [timer_cmd()], "started_time_ms": START + 300},
        run_id=flow.run_id, identity="worker-7")
    assert [(e["event_id"], e["event_type"], e["event_time_ms"]) for _, e in step.events] == [
        (3, "WORKFLOW_TASK_STARTED", START + 300), (4, "WORKFLOW_TASK_COMPLETED", START + 2_000),
        (5, "TIMER_STARTED", START + 2_000)]
    started = attrs(step, "WORKFLOW_TASK_STARTED")
    assert (started["scheduled_event_id"], started["identity"], started["history_length"]) == (2, "worker-7", 3)
    done = attrs(step, "WORKFLOW_TASK_COMPLETED")
    assert (done["scheduled_event_id"], done["started_event_id"], done["identity"]) == (2, 3, "worker-7")
    assert flow.run.last_workflow_task_started_event_id == 3
    assert flow.run.workflow_task is None
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": flow.run_id, "cancel_requested": False})


def test_a_reported_start_of_a_failed_task_is_its_started_time() -> None:
    flow = started_flow()
    flow.now = START + 2_000
    step = flow.fail_task(started_time_ms=START + 700)
    assert [(e["event_id"], e["event_type"], e["event_time_ms"]) for _, e in step.events] == [
        (3, "WORKFLOW_TASK_STARTED", START + 700), (4, "WORKFLOW_TASK_FAILED", START + 2_000)]
    assert attrs(step, "WORKFLOW_TASK_STARTED")["identity"] == "tester"
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert (failed["scheduled_event_id"], failed["started_event_id"]) == (2, 3)
    assert_dispatched(step, flow, transient=True, attempt=2)


def test_a_transient_attempt_records_the_reported_start_and_the_worker() -> None:
    flow = started_flow()
    flow.fail_task()  # 3 STARTED, 4 FAILED; attempt 2 reserved at 5/6, dispatched at START
    flow.now = START + 4_000
    step = flow.send("RespondWorkflowTaskCompleted", {
        "scheduled_event_id": 5, "attempt": 2, "commands": [], "started_time_ms": START + 1_500},
        run_id=flow.run_id, identity="worker-9")
    assert [(e["event_id"], e["event_type"], e["event_time_ms"]) for _, e in step.events] == [
        (5, "WORKFLOW_TASK_SCHEDULED", START), (6, "WORKFLOW_TASK_STARTED", START + 1_500),
        (7, "WORKFLOW_TASK_COMPLETED", START + 4_000)]
    assert attrs(step, "WORKFLOW_TASK_STARTED")["identity"] == "worker-9"
    assert attrs(step, "WORKFLOW_TASK_COMPLETED")["started_event_id"] == 6


def test_a_signal_while_the_task_is_out_stands_between_its_scheduled_and_its_started() -> None:
    flow = started_flow()
    arrived = flow.signal()
    assert [(e["event_id"], e["event_type"]) for _, e in arrived.events] == [(3, "WORKFLOW_EXECUTION_SIGNALED")]
    assert of(arrived, DispatchWorkflowTask) == []  # the task out is still the run's
    task = flow.run.workflow_task
    assert task is not None
    assert (task.scheduled_event_id, task.started_event_id, task.started_time_ms) == (2, 3, 0)
    assert task.new_events_while_started
    step = flow.complete_task(timer_cmd())
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (4, "WORKFLOW_TASK_STARTED"), (5, "WORKFLOW_TASK_COMPLETED"), (6, "TIMER_STARTED"),
        (7, "WORKFLOW_TASK_SCHEDULED")]
    assert attrs(step, "WORKFLOW_TASK_STARTED")["scheduled_event_id"] == 2
    done = attrs(step, "WORKFLOW_TASK_COMPLETED")
    assert (done["scheduled_event_id"], done["started_event_id"]) == (2, 4)
    assert flow.events() == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_EXECUTION_SIGNALED",
                             "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "TIMER_STARTED",
                             "WORKFLOW_TASK_SCHEDULED"]
    # the workflow has yet to see the signal: a new task follows
    dispatched = assert_dispatched(step, flow, transient=False, attempt=1)
    assert (dispatched.scheduled_event_id, dispatched.started_event_id, dispatched.previous_started_event_id) == (
        7, 8, 4)
    nxt = flow.run.workflow_task
    assert nxt is not None and (nxt.started_time_ms, nxt.new_events_while_started) == (0, False)


@pytest.mark.parametrize(("reported", "recorded"), [
    pytest.param(START - 1, START, id="before dispatch"),
    pytest.param(START + 5_000 + 60_001, START + 5_000 + 60_000, id="more than 60 s ahead of the engine"),
])
def test_an_impossible_reported_start_fails_the_task(reported: int, recorded: int) -> None:
    flow = started_flow()
    flow.now = START + 5_000
    step = flow.complete_task(timer_cmd(), started_time_ms=reported)
    assert step.rejection is None
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (3, "WORKFLOW_TASK_STARTED"), (4, "WORKFLOW_TASK_FAILED")]
    # history gets no start outside what the engine can vouch for
    assert event(step, "WORKFLOW_TASK_STARTED")["event_time_ms"] == recorded
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert (failed["scheduled_event_id"], failed["started_event_id"], failed["cause"]) == (2, 3, "BAD_COMMAND")
    assert "clock" in failed["failure"]["message"]
    assert str(reported) in failed["failure"]["message"]
    assert task_failed_reply(step) == "BAD_COMMAND"
    assert flow.run.timers == {}  # the batch was not applied
    assert_dispatched(step, flow, transient=True, attempt=2)


@pytest.mark.parametrize("reported", [
    pytest.param(START, id="at dispatch"),
    pytest.param(START + 5_000 + 60_000, id="60 s ahead of the engine"),
])
def test_a_reported_start_at_the_limits_is_accepted(reported: int) -> None:
    flow = started_flow()
    flow.now = START + 5_000
    step = flow.complete_task(timer_cmd(), started_time_ms=reported)
    assert types(step) == ["WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED", "TIMER_STARTED"]
    assert event(step, "WORKFLOW_TASK_STARTED")["event_time_ms"] == reported


def test_a_timeout_of_a_task_never_reported_started_writes_no_started() -> None:
    flow = started_flow()
    flow.signal()  # 3, while the task is out
    due = flow.deadline("WORKFLOW_TASK_TIMEOUT")
    assert due.fire_at_ms == START + TASK_TIMEOUT  # counted from dispatch
    step = flow.fire(due)
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [(4, "WORKFLOW_TASK_TIMED_OUT")]
    timed_out = attrs(step, "WORKFLOW_TASK_TIMED_OUT")
    assert (timed_out["scheduled_event_id"], timed_out["started_event_id"], timed_out["timeout_type"]) == (
        2, 0, "SCHEDULE_TO_CLOSE")
    assert "WORKFLOW_TASK_STARTED" not in flow.events()
    dispatched = assert_dispatched(step, flow, transient=True, attempt=2)
    assert (dispatched.scheduled_event_id, dispatched.started_event_id) == (5, 6)
    # the retry completes: its SCHEDULED and STARTED are written under the reserved ids
    step = flow.complete_task()
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (5, "WORKFLOW_TASK_SCHEDULED"), (6, "WORKFLOW_TASK_STARTED"), (7, "WORKFLOW_TASK_COMPLETED")]
