"""Wake HTTP long-polls when a run's history grows, instead of having them poll the store.

The processor thread calls `notify` after each commit with the runs that gained events (their store writes are
done by then, so a woken reader sees them), and after an abort with none; readers on the event loop `watch` a run
before checking the store, so a commit between the check and the wait still wakes them. Every notification also
wakes the reads waiting for the transactions begun before them to land (`LANDED`). Only the owner's process has
the processor whose commits matter, and owner reads are exactly what is served there. When a processor gives shards
up it calls `release`, which wakes every waiter to look whether its shard is still here: a held read needs no timer
of its own to notice a move (S4 holds 3,000; each woke once a second to look, and the loop that answers them shares
the interpreter with the processor thread).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

STATE_PREFIX = b"state:"
CLOSED_PREFIX = b"closed:"
LANDED = b"landed:"  # woken by every notification: reads waiting for a transaction to land (`reads.caught_up`)


def state_key(run_key: bytes) -> bytes:
    """What to watch for any change of a run's state, events or not (an update rejected writes no event). Kept
    apart from the run's own key, so a heartbeat does not wake every history long-poll of its run."""
    return STATE_PREFIX + run_key


def closed_key(run_key: bytes) -> bytes:
    """What a wait for a run's close watches (`filter=close`, the SDK's result): woken only by the commit that closes
    the run. Woken at every step instead, each of a hello's result waits read and decoded its run's state three more
    times in the processor's process, under the interpreter lock its processor thread needs."""
    return CLOSED_PREFIX + run_key


class HistoryWaiters:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[bytes, set[asyncio.Future[None]]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the API runs on (notifications arrive from another thread)."""
        self._loop = loop

    def notify(self, run_keys: Iterable[bytes]) -> None:
        """Thread-safe: the runs (`ns/wf/run` store keys) whose history just grew."""
        loop = self._loop
        if loop is not None and self._waiters:
            keys = [*run_keys, LANDED]
            with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
                loop.call_soon_threadsafe(self._wake, keys)

    def release(self) -> None:
        """Thread-safe: shards left this process (their stores are gone from the processor's table by now). Every
        waiter wakes and looks again; one whose shard stayed simply waits again."""
        loop = self._loop
        if loop is not None and self._waiters:
            with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        self._wake(list(self._waiters))

    def _wake(self, keys: list[bytes]) -> None:
        for key in keys:
            for future in self._waiters.pop(key, ()):
                if not future.done():
                    future.set_result(None)

    def watch(self, run_key: bytes) -> asyncio.Future[None]:
        """A future done at the next notification for `run_key`; register before checking the store."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_key, set()).add(future)
        return future

    async def wait(self, run_key: bytes, future: asyncio.Future[None], timeout_s: float) -> bool:
        """Wait for `future` (from `watch`) at most `timeout_s`; whether it was notified. A notification that
        comes as the wait times out (after `wait_for` gave up, before this resumes) still counts: `_wake` has
        already taken the future from the waiters, so a caller that watched a fresh one and waited again would
        never hear of it (a result long-poll then sat out its whole `wait_ms`)."""
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, timeout_s))
            return True
        except TimeoutError:
            return future.done() and not future.cancelled()
        finally:
            self.unwatch(run_key, future)

    def held(self) -> int:
        """How many waits are registered now: 0 once every read that watched has been answered, whichever way it
        ended (a read that leaves its future behind keeps it, and its run's key, for the life of the process)."""
        return sum(len(waiting) for waiting in self._waiters.values())

    def unwatch(self, run_key: bytes, future: asyncio.Future[None]) -> None:
        waiting = self._waiters.get(run_key)
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self._waiters[run_key]
