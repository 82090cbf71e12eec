"""Helpers of the workflow-task and activity decider tests: command builders, a richer harness, checks."""

from __future__ import annotations

from typing import Any

from ostinato.streams.actions import (
    CancelTimer,
    Deadline,
    DispatchWorkflowTask,
    Reply,
    ScheduleTimer,
)
from ostinato.streams.config import Config, Limits
from ostinato.streams.deadlines import deadlines, fire_timer_body
from ostinato.streams.failures import failure as make_failure
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

def with_limits(**limits: int) -> Config:
    return Config(limits=Limits(**limits))
