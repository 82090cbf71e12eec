"""Batches decided while the previous one's commit is in flight (issue 15): a shard's sealed batch lies between
its store and the open batch's overlay until it lands. Whatever the split into batches and however late each lands,
a shard must give the same records and the same store as committing each batch before deciding the next; an abort
of the sealed batch drops both, and deciding them again gives the same records once more."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.services.history.shard import Output, Sealed, Shard
from ostinato.services.history.store import Family, MemoryStore
from ostinato.streams import events as ev
from ostinato.streams.config import Config
from tests.unit.shard_support import (
    NOW,
    complete_command,
    event_types,
    family,
    signal_command,
    start_command,
    start_timer,
    topology,
    workflow_on,
    workflow_tasks,
)

S, HOME = 3, 1
IDS = [workflow_on(HOME, S, "pipe", skip=i) for i in range(3)]
TIMER = start_timer(1_000)
CONFIG = Config()

# A step of a script: a command to decide, or a look at the clock that fires what is due (the processor's `_fire`).
# Time moves 1 s a step: a 1 s timer armed in one batch is due in the next; task timeouts (10 s) fall due too.
Step = tuple[str, int, int]  # (kind, workflow index, variant)
steps = st.lists(st.tuples(st.sampled_from(["start", "signal", "complete", "fire"]), st.integers(0, 1),
                           st.integers(0, 1)), min_size=1, max_size=40)


def play(script: list[Step], cuts: set[int], pipelined: bool, abort_at: int | None = None,
         land_at: dict[int, int] | None = None) -> tuple[list[Output], dict[Family, dict[bytes, bytes]]]:
    """Decide the script in batches ending after each index in `cuts`; pipelined, each batch is decided above the
    previous one, sealed and landed only after the next is decided. `abort_at`: that batch's commit fails after the
    next was decided on top of it, and both are decided again. `land_at`: batch -> how many of its commands are
    decided before the batch in flight lands (by default, all of them)."""
    land_at = land_at or {}
    shard = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    per_batch: dict[int, list[Output]] = {}  # the records of each landed batch
    batches: list[list[tuple[int, Step]]] = [[]]
    for i, step in enumerate(script):
        batches[-1].append((i, step))
        if i in cuts:
            batches.append([])

    def decide(n: int, land_after: int | None = None) -> None:
        # A worker answers tasks it was given: those of batches landed before the previous one (pipelined, the
        # previous batch is still in flight while this one is decided), in both modes alike.
        tasks = {IDS.index(t["workflow_id"]): t for m in range(n - 1) for t in workflow_tasks(per_batch[m])}
        for k, (offset, (kind, wf, variant)) in enumerate(batches[n]):
            if k == land_after:  # the processor lands the sealed batch between two commands when its commit returns
                land()
            now = NOW + 1_000 * offset
            if kind == "start":
                shard.process(start_command(IDS[wf], f"start-{wf}-{variant}"), offset, now)
            elif kind == "signal":
                shard.process(signal_command(IDS[wf], f"s{variant}", request_id=f"sig-{offset}"), offset, now)
            elif kind == "complete" and wf in tasks:
                command = complete_command(tasks[wf], *([TIMER] if variant else []), request_id=f"done-{offset}")
                shard.process(command, offset, now)
            elif kind == "fire":
                for key in shard.due_timers(now, 500):
                    shard.fire(key, offset, now)

    flight: list[tuple[int, Sealed]] = []  # (batch number, its sealed overlay) while its commit is in flight

    def land() -> None:
        if flight:
            n, sealed = flight.pop()
            per_batch[n] = sealed.outputs
            shard.land(sealed, {})

    for n in range(len(batches)):
        if not pipelined:
            decide(n)
            per_batch[n] = list(shard.outputs)
            shard.committed({})
            continue
        decide(n, land_after=land_at.get(n))
        if flight and flight[0][0] == abort_at:  # the sealed batch's commit failed: both dropped, decided again
            flight.clear()
            shard.reset()
            decide(n - 1)
            flight.append((n - 1, shard.seal()))
            decide(n)
        land()
        flight.append((n, shard.seal()))
    land()
    return [o for n in sorted(per_batch) for o in per_batch[n]], {f: family(shard.store, f) for f in Family}


@settings(max_examples=300, deadline=None)
@given(script=steps, cuts=st.sets(st.integers(0, 39)), abort=st.one_of(st.none(), st.integers(0, 10)),
       land_at=st.dictionaries(st.integers(0, 20), st.integers(0, 10)))
def test_pipelined_batches_give_the_records_and_store_of_batches_in_series(
        script: list[Step], cuts: set[int], abort: int | None, land_at: dict[int, int]) -> None:
    expected = play(script, cuts, pipelined=False)
    assert play(script, cuts, pipelined=True, abort_at=abort, land_at=land_at) == expected


def test_a_workflow_rejected_in_the_open_batch_is_not_cached_as_the_sealed_batch_left_it() -> None:
    """The sealed batch signals W; the open one signals it again, then a duplicate start of W is rejected (the open
    batch's copy is dropped and reloaded). Landing the sealed batch must not cache its older copy of W: the open
    batch's signal would be lost from the next batch's view."""
    shard = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    w = IDS[0]
    shard.process(start_command(w, "s"), 0, NOW)
    shard.committed({})
    shard.process(signal_command(w, "a", request_id="a"), 1, NOW)
    sealed = shard.seal()
    shard.process(signal_command(w, "b", request_id="b"), 2, NOW)
    shard.process(start_command(w, "again"), 3, NOW)
    assert [r.code for r in shard.rejections] == ["ALREADY_STARTED"]
    shard.land(sealed, {})
    shard.committed({})
    shard.process(signal_command(w, "c", request_id="c"), 4, NOW)
    [run] = [r for wf in [shard._load("default", w)] for r in wf.runs.values()]
    serial = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    for offset, data in enumerate([start_command(w, "s"), signal_command(w, "a", request_id="a"),
                                   signal_command(w, "b", request_id="b"), start_command(w, "again"),
                                   signal_command(w, "c", request_id="c")]):
        serial.process(data, offset, NOW)
    [expected] = serial._load("default", w).runs.values()
    assert run.history_length == expected.history_length


def test_one_batch_at_a_time_is_sealed_and_only_the_sealed_one_lands() -> None:
    shard = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    shard.process(start_command(IDS[0]), 0, NOW)
    sealed = shard.seal()
    with pytest.raises(RuntimeError, match="already sealed"):
        shard.seal()
    shard.reset()  # an abort drops the sealed batch too
    with pytest.raises(RuntimeError, match="not the sealed one"):
        shard.land(sealed, {})
    assert family(shard.store, Family.STATE) == {} and shard.get(Family.STATE, b"x") is None


def test_a_timer_armed_by_the_sealed_batch_fires_in_the_open_one_and_a_fired_one_does_not_fire_again() -> None:
    shard = Shard(HOME, MemoryStore(), topology(S), CONFIG)
    shard.process(start_command(IDS[0]), 0, NOW)
    [task] = workflow_tasks(shard.outputs)
    shard.committed({})
    shard.process(complete_command(task, TIMER), 1, NOW)
    sealed = shard.seal()  # its commit is in flight: the timer is in no store yet
    assert shard.next_timer_ms() == NOW + 1_000
    [key] = shard.due_timers(NOW + 1_000, 10)
    shard.fire(key, 2, NOW + 1_000)
    assert event_types(shard.outputs) == [ev.TIMER_FIRED, ev.WORKFLOW_TASK_SCHEDULED]
    shard.land(sealed, {})
    assert shard.due_timers(NOW + 1_000, 10) == []  # landed in the store, fired in the open batch
    fired = shard.seal()
    assert shard.due_timers(NOW + 1_000, 10) == []  # fired in the sealed batch, still in the store's index
    shard.land(fired, {})
    assert [k for k in family(shard.store, Family.TIMERS) if k == key] == []
