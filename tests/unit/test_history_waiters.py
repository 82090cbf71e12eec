"""`HistoryWaiters`, the long-polls' wake-ups, on an event loop and without Kafka: a notification is never lost
between one bounded wait and the next.

A result long-poll once waited in one-second slices (`reads.wait_for_commit`), reading nothing between them. A close
notified just as a slice timed out was once lost: the wake-up set the slice's future after `asyncio.wait_for` had
given up on it but before the waiting coroutine resumed, the slice reported a timeout, and the next slice watched
a fresh future, so the read sat out its whole `wait_ms` (S4 saw three of 3,000 results 9 s late, which halved the
run's measured throughput)."""

from __future__ import annotations

import asyncio
import threading

from ostinato.services.history.waiters import HistoryWaiters

KEY = b"closed:default/wf/run"


def test_a_notification_while_a_slice_times_out_counts_as_a_wake_up() -> None:
    async def main() -> tuple[bool, bool]:
        waiters = HistoryWaiters()
        waiters.bind(asyncio.get_running_loop())
        future = waiters.watch(KEY)
        waiters.notify([KEY])  # queued on the loop: it runs while the timed-out wait is being cancelled
        woke = await waiters.wait(KEY, future, 0)
        return woke, future.done()

    woke, notified = asyncio.run(main())
    assert notified
    assert woke


def test_a_notification_from_another_thread_wakes_a_waiting_read() -> None:
    async def main() -> bool:
        waiters = HistoryWaiters()
        waiters.bind(asyncio.get_running_loop())
        future = waiters.watch(KEY)
        threading.Timer(0.05, waiters.notify, ([KEY],)).start()
        return await waiters.wait(KEY, future, 5)

    assert asyncio.run(main())


def test_a_wait_nobody_notifies_times_out_and_leaves_no_waiter() -> None:
    async def main() -> tuple[bool, HistoryWaiters]:
        waiters = HistoryWaiters()
        waiters.bind(asyncio.get_running_loop())
        future = waiters.watch(KEY)
        waiters.notify([b"closed:default/other/run"])
        return await waiters.wait(KEY, future, 0.05), waiters

    woke, waiters = asyncio.run(main())
    assert not woke
    assert waiters.held() == 0


def test_a_release_from_another_thread_wakes_every_waiter() -> None:
    async def main() -> tuple[list[bool], HistoryWaiters]:
        waiters = HistoryWaiters()
        waiters.bind(asyncio.get_running_loop())
        keys = [KEY, b"closed:default/other/run", b"state:default/third/run"]
        futures = [waiters.watch(k) for k in keys]
        threading.Timer(0.05, waiters.release).start()
        woke = await asyncio.gather(*(waiters.wait(k, f, 30) for k, f in zip(keys, futures, strict=True)))
        return list(woke), waiters

    woke, waiters = asyncio.run(main())
    assert woke == [True, True, True]
    assert waiters.held() == 0


def test_held_counts_the_registered_waits_until_they_are_answered_or_dropped() -> None:
    async def main() -> list[int]:
        waiters = HistoryWaiters()
        waiters.bind(asyncio.get_running_loop())
        counts = [waiters.held()]
        first, second = waiters.watch(b"a"), waiters.watch(b"a")
        waiters.watch(b"b")
        counts.append(waiters.held())
        waiters.unwatch(b"a", first)
        counts.append(waiters.held())
        waiters.notify([b"b"])  # a notification answers every wait on its key (and on LANDED)
        await asyncio.sleep(0)
        counts.append(waiters.held())
        waiters.unwatch(b"a", second)
        counts.append(waiters.held())
        return counts

    assert asyncio.run(main()) == [0, 3, 2, 1, 0]
