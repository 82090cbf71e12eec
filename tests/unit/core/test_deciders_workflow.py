"""Table-driven tests of the workflow-level deciders: start, signal-with-start, signal, cancel, terminate, query,
the notifications other shards send back, retention, run timeouts, the history cap and command routing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ostinato.schemas import codec
from ostinato.streams import events as ev
from ostinato.streams.actions import (
    Archive,
    CancelTimer,
    DeleteRun,
    DispatchQueryTask,
    DispatchWorkflowTask,
    Reply,
    ScheduleTimer,
    SendCommand,
    UpsertVisibility,
)
from ostinato.streams.appliers import replay
from ostinato.streams.config import Config, Limits
from ostinato.streams.deciders import decide
from ostinato.streams.deciders.common import new_run_id
from ostinato.streams.model import Workflow, durable_bytes
from ostinato.streams.records import workflow_task as workflow_task_record
from ostinato.streams.writer import Step
from tests.unit.core.support import NS, WF, Harness, command, wf_command

Record = dict[str, Any]
C = "ostinato.command."
PARENT, ORIGIN = "parent-1", "origin-1"
HOUR = 3_600_000
PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'"hi"'}


# -- a harness for any workflow id, which also takes what other shards send it ------------------------------------

@dataclass
class Shard(Harness):
    """`Harness` for any workflow id. `deliver` feeds it a SendCommand envelope another shard produced (through the
    codec, so an incomplete envelope fails here). `archive_uri_ephemeral` leaves archive_uri out of the replay check,
    for tests of what archiving allows (the replay bug itself is `test_archive_uri_survives_replay`)."""

    archive_uri_ephemeral: bool = False

    def send(self, name: str, body: Record | None = None, **envelope: Any) -> Step:
        envelope.setdefault("workflow_id", self.workflow.workflow_id)
        return super().send(name, body, **envelope)

    def deliver(self, envelope: Record) -> Step:
        assert envelope["workflow_id"] == self.workflow.workflow_id, "routed to the wrong shard"
        record = codec.decode(codec.encode("ostinato.command.Command", envelope))[1]
        step = decide(self.workflow, record, self.now, self.config)
        self.history.extend(step.events)
        self.steps.append(step)
        self.check_replay()
        return step

    def check_replay(self) -> None:
        wire = [(run_id, codec.decode(codec.encode("ostinato.history.HistoryEvent", e))[1])
                for run_id, e in self.history]
        rebuilt = replay(Workflow(NS, self.workflow.workflow_id), wire)
        assert set(self.workflow.runs) <= set(rebuilt.runs)
        for run_id, run in self.workflow.runs.items():
            live = replace(run, archive_uri="") if self.archive_uri_ephemeral else run
            assert durable_bytes(rebuilt.runs[run_id]) == durable_bytes(live), f"run {run_id} differs after replay"
        if self.workflow.current is not None:
            assert rebuilt.current == self.workflow.current


def shard(workflow_id: str = WF, **config: Any) -> Shard:
    return Shard(config=Config(**config), workflow=Workflow(NS, workflow_id))


# -- reading a step ------------------------------------------------------------------------------------------------

def types(step: Step, run_id: str | None = None) -> list[str]:
    return [e["event_type"] for r, e in step.events if run_id is None or r == run_id]


def attrs(step: Step, event_type: str) -> Record:
    found = [ev.attributes(e) for _, e in step.events if e["event_type"] == event_type]
    assert len(found) == 1, f"{event_type} written {len(found)} times: {types(step)}"
    return found[0]


def of(step: Step, cls: type) -> list[Any]:
    return [a for a in step.actions if isinstance(a, cls)]


def reply(step: Step) -> tuple[str, Record]:
    replies = of(step, Reply)
    assert len(replies) == 1, f"{len(replies)} replies: {replies}"
    return replies[0].body


def sent(step: Step, body: str | None = None) -> list[Record]:
    return [a.command for a in of(step, SendCommand) if body is None or a.command["body"][0] == C + body]


def only(items: list[Any]) -> Any:
    assert len(items) == 1, f"expected one, found {items}"
    return items[0]


def task_record(h: Harness, step: Step) -> Record:
    """The WorkflowTask record of the one task `step` dispatched, as the processor builds it from history."""
    history = [e for r, e in h.history if r == h.run_id]
    record = workflow_task_record(h.run, only(of(step, DispatchWorkflowTask)), history, h.config)
    assert record is not None
    return record


def timer_kinds(step: Step, cls: type) -> set[str]:
    return {a.deadline.kind for a in of(step, cls)}


def assert_rejected(step: Step, code: str, fragment: str) -> None:
    assert step.rejection is not None, f"not rejected: {types(step)}"
    assert step.rejection["code"] == code, step.rejection
    assert fragment in step.rejection["message"], step.rejection["message"]
    assert step.events == []


# -- driving a workflow --------------------------------------------------------------------------------------------

def start(h: Harness, request_id: str | None = None, reply_partition: int | None = 0, **body: Any) -> Step:
    envelope: Record = {"reply_partition": reply_partition}
    if request_id is not None:
        envelope["request_id"] = request_id
    return h.send("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", **body}, **envelope)


def fire(h: Harness, kind: str, fire_at_ms: int, run_id: str | None = None, **body: Any) -> Step:
    h.now = max(h.now, fire_at_ms)
    return h.send("FireTimer", {"kind": kind, "fire_at_ms": fire_at_ms, **body}, run_id=run_id or h.run_id,
                  reply_partition=None)


def idle(h: Harness) -> None:
    """Complete the workflow task with a timer, so no task is in flight."""
    h.complete_task(wf_command("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": HOUR}))
    assert h.run.workflow_task is None


CLOSERS: dict[str, Callable[[Harness], Step]] = {
    "COMPLETED": lambda h: h.complete_task(wf_command("CompleteWorkflowExecutionCommand", {"result": [PAYLOAD]})),
    "FAILED": lambda h: h.complete_task(wf_command("FailWorkflowExecutionCommand", {"failure": {"message": "boom"}})),
    "CANCELED": lambda h: h.complete_task(wf_command("CancelWorkflowExecutionCommand")),
    "TERMINATED": lambda h: h.send("TerminateWorkflowExecution", {"reason": "stop"}),
    "TIMED_OUT": lambda h: fire(h, "WORKFLOW_RUN_TIMEOUT", h.run.run_expiration_time_ms),
}


def start_and_close(h: Harness, status: str, **body: Any) -> str:
    """Start a run (with a run timeout, so every way of closing is possible) and close it as `status`."""
    start(h, run_timeout_ms=HOUR, **body)
    run_id = h.run_id
    CLOSERS[status](h)
    assert h.workflow.runs[run_id].status == status
    return run_id


def parent_info(run_id: str = "parent-run", initiated: int = 5, policy: str = "TERMINATE") -> Record:
    return {"namespace": NS, "workflow_id": PARENT, "run_id": run_id, "initiated_event_id": initiated,
            "parent_close_policy": policy}


def parent_and_child(policy: str = "UNSPECIFIED") -> tuple[Shard, Shard, int]:
    """A parent that started a child (the round trip through both shards); returns the child's initiated id."""
    parent, child = shard(PARENT), shard(WF)
    start(parent)
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "parent_close_policy": policy, "run_timeout_ms": HOUR}))
    initiated = attrs(step, ev.START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    started = child.deliver(only(sent(step, "StartWorkflowExecution")))
    parent.deliver(only(sent(started, "ChildWorkflowExecutionStartedNotification")))
    assert parent.run.children[step.events[-1][1]["event_id"]].run_id == child.run_id
    assert initiated["parent_close_policy"] == (policy if policy != "UNSPECIFIED" else "TERMINATE")
    return parent, child, step.events[-1][1]["event_id"]


# == start ========================================================================================================

def test_fresh_start_writes_the_first_events_and_dispatches_the_first_task() -> None:
    h = shard()
    step = start(h, request_id="r1", input=[PAYLOAD], memo={"m": PAYLOAD}, search_attributes={"s": PAYLOAD})
    run_id = new_run_id(NS, WF, "r1", str(h.counter))
    # only SCHEDULED: the task's STARTED is written with the worker's answer
    assert types(step) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED]
    started = attrs(step, ev.WORKFLOW_EXECUTION_STARTED)
    assert (started["workflow_type"], started["task_queue"], started["input"]) == ("Order", "orders", [PAYLOAD])
    assert (started["request_id"], started["identity"], started["first_execution_run_id"]) == ("r1", "tester", run_id)
    assert only(of(step, DispatchWorkflowTask)) == DispatchWorkflowTask(NS, WF, run_id, "orders", 2, 3, 1, 0, False)
    task = h.workflow.runs[run_id].workflow_task
    assert task is not None and (task.scheduled_event_id, task.started_event_id, task.started_time_ms) == (2, 3, 0)
    # the task carries a STARTED (not in history) under the reserved id, at the dispatch time
    record = task_record(h, step)
    assert [(e["event_id"], e["event_type"]) for e in record["events"]] == [
        (1, ev.WORKFLOW_EXECUTION_STARTED), (2, ev.WORKFLOW_TASK_SCHEDULED), (3, ev.WORKFLOW_TASK_STARTED)]
    assert record["events"][-1]["event_time_ms"] == h.now
    assert ev.attributes(record["events"][-1])["history_length"] == record["history_length"] == 3
    assert record["previous_started_event_id"] == 0
    assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, run_id)]
    assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": run_id, "started": True})
    assert timer_kinds(step, ScheduleTimer) == {"WORKFLOW_TASK_TIMEOUT"}
    assert only(of(step, ScheduleTimer)).deadline.fire_at_ms == h.now + 10_000
    assert step.rejection is None and step.pointer_changed and sent(step) == []
    run = h.workflow.runs[run_id]
    assert (run.status, run.memo, run.search_attributes, run.signal_count) == ("RUNNING", {"m": PAYLOAD},
                                                                              {"s": PAYLOAD}, 0)
    assert h.workflow.current is not None
    assert (h.workflow.current.run_id, h.workflow.current.start_request_id) == (run_id, "r1")


@pytest.mark.parametrize("first_run_state", ["RUNNING", "COMPLETED"])
def test_retried_start_with_the_same_request_id_returns_the_same_run(first_run_state: str) -> None:
    h = shard()
    start(h, request_id="r1")
    run_id = h.run_id
    if first_run_state == "COMPLETED":
        CLOSERS["COMPLETED"](h)
    length = len(h.history)
    step = start(h, request_id="r1")
    assert step.events == [] and step.rejection is None and not step.pointer_changed
    assert step.actions == [Reply("r1", 0, NS, WF, ("ostinato.reply.WorkflowStarted",
                                                    {"run_id": run_id, "started": True}))]
    assert len(h.history) == length and list(h.workflow.runs) == [run_id]
    assert h.run.status == first_run_state


@pytest.mark.parametrize(("reuse", "conflict", "outcome"), [
    pytest.param("UNSPECIFIED", "UNSPECIFIED", "rejected", id="default-conflict-is-FAIL"),
    pytest.param("UNSPECIFIED", "FAIL", "rejected", id="FAIL"),
    pytest.param("REJECT_DUPLICATE", "UNSPECIFIED", "rejected", id="reuse-REJECT_DUPLICATE-while-running"),
    pytest.param("ALLOW_DUPLICATE", "USE_EXISTING", "existing", id="USE_EXISTING"),
    pytest.param("UNSPECIFIED", "TERMINATE_EXISTING", "terminated", id="TERMINATE_EXISTING"),
    pytest.param("TERMINATE_IF_RUNNING", "UNSPECIFIED", "terminated", id="reuse-TERMINATE_IF_RUNNING"),
    pytest.param("TERMINATE_IF_RUNNING", "FAIL", "terminated", id="TERMINATE_IF_RUNNING-overrides-FAIL"),
])
def test_id_conflict_policy_while_running(reuse: str, conflict: str, outcome: str) -> None:
    h = shard()
    start(h, request_id="r1")
    old = h.run_id
    step = start(h, request_id="r2", id_reuse_policy=reuse, id_conflict_policy=conflict)
    if outcome == "rejected":
        assert_rejected(step, "ALREADY_STARTED", f"already running as run {old}")
        assert step.rejection is not None and step.rejection["existing_run_id"] == old
        assert reply(step)[0] == "ostinato.reply.Rejected" and h.run_id == old and h.run.status == "RUNNING"
    elif outcome == "existing":
        assert step.events == [] and step.rejection is None
        assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": old, "started": False})
    else:
        new = new_run_id(NS, WF, "r2", str(h.counter))
        assert types(step, old) == [ev.WORKFLOW_EXECUTION_TERMINATED]
        assert "id conflict policy" in attrs(step, ev.WORKFLOW_EXECUTION_TERMINATED)["reason"]
        assert types(step, new)[:1] == [ev.WORKFLOW_EXECUTION_STARTED]
        assert h.workflow.runs[old].status == "TERMINATED" and h.run_id == new and h.run.status == "RUNNING"
        assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": new, "started": True})
        assert set(of(step, UpsertVisibility)) == {UpsertVisibility(NS, WF, old), UpsertVisibility(NS, WF, new)}
        assert "RETENTION" in timer_kinds(step, ScheduleTimer)


@pytest.mark.parametrize(("reuse", "closed", "allowed"), [
    pytest.param("UNSPECIFIED", "COMPLETED", True, id="default-is-ALLOW_DUPLICATE"),
    pytest.param("ALLOW_DUPLICATE", "COMPLETED", True, id="ALLOW_DUPLICATE-after-COMPLETED"),
    pytest.param("ALLOW_DUPLICATE", "FAILED", True, id="ALLOW_DUPLICATE-after-FAILED"),
    pytest.param("ALLOW_DUPLICATE_FAILED_ONLY", "COMPLETED", False, id="FAILED_ONLY-after-COMPLETED"),
    pytest.param("ALLOW_DUPLICATE_FAILED_ONLY", "FAILED", True, id="FAILED_ONLY-after-FAILED"),
    pytest.param("ALLOW_DUPLICATE_FAILED_ONLY", "TERMINATED", True, id="FAILED_ONLY-after-TERMINATED"),
    pytest.param("ALLOW_DUPLICATE_FAILED_ONLY", "CANCELED", True, id="FAILED_ONLY-after-CANCELED"),
    pytest.param("ALLOW_DUPLICATE_FAILED_ONLY", "TIMED_OUT", True, id="FAILED_ONLY-after-TIMED_OUT"),
    pytest.param("REJECT_DUPLICATE", "COMPLETED", False, id="REJECT_DUPLICATE-after-COMPLETED"),
    pytest.param("REJECT_DUPLICATE", "FAILED", False, id="REJECT_DUPLICATE-after-FAILED"),
    pytest.param("TERMINATE_IF_RUNNING", "COMPLETED", True, id="TERMINATE_IF_RUNNING-after-COMPLETED"),
    pytest.param("TERMINATE_IF_RUNNING", "TERMINATED", True, id="TERMINATE_IF_RUNNING-after-TERMINATED"),
])
def test_id_reuse_policy_after_close(reuse: str, closed: str, allowed: bool) -> None:
    h = shard()
    old = start_and_close(h, closed)
    step = start(h, request_id="again", id_reuse_policy=reuse)
    if allowed:
        new = new_run_id(NS, WF, "again", str(h.counter))
        assert types(step, new) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED]
        assert types(step, old) == []  # a closed run is not terminated again
        assert h.run_id == new != old and h.run.first_execution_run_id == new
        assert h.workflow.runs[old].status == closed
        assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": new, "started": True})
    else:
        assert_rejected(step, "ALREADY_STARTED", f"already ran ({closed})")
        assert step.rejection is not None and reuse in step.rejection["message"]
        assert step.rejection["existing_run_id"] == old and h.run_id == old


@pytest.mark.parametrize(("body", "fragment"), [
    pytest.param({"workflow_type": ""}, "workflow_type is required", id="empty-type"),
    pytest.param({"task_queue": ""}, "task queue names cannot be empty", id="empty-queue"),
    pytest.param({"execution_timeout_ms": 0}, "execution_timeout_ms must be positive", id="zero-execution-timeout"),
    pytest.param({"execution_timeout_ms": -5}, "execution_timeout_ms must be positive", id="negative-exec-timeout"),
    pytest.param({"run_timeout_ms": 0}, "run_timeout_ms must be positive", id="zero-run-timeout"),
    pytest.param({"run_timeout_ms": -1}, "run_timeout_ms must be positive", id="negative-run-timeout"),
    pytest.param({"task_timeout_ms": -1}, "task_timeout_ms must not be negative", id="negative-task-timeout"),
])
@pytest.mark.parametrize("via", ["start", "signal-with-start"])
def test_invalid_start_is_rejected(body: Record, fragment: str, via: str) -> None:
    h = shard()
    full = {"workflow_type": "Order", "task_queue": "orders", **body}
    if via == "start":
        step = h.send("StartWorkflowExecution", full)
    else:
        step = h.send("SignalWithStartWorkflowExecution", {"start": full, "signal_name": "go"})
    assert_rejected(step, "INVALID_ARGUMENT", fragment)
    assert reply(step)[0] == "ostinato.reply.Rejected"
    assert h.workflow.runs == {} and h.workflow.current is None


@pytest.mark.parametrize(("body", "run_expires", "execution_expires", "kinds"), [
    pytest.param({}, None, None, set(), id="none"),
    pytest.param({"run_timeout_ms": 60_000}, 60_000, None, {"WORKFLOW_RUN_TIMEOUT"}, id="run"),
    pytest.param({"execution_timeout_ms": 90_000}, None, 90_000, {"WORKFLOW_EXECUTION_TIMEOUT"}, id="execution"),
    pytest.param({"run_timeout_ms": 60_000, "execution_timeout_ms": 90_000}, 60_000, 90_000,
                 {"WORKFLOW_RUN_TIMEOUT", "WORKFLOW_EXECUTION_TIMEOUT"}, id="both"),
])
def test_start_timeouts_set_deadlines(body: Record, run_expires: int | None, execution_expires: int | None,
                                      kinds: set[str]) -> None:
    h = shard()
    step = start(h, **body)
    at = {a.deadline.kind: a.deadline.fire_at_ms for a in of(step, ScheduleTimer)}
    assert set(at) == kinds | {"WORKFLOW_TASK_TIMEOUT"}
    now = h.now
    assert h.run.run_expiration_time_ms == (None if run_expires is None else now + run_expires)
    assert h.run.execution_expiration_time_ms == (None if execution_expires is None else now + execution_expires)
    if run_expires is not None:
        assert at["WORKFLOW_RUN_TIMEOUT"] == now + run_expires
    if execution_expires is not None:
        assert at["WORKFLOW_EXECUTION_TIMEOUT"] == now + execution_expires


@pytest.mark.parametrize(("config", "body", "expected"), [
    pytest.param({}, {}, 10_000, id="schema-default"),
    pytest.param({"default_task_timeout_ms": 7_000}, {"task_timeout_ms": 0}, 7_000, id="zero-means-config-default"),
    pytest.param({}, {"task_timeout_ms": 3_000}, 3_000, id="as-asked"),
    pytest.param({}, {"task_timeout_ms": 500_000}, 120_000, id="clamped-to-max"),
    pytest.param({"max_task_timeout_ms": 5_000}, {}, 5_000, id="default-clamped-by-config-max"),
    pytest.param({"default_task_timeout_ms": 300_000}, {"task_timeout_ms": 0}, 120_000, id="config-default-clamped"),
])
def test_task_timeout_default_and_clamp(config: Record, body: Record, expected: int) -> None:
    h = shard(**config)
    step = start(h, **body)
    assert attrs(step, ev.WORKFLOW_EXECUTION_STARTED)["task_timeout_ms"] == expected
    assert attrs(step, ev.WORKFLOW_TASK_SCHEDULED)["start_to_close_timeout_ms"] == expected
    assert h.run.task_timeout_ms == expected
    assert only(of(step, ScheduleTimer)).deadline.fire_at_ms == h.now + expected


@pytest.mark.parametrize("reply_partition", [None, 3], ids=["from-a-parent-shard", "with-a-reply-partition"])
def test_child_start_tells_the_parent_it_started(reply_partition: int | None) -> None:
    h = shard()
    step = start(h, request_id="p/child/5", reply_partition=reply_partition, parent=parent_info())
    note = only(sent(step))
    assert (note["namespace"], note["workflow_id"], note["run_id"]) == (NS, PARENT, "parent-run")
    assert note["reply_partition"] is None and note["request_id"] == f"{h.run_id}/started"
    assert note["body"] == (C + "ChildWorkflowExecutionStartedNotification", {
        "initiated_event_id": 5, "child": {"workflow_id": WF, "run_id": h.run_id}, "workflow_type": "Order"})
    assert h.run.parent == parent_info()
    assert [r.body[0] for r in of(step, Reply)] == ([] if reply_partition is None
                                                   else ["ostinato.reply.WorkflowStarted"])


@pytest.mark.parametrize(("setup", "body", "cause"), [
    pytest.param("running", {}, "WORKFLOW_ALREADY_EXISTS", id="already-running"),
    pytest.param("running", {"id_conflict_policy": "USE_EXISTING"}, "WORKFLOW_ALREADY_EXISTS",
                 id="USE_EXISTING-does-not-adopt-a-run-for-a-parent"),
    pytest.param("completed", {"id_reuse_policy": "REJECT_DUPLICATE"}, "WORKFLOW_ALREADY_EXISTS",
                 id="reuse-rejected"),
    pytest.param("none", {"task_queue": ""}, "UNSPECIFIED", id="invalid"),
])
def test_refused_child_start_notifies_the_parent_instead_of_replying(setup: str, body: Record, cause: str) -> None:
    h = shard()
    if setup == "running":
        start(h)
    elif setup == "completed":
        start_and_close(h, "COMPLETED")
    runs = dict(h.workflow.runs)
    step = start(h, request_id="p/child/5", reply_partition=0, parent=parent_info(), **body)
    assert step.rejection is not None and step.events == [] and of(step, Reply) == []
    note = only(sent(step))
    assert (note["workflow_id"], note["run_id"], note["request_id"]) == (PARENT, "parent-run", "p/child/5/start-failed")
    assert note["body"] == (C + "StartChildWorkflowExecutionFailedNotification", {
        "initiated_event_id": 5, "workflow_id": WF, "workflow_type": "Order", "cause": cause})
    assert h.workflow.runs == runs


# == signal-with-start ============================================================================================

@pytest.mark.parametrize(("setup", "expected"), [
    pytest.param("none", "started", id="not-started"),
    pytest.param("running", "signaled", id="running"),
    pytest.param("completed", "started", id="closed"),
    pytest.param("completed-reject-duplicate", "rejected", id="closed-reuse-rejected"),
])
def test_signal_with_start(setup: str, expected: str) -> None:
    h = shard()
    reuse = "UNSPECIFIED"
    if setup == "running":
        start(h)
    elif setup.startswith("completed"):
        start_and_close(h, "COMPLETED")
        reuse = "REJECT_DUPLICATE" if setup.endswith("reject-duplicate") else reuse
    before = h.workflow.current.run_id if h.workflow.current else None
    step = h.send("SignalWithStartWorkflowExecution", {
        "start": {"workflow_type": "Order", "task_queue": "orders", "id_reuse_policy": reuse},
        "signal_name": "go", "signal_input": [PAYLOAD]}, request_id="sws")
    if expected == "rejected":
        assert_rejected(step, "ALREADY_STARTED", "REJECT_DUPLICATE")
        return
    signaled = attrs(step, ev.WORKFLOW_EXECUTION_SIGNALED)
    assert (signaled["signal_name"], signaled["input"], signaled["request_id"]) == ("go", [PAYLOAD], "sws")
    assert h.run.signal_count == 1
    if expected == "started":
        assert h.run_id == new_run_id(NS, WF, "sws", str(h.counter)) != before
        assert types(step) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_EXECUTION_SIGNALED,
                               ev.WORKFLOW_TASK_SCHEDULED]
        assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": h.run_id, "started": True})
        assert only(of(step, DispatchWorkflowTask)).scheduled_event_id == 3
    else:
        assert h.run_id == before and types(step) == [ev.WORKFLOW_EXECUTION_SIGNALED]
        assert reply(step) == ("ostinato.reply.WorkflowStarted", {"run_id": before, "started": False})
        assert of(step, DispatchWorkflowTask) == [] and h.run.workflow_task is not None
        assert h.run.workflow_task.new_events_while_started


# == signal =======================================================================================================

@pytest.mark.parametrize(("setup", "named", "code", "fragment"), [
    pytest.param("running", "", None, "", id="current-run"),
    pytest.param("running", "current", None, "", id="named-run"),
    pytest.param("none", "", "NOT_FOUND", "does not exist", id="unknown-workflow"),
    pytest.param("running", "no-such-run", "NOT_FOUND", "run no-such-run", id="unknown-run"),
    pytest.param("closed", "", "ALREADY_CLOSED", "is TERMINATED", id="closed-current"),
    pytest.param("closed-then-new", "old", "ALREADY_CLOSED", "is TERMINATED", id="named-old-run"),
])
def test_signal_targets(setup: str, named: str, code: str | None, fragment: str) -> None:
    h = shard()
    old = ""
    if setup != "none":
        old = start_and_close(h, "TERMINATED") if setup.startswith("closed") else (start(h) and h.run_id)
    if setup == "closed-then-new":
        start(h)
    run_id = {"": "", "current": h.workflow.current.run_id if h.workflow.current else "", "old": old}.get(named, named)
    step = h.send("SignalWorkflowExecution", {"signal_name": "go", "input": [PAYLOAD]}, run_id=run_id,
                  request_id="sig")
    if code is not None:
        assert_rejected(step, code, fragment)
        assert reply(step)[0] == "ostinato.reply.Rejected"
        assert step.rejection is not None and step.rejection["existing_run_id"] == (old if code == "ALREADY_CLOSED"
                                                                                    else "")
        return
    signaled = attrs(step, ev.WORKFLOW_EXECUTION_SIGNALED)
    assert (signaled["signal_name"], signaled["input"], signaled["identity"], signaled["request_id"]) == (
        "go", [PAYLOAD], "tester", "sig")
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": h.run_id, "cancel_requested": False})
    assert h.run.signal_count == 1 and "sig" in h.run.recent_request_ids


def test_duplicate_signal_request_is_accepted_once() -> None:
    h = shard()
    start(h)
    first = h.send("SignalWorkflowExecution", {"signal_name": "go"}, request_id="sig")
    again = h.send("SignalWorkflowExecution", {"signal_name": "go"}, request_id="sig")
    assert types(first) == [ev.WORKFLOW_EXECUTION_SIGNALED]
    assert again.events == [] and again.rejection is None
    assert reply(again) == ("ostinato.reply.Accepted", {"run_id": h.run_id, "cancel_requested": False})
    assert h.run.signal_count == 1


@pytest.mark.parametrize("via", ["signal", "signal-with-start"])
def test_signal_limit(via: str) -> None:
    h = Shard(config=Config(limits=Limits(max_signals=2)))
    start(h)

    def signal(i: int) -> Step:
        if via == "signal":
            return h.send("SignalWorkflowExecution", {"signal_name": f"s{i}"})
        return h.send("SignalWithStartWorkflowExecution", {
            "start": {"workflow_type": "Order", "task_queue": "orders"}, "signal_name": f"s{i}"})

    assert [types(signal(i)) for i in range(2)] == [[ev.WORKFLOW_EXECUTION_SIGNALED]] * 2
    step = signal(3)
    assert_rejected(step, "LIMIT_EXCEEDED", "max_signals")
    assert h.run.signal_count == 2


@pytest.mark.parametrize("task", ["in-flight", "idle"])
def test_signal_wakes_the_workflow(task: str) -> None:
    h = shard()
    start(h)
    if task == "idle":
        idle(h)
    step = h.send("SignalWorkflowExecution", {"signal_name": "go"})
    if task == "idle":
        assert types(step) == [ev.WORKFLOW_EXECUTION_SIGNALED, ev.WORKFLOW_TASK_SCHEDULED]
        assert only(of(step, DispatchWorkflowTask)).previous_started_event_id == 3
        return
    assert types(step) == [ev.WORKFLOW_EXECUTION_SIGNALED] and of(step, DispatchWorkflowTask) == []
    assert h.run.workflow_task is not None and h.run.workflow_task.new_events_while_started
    done = h.complete_task()
    # the signal (3) came while the task was out: the task's STARTED, written with the answer, follows it
    assert [(e["event_id"], e["event_type"]) for _, e in done.events] == [
        (4, ev.WORKFLOW_TASK_STARTED), (5, ev.WORKFLOW_TASK_COMPLETED), (6, ev.WORKFLOW_TASK_SCHEDULED)]
    task_out = only(of(done, DispatchWorkflowTask))
    assert (task_out.scheduled_event_id, task_out.previous_started_event_id) == (6, 4)
    assert not h.run.workflow_task.new_events_while_started


def test_signal_during_a_task_blocks_closing_until_the_workflow_saw_it() -> None:
    h = shard()
    start(h)
    h.send("SignalWorkflowExecution", {"signal_name": "go"})
    step = CLOSERS["COMPLETED"](h)
    assert attrs(step, ev.WORKFLOW_TASK_FAILED)["cause"] == "UNHANDLED_COMMAND"
    assert h.run.status == "RUNNING"


# == signals and cancels from other workflows: both ends of the round trip =========================================

EXTERNAL = {
    "SIGNAL": ("SignalExternalWorkflowExecutionCommand", {"signal_name": "poke", "input": [PAYLOAD]},
               ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED),
    "CANCEL": ("RequestCancelExternalWorkflowExecutionCommand", {"reason": "enough"},
               ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED),
}


@pytest.mark.parametrize(("kind", "target", "target_event", "code", "cause", "origin_event"), [
    pytest.param("SIGNAL", "running", ev.WORKFLOW_EXECUTION_SIGNALED, None, None,
                 ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, id="signal-arrives"),
    pytest.param("SIGNAL", "closed", None, "ALREADY_CLOSED", "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
                 ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, id="signal-to-closed"),
    pytest.param("SIGNAL", "missing", None, "NOT_FOUND", "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
                 ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, id="signal-to-unknown"),
    pytest.param("SIGNAL", "full", None, "LIMIT_EXCEEDED", "UNSPECIFIED",
                 ev.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, id="signal-over-limit"),
    pytest.param("CANCEL", "running", ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED, None, None,
                 ev.EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED, id="cancel-arrives"),
    pytest.param("CANCEL", "closed", None, "ALREADY_CLOSED", "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
                 ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, id="cancel-to-closed"),
    pytest.param("CANCEL", "missing", None, "NOT_FOUND", "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
                 ev.REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, id="cancel-to-unknown"),
])
def test_external_request_round_trip(kind: str, target: str, target_event: str | None, code: str | None,
                                     cause: str | None, origin_event: str) -> None:
    origin = shard(ORIGIN)
    callee = Shard(config=Config(limits=Limits(max_signals=0 if target == "full" else 2_000)))
    if target in ("running", "full"):
        start(callee)
    elif target == "closed":
        start_and_close(callee, "TERMINATED")
    start(origin)
    name, body, initiated_type = EXTERNAL[kind]
    step = origin.complete_task(wf_command(name, {"execution": {"workflow_id": WF}, **body}))
    initiated_id = step.events[-1][1]["event_id"]
    assert types(step)[-1] == initiated_type and origin.run.external_requests[initiated_id].kind == kind
    request = only(sent(step))
    assert request["body"][1]["external"] == {"namespace": NS, "workflow_id": ORIGIN, "run_id": origin.run_id,
                                              "initiated_event_id": initiated_id, "child_workflow_only": False}

    arrived = callee.deliver(request)
    if code is None:
        assert types(arrived)[0] == target_event and arrived.rejection is None
    else:
        assert arrived.rejection is not None and arrived.rejection["code"] == code and arrived.events == []
    assert of(arrived, Reply) == []  # a shard does not wait for a reply; it waits for the result notification
    result = only(sent(arrived, "ExternalRequestResultNotification"))
    assert (result["workflow_id"], result["run_id"]) == (ORIGIN, origin.run_id)
    assert result["body"][1]["kind"] == kind and result["body"][1]["failed_cause"] == cause
    assert result["body"][1]["initiated_event_id"] == initiated_id

    heard = origin.deliver(result)
    assert types(heard) == [origin_event, ev.WORKFLOW_TASK_SCHEDULED]
    if cause is not None:
        assert attrs(heard, origin_event)["cause"] == cause
    assert attrs(heard, origin_event)["workflow_execution"] == {"workflow_id": WF, "run_id": ""}
    assert origin.run.external_requests == {}
    assert_rejected(origin.deliver(result), "STALE_TASK", f"no external request initiated at event {initiated_id}")


@pytest.mark.parametrize("origin_state", ["closed", "unnamed-run"])
def test_external_result_for_a_closed_or_unnamed_origin_is_stale(origin_state: str) -> None:
    origin = shard(ORIGIN)
    start(origin)
    step = origin.complete_task(wf_command(EXTERNAL["SIGNAL"][0], {"execution": {"workflow_id": WF},
                                                                   "signal_name": "poke"}))
    run_id = origin.run_id
    if origin_state == "closed":
        origin.send("TerminateWorkflowExecution", {})
    body = {"initiated_event_id": step.events[-1][1]["event_id"], "kind": "SIGNAL", "target": {"workflow_id": WF}}
    out = origin.send("ExternalRequestResultNotification", body, reply_partition=None,
                      run_id=run_id if origin_state == "closed" else "")
    assert_rejected(out, "STALE_TASK", "no external request")


# == request cancel and terminate =================================================================================

@pytest.mark.parametrize("task", ["in-flight", "idle"])
def test_request_cancel_once(task: str) -> None:
    h = shard()
    start(h)
    if task == "idle":
        idle(h)
    first = h.send("RequestCancelWorkflowExecution", {"reason": "enough"}, request_id="c1")
    assert types(first)[0] == ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED
    assert attrs(first, ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED)["reason"] == "enough"
    assert (h.run.cancel_requested, h.run.cancel_reason, h.run.status) == (True, "enough", "RUNNING")
    assert len(of(first, DispatchWorkflowTask)) == (1 if task == "idle" else 0)
    assert reply(first) == ("ostinato.reply.Accepted", {"run_id": h.run_id, "cancel_requested": False})
    again = h.send("RequestCancelWorkflowExecution", {"reason": "really"}, request_id="c2")
    assert again.events == [] and again.rejection is None and of(again, DispatchWorkflowTask) == []
    assert reply(again)[0] == "ostinato.reply.Accepted" and h.run.cancel_reason == "enough"


@pytest.mark.parametrize("command_name", ["RequestCancelWorkflowExecution", "TerminateWorkflowExecution"])
@pytest.mark.parametrize(("setup", "code"), [
    pytest.param("closed", "ALREADY_CLOSED", id="closed"),
    pytest.param("none", "NOT_FOUND", id="unknown"),
])
def test_cancel_or_terminate_a_run_that_is_not_running(command_name: str, setup: str, code: str) -> None:
    h = shard()
    if setup == "closed":
        start_and_close(h, "COMPLETED")
    step = h.send(command_name, {"reason": "x"})
    assert_rejected(step, code, "is COMPLETED" if setup == "closed" else "does not exist")
    assert reply(step)[0] == "ostinato.reply.Rejected" and sent(step) == []


@pytest.mark.parametrize("archive", [False, True], ids=["no-archive", "archive"])
def test_terminate_closes_the_run(archive: bool) -> None:
    h = shard(archive=archive)
    start(h, run_timeout_ms=HOUR)
    step = h.send("TerminateWorkflowExecution", {"reason": "stop", "details": [PAYLOAD]}, request_id="t1")
    assert types(step) == [ev.WORKFLOW_EXECUTION_TERMINATED]
    terminated = attrs(step, ev.WORKFLOW_EXECUTION_TERMINATED)
    assert (terminated["reason"], terminated["details"], terminated["identity"], terminated["request_id"]) == (
        "stop", [PAYLOAD], "tester", "t1")
    assert (h.run.status, h.run.close_time_ms, h.run.workflow_task) == ("TERMINATED", h.now, None)
    assert h.workflow.current is not None and h.workflow.current.status == "TERMINATED"
    assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, h.run_id)]
    assert of(step, Archive) == ([Archive(NS, WF, h.run_id)] if archive else [])
    assert timer_kinds(step, CancelTimer) == {"WORKFLOW_TASK_TIMEOUT", "WORKFLOW_RUN_TIMEOUT"}
    assert only(of(step, ScheduleTimer)).deadline.fire_at_ms == h.now + h.config.retention_ms
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": h.run_id, "cancel_requested": False})
    assert step.pointer_changed and sent(step) == []


@pytest.mark.parametrize(("policy", "sent_body", "child_after"), [
    pytest.param("UNSPECIFIED", "TerminateWorkflowExecution", "TERMINATED", id="default-TERMINATE"),
    pytest.param("TERMINATE", "TerminateWorkflowExecution", "TERMINATED", id="TERMINATE"),
    pytest.param("REQUEST_CANCEL", "RequestCancelWorkflowExecution", "cancel-requested", id="REQUEST_CANCEL"),
    pytest.param("ABANDON", None, "RUNNING", id="ABANDON"),
])
@pytest.mark.parametrize("parent_closes", ["terminated", "completed"])
def test_parent_close_policy(policy: str, sent_body: str | None, child_after: str, parent_closes: str) -> None:
    parent, child, initiated = parent_and_child(policy)
    if parent_closes == "terminated":
        step = parent.send("TerminateWorkflowExecution", {"reason": "stop"})
    else:
        step = CLOSERS["COMPLETED"](parent)
    commands = sent(step)
    if sent_body is None:
        assert commands == []
        assert child.run.status == "RUNNING"
        return
    out = only(commands)
    named = "REQUEST_CANCEL" if "Cancel" in sent_body else "TERMINATE"
    assert out["body"][0] == C + sent_body and f"parent close policy {named}" in out["body"][1]["reason"]
    assert (out["workflow_id"], out["request_id"]) == (WF, f"{parent.run_id}/close/{initiated}")
    assert out["run_id"] == ""  # the child's current run...
    assert out["body"][1]["first_execution_run_id"] == child.run_id  # ...of the chain this parent started
    arrived = child.deliver(out)
    if child_after == "cancel-requested":
        assert types(arrived)[0] == ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED and child.run.cancel_requested
        return
    assert child.run.status == child_after
    closed = only(sent(arrived, "ChildWorkflowExecutionClosedNotification"))
    assert_rejected(parent.deliver(closed), "STALE_TASK", "no running child")  # the parent closed first


def test_parent_close_policy_reaches_a_child_that_continued_as_new() -> None:
    parent, child, _ = parent_and_child("TERMINATE")
    child.complete_task(wf_command("ContinueAsNewWorkflowExecutionCommand"))
    assert child.run.continued_from_run_id and child.run.status == "RUNNING"
    step = parent.send("TerminateWorkflowExecution", {"reason": "stop"})
    arrived = child.deliver(only(sent(step)))
    assert arrived.rejection is None
    assert child.run.status == "TERMINATED"


# == child close reaching the parent ==============================================================================

@pytest.mark.parametrize(("status", "parent_event", "retry_state"), [
    pytest.param("COMPLETED", ev.CHILD_WORKFLOW_EXECUTION_COMPLETED, "UNSPECIFIED", id="COMPLETED"),
    pytest.param("FAILED", ev.CHILD_WORKFLOW_EXECUTION_FAILED, "RETRY_POLICY_NOT_SET", id="FAILED"),
    pytest.param("CANCELED", ev.CHILD_WORKFLOW_EXECUTION_CANCELED, "UNSPECIFIED", id="CANCELED"),
    pytest.param("TIMED_OUT", ev.CHILD_WORKFLOW_EXECUTION_TIMED_OUT, "TIMEOUT", id="TIMED_OUT"),
    pytest.param("TERMINATED", ev.CHILD_WORKFLOW_EXECUTION_TERMINATED, "UNSPECIFIED", id="TERMINATED"),
])
def test_child_close_reaches_the_parent(status: str, parent_event: str, retry_state: str) -> None:
    parent, child, initiated = parent_and_child()
    child_run = child.run_id
    step = CLOSERS[status](child)
    note = only(sent(step, "ChildWorkflowExecutionClosedNotification"))
    assert (note["workflow_id"], note["run_id"], note["request_id"]) == (PARENT, parent.run_id, f"{child_run}/closed")
    body = note["body"][1]
    assert (body["status"], body["initiated_event_id"], body["retry_state"]) == (status, initiated, retry_state)
    assert body["child"] == {"workflow_id": WF, "run_id": child_run} and body["workflow_type"] == "Ship"
    assert body["result"] == ([PAYLOAD] if status == "COMPLETED" else [])
    assert (body["failure"] or {}).get("message") == ("boom" if status == "FAILED" else None)

    heard = parent.deliver(note)
    assert types(heard) == [parent_event]  # a task is already in flight (from the started notification)
    closed = attrs(heard, parent_event)
    assert (closed["initiated_event_id"], closed["workflow_execution"]) == (initiated, body["child"])
    if status == "COMPLETED":
        assert closed["result"] == [PAYLOAD]
    if status == "FAILED":
        assert closed["failure"]["message"] == "boom"
    if status in ("FAILED", "TIMED_OUT"):
        assert closed["retry_state"] == retry_state
    assert parent.run.children == {} and parent.run.workflow_task is not None
    assert parent.run.workflow_task.new_events_while_started
    assert_rejected(parent.deliver(note), "STALE_TASK", f"no running child initiated at event {initiated}")


@pytest.mark.parametrize(("notification", "body", "prepare"), [
    pytest.param("ChildWorkflowExecutionStartedNotification", {}, "started", id="started-twice"),
    pytest.param("ChildWorkflowExecutionStartedNotification", {"initiated_event_id": 99}, "started",
                 id="started-unknown-child"),
    pytest.param("StartChildWorkflowExecutionFailedNotification", {}, "started", id="start-failed-after-started"),
    pytest.param("ChildWorkflowExecutionClosedNotification", {}, "initiated", id="closed-before-started"),
    pytest.param("ChildWorkflowExecutionClosedNotification", {"status": "RUNNING"}, "started",
                 id="closed-with-RUNNING"),
    pytest.param("ChildWorkflowExecutionClosedNotification", {"status": "CONTINUED_AS_NEW"}, "started",
                 id="closed-with-CONTINUED_AS_NEW"),
    pytest.param("ChildWorkflowExecutionClosedNotification", {}, "parent-closed", id="closed-after-parent-closed"),
    pytest.param("ChildWorkflowExecutionStartedNotification", {}, "no-run-id", id="unnamed-parent-run"),
])
def test_stale_child_notifications(notification: str, body: Record, prepare: str) -> None:
    parent = shard(PARENT)
    start(parent)
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "parent_close_policy": "ABANDON"}))
    initiated = step.events[-1][1]["event_id"]
    run_id = parent.run_id
    child = {"workflow_id": WF, "run_id": "child-run"}
    if prepare in ("started", "parent-closed"):
        parent.send("ChildWorkflowExecutionStartedNotification", {
            "initiated_event_id": initiated, "child": child, "workflow_type": "Ship"}, run_id=run_id)
    if prepare == "parent-closed":
        parent.send("TerminateWorkflowExecution", {})
    full = {"initiated_event_id": initiated, "child": child, "workflow_type": "Ship", "workflow_id": WF,
            "cause": "UNSPECIFIED", "status": "COMPLETED", **body}
    fields = {
        "ChildWorkflowExecutionStartedNotification": ("initiated_event_id", "child", "workflow_type"),
        "StartChildWorkflowExecutionFailedNotification": ("initiated_event_id", "workflow_id", "workflow_type",
                                                          "cause"),
        "ChildWorkflowExecutionClosedNotification": ("initiated_event_id", "child", "workflow_type", "status"),
    }[notification]
    out = parent.send(notification, {k: full[k] for k in fields}, reply_partition=None,
                      run_id="" if prepare == "no-run-id" else run_id)
    assert_rejected(out, "STALE_TASK", "initiated at event")
    assert of(out, Reply) == []


@pytest.mark.parametrize("cause", ["WORKFLOW_ALREADY_EXISTS", "NAMESPACE_NOT_FOUND"])
def test_child_start_failure_reaches_the_parent(cause: str) -> None:
    parent = shard(PARENT)
    start(parent)
    step = parent.complete_task(wf_command("StartChildWorkflowExecutionCommand", {
        "workflow_id": WF, "workflow_type": "Ship", "namespace": "other"}))
    initiated = step.events[-1][1]["event_id"]
    out = parent.send("StartChildWorkflowExecutionFailedNotification", {
        "initiated_event_id": initiated, "workflow_id": WF, "workflow_type": "Ship", "cause": cause},
        run_id=parent.run_id, reply_partition=None)
    assert types(out) == [ev.START_CHILD_WORKFLOW_EXECUTION_FAILED, ev.WORKFLOW_TASK_SCHEDULED]
    failed = attrs(out, ev.START_CHILD_WORKFLOW_EXECUTION_FAILED)
    assert (failed["cause"], failed["namespace"], failed["workflow_id"], failed["initiated_event_id"]) == (
        cause, "other", WF, initiated)
    assert parent.run.children == {}


def test_child_started_notification_records_the_child_run() -> None:
    parent, child, initiated = parent_and_child()
    started = [e for _, e in parent.history if e["event_type"] == ev.CHILD_WORKFLOW_EXECUTION_STARTED]
    attributes = ev.attributes(only(started))
    assert attributes["workflow_execution"] == {"workflow_id": WF, "run_id": child.run_id}
    assert (attributes["initiated_event_id"], attributes["workflow_type"]) == (initiated, "Ship")
    assert parent.run.children[initiated].started_event_id == started[0]["event_id"]


# == query ========================================================================================================

@pytest.mark.parametrize(("setup", "partition", "code", "fragment"), [
    pytest.param("running", 2, None, "", id="running"),
    pytest.param("closed", 2, None, "", id="closed-run-still-answers"),
    pytest.param("running", None, "INVALID_ARGUMENT", "reply_partition", id="no-reply-partition"),
    pytest.param("none", 2, "NOT_FOUND", "does not exist", id="unknown"),
])
def test_query(setup: str, partition: int | None, code: str | None, fragment: str) -> None:
    h = shard()
    if setup == "running":
        start(h)
    elif setup == "closed":
        start_and_close(h, "COMPLETED")
    body = {"query_type": "status", "query_args": [PAYLOAD], "deadline_ms": 5_000}
    step = h.send("QueryWorkflow", body, reply_partition=partition, request_id="q1")
    assert step.events == []
    if code is not None:
        assert_rejected(step, code, fragment)
        assert of(step, DispatchQueryTask) == []
        return
    task = only(step.actions)
    assert task == DispatchQueryTask(NS, WF, h.run_id, "orders", "q1", 2,
                                     {"query_type": "status", "query_args": [PAYLOAD], "header": {},
                                      "deadline_ms": 5_000})


# == retention, archival and deletion =============================================================================

@pytest.mark.parametrize(("archive", "archived", "deleted"), [
    pytest.param(False, False, True, id="no-archive-deletes"),
    pytest.param(True, False, False, id="archive-pending-waits"),
    pytest.param(True, True, True, id="archived-deletes"),
])
def test_retention_deadline(archive: bool, archived: bool, deleted: bool) -> None:
    h = Shard(config=Config(archive=archive), archive_uri_ephemeral=True)
    run_id = start_and_close(h, "COMPLETED")
    if archived:
        h.send("ArchivalCompleted", {"uri": "s3://bucket/run.avro", "event_count": 5}, run_id=run_id)
    retention_at = h.workflow.runs[run_id].close_time_ms + h.config.retention_ms
    step = fire(h, "RETENTION", retention_at, run_id=run_id)
    assert step.events == [] and step.rejection is None
    if not deleted:
        assert step.actions == [] and run_id in h.workflow.runs and h.workflow.current is not None
        return
    assert of(step, DeleteRun) == [DeleteRun(NS, WF, run_id)]
    assert [a.deadline.kind for a in of(step, CancelTimer)] == ["RETENTION"]
    assert h.workflow.runs == {} and h.workflow.current is None and step.pointer_changed


def test_retention_of_an_older_run_keeps_the_current_pointer() -> None:
    h = shard()
    old = start_and_close(h, "COMPLETED")
    start(h, request_id="second")
    started_at = h.counter
    step = fire(h, "RETENTION", h.workflow.runs[old].close_time_ms + h.config.retention_ms, run_id=old)
    assert of(step, DeleteRun) == [DeleteRun(NS, WF, old)]
    assert list(h.workflow.runs) == [h.run_id] and h.run_id == new_run_id(NS, WF, "second", str(started_at))
    assert not step.pointer_changed


@pytest.mark.parametrize(("kind", "offset"), [
    pytest.param("RETENTION", -1, id="retention-early-fire-at"),
    pytest.param("WORKFLOW_RUN_TIMEOUT", 0, id="run-timeout-of-a-closed-run"),
])
def test_stale_deadlines_do_nothing(kind: str, offset: int) -> None:
    h = shard()
    run_id = start_and_close(h, "COMPLETED")
    at = h.workflow.runs[run_id].close_time_ms + h.config.retention_ms + offset
    step = fire(h, kind, at, run_id=run_id)
    assert step.events == [] and step.actions == [] and step.rejection is None and run_id in h.workflow.runs


@pytest.mark.parametrize(("archive", "steps", "code", "fragment"), [
    pytest.param(False, ["close"], None, "", id="no-archive-deletes-at-once"),
    pytest.param(True, ["close"], "INVALID_ARGUMENT", "not archived yet", id="archive-pending-refuses"),
    pytest.param(True, ["close", "archived"], None, "", id="archived-deletes"),
    pytest.param(False, [], "INVALID_ARGUMENT", "terminate it before deleting", id="running-refuses"),
])
def test_delete_workflow_execution(archive: bool, steps: list[str], code: str | None, fragment: str) -> None:
    h = Shard(config=Config(archive=archive), archive_uri_ephemeral=True)
    start(h)
    run_id = h.run_id
    if "close" in steps:
        CLOSERS["COMPLETED"](h)
    if "archived" in steps:
        archived = h.send("ArchivalCompleted", {"uri": "s3://b/r.avro", "event_count": 5}, run_id=run_id)
        assert archived.actions == [Reply("req-3", 0, NS, WF, ("ostinato.reply.Accepted",
                                                               {"run_id": run_id, "cancel_requested": False}))]
        assert h.run.archive_uri == "s3://b/r.avro"
    step = h.send("DeleteWorkflowExecution", {"reason": "gdpr"}, run_id=run_id)
    if code is not None:
        assert_rejected(step, code, fragment)
        assert run_id in h.workflow.runs
        return
    assert step.events == [] and of(step, DeleteRun) == [DeleteRun(NS, WF, run_id)]
    assert reply(step) == ("ostinato.reply.Accepted", {"run_id": run_id, "cancel_requested": False})
    assert h.workflow.runs == {} and h.workflow.current is None
    assert_rejected(h.send("DeleteWorkflowExecution", {}, run_id=run_id), "NOT_FOUND", f"no run {run_id!r}")


@pytest.mark.parametrize("archive", [True, False], ids=["archive", "no-archive"])
def test_archival_completed_after_retention_deletes(archive: bool) -> None:
    h = shard(archive=archive)
    run_id = start_and_close(h, "COMPLETED")
    h.now = h.workflow.runs[run_id].close_time_ms + h.config.retention_ms
    step = h.send("ArchivalCompleted", {"uri": "s3://b/r.avro", "event_count": 5}, run_id=run_id)
    assert of(step, DeleteRun) == [DeleteRun(NS, WF, run_id)]
    assert reply(step)[0] == "ostinato.reply.Accepted"
    assert h.workflow.runs == {} and h.workflow.current is None


@pytest.mark.parametrize(("setup", "run_id"), [
    pytest.param("running", "current", id="running-run"),
    pytest.param("none", "nope", id="unknown-run"),
    pytest.param("running", "", id="unnamed-run"),
])
def test_archival_completed_needs_a_closed_run(setup: str, run_id: str) -> None:
    h = shard(archive=True)
    if setup == "running":
        start(h)
    step = h.send("ArchivalCompleted", {"uri": "s3://b/r.avro", "event_count": 3},
                  run_id=h.run_id if run_id == "current" else run_id)
    assert_rejected(step, "NOT_FOUND", "no closed run")


def test_archive_uri_survives_replay() -> None:
    h = shard(archive=True)
    run_id = start_and_close(h, "COMPLETED")
    h.send("ArchivalCompleted", {"uri": "s3://b/r.avro", "event_count": 5}, run_id=run_id)  # checks replay
    assert h.workflow.runs[run_id].archive_uri == "s3://b/r.avro"


# == run and execution timeouts ===================================================================================

@pytest.mark.parametrize(("body", "kind"), [
    pytest.param({"run_timeout_ms": 60_000}, "WORKFLOW_RUN_TIMEOUT", id="run-timeout"),
    pytest.param({"execution_timeout_ms": 60_000}, "WORKFLOW_EXECUTION_TIMEOUT", id="execution-timeout"),
])
def test_timeouts_close_the_run_timed_out(body: Record, kind: str) -> None:
    h = shard()
    start(h, parent=parent_info(), **body)
    step = fire(h, kind, h.now + 60_000)
    assert types(step) == [ev.WORKFLOW_EXECUTION_TIMED_OUT]
    assert attrs(step, ev.WORKFLOW_EXECUTION_TIMED_OUT)["retry_state"] == "TIMEOUT"
    assert h.run.status == "TIMED_OUT" and h.workflow.current is not None
    assert h.workflow.current.status == "TIMED_OUT"
    assert kind in timer_kinds(step, CancelTimer) and timer_kinds(step, ScheduleTimer) == {"RETENTION"}
    assert only(sent(step, "ChildWorkflowExecutionClosedNotification"))["body"][1]["status"] == "TIMED_OUT"
    assert of(step, UpsertVisibility) == [UpsertVisibility(NS, WF, h.run_id)]
    again = fire(h, kind, h.now)
    assert again.events == [] and again.actions == []


# == history hard cap =============================================================================================

@pytest.mark.parametrize(("cap", "signals", "terminated_after"), [
    pytest.param(2, 0, 0, id="reached-by-the-start"),
    pytest.param(5, 3, 3, id="reached-by-signals"),
    pytest.param(100, 3, None, id="below-the-cap"),
])
def test_history_hard_cap_terminates(cap: int, signals: int, terminated_after: int | None) -> None:
    h = Shard(config=Config(limits=Limits(history_max_events=cap)))
    steps = [start(h)] + [h.send("SignalWorkflowExecution", {"signal_name": "s"}) for _ in range(signals)]
    if terminated_after is None:
        assert h.run.status == "RUNNING"
        return
    step = steps[terminated_after]
    assert types(step)[-1] == ev.WORKFLOW_EXECUTION_TERMINATED and h.run.status == "TERMINATED"
    terminated = attrs(step, ev.WORKFLOW_EXECUTION_TERMINATED)
    assert "history_max_events" in terminated["reason"] and f"the limit is {cap}" in terminated["reason"]
    assert terminated["identity"] == "ostinato" and h.run.next_event_id == cap + 2
    assert of(step, UpsertVisibility)[-1] == UpsertVisibility(NS, WF, h.run_id)


def test_history_warning_is_on_the_workflow_task() -> None:
    h = Shard(config=Config(limits=Limits(history_warn_events=5)))
    first = start(h)
    assert ev.WORKFLOW_TASK_STARTED not in types(first)  # the task carries it; history gets it with the answer
    record = task_record(h, first)
    assert ev.attributes(record["events"][-1])["suggest_continue_as_new"] is record["suggest_continue_as_new"] is False
    h.send("SignalWorkflowExecution", {"signal_name": "s"})
    step = h.complete_task()
    # the STARTED written now is the one the task showed: history through its SCHEDULED (2), so 3 events
    recorded = attrs(step, ev.WORKFLOW_TASK_STARTED)
    assert (recorded["history_length"], recorded["suggest_continue_as_new"]) == (3, False)
    record = task_record(h, step)  # the next task: SCHEDULED at 6, so 7 events with its STARTED
    assert (record["history_length"], record["suggest_continue_as_new"]) == (7, True)
    assert ev.attributes(record["events"][-1])["suggest_continue_as_new"] is True


# == routing ======================================================================================================

@pytest.mark.parametrize(("record", "code", "fragment"), [
    pytest.param({"body": (C + "NoSuchCommand", {})}, "UNKNOWN_TYPE", "NoSuchCommand",
                 id="unknown-command-type"),
    pytest.param({"workflow_id": "someone-else"}, "WRONG_SHARD", "another workflow", id="other-workflow-id"),
    pytest.param({"namespace": "other-ns"}, "WRONG_SHARD", "another workflow", id="other-namespace"),
])
def test_routing_rejections(record: Record, code: str, fragment: str) -> None:
    workflow = Workflow(NS, WF)
    cmd = {**command("SignalWorkflowExecution", {"signal_name": "go"}, reply_partition=4), **record}
    step = decide(workflow, cmd, 1_000, Config())
    assert_rejected(step, code, fragment)
    rejected = only(of(step, Reply))
    assert (rejected.reply_partition, rejected.body[0], rejected.body[1]["code"]) == (4, "ostinato.reply.Rejected",
                                                                                     code)
    assert workflow.runs == {} and workflow.current is None
