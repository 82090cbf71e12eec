"""Activity and timer deciders and limits: started, heartbeat, completion, failure and retry, cancellation, the four
timeouts, user timers. Every step goes through `Harness`, which replays the history after it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ostinato.streams.actions import (
    CancelTimer,
    Deadline,
    DispatchActivityTask,
    DispatchWorkflowTask,
    Reply,
    ScheduleTimer,
    UpsertVisibility,
)
from ostinato.streams.deadlines import deadlines
from ostinato.streams.model import encode_run
from ostinato.streams.records import workflow_task as workflow_task_record
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, wf_command
from tests.unit.core.task_support import (
    START,
    Flow,
    Record,
    assert_dispatched,
    attrs,
    event,
    failure,
    of,
    payload,
    rejected,
    reply,
    started_flow,
    timer_cmd,
    timers,
    types,
    with_activity,
    with_limits,
    with_task_in_flight,
)

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
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_COMPLETED", "WORKFLOW_TASK_SCHEDULED"]
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
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_CANCELED", "WORKFLOW_TASK_SCHEDULED"]
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
    assert types(step) == ["ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_FAILED", "WORKFLOW_TASK_SCHEDULED"]
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
    expected = ["ACTIVITY_TASK_TIMED_OUT", "WORKFLOW_TASK_SCHEDULED"]
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
    assert types(step) == ["TIMER_FIRED", "WORKFLOW_TASK_SCHEDULED"]
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
    flow = Flow(config=with_limits(history_warn_events=warn))
    step = flow.start()
    assert types(step) == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED"]
    # the task carries its STARTED (history gets it with the answer): SCHEDULED at 2, so 3 events with it
    (dispatched,) = of(step, DispatchWorkflowTask)
    task = workflow_task_record(flow.run, dispatched, [e for _, e in flow.history], flow.config)
    assert task is not None
    started = task["events"][-1]
    assert (started["event_id"], started["event_type"]) == (3, "WORKFLOW_TASK_STARTED")
    assert (started["attributes"][1]["history_length"], started["attributes"][1]["suggest_continue_as_new"]) == (
        3, suggest)
    assert (task["history_length"], task["suggest_continue_as_new"]) == (3, suggest)
    # and the STARTED written with the answer says the same
    done = flow.complete_task()
    assert (attrs(done, "WORKFLOW_TASK_STARTED")["history_length"],
            attrs(done, "WORKFLOW_TASK_STARTED")["suggest_continue_as_new"]) == (3, suggest)


@pytest.mark.parametrize(("cap", "terminated_at"), [
    pytest.param(2, 3, id="at start"),
    pytest.param(5, 6, id="after the first task"),
    pytest.param(7, 8, id="after a timer fired"),
    pytest.param(50_000, None, id="default cap far away"),
])
def test_history_hard_cap_terminates(cap: int, terminated_at: int | None) -> None:
    flow = Flow(config=with_limits(history_max_events=cap))
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
