"""The processor's full garbage collections (`services/history/collector.py`): off the interpreter's automatic
schedule, run when idle or at most `BUSY_EVERY_S` apart under load; with the real collector, a cycle that lived long
enough to reach the oldest generation is kept until the processor collects, then freed."""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from ostinato.services.history.collector import (
    AUTOMATIC_OFF,
    BUSY_EVERY_S,
    IDLE_EVERY_S,
    IDLE_ROOM_S,
    YOUNG_BEFORE_FULL,
    Collector,
    give_back,
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
    assert not collector.idle(IDLE_ROOM_S - 0.1) and runs == []
    assert collector.idle(IDLE_ROOM_S) and len(runs) == 1


def test_an_idle_server_that_allocated_nothing_since_the_last_collection_does_not_collect_again() -> None:
    clock, runs, young = Clock(), [], [YOUNG_BEFORE_FULL - 1]
    collector = Collector(clock=clock, collect=lambda: runs.append(clock.now), young=lambda: young[0])
    clock.now += BUSY_EVERY_S
    assert not collector.idle(math.inf) and not collector.busy() and runs == []
    young[0] = YOUNG_BEFORE_FULL
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
    clock.now += IDLE_EVERY_S
    assert collector.idle(math.inf)
    assert gone() is None
    give_back()
