"""The SDK's owner reads across ownership changes, against real HTTP servers (aiohttp's test servers) scripted to
answer as a cluster whose owner died or whose shard is moving: redirects to a dead port, 503s with Retry-After,
a server that refuses connections for a while, and reads that run out of time (naming the host that failed)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ostinato.client import Client
from ostinato.exceptions import RPCError
from ostinato.infra.process import free_ports
from ostinato.schemas import codec, wire
from ostinato.sdk._http import HttpService
from ostinato.streams import events as ev
from ostinato.streams.appliers import CURRENT_VERSION

CLUSTER = {"kafka_bootstrap": "127.0.0.1:1", "topic_prefix": "p", "shards": 1, "reply_partitions": 1}
WF = "order-1"
Script = Callable[[web.Request, int], Awaitable[web.StreamResponse]]


def _event(event_type: str, event_id: int, **attrs: Any) -> str:
    event = ev.make_event(event_type, event_id, 1_000, attrs, CURRENT_VERSION[event_type])
    return base64.b64encode(codec.encode(wire.HISTORY_EVENT, event)).decode()


def closed_history(request: web.Request) -> web.Response:
    """The page an owner serves for a run that completed with "done"."""
    result = [{"metadata": {"encoding": b"json/plain"}, "data": b'"done"'}]
    events = [_event("WORKFLOW_EXECUTION_STARTED", 1, workflow_type="T", task_queue="q"),
              _event("WORKFLOW_EXECUTION_COMPLETED", 2, result=result)]
    first = int(request.query.get("next_page_token", "1"))
    return web.json_response({"run_id": "run-1", "events": events[first - 1:], "next_page_token": ""})


def unavailable(retry_after: str = "1") -> web.Response:
    return web.json_response({"code": "shard_unavailable", "message": "shard 0 has no reachable owner right now",
                              "details": {"shard": 0}}, status=503, headers={"Retry-After": retry_after})


def redirect(request: web.Request, base: str) -> web.Response:
    """What a server that does not own the shard answers: a 307 to the owner's read endpoint, marked as a hop."""
    raise web.HTTPTemporaryRedirect(f"{base}{request.raw_path}&owner_hop=1")


class Api:
    """A scripted server: `GET /api/v1/cluster` as any server answers it, every other GET as `script` says (with
    how many requests came before), each request's arrival time kept."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.arrivals: list[float] = []
        self.app = web.Application()
        self.app.router.add_get("/api/v1/cluster", self._cluster)
        self.app.router.add_get("/{tail:.*}", self._read)

    async def _cluster(self, request: web.Request) -> web.Response:
        return web.json_response(CLUSTER)

    async def _read(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.monotonic())
        return await self.script(request, len(self.arrivals) - 1)


async def _answer(response: web.StreamResponse) -> web.StreamResponse:
    return response


def dead_url() -> str:
    return f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there: connections are refused


async def _client(url: str, unavailable_s: float) -> Client:
    service = await HttpService.connect(url, unavailable_timeout=timedelta(seconds=unavailable_s))
    return Client(service)


def test_result_follows_the_redirect_again_after_a_dead_owner_until_the_new_owner_answers() -> None:
    dead = dead_url()

    async def main() -> None:
        async with TestServer(Api(lambda r, n: _answer(closed_history(r))).app) as owner_server:
            owner = str(owner_server.make_url("")).rstrip("/")

            async def entry_script(request: web.Request, n: int) -> web.StreamResponse:
                return redirect(request, dead if n < 3 else owner)  # the owner died; then the shard moved

            entry = Api(entry_script)
            async with TestServer(entry.app) as entry_server:
                client = await _client(str(entry_server.make_url("")), unavailable_s=10)
                try:
                    assert await client.get_workflow_handle(WF).result() == "done"
                finally:
                    await client.service.close()
        assert len(entry.arrivals) == 4  # each retry went back to the server the client was given

    asyncio.run(main())


def test_a_503_is_retried_after_its_retry_after() -> None:
    async def script(request: web.Request, n: int) -> web.StreamResponse:
        return unavailable("1") if n == 0 else closed_history(request)

    api = Api(script)

    async def main() -> None:
        async with TestServer(api.app) as server:
            client = await _client(str(server.make_url("")), unavailable_s=10)
            try:
                events = await client.get_workflow_handle(WF).fetch_history()
            finally:
                await client.service.close()
        assert [e["event_type"] for e in events] == ["WORKFLOW_EXECUTION_STARTED", "WORKFLOW_EXECUTION_COMPLETED"]

    asyncio.run(main())
    assert len(api.arrivals) == 2 and api.arrivals[1] - api.arrivals[0] >= 0.95  # Retry-After: 1, honoured


@contextlib.asynccontextmanager
async def _listening_in_a_second(app: web.Application) -> AsyncIterator[HttpService]:
    """A service whose server refuses connections for a second (restarting), then serves `app` on the same port."""
    port = free_ports(1)[0]
    runner = web.AppRunner(app)
    await runner.setup()

    async def start_later() -> None:
        await asyncio.sleep(1.0)
        await web.TCPSite(runner, "127.0.0.1", port).start()

    later = asyncio.create_task(start_later())
    service = HttpService(f"http://127.0.0.1:{port}", aiohttp.ClientSession(), CLUSTER,
                          unavailable_timeout=timedelta(seconds=10))
    try:
        yield service
    finally:
        await service.close()
        await later
        await runner.cleanup()


def test_a_server_that_refuses_connections_for_a_while_is_retried() -> None:
    api = Api(lambda r, n: _answer(closed_history(r)))

    async def main() -> None:
        async with _listening_in_a_second(api.app) as service:
            started = time.monotonic()
            assert (await service.wait_closed("default", WF, ""))["event_type"] == "WORKFLOW_EXECUTION_COMPLETED"
            assert time.monotonic() - started >= 0.9

    asyncio.run(main())


@pytest.mark.parametrize("fault", ["dead-owner", "dead-server", "moving"])
def test_a_read_that_runs_out_of_time_names_the_host_that_failed(fault: str) -> None:
    dead = dead_url()

    async def script(request: web.Request, n: int) -> web.StreamResponse:
        return unavailable("0") if fault == "moving" else redirect(request, dead)

    async def main() -> tuple[RPCError, float, str]:
        async with TestServer(Api(script).app) as server:
            url = str(server.make_url("")).rstrip("/")
            service = await HttpService.connect(url, unavailable_timeout=timedelta(seconds=1))
            if fault == "dead-server":
                await service.close()
                service = HttpService(dead, aiohttp.ClientSession(), CLUSTER, unavailable_timeout=timedelta(seconds=1))
            started = time.monotonic()
            try:
                with pytest.raises(RPCError) as raised:
                    await Client(service).get_workflow_handle(WF).result()
            finally:
                await service.close()
            return raised.value, time.monotonic() - started, url

    error, took, entry = asyncio.run(main())
    assert 1.0 <= took < 5.0
    message = str(error)
    if fault == "dead-owner":
        assert f"the shard's owner at {dead} (where {entry} redirected the read) did not answer" in message, message
        assert "Cannot connect" in message and error.code == "unavailable"
    elif fault == "dead-server":
        assert f"the server at {dead} did not answer" in message and entry not in message, message
        assert error.code == "unavailable"
    else:
        assert f"the server at {entry} answered: shard 0 has no reachable owner right now (HTTP 503)" in message
        assert (error.status, error.code) == (503, "shard_unavailable")
    assert "no server could serve the read for 1s" in message


def test_other_errors_are_not_retried() -> None:
    async def script(request: web.Request, n: int) -> web.StreamResponse:
        return web.json_response({"code": "internal", "message": "boom", "details": {}}, status=500)

    api = Api(script)

    async def main() -> RPCError:
        async with TestServer(api.app) as server:
            client = await _client(str(server.make_url("")), unavailable_s=10)
            try:
                with pytest.raises(RPCError) as raised:
                    await client.get_workflow_handle(WF).fetch_history()
            finally:
                await client.service.close()
            return raised.value

    error = asyncio.run(main())
    assert error.status == 500 and "boom" in str(error) and len(api.arrivals) == 1


def test_the_redirect_target_keeps_an_encoded_slash() -> None:
    """The owner's redirect carries the raw path; a '/' inside a workflow id must reach the owner as %2F."""
    seen: list[str] = []

    async def owner_script(request: web.Request, n: int) -> web.StreamResponse:
        seen.append(request.raw_path)
        return closed_history(request)

    async def main() -> None:
        async with TestServer(Api(owner_script).app) as owner_server:
            owner = str(owner_server.make_url("")).rstrip("/")
            async with TestServer(Api(lambda r, n: _answer(redirect(r, owner))).app) as entry_server:
                client = await _client(str(entry_server.make_url("")), unavailable_s=10)
                try:
                    assert await client.get_workflow_handle("a/b").result() == "done"
                finally:
                    await client.service.close()

    asyncio.run(main())
    assert seen and all(p.startswith("/api/v1/namespaces/default/workflows/a%2Fb/history?") for p in seen), seen
    assert all(json.dumps(p).count("owner_hop=1") == 1 for p in seen)


def test_a_command_to_a_server_that_refuses_connections_for_a_while_is_sent_once_it_listens() -> None:
    received: list[bytes] = []

    async def commands(request: web.Request) -> web.Response:
        data = await request.read()
        received.append(data)
        _, command = codec.decode(data)
        reply = wire.reply(command["request_id"], command["namespace"], command["workflow_id"],
                           (wire.ACCEPTED, {"run_id": "run-1", "cancel_requested": False}))
        return web.Response(body=codec.encode(wire.REPLY, reply), content_type="application/octet-stream")

    app = web.Application()
    app.router.add_post("/api/v1/commands", commands)

    async def main() -> None:
        async with _listening_in_a_second(app) as service:
            started = time.monotonic()
            await Client(service).get_workflow_handle(WF).signal("go")
            assert time.monotonic() - started >= 0.9 and len(received) == 1

    asyncio.run(main())


def test_a_command_gives_up_on_a_server_that_never_listens_and_says_so() -> None:
    async def main() -> None:
        service = HttpService(dead_url(), aiohttp.ClientSession(), CLUSTER, unavailable_timeout=timedelta(seconds=1))
        try:
            started = time.monotonic()
            with pytest.raises(RPCError, match="did not answer for 1s") as raised:
                await Client(service).get_workflow_handle(WF).signal("go")
            assert raised.value.code == "unavailable" and 0.9 <= time.monotonic() - started < 5
        finally:
            await service.close()

    asyncio.run(main())
