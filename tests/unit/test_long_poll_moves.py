"""`reads.wait_for_commit`, a held owner read, against shards that move, without Kafka: the read waits without
timers of its own and still answers at once when its shard leaves the process.

The read used to wake once a second to look whether its shard had moved (S4 holds 3,000 such reads in the
processors' processes, so 3,000 wake-ups a second on the loop that shares the interpreter with the processor
thread). Now the processor's `on_release` wakes every waiter (`HistoryWaiters.release`), and the one look before
the wait catches a move that came before the read started waiting. The stores here are identity tokens: the read
compares the store it began with to the one the processor's table names now, and never opens either."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from ostinato.services.frontend.reads import READS, ReadContext, wait_for_commit
from ostinato.services.history.waiters import HistoryWaiters, closed_key

SHARDS = 4
KEY = closed_key(b"default/order-1/run-1")
NO_MOVE_S = 3600.0  # a deadline no run of this test reaches: a read that does not wake fails by `asyncio.wait_for`


class Table:
    """The processor's shard table as reads see it (`StoreSource.store_of`); every shard owned by one store."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.store: Any = object()
        self.looks = 0

    def store_of(self, shard: int) -> Any:
        with self.lock:
            self.looks += 1
            return self.store

    def give_up(self, waiters: HistoryWaiters) -> None:
        """What `Processor._close_shards` does, in its order: the table first, then `on_release`."""
        with self.lock:
            self.store = None
        waiters.release()

    def settled(self) -> bool:
        return True

    def mark(self) -> tuple[int, ...]:
        return ()

    def landed(self, mark: tuple[int, ...]) -> bool:
        return True


def _request(table: Table, waiters: HistoryWaiters) -> web.Request:
    app = web.Application()
    app[READS] = ReadContext(SHARDS, table, None, (), waiters)
    return make_mocked_request("GET", "/api/v1/namespaces/default/workflows/order-1/history", app=app,
                               match_info={"namespace": "default", "workflow_id": "order-1"})


async def _held(table: Table, waiters: HistoryWaiters, deadline_s: float) -> bool:
    waiters.bind(asyncio.get_running_loop())
    request, store = _request(table, waiters), table.store_of(0)
    future = waiters.watch(KEY)
    return await asyncio.wait_for(wait_for_commit(request, waiters, KEY, future, store, time.monotonic() + deadline_s),
                                  timeout=30)


def test_a_held_read_wakes_when_its_shard_is_given_up() -> None:
    table, waiters = Table(), HistoryWaiters()

    async def main() -> bool:
        threading.Timer(0.05, table.give_up, (waiters,)).start()
        return await _held(table, waiters, NO_MOVE_S)

    assert asyncio.run(main())  # woken to read again (and answer the redirect), not left to its deadline
    assert waiters.held() == 0


def test_a_read_whose_shard_moved_before_it_waited_does_not_wait() -> None:
    table, waiters = Table(), HistoryWaiters()

    async def main() -> bool:
        waiters.bind(asyncio.get_running_loop())
        request, store = _request(table, waiters), table.store_of(0)
        table.give_up(waiters)  # the release finds nobody watching yet
        await asyncio.sleep(0)  # and has run on the loop
        future = waiters.watch(KEY)
        return await asyncio.wait_for(wait_for_commit(request, waiters, KEY, future, store,
                                                      time.monotonic() + NO_MOVE_S), timeout=30)

    assert asyncio.run(main())
    assert waiters.held() == 0


def test_a_held_read_nobody_wakes_looks_once_and_times_out_at_its_deadline() -> None:
    table, waiters = Table(), HistoryWaiters()
    assert not asyncio.run(_held(table, waiters, 2.2))  # long enough for a read waking once a second to look twice
    assert table.looks == 2  # the store the read began with, and the one look before it waited
    assert waiters.held() == 0


def test_a_commit_of_its_run_wakes_a_held_read() -> None:
    table, waiters = Table(), HistoryWaiters()

    async def main() -> bool:
        threading.Timer(0.05, waiters.notify, ([KEY],)).start()
        return await _held(table, waiters, NO_MOVE_S)

    assert asyncio.run(main())
    assert table.store is not None  # the shard stayed: the caller reads its page from the same store
