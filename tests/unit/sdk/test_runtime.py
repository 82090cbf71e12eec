"""The workflow runtime on the in-memory engine: activations, replay after eviction, task failures, guards."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from ostinato import activity, workflow
from ostinato.exceptions import WorkflowFailureError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.unit.sdk.support import run_async

Q = "rt"



@activity.defn
async def echo(value: str) -> str:
    return value


@workflow.defn
class Collector:
    """Collects signals until it has three, with a timer racing a condition in between."""

    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.query
    def seen(self) -> list[str]:
        return list(self.items)

    @workflow.run
    async def run(self) -> list[str]:
        first = await workflow.execute_activity(echo, "start", start_to_close_timeout=timedelta(seconds=5))
        try:
            await workflow.wait_condition(lambda: len(self.items) >= 1, timeout=timedelta(hours=1))
        except TimeoutError:
            return ["timed out"]
        await workflow.wait_condition(lambda: len(self.items) >= 3)
        return [first, *self.items, str(workflow.uuid4())[:8], workflow.now().isoformat()]


@workflow.defn(name="Buggy")
class BuggyV1:
    @workflow.run
    async def run(self) -> str:
        raise TypeError("a bug, not a business failure")


@workflow.defn(name="Buggy")
class BuggyV2:
    @workflow.run
    async def run(self) -> str:
        return "fixed"


def _types(history: list[dict[str, Any]]) -> list[str]:
    return [e["event_type"] for e in history]


@run_async
async def test_signals_during_a_task_reach_the_next_activation_and_replay_matches() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Collector], activities=[echo]) as worker:
        handle = await env.client.start_workflow(Collector.run, id="c-1", task_queue=Q)
        await env.sleep(timedelta(seconds=1))  # the workflow now waits, with its one-hour timeout running
        await handle.signal(Collector.add, "a")
        await handle.signal(Collector.add, "b")
        assert worker.workflow_handler is not None
        worker.workflow_handler.cache.clear()  # the next task replays everything from history
        await handle.signal(Collector.add, "c")
        result = await handle.result()
    assert result[:4] == ["start", "a", "b", "c"]
    history = await handle.fetch_history()
    assert _types(history).count("WORKFLOW_EXECUTION_SIGNALED") == 3
    assert "TIMER_CANCELED" in _types(history)  # the one-hour timeout lost the race to the signal
    assert worker.workflow_handler.replays >= 2


@run_async
async def test_the_timeout_path_skips_an_hour_of_virtual_time() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Collector], activities=[echo]):
        before = env.now()
        assert await env.client.execute_workflow(Collector.run, id="c-2", task_queue=Q) == ["timed out"]
        assert env.now() - before >= timedelta(hours=1)


@run_async
async def test_replays_are_identical_whatever_the_cache_does() -> None:
    """uuid4 and now come from the run: a workflow evicted after every task returns what a cached one does."""
    results = []
    for evict in (False, True):
        async with await WorkflowEnvironment.start_time_skipping() as env, \
                Worker(env.client, task_queue=Q, workflows=[Collector], activities=[echo],
                          max_cached_workflows=0 if evict else 10):
            handle = await env.client.start_workflow(Collector.run, id="same", task_queue=Q,
                                                     request_id="fixed")
            for item in "xyz":
                await handle.signal(Collector.add, item)
            results.append(await handle.result())
    assert results[0] == results[1]


@run_async
async def test_a_bug_fails_the_task_not_the_workflow_until_fixed_code_runs() -> None:
    env = await WorkflowEnvironment.start_time_skipping()
    async with Worker(env.client, task_queue=Q, workflows=[BuggyV1]):
        handle = await env.client.start_workflow("Buggy", id="bug", task_queue=Q)
        await env.sleep(timedelta(seconds=30))
    history = await handle.fetch_history()
    assert "WORKFLOW_TASK_FAILED" in _types(history)
    assert "WORKFLOW_EXECUTION_FAILED" not in _types(history)
    failed = next(e for e in history if e["event_type"] == "WORKFLOW_TASK_FAILED")["attributes"][1]
    assert "TypeError" in failed["failure"]["type"] or "a bug" in failed["failure"]["message"]
    async with Worker(env.client, task_queue=Q, workflows=[BuggyV2]):  # the fixed code is deployed
        assert await handle.result() == "fixed"


@run_async
async def test_unknown_workflow_types_fail_the_task_with_a_clear_cause() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Collector], activities=[echo]):
        handle = await env.client.start_workflow("Nobody", id="n-1", task_queue=Q)
        await env.sleep(1)
        failed = [e for e in await handle.fetch_history() if e["event_type"] == "WORKFLOW_TASK_FAILED"]
        assert failed and failed[0]["attributes"][1]["cause"] == "UNKNOWN_WORKFLOW_TYPE"
        assert "Nobody" in failed[0]["attributes"][1]["failure"]["message"]


@workflow.defn
class ReadsTheClock:
    @workflow.run
    async def run(self, what: str) -> Any:
        import random
        import time
        import uuid

        if what == "swallow":
            with contextlib.suppress(Exception):  # swallowing the error must not help
                time.time()
            return "swallowed"
        return {"time": time.time, "random": random.random, "uuid": uuid.uuid4}[what]()


@pytest.mark.parametrize("what", ["time", "random", "uuid", "swallow"])
@run_async
async def test_non_deterministic_calls_fail_the_task_with_advice(what: str) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[ReadsTheClock]):
        handle = await env.client.start_workflow(ReadsTheClock.run, what, id=f"clock-{what}", task_queue=Q)
        await env.sleep(1)
        history = await handle.fetch_history()
    failed = [e["attributes"][1] for e in history if e["event_type"] == "WORKFLOW_TASK_FAILED"]
    assert failed and failed[0]["cause"] == "NONDETERMINISM"
    assert "workflow." in failed[0]["failure"]["message"]  # says what to use instead
    assert "WORKFLOW_EXECUTION_COMPLETED" not in _types(history)


@run_async
async def test_a_failed_workflow_reports_its_cause_to_the_client() -> None:
    @workflow.defn(name="Refuses")
    class Refuses:
        @workflow.run
        async def run(self) -> None:
            from ostinato.exceptions import ApplicationError

            raise ApplicationError("no stock", "sku-1", type="OutOfStock")

    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Refuses]):
        with pytest.raises(WorkflowFailureError) as raised:
            await env.client.execute_workflow("Refuses", id="r-1", task_queue=Q)
    cause = raised.value.cause
    assert cause is not None and getattr(cause, "type", None) == "OutOfStock" and list(cause.details) == ["sku-1"]


@workflow.defn
class Chatty:
    """Sleeps in a loop, growing its history past a (small) warning threshold."""

    @workflow.run
    async def run(self, rounds: int) -> bool:
        for _ in range(rounds):
            await workflow.sleep(1)
        return workflow.continue_as_new_suggested()


@run_async
async def test_a_long_history_gets_a_continue_as_new_hint(caplog: pytest.LogCaptureFixture) -> None:
    from ostinato.streams.config import Config, Limits

    env = await WorkflowEnvironment.start_time_skipping()
    env.engine.config = Config(limits=Limits(history_warn_events=20))
    async with Worker(env.client, task_queue=Q, workflows=[Chatty]):
        assert await env.client.execute_workflow(Chatty.run, 10, id="chatty", task_queue=Q) is True
    hints = [r for r in caplog.records if "continue_as_new" in r.getMessage()]
    assert len(hints) == 1 and "past the warning threshold" in hints[0].getMessage()


@workflow.defn
class Listener:
    def __init__(self) -> None:
        self.heard: list[str] = []

    @workflow.signal
    def hear(self, word: str) -> None:
        self.heard.append(word)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: bool(self.heard))
        return self.heard


@workflow.defn
class Talker:
    @workflow.run
    async def run(self, listener_id: str) -> str:
        workflow.upsert_memo({"talked_to": listener_id})
        workflow.upsert_search_attributes({"Stage": "talking"})
        await workflow.get_external_workflow_handle(listener_id).signal(Listener.hear, "hello")
        try:
            await workflow.get_external_workflow_handle("nobody-home").signal("hear", "hi")
        except Exception as error:  # noqa: BLE001 - the failure itself is the result under test
            return type(error).__name__
        return "delivered to nobody?"


@run_async
async def test_signals_to_other_workflows_and_upserts() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Listener, Talker]):
        listener = await env.client.start_workflow(Listener.run, id="listener", task_queue=Q)
        assert await env.client.execute_workflow(Talker.run, "listener", id="talker", task_queue=Q) == \
            "ApplicationError"
        assert await listener.result() == ["hello"]
        talker = env.client.get_workflow_handle("talker")
        types = _types(await talker.fetch_history())
        assert {"UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", "WORKFLOW_PROPERTIES_MODIFIED",
                "EXTERNAL_WORKFLOW_EXECUTION_SIGNALED", "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED"} <= set(types)
        described = (await talker.describe()).raw
        assert set(described["memo"]) == {"talked_to"} and set(described["search_attributes"]) == {"Stage"}
