"""The Replayer under Temporal's names: `WorkflowHistory.from_json`, `handle.fetch_history()`, `replay_workflow` and
`replay_workflows` with `raise_on_replay_failure`, on a compatible history and a non-deterministic one (the checked-in
`hello.json` and `hello_legacy.json`, see test_replay.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ostinato.client import WorkflowHistory as ClientWorkflowHistory
from ostinato.exceptions import NondeterminismError
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    Worker,
    WorkflowHistory,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowReplayResult,
    WorkflowReplayResults,
)
from tests.e2e.sdk_scenarios.workflows import Hello, greet

HISTORIES = Path(__file__).parent / "histories"


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{name}-id", (HISTORIES / f"{name}.json").read_text())


def test_replay_workflow_passes_a_compatible_history_and_raises_on_a_non_deterministic_one() -> None:
    replayer = Replayer(workflows=[Hello])
    good = asyncio.run(replayer.replay_workflow(_history("hello")))
    assert isinstance(good, WorkflowReplayResult) and good.replay_failure is None
    assert good.history.workflow_id == "hello-id"
    with pytest.raises(NondeterminismError, match="TIMER_STARTED"):
        asyncio.run(replayer.replay_workflow(_history("hello_legacy")))
    kept = asyncio.run(replayer.replay_workflow(_history("hello_legacy"), raise_on_replay_failure=False))
    assert isinstance(kept.replay_failure, NondeterminismError)


def test_replay_workflows_collects_the_failures_by_run_id_or_raises_the_first() -> None:
    replayer = Replayer(workflows=[Hello])
    histories = [_history("hello"), _history("hello_legacy")]
    results = asyncio.run(replayer.replay_workflows(histories, raise_on_replay_failure=False))
    assert isinstance(results, WorkflowReplayResults)
    legacy = histories[1]
    assert list(results.replay_failures) == [legacy.run_id or legacy.workflow_id]
    assert isinstance(results.replay_failures[legacy.run_id or legacy.workflow_id], NondeterminismError)
    with pytest.raises(NondeterminismError):
        asyncio.run(replayer.replay_workflows(histories))
    assert asyncio.run(replayer.replay_workflows(histories[:1])).replay_failures == {}


def test_workflow_replay_iterator_gives_each_result_without_raising() -> None:
    async def results() -> list[WorkflowReplayResult]:
        async with Replayer(workflows=[Hello]).workflow_replay_iterator(
                [_history("hello"), _history("hello_legacy")]) as replayed:
            return [result async for result in replayed]

    good, legacy = asyncio.run(results())
    assert good.replay_failure is None and isinstance(legacy.replay_failure, NondeterminismError)


def test_from_json_takes_a_bare_event_list_and_round_trips_to_json() -> None:
    history = _history("hello")
    again = WorkflowHistory.from_json("other", history.to_json())
    assert list(again) == list(history) and again.events == history.events and again.run_id == history.run_id
    assert WorkflowHistory.from_json("bare", [])[:] == []
    with pytest.raises(ValueError, match="events"):
        WorkflowHistory.from_json("bad", {"no": "events"})


class _Counting(Interceptor):
    runs = 0

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput,
                                   ) -> type[WorkflowInboundInterceptor] | None:
        counter = self

        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                counter.runs += 1
                return await super().execute_workflow(input)

        return Inbound


def test_fetch_history_gives_a_workflow_history_the_replayer_takes() -> None:
    async def scenario() -> None:
        async with await WorkflowEnvironment.start_time_skipping() as env:
            async with Worker(env.client, task_queue="q", workflows=[Hello], activities=[greet]):
                handle = await env.client.start_workflow(Hello.run, "Ada", id="hello-1", task_queue="q")
                await handle.result()
            history = await handle.fetch_history()
        assert ClientWorkflowHistory is WorkflowHistory and isinstance(history, WorkflowHistory)
        assert history.workflow_id == "hello-1" and history.run_id == handle.run_id
        assert history[0]["event_type"] == "WORKFLOW_EXECUTION_STARTED"  # still the list of events
        counting = _Counting()
        result = await Replayer(workflows=[Hello], interceptors=[counting]).replay_workflow(history)
        assert result.replay_failure is None and counting.runs == 1  # interceptors run on replay too

    asyncio.run(scenario())
