"""Full garbage collections when the processor can afford them, not when allocation counts say.

CPython's full (generation 2) collection walks every object the collector tracks. A processor holding thousands of
workflows in its cache spent 120-170 ms of CPU in one (S4: 3,000 one-second timers; 260-640 ms of wall time on the
loaded 2-core box), in the middle of a batch, and every timer due meanwhile fired that late: it was most of S4's
p99 (docs/benchmarks.md, "Timers and the garbage collector"). Reference counting frees nearly all of the
processor's garbage; only cycles need the collector, and they are rare and small here. So the processor turns off
the automatic full collections and runs one itself: when it is idle (a poll found nothing, no batch is in flight,
no deadline falls due within `IDLE_ROOM_S`, and that has been so for `IDLE_QUIET_S`), at most every
`IDLE_EVERY_S`; and, as a backstop under a load that
never leaves it such a moment, when the last full collection is `BUSY_EVERY_S` old, right after a transaction
(pipelined, its commit round trip then overlaps the collection). Either only once the youngest generation was
collected `YOUNG_BEFORE_FULL` times since the last full one (the interpreter's own schedule would have run a full
one by then): an idle server does not walk its unchanged heap again and again. A collection while idle still
delays the next command by its length, so idle ones are half a minute apart: at one workflow at a time (S0), about
one step in 200 meets one.

The middle generation's automatic collections are off too. What survives a young collection in a processor is
nearly all long-lived (decoded workflows in the cache, a batch's records until it lands), so each middle collection
walked the same live objects a second time: 2 ms each, every ten young ones, 0.6 s of a 50,000-command
`bench/shard.py` run of 6 s (docs/benchmarks.md, "Fewer allocations, and no middle generation"). The youngest
generation is collected as before (a cycle made and dropped within a few hundred allocations is freed there); a
cycle that outlives one waits for the processor's full collection. Measured, the processor's own work makes none
(the shard path: 10 unreachable objects in 20,000 commands, all from start-up); `bench/processor.py`'s were the
schema parser's closures, a few per schema registered. Memory left to old cycles is bounded by what the process
makes in `BUSY_EVERY_S`.

Two earlier versions collected inside S4's window (3,000 one-second timers), twice a run, 300-456 ms each: one once
the last collection was a minute old, the other at any empty poll. A deadline about to fall due now keeps a moment
from counting as idle.

The setting is process-wide: a processor in the server's own process (`--processor-mode thread`) schedules the
collections of the API server's objects too, which is fine for the same reasons. When the last processor of a
process stops, the interpreter's own schedule is back (tests run many processors in one process, one after the
other).

A server whose processors run in processes of their own (or that runs none) has no processor loop to say when it is
idle, and its API kept the interpreter's schedule. In S4 that was the heaviest work of its event loop: 3,000 held
long-polls and their relays took the heap from 174k to 490k objects, each held request reached the oldest
generation, and full collections came every 1.5 s, 430 ms of wall time each, 5.1 s in a 20 s burst, for 15
unreachable objects in all (py-spy: `gc_collect_main` in 57% of the process's samples holding the interpreter
lock). `serve_collections` gives such a process the processors' schedule: the start-up heap (modules, the app, the
schemas) frozen once the API is up, since it lives as long as the process; automatic middle and full collections
off; a full one once the API has been quiet for `IDLE_QUIET_S` (ticks with few young collections, so little
allocated), at most every `IDLE_EVERY_S`, and the `BUSY_EVERY_S` backstop otherwise.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from prometheus_client import Histogram

log = logging.getLogger("ostinato.processor")

IDLE_EVERY_S = 30.0
IDLE_ROOM_S = 2.0  # a collection of a large heap took up to 0.64 s of wall time on a loaded machine
# How long nothing must have been to do before a moment counts as idle: S4's processors (and the API beside them)
# collected in the second between its warm-up and its 3,000 starts, 250-570 ms each, all at once, and the first
# starts waited for them.
IDLE_QUIET_S = 3.0
BUSY_EVERY_S = 600.0
# Youngest-generation collections since the last full one: CPython's default thresholds run a middle collection
# every 10 young ones and a full one every 10 middle ones.
YOUNG_BEFORE_FULL = 100
# The interpreter's second and third thresholds while a processor runs: its automatic middle and full collections
# wait for this many younger ones, which is never in practice (a young one comes every ~700 net allocations).
AUTOMATIC_OFF = 1_000_000_000
API_TICK_S = 1.0  # how often the API process looks whether it is quiet (`serve_collections`)
# Young collections in a tick at most for the API to count as quiet: a young collection comes every ~700 net
# allocations, so a few hundred objects a second (the background threads' polls); S4's burst made ~150 a second.
API_QUIET_YOUNG = 2

_lock = threading.Lock()
_holders = 0  # processors of this process running with the automatic middle and full collections off
_saved: tuple[int, int, int] | None = None


def take_over() -> None:
    """Turn off the interpreter's automatic middle and full collections (the youngest generation's unchanged)
    while a processor runs; `give_back` when it stops."""
    global _holders, _saved
    with _lock:
        if _holders == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(_saved[0], AUTOMATIC_OFF, AUTOMATIC_OFF)
        _holders += 1


def give_back() -> None:
    """A processor stopped: when it was the last, the interpreter's own thresholds are back."""
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0 and _saved is not None:
            gc.set_threshold(*_saved)


class Collector:
    """One per processor. `idle()` and `busy()` are called by its loop; each may run a full collection."""

    def __init__(self, seconds: Histogram | None = None, *, clock: Callable[[], float] = time.monotonic,
                 collect: Callable[[], object] = lambda: gc.collect(2),
                 young: Callable[[], int] = lambda: gc.get_count()[1]) -> None:
        self._seconds, self._clock, self._collect, self._young = seconds, clock, collect, young
        self._last = clock()
        self._quiet_since: float | None = None  # the first of the idle calls in a row, with no busy one between

    def idle(self, room_s: float) -> bool:
        """Nothing to do for `room_s` (until the next deadline): collect if that is `IDLE_ROOM_S`, nothing has been
        to do for `IDLE_QUIET_S` (the lull between two bursts is not idle) and the last full collection is
        `IDLE_EVERY_S` old."""
        if room_s < IDLE_ROOM_S:
            self._quiet_since = None
            return False
        now = self._clock()
        if self._quiet_since is None:
            self._quiet_since = now
        return now - self._quiet_since >= IDLE_QUIET_S and self._maybe(IDLE_EVERY_S, "idle")

    def busy(self) -> bool:
        """After a transaction: collect if the last full collection is `BUSY_EVERY_S` old."""
        self._quiet_since = None
        return self._maybe(BUSY_EVERY_S, "under load")

    def _maybe(self, every_s: float, why: str) -> bool:
        now = self._clock()
        if now - self._last < every_s or self._young() < YOUNG_BEFORE_FULL:
            return False
        self._collect()
        self._last = self._clock()
        if self._seconds is not None:
            self._seconds.observe(self._last - now)
        log.info("full garbage collection (%s): %.0f ms", why, (self._last - now) * 1000)
        return True


async def serve_collections(collector: Collector, *, tick_s: float = API_TICK_S,
                            young: Callable[[], int] = lambda: gc.get_count()[1],
                            sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                            freeze: Callable[[], None] = gc.freeze) -> None:
    """Run for as long as the API of a process without a processor thread serves (cancel it to stop): freeze the
    start-up heap, take the automatic middle and full collections over, and run the full ones from here: a quiet
    tick (`API_QUIET_YOUNG`) is idle as a processor's empty poll is, any other busy."""
    take_over()
    try:
        await sleep(tick_s)
        freeze()  # a tick after the app started: what its start-up built lives as long as the process
        seen = young()
        while True:
            await sleep(tick_s)
            now = young()
            if now - seen <= API_QUIET_YOUNG:  # a full collection resets the count: quiet enough
                collector.idle(IDLE_ROOM_S)
            else:
                collector.busy()
            seen = young()
    finally:
        give_back()
