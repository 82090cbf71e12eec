"""The test programs drive real workflows to the end on the in-memory engine (the core's deciders, no Kafka), so a
Kafka acceptance test that fails with them points at the shell, not at the programs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ostinato.streams import events as ev
from ostinato.streams.engine import InMemoryEngine
from tests.tools.programs import (
    ACTIVITY_RETRY_POLICY,
    UnknownTypeError,
    decide_task,
    from_payload,
    run_activity,
    to_payload,
)

Record = dict[str, Any]
NS, Q = "default", "tools"
Activity = Callable[[Record], list[Record]]


def drive(engine: InMemoryEngine, activity: Activity = run_activity, max_steps: int = 10_000) -> None:
    """Play the worker until no task is queued and only housekeeping deadlines are left."""
    for _ in range(max_steps):
        polled = engine.poll_workflow_task(Q)
        if polled is not None:
            name, task = polled
            assert name == "ostinato.task.WorkflowTask"
            engine.complete_workflow_task(task, decide_task(task))
            continue
        activity_task = engine.poll_activity_task(Q)
        if activity_task is not None:
            engine.start_activity(activity_task)
            try:
                engine.complete_activity(activity_task, activity(activity_task))
            except RuntimeError as exc:
                engine.fail_activity(activity_task, {"message": str(exc), "type": "Injected"})
            continue
        if engine.skip_time_until_idle() and not engine.has_queued_tasks():
            return
    raise AssertionError(f"still running after {max_steps} steps")


def closed(engine: InMemoryEngine, workflow_id: str) -> tuple[str, Any]:
    """(status, first result value) of a closed workflow."""
    visibility = engine.visibility_of(NS, workflow_id)
    assert visibility is not None, f"{workflow_id} never started"
    last = engine.history(NS, workflow_id)[-1]
    result = ev.attributes(last).get("result") or []
    return visibility["status"], from_payload(result[0]) if result else None


def test_hello_workflows_complete_with_the_greeting() -> None:
    engine = InMemoryEngine(shards=4)
    for i in range(20):
        engine.start_workflow(NS, f"hello-{i}", "hello", Q, [to_payload(f"user-{i}")])

    drive(engine)

    assert [closed(engine, f"hello-{i}") for i in range(20)] == [("COMPLETED", f"Hello, user-{i}") for i in range(20)]
    assert not engine.rejections


def test_hello_without_input_greets_the_world() -> None:
    engine = InMemoryEngine(shards=1)
    engine.start_workflow(NS, "anon", "hello", Q)
    drive(engine)
    assert closed(engine, "anon") == ("COMPLETED", "Hello, world")


def test_sleep_workflows_complete_with_their_fire_time() -> None:
    engine = InMemoryEngine(shards=4)
    started: dict[str, int] = {}
    for i in range(20):
        started[f"sleep-{i}"] = engine.clock.now_ms
        engine.start_workflow(NS, f"sleep-{i}", "sleep", Q, [to_payload({"sleep_ms": 500 * (i + 1)})])
    engine.start_workflow(NS, "sleep-default", "sleep", Q)
    default_start = engine.clock.now_ms

    drive(engine)

    for i in range(20):
        assert closed(engine, f"sleep-{i}") == ("COMPLETED", started[f"sleep-{i}"] + 500 * (i + 1))
    assert closed(engine, "sleep-default") == ("COMPLETED", default_start + 1_000)
    assert not engine.rejections


def test_chain_workflows_run_three_steps_in_order() -> None:
    engine = InMemoryEngine(shards=4)
    for i in range(5):
        engine.start_workflow(NS, f"chain-{i}", "chain", Q, [to_payload(f"c{i}")])

    drive(engine)

    for i in range(5):
        assert closed(engine, f"chain-{i}") == ("COMPLETED", f"c{i}.1.2.3")
        scheduled = [ev.attributes(e)["activity_id"] for e in engine.history(NS, f"chain-{i}")
                     if e["event_type"] == ev.ACTIVITY_TASK_SCHEDULED]
        assert scheduled == ["step-1", "step-2", "step-3"]
    assert not engine.rejections


def test_failed_attempts_are_retried_until_one_succeeds() -> None:
    engine = InMemoryEngine(shards=2)
    attempts: list[int] = []

    def flaky(task: Record) -> list[Record]:
        attempts.append(task["attempt"])
        if task["attempt"] < 4:
            raise RuntimeError("not yet")
        return run_activity(task)

    engine.start_workflow(NS, "flaky", "hello", Q, [to_payload("again")])
    drive(engine, flaky)

    assert attempts == [1, 2, 3, 4]
    assert closed(engine, "flaky") == ("COMPLETED", "Hello, again")


def test_an_activity_that_always_fails_fails_the_workflow() -> None:
    engine = InMemoryEngine(shards=2)
    attempts: list[int] = []

    def broken(task: Record) -> list[Record]:
        attempts.append(task["attempt"])
        raise RuntimeError("broken for good")

    engine.start_workflow(NS, "doomed", "chain", Q)
    drive(engine, broken)

    status, _ = closed(engine, "doomed")
    assert status == "FAILED"
    failure = ev.attributes(engine.history(NS, "doomed")[-1])["failure"]
    assert (failure["type"], failure["cause"]["message"]) == ("ActivityError", "broken for good")
    assert attempts == list(range(1, ACTIVITY_RETRY_POLICY["maximum_attempts"] + 1))
    assert sum(e["event_type"] == ev.ACTIVITY_TASK_FAILED for e in engine.history(NS, "doomed")) == 1


def test_a_cancel_request_cancels_the_workflow() -> None:
    engine = InMemoryEngine(shards=1)
    engine.start_workflow(NS, "nap", "sleep", Q, [to_payload({"sleep_ms": 60_000})])
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], decide_task(polled[1]))

    engine.cancel(NS, "nap", "changed my mind")
    drive(engine)

    assert closed(engine, "nap")[0] == "CANCELED"


def test_a_task_with_nothing_new_gets_no_commands() -> None:
    engine = InMemoryEngine(shards=1)
    engine.start_workflow(NS, "waiting", "hello", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], decide_task(polled[1]))

    engine.signal(NS, "waiting", "poke")  # wakes the workflow while its activity is still queued
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    assert ev.ACTIVITY_TASK_SCHEDULED in [e["event_type"] for e in polled[1]["events"]]
    assert decide_task(polled[1]) == []
    engine.complete_workflow_task(polled[1], [])

    drive(engine)
    assert closed(engine, "waiting") == ("COMPLETED", "Hello, world")


def test_unknown_types_raise() -> None:
    with pytest.raises(UnknownTypeError, match="nope"):
        decide_task({"workflow_type": "nope", "events": []})
    with pytest.raises(UnknownTypeError, match="nope"):
        run_activity({"activity_type": "nope", "input": []})
