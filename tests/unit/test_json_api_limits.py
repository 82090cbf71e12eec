"""Size refusals of the JSON API, without Kafka: the app as `ostinato server` builds it (its body ceiling and
error middleware), the start route over a fake gateway that records the command and answers as the engine would.
Every refusal is a 413 in the error model stating the limit; anything within the limits goes through."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ostinato.schemas import codec, wire
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.payloads import DEFAULT_HARD_LIMIT
from ostinato.schemas.topics import MAX_RECORD_BYTES
from ostinato.services.frontend import api
from ostinato.services.frontend.http import MAX_BODY_BYTES
from ostinato.services.server import ServerContext, create_app

START = "/api/v1/namespaces/default/workflows"
MIB = 2**20


class FakeGateway:
    """The command path's boundary: keeps what it was asked to send and answers WorkflowStarted."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, command: dict[str, Any], timeout_s: float) -> bytes:
        self.sent.append(command)
        return codec.encode(wire.REPLY, wire.reply(command["request_id"], command["namespace"],
                                                   command["workflow_id"],
                                                   (wire.WORKFLOW_STARTED, {"run_id": "r-1", "started": True})))


def _post(body: bytes) -> tuple[int, dict[str, Any], FakeGateway]:
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    app = create_app(ServerContext("127.0.0.1:1", settings))
    gateway = FakeGateway()
    app[api.GATEWAY] = gateway  # type: ignore[assignment]
    app.router.add_post("/api/v1/namespaces/{namespace}/workflows", api.start)

    async def main() -> tuple[int, dict[str, Any]]:
        async with TestClient(TestServer(app)) as client:
            response = await client.post(START, data=body, headers={"Content-Type": "application/json"})
            return response.status, await response.json()

    status, answer = asyncio.run(main())
    return status, answer, gateway


def _start(**extra: Any) -> bytes:
    return json.dumps({"workflow_id": "big", "workflow_type": "T", "task_queue": "q", **extra},
                      ensure_ascii=False).encode()


def test_a_body_over_the_ceiling_is_a_413_in_the_error_model_stating_the_limit() -> None:
    status, answer, gateway = _post(_start(input=["x" * (MAX_BODY_BYTES + 1)]))
    assert status == 413 and answer["code"] == "too_large", answer
    assert answer["details"]["limit_bytes"] == MAX_BODY_BYTES == MAX_RECORD_BYTES
    assert f"{MAX_BODY_BYTES:,}-byte limit" in answer["message"]
    assert gateway.sent == []


def test_a_body_over_aiohttps_old_1_mib_default_goes_through() -> None:
    value = "x" * (DEFAULT_HARD_LIMIT - 64)  # just under the payload hard limit, as the SDK's Avro path takes it
    status, answer, gateway = _post(_start(input=[value]))
    assert status == 201 and answer["run_id"] == "r-1", answer
    (command,) = gateway.sent
    assert json.loads(command["body"][1]["input"][0]["data"]) == value


@pytest.mark.parametrize(("field", "extra"), [
    ("input[1]", {"input": [1, "x" * DEFAULT_HARD_LIMIT]}),
    ("memo.note", {"memo": {"note": "x" * DEFAULT_HARD_LIMIT}}),
    ("search_attributes.Tag", {"search_attributes": {"Tag": "x" * DEFAULT_HARD_LIMIT}}),
])
def test_a_value_over_the_payload_hard_limit_is_a_413_naming_it(field: str, extra: dict[str, Any]) -> None:
    status, answer, gateway = _post(_start(**extra))
    assert status == 413 and answer["code"] == "too_large", answer
    assert answer["details"]["field"] == field and answer["details"]["limit_bytes"] == DEFAULT_HARD_LIMIT
    assert answer["details"]["size_bytes"] > DEFAULT_HARD_LIMIT
    assert f"{DEFAULT_HARD_LIMIT:,}-byte limit" in answer["message"]
    assert gateway.sent == []


def test_a_command_over_the_record_limit_is_a_413_even_when_each_value_fits() -> None:
    # Non-ASCII text is escaped in a JSON payload (6 bytes per character, 2 in the UTF-8 body), so a 4 MiB command
    # comes from a body well under the ceiling.
    values = ["é" * (DEFAULT_HARD_LIMIT // 6 - 8)] * 3
    body = _start(input=values)
    assert len(body) < MAX_BODY_BYTES
    status, answer, gateway = _post(body)
    assert status == 413 and answer["code"] == "too_large", answer
    assert answer["details"]["limit_bytes"] == MAX_RECORD_BYTES and answer["details"]["size_bytes"] > MAX_RECORD_BYTES
    assert gateway.sent == []


def test_other_routes_refuse_an_oversized_body_the_same_way() -> None:
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    app = create_app(ServerContext("127.0.0.1:1", settings))

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"size": len(await request.read())})

    app.router.add_post("/echo", echo)

    async def main() -> list[tuple[int, Any]]:
        async with TestClient(TestServer(app)) as client:
            out = []
            for size in (2 * MIB, MAX_BODY_BYTES + 1):
                response = await client.post("/echo", data=b"x" * size)
                out.append((response.status, await response.json()))
            return out

    fits, refused = asyncio.run(main())
    assert fits == (200, {"size": 2 * MIB})
    assert refused[0] == 413 and refused[1]["code"] == "too_large"
    assert refused[1]["details"] == {"limit_bytes": MAX_BODY_BYTES, "size_bytes": MAX_BODY_BYTES + 1}


class AwayGateway(FakeGateway):
    """Kafka unreachable: the command could not be handed over."""

    async def send(self, command: dict[str, Any], timeout_s: float) -> bytes:
        from ostinato.services.frontend.gateway import GatewayError

        raise GatewayError("the commands topic cannot be written right now")


def test_a_start_the_gateway_cannot_hand_over_is_a_503_saying_when_to_retry() -> None:
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    app = create_app(ServerContext("127.0.0.1:1", settings))
    app[api.GATEWAY] = AwayGateway()  # type: ignore[assignment]
    app.router.add_post("/api/v1/namespaces/{namespace}/workflows", api.start)

    async def main() -> tuple[int, str | None, dict[str, Any]]:
        async with TestClient(TestServer(app)) as client:
            response = await client.post(START, data=_start(), headers={"Content-Type": "application/json"})
            return response.status, response.headers.get("Retry-After"), await response.json()

    status, retry_after, answer = asyncio.run(main())
    assert (status, retry_after, answer["code"]) == (503, "1", "unavailable")
    assert "cannot be written" in answer["message"]
