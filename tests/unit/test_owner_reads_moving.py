"""Owner reads when the shard moves mid-request, without Kafka: the read API over a RocksStore the "processor"
closes from another thread, as it does when the group revokes a shard. Every answer is a redirect to the new
owner or a 503 with Retry-After, never a 500. Each case runs twice: served by the owner itself (a processor
thread), and relayed by a server in front to the owner's "process" over the owner-read channel (a WebSocket on a
Unix socket, `read_channel.py`), where it must answer the same."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ostinato.schemas.keys import run_key
from ostinato.services.frontend import api, read_channel, reads, schedules_api
from ostinato.services.frontend.reads import HOP, ReadContext, add_routes
from ostinato.services.frontend.relay import ProcessRelay
from ostinato.services.history.shard import Shard
from ostinato.services.history.store import Family, MemoryStore, RocksStore, ShardStore
from ostinato.services.history.waiters import HistoryWaiters, closed_key
from ostinato.streams.engine import DEFAULT_CONFIG
from ostinato.streams.model import decode_current
from tests.unit.shard_support import NOW, commit, start_command, topology

NS, WF = "default", "waits"
ME, NEW_OWNER = "me", "http://127.0.0.1:1"
BASE = f"/api/v1/namespaces/{NS}/workflows/{WF}"


class Source:
    """The processor's `store_of`: the store while this process owns the shard, None once it released it."""

    def __init__(self, store: ShardStore) -> None:
        self.store: ShardStore | None = store
        self.in_doubt = False  # `Processor.settled` is False: a transaction failed and none committed since
        self.begun = self.landed_count = 0  # `Processor.mark` / `landed`: transactions begun, and landed or aborted

    def store_of(self, shard: int) -> ShardStore | None:
        return self.store

    def settled(self) -> bool:
        return not self.in_doubt

    def mark(self) -> tuple[int, ...]:
        return (self.begun,)

    def landed(self, mark: tuple[int, ...]) -> bool:
        return self.landed_count >= mark[0]


class Owners:
    """The ownership table: who `<p>.cluster` says owns the shard, and where it serves reads."""

    def __init__(self) -> None:
        self.owner_id, self.endpoint = ME, "http://127.0.0.1:2"

    def owner(self, shard: int) -> dict[str, object] | None:
        return {"shard": shard, "owner_id": self.owner_id, "read_endpoint": self.endpoint}

    def owners(self) -> dict[int, dict[str, object]]:
        return {0: {"shard": 0, "owner_id": self.owner_id, "read_endpoint": self.endpoint}}

    def moved(self) -> None:
        self.owner_id, self.endpoint = "another", NEW_OWNER


def _started(workflow_id: str) -> dict[Family, dict[bytes, bytes]]:
    """What a transaction starting `workflow_id` writes to the shard's store."""
    shard = Shard(0, MemoryStore(), topology(1), DEFAULT_CONFIG)
    shard.process(start_command(workflow_id), 0, NOW)
    commit(shard)
    return {f: dict(shard.store.scan(f)) for f in Family}


def _store_with_an_open_run(path: Path) -> tuple[RocksStore, str, int]:
    """A RocksStore holding one started run (whose next event will not come), its run id and history length."""
    store = RocksStore(path)
    store.write(_started(WF))
    pointer = store.get(Family.STATE, f"{NS}/{WF}".encode())
    assert pointer is not None
    run_id = decode_current(pointer).run_id
    events = len(list(store.scan(Family.HISTORY, prefix=(run_key(NS, WF, run_id) + "/").encode())))
    return store, run_id, events


Scenario = Callable[[TestClient[Any, Any], Source, Owners, RocksStore, HistoryWaiters, str, int], Awaitable[None]]


RELAYED = pytest.mark.parametrize("relayed", [False, True], ids=["owner", "relayed"])


def _serve(tmp_path: Path, scenario: Scenario, relayed: bool) -> None:
    """Run `scenario` against the owner's read API; when `relayed`, through a server in front that relays every
    owner read to it over the channel (the owner in a processor process of its own)."""
    store, run_id, events = _store_with_an_open_run(tmp_path / "shard-0")
    source, owners, waiters = Source(store), Owners(), HistoryWaiters()
    owner = web.Application()
    add_routes(owner, ReadContext(1, source, owners, {ME}, waiters))
    api.install_owner_reads(owner)
    schedules_api.install_owner_reads(owner)
    owner.router.add_get(read_channel.PATH, read_channel.serve)

    async def main() -> None:
        waiters.bind(asyncio.get_running_loop())
        if not relayed:
            async with TestClient(TestServer(owner)) as client:
                await scenario(client, source, owners, store, waiters, run_id, events)
            return
        socket = str(tmp_path / "owner.sock")
        runner = web.AppRunner(owner)
        await runner.setup()
        await web.UnixSite(runner, socket).start()
        relay = ProcessRelay({ME: socket})
        front = web.Application()
        add_routes(front, ReadContext(1, None, owners, {ME}, None, relay))
        api.install_owner_reads(front)
        schedules_api.install_owner_reads(front)
        try:
            async with TestClient(TestServer(front)) as client:
                await scenario(client, source, owners, store, waiters, run_id, events)
        finally:
            await relay.close()
            await runner.cleanup()

    try:
        asyncio.run(main())
    finally:
        store.close()


async def _close_from_the_processor_thread(source: Source, store: RocksStore, *, release: bool,
                                          waiters: HistoryWaiters | None = None) -> None:
    """What `Processor._close_shards` does on revocation: forget the shard (unless `release` is False: a reader
    that already took the store races the close), close its store, then wake the held reads (`on_release`, when
    `waiters` are given), on the processor's own thread."""
    def close() -> None:
        if release:
            source.store = None
        store.close()
        if waiters is not None:
            waiters.release()

    thread = threading.Thread(target=close)
    thread.start()
    await asyncio.get_running_loop().run_in_executor(None, thread.join)


async def _expect_503(response: Any) -> None:
    body = await response.json()
    assert response.status == 503, body
    assert body["code"] == "shard_unavailable" and body["details"] == {"shard": 0}
    assert response.headers["Retry-After"] == "1"


@pytest.mark.parametrize("suffix", ["", "/history", "/pending", "/result?timeout_ms=100"])
@RELAYED
def test_a_read_whose_store_closed_under_it_answers_503_with_retry_after(tmp_path: Path, relayed: bool,
                                                                        suffix: str) -> None:
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        assert (await client.get(BASE + suffix)).status in (200, 504)  # served while owned
        await _close_from_the_processor_thread(source, store, release=False)  # the reader still holds the store
        await _expect_503(await client.get(BASE + suffix))

    _serve(tmp_path, scenario, relayed)


@pytest.mark.parametrize("suffix", ["", "/history", "/pending", "/result?timeout_ms=100"])
@RELAYED
def test_a_read_whose_store_closed_under_it_redirects_once_the_new_owner_is_known(tmp_path: Path, relayed: bool,
                                                                                  suffix: str) -> None:
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        await _close_from_the_processor_thread(source, store, release=False)
        owners.moved()
        moved = await client.get(BASE + suffix, allow_redirects=False)
        assert moved.status == 307, await moved.text()
        assert moved.headers["Location"].startswith(NEW_OWNER + BASE + suffix)
        assert moved.headers["Location"].endswith(f"{HOP}=1")
        # Already redirected once: ownership is moving, so a 503 to retry rather than a second hop.
        hop = "&" if "?" in suffix else "?"
        await _expect_503(await client.get(f"{BASE}{suffix}{hop}{HOP}=1", allow_redirects=False))

    _serve(tmp_path, scenario, relayed)


@pytest.mark.parametrize("path", ["/history?wait_ms=10000&next_page_token={next}", "/result?timeout_ms=10000"])
@pytest.mark.parametrize("how", ["announced-then-released", "released", "closed-under-the-reader"])
@RELAYED
def test_a_long_poll_held_while_its_shard_moves_answers_a_redirect_or_503(tmp_path: Path, relayed: bool,
                                                                          path: str, how: str) -> None:
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        poll = asyncio.create_task(client.get(BASE + path.format(next=events + 1), allow_redirects=False))
        await asyncio.sleep(0.3)
        assert not poll.done()  # caught up: the read waits for the next event
        if how == "announced-then-released":  # the new owner's claim was read before this one let go
            owners.moved()
        await _close_from_the_processor_thread(source, store, release=how != "closed-under-the-reader",
                                               waiters=waiters)
        if how == "closed-under-the-reader":
            key = run_key(NS, WF, run_id).encode()
            waiters.notify([key, closed_key(key)])  # woken (growth, or a result by its close): reads the closed store
        answer = await asyncio.wait_for(poll, 5)  # the processor's release wakes it: it finds its shard gone
        if how == "announced-then-released":
            assert answer.status == 307 and answer.headers["Location"].startswith(NEW_OWNER + BASE)
        else:
            await _expect_503(answer)

    _serve(tmp_path, scenario, relayed)


@pytest.mark.parametrize("suffix", ["", "/history", "/pending", "/result?timeout_ms=100"])
@RELAYED
def test_an_owner_whose_transactions_fail_does_not_say_not_found(tmp_path: Path, relayed: bool,
                                                                 suffix: str) -> None:
    """A processor whose transactions fail may have lost the shard without knowing (a broker failover): the new
    owner may have started the run this store lacks, so absence is a 503 to retry, not a 404 (the chaos suite's
    broker kill had result() raise "no workflow" for runs just started). What it holds is still served."""
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        unknown = BASE.replace(WF, "started-elsewhere") + suffix
        assert (await client.get(unknown)).status == 404
        source.in_doubt = True
        response = await client.get(unknown)
        body = await response.json()
        assert response.status == 503 and body["code"] == "shard_unsettled", body
        assert response.headers["Retry-After"] == "1"
        assert (await client.get(BASE + suffix)).status in (200, 504)  # a run it holds is still served
        source.in_doubt = False
        assert (await client.get(unknown)).status == 404

    _serve(tmp_path, scenario, relayed)


@pytest.mark.parametrize("suffix", ["", "/history", "/pending", "/result?timeout_ms=100"])
@RELAYED
def test_a_read_waits_for_the_transactions_begun_before_it_to_land(tmp_path: Path, relayed: bool,
                                                                   suffix: str) -> None:
    """Read your writes: the client was told of a start whose transaction committed, but the processor thread has
    not written it to the store yet (it decides the next batch while commits return: pipelined transactions). The
    read waits for that landing instead of answering 404 (CI saw result() of a just-started run say "no
    workflow"); with nothing in flight, a read does not wait."""
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        just = BASE.replace(WF, "just-started") + suffix
        source.begun = 1  # committed and replied to, not landed
        read = asyncio.create_task(client.get(just))
        await asyncio.sleep(0.3)
        assert not read.done()  # held: a 404 now would deny a start the client was told of

        def land() -> None:  # `Processor._after_commit`, on the processor thread: store, count, notify
            store.write(_started("just-started"))
            source.landed_count = 1
            waiters.notify(set())

        thread = threading.Thread(target=land)
        thread.start()
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        answer = await asyncio.wait_for(read, 5)
        assert answer.status in (200, 504), await answer.text()  # found (a result poll times out: still open)
        # Everything begun has landed: absence is answered at once.
        assert (await asyncio.wait_for(client.get(BASE.replace(WF, "never") + suffix), 1)).status == 404

    _serve(tmp_path, scenario, relayed)


@RELAYED
def test_a_landing_that_never_comes_holds_a_read_only_so_long(tmp_path: Path, relayed: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction that neither lands nor aborts (a frozen processor thread) holds reads `LANDED_WAIT_S`, then
    they are answered as the store stands: a 503 for absence once the processor is unsettled."""
    monkeypatch.setattr(reads, "LANDED_WAIT_S", 0.3)

    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        source.begun = 1
        assert (await asyncio.wait_for(client.get(BASE), 2)).status == 200  # what the store holds, after the wait
        source.in_doubt = True  # open too long: `Processor.settled` turns false
        assert (await asyncio.wait_for(client.get(BASE.replace(WF, "never")), 2)).status == 503

    _serve(tmp_path, scenario, relayed)


@pytest.mark.parametrize("path", [f"{BASE}/updates/no-such-update?wait_ms=100",
                                  f"/api/v1/namespaces/{NS}/schedules/no-such-schedule"])
@RELAYED
def test_the_other_owner_reads_answer_the_same_served_or_relayed(tmp_path: Path, relayed: bool, path: str) -> None:
    """An update's outcome and a schedule's description answer the same served or relayed: a 404 for what the
    store does not hold, a 503 with `Retry-After` once the shard is released."""
    async def scenario(client: TestClient[Any, Any], source: Source, owners: Owners, store: RocksStore,
                       waiters: HistoryWaiters, run_id: str, events: int) -> None:
        answer = await asyncio.wait_for(client.get(path), 5)
        body = await answer.json()
        assert answer.status == 404 and body["code"] == "not_found", body
        source.store = None  # released: a 503 to retry, from the process as from the owner itself
        await _expect_503(await asyncio.wait_for(client.get(path), 5))

    _serve(tmp_path, scenario, relayed)
