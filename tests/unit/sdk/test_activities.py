"""Activities through the executor, with real ActivityTask records from the in-memory engine and the executor's
answers fed back to it: results, failures and retries, heartbeats, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Any

import pytest

from ostinato.sdk import activity
from ostinato.sdk.activity_executor import CANCELED, COMPLETED, FAILED, ActivityExecutor
from ostinato.sdk.common import RetryPolicy
from ostinato.sdk.data import DEFAULT
from ostinato.sdk.exceptions import ApplicationError, CancelledError
from ostinato.streams import events as ev
from ostinato.streams.engine import InMemoryEngine

Record = dict[str, Any]
NS, Q = "default", "sdk-activities"
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
WAIT_STEPS = 200  # x 0.01 s: how long a test waits for something that should happen at once


@dataclass
class Order:
    order_id: str
    amount: int


@dataclass
class Receipt:
    order_id: str
    copies: int
    lines: list[str] = field(default_factory=list)


# -- activities ---------------------------------------------------------------------------------------------------

seen: list[Any] = []  # what activities observed, for the test to check; cleared by a fixture


@activity.defn
async def charge(order: Order) -> str:
    seen.append((activity.in_activity(), activity.info()))
    return f"charged {order.order_id}: {order.amount}"


@activity.defn(name="print-receipt")
def print_receipt(order: Order, copies: int) -> Receipt:
    seen.append((activity.in_activity(), activity.info()))
    return Receipt(order.order_id, copies, [f"{order.amount} EUR"] * copies)


@activity.defn
async def refuse(order: Order) -> None:
    raise ApplicationError("card stolen", order.order_id, type="Stolen", non_retryable=True)


@activity.defn
def rate_limited() -> str:
    raise ApplicationError("slow down", type="RateLimited", next_retry_delay=timedelta(seconds=7))


@activity.defn
async def flaky() -> int:
    if activity.info().attempt == 1:
        raise ValueError("connection reset")
    return activity.info().attempt


@activity.defn
async def resumable(total: int) -> int:
    start = activity.info().heartbeat_details[0] if activity.info().heartbeat_details else 0
    seen.append(start)
    for done in range(start, total):
        activity.heartbeat(done + 1)
        await asyncio.sleep(0.01)  # the first heartbeat goes out; the next ones wait (30 s throttle)
        if activity.info().attempt == 1 and done == 2:
            raise ConnectionError("lost the connection half-way")
    return total


@activity.defn
async def watch_async() -> str:
    try:
        for step in range(WAIT_STEPS):
            activity.heartbeat(step)
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        seen.append(activity.is_cancelled())
        raise
    return "never cancelled"


@activity.defn
def watch_sync() -> str:
    try:
        for step in range(WAIT_STEPS):
            activity.heartbeat(step)
            time.sleep(0.01)
    finally:
        seen.append(activity.is_cancelled())
    return "never cancelled"


ALL: list[Callable[..., Any]] = [charge, print_receipt, refuse, rate_limited, flaky, resumable, watch_async, watch_sync]


# -- the harness --------------------------------------------------------------------------------------------------

class Harness:
    """An engine, an executor, and the glue a worker would be: heartbeats and answers go to the engine."""

    def __init__(self) -> None:
        self.engine = InMemoryEngine(shards=2)
        self.executor = ActivityExecutor(ALL, identity="test")
        self.heartbeats: list[list[Any]] = []

    def schedule(self, workflow_id: str, activity_type: str, *args: Any, heartbeat_timeout_ms: int | None = None,
                 retry_policy: RetryPolicy | None = RETRY) -> Record:
        """Start a workflow whose first workflow task schedules the activity; return its started task."""
        self.engine.start_workflow(NS, workflow_id, "Shop", Q)
        polled = self.engine.poll_workflow_task(Q)
        assert polled is not None
        self.engine.complete_workflow_task(polled[1], [("ScheduleActivityTaskCommand", {
            "activity_id": f"{activity_type}-1", "activity_type": activity_type, "input": DEFAULT.encode(args),
            "start_to_close_timeout_ms": 60_000, "heartbeat_timeout_ms": heartbeat_timeout_ms,
            "retry_policy": None if retry_policy is None else retry_policy.to_record()})])
        return self.take()

    def take(self) -> Record:
        task = self.engine.poll_activity_task(Q)
        assert task is not None, "no activity task"
        reply = self.engine.start_activity(task, identity="test")
        assert reply is not None and reply["body"][0] == "ostinato.reply.Accepted"
        return task

    async def heartbeat(self, task: Record, details: list[Record]) -> bool:
        self.heartbeats.append(DEFAULT.decode(details))
        reply = self.engine.heartbeat(task, details, identity="test")
        assert reply is not None
        name, body = reply["body"]
        return name == "ostinato.reply.Accepted" and bool(body["cancel_requested"])

    async def run(self, task: Record, heartbeat: Callable[[Record, list[Record]], Awaitable[bool]] | None = None,
                  ) -> tuple[str, Record]:
        """Execute the task and answer the engine with the executor's command."""
        name, body = await self.executor.execute(task, heartbeat or self.heartbeat)
        assert (body["scheduled_event_id"], body["attempt"]) == (task["scheduled_event_id"], task["attempt"])
        reply = self.engine._answer(task, name.rpartition(".")[2], body, "test")
        assert reply is not None and reply["body"][0] == "ostinato.reply.Accepted", reply
        return name, body

    def request_cancel(self, task: Record) -> None:
        """The workflow asks its activity to stop (a cancelled workflow's next task does so)."""
        self.engine.cancel(NS, task["workflow_id"])
        polled = self.engine.poll_workflow_task(Q)
        assert polled is not None
        self.engine.complete_workflow_task(polled[1], [
            ("RequestCancelActivityTaskCommand", {"scheduled_event_id": task["scheduled_event_id"]})])

    def outcome(self, workflow_id: str) -> tuple[str, Record]:
        """The activity's closing event in the workflow's history."""
        closing = (ev.ACTIVITY_TASK_COMPLETED, ev.ACTIVITY_TASK_FAILED, ev.ACTIVITY_TASK_CANCELED)
        events = [e for e in self.engine.history(NS, workflow_id) if e["event_type"] in closing]
        assert len(events) == 1, [e["event_type"] for e in self.engine.history(NS, workflow_id)]
        return events[0]["event_type"], ev.attributes(events[0])


@pytest.fixture
def h() -> Harness:
    seen.clear()
    return Harness()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(WAIT_STEPS):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


# -- tests --------------------------------------------------------------------------------------------------------

def test_the_decorator_records_a_definition() -> None:
    assert activity.definition_of(charge) == activity.ActivityDefinition("charge", charge, True)
    assert activity.definition_of(print_receipt) == activity.ActivityDefinition("print-receipt", print_receipt, False)

    class Shop:
        @activity.defn
        async def pack(self, order: Order) -> str:
            return order.order_id

    shop = Shop()
    bound = activity.definition_of(shop.pack)
    assert (bound.name, bound.fn, bound.is_async) == ("pack", shop.pack, True)

    with pytest.raises(TypeError, match="not an activity"):
        activity.definition_of(len)
    with pytest.raises(ValueError, match="two activities"):
        ActivityExecutor([charge, charge])


def test_the_api_outside_an_activity_says_so() -> None:
    assert activity.in_activity() is False
    for call in (activity.info, activity.heartbeat, activity.is_cancelled):
        with pytest.raises(RuntimeError, match="not in an activity"):
            call()


def test_an_async_activity_returns_a_value(h: Harness) -> None:
    task = h.schedule("order-1", "charge", Order("o-1", 42))
    name, body = asyncio.run(h.run(task))
    assert name == COMPLETED and DEFAULT.decode_one(body["result"]) == "charged o-1: 42"
    assert h.outcome("order-1")[0] == ev.ACTIVITY_TASK_COMPLETED

    in_activity, info = seen[0]
    assert in_activity is True
    assert (info.activity_id, info.activity_type, info.attempt) == ("charge-1", "charge", 1)
    assert (info.namespace, info.workflow_id, info.run_id) == (NS, "order-1", task["run_id"])
    assert (info.workflow_type, info.task_queue, info.heartbeat_details) == ("Shop", Q, ())
    assert info.scheduled_time.tzinfo is UTC and info.scheduled_time == info.current_attempt_scheduled_time
    assert info.start_to_close_timeout == timedelta(minutes=1) and info.heartbeat_timeout is None


def test_a_sync_activity_runs_in_a_thread_with_its_context(h: Harness) -> None:
    task = h.schedule("order-2", "print-receipt", Order("o-2", 7), 2, heartbeat_timeout_ms=5_000)
    name, body = asyncio.run(h.run(task))
    assert name == COMPLETED
    assert DEFAULT.decode_one(body["result"], Receipt) == Receipt("o-2", 2, ["7 EUR", "7 EUR"])
    assert h.outcome("order-2")[1]["result"] == body["result"]
    in_activity, info = seen[0]
    assert in_activity is True and info.activity_type == "print-receipt"
    assert info.heartbeat_timeout == timedelta(seconds=5)


def test_a_non_retryable_application_error_fails_the_activity_at_once(h: Harness) -> None:
    task = h.schedule("order-3", "refuse", Order("o-3", 1))
    name, body = asyncio.run(h.run(task))
    assert name == FAILED
    failure = body["failure"]
    assert (failure["message"], failure["type"], failure["non_retryable"]) == ("card stolen", "Stolen", True)
    assert DEFAULT.decode(failure["details"]) == ["o-3"]
    kind, attrs = h.outcome("order-3")
    assert (kind, attrs["retry_state"]) == (ev.ACTIVITY_TASK_FAILED, "NON_RETRYABLE_FAILURE")
    assert h.engine.poll_activity_task(Q) is None


def test_next_retry_delay_replaces_the_backoff(h: Harness) -> None:
    task = h.schedule("order-4", "rate_limited")
    name, body = asyncio.run(h.run(task))
    assert name == FAILED and body["failure"]["next_retry_delay_ms"] == 7_000
    h.engine.advance(6_999)
    assert h.engine.poll_activity_task(Q) is None
    h.engine.advance(1)
    assert h.take()["attempt"] == 2


def test_a_plain_exception_is_retried_by_the_policy(h: Harness) -> None:
    first = h.schedule("order-5", "flaky")
    name, body = asyncio.run(h.run(first))
    assert name == FAILED
    assert (body["failure"]["type"], body["failure"]["message"]) == ("ValueError", "connection reset")
    assert "flaky" in body["failure"]["stack_trace"]
    h.engine.advance(1_000)

    second = h.take()
    name, body = asyncio.run(h.run(second))
    assert name == COMPLETED and DEFAULT.decode_one(body["result"]) == 2
    started = next(e for e in h.engine.history(NS, "order-5") if e["event_type"] == ev.ACTIVITY_TASK_STARTED)
    assert ev.attributes(started)["last_failure"]["type"] == "ValueError"


def test_a_retry_resumes_from_the_last_heartbeat_details(h: Harness) -> None:
    first = h.schedule("order-6", "resumable", 5)
    name, _ = asyncio.run(h.run(first))
    assert name == FAILED
    # Heartbeat 1 went out at once; 2 and 3 waited for the throttle, and 3 was sent before the failure.
    assert h.heartbeats == [[1], [3]]
    h.engine.advance(1_000)

    second = h.take()
    assert DEFAULT.decode(second["heartbeat_details"]) == [3]
    name, body = asyncio.run(h.run(second))
    assert name == COMPLETED and DEFAULT.decode_one(body["result"]) == 5
    assert seen == [0, 3]


def test_heartbeats_are_throttled_one_at_a_time_and_the_latest_goes_out(h: Harness) -> None:
    sent: list[list[Any]] = []
    gate, done = asyncio.Event(), asyncio.Event()

    @activity.defn
    async def chatty(count: int) -> None:
        for i in range(count):
            activity.heartbeat(i)
            await asyncio.sleep(0)
        await done.wait()

    async def slow_heartbeat(task: Record, details: list[Record]) -> bool:
        sent.append(DEFAULT.decode(details))
        await gate.wait()  # the first heartbeat stays in flight while the activity records the others
        return False

    async def scenario() -> tuple[str, Record]:
        task = h.schedule("order-7", "chatty", 10, heartbeat_timeout_ms=50)
        running = asyncio.create_task(ActivityExecutor([chatty]).execute(task, slow_heartbeat))
        await until(lambda: len(sent) == 1)
        gate.set()
        await until(lambda: len(sent) == 2)  # the latest details follow once the throttle allows
        done.set()
        return await running

    name, _ = asyncio.run(scenario())
    assert name == COMPLETED and sent == [[0], [9]]


def test_cancellation_reaches_a_heartbeating_async_activity(h: Harness) -> None:
    task = h.schedule("order-8", "watch_async", heartbeat_timeout_ms=100)

    async def scenario() -> tuple[str, Record]:
        running = asyncio.create_task(h.run(task))
        await until(lambda: bool(h.heartbeats))
        h.request_cancel(task)
        return await running

    name, body = asyncio.run(scenario())
    assert name == CANCELED and seen == [True]
    kind, attrs = h.outcome("order-8")
    assert kind == ev.ACTIVITY_TASK_CANCELED
    assert DEFAULT.decode(attrs["details"]) == DEFAULT.decode(body["details"]) and body["details"]


def test_cancellation_reaches_a_heartbeating_sync_activity(h: Harness) -> None:
    task = h.schedule("order-9", "watch_sync", heartbeat_timeout_ms=100)

    async def scenario() -> tuple[str, Record]:
        running = asyncio.create_task(h.run(task))
        await until(lambda: bool(h.heartbeats))
        h.request_cancel(task)
        return await running

    name, body = asyncio.run(scenario())
    assert name == CANCELED and seen == [True]
    assert h.outcome("order-9")[0] == ev.ACTIVITY_TASK_CANCELED
    assert DEFAULT.decode(body["details"])[0] > 0  # the heartbeat that raised was recorded first


def test_an_unknown_activity_type_fails_without_retry(h: Harness) -> None:
    task = h.schedule("order-10", "teleport")
    name, body = asyncio.run(h.run(task))
    assert name == FAILED
    failure = body["failure"]
    assert (failure["type"], failure["non_retryable"]) == ("ActivityNotRegistered", True)
    assert "'teleport'" in failure["message"] and "charge" in failure["message"] and "'test'" in failure["message"]
    assert h.outcome("order-10")[1]["retry_state"] == "NON_RETRYABLE_FAILURE"


def test_worker_shutdown_fails_running_activities_for_another_worker_to_retry(h: Harness) -> None:
    task = h.schedule("order-11", "watch_sync", heartbeat_timeout_ms=100)

    async def scenario() -> tuple[str, Record]:
        running = asyncio.create_task(h.run(task))
        await until(lambda: bool(h.heartbeats))
        h.executor.cancel_all()
        answer = await running
        await h.executor.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            await h.executor.execute(task, h.heartbeat)
        return answer

    name, body = asyncio.run(scenario())
    assert name == FAILED and body["failure"]["type"] == "WorkerShutdown" and not body["failure"]["non_retryable"]
    h.engine.advance(1_000)
    assert h.take()["attempt"] == 2


def test_a_sync_activity_raising_cancelled_error_unasked_is_a_failure(h: Harness) -> None:
    @activity.defn
    def gives_up() -> None:
        raise CancelledError("giving up")

    executor = ActivityExecutor([gives_up])
    task = h.schedule("order-12", "gives_up")
    name, body = asyncio.run(executor.execute(task, h.heartbeat))
    assert name == FAILED and body["failure"]["kind"] == "CANCELED"
