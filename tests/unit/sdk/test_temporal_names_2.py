"""More of Temporal's names in the SDK (issue 17), used as Temporal's samples and docs use them: `workflow.memo()` /
`memo_value()`, `activity.is_worker_shutdown()` / `wait_for_worker_shutdown()`, and the worker's log line for a
workflow task that fails."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from ostinato import workflow
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker

Q = "names-2"


def run_async(fn: Any) -> Any:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


# -- workflow.memo / memo_value ------------------------------------------------------------------------------------

@dataclass
class Owner:
    name: str
    team: str


@workflow.defn
class Memos:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> dict[str, Any]:
        seen: dict[str, Any] = {"at_start": workflow.memo()}
        owner = workflow.memo_value("owner", type_hint=Owner)
        assert isinstance(owner, Owner)
        seen["owner_team"] = owner.team
        seen["missing"] = workflow.memo_value("missing", "fallback")
        seen["missing_typed"] = workflow.memo_value("missing", None, type_hint=Owner)
        try:
            workflow.memo_value("missing")
        except KeyError:
            seen["raised"] = True
        workflow.upsert_memo({"stage": "waiting", "priority": None})
        seen["after_upsert"] = workflow.memo()
        await workflow.wait_condition(lambda: self.go)
        workflow.upsert_memo({"stage": "done"})
        seen["at_end"] = workflow.memo()
        return seen


@pytest.mark.parametrize("cached", [1000, 0], ids=["sticky", "replayed"])
@run_async
async def test_memo_is_the_runs_memo_kept_current_by_upsert_memo(cached: int) -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env, \
            Worker(env.client, task_queue=Q, workflows=[Memos], max_cached_workflows=cached):
        handle = await env.client.start_workflow(
            Memos.run, id=f"memo-{cached}", task_queue=Q,
            memo={"owner": Owner("ada", "payments"), "priority": 3})
        await env.sleep(timedelta(seconds=1))
        await handle.signal(Memos.proceed)
        seen = await handle.result()
    owner = {"name": "ada", "team": "payments"}
    assert seen == {
        "at_start": {"owner": owner, "priority": 3}, "owner_team": "payments", "missing": "fallback",
        "missing_typed": None, "raised": True,
        "after_upsert": {"owner": owner, "stage": "waiting"},
        "at_end": {"owner": owner, "stage": "done"}}


def test_memo_is_workflow_only() -> None:
    with pytest.raises(RuntimeError, match="not in a workflow"):
        workflow.memo()
    with pytest.raises(RuntimeError, match="not in a workflow"):
        workflow.memo_value("owner", "x")
