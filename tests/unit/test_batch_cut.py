"""When a batch stops deciding at a deadline and carries the rest (issue 15: timers on time), and when it must not;
which deadlines that fell due while it decided fire at its end.

The processor's loop over a batch's commands, with stand-in shards and messages and a clock that moves 10 ms a
look: no broker is involved in the rule itself (`tests/integration/test_timers_on_time.py` runs it on one).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Consumer, Message

from ostinato.services.admin.cluster import ClusterSettings
from ostinato.services.history import processor as processor_module
from ostinato.services.history.changelog import fire_at_of, timer_key
from ostinato.services.history.input_gate import InputGate, is_timeout
from ostinato.services.history.processor import LATE_PASSES, MIN_ROOM, Flight, Processor, ProcessorOptions
from ostinato.services.history.shard import Shard
from ostinato.streams.deadlines import Deadline

NOW = 1_000_000
DEADLINE = NOW + 50  # the clock passes it at the sixth look, one before each decision


@dataclass
class FakeMessage:
    shard: int
    at: int

    def partition(self) -> int:
        return self.shard

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return b""


@dataclass
class FakeShard:
    deadline: int | None
    decided: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)

    def process(self, data: bytes | None, offset: int, now_ms: int) -> None:
        self.decided.append(offset)
        self.times.append(now_ms)

    def next_timer_ms(self, after_ms: int = -1) -> int | None:
        return self.deadline if self.deadline is not None and self.deadline > after_ms else None


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Processor:
    clock = iter(range(NOW, NOW + 10_000_000, 10))
    monkeypatch.setattr(processor_module, "wall_ms", lambda: next(clock))
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    return Processor("127.0.0.1:1", settings, ProcessorOptions(data_dir=tmp_path, owner_id="test"))


def commands(n: int) -> list[Message]:
    return cast(list[Message], [FakeMessage(0, i) for i in range(n)])


def key(kind: str) -> bytes:
    return timer_key("ns", "wf", Deadline(NOW - 1, kind, "run", "x"))


def decide_at(proc: Processor, shard: FakeShard, n: int,
              due: dict[int, list[bytes]] | None = None) -> tuple[int, int]:
    """How many were decided, and the clock's last reading (what the batch fires next is stamped no earlier)."""
    proc.shards = cast(dict[int, Shard], {0: shard})
    decided, last = proc._decide_commands(commands(n), set(), NOW, due or {})
    assert last >= max(shard.times, default=NOW)
    return decided, last


def decide(proc: Processor, shard: FakeShard, n: int, due: dict[int, list[bytes]] | None = None) -> int:
    return decide_at(proc, shard, n, due)[0]


def test_a_batch_stops_when_the_next_deadline_falls_due_and_carries_the_rest_in_order(proc: Processor) -> None:
    shard = FakeShard(DEADLINE)
    decided, last = decide_at(proc, shard, 20, {0: [key("USER_TIMER")]})  # a user timer fires in it: still cut
    assert decided == len(shard.decided) == 5  # looks at +0 ... +40 decided; +50 is the deadline
    assert last == DEADLINE
    assert [m.offset() for m in proc._carry] == list(range(5, 20))
    assert proc.next_offsets[0] == 5  # only the decided ones are committed
    assert proc.metrics.batches_cut._value.get() == 1


def test_each_command_is_decided_at_its_own_time(proc: Processor) -> None:
    """The events a command writes and the deadlines it arms carry the time it was decided, so the timers a batch
    of completions starts fall due spread as they were decided, not as one wave at the batch's start."""
    shard = FakeShard(None)
    assert decide(proc, shard, 5) == 5
    assert shard.times == [NOW, NOW + 10, NOW + 20, NOW + 30, NOW + 40]


def test_a_clock_stepping_back_never_decides_a_command_earlier_than_the_one_before(
        proc: Processor, monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([NOW + 30, NOW + 10, NOW + 40, NOW])
    monkeypatch.setattr(processor_module, "wall_ms", lambda: next(readings))
    shard = FakeShard(None)
    assert decide(proc, shard, 4) == 4
    assert shard.times == [NOW + 30, NOW + 30, NOW + 40, NOW + 40]


def test_at_least_the_minimum_is_decided_when_the_deadline_is_already_past(proc: Processor,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processor_module, "wall_ms", lambda: NOW + 100)  # past it before the first decision
    assert decide(proc, FakeShard(NOW + 1), 20) == MIN_ROOM


def test_without_a_later_deadline_the_batch_runs_to_its_end(proc: Processor) -> None:
    shard = FakeShard(None)
    assert decide(proc, shard, 20) == 20 and proc._carry == []


def test_a_batch_that_fires_timeouts_is_never_cut(proc: Processor) -> None:
    """The gate let the timeouts fire because every command read before they fell due is decided first: a
    completion carried past its own timeout would lose to it."""
    shard = FakeShard(DEADLINE)
    assert decide(proc, shard, 20, {0: [key("ACTIVITY_START_TO_CLOSE")]}) == 20
    assert proc._carry == []


def test_no_cut_while_timeouts_are_held_for_their_inputs(proc: Processor) -> None:
    proc._gates[0] = InputGate(target=123, since_ms=NOW)
    assert decide(proc, FakeShard(DEADLINE), 20) == 20


def test_a_rebalance_drops_the_carried_commands_of_the_moved_shards(proc: Processor) -> None:
    proc._carry = cast(list[Message], [FakeMessage(0, 7), FakeMessage(1, 3)])
    proc._drop_carried({0})
    assert [(m.partition(), m.offset()) for m in proc._carry] == [(1, 3)]


@dataclass
class TimerShard:
    """Deadlines by fire time; `fire` records what fired and at which batch time."""

    pending: list[bytes]
    fired: list[tuple[bytes, int]] = field(default_factory=list)

    def due_timers(self, now_ms: int, limit: int) -> list[bytes]:
        return sorted(k for k in self.pending if fire_at_of(k) <= now_ms)[:limit]

    def fire(self, key: bytes, offset: int, now_ms: int) -> None:
        self.pending.remove(key)
        self.fired.append((key, now_ms))


def at(ms: int, kind: str = "USER_TIMER") -> bytes:
    return timer_key("ns", "wf", Deadline(ms, kind, "run", str(ms)))


def fire_fallen_due(proc: Processor, shard: TimerShard) -> tuple[int, set[int]]:
    proc.shards = cast(dict[int, Shard], {0: shard})
    touched: set[int] = set()
    batch_now = processor_module.wall_ms()  # NOW: the batch's time, read when it began
    return proc._fire_fallen_due(batch_now, touched), touched


def test_moments_that_fell_due_while_the_batch_decided_fire_at_its_end_at_their_own_time(proc: Processor) -> None:
    """The clock reads NOW + 10 at the first look: what fell due by then fires, stamped with that time, never
    earlier than its deadline; a timeout due as early waits for the input gate of the next batch."""
    moment, retry = at(NOW + 5), at(NOW + 8, "ACTIVITY_RETRY")
    timeout, later = at(NOW + 5, "ACTIVITY_START_TO_CLOSE"), at(NOW + 10_000)
    shard = TimerShard([moment, retry, timeout, later])
    fired, touched = fire_fallen_due(proc, shard)
    assert fired == 2 and touched == {0}
    assert shard.fired == [(moment, NOW + 10), (retry, NOW + 10)]
    assert all(time >= fire_at_of(key) for key, time in shard.fired)
    assert shard.pending == [timeout, later]
    assert proc.metrics.timers_fired_late_pass._value.get() == 2


def test_each_look_fires_what_fell_due_during_the_one_before(proc: Processor) -> None:
    shard = TimerShard([at(NOW + 5), at(NOW + 15), at(NOW + 25)])  # looks at +10, +20, +30
    assert fire_fallen_due(proc, shard)[0] == 3
    assert [time for _, time in shard.fired] == [NOW + 10, NOW + 20, NOW + 30]


def test_a_stream_of_deadlines_holds_the_batch_open_for_at_most_a_few_looks(proc: Processor) -> None:
    shard = TimerShard([at(NOW + 10 * i + 5) for i in range(50)])  # one more falls due before every look
    assert fire_fallen_due(proc, shard)[0] == LATE_PASSES
    assert len(shard.pending) == 50 - LATE_PASSES


def test_nothing_fires_when_nothing_fell_due(proc: Processor) -> None:
    shard = TimerShard([at(NOW + 10_000)])
    assert fire_fallen_due(proc, shard) == (0, set())


def test_a_backlog_due_before_the_batch_began_is_left_to_the_next_batches(proc: Processor) -> None:
    """Overdue deadlines past the batch's 500 per shard (after a restart, say) keep firing 500 a batch: the end of a
    batch fires only what fell due while it decided, so commands keep their share."""
    overdue, fell = at(NOW - 5_000), at(NOW + 5)
    shard = TimerShard([overdue, fell])
    assert fire_fallen_due(proc, shard)[0] == 1
    assert shard.fired == [(fell, NOW + 10)] and shard.pending == [overdue]


class Clock:
    """The processor's wall clock: moves only when a decision takes time (10 ms each)."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@dataclass
class BusyShard:
    """Commands and deadlines together, each decision 10 ms on `clock`; `log` is what was decided, in order, and
    at which time."""

    clock: Clock
    pending: list[bytes]
    log: list[tuple[str, int]] = field(default_factory=list)

    def process(self, data: bytes | None, offset: int, now_ms: int) -> None:
        self.log.append((f"command {offset}", now_ms))
        self.clock.now += 10

    def fire(self, key: bytes, offset: int, now_ms: int) -> None:
        self.pending.remove(key)
        self.log.append((parse_kind(key), now_ms))
        self.clock.now += 10

    def due_timers(self, now_ms: int, limit: int) -> list[bytes]:
        return sorted(k for k in self.pending if fire_at_of(k) <= now_ms)[:limit]

    def next_timer_ms(self, after_ms: int = -1) -> int | None:
        return min((t for k in self.pending if (t := fire_at_of(k)) > after_ms), default=None)


def parse_kind(key: bytes) -> str:
    return "timeout" if is_timeout(key) else "moment"


@pytest.fixture
def clocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Processor, Clock]:
    clock = Clock()
    monkeypatch.setattr(processor_module, "wall_ms", clock)
    settings = ClusterSettings("p", 1, 1, 1, 0, "test")
    proc = Processor("127.0.0.1:1", settings, ProcessorOptions(data_dir=tmp_path, owner_id="test"))
    monkeypatch.setattr(proc, "_ship", lambda *args: None)  # no producer: what is decided is the question here
    return proc, clock


def test_due_moments_fire_before_the_batchs_commands_and_timeouts_after_them(
        clocked: tuple[Processor, Clock]) -> None:
    """A due user timer does not wait for the batch's commands (a wave of them did, S4); a due timeout still comes
    after every command read before it fell due (the input gate). Every decision is stamped with its own time, and
    time never goes back."""
    proc, clock = clocked
    moment, timeout = at(NOW - 1), at(NOW - 1, "ACTIVITY_START_TO_CLOSE")
    shard = BusyShard(clock, [moment, timeout])
    proc.shards = cast(dict[int, Shard], {0: shard})
    proc._transaction(commands(3), {0: [moment, timeout]}, NOW)
    assert shard.log == [("moment", NOW), ("command 0", NOW + 10), ("command 1", NOW + 20), ("command 2", NOW + 30),
                         ("timeout", NOW + 30)]  # no earlier than the last command


def test_a_moment_due_while_commands_were_decided_fires_at_the_first_look_while_the_last_batch_commits(
        clocked: tuple[Processor, Clock]) -> None:
    """The open batch decided commands until NOW + 30; a moment due at NOW + 5 fell due meanwhile. While the last
    batch's commit is in flight, the first look fires it, stamped no earlier than the last decision, instead of
    leaving it for the next batch (after this commit, a produce and another commit)."""
    proc, clock = clocked
    moment = at(NOW + 5)
    shard = BusyShard(clock, [moment])
    proc.shards = cast(dict[int, Shard], {0: shard})
    clock.now = NOW + 30
    done: Future[tuple[float, float]] = Future()
    proc._flight = Flight(1, {}, 0, 0, 0.0, 0.0, 0.0, 0.0, done)

    class Looks:
        def consume(self, room: int, timeout: float) -> list[Message]:
            done.set_result((0.0, 0.0))  # the commit returns during the first look
            return []

    proc.consumer = cast(Consumer, Looks())
    touched: set[int] = set()
    assert proc._decide_in_flight(NOW, NOW + 30, touched, 3) == (0, 1, NOW + 40)  # the look after the firing
    assert shard.log == [("moment", NOW + 30)] and touched == {0}
