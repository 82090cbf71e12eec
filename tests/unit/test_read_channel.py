"""The owner-read channel between a server and its processor processes (`read_channel.py`), over a real
WebSocket on a Unix socket: reads held concurrently are answered out of order, a process that goes away answers
every held read with a 503 and the next read opens the channel again, a read the server gives up on is cancelled
in the process, and one loop turn's answers travel as one message. The owner reads themselves, relayed, answer
as they do served directly: `test_owner_reads_moving.py` runs every case both ways."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ostinato.services.frontend import read_channel
from ostinato.services.frontend.read_channel import Batcher
from ostinato.services.frontend.relay import ProcessRelay

ME = "processor-1"


class Owner:
    """A processor process's read server: `/held/{name}` answers when `release(name)` is called."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []
        self.app = web.Application()
        self.app.router.add_get("/held/{name}", self.held)
        self.app.router.add_get(read_channel.PATH, read_channel.serve)

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def held(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            await self.gate(name).wait()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        return web.json_response({"name": name, "query": dict(request.query)}, headers={"Retry-After": "7"})


@asynccontextmanager
async def serving(owner: Owner, socket: Path) -> AsyncIterator[web.AppRunner]:
    runner = web.AppRunner(owner.app, shutdown_timeout=0.5)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    try:
        yield runner
    finally:
        await runner.cleanup()


def front_of(relay: ProcessRelay) -> web.Application:
    """The server: relays `/held/{name}` to the process."""
    async def held(request: web.Request) -> web.Response:
        return await relay.forward(request, ME)

    front = web.Application()
    front.router.add_get("/held/{name}", held)
    front.router.add_get("/other/{name}", held)  # not served by the process
    return front


Scenario = Callable[[TestClient[Any, Any], Owner, ProcessRelay, Path], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario, read_timeout_s: float = 30.0) -> None:
    async def main() -> None:
        socket = tmp_path / "owner.sock"
        owner = Owner()
        relay = ProcessRelay({ME: str(socket)}, read_timeout_s=read_timeout_s)
        try:
            async with TestClient(TestServer(front_of(relay))) as client:
                await scenario(client, owner, relay, socket)
        finally:
            await relay.close()

    asyncio.run(main())


def test_held_reads_are_answered_in_the_order_they_finish_with_status_headers_and_body(tmp_path: Path) -> None:
    async def scenario(client: TestClient[Any, Any], owner: Owner, relay: ProcessRelay, socket: Path) -> None:
        async with serving(owner, socket):
            first = asyncio.create_task(client.get("/held/a?x=1&x=2"))
            second = asyncio.create_task(client.get("/held/b"))
            await asyncio.sleep(0.2)
            owner.gate("b").set()
            answer = await asyncio.wait_for(second, 5)
            assert answer.status == 200 and (await answer.json()) == {"name": "b", "query": {}}
            assert answer.headers["Retry-After"] == "7" and answer.content_type == "application/json"
            assert not first.done()  # one held read does not hold up another on the same channel
            owner.gate("a").set()
            answer = await asyncio.wait_for(first, 5)
            assert (await answer.json()) == {"name": "a", "query": {"x": "1"}}

    run(tmp_path, scenario)


def test_a_process_that_goes_away_answers_its_held_reads_503_and_the_next_read_reopens(tmp_path: Path) -> None:
    async def scenario(client: TestClient[Any, Any], owner: Owner, relay: ProcessRelay, socket: Path) -> None:
        async with serving(owner, socket):
            held = asyncio.create_task(client.get("/held/a"))
            await asyncio.sleep(0.2)
        answer = await asyncio.wait_for(held, 5)  # the process stopped (or died) with the read held
        body = await answer.json()
        assert answer.status == 503 and body["code"] == "shard_unavailable", body
        assert answer.headers["Retry-After"] == "1"
        down = await client.get("/held/a")  # nobody listens on the socket: still a 503, not a 500
        assert down.status == 503
        async with serving(owner, socket):  # the process is back: the channel opens again
            owner.gate("a").set()
            again = await asyncio.wait_for(client.get("/held/a"), 5)
            assert again.status == 200

    run(tmp_path, scenario)


def test_a_read_the_server_gives_up_on_is_cancelled_in_the_process(tmp_path: Path) -> None:
    async def scenario(client: TestClient[Any, Any], owner: Owner, relay: ProcessRelay, socket: Path) -> None:
        async with serving(owner, socket):
            answer = await client.get("/held/slow")
            assert answer.status == 503  # not answered within the relay's timeout
            for _ in range(50):
                if owner.cancelled:
                    break
                await asyncio.sleep(0.05)
            assert owner.cancelled == ["slow"]  # the process let go of it instead of holding it to its end

    run(tmp_path, scenario, read_timeout_s=0.3)


def test_a_route_the_process_does_not_serve_is_a_404(tmp_path: Path) -> None:
    async def scenario(client: TestClient[Any, Any], owner: Owner, relay: ProcessRelay, socket: Path) -> None:
        async with serving(owner, socket):
            answer = await client.get("/other/x")
            assert answer.status == 404 and (await answer.json())["code"] == "not_found"

    run(tmp_path, scenario)


def test_what_one_loop_turn_adds_is_sent_as_one_batch() -> None:
    async def main() -> list[list[int]]:
        sent: list[list[int]] = []

        async def send(items: list[int]) -> None:
            sent.append(items)

        batcher = Batcher(send)
        for i in range(3):
            batcher.add(i)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        batcher.add(3)
        await asyncio.sleep(0.01)
        return sent

    assert asyncio.run(main()) == [[0, 1, 2], [3]]
