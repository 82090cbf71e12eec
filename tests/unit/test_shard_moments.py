"""A shard's due and next deadlines (`Shard.due_timers`, `Shard.next_timer_ms`) are read from a view of the
overlays' deadlines kept between changes (`Shard._moments`). Whatever commands, firings, seals, landings and aborts
come in whatever order, both must answer what the store and the two overlays hold at that moment."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.services.history.changelog import fire_at_of
from ostinato.services.history.shard import Output, Sealed, Shard
from ostinato.services.history.store import Family, MemoryStore
from ostinato.streams.config import Config
from tests.unit.shard_support import (
    NOW,
    complete_command,
    signal_command,
    start_command,
    start_timer,
    topology,
    workflow_on,
    workflow_tasks,
)

S, HOME = 3, 1
IDS = [workflow_on(HOME, S, "moments", skip=i) for i in range(3)]
TIMER = start_timer(1_000)
LIMIT = 10_000  # no cut: every due deadline is answered
KINDS = ["start", "signal", "complete", "fire", "seal", "land", "reset"]


def expected(shard: Shard, sealed: Sealed | None, now: int, after: int) -> tuple[list[bytes], int | None]:
    """Due keys and the next fire time after `after`, from the store and the overlays themselves."""
    overlay: dict[bytes, bytes | None] = {}
    if sealed is not None:
        overlay.update(sealed.writes[Family.TIMERS])
    overlay.update(shard.writes[Family.TIMERS])
    stored = {k for k, _ in shard.store.scan(Family.TIMERS)}
    added = {k for k, v in overlay.items() if v is not None}  # b"": armed by a batch; None: cancelled or fired
    live = sorted({k for k in stored if overlay.get(k, b"") is not None} | added)
    due = [k for k in live if fire_at_of(k) <= now]
    return due, min((fire_at_of(k) for k in live if fire_at_of(k) > after), default=None)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, len(IDS) - 1), st.integers(0, 3)),
                min_size=1, max_size=50))
def test_due_and_next_deadlines_follow_every_change_of_the_overlays(script: list[tuple[str, int, int]]) -> None:
    shard = Shard(HOME, MemoryStore(), topology(S), Config())
    sealed: Sealed | None = None
    outputs: list[Output] = []
    now = NOW
    for offset, (kind, wf, variant) in enumerate(script):
        now += 400  # a 1 s timer armed now is due three steps later; task timeouts (10 s) fall due too
        if kind == "start":
            shard.process(start_command(IDS[wf], request_id=f"start-{offset}"), offset, now)
        elif kind == "signal":
            shard.process(signal_command(IDS[wf], "poke", request_id=f"signal-{offset}"), offset, now)
        elif kind == "complete":
            tasks = [t for t in workflow_tasks(outputs + shard.outputs) if t["workflow_id"] == IDS[wf]]
            if tasks:
                task = tasks[-1 - variant % len(tasks)]
                shard.process(complete_command(task, TIMER, request_id=f"complete-{offset}"), offset, now)
        elif kind == "fire":
            for key in shard.due_timers(now, variant + 1):
                shard.fire(key, offset, now)
        elif kind == "seal" and sealed is None:
            outputs += shard.outputs
            sealed = shard.seal()
        elif kind == "land" and sealed is not None:
            shard.land(sealed, {})
            sealed = None
        elif kind == "reset":
            shard.reset()
            sealed = None
        for at, after in ((now, now), (now + 1_000 * variant, -1), (now + 20_000, now - 5_000)):
            due, following = expected(shard, sealed, at, after)
            assert shard.due_timers(at, LIMIT) == due, (offset, kind)
            assert shard.next_timer_ms(after) == following, (offset, kind)
