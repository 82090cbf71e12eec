"""Table tests of workflow retries and cron schedules: how a closing run starts the next run of its chain."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.schemas import codec
from ostinato.streams import events as ev
from ostinato.streams.actions import DispatchWorkflowTask, SendCommand
from ostinato.streams.appliers import replay
from ostinato.streams.deciders import decide
from ostinato.streams.model import Workflow, durable_bytes
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, Harness, wf_command

Record = dict[str, Any]
PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'"in"'}
RESULT = {"metadata": {"encoding": b"json/plain"}, "data": b'"out"'}
MINUTE = 60_000
POLICY = {"initial_interval_ms": 1000, "backoff_coefficient": 2.0, "maximum_interval_ms": 5000, "maximum_attempts": 3}


class Shard(Harness):
    """A harness that also takes commands another shard sent (a child's start, its close notification)."""

    def send(self, name: str, body: Record | None = None, **envelope: Any) -> Step:
        envelope.setdefault("workflow_id", self.workflow.workflow_id)
        return super().send(name, body, **envelope)

    def check_replay(self) -> None:
        rebuilt = replay(Workflow(NS, self.workflow.workflow_id), list(self.history))
        for run_id, run in self.workflow.runs.items():
            assert durable_bytes(rebuilt.runs[run_id]) == durable_bytes(run), f"run {run_id} differs after replay"

    def deliver(self, envelope: Record) -> Step:
        record = codec.decode(codec.encode("ostinato.command.Command", envelope))[1]
        step = decide(self.workflow, record, self.now, self.config)
        self.history.extend(step.events)
        self.steps.append(step)
        self.check_replay()
        return step


def types(step: Step) -> list[str]:
    return [e["event_type"] for _, e in step.events]


def attrs(step: Step, event_type: str) -> Record:
    found = [ev.attributes(e) for _, e in step.events if e["event_type"] == event_type]
    assert len(found) == 1, f"{event_type} written {len(found)} times: {types(step)}"
    return found[0]


def sent(step: Step, name: str) -> list[Record]:
    return [a.command for a in step.actions
            if isinstance(a, SendCommand) and a.command["body"][0] == "ostinato.command." + name]


def fail(h: Harness, message: str = "boom", **failure: Any) -> Step:
    return h.complete_task(wf_command("FailWorkflowExecutionCommand", {"failure": {"message": message, **failure}}))


def complete(h: Harness) -> Step:
    return h.complete_task(wf_command("CompleteWorkflowExecutionCommand", {"result": [RESULT]}))


def wait_out_backoff(h: Harness) -> Step:
    """Fire the new run's WORKFLOW_BACKOFF deadline: its first workflow task goes out."""
    run = h.run
    assert run.workflow_task is None, "the first task must wait for the backoff"
    h.now = run.execution_time_ms
    step = h.send("FireTimer", {"kind": "WORKFLOW_BACKOFF", "fire_at_ms": run.execution_time_ms}, run_id=run.run_id,
                  reply_partition=None)
    assert [a for a in step.actions if isinstance(a, DispatchWorkflowTask)], "no first task after the backoff"
    return step


def started(h: Harness) -> Record:
    return ev.attributes(next(e for r, e in h.history if r == h.run_id))


def start(h: Harness, **body: Any) -> Step:
    return h.start(input=[PAYLOAD], **body)


# == retries ========================================================================================================

def test_a_failed_run_is_retried_with_the_same_input_then_succeeds() -> None:
    h = Harness()
    start(h, retry_policy=POLICY, run_timeout_ms=MINUTE)
    first = h.run_id
    step = fail(h)
    closed = attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert (closed["initiator"], closed["failure"]["message"], closed["backoff_start_interval_ms"]) == \
        ("RETRY", "boom", 1000)
    assert closed["new_execution_run_id"] == h.run_id != first
    new = started(h)
    assert (new["attempt"], new["first_execution_run_id"], new["continued_execution_run_id"]) == (2, first, first)
    assert new["input"] == [PAYLOAD] and new["continued_failure"]["message"] == "boom"
    assert new["retry_policy"]["maximum_attempts"] == 3 and new["first_workflow_task_backoff_ms"] == 1000
    assert h.run.run_expiration_time_ms == h.now + 1000 + MINUTE  # the run timeout counts after the backoff
    wait_out_backoff(h)
    assert types(complete(h))[-1] == ev.WORKFLOW_EXECUTION_COMPLETED
    assert h.run.status == "COMPLETED" and h.run.attempt == 2


@pytest.mark.parametrize(("failure", "policy", "retry_state", "runs"), [
    pytest.param({}, POLICY, "MAXIMUM_ATTEMPTS_REACHED", 3, id="maximum-attempts"),
    pytest.param({"type": "Fatal"}, {**POLICY, "non_retryable_error_types": ["Fatal"]}, "NON_RETRYABLE_FAILURE", 1,
                 id="non-retryable-type"),
    pytest.param({"non_retryable": True}, POLICY, "NON_RETRYABLE_FAILURE", 1, id="non-retryable-failure"),
    pytest.param({}, None, "RETRY_POLICY_NOT_SET", 1, id="no-policy"),
])
def test_a_run_fails_for_good_when_no_attempt_is_left(failure: Record, policy: Record | None, retry_state: str,
                                                      runs: int) -> None:
    h = Harness()
    start(h, retry_policy=policy)
    for _ in range(runs - 1):
        assert types(fail(h, **failure))[-2:] == [ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
                                                    ev.WORKFLOW_EXECUTION_STARTED]
        wait_out_backoff(h)
    step = fail(h, **failure)
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_FAILED
    assert attrs(step, ev.WORKFLOW_EXECUTION_FAILED)["retry_state"] == retry_state
    assert len(h.workflow.runs) == runs and h.run.attempt == runs


@pytest.mark.parametrize(("policy", "failure", "delays"), [
    pytest.param({"initial_interval_ms": 1000, "backoff_coefficient": 2.0, "maximum_interval_ms": 5000}, {},
                 [1000, 2000, 4000, 5000, 5000], id="exponential-capped"),
    pytest.param({"initial_interval_ms": 300, "backoff_coefficient": 1.0}, {}, [300, 300, 300], id="constant"),
    pytest.param({"initial_interval_ms": 1000, "backoff_coefficient": 3.0}, {}, [1000, 3000, 9000, 27000, 81000,
                                                                                100_000], id="default-cap-100x"),
    pytest.param(POLICY, {"next_retry_delay_ms": 7000}, [7000, 7000], id="next-retry-delay"),
])
def test_retry_backoff(policy: Record, failure: Record, delays: list[int]) -> None:
    h = Harness()
    start(h, retry_policy=policy)
    seen = []
    for _ in delays:
        step = fail(h, **failure)
        seen.append(attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)["backoff_start_interval_ms"])
        assert h.run.execution_time_ms == h.now + seen[-1]
        wait_out_backoff(h)
    assert seen == delays


def test_a_run_timeout_is_retried_and_an_execution_timeout_ends_the_chain() -> None:
    h = Harness()
    start(h, retry_policy=POLICY, run_timeout_ms=MINUTE, execution_timeout_ms=10 * MINUTE)
    expires = h.run.run_expiration_time_ms
    h.now = expires
    step = h.send("FireTimer", {"kind": "WORKFLOW_RUN_TIMEOUT", "fire_at_ms": expires}, run_id=h.run_id,
                  reply_partition=None)
    closed = attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert closed["initiator"] == "RETRY" and closed["failure"]["kind"] == "TIMEOUT"
    wait_out_backoff(h)
    deadline = h.run.execution_expiration_time_ms
    h.now = deadline
    step = h.send("FireTimer", {"kind": "WORKFLOW_EXECUTION_TIMEOUT", "fire_at_ms": deadline}, run_id=h.run_id,
                  reply_partition=None)
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_TIMED_OUT
    assert attrs(step, ev.WORKFLOW_EXECUTION_TIMED_OUT)["retry_state"] == "TIMEOUT"


def test_a_retry_past_the_execution_timeout_is_not_made() -> None:
    h = Harness()
    start(h, retry_policy={**POLICY, "initial_interval_ms": 10 * MINUTE, "maximum_interval_ms": None},
          execution_timeout_ms=5 * MINUTE)
    step = fail(h)
    assert attrs(step, ev.WORKFLOW_EXECUTION_FAILED)["retry_state"] == "TIMEOUT"


def test_cancel_and_terminate_are_never_retried() -> None:
    h = Harness()
    start(h, retry_policy=POLICY)
    step = h.complete_task(wf_command("CancelWorkflowExecutionCommand", {}))
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_CANCELED and len(h.workflow.runs) == 1


def test_a_run_asked_to_cancel_is_not_retried_nor_repeated() -> None:
    h = Harness(now=0)
    start(h, retry_policy=POLICY)
    h.complete_task(wf_command("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": MINUTE}))
    h.send("RequestCancelWorkflowExecution", {"reason": "stop"})
    step = fail(h)
    assert attrs(step, ev.WORKFLOW_EXECUTION_FAILED)["retry_state"] == "CANCEL_REQUESTED"
    h = Harness(now=0)
    start(h, cron_schedule="@hourly")
    h.send("RequestCancelWorkflowExecution", {"reason": "stop"})
    wait_out_backoff(h)
    step = complete(h)  # the workflow ignored the request and completed: the chain still ends
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_COMPLETED and len(h.workflow.runs) == 1


def test_termination_during_the_backoff_stops_the_chain() -> None:
    h = Harness()
    start(h, retry_policy=POLICY)
    fail(h)
    step = h.send("TerminateWorkflowExecution", {"reason": "enough"})
    assert types(step) == [ev.WORKFLOW_EXECUTION_TERMINATED] and len(h.workflow.runs) == 2
    h.now += MINUTE
    stale = h.send("FireTimer", {"kind": "WORKFLOW_BACKOFF", "fire_at_ms": h.run.execution_time_ms},
                   run_id=h.run_id, reply_partition=None)
    assert stale.events == []


def test_a_signal_during_the_backoff_waits_for_the_first_task() -> None:
    h = Harness()
    start(h, retry_policy=POLICY)
    fail(h)
    step = h.send("SignalWorkflowExecution", {"signal_name": "poke"})
    assert types(step) == [ev.WORKFLOW_EXECUTION_SIGNALED] and h.run.workflow_task is None
    wait_out_backoff(h)


# == cron ===========================================================================================================

def test_a_cron_run_waits_for_the_next_time_and_carries_its_result() -> None:
    h = Harness(now=10 * MINUTE + 12_345)  # 00:10:12.345 UTC on 1 Jan 1970
    start(h, cron_schedule="*/5 * * * *")
    assert started(h)["first_workflow_task_backoff_ms"] == 15 * MINUTE - h.now
    assert h.run.workflow_task is None and h.run.cron_schedule == "*/5 * * * *"
    wait_out_backoff(h)
    h.now += 1234
    step = complete(h)
    closed = attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert (closed["initiator"], closed["last_completion_result"]) == ("CRON_SCHEDULE", [RESULT])
    assert h.run.execution_time_ms == 20 * MINUTE
    new = started(h)
    assert (new["attempt"], new["last_completion_result"], new["input"], new["cron_schedule"]) == \
        (1, [RESULT], [PAYLOAD], "*/5 * * * *")


def test_a_failed_cron_run_is_retried_then_the_next_cron_run_keeps_the_last_result() -> None:
    h = Harness(now=0)
    start(h, cron_schedule="* * * * *", retry_policy={**POLICY, "maximum_attempts": 2})
    wait_out_backoff(h)
    complete(h)  # run 1 succeeds: RESULT becomes the last completion result
    wait_out_backoff(h)
    step = fail(h)  # run 2, attempt 1: retried within the same cron run
    assert attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)["initiator"] == "RETRY"
    assert started(h)["attempt"] == 2 and started(h)["last_completion_result"] == [RESULT]
    wait_out_backoff(h)
    step = fail(h, "again")  # attempt 2: no attempt left, the next cron run starts
    closed = attrs(step, ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert (closed["initiator"], closed["failure"]["message"]) == ("CRON_SCHEDULE", "again")
    new = started(h)
    assert (new["attempt"], new["last_completion_result"], new["continued_failure"]["message"]) == \
        (1, [RESULT], "again")
    assert h.run.execution_time_ms % MINUTE == 0


def test_cancel_stops_a_cron_chain() -> None:
    h = Harness(now=0)
    start(h, cron_schedule="@hourly")
    assert h.run.execution_time_ms == 60 * MINUTE
    step = h.send("RequestCancelWorkflowExecution", {"reason": "stop"})
    assert ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED in types(step)
    wait_out_backoff(h)
    step = h.complete_task(wf_command("CancelWorkflowExecutionCommand", {}))
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_CANCELED and len(h.workflow.runs) == 1


@pytest.mark.parametrize("schedule", ["* * *", "61 * * * *", "0 0 30 2 *", "@every 1m"])
def test_a_bad_cron_schedule_is_refused_at_start(schedule: str) -> None:
    h = Harness()
    step = start(h, cron_schedule=schedule)
    assert step.rejection is not None and step.rejection["code"] == "INVALID_ARGUMENT"
    assert "cron" in step.rejection["message"]


# == children =======================================================================================================

def test_a_parent_sees_its_retried_child_close_once() -> None:
    parent, child = Shard(workflow=Workflow(NS, "parent-1")), Shard(workflow=Workflow(NS, WF))
    parent.start()
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "retry_policy": POLICY, "input": [PAYLOAD]}))
    assert attrs(step, ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED)["retry_policy"]["maximum_attempts"] == 3
    up = child.deliver(sent(step, "StartWorkflowExecution")[0])
    parent.deliver(sent(up, "ChildWorkflowExecutionStartedNotification")[0])
    first = child.run_id
    assert sent(fail(child), "ChildWorkflowExecutionClosedNotification") == []  # retried: the parent waits on
    assert started(child)["parent"]["workflow_id"] == "parent-1"
    wait_out_backoff(child)
    notes = sent(complete(child), "ChildWorkflowExecutionClosedNotification")
    assert len(notes) == 1 and notes[0]["body"][1]["child"]["run_id"] == child.run_id != first
    heard = parent.deliver(notes[0])
    assert types(heard) == [ev.CHILD_WORKFLOW_EXECUTION_COMPLETED]
    assert attrs(heard, ev.CHILD_WORKFLOW_EXECUTION_COMPLETED)["result"] == [RESULT]


def test_a_child_carries_its_cron_schedule() -> None:
    parent, child = Shard(workflow=Workflow(NS, "parent-1")), Shard(workflow=Workflow(NS, WF), now=0)
    parent.start()
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "cron_schedule": "@daily"}))
    assert attrs(step, ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED)["cron_schedule"] == "@daily"
    child.deliver(sent(step, "StartWorkflowExecution")[0])
    assert child.run.cron_schedule == "@daily" and child.run.execution_time_ms == 24 * 60 * MINUTE


def test_a_parent_cancels_its_retried_child_through_the_chain() -> None:
    parent, child = Shard(workflow=Workflow(NS, "parent-1")), Shard(workflow=Workflow(NS, WF))
    parent.start()
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "retry_policy": POLICY}))
    up = child.deliver(sent(step, "StartWorkflowExecution")[0])
    parent.deliver(sent(up, "ChildWorkflowExecutionStartedNotification")[0])
    first = child.run_id
    fail(child)
    wait_out_backoff(child)
    step = parent.complete_task(wf_command("RequestCancelExternalWorkflowExecutionCommand", {
        "execution": {"workflow_id": WF, "run_id": first}, "child_workflow_only": True}))
    request = sent(step, "RequestCancelWorkflowExecution")[0]
    assert (request["run_id"], request["body"][1]["first_execution_run_id"]) == ("", first)
    reached = child.deliver(request)
    assert types(reached) == [ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED] and child.run_id != first
    assert child.run.cancel_requested


def test_a_run_started_before_retries_were_kept_fails_as_it_did_then() -> None:
    """A run whose start version 1 of the applier folded (before issue 17) kept no input: its retry policy, then
    accepted and ignored, does not retry it now with empty input (found by review)."""
    h = Harness()
    start(h, retry_policy=POLICY)
    run_id, first = h.history[0]
    assert first["event_type"] == ev.WORKFLOW_EXECUTION_STARTED
    h.history[0] = (run_id, {**first, "applier_version": 1})  # as an older server wrote it
    h.workflow = replay(Workflow(NS, WF), list(h.history))
    assert h.run.retry_policy is not None and not h.run.keeps_chain_inputs
    step = fail(h)
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_FAILED and ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW not in types(step)
    assert attrs(step, ev.WORKFLOW_EXECUTION_FAILED)["retry_state"] == "RETRY_POLICY_NOT_SET"
