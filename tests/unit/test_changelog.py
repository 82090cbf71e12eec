"""Timer index keys, and how state and history changelog records become store content (restore's half of it)."""

from __future__ import annotations

import itertools

import pytest

from ostinato.schemas import codec
from ostinato.schemas.keys import history_key, run_key, workflow_key
from ostinato.schemas.wire import HISTORY_EVENT
from ostinato.services.history.changelog import ChangelogApplier, fire_at_of, parse_timer_key, timer_key
from ostinato.services.history.store import Family, MemoryStore, pack_int, unpack_int
from ostinato.streams.actions import Deadline
from ostinato.streams.config import Config
from ostinato.streams.deadlines import deadlines
from ostinato.streams.engine import InMemoryEngine
from ostinato.streams.model import decode_run

NS, Q = "default", "orders"
CONFIG = Config()


def deadline(fire_at: int, kind: str = "USER_TIMER", run_id: str = "r", timer_id: str = "t", sid: int = 0,
             attempt: int = 0) -> Deadline:
    return Deadline(fire_at, kind, run_id, timer_id, sid, attempt)


# -- timer keys ------------------------------------------------------------------------------------------------------

def test_timer_keys_sort_by_fire_time_across_byte_boundaries() -> None:
    times = [0, 1, 255, 256, 65_535, 65_536, 2**24, 2**32 - 1, 2**32, 1_704_067_200_000, 2**62]
    # Later ids and kinds on earlier deadlines: only the fire time may decide the order.
    names = itertools.cycle(["zzz", "a", "m", "~"])
    keys = [timer_key(NS, next(names), deadline(t, run_id=next(names))) for t in times]
    assert [fire_at_of(k) for k in sorted(reversed(keys))] == times
    assert timer_key("a", "a", deadline(255)) < timer_key("a", "a", deadline(256))
    assert timer_key("zz", "zz", deadline(255, "WORKFLOW_TASK_TIMEOUT")) < timer_key("a", "a", deadline(256))


def test_ties_break_on_the_rest_of_the_key_and_equal_deadlines_share_one_key() -> None:
    a = timer_key(NS, "wf-a", deadline(1_000))
    b = timer_key(NS, "wf-b", deadline(1_000))
    assert a < b
    assert timer_key(NS, "wf-a", deadline(1_000, timer_id="t1")) < timer_key(NS, "wf-a", deadline(1_000, timer_id="t2"))
    assert timer_key(NS, "wf-a", deadline(1_000)) == a  # scheduling an identical deadline twice is one entry
    assert len({a, b, timer_key(NS, "wf-a", deadline(1_000, attempt=1))}) == 3


@pytest.mark.parametrize(("workflow_id", "timer_id", "run_id"), [
    ("order-1", "t", "r-1"),
    ("a/b", "x/y", "r/1"),
    ("100%", "%2F", "%25/%"),
    ("%2F/%25", "/", "%"),
    ("ünïcode ✓", "", "r"),
])
def test_parse_timer_key_round_trips(workflow_id: str, timer_id: str, run_id: str) -> None:
    for d in (deadline(1_704_067_200_123, "USER_TIMER", run_id, timer_id),
              deadline(256, "ACTIVITY_START_TO_CLOSE", run_id, "", 17, 3),
              deadline(0, "RETENTION", run_id, "")):
        key = timer_key("ns/with%slash", workflow_id, d)
        assert parse_timer_key(key) == ("ns/with%slash", workflow_id, d)
        assert fire_at_of(key) == d.fire_at_ms


def test_ids_that_look_like_escapes_do_not_collide() -> None:
    keys = {timer_key(NS, wf, deadline(5)) for wf in ("a/b", "a%2Fb", "a%252Fb", "a", "a/")}
    assert len(keys) == 5


# -- the state changelog: timer index entries ------------------------------------------------------------------------

def started(workflow_id: str = "w/1") -> tuple[InMemoryEngine, bytes, bytes]:
    """An engine with one started run; (engine, run key, encoded state as the state changelog carries it)."""
    engine = InMemoryEngine(shards=1)
    reply = engine.start_workflow(NS, workflow_id, "Order", Q)
    assert reply is not None
    key = run_key(NS, workflow_id, reply["body"][1]["run_id"])
    return engine, key.encode(), engine.shards[0].state[key]


def state_now(engine: InMemoryEngine, key: bytes) -> bytes:
    return engine.shards[0].state[key.decode()]


def expected_timers(workflow_id: str, value: bytes) -> dict[bytes, bytes]:
    return {timer_key(NS, workflow_id, d): b"" for d in deadlines(decode_run(value), CONFIG)}


def live(writes: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    return {k: v for k, v in writes.items() if v is not None}


def test_state_records_add_and_remove_timer_entries_as_deadlines_change() -> None:
    engine, key, first = started()
    applier = ChangelogApplier(lambda f, k: None, CONFIG)
    applier.state(key, first)
    assert [parse_timer_key(k)[2].kind for k in live(applier.writes[Family.TIMERS])] == ["WORKFLOW_TASK_TIMEOUT"]
    assert applier.writes[Family.STATE] == {key: first}

    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    timer = {"timer_id": "nap", "start_to_fire_timeout_ms": 60_000}
    engine.complete_workflow_task(polled[1], [("StartTimerCommand", timer)])
    second = state_now(engine, key)
    applier.state(key, second)

    timers = applier.writes[Family.TIMERS]
    assert live(timers) == expected_timers("w/1", second)
    assert [parse_timer_key(k)[2].kind for k in live(timers)] == ["USER_TIMER"]
    assert [parse_timer_key(k)[2].kind for k, v in timers.items() if v is None] == ["WORKFLOW_TASK_TIMEOUT"]
    assert applier.get(Family.STATE, key) == second


def test_a_state_record_reads_the_previous_value_from_the_store() -> None:
    engine, key, first = started()
    store = MemoryStore()
    applier = ChangelogApplier(store.get, CONFIG)
    applier.state(key, first)
    store.write(applier.writes)
    assert dict(store.scan(Family.TIMERS)) == expected_timers("w/1", first)

    engine.terminate(NS, "w/1", "enough")
    closed = state_now(engine, key)
    applier = ChangelogApplier(store.get, CONFIG)  # a later batch: the old value is only in the store
    applier.state(key, closed)
    store.write(applier.writes)
    assert dict(store.scan(Family.TIMERS)) == expected_timers("w/1", closed)
    assert [parse_timer_key(k)[2].kind for k, _ in store.scan(Family.TIMERS)] == ["RETENTION"]


def test_a_tombstone_removes_the_runs_timer_entries() -> None:
    _, key, first = started()
    store = MemoryStore()
    applier = ChangelogApplier(store.get, CONFIG)
    applier.state(key, first)
    store.write(applier.writes)

    applier = ChangelogApplier(store.get, CONFIG)
    applier.state(key, None)
    applier.state(key, None)  # a second tombstone has nothing left to remove
    store.write(applier.writes)
    assert list(store.scan(Family.TIMERS)) == []
    assert list(store.scan(Family.STATE)) == []


def test_the_current_run_pointer_touches_no_timers() -> None:
    engine, _, _ = started("w/2")
    pointer = workflow_key(NS, "w/2").encode()
    applier = ChangelogApplier(lambda f, k: None, CONFIG)
    applier.state(pointer, engine.shards[0].state[pointer.decode()])
    applier.state(pointer, None)
    assert applier.writes[Family.TIMERS] == {}
    assert applier.writes[Family.STATE] == {pointer: None}


def test_applying_the_same_state_record_twice_is_harmless() -> None:
    _, key, first = started()
    store = MemoryStore()
    for _ in range(2):  # a restore resuming from an older checkpoint sees records the store already has
        applier = ChangelogApplier(store.get, CONFIG)
        applier.state(key, first)
        applier.state(key, first)
        store.write(applier.writes)
        assert dict(store.scan(Family.TIMERS)) == expected_timers("w/1", first)


def test_timers_of_two_runs_of_one_workflow_are_kept_apart() -> None:
    engine, first_key, _ = started("w/3")
    engine.terminate(NS, "w/3")
    reply = engine.start_workflow(NS, "w/3", "Order", Q)
    assert reply is not None
    second_key = run_key(NS, "w/3", reply["body"][1]["run_id"]).encode()
    store = MemoryStore()
    applier = ChangelogApplier(store.get, CONFIG)
    for k in (first_key, second_key):
        applier.state(k, state_now(engine, k))
    store.write(applier.writes)
    kinds = sorted(parse_timer_key(k)[2].kind for k, _ in store.scan(Family.TIMERS))
    assert kinds == ["RETENTION", "WORKFLOW_TASK_TIMEOUT"]

    applier = ChangelogApplier(store.get, CONFIG)
    applier.state(first_key, None)  # retention deletes the old run; the new one keeps its deadline
    store.write(applier.writes)
    assert [parse_timer_key(k)[2].kind for k, _ in store.scan(Family.TIMERS)] == ["WORKFLOW_TASK_TIMEOUT"]


# -- the history changelog: sizes ------------------------------------------------------------------------------------

def test_history_records_add_up_to_the_engines_history_size() -> None:
    engine, key, _ = started("w/4")
    engine.signal(NS, "w/4", "poke")
    (ns, wf, run_id), events = next(iter(engine.histories.items()))
    applier = ChangelogApplier(lambda f, k: None, CONFIG)
    for event in events:
        applier.history(history_key(ns, wf, run_id, event["event_id"]).encode(), codec.encode(HISTORY_EVENT, event))
    assert unpack_int(applier.writes[Family.SIZES][key]) == engine.history_bytes[(ns, wf, run_id)]
    assert len(applier.writes[Family.HISTORY]) == len(events)


def test_applying_a_history_record_twice_does_not_double_its_size() -> None:
    store = MemoryStore()
    run = run_key(NS, "w/5", "r").encode()
    k1, k2 = (history_key(NS, "w/5", "r", i).encode() for i in (1, 2))
    applier = ChangelogApplier(store.get, CONFIG)
    applier.history(k1, b"x" * 10)
    applier.history(k1, b"x" * 10)
    assert unpack_int(applier.get(Family.SIZES, run)) == 10
    store.write(applier.writes)

    applier = ChangelogApplier(store.get, CONFIG)  # again, from a checkpoint older than the store's content
    applier.history(k1, b"x" * 10)
    applier.history(k2, b"y" * 7)
    store.write(applier.writes)
    assert unpack_int(store.get(Family.SIZES, run)) == 17


def test_sizes_are_per_run() -> None:
    applier = ChangelogApplier(lambda f, k: None, CONFIG)
    applier.history(history_key(NS, "w", "r1", 1).encode(), b"a" * 3)
    applier.history(history_key(NS, "w", "r2", 1).encode(), b"b" * 5)
    applier.history(history_key(NS, "w/r1", "x", 1).encode(), b"c" * 7)  # an id with a slash is another workflow
    assert {k: unpack_int(v) for k, v in applier.writes[Family.SIZES].items()} == {
        run_key(NS, "w", "r1").encode(): 3, run_key(NS, "w", "r2").encode(): 5, run_key(NS, "w/r1", "x").encode(): 7}


def test_a_history_tombstone_clears_the_runs_size() -> None:
    store = MemoryStore()
    run = run_key(NS, "w/6", "r").encode()
    keys = [history_key(NS, "w/6", "r", i).encode() for i in (1, 2, 3)]
    store.write({Family.HISTORY: dict.fromkeys(keys, b"e" * 4), Family.SIZES: {run: pack_int(12)}})

    applier = ChangelogApplier(store.get, CONFIG)
    for k in keys:
        applier.history(k, None)
    store.write(applier.writes)
    assert store.get(Family.SIZES, run) is None
    assert list(store.scan(Family.HISTORY)) == []

    applier = ChangelogApplier(store.get, CONFIG)
    applier.history(keys[0], b"new")  # a history written after the deletion counts from zero
    assert unpack_int(applier.get(Family.SIZES, run)) == 3


def test_a_tombstone_then_a_record_in_one_batch_counts_from_zero() -> None:
    store = MemoryStore()
    run = run_key(NS, "w/7", "r").encode()
    key = history_key(NS, "w/7", "r", 1).encode()
    store.write({Family.HISTORY: {key: b"old!"}, Family.SIZES: {run: pack_int(4)}})
    applier = ChangelogApplier(store.get, CONFIG)
    applier.history(key, None)
    applier.history(key, b"newer")
    assert unpack_int(applier.get(Family.SIZES, run)) == 5
    assert applier.get(Family.HISTORY, key) == b"newer"


def test_same_time_deadlines_order_like_the_in_memory_engines_index() -> None:
    engine = InMemoryEngine(shards=1)
    engine.start_workflow(NS, "fan", "Fan", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], [
        *[("ScheduleActivityTaskCommand", {"activity_id": f"a{i}", "activity_type": "A", "start_to_close_timeout_ms": 9,
                                           "schedule_to_close_timeout_ms": 3_000}) for i in range(7)],
        *[("StartTimerCommand", {"timer_id": t, "start_to_fire_timeout_ms": 3_000}) for t in ("a", "a-b")]])
    in_engine = engine.pending_deadlines()
    assert len(in_engine) == 9
    assert sorted(in_engine, key=lambda found: timer_key(*found)) == in_engine
