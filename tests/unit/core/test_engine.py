"""End to end through the in-memory engine: the real deciders and appliers, the wire records workers and clients
exchange, several shards and a fake clock. No Kafka."""

from __future__ import annotations

from typing import Any

import pytest

from ostinato.schemas import codec
from ostinato.streams import events as ev
from ostinato.streams.actions import Deadline
from ostinato.streams.appliers import replay
from ostinato.streams.clock import FakeClock
from ostinato.streams.config import DAY_MS, Config
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import Workflow, durable_bytes

Record = dict[str, Any]
NS, Q = "default", "orders"
ACTIVITY = {"activity_id": "charge-1", "activity_type": "charge", "start_to_close_timeout_ms": 5_000}


def payload(text: str) -> Record:
    return {"metadata": {"encoding": b"json/plain"}, "data": f'"{text}"'.encode()}


def types(events: list[Record]) -> list[str]:
    return [e["event_type"] for e in events]


def body(reply: Record | None) -> tuple[str, Record]:
    assert reply is not None, "no reply"
    name, record = reply["body"]
    return name.rpartition(".")[2], record


def started_run_id(reply: Record | None) -> str:
    kind, record = body(reply)
    assert kind == "WorkflowStarted", record
    return str(record["run_id"])


def workflow_task(engine: InMemoryEngine, queue: str = Q) -> Record:
    polled = engine.poll_workflow_task(queue)
    assert polled is not None, f"no workflow task on {queue}"
    name, task = polled
    assert name == "ostinato.task.WorkflowTask"
    return task


def activity_task(engine: InMemoryEngine, queue: str = Q) -> Record:
    task = engine.poll_activity_task(queue)
    assert task is not None, f"no activity task on {queue}"
    return task


def on_another_shard(engine: InMemoryEngine, workflow_id: str, prefix: str) -> str:
    """A workflow id whose shard differs from `workflow_id`'s, so the test really crosses shards."""
    home = engine.shard_of(NS, workflow_id)
    return next(f"{prefix}-{i}" for i in range(100) if engine.shard_of(NS, f"{prefix}-{i}") != home)


def assert_replays(engine: InMemoryEngine) -> None:
    """Every live run equals, byte for byte in its durable view, what its stored history rebuilds."""
    for shard in engine.shards:
        for (ns, wf_id), workflow in shard.workflows.items():
            events = [(run_id, e) for (n, w, run_id), history in engine.histories.items() if (n, w) == (ns, wf_id)
                      for e in history]
            rebuilt = replay(Workflow(ns, wf_id), events)
            for run_id, run in workflow.runs.items():
                assert durable_bytes(rebuilt.runs[run_id]) == durable_bytes(run), f"{wf_id}/{run_id} differs"


@pytest.fixture
def engine() -> InMemoryEngine:
    return InMemoryEngine(shards=4)


def test_hello_workflow_runs_an_activity_and_completes(engine: InMemoryEngine) -> None:
    run_id = started_run_id(engine.start_workflow(NS, "hello", "Hello", Q, [payload("world")]))

    task = workflow_task(engine)
    assert (task["run_id"], task["attempt"], task["previous_started_event_id"]) == (run_id, 1, 0)
    assert types(task["events"]) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED,
                                     ev.WORKFLOW_TASK_STARTED]
    assert task["history_length"] == 3 and task["deadline_ms"] == engine.clock.now_ms + 10_000
    engine.complete_workflow_task(task, [("ScheduleActivityTaskCommand", {**ACTIVITY, "input": [payload("x")]})])

    activity = activity_task(engine)
    assert (activity["activity_type"], activity["attempt"], activity["input"]) == ("charge", 1, [payload("x")])
    assert body(engine.start_activity(activity))[0] == "Accepted"
    engine.complete_activity(activity, [payload("charged")])

    task = workflow_task(engine)
    assert task["previous_started_event_id"] == 3
    # From the previous task's SCHEDULED on: its STARTED is in history now, written with its answer.
    assert types(task["events"]) == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                     ev.ACTIVITY_TASK_SCHEDULED, ev.ACTIVITY_TASK_STARTED,
                                     ev.ACTIVITY_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED]
    reply = engine.complete_workflow_task(task, [("CompleteWorkflowExecutionCommand", {"result": [payload("ok")]})])

    assert body(reply) == ("Accepted", {"run_id": run_id, "cancel_requested": False})
    history = engine.history(NS, "hello")
    assert types(history) == [
        ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED,
        ev.WORKFLOW_TASK_COMPLETED, ev.ACTIVITY_TASK_SCHEDULED, ev.ACTIVITY_TASK_STARTED,
        ev.ACTIVITY_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED,
        ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_EXECUTION_COMPLETED]
    assert [e["event_id"] for e in history] == list(range(1, 12))
    assert ev.attributes(history[-1])["result"] == [payload("ok")]
    visibility = engine.visibility_of(NS, "hello")
    assert visibility is not None
    assert (visibility["status"], visibility["history_length"], visibility["version"]) == ("COMPLETED", 11, 11)
    assert visibility["close_time_ms"] == engine.clock.now_ms and visibility["history_size_bytes"] > 0
    described = engine.describe(NS, "hello")
    assert described is not None and described["status"] == "COMPLETED"
    assert not engine.has_queued_tasks() and not engine.rejections
    assert_replays(engine)


def test_a_timer_fires_when_the_clock_reaches_it(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "sleepy", "Sleepy", Q)
    start = engine.clock.now_ms
    engine.complete_workflow_task(workflow_task(engine), [
        ("StartTimerCommand", {"timer_id": "nap", "start_to_fire_timeout_ms": 60_000})])

    engine.advance(59_999)
    assert engine.poll_workflow_task(Q) is None
    engine.advance(1)

    task = workflow_task(engine)
    fired = task["events"][-3]
    assert fired["event_type"] == ev.TIMER_FIRED and fired["event_time_ms"] == start + 60_000
    assert ev.attributes(fired)["timer_id"] == "nap"
    engine.complete_workflow_task(task, [("CompleteWorkflowExecutionCommand", {})])
    assert engine.visibility_of(NS, "sleepy")["status"] == "COMPLETED"  # type: ignore[index]
    assert_replays(engine)


def test_deadlines_fire_in_time_order_each_at_its_own_time(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "two-timers", "T", Q)
    engine.complete_workflow_task(workflow_task(engine), [
        ("StartTimerCommand", {"timer_id": "late", "start_to_fire_timeout_ms": 2_000}),
        ("StartTimerCommand", {"timer_id": "early", "start_to_fire_timeout_ms": 1_000})])
    start = engine.clock.now_ms

    assert engine.advance(5_000) == start + 5_000

    fired = [e for e in engine.history(NS, "two-timers") if e["event_type"] == ev.TIMER_FIRED]
    assert [(ev.attributes(e)["timer_id"], e["event_time_ms"] - start) for e in fired] == [
        ("early", 1_000), ("late", 2_000)]


def test_an_activity_retries_with_backoff_then_succeeds(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "flaky", "Flaky", Q)
    policy = {"initial_interval_ms": 1_000, "backoff_coefficient": 2.0}
    engine.complete_workflow_task(workflow_task(engine), [
        ("ScheduleActivityTaskCommand", {**ACTIVITY, "retry_policy": policy})])
    scheduled_at = engine.clock.now_ms

    first = activity_task(engine)
    engine.start_activity(first)
    engine.heartbeat(first, [payload("half-way")])
    engine.fail_activity(first, {"message": "card declined", "type": "Declined"})
    engine.advance(999)
    assert engine.poll_activity_task(Q) is None  # backing off for 1 s
    engine.advance(1)

    second = activity_task(engine)
    assert (second["attempt"], second["heartbeat_details"]) == (2, [payload("half-way")])
    assert second["current_attempt_scheduled_time_ms"] == scheduled_at + 1_000
    assert second["scheduled_time_ms"] == scheduled_at
    engine.start_activity(second)
    engine.fail_activity(second, "again")
    assert body(engine.complete_activity(first))[0] == "Rejected"  # an answer for an old attempt is stale
    engine.advance(1_999)
    assert engine.poll_activity_task(Q) is None  # backing off for 2 s
    engine.advance(1)

    third = activity_task(engine)
    assert third["attempt"] == 3
    engine.start_activity(third, identity="worker-3")
    engine.complete_activity(third, [payload("charged")])

    task = workflow_task(engine)
    started, completed = task["events"][-4:-2]
    assert (started["event_type"], completed["event_type"]) == (ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_COMPLETED)
    assert ev.attributes(started)["attempt"] == 3 and ev.attributes(started)["identity"] == "worker-3"
    assert ev.attributes(started)["last_failure"]["message"] == "again"
    assert engine.rejections == {"STALE_TASK": 1}
    assert_replays(engine)


def test_a_signal_wakes_a_waiting_workflow(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "waiter", "Waiter", Q)
    engine.complete_workflow_task(workflow_task(engine))  # waits for a signal: no commands
    assert not engine.has_queued_tasks()

    reply = engine.signal(NS, "waiter", "shipped", [payload("TRACK-1")])

    assert body(reply)[0] == "Accepted"
    task = workflow_task(engine)
    assert task["previous_started_event_id"] == 3
    signaled = task["events"][2]
    assert types(task["events"]) == [ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                     ev.WORKFLOW_EXECUTION_SIGNALED, ev.WORKFLOW_TASK_SCHEDULED,
                                     ev.WORKFLOW_TASK_STARTED]
    assert ev.attributes(signaled)["signal_name"] == "shipped"
    assert ev.attributes(signaled)["input"] == [payload("TRACK-1")]


def test_a_signal_during_a_task_leads_to_another_task(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "busy", "Busy", Q)
    task = workflow_task(engine)
    engine.signal(NS, "busy", "poke")
    assert engine.poll_workflow_task(Q) is None  # one task at a time

    engine.complete_workflow_task(task)

    follow_up = workflow_task(engine)
    assert ev.WORKFLOW_EXECUTION_SIGNALED in types(follow_up["events"])


def test_a_task_start_is_written_with_the_answer_at_the_time_the_worker_took_it(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "honest", "Honest", Q)
    task = workflow_task(engine)
    dispatched = engine.clock.now_ms
    assert types(engine.history(NS, "honest")) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED]
    pending = engine.describe(NS, "honest")["workflow_task"]
    assert (pending["scheduled_event_id"], pending["started_time_ms"]) == (2, 0)  # nobody said it was taken
    engine.advance(2_000)
    engine.signal(NS, "honest", "poke")  # arrives while the task is out: after SCHEDULED, before STARTED
    engine.advance(1_000)

    engine.complete_workflow_task(task, started_time_ms=dispatched + 1_500)

    history = engine.history(NS, "honest")
    assert [(e["event_id"], e["event_type"]) for e in history] == [
        (1, ev.WORKFLOW_EXECUTION_STARTED), (2, ev.WORKFLOW_TASK_SCHEDULED), (3, ev.WORKFLOW_EXECUTION_SIGNALED),
        (4, ev.WORKFLOW_TASK_STARTED), (5, ev.WORKFLOW_TASK_COMPLETED), (6, ev.WORKFLOW_TASK_SCHEDULED)]
    started = history[3]
    assert started["event_time_ms"] == dispatched + 1_500
    assert ev.attributes(started)["scheduled_event_id"] == 2 and ev.attributes(started)["history_length"] == 3
    assert ev.attributes(started)["identity"] == "worker"
    assert ev.attributes(history[4])["started_event_id"] == 4
    follow_up = workflow_task(engine)  # the signal, which that task did not see, gets a task of its own
    assert follow_up["previous_started_event_id"] == 3
    assert types(follow_up["events"]) == [ev.WORKFLOW_EXECUTION_SIGNALED, ev.WORKFLOW_TASK_STARTED,
                                          ev.WORKFLOW_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED,
                                          ev.WORKFLOW_TASK_STARTED]
    assert follow_up["events"][-1]["event_id"] == 7
    assert_replays(engine)


def test_a_child_on_another_shard_reports_its_completion_to_its_parent(engine: InMemoryEngine) -> None:
    child_id = on_another_shard(engine, "parent", "child")
    parent_run = started_run_id(engine.start_workflow(NS, "parent", "Parent", Q))
    engine.complete_workflow_task(workflow_task(engine), [
        ("StartChildWorkflowExecutionCommand", {"workflow_id": child_id, "workflow_type": "Child"})])

    first, second = workflow_task(engine), workflow_task(engine)  # the child's first task, the parent's "started"
    child_task, parent_task = (first, second) if first["workflow_id"] == child_id else (second, first)
    assert parent_task["workflow_id"] == "parent" and ev.CHILD_WORKFLOW_EXECUTION_STARTED in types(
        parent_task["events"])
    child_state = engine.describe(NS, child_id)
    assert child_state is not None and child_state["parent"]["run_id"] == parent_run
    engine.complete_workflow_task(child_task, [("CompleteWorkflowExecutionCommand", {"result": [payload("done")]})])
    engine.complete_workflow_task(parent_task)  # saw "started"; the close arrived meanwhile: another task follows

    task = workflow_task(engine)
    closed = next(e for e in task["events"] if e["event_type"] == ev.CHILD_WORKFLOW_EXECUTION_COMPLETED)
    assert ev.attributes(closed)["result"] == [payload("done")]
    assert ev.attributes(closed)["workflow_execution"]["workflow_id"] == child_id
    assert engine.visibility_of(NS, child_id)["parent"] == {  # type: ignore[index]
        "workflow_id": "parent", "run_id": parent_run}
    engine.complete_workflow_task(task, [("CompleteWorkflowExecutionCommand", {})])
    assert engine.visibility_of(NS, "parent")["status"] == "COMPLETED"  # type: ignore[index]
    assert not engine.rejections
    assert_replays(engine)


def test_a_signal_to_a_workflow_on_another_shard_arrives_and_is_confirmed(engine: InMemoryEngine) -> None:
    target = on_another_shard(engine, "sender", "receiver")
    engine.start_workflow(NS, target, "Receiver", "inbox")
    engine.complete_workflow_task(workflow_task(engine, "inbox"))
    engine.start_workflow(NS, "sender", "Sender", Q)

    engine.complete_workflow_task(workflow_task(engine), [
        ("SignalExternalWorkflowExecutionCommand", {"execution": {"workflow_id": target}, "signal_name": "hello",
                                                    "input": [payload("hi")]})])

    received = workflow_task(engine, "inbox")
    signaled = next(e for e in received["events"] if e["event_type"] == ev.WORKFLOW_EXECUTION_SIGNALED)
    assert ev.attributes(signaled)["external"]["workflow_id"] == "sender"
    assert ev.attributes(signaled)["input"] == [payload("hi")]
    confirmed = workflow_task(engine)
    assert ev.EXTERNAL_WORKFLOW_EXECUTION_SIGNALED in types(confirmed["events"])
    assert_replays(engine)


def test_continue_as_new_starts_a_new_run_with_the_same_id_and_memo(engine: InMemoryEngine) -> None:
    first_run = started_run_id(engine.start_workflow(NS, "looper", "Looper", Q, memo={"owner": payload("ops")}))

    engine.complete_workflow_task(workflow_task(engine), [
        ("ContinueAsNewWorkflowExecutionCommand", {"input": [payload("round-2")]})])

    task = workflow_task(engine)
    second_run = engine.current_run_id(NS, "looper")
    assert second_run != first_run and task["run_id"] == second_run
    started = ev.attributes(task["events"][0])
    assert started["continued_execution_run_id"] == first_run and started["first_execution_run_id"] == first_run
    assert started["input"] == [payload("round-2")] and started["memo"] == {"owner": payload("ops")}
    assert types(engine.history(NS, "looper", first_run))[-1] == ev.WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert engine.visibility_of(NS, "looper", first_run)["status"] == "CONTINUED_AS_NEW"  # type: ignore[index]
    now = engine.visibility_of(NS, "looper")
    assert now is not None and (now["status"], now["memo"]) == ("RUNNING", {"owner": payload("ops")})
    assert_replays(engine)


def test_retention_deletes_a_closed_run(engine: InMemoryEngine) -> None:
    run_id = started_run_id(engine.start_workflow(NS, "brief", "Brief", Q))
    engine.complete_workflow_task(workflow_task(engine), [("CompleteWorkflowExecutionCommand", {})])

    engine.advance(engine.config.retention_ms - 1)
    assert engine.describe(NS, "brief") is not None and engine.history(NS, "brief")

    engine.advance(1)
    assert engine.describe(NS, "brief", run_id) is None
    assert engine.history(NS, "brief", run_id) == []
    assert engine.visibility_of(NS, "brief", run_id) is None
    assert engine.workflow(NS, "brief") is None and not engine.timers
    assert all(not shard.state for shard in engine.shards)  # tombstoned in the state changelog too


def test_with_archiving_on_a_run_is_deleted_only_once_archived() -> None:
    engine = InMemoryEngine(config=Config(archive=True, retention_ms=DAY_MS))
    run_id = started_run_id(engine.start_workflow(NS, "kept", "Kept", Q))
    engine.complete_workflow_task(workflow_task(engine), [("CompleteWorkflowExecutionCommand", {})])
    assert engine.archive_requests == [(NS, "kept", run_id)]

    engine.advance(DAY_MS)
    assert engine.describe(NS, "kept") is not None  # retention is over, but the archive is not confirmed

    reply = engine.archive_completed(NS, "kept", run_id)
    assert body(reply)[0] == "Accepted"
    assert engine.describe(NS, "kept", run_id) is None and engine.history(NS, "kept", run_id) == []
    assert types(engine.archives[f"mem://{NS}/kept/{run_id}.avro"])[-1] == ev.WORKFLOW_EXECUTION_COMPLETED


def test_malformed_commands_become_rejections_not_exceptions(engine: InMemoryEngine) -> None:
    assert engine.submit({"namespace": NS}) is None
    assert engine.submit("not even a record") is None
    assert engine.submit({"namespace": NS, "workflow_id": "w", "request_id": "bad-1", "time_ms": 0,
                          "reply_partition": 0, "body": ("ostinato.command.SignalWorkflowExecution", {})}) is None
    engine.submit_raw(NS, "w", b"\xc3\x01garbage")
    engine.submit_raw(NS, "w", codec.encode("ostinato.reply.Accepted", {"run_id": ""}))

    engine.run_until_idle()

    assert engine.rejections == {"MALFORMED": 5}
    kind, rejected = body(engine.reply("bad-1"))
    assert kind == "Rejected" and rejected["code"] == "MALFORMED" and "signal_name" in rejected["message"]


def test_commands_for_unknown_or_closed_workflows_are_rejected(engine: InMemoryEngine) -> None:
    assert body(engine.signal(NS, "ghost", "boo"))[1]["code"] == "NOT_FOUND"
    engine.start_workflow(NS, "w", "W", Q)
    assert body(engine.start_workflow(NS, "w", "W", Q))[1]["code"] == "ALREADY_STARTED"
    assert engine.workflow(NS, "ghost") is None  # a rejection leaves no trace in the store
    assert engine.rejections == {"NOT_FOUND": 1, "ALREADY_STARTED": 1}


def test_a_failed_workflow_task_is_retried_transiently(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "broken", "Broken", Q)
    first = workflow_task(engine)
    engine.fail_workflow_task(first, "NameError: oops")

    second = workflow_task(engine)  # the second attempt goes out at once
    assert (second["attempt"], second["scheduled_event_id"], second["started_event_id"]) == (2, 5, 6)
    assert types(second["events"]) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED,
                                       ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_FAILED,
                                       ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED]
    assert [e["event_id"] for e in second["events"]] == [1, 2, 3, 4, 5, 6]
    synthesized = ev.attributes(second["events"][-2])
    assert synthesized["attempt"] == 2 and second["history_length"] == 6
    assert len(engine.history(NS, "broken")) == 4  # transient: nothing written for attempt 2

    engine.fail_workflow_task(second, "NameError: oops")
    assert engine.poll_workflow_task(Q) is None  # the third attempt backs off
    engine.advance(engine.config.workflow_task_retry_initial_ms)
    third = workflow_task(engine)
    assert (third["attempt"], third["scheduled_event_id"]) == (3, 5)
    assert len(engine.history(NS, "broken")) == 4

    engine.complete_workflow_task(third, [("CompleteWorkflowExecutionCommand", {})])
    history = engine.history(NS, "broken")
    assert types(history)[4:] == [ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED, ev.WORKFLOW_TASK_COMPLETED,
                                  ev.WORKFLOW_EXECUTION_COMPLETED]
    assert ev.attributes(history[4])["attempt"] == 3
    assert_replays(engine)


def test_an_unanswered_workflow_task_times_out_and_is_retried(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "slow", "Slow", Q, task_timeout_ms=5_000)
    lost = workflow_task(engine)

    engine.advance(5_000)

    retry = workflow_task(engine)
    assert retry["attempt"] == 2 and ev.WORKFLOW_TASK_TIMED_OUT in types(retry["events"])
    assert body(engine.complete_workflow_task(lost))[1]["code"] == "STALE_TASK"
    assert body(engine.complete_workflow_task(retry))[0] == "Accepted"


def test_a_query_is_answered_by_a_worker_through_the_replies(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "asked", "Asked", Q)
    engine.complete_workflow_task(workflow_task(engine))

    request_id = engine.query(NS, "asked", "status", [payload("verbose")])
    assert engine.reply(request_id) is None
    polled = engine.poll_workflow_task(Q)
    assert polled is not None and polled[0] == "ostinato.task.QueryTask"
    query = polled[1]
    assert (query["query_type"], query["query_args"], query["history_length"]) == ("status", [payload("verbose")], 4)
    engine.answer_query(query, [payload("all good")])

    assert body(engine.reply(request_id)) == ("QueryResult", {"result": [payload("all good")], "failure": None})


def test_cancel_and_terminate(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "polite", "P", Q)
    engine.complete_workflow_task(workflow_task(engine))
    engine.cancel(NS, "polite", "changed my mind")
    task = workflow_task(engine)
    assert ev.WORKFLOW_EXECUTION_CANCEL_REQUESTED in types(task["events"])
    engine.complete_workflow_task(task, [("CancelWorkflowExecutionCommand", {})])
    assert engine.visibility_of(NS, "polite")["status"] == "CANCELED"  # type: ignore[index]

    engine.start_workflow(NS, "rude", "R", Q)
    assert body(engine.terminate(NS, "rude", "enough"))[0] == "Accepted"
    assert engine.visibility_of(NS, "rude")["status"] == "TERMINATED"  # type: ignore[index]
    stale = workflow_task(engine)
    assert body(engine.complete_workflow_task(stale))[1]["code"] == "STALE_TASK"


def test_skip_time_until_idle_jumps_to_the_next_thing_a_worker_must_do(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "patient", "Patient", Q)
    start = engine.clock.now_ms
    engine.complete_workflow_task(workflow_task(engine), [
        ("StartTimerCommand", {"timer_id": "week", "start_to_fire_timeout_ms": 7 * DAY_MS})])

    assert engine.skip_time_until_idle() == start + 7 * DAY_MS
    engine.complete_workflow_task(workflow_task(engine), [("CompleteWorkflowExecutionCommand", {})])

    now = engine.skip_time_until_idle()  # only retention is left: it is not skipped to
    assert now == start + 7 * DAY_MS and engine.describe(NS, "patient") is not None
    assert engine.advance_to_next_timer() == now + engine.config.retention_ms
    assert engine.describe(NS, "patient") is None and engine.advance_to_next_timer() is None


def test_the_fake_clock_only_moves_forward() -> None:
    clock = FakeClock(1_000)
    assert clock.jump(500) == 1_500 and clock.set(2_000) == 2_000 and clock.now_ms == 2_000
    with pytest.raises(ValueError, match="forward"):
        clock.jump(-1)
    with pytest.raises(ValueError, match="forward"):
        clock.set(1_999)
    engine = InMemoryEngine(clock=clock)
    assert engine.clock is clock
    with pytest.raises(ValueError, match="forward"):
        engine.advance(-5)


def test_a_running_activity_learns_of_its_cancellation_from_a_heartbeat(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "cancellable", "C", Q)
    engine.complete_workflow_task(workflow_task(engine), [("ScheduleActivityTaskCommand", ACTIVITY)])
    activity = activity_task(engine)
    engine.start_activity(activity)
    engine.cancel(NS, "cancellable")
    engine.complete_workflow_task(workflow_task(engine), [
        ("RequestCancelActivityTaskCommand", {"scheduled_event_id": activity["scheduled_event_id"]})])

    assert body(engine.heartbeat(activity))[1]["cancel_requested"] is True
    engine.activity_canceled(activity, [payload("stopped")])

    task = workflow_task(engine)
    assert types(task["events"])[-4:-2] == [ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_CANCELED]
    engine.complete_workflow_task(task, [("CancelWorkflowExecutionCommand", {})])
    assert engine.visibility_of(NS, "cancellable")["status"] == "CANCELED"  # type: ignore[index]
    assert_replays(engine)


def test_the_timer_index_follows_the_deadlines_in_state(engine: InMemoryEngine) -> None:
    assert engine.next_deadline_ms is None
    run_id = started_run_id(engine.start_workflow(NS, "timed", "T", Q))
    now = engine.clock.now_ms
    task_timeout = Deadline(now + 10_000, "WORKFLOW_TASK_TIMEOUT", run_id, "", 2, 1)
    assert engine.pending_deadlines() == [(NS, "timed", task_timeout)]
    engine.complete_workflow_task(workflow_task(engine), [
        ("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": 500})])
    assert engine.pending_deadlines() == [(NS, "timed", Deadline(now + 500, "USER_TIMER", run_id, "t"))]
    assert engine.next_deadline_ms == now + 500


def test_a_command_on_the_wrong_shard_is_rejected() -> None:
    engine = InMemoryEngine(shards=2)
    other = on_another_shard(engine, "here", "there")
    record = {"namespace": NS, "workflow_id": other, "request_id": "lost-1", "time_ms": 0, "reply_partition": 0,
              "body": ("ostinato.command.SignalWorkflowExecution", {"signal_name": "s"})}
    engine.submit_raw(NS, "here", codec.encode("ostinato.command.Command", record))  # a producer keyed it wrongly

    engine.run_until_idle()

    assert engine.rejections == {"WRONG_SHARD": 1} and body(engine.reply("lost-1"))[1]["code"] == "WRONG_SHARD"
    with pytest.raises(ValueError, match="at least one shard"):
        InMemoryEngine(shards=0)


def test_a_decision_that_raises_commits_nothing_and_is_retried(engine: InMemoryEngine,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ostinato.streams import engine as engine_module

    real_decide = engine_module.decide

    def crash_after_deciding(*args: Any, **kwargs: Any) -> Any:
        real_decide(*args, **kwargs)  # the workflow copy is changed, then the "transaction" aborts
        raise RuntimeError("bug in a decider")

    engine.start_workflow(NS, "fragile", "F", Q)
    engine.complete_workflow_task(workflow_task(engine))
    before = engine.describe(NS, "fragile")
    monkeypatch.setattr(engine_module, "decide", crash_after_deciding)
    with pytest.raises(RuntimeError, match="bug in a decider"):
        engine.signal(NS, "fragile", "poke", request_id="poke-1")
    assert engine.describe(NS, "fragile") == before and len(engine.history(NS, "fragile")) == 4
    assert engine.pending_commands == 1  # the shard stopped at the command, it did not skip it

    monkeypatch.setattr(engine_module, "decide", real_decide)
    engine.run_until_idle()
    assert types(engine.history(NS, "fragile"))[4] == ev.WORKFLOW_EXECUTION_SIGNALED
    assert body(engine.reply("poke-1"))[0] == "Accepted"


# -- core bugs the engine exposes (streams/ outside the engine; see the report of issue 4 item 5) --------------


def test_a_completed_transient_task_is_written_as_the_worker_saw_it(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "late", "L", Q)
    engine.fail_workflow_task(workflow_task(engine))
    transient = workflow_task(engine)
    engine.advance(3_000)  # the worker takes a while
    engine.complete_workflow_task(transient)

    written = engine.history(NS, "late")[4:6]
    seen = transient["events"][-2:]
    # As the worker saw them, naming the worker that took the task.
    assert [(e["event_id"], e["event_time_ms"], ev.attributes(e)) for e in written] == [
        (e["event_id"], e["event_time_ms"], {**ev.attributes(e), **({"identity": "worker"} if i else {})})
        for i, e in enumerate(seen)]


def test_a_completion_turned_into_a_task_failure_is_answered(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "sloppy", "S", Q)
    timer = ("StartTimerCommand", {"timer_id": "t", "start_to_fire_timeout_ms": 1_000})

    reply = engine.complete_workflow_task(workflow_task(engine), [timer, timer])  # the same timer id twice

    assert ev.WORKFLOW_TASK_FAILED in types(engine.history(NS, "sloppy"))
    assert reply is not None


def test_a_signal_to_a_workflow_failing_its_tasks_keeps_the_attempt(engine: InMemoryEngine) -> None:
    engine.start_workflow(NS, "stuck", "S", Q)
    engine.fail_workflow_task(workflow_task(engine))
    engine.fail_workflow_task(workflow_task(engine))  # attempt 3 now waits out its backoff

    engine.signal(NS, "stuck", "nudge")

    assert workflow_task(engine)["attempt"] == 3
