"""Eager activity dispatch (issue 15): a workflow task completion that asks for it gets its activities back in the
reply, already started for the completing worker, instead of on the activity task topic. No Kafka."""

from __future__ import annotations

from typing import Any

from ostinato.streams import events as ev
from ostinato.streams.engine import InMemoryEngine
from tests.unit.core.test_engine import NS, Q, activity_task, assert_replays, body, payload, types, workflow_task

Record = dict[str, Any]


def schedule(activity_id: str, eager: bool, **options: Any) -> tuple[str, Record]:
    return ("ScheduleActivityTaskCommand", {
        "activity_id": activity_id, "activity_type": "charge", "input": [payload(activity_id)],
        "start_to_close_timeout_ms": 5_000, "request_eager_execution": eager, **options})


def started(engine: InMemoryEngine, workflow_id: str) -> Record:
    assert body(engine.start_workflow(NS, workflow_id, "Order", Q))[0] == "WorkflowStarted"
    return workflow_task(engine)


def test_eager_activities_come_back_in_the_reply_already_started() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "eager-1")
    reply = engine.complete_workflow_task(task, [schedule("a", True), schedule("b", True)], identity="w1")
    assert body(reply)[0] == "Accepted"
    tasks = reply["activity_tasks"]  # type: ignore[index]
    assert [t["activity_id"] for t in tasks] == ["a", "b"]
    assert tasks[0]["input"] == [payload("a")] and tasks[0]["attempt"] == 1 and tasks[0]["task_queue"] == Q
    assert engine.poll_activity_task(Q) is None  # nothing went through the activity topic
    run = engine.workflow(NS, "eager-1").runs[task["run_id"]]  # type: ignore[union-attr]
    assert all(a.started_time_ms is not None and a.started_identity == "w1" for a in run.activities.values())
    # No RecordActivityTaskStarted needed: the worker answers straight away, and the workflow carries on.
    assert body(engine.complete_activity(tasks[0], [payload("A")], identity="w1"))[0] == "Accepted"
    history = engine.history(NS, "eager-1")
    # the next workflow task is scheduled only: its STARTED is written with its answer
    assert types(history) == [ev.WORKFLOW_EXECUTION_STARTED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED,
                              ev.WORKFLOW_TASK_COMPLETED, ev.ACTIVITY_TASK_SCHEDULED, ev.ACTIVITY_TASK_SCHEDULED,
                              ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED]
    assert ev.attributes(history[2])["identity"] == "w1"  # the workflow task's STARTED names the worker that took it
    assert ev.attributes(history[-3])["identity"] == "w1"
    assert_replays(engine)


def test_without_the_flag_activities_go_to_the_topic() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "plain-1")
    reply = engine.complete_workflow_task(task, [schedule("a", False), schedule("b", True)])
    assert body(reply)[0] == "Accepted" and [t["activity_id"] for t in reply["activity_tasks"]] == ["b"]  # type: ignore[index]
    assert activity_task(engine)["activity_id"] == "a"
    assert engine.poll_activity_task(Q) is None


def test_a_worker_that_dies_after_the_reply_is_covered_by_the_start_to_close_timeout() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "lost-1")
    retry = {"initial_interval_ms": 1_000, "backoff_coefficient": 2.0, "maximum_interval_ms": None,
             "maximum_attempts": 3, "non_retryable_error_types": []}
    [eager] = engine.complete_workflow_task(task, [schedule("a", True, retry_policy=retry)])["activity_tasks"]  # type: ignore[index]
    # The worker dies with the task: nothing arrives. After start-to-close, the attempt times out and the retry
    # goes through the activity topic like any other.
    engine.advance(5_000)
    engine.advance(1_000)
    retried = activity_task(engine)
    assert (retried["activity_id"], retried["attempt"]) == ("a", 2)
    assert body(engine.complete_activity(eager, [payload("late")]))[1]["code"] == "STALE_TASK"
    assert body(engine.start_activity(retried))[0] == "Accepted"
    assert body(engine.complete_activity(retried, [payload("A")]))[0] == "Accepted"
    assert ev.ACTIVITY_TASK_COMPLETED in types(engine.history(NS, "lost-1"))
    assert_replays(engine)


def test_a_completion_nobody_waits_on_gets_no_eager_activities() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "fire-and-forget")
    command = {"namespace": NS, "workflow_id": "fire-and-forget", "run_id": task["run_id"], "request_id": "r",
               "identity": "w", "time_ms": 0, "reply_partition": None,
               "body": ("ostinato.command.RespondWorkflowTaskCompleted", {
                   "scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"],
                   "commands": [("ostinato.command." + schedule("a", True)[0], schedule("a", True)[1])]})}
    engine.submit(command)
    engine.run_until_idle()
    assert activity_task(engine)["activity_id"] == "a"  # no reply to carry it: the topic does


def test_an_activity_answer_can_take_the_next_workflow_task_with_it() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "sticky-1")
    [eager] = engine.complete_workflow_task(task, [schedule("a", True)], identity="w1")["activity_tasks"]  # type: ignore[index]
    answer = {"scheduled_event_id": eager["scheduled_event_id"], "attempt": 1, "result": [payload("A")],
              "request_eager_workflow_task": True}
    reply = engine.respond(eager, "RespondActivityTaskCompleted", answer, identity="w1")
    assert reply is not None and body(reply)[0] == "Accepted"
    next_task = reply["workflow_task"]
    assert next_task is not None and engine.poll_workflow_task(Q) is None  # not on the topic
    assert [e["event_type"] for e in next_task["events"]][-4:] == [
        ev.ACTIVITY_TASK_STARTED, ev.ACTIVITY_TASK_COMPLETED, ev.WORKFLOW_TASK_SCHEDULED, ev.WORKFLOW_TASK_STARTED]
    done = engine.complete_workflow_task(next_task, [("CompleteWorkflowExecutionCommand", {"result": []})])
    assert body(done)[0] == "Accepted"
    assert types(engine.history(NS, "sticky-1"))[-1] == ev.WORKFLOW_EXECUTION_COMPLETED
    assert_replays(engine)


def test_without_asking_the_next_workflow_task_goes_to_the_topic() -> None:
    engine = InMemoryEngine(shards=2)
    task = started(engine, "plain-2")
    [eager] = engine.complete_workflow_task(task, [schedule("a", True)])["activity_tasks"]  # type: ignore[index]
    reply = engine.complete_activity(eager, [payload("A")])
    assert reply is not None and reply["workflow_task"] is None
    assert workflow_task(engine)["run_id"] == task["run_id"]
