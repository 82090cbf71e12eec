"""`WorkflowEnvironment.start_local()`: a real local broker and server (what `ostinato dev` runs) for tests that want
the real thing; a workflow and its activity run through a Kafka worker on it, and shutting it down leaves nothing
running."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path

import pytest

from ostinato import activity, workflow
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker


@activity.defn
async def shout(text: str) -> str:
    return text.upper() + "!"


@workflow.defn
class Shouter:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=30))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_start_local_runs_a_workflow_on_a_real_broker_and_stops_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OSTINATO_KAFKA", raising=False)  # its own broker, as a user's test gets

    async def scenario() -> tuple[Path, list[int]]:
        async with await WorkflowEnvironment.start_local() as env:
            assert not env.supports_time_skipping
            home = env.local.home  # type: ignore[attr-defined]
            pids = [int(p.read_text().split()[0]) for p in home.rglob("*.pid")]
            assert pids, "the environment should run a broker and a server"
            async with Worker(env.client, task_queue="local", workflows=[Shouter], activities=[shout]):
                result = await env.client.execute_workflow(Shouter.run, "hello", id="shout-1", task_queue="local")
            assert result == "HELLO!"
            history = await env.client.get_workflow_handle("shout-1").fetch_history()
            assert "ACTIVITY_TASK_COMPLETED" in [e["event_type"] for e in history]
        return home, pids

    home, pids = asyncio.run(scenario())
    assert not home.exists()
    assert not [pid for pid in pids if _alive(pid)]
