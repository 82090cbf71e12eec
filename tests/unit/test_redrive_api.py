"""The quarantine as users reach it, without Kafka: `POST .../workflows/{id}/redrive` of the JSON API over a gateway
that hands commands to the in-memory engine, the SDK's `describe().quarantined` and `redrive()`, and the CLI's
`ostinato workflow describe` and `ostinato workflow redrive`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner

from ostinato.schemas import codec, wire
from ostinato.services.cli import workflow as workflow_cli
from ostinato.services.frontend import api
from ostinato.services.frontend.http import jsonable
from ostinato.streams.engine import InMemoryEngine
from ostinato.testing import WorkflowEnvironment
from tests.unit.shard_support import NS, Q, task_of
from tests.unit.test_poison_proof import CoreBug, break_decider

Record = dict[str, Any]


class EngineGateway:
    """The command path's boundary, played by the in-memory engine: the command is processed, its reply returned."""

    def __init__(self, engine: InMemoryEngine) -> None:
        self.engine = engine

    async def send(self, command: Record, timeout_s: float) -> bytes:
        self.engine.submit({**command, "reply_partition": 0})
        self.engine.run_until_idle()
        reply = self.engine.reply(command["request_id"])
        assert reply is not None
        return codec.encode(wire.REPLY, reply)


def quarantined_signal(engine: InMemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with one quarantined signal (the in-memory engine raises once, then quarantines)."""
    engine.start_workflow(NS, "order-7", "Order", Q)
    task_of(engine, Q)
    break_decider(monkeypatch, "SignalWorkflowExecution")
    with pytest.raises(CoreBug):
        engine.signal(NS, "order-7", "shipped", request_id="sig-1")
    engine.run_until_idle()


def post_redrive(engine: InMemoryEngine, workflow_id: str, body: Record) -> tuple[int, Record]:
    app = web.Application()
    app[api.GATEWAY] = EngineGateway(engine)  # type: ignore[assignment]
    app.router.add_post("/api/v1/namespaces/{namespace}/workflows/{workflow_id}/redrive", api.redrive)

    async def main() -> tuple[int, Record]:
        async with TestClient(TestServer(app)) as client:
            response = await client.post(f"/api/v1/namespaces/{NS}/workflows/{workflow_id}/redrive", json=body)
            return response.status, await response.json()

    return asyncio.run(main())


def test_the_json_api_redrives_and_answers_one_outcome_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = InMemoryEngine(shards=1)
    quarantined_signal(engine, monkeypatch)

    status, answer = post_redrive(engine, "order-7", {"reason": "still broken"})
    assert status == 200 and [(o["request_id"], o["outcome"]) for o in answer["outcomes"]] == [("sig-1", "FAILED")]

    monkeypatch.undo()
    status, answer = post_redrive(engine, "order-7", {"reason": "fixed"})
    assert status == 200, answer
    assert answer["outcomes"] == [{"request_id": "sig-1", "command_type": "SignalWorkflowExecution",
                                   "outcome": "APPLIED", "message": ""}]
    assert engine.history(NS, "order-7")[-1]["event_type"] == "WORKFLOW_EXECUTION_SIGNALED"

    status, answer = post_redrive(engine, "nobody", {})
    assert status == 404 and answer["code"] == "not_found"


def test_the_sdk_describes_the_quarantine_and_redrives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with await WorkflowEnvironment.start_time_skipping() as env:
            engine: InMemoryEngine = env.engine  # type: ignore[attr-defined]
            quarantined_signal(engine, monkeypatch)
            handle = env.client.get_workflow_handle("order-7")
            described = await handle.describe()
            [kept] = described.quarantined
            assert (kept["command_type"], kept["request_id"], kept["code"], kept["error_type"]) == (
                "SignalWorkflowExecution", "sig-1", "INTERNAL", "CoreBug")
            monkeypatch.undo()
            assert [o["outcome"] for o in await handle.redrive("fixed")] == ["APPLIED"]
            assert (await handle.describe()).quarantined == []

    asyncio.run(main())


def test_the_cli_shows_the_quarantine_and_redrives(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = InMemoryEngine(shards=1)
    quarantined_signal(engine, monkeypatch)
    calls: list[tuple[str, str]] = []

    def call(server: str, method: str, path: str, body: Any = None, timeout: float = 70.0) -> Any:
        calls.append((method, path))
        if method == "GET":
            return jsonable(engine.describe(NS, "order-7"))
        return post_redrive(engine, "order-7", body)[1]

    monkeypatch.setattr(workflow_cli, "_call", call)
    runner = CliRunner()

    described = runner.invoke(workflow_cli.app, ["describe", "order-7"])
    assert described.exit_code == 0, described.output
    assert "quarantined commands" in described.output and "SignalWorkflowExecution sig-1 (INTERNAL" in described.output
    assert "ostinato workflow redrive order-7" in described.output

    still = runner.invoke(workflow_cli.app, ["redrive", "order-7"])
    assert still.exit_code == 1 and "FAILED   SignalWorkflowExecution sig-1: CoreBug" in still.output

    monkeypatch.undo()  # the upgrade that fixes the bug (it drops the fake `_call` too: set it again)
    monkeypatch.setattr(workflow_cli, "_call", call)
    fixed = runner.invoke(workflow_cli.app, ["redrive", "order-7", "--output", "json"])
    assert fixed.exit_code == 0, fixed.output
    assert [o["outcome"] for o in json.loads(fixed.output)["outcomes"]] == ["APPLIED"]
    assert ("POST", "/api/v1/namespaces/default/workflows/order-7/redrive") in calls
