"""The processor's full garbage collections (`services/history/collector.py`): off the interpreter's automatic
schedule, run when idle or at most `BUSY_EVERY_S` apart under load; with the real collector, a cycle that lived long
enough to reach the oldest generation is kept until the processor collects, then freed."""

from __future__ import annotations

import asyncio
import gc
import math
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from ostinato.services.history.collector import (
    API_QUIET_YOUNG,
    API_TICK_S,
    AUTOMATIC_OFF,
    BUSY_EVERY_S,
    IDLE_EVERY_S,
    IDLE_QUIET_S,
    IDLE_ROOM_S,
    YOUNG_BEFORE_FULL,
    Collector,
    give_back,
    serve_collections,
    take_over,
)
from ostinato.services.history.metrics import ProcessorMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_idle_collects_only_when_the_last_collection_is_old_enough_and_counts_it() -> None:
    clock, runs = Clock(), []
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    collector = Collector(metrics.gc_seconds, clock=clock, collect=lambda: runs.append(clock.now),
                          young=lambda: YOUNG_BEFORE_FULL)
    assert not collector.idle(math.inf)
    clock.now += IDLE_EVERY_S - 0.1
    assert not collector.idle(math.inf) and runs == []
    clock.now += 0.1
    assert collector.idle(math.inf) and runs == [clock.now]
    assert not collector.idle(math.inf)  # the interval starts again at the collection
    assert registry.get_sample_value("ostinato_processor_gc_seconds_count") == 1
    assert registry.get_sample_value("ostinato_processor_gc_seconds_sum") == 0.0  # the clock stood still


def test_under_load_a_full_collection_still_comes_every_busy_interval() -> None:
    clock, runs = Clock(), []
    collector = Collector(clock=clock, collect=lambda: runs.append(clock.now), young=lambda: YOUNG_BEFORE_FULL)
    clock.now += IDLE_EVERY_S
    assert not collector.busy()  # busy waits longer than idle
    clock.now += BUSY_EVERY_S - IDLE_EVERY_S
    assert collector.busy() and len(runs) == 1


def test_a_quiet_moment_just_before_deadlines_fall_due_is_not_idle_enough() -> None:
    """S4: between the burst of starts and the timers they armed, a second with nothing to decide; a collection
    there made the first timers wait for it."""
    clock, runs = Clock(), []
    collector = Collector(clock=clock, collect=lambda: runs.append(clock.now), young=lambda: YOUNG_BEFORE_FULL)
    clock.now += BUSY_EVERY_S - 1
    assert not collector.idle(IDLE_ROOM_S) and runs == []  # the quiet starts
    clock.now += IDLE_QUIET_S
    assert not collector.idle(IDLE_ROOM_S - 0.1) and runs == []  # a deadline near: the quiet ends
    assert not collector.idle(IDLE_ROOM_S) and runs == []  # and starts again
    clock.now += IDLE_QUIET_S
    assert collector.idle(IDLE_ROOM_S) and len(runs) == 1


def test_a_lull_between_two_bursts_is_not_idle() -> None:
    """S4: in the second between its warm-up and its 3,000 starts, the processors (and the API beside them) ran
    their idle collections, 250-570 ms each, and the first starts waited for them."""
    clock, runs = Clock(), []
    collector = Collector(clock=clock, collect=lambda: runs.append(clock.now), young=lambda: YOUNG_BEFORE_FULL)
    clock.now += IDLE_EVERY_S
    assert not collector.idle(math.inf)
    clock.now += IDLE_QUIET_S - 0.1
    assert not collector.idle(math.inf) and runs == []
    assert not collector.busy()  # the next burst: a transaction
    clock.now += 0.1
    assert not collector.idle(math.inf) and runs == []  # a new lull
    clock.now += IDLE_QUIET_S
    assert collector.idle(math.inf) and runs == [clock.now]


def test_an_idle_server_that_allocated_nothing_since_the_last_collection_does_not_collect_again() -> None:
    clock, runs, young = Clock(), [], [YOUNG_BEFORE_FULL - 1]
    collector = Collector(clock=clock, collect=lambda: runs.append(clock.now), young=lambda: young[0])
    clock.now += BUSY_EVERY_S
    assert not collector.idle(math.inf) and runs == []
    clock.now += IDLE_QUIET_S
    assert not collector.idle(math.inf) and not collector.busy() and runs == []
    young[0] = YOUNG_BEFORE_FULL
    assert not collector.idle(math.inf)  # busy() above ended the quiet
    clock.now += IDLE_QUIET_S
    assert collector.idle(math.inf) and len(runs) == 1


def test_taking_over_turns_off_the_automatic_middle_and_full_collections_until_the_last_processor_stops(
        thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    take_over()
    take_over()  # two processors in one process
    assert gc.get_threshold() == (700, AUTOMATIC_OFF, AUTOMATIC_OFF)
    give_back()
    assert gc.get_threshold() == (700, AUTOMATIC_OFF, AUTOMATIC_OFF)
    give_back()
    assert gc.get_threshold() == (700, 10, 10)


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: reference counting alone never frees it


def test_a_cycle_that_outlived_a_young_collection_waits_for_the_processors_collection(thresholds: None) -> None:
    """The middle generation is not collected automatically: young garbage enough for many young collections (by
    the interpreter's own thresholds, several middle ones) leaves the cycle there, and the processor's full
    collection frees it."""
    gc.collect()
    take_over()
    try:
        node = Node()
        gone = weakref.ref(node)
        gc.collect(0)  # survives the youngest generation: now in the middle one
        del node
        for _ in range(300):
            [Node() for _ in range(1000)]
        assert gc.get_count()[1] >= YOUNG_BEFORE_FULL  # the young collections ran, and were counted
        assert gone() is not None
        clock = Clock()
        collector = Collector(clock=clock)
        assert not collector.idle(math.inf)
        clock.now += IDLE_EVERY_S
        assert collector.idle(math.inf)
        assert gone() is None
        assert gc.get_count()[1] == 0  # the count starts again at the full collection
    finally:
        give_back()


def test_an_old_cycle_waits_for_the_processors_collection(thresholds: None) -> None:
    gc.collect()
    take_over()
    node = Node()
    gone = weakref.ref(node)
    gc.collect(1)  # survives the young generations: now in the oldest
    del node
    # As many long-lived objects again as the process has, then young garbage enough for many young collections:
    # by the interpreter's own rules (10 young collections, long-lived objects grown by a quarter) a full one runs.
    grown = [[] for _ in range(len(gc.get_objects()))]
    for _ in range(300):
        [Node() for _ in range(1000)]
    assert gone() is not None
    del grown
    clock = Clock()
    collector = Collector(clock=clock)
    assert not collector.idle(math.inf)
    clock.now += IDLE_EVERY_S
    assert collector.idle(math.inf)
    assert gone() is None
    give_back()


class Api:
    """A server's API as `serve_collections` sees it, one tick at a time: each tick allocates `per_tick` young
    collections' worth, the clock moves a tick, and the test stops the loop after `ticks`."""

    def __init__(self, per_tick: list[int]) -> None:
        self.clock, self.young, self.per_tick = Clock(), 0, per_tick
        self.collected: list[float] = []
        self.frozen = 0
        self.thresholds: list[tuple[int, int, int]] = []

    def collect(self) -> None:
        self.collected.append(self.clock.now)
        self.young = 0  # a full collection starts the count again

    def freeze(self) -> None:
        self.frozen += 1

    async def sleep(self, seconds: float) -> None:
        assert seconds == API_TICK_S
        self.thresholds.append(gc.get_threshold())
        if not self.per_tick:
            raise asyncio.CancelledError  # the app stops
        self.clock.now += seconds
        self.young += self.per_tick.pop(0)

    def run(self) -> None:
        collector = Collector(clock=self.clock, collect=self.collect, young=lambda: self.young)
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(serve_collections(collector, young=lambda: self.young, sleep=self.sleep, freeze=self.freeze))


def test_the_api_collects_once_quiet_for_a_while_and_the_last_collection_is_old_enough(thresholds: None) -> None:
    """A server whose processors run in processes of their own: a stretch of quiet ticks (little allocated) is its
    idle moment, at most every IDLE_EVERY_S, and only once enough young collections ran since the last full one.
    A lull shorter than IDLE_QUIET_S between two bursts is not."""
    gc.set_threshold(700, 10, 10)
    busy = YOUNG_BEFORE_FULL  # young collections in a busy tick
    stretch = int(IDLE_QUIET_S / API_TICK_S) + 1  # quiet ticks: the first starts the quiet, the last is IDLE_QUIET_S on
    lull = [API_QUIET_YOUNG] * (stretch - 1)
    quiet = [0] * stretch
    ticks = [busy] * int(IDLE_EVERY_S) + lull + [API_QUIET_YOUNG + 1] + quiet + [busy] + quiet
    api = Api(ticks)
    api.run()
    assert api.frozen == 1  # the start-up heap, once
    assert set(api.thresholds) == {(700, AUTOMATIC_OFF, AUTOMATIC_OFF)}  # taken over while it ran
    assert gc.get_threshold() == (700, 10, 10)  # and given back when the app stopped
    # Not in the busy ticks (30 s is far from the ten-minute backstop) nor the short lull, in the last tick of the
    # quiet stretch, and not in the next one: the interval starts again.
    assert api.collected == [1000.0 + IDLE_EVERY_S + len(lull) + 1 + len(quiet)]


def test_an_api_never_quiet_still_collects_every_busy_interval(thresholds: None) -> None:
    api = Api([API_QUIET_YOUNG + 1] * int(BUSY_EVERY_S + 1))
    api.run()
    assert api.collected == [1000.0 + BUSY_EVERY_S]
