"""Workflow task, activity and timer deciders: events, actions, rejections and state, one table per behaviour.

Every step goes through `Harness`, which replays the history after it and compares the durable state byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ostinato.streams.actions import (
    CancelTimer,
    Deadline,
    DispatchActivityTask,
    DispatchWorkflowTask,
    Reply,
    ScheduleTimer,
    SendCommand,
    UpsertVisibility,
)
from ostinato.streams.config import Config, Limits
from ostinato.streams.deadlines import deadlines, fire_timer_body
from ostinato.streams.failures import failure as make_failure
from ostinato.streams.model import encode_run
from ostinato.streams.retry import DEFAULT_ACTIVITY_RETRY
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, Harness, wf_command

Record = dict[str, Any]
Command = tuple[str, Record]
START = 1_000_000  # Harness.now at the beginning
TASK_TIMEOUT = 10_000  # Config.default_task_timeout_ms
PARENT = {"namespace": NS, "workflow_id": "parent-1", "run_id": "parent-run", "initiated_event_id": 7,
          "parent_close_policy": "TERMINATE"}


# -- helpers ----------------------------------------------------------------------------------------------------

def payload(data: bytes, encoding: bytes = b"json/plain") -> Record:
    return {"metadata": {"encoding": encoding}, "data": data}


NULL = payload(b"", b"binary/null")


def types(step: Step, run_id: str | None = None) -> list[str]:
    return [e["event_type"] for r, e in step.events if run_id is None or r == run_id]


def attrs(step: Step, event_type: str) -> Record:
    found = [e["attributes"][1] for _, e in step.events if e["event_type"] == event_type]
    assert len(found) == 1, f"{event_type}: {len(found)} in {types(step)}"
    return found[0]


def event(step: Step, event_type: str) -> Record:
    found = [e for _, e in step.events if e["event_type"] == event_type]
    assert len(found) == 1, f"{event_type}: {len(found)} in {types(step)}"
    return found[0]


def of(step: Step, cls: type) -> list[Any]:
    return [a for a in step.actions if isinstance(a, cls)]


def timers(step: Step, cls: type[ScheduleTimer] | type[CancelTimer]) -> list[tuple[str, int, int]]:
    """(kind, fire_at, attempt) of the Schedule/CancelTimer actions of a step."""
    return [(a.deadline.kind, a.deadline.fire_at_ms, a.deadline.attempt) for a in of(step, cls)]


def reply(step: Step) -> tuple[str, Record]:
    replies = of(step, Reply)
    assert len(replies) == 1
    return replies[0].body


def rejected(step: Step) -> str:
    assert step.rejection is not None, f"not rejected: {types(step)}"
    assert step.events == []
    assert reply(step) == ("ostinato.reply.Rejected", step.rejection)
    return str(step.rejection["code"])


def task_failed_reply(step: Step) -> str:
    """The cause named in the answer to a completion that failed its task (the command itself was not refused)."""
    assert step.rejection is None
    name, body = reply(step)
    assert (name, body["code"]) == ("ostinato.reply.Rejected", "INVALID_ARGUMENT")
    return str(body["message"]).split(":")[0]


def failure(message: str = "boom", **fields: Any) -> Record:
    return make_failure(message, "APPLICATION", **fields)


def activity_cmd(activity_id: str = "a1", **fields: Any) -> Command:
    body = {"activity_id": activity_id, "activity_type": "Charge", "start_to_close_timeout_ms": 5_000, **fields}
    return wf_command("ScheduleActivityTaskCommand", body)


def timer_cmd(timer_id: str = "t1", ms: int = 5_000) -> Command:
    return wf_command("StartTimerCommand", {"timer_id": timer_id, "start_to_fire_timeout_ms": ms})


def child_cmd(workflow_id: str = "child-1", **fields: Any) -> Command:
    return wf_command("StartChildWorkflowExecutionCommand",
                      {"workflow_id": workflow_id, "workflow_type": "Ship", **fields})


def signal_ext_cmd(workflow_id: str = "other-1", **fields: Any) -> Command:
    return wf_command("SignalExternalWorkflowExecutionCommand",
                      {"execution": {"workflow_id": workflow_id, "run_id": "r-9"}, "signal_name": "poke", **fields})


def cancel_ext_cmd(workflow_id: str = "other-1", **fields: Any) -> Command:
    return wf_command("RequestCancelExternalWorkflowExecutionCommand",
                      {"execution": {"workflow_id": workflow_id, "run_id": ""}, "reason": "stop", **fields})


COMPLETE = wf_command("CompleteWorkflowExecutionCommand", {"result": [payload(b"42")]})
FAIL = wf_command("FailWorkflowExecutionCommand", {"failure": failure("workflow failed")})
CANCEL = wf_command("CancelWorkflowExecutionCommand", {})
CONTINUE = wf_command("ContinueAsNewWorkflowExecutionCommand", {})


class Flow(Harness):
    """The harness plus the moves these tests make again and again."""

    def signal(self, name: str = "poke") -> Step:
        return self.send("SignalWorkflowExecution", {"signal_name": name}, run_id=self.run_id)

    def fail_task(self, cause: str = "WORKFLOW_WORKER_UNHANDLED_FAILURE", **body: Any) -> Step:
        task = self.run.workflow_task
        assert task is not None
        return self.send("RespondWorkflowTaskFailed", {
            "scheduled_event_id": task.scheduled_event_id, "attempt": task.attempt, "cause": cause,
            "failure": failure("workflow code raised"), **body}, run_id=self.run_id)

    def deadline(self, kind: str) -> Deadline:
        found = [d for d in deadlines(self.run, self.config) if d.kind == kind]
        assert len(found) == 1, f"{kind}: {found}"
        return found[0]

    def fire(self, due: Deadline, at: int | None = None) -> Step:
        self.now = max(self.now, due.fire_at_ms if at is None else at)
        return self.send("FireTimer", fire_timer_body(due)[1], run_id=due.run_id)

    def fire_kind(self, kind: str) -> Step:
        return self.fire(self.deadline(kind))

    def activity(self, name: str, sid: int, attempt: int | None = None, identity: str = "worker-1",
                 **body: Any) -> Step:
        if attempt is None:
            attempt = self.run.activities[sid].attempt
        return self.send(name, {"scheduled_event_id": sid, "attempt": attempt, **body}, run_id=self.run_id,
                         identity=identity)


def started_flow(config: Config | None = None, **start: Any) -> Flow:
    flow = Flow(config=config or Config())
    flow.start(**start)
    return flow


def with_activity(config: Config | None = None, started: bool = False, **fields: Any) -> tuple[Flow, int]:
    """A run with one activity scheduled (and started), no workflow task in flight."""
    flow = started_flow(config)
    step = flow.complete_task(activity_cmd(**fields))
    sid = int(event(step, "ACTIVITY_TASK_SCHEDULED")["event_id"])
    if started:
        flow.activity("RecordActivityTaskStarted", sid)
    assert flow.run.workflow_task is None
    return flow, sid


def with_task_in_flight(flow: Flow) -> Flow:
    """Give the run a fresh workflow task (through a signal) so it can answer with more commands."""
    flow.signal("next")
    assert flow.run.workflow_task is not None
    return flow


def assert_dispatched(step: Step, flow: Flow, transient: bool, attempt: int) -> DispatchWorkflowTask:
    dispatches = of(step, DispatchWorkflowTask)
    assert len(dispatches) == 1, step.actions
    task = flow.run.workflow_task
    assert task is not None
    assert dispatches[0] == DispatchWorkflowTask(
        NS, WF, flow.run_id, "orders", task.scheduled_event_id, task.started_event_id, attempt,
        flow.run.last_workflow_task_started_event_id, transient)
    assert task.transient is transient
    return dispatches[0]


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
    run_id = flow.run_id
    step = flow.complete_task(*case.commands(flow))
    assert step.rejection is None
    expected = ["WORKFLOW_TASK_COMPLETED", *case.events]
    assert (types(step)[:len(expected)] if case.more else types(step)) == expected
    done = attrs(step, "WORKFLOW_TASK_COMPLETED")
    assert (done["scheduled_event_id"], done["started_event_id"]) == (task.scheduled_event_id, task.started_event_id)
    assert flow.run.last_workflow_task_started_event_id == task.started_event_id
    assert ("WORKFLOW_TASK_TIMEOUT", task.started_time_ms + TASK_TIMEOUT, task.attempt) in timers(step, CancelTimer)
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": run_id, "cancel_requested": False})
    case.check(flow, step)


def test_cancel_unstarted_activity_schedules_a_workflow_task_to_report_it() -> None:
    flow = started_flow()
    _schedule_activity(flow)
    step = flow.complete_task(wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": 5}))
    assert types(step)[-2:] == ["WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"]
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
    assert types(step, old) == ["WORKFLOW_TASK_COMPLETED", "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"]
    assert types(step, new) == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"]
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

def _limits(**limits: int) -> Config:
    return Config(limits=Limits(**limits))


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
    pytest.param(_limits(max_pending_activities=2), None,
                 lambda f: [activity_cmd("a1"), activity_cmd("a2"), activity_cmd("a3")], "max_pending_activities",
                 id="over max_pending_activities in one batch"),
    pytest.param(_limits(max_pending_activities=1), lambda f: (f.complete_task(activity_cmd("a1")),
                                                               with_task_in_flight(f)),
                 lambda f: [activity_cmd("a2")], "max_pending_activities",
                 id="over max_pending_activities with one pending"),
    pytest.param(_limits(max_pending_children=1), None, lambda f: [child_cmd("c1"), child_cmd("c2")],
                 "max_pending_children", id="over max_pending_children"),
    pytest.param(_limits(max_pending_external_requests=1), None, lambda f: [signal_ext_cmd(), cancel_ext_cmd()],
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
    pending = (dict(flow.run.activities), dict(flow.run.timers), dict(flow.run.children))
    step = flow.complete_task(*commands(flow))
    assert step.rejection is None  # the answer is accepted; the task failed
    assert types(step) == ["WORKFLOW_TASK_FAILED"]
    failed = attrs(step, "WORKFLOW_TASK_FAILED")
    assert (failed["scheduled_event_id"], failed["started_event_id"], failed["cause"]) == (
        task.scheduled_event_id, task.started_event_id, "BAD_COMMAND")
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
    assert types(step) == ["WORKFLOW_TASK_FAILED"]
    assert attrs(step, "WORKFLOW_TASK_FAILED")["cause"] == "UNHANDLED_COMMAND"
    assert task_failed_reply(step) == "UNHANDLED_COMMAND"
    assert (flow.run_id, flow.run.status) == (run_id, "RUNNING")
    assert_dispatched(step, flow, transient=True, attempt=2)


@pytest.mark.parametrize("arrive", ARRIVALS)
def test_new_events_during_a_task_lead_to_another_task(arrive: Callable[[Flow], Any]) -> None:
    flow = _flow_with_work_and_task()
    arrive(flow)
    step = flow.complete_task(timer_cmd("t2"))
    assert types(step) == ["WORKFLOW_TASK_COMPLETED", "TIMER_STARTED", "WORKFLOW_TASK_SCHEDULED",
                           "WORKFLOW_TASK_STARTED"]
    dispatched = assert_dispatched(step, flow, transient=False, attempt=1)
    assert dispatched.previous_started_event_id == attrs(step, "WORKFLOW_TASK_COMPLETED")["started_event_id"]


@pytest.mark.parametrize(("force", "new_task"), [
    pytest.param(True, True, id="force_create_new_task schedules another task"),
    pytest.param(False, False, id="without it and nothing new, no task"),
])
def test_force_create_new_task(force: bool, new_task: bool) -> None:
    flow = started_flow()
    step = flow.complete_task(timer_cmd(), force_create_new_task=force)
    tail = ["WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"] if new_task else []
    assert types(step) == ["WORKFLOW_TASK_COMPLETED", "TIMER_STARTED", *tail]
    if new_task:
        assert_dispatched(step, flow, transient=False, attempt=1)
    else:
        assert of(step, DispatchWorkflowTask) == [] and flow.run.workflow_task is None


def test_force_create_new_task_after_closing_schedules_nothing() -> None:
    flow = started_flow()
    step = flow.complete_task(COMPLETE, force_create_new_task=True)
    assert types(step) == ["WORKFLOW_TASK_COMPLETED", "WORKFLOW_EXECUTION_COMPLETED"]
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
    assert types(step) == [event_type]
    a = attrs(step, event_type)
    assert (a["scheduled_event_id"], a["started_event_id"]) == (2, 3)
    if event_type == "WORKFLOW_TASK_FAILED":
        assert (a["cause"], a["failure"]["message"]) == ("WORKFLOW_WORKER_UNHANDLED_FAILURE", "workflow code raised")
    else:
        assert a["timeout_type"] == "START_TO_CLOSE"
    dispatched = assert_dispatched(step, flow, transient=True, attempt=2)
    assert (dispatched.scheduled_event_id, dispatched.started_event_id) == (5, 6)  # reserved at the end of history
    assert flow.run.next_event_id == 5
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
    step = flow.complete_task(timer_cmd())
    assert [(e["event_id"], e["event_type"]) for _, e in step.events] == [
        (5, "WORKFLOW_TASK_SCHEDULED"), (6, "WORKFLOW_TASK_STARTED"), (7, "WORKFLOW_TASK_COMPLETED"),
        (8, "TIMER_STARTED")]
    assert attrs(step, "WORKFLOW_TASK_SCHEDULED")["attempt"] == attempts
    assert attrs(step, "WORKFLOW_TASK_STARTED")["scheduled_event_id"] == 5
    assert (attrs(step, "WORKFLOW_TASK_COMPLETED")["scheduled_event_id"],
            attrs(step, "WORKFLOW_TASK_COMPLETED")["started_event_id"]) == (5, 6)
    assert flow.run.workflow_task is None and flow.run.last_workflow_task_started_event_id == 6


def test_materialised_transient_task_records_the_continue_as_new_suggestion() -> None:
    flow = started_flow(_limits(history_warn_events=4))
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
        (5, "WORKFLOW_EXECUTION_SIGNALED"), (6, "WORKFLOW_TASK_SCHEDULED"), (7, "WORKFLOW_TASK_STARTED")]
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
    assert types(step) == ["WORKFLOW_TASK_FAILED"]
    assert_dispatched(step, flow, transient=True, attempt=2)


# -- activities -----------------------------------------------------------------------------------------------------

def test_activity_started_then_again_by_the_same_worker_is_idempotent() -> None:
    flow, sid = with_activity(schedule_to_start_timeout_ms=2_000)
    step = flow.activity("RecordActivityTaskStarted", sid)
    assert step.events == []
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": flow.run_id, "cancel_requested": False})
    activity = flow.run.activities[sid]
    assert (activity.started_time_ms, activity.started_identity) == (START, "worker-1")
    assert timers(step, CancelTimer) == [("ACTIVITY_SCHEDULE_TO_START", START + 2_000, 1)]
    assert timers(step, ScheduleTimer) == [("ACTIVITY_START_TO_CLOSE", START + 5_000, 1)]
    before = encode_run(flow.run)
    flow.now += 100
    again = flow.activity("RecordActivityTaskStarted", sid)
    assert again.rejection is None and again.events == []
    assert again.actions == of(again, Reply)
    assert encode_run(flow.run) == before


def _started_by_other(flow: Flow, sid: int) -> Step:
    flow.activity("RecordActivityTaskStarted", sid)
    return flow.activity("RecordActivityTaskStarted", sid, identity="worker-2")


def _waiting_retry(flow: Flow, sid: int) -> Step:
    flow.activity("RespondActivityTaskFailed", sid, failure=failure())
    return flow.activity("RecordActivityTaskStarted", sid, attempt=2)


STALE_ACTIVITY_REPORTS = [
    pytest.param(_started_by_other, "STALE_TASK", id="started by another worker"),
    pytest.param(lambda f, sid: f.activity("RecordActivityTaskStarted", sid, attempt=2), "STALE_TASK",
                 id="wrong attempt"),
    pytest.param(lambda f, sid: f.activity("RespondActivityTaskCompleted", 99, attempt=1), "STALE_TASK",
                 id="unknown scheduled event id"),
    pytest.param(_waiting_retry, "STALE_TASK", id="next attempt still waiting for its backoff"),
    pytest.param(lambda f, sid: f.send("RecordActivityTaskHeartbeat", {"scheduled_event_id": sid, "attempt": 1}),
                 "NOT_FOUND", id="no run id"),
    pytest.param(lambda f, sid: (f.activity("RespondActivityTaskCompleted", sid),
                                 f.activity("RespondActivityTaskCompleted", sid, attempt=1))[1], "STALE_TASK",
                 id="duplicate completion"),
    pytest.param(lambda f, sid: f.activity("RespondActivityTaskCanceled", sid), "INVALID_ARGUMENT",
                 id="canceled without a cancel request"),
]


@pytest.mark.parametrize(("report", "code"), STALE_ACTIVITY_REPORTS)
def test_activity_report_that_does_not_apply_is_rejected(report: Callable[[Flow, int], Step], code: str) -> None:
    flow, sid = with_activity()
    step = report(flow, sid)
    assert rejected(step) == code
    assert step.actions == of(step, Reply)


def test_activity_report_for_a_closed_run_is_stale() -> None:
    flow, sid = with_activity()
    flow.send("TerminateWorkflowExecution", {"reason": "stop"}, run_id=flow.run_id)
    assert rejected(flow.activity("RespondActivityTaskCompleted", sid, attempt=1)) == "STALE_TASK"


@pytest.mark.parametrize(("started", "cancel"), [
    pytest.param(False, False, id="heartbeat implies started"),
    pytest.param(True, False, id="heartbeat of a started activity"),
    pytest.param(True, True, id="heartbeat tells the worker of a cancel request"),
])
def test_activity_heartbeat(started: bool, cancel: bool) -> None:
    flow, sid = with_activity(started=started, heartbeat_timeout_ms=1_000)
    if cancel:
        with_task_in_flight(flow)
        flow.complete_task(wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": sid}))
    flow.now += 600
    step = flow.activity("RecordActivityTaskHeartbeat", sid, identity="worker-1", details=[payload(b'"50%"')])
    assert step.events == []
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": flow.run_id, "cancel_requested": cancel})
    activity = flow.run.activities[sid]
    assert activity.heartbeat_details == [payload(b'"50%"')]
    assert activity.last_heartbeat_time_ms == flow.now
    assert activity.started_identity == "worker-1"
    started_at = START if started else flow.now
    assert activity.started_time_ms == started_at
    assert ("ACTIVITY_HEARTBEAT", flow.now + 1_000, 1) in timers(step, ScheduleTimer)
    if started:
        assert timers(step, CancelTimer) == [("ACTIVITY_HEARTBEAT", START + 1_000, 1)]


@pytest.mark.parametrize("started", [pytest.param(True, id="started"), pytest.param(False, id="not yet started")])
def test_activity_completed(started: bool) -> None:
    flow, sid = with_activity(started=started)
    step = flow.activity("RespondActivityTaskCompleted", sid, result=[payload(b"ok")])
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_COMPLETED", "WORKFLOW_TASK_SCHEDULED",
                           "WORKFLOW_TASK_STARTED"]
    s, done = attrs(step, "ACTIVITY_TASK_STARTED"), attrs(step, "ACTIVITY_TASK_COMPLETED")
    assert (s["scheduled_event_id"], s["attempt"], s["identity"], s["last_failure"]) == (
        sid, 1, "worker-1" if started else "", None)
    assert (done["scheduled_event_id"], done["started_event_id"], done["result"]) == (
        sid, event(step, "ACTIVITY_TASK_STARTED")["event_id"], [payload(b"ok")])
    assert flow.run.activities == {}
    assert_dispatched(step, flow, transient=False, attempt=1)


def test_activity_canceled_after_a_cancel_request() -> None:
    flow, sid = with_activity(started=True)
    with_task_in_flight(flow)
    requested = event(flow.complete_task(wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": sid})),
                      "ACTIVITY_TASK_CANCEL_REQUESTED")
    step = flow.activity("RespondActivityTaskCanceled", sid, details=[payload(b'"bye"')])
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_CANCELED", "WORKFLOW_TASK_SCHEDULED",
                           "WORKFLOW_TASK_STARTED"]
    canceled = attrs(step, "ACTIVITY_TASK_CANCELED")
    assert (canceled["latest_cancel_requested_event_id"], canceled["details"]) == (
        requested["event_id"], [payload(b'"bye"')])
    assert flow.run.activities == {}


def test_activity_retry_cycle_writes_only_the_last_attempt() -> None:
    flow, sid = with_activity(started=True, heartbeat_timeout_ms=1_000)
    flow.activity("RecordActivityTaskHeartbeat", sid, details=[payload(b"1")])
    flow.now += 300
    first = failure("declined")
    step = flow.activity("RespondActivityTaskFailed", sid, failure=first)
    assert step.events == []
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": flow.run_id, "cancel_requested": False})
    activity = flow.run.activities[sid]
    assert (activity.attempt, activity.next_attempt_time_ms, activity.started_time_ms) == (2, flow.now + 1_000, None)
    assert activity.last_failure is not None and activity.last_failure["last_heartbeat_details"] == [payload(b"1")]
    assert timers(step, ScheduleTimer) == [("ACTIVITY_RETRY", flow.now + 1_000, 2)]
    assert {k for k, _, _ in timers(step, CancelTimer)} == {"ACTIVITY_START_TO_CLOSE", "ACTIVITY_HEARTBEAT"}
    assert of(step, DispatchActivityTask) == []
    step = flow.fire_kind("ACTIVITY_RETRY")
    assert step.events == []
    assert of(step, DispatchActivityTask) == [DispatchActivityTask(NS, WF, flow.run_id, sid, 2)]
    assert flow.run.activities[sid].current_attempt_scheduled_time_ms == flow.now
    flow.activity("RecordActivityTaskStarted", sid, identity="worker-2")
    step = flow.activity("RespondActivityTaskCompleted", sid, identity="worker-2")
    s = attrs(step, "ACTIVITY_TASK_STARTED")
    assert (s["attempt"], s["identity"], s["last_failure"]["message"]) == (2, "worker-2", "declined")
    assert flow.events().count("ACTIVITY_TASK_STARTED") == 1


@pytest.mark.parametrize(("policy", "backoffs"), [
    pytest.param(None, [1_000, 2_000, 4_000], id="default policy doubles from 1s"),
    pytest.param({"initial_interval_ms": 500, "backoff_coefficient": 3.0}, [500, 1_500, 4_500], id="custom"),
    pytest.param({"initial_interval_ms": 500, "backoff_coefficient": 3.0, "maximum_interval_ms": 2_000},
                 [500, 1_500, 2_000], id="capped by maximum interval"),
])
def test_activity_retry_backoff_follows_the_policy(policy: Record | None, backoffs: list[int]) -> None:
    flow, sid = with_activity(started=True, retry_policy=policy)
    seen = []
    for _ in backoffs:
        flow.activity("RespondActivityTaskFailed", sid, failure=failure())
        seen.append(flow.deadline("ACTIVITY_RETRY").fire_at_ms - flow.now)
        flow.fire_kind("ACTIVITY_RETRY")
    assert seen == backoffs


FINAL_FAILURES = [
    pytest.param({"retry_policy": {"non_retryable_error_types": ["CardDeclined"]}}, {"type": "CardDeclined"}, 0,
                 "NON_RETRYABLE_FAILURE", id="non-retryable error type"),
    pytest.param({}, {"non_retryable": True}, 0, "NON_RETRYABLE_FAILURE", id="non_retryable flag"),
    pytest.param({"retry_policy": {"maximum_attempts": 1}}, {}, 0, "MAXIMUM_ATTEMPTS_REACHED",
                 id="maximum attempts 1"),
    pytest.param({"schedule_to_close_timeout_ms": 1_500}, {}, 600, "TIMEOUT",
                 id="schedule-to-close before the backoff ends"),
    pytest.param({"schedule_to_close_timeout_ms": 60_000}, {"next_retry_delay_ms": 59_500}, 600, "TIMEOUT",
                 id="next_retry_delay_ms past schedule-to-close"),
]


@pytest.mark.parametrize(("schedule", "fail", "after", "retry_state"), FINAL_FAILURES)
def test_activity_failure_that_is_not_retried(schedule: Record, fail: Record, after: int, retry_state: str) -> None:
    flow, sid = with_activity(started=True, **schedule)
    flow.now += after
    step = flow.activity("RespondActivityTaskFailed", sid, failure=failure(**fail))
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_FAILED", "WORKFLOW_TASK_SCHEDULED",
                           "WORKFLOW_TASK_STARTED"]
    failed = attrs(step, "ACTIVITY_TASK_FAILED")
    assert (failed["retry_state"], failed["identity"], failed["failure"]["message"]) == (
        retry_state, "worker-1", "boom")
    assert failed["started_event_id"] == event(step, "ACTIVITY_TASK_STARTED")["event_id"]
    assert attrs(step, "ACTIVITY_TASK_STARTED")["attempt"] == 1
    assert flow.run.activities == {}
    assert_dispatched(step, flow, transient=False, attempt=1)


def test_activity_failure_after_maximum_attempts_and_next_retry_delay() -> None:
    flow, sid = with_activity(started=True, retry_policy={"maximum_attempts": 2})
    flow.activity("RespondActivityTaskFailed", sid, failure=failure(next_retry_delay_ms=7_000))
    assert flow.deadline("ACTIVITY_RETRY").fire_at_ms == flow.now + 7_000
    flow.fire_kind("ACTIVITY_RETRY")
    step = flow.activity("RespondActivityTaskFailed", sid, failure=failure("again"))
    assert attrs(step, "ACTIVITY_TASK_FAILED")["retry_state"] == "MAXIMUM_ATTEMPTS_REACHED"
    assert attrs(step, "ACTIVITY_TASK_STARTED")["attempt"] == 2


def test_activity_failure_after_a_cancel_request_is_final() -> None:
    flow, sid = with_activity(started=True)
    with_task_in_flight(flow)
    flow.complete_task(wf_command("RequestCancelActivityTaskCommand", {"scheduled_event_id": sid}))
    step = flow.activity("RespondActivityTaskFailed", sid, failure=failure())
    assert attrs(step, "ACTIVITY_TASK_FAILED")["retry_state"] == "CANCEL_REQUESTED"


TIMEOUTS = [
    pytest.param({"schedule_to_start_timeout_ms": 2_000}, False, "ACTIVITY_SCHEDULE_TO_START", "TIMEOUT",
                 id="schedule-to-start is final"),
    pytest.param({"schedule_to_close_timeout_ms": 8_000}, True, "ACTIVITY_SCHEDULE_TO_CLOSE", "TIMEOUT",
                 id="schedule-to-close is final"),
    pytest.param({"schedule_to_close_timeout_ms": 8_000}, False, "ACTIVITY_SCHEDULE_TO_CLOSE", "TIMEOUT",
                 id="schedule-to-close of an activity never started"),
    pytest.param({"start_to_close_timeout_ms": 3_000}, True, "ACTIVITY_START_TO_CLOSE", None,
                 id="start-to-close is retried"),
    pytest.param({"heartbeat_timeout_ms": 1_000}, True, "ACTIVITY_HEARTBEAT", None, id="heartbeat is retried"),
    pytest.param({"retry_policy": {"maximum_attempts": 1}}, True, "ACTIVITY_START_TO_CLOSE",
                 "MAXIMUM_ATTEMPTS_REACHED", id="start-to-close at maximum attempts is final"),
    pytest.param({"heartbeat_timeout_ms": 1_000, "retry_policy": {"maximum_attempts": 1}}, True,
                 "ACTIVITY_HEARTBEAT", "MAXIMUM_ATTEMPTS_REACHED", id="heartbeat at maximum attempts is final"),
]


@pytest.mark.parametrize(("schedule", "started", "kind", "retry_state"), TIMEOUTS)
def test_activity_timeout(schedule: Record, started: bool, kind: str, retry_state: str | None) -> None:
    flow, sid = with_activity(started=started, **schedule)
    if started and "heartbeat_timeout_ms" in schedule:
        flow.activity("RecordActivityTaskHeartbeat", sid, details=[payload(b"7")])
    step = flow.fire_kind(kind)
    timeout_type = kind.removeprefix("ACTIVITY_")
    if retry_state is None:
        assert step.events == []
        activity = flow.run.activities[sid]
        assert (activity.attempt, activity.next_attempt_time_ms) == (2, flow.now + 1_000)
        assert activity.last_failure is not None and activity.last_failure["timeout_type"] == timeout_type
        assert timers(step, ScheduleTimer) == [("ACTIVITY_RETRY", flow.now + 1_000, 2)]
        return
    expected = ["ACTIVITY_TASK_TIMED_OUT", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"]
    assert types(step) == (["ACTIVITY_TASK_STARTED", *expected] if started else expected)
    timed_out = attrs(step, "ACTIVITY_TASK_TIMED_OUT")
    assert (timed_out["retry_state"], timed_out["failure"]["kind"], timed_out["failure"]["timeout_type"]) == (
        retry_state, "TIMEOUT", timeout_type)
    assert timed_out["started_event_id"] == (event(step, "ACTIVITY_TASK_STARTED")["event_id"] if started else 0)
    assert flow.run.activities == {}
    assert_dispatched(step, flow, transient=False, attempt=1)


def test_heartbeat_timeout_failure_carries_the_last_details() -> None:
    flow, sid = with_activity(started=True, heartbeat_timeout_ms=1_000, retry_policy={"maximum_attempts": 1})
    flow.activity("RecordActivityTaskHeartbeat", sid, details=[payload(b'"half"')])
    step = flow.fire_kind("ACTIVITY_HEARTBEAT")
    assert attrs(step, "ACTIVITY_TASK_TIMED_OUT")["failure"]["last_heartbeat_details"] == [payload(b'"half"')]


def _completed_then(kind: str) -> Callable[[Flow, int], Deadline]:
    def stale(flow: Flow, sid: int) -> Deadline:
        due = flow.deadline(kind)
        flow.activity("RespondActivityTaskCompleted", sid)
        return due
    return stale


def _heartbeat_moved(flow: Flow, sid: int) -> Deadline:
    due = flow.deadline("ACTIVITY_HEARTBEAT")
    flow.now += 500
    flow.activity("RecordActivityTaskHeartbeat", sid)
    return due


def _retried(flow: Flow, sid: int) -> Deadline:
    due = flow.deadline("ACTIVITY_START_TO_CLOSE")
    flow.activity("RespondActivityTaskFailed", sid, failure=failure())
    return due


def _timer_canceled(flow: Flow, sid: int) -> Deadline:
    with_task_in_flight(flow)
    flow.complete_task(timer_cmd())
    due = flow.deadline("USER_TIMER")
    with_task_in_flight(flow)
    flow.complete_task(wf_command("CancelTimerCommand", {"timer_id": "t1"}))
    return due


def _task_completed(flow: Flow, sid: int) -> Deadline:
    with_task_in_flight(flow)
    due = flow.deadline("WORKFLOW_TASK_TIMEOUT")
    flow.complete_task()
    return due


def _unknown_run(flow: Flow, sid: int) -> Deadline:
    return Deadline(START, "WORKFLOW_RUN_TIMEOUT", "no-such-run")


STALE_DEADLINES = [
    pytest.param(_completed_then("ACTIVITY_START_TO_CLOSE"), id="start-to-close after completion"),
    pytest.param(_completed_then("ACTIVITY_HEARTBEAT"), id="heartbeat after completion"),
    pytest.param(_completed_then("ACTIVITY_SCHEDULE_TO_CLOSE"), id="schedule-to-close after completion"),
    pytest.param(_heartbeat_moved, id="heartbeat deadline moved by a later heartbeat"),
    pytest.param(_retried, id="start-to-close of an attempt already retried"),
    pytest.param(_timer_canceled, id="user timer canceled"),
    pytest.param(_task_completed, id="workflow task timeout after completion"),
    pytest.param(_unknown_run, id="unknown run"),
]


@pytest.mark.parametrize("make_stale", STALE_DEADLINES)
def test_stale_fire_timer_does_nothing(make_stale: Callable[[Flow, int], Deadline]) -> None:
    flow, sid = with_activity(started=True, heartbeat_timeout_ms=1_000, schedule_to_close_timeout_ms=60_000)
    due = make_stale(flow, sid)
    assert due not in deadlines(flow.run, flow.config)
    before = encode_run(flow.run)
    step = flow.fire(due, at=flow.now + 1)
    assert (step.events, step.actions, step.rejection) == ([], [], None)
    assert encode_run(flow.run) == before


@pytest.mark.parametrize("timer_count", [pytest.param(1, id="one timer"), pytest.param(2, id="two timers")])
def test_user_timer_fires(timer_count: int) -> None:
    flow = started_flow()
    flow.complete_task(*[timer_cmd(f"t{i}", 1_000 * (i + 1)) for i in range(timer_count)])
    first = flow.run.timers["t0"]
    step = flow.fire(flow.deadline("USER_TIMER") if timer_count == 1 else
                     Deadline(first.fire_at_ms, "USER_TIMER", flow.run_id, timer_id="t0"))
    assert types(step) == ["TIMER_FIRED", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"]
    assert attrs(step, "TIMER_FIRED") == {"timer_id": "t0", "started_event_id": first.started_event_id}
    assert sorted(flow.run.timers) == [f"t{i}" for i in range(1, timer_count)]
    assert_dispatched(step, flow, transient=False, attempt=1)


# -- limits -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("warn", "suggest"), [
    pytest.param(2, True, id="past the warning"),
    pytest.param(3, True, id="at the warning"),
    pytest.param(4, False, id="below the warning"),
    pytest.param(10_000, False, id="default warning"),
])
def test_history_warning_suggests_continue_as_new(warn: int, suggest: bool) -> None:
    flow = Flow(config=_limits(history_warn_events=warn))
    step = flow.start()
    started = attrs(step, "WORKFLOW_TASK_STARTED")
    assert (started["history_length"], started["suggest_continue_as_new"]) == (3, suggest)


@pytest.mark.parametrize(("cap", "terminated_at"), [
    pytest.param(3, 4, id="at start"),
    pytest.param(5, 6, id="after the first task"),
    pytest.param(7, 9, id="after a timer fired"),
    pytest.param(50_000, None, id="default cap far away"),
])
def test_history_hard_cap_terminates(cap: int, terminated_at: int | None) -> None:
    flow = Flow(config=_limits(history_max_events=cap))
    flow.start()
    if flow.run.open:
        flow.complete_task(timer_cmd())
    if flow.run.open:
        flow.fire_kind("USER_TIMER")
    history = flow.events()
    if terminated_at is None:
        assert flow.run.open and "WORKFLOW_EXECUTION_TERMINATED" not in history
        return
    assert history[terminated_at - 1:] == ["WORKFLOW_EXECUTION_TERMINATED"]
    assert flow.run.status == "TERMINATED"
    step = flow.steps[-1]
    reason = attrs(step, "WORKFLOW_EXECUTION_TERMINATED")["reason"]
    assert f"the limit is {cap} (history_max_events)" in reason and "continue-as-new" in reason
    assert of(step, UpsertVisibility)
