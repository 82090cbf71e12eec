"""`GET .../history?filter=close` (Temporal's CLOSE_EVENT filter), without Kafka: the read API over a shard's store,
the "processor" committing and notifying as it does after each transaction. The long-poll ignores commits that do
not close the run, and answers the closing event alone once one does."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ostinato.schemas.keys import run_key
from ostinato.sdk._http import HttpService
from ostinato.services.frontend.reads import ReadContext, add_routes
from ostinato.services.history.shard import Shard
from ostinato.services.history.store import Family, MemoryStore, ShardStore
from ostinato.services.history.waiters import HistoryWaiters
from ostinato.streams.engine import DEFAULT_CONFIG
from ostinato.streams.model import decode_current
from tests.unit.shard_support import NOW, command, commit, signal_command, start_command, topology

NS, WF = "default", "closes"
ME = "me"
HISTORY = f"/api/v1/namespaces/{NS}/workflows/{WF}/history"


class Source:
    def __init__(self, store: ShardStore) -> None:
        self.store = store

    def store_of(self, shard: int) -> ShardStore | None:
        return self.store

    def settled(self) -> bool:
        return True

    def mark(self) -> tuple[int, ...]:
        return (0,)

    def landed(self, mark: tuple[int, ...]) -> bool:
        return True


def land(shard: Shard, waiters: HistoryWaiters) -> None:
    """What the processor does after a commit: write the batch to the store, then wake its readers."""
    sealed = shard.seal()
    shard.land(sealed, {})
    waiters.notify(sealed.grown_runs())


class Owners:
    def owner(self, shard: int) -> dict[str, object] | None:
        return {"shard": shard, "owner_id": ME, "read_endpoint": "http://127.0.0.1:2"}

    def owners(self) -> dict[int, dict[str, object]]:
        return {0: {"shard": 0, "owner_id": ME, "read_endpoint": "http://127.0.0.1:2"}}


def test_a_close_filtered_long_poll_answers_the_closing_event_alone_once_the_run_closes() -> None:
    shard = Shard(0, MemoryStore(), topology(1), DEFAULT_CONFIG)
    shard.process(start_command(WF), 0, NOW)
    commit(shard)
    pointer = shard.store.get(Family.STATE, f"{NS}/{WF}".encode())
    assert pointer is not None
    key = run_key(NS, WF, decode_current(pointer).run_id).encode()
    waiters = HistoryWaiters()
    app = web.Application()
    add_routes(app, ReadContext(1, Source(shard.store), Owners(), {ME}, waiters))

    def step(record: bytes, offset: int) -> None:
        """What the processor does: decide, commit, write the store, wake the readers of the runs that grew."""
        shard.process(record, offset, NOW + offset)
        land(shard, waiters)

    async def main() -> None:
        waiters.bind(asyncio.get_running_loop())
        async with TestClient(TestServer(app)) as client:
            async def get(query: str) -> tuple[int, dict[str, Any]]:
                response = await client.get(f"{HISTORY}?{query}")
                return response.status, await response.json()

            assert await get("filter=close") == (200, {"run_id": key.decode().rsplit("/", 1)[1], "events": [],
                                                       "next_page_token": ""})
            assert (await get("filter=everything"))[0] == 400
            poll = asyncio.create_task(get("filter=close&wait_ms=10000"))
            await asyncio.sleep(0.1)
            step(signal_command(WF, "nudge"), 1)  # the run grows but stays open: the poll must not answer
            await asyncio.sleep(0.2)
            assert not poll.done()
            step(command("TerminateWorkflowExecution", {"reason": "enough", "details": []}, workflow_id=WF,
                         request_id="terminate"), 2)
            status, page = await asyncio.wait_for(poll, 5)
            assert status == 200 and [e["event_type"] for e in page["events"]] == ["WORKFLOW_EXECUTION_TERMINATED"]
            assert page["events"][0]["attributes"]["reason"] == "enough"
            status, everything = await get("")
            assert everything["events"][-1] == page["events"][0]  # the last event of the whole history
            assert (await get("filter=close"))[1]["events"] == page["events"]  # no wait needed once closed

    asyncio.run(main())


class CountingStore:
    """A shard store that counts the reads of run states (what a woken long-poll does first)."""

    def __init__(self, store: ShardStore) -> None:
        self.store, self.state_reads = store, 0

    def get(self, family: Family, key: bytes) -> bytes | None:
        self.state_reads += family == Family.STATE
        return self.store.get(family, key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_the_sdk_result_wait_is_one_long_poll_woken_only_by_the_close() -> None:
    """`HttpService.wait_closed` (what `WorkflowHandle.result()` waits with) against the read API above: a run that is
    still open costs one request, held until the close (not a look first, then the long-poll), and the steps of the
    run before its close do not wake it (each wake read and decoded the run's state in the processor's process)."""
    shard = Shard(0, MemoryStore(), topology(1), DEFAULT_CONFIG)
    shard.process(start_command(WF), 0, NOW)
    commit(shard)
    store = CountingStore(shard.store)
    waiters = HistoryWaiters()
    seen: list[dict[str, str]] = []

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(dict(request.query))
        return await handler(request)

    app = web.Application(middlewares=[count])
    add_routes(app, ReadContext(1, Source(store), Owners(), {ME}, waiters))  # type: ignore[arg-type]

    async def main() -> None:
        waiters.bind(asyncio.get_running_loop())
        async with TestServer(app) as server, aiohttp.ClientSession() as session:
            cluster = {"kafka_bootstrap": "127.0.0.1:1", "topic_prefix": "p", "shards": 1, "reply_partitions": 1}
            service = HttpService(str(server.make_url("")), session, cluster)
            wait = asyncio.create_task(service.wait_closed(NS, WF, ""))
            await asyncio.sleep(0.3)
            assert not wait.done() and len(seen) == 1  # held by the owner, not answered and asked again
            reads = store.state_reads
            for offset in (1, 2, 3):  # the run grows three times and stays open
                shard.process(signal_command(WF, f"nudge-{offset}"), offset, NOW + offset)
                land(shard, waiters)
            await asyncio.sleep(0.3)
            assert not wait.done() and store.state_reads == reads  # not woken: nothing read again
            shard.process(command("TerminateWorkflowExecution", {"reason": "enough", "details": []}, workflow_id=WF,
                                  request_id="terminate"), 4, NOW + 4)
            land(shard, waiters)
            closing = await asyncio.wait_for(wait, 5)
        assert closing["event_type"] == "WORKFLOW_EXECUTION_TERMINATED"
        assert len(seen) == 1 and seen[0]["filter"] == "close" and int(seen[0]["wait_ms"]) > 0

    asyncio.run(main())
