"""A task queue becomes part of a Kafka topic name: names Kafka cannot carry are refused at the start, and in
workflow commands, instead of reaching the processor (which would fail to create the topic on every retry)."""

from __future__ import annotations

import pytest

from ostinato.schemas.topics import MAX_TASK_QUEUE_LENGTH, TaskKind, task_queue_problem, task_topic_name
from ostinato.streams.engine import InMemoryEngine


@pytest.mark.parametrize("queue", ["orders", "a.b_c-D9", "x" * MAX_TASK_QUEUE_LENGTH])
def test_kafka_safe_names_are_accepted(queue: str) -> None:
    assert task_queue_problem(queue) is None
    assert len(task_topic_name("p" * 50, queue, TaskKind.ACTIVITY)) <= 249


@pytest.mark.parametrize("queue", ["", "my queue", "a/b", "é", "x" * (MAX_TASK_QUEUE_LENGTH + 1)])
def test_names_kafka_cannot_carry_are_refused(queue: str) -> None:
    assert task_queue_problem(queue)


def test_a_start_on_an_unusable_queue_is_rejected() -> None:
    engine = InMemoryEngine(shards=1)
    reply = engine.start_workflow("default", "wf", "T", "bad queue")
    assert reply is not None and reply["body"][0] == "ostinato.reply.Rejected"
    assert reply["body"][1]["code"] == "INVALID_ARGUMENT" and "topic name" in reply["body"][1]["message"]
    assert engine.workflow("default", "wf") is None


def test_an_activity_on_an_unusable_queue_fails_the_workflow_task() -> None:
    engine = InMemoryEngine(shards=1)
    engine.start_workflow("default", "wf", "T", "q")
    task = engine.poll_workflow_task("q")
    assert task is not None
    engine.complete_workflow_task(task[1], [("ScheduleActivityTaskCommand", {
        "activity_id": "a", "activity_type": "A", "task_queue": "no/slashes", "input": [], "header": {},
        "schedule_to_close_timeout_ms": None, "schedule_to_start_timeout_ms": None,
        "start_to_close_timeout_ms": 1000, "heartbeat_timeout_ms": None, "retry_policy": None})])
    types = [e["event_type"] for e in engine.history("default", "wf")]
    assert "ACTIVITY_TASK_SCHEDULED" not in types
    assert engine.activity_tasks.get("no/slashes") is None
