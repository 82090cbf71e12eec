"""A busy processor's transactions linger (`ProcessorOptions.linger_ms`): after a large one, the next takes the
commands that arrive until `linger_ms` after its begin, firing what falls due meanwhile; a lone step never waits.
While the last transaction's commit is in flight, the open batch takes what arrives up to `in_flight_cap`, not
`max_batch`.

Stand-in consumer, shard and clock, as in `test_batch_cut.py`: no broker is involved in the rule itself.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Consumer, Message

from ostinato.services.admin.cluster import ClusterSettings
from ostinato.services.history import processor as processor_module
from ostinato.services.history.changelog import fire_at_of, timer_key
from ostinato.services.history.processor import (
    IN_FLIGHT_BATCHES,
    LINGER_MIN_DECISIONS,
    Flight,
    Processor,
    ProcessorOptions,
    linger_until,
)
from ostinato.services.history.shard import Shard
from ostinato.streams.deadlines import Deadline

NOW = 1_000_000


@dataclass
class Message_:
    at: int

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return b""

    def error(self) -> None:
        return None


@dataclass
class Clock:
    now: int = NOW

    def __call__(self) -> int:
        self.now += 10
        return self.now


@dataclass
class LoggingShard:
    """Records what was decided and fired, at which time."""

    clock: Clock
    pending: list[bytes] = field(default_factory=list)
    log: list[tuple[str, int]] = field(default_factory=list)

    def process(self, data: bytes | None, offset: int, now_ms: int) -> None:
        self.log.append((f"command {offset}", now_ms))

    def fire(self, key: bytes, offset: int, now_ms: int) -> None:
        self.pending.remove(key)
        self.log.append(("moment", now_ms))

    def due_timers(self, now_ms: int, limit: int) -> list[bytes]:
        return sorted(k for k in self.pending if fire_at_of(k) <= now_ms)[:limit]

    def next_timer_ms(self, after_ms: int = -1) -> int | None:
        return min((t for k in self.pending if (t := fire_at_of(k)) > after_ms), default=None)


class Arrivals:
    """A consumer whose looks answer one command each, the first `n` times; records each look's timeout."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.timeouts: list[float] = []

    def consume(self, room: int, timeout: float) -> list[Message]:
        self.timeouts.append(timeout)
        if self.left <= 0:
            time.sleep(timeout)
            return []
        self.left -= 1
        return cast(list[Message], [Message_(100 + self.left)])


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Processor, Clock]:
    clock = Clock()
    monkeypatch.setattr(processor_module, "wall_ms", clock)
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    processor = Processor("127.0.0.1:1", settings, ProcessorOptions(data_dir=tmp_path, owner_id="test", linger_ms=40))
    return processor, clock


def test_only_a_large_transaction_makes_the_next_one_linger(tmp_path: Path) -> None:
    options = ProcessorOptions(data_dir=tmp_path, linger_ms=25)
    assert linger_until(options, LINGER_MIN_DECISIONS, 10.0) == pytest.approx(10.025)
    assert linger_until(options, LINGER_MIN_DECISIONS - 1, 10.0) == 0.0  # a lone step ships at once
    assert linger_until(ProcessorOptions(data_dir=tmp_path), 500, 10.0) == 0.0  # off by default
    assert linger_until(ProcessorOptions(data_dir=tmp_path, linger_ms=25, pipeline=False), 500, 10.0) == 0.0


def test_the_lingering_batch_takes_what_arrives_until_the_linger_ends_and_fires_what_falls_due(
        proc: tuple[Processor, Clock]) -> None:
    processor, clock = proc
    moment = timer_key("ns", "wf", Deadline(NOW + 25, "TIMER", "run", "t"))
    shard = LoggingShard(clock, [moment])
    processor.shards = cast(dict[int, Shard], {0: shard})
    arrivals = Arrivals(2)
    processor.consumer = cast(Consumer, arrivals)
    processor._linger_until = time.perf_counter() + 0.04
    touched: set[int] = set()
    started = time.perf_counter()
    decided, fired, last = processor._decide_lingering(NOW, NOW + 10, touched, 3)
    waited = time.perf_counter() - started
    assert (decided, fired) == (2, 1) and touched == {0}
    assert [name for name, _ in shard.log] == ["command 101", "moment", "command 100"]
    times = [at for _, at in shard.log]
    assert times == sorted(times) and times[0] > NOW + 10 and last >= times[-1]  # the last look
    assert waited >= 0.03  # it looked until the linger ended, not only while commands came
    assert all(0 < t <= processor_module.IN_FLIGHT_LOOK_S for t in arrivals.timeouts)
    assert processor.next_offsets == {0: 101}


def test_no_linger_once_its_time_has_passed_or_the_batch_is_full(proc: tuple[Processor, Clock]) -> None:
    processor, clock = proc
    processor.shards = cast(dict[int, Shard], {0: LoggingShard(clock)})
    arrivals = Arrivals(5)
    processor.consumer = cast(Consumer, arrivals)
    processor._linger_until = time.perf_counter() - 0.001
    assert processor._decide_lingering(NOW, NOW, set(), 0) == (0, 0, NOW)
    processor._linger_until = time.perf_counter() + 10
    processor.options.max_batch = 3
    assert processor._decide_lingering(NOW, NOW, set(), 3)[0] == 0  # the batch took its room already
    assert arrivals.timeouts == []


def test_while_a_commit_is_in_flight_the_open_batch_grows_past_max_batch_up_to_its_cap(
        proc: tuple[Processor, Clock]) -> None:
    """The batch took its `max_batch` (3) before the flight; the commit does not return: the thread decides what
    arrives (one command a look) up to the cap (5), then stops, instead of idling at 3."""
    processor, clock = proc
    processor.shards = cast(dict[int, Shard], {0: LoggingShard(clock)})
    arrivals = Arrivals(10)
    processor.consumer = cast(Consumer, arrivals)
    processor.options.max_batch, processor.options.max_batch_in_flight = 3, 5
    never: Future[tuple[float, float, bool]] = Future()
    processor._flight = Flight(1, {}, 3, 0, 0.0, 0.0, 0.0, 0.0, never)
    decided, fired, _ = processor._decide_in_flight(NOW, NOW, set(), 3)
    assert (decided, fired) == (2, 0) and arrivals.left == 8
    assert processor._flight is not None  # still in flight: the batch stopped at its cap, not at the commit
    # With no flight the same batch lingers no further than max_batch.
    processor._flight, processor._linger_until = None, time.perf_counter() + 10
    assert processor._decide_lingering(NOW, NOW, set(), 3)[0] == 0


def test_the_in_flight_cap_defaults_to_a_multiple_of_max_batch_and_is_never_below_it(tmp_path: Path) -> None:
    assert ProcessorOptions(data_dir=tmp_path, max_batch=50).in_flight_cap == IN_FLIGHT_BATCHES * 50
    assert ProcessorOptions(data_dir=tmp_path, max_batch=50, max_batch_in_flight=120).in_flight_cap == 120
    assert ProcessorOptions(data_dir=tmp_path, max_batch=50, max_batch_in_flight=10).in_flight_cap == 50
