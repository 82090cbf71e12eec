"""Timeouts wait until the shard's commands written before they fell due are read; other deadlines never wait."""

from __future__ import annotations

from ostinato.services.history.changelog import timer_key
from ostinato.services.history.input_gate import UNKNOWN, InputGate, is_timeout
from ostinato.streams.actions import Deadline


def key(fire_at: int, kind: str) -> bytes:
    return timer_key("ns", f"wf-{kind}-{fire_at}", Deadline(fire_at, kind, "run", scheduled_event_id=5, attempt=1))


TIMEOUT = key(100, "ACTIVITY_START_TO_CLOSE")
USER = key(100, "USER_TIMER")


def test_timeouts_and_moments_are_told_apart() -> None:
    assert all(is_timeout(k) for k in (TIMEOUT, key(1, "WORKFLOW_TASK_TIMEOUT"), key(1, "ACTIVITY_HEARTBEAT")))
    assert not any(is_timeout(key(1, k)) for k in ("USER_TIMER", "ACTIVITY_RETRY", "RETENTION", "WORKFLOW_BACKOFF"))


def test_caught_up_fires_at_once() -> None:
    gate = InputGate()
    assert gate.judge([TIMEOUT, USER], now_ms=100, position=7, high_watermark=7) == ([TIMEOUT, USER], 0)
    assert gate.target is None


def test_a_stuck_partition_holds_timeouts_but_not_user_timers() -> None:
    gate = InputGate()
    # An open transaction at offset 5: the consumer cannot pass it although offsets up to 9 exist.
    for now in (100, 600, 2_000):
        assert gate.judge([TIMEOUT, USER], now_ms=now, position=5, high_watermark=9 + now) == ([USER], 1)
    assert gate.target == 109 and gate.held_for_ms(2_000) == 1_900
    # The transaction is aborted and what was behind it is read: the timeout fires (unless a completion, now
    # processed first in the same batch, removed it from the index).
    assert gate.judge([TIMEOUT], now_ms=2_100, position=109, high_watermark=120) == ([TIMEOUT], 0)
    assert gate.held_for_ms(2_100) == 0


def test_timeouts_due_after_the_target_was_taken_wait_for_a_new_one() -> None:
    gate = InputGate()
    later = key(150, "WORKFLOW_TASK_TIMEOUT")
    assert gate.judge([TIMEOUT], now_ms=100, position=3, high_watermark=4) == ([], 1)
    ready, held = gate.judge([TIMEOUT, later], now_ms=150, position=4, high_watermark=6)
    assert (ready, held) == ([TIMEOUT], 1)
    assert gate.judge([later], now_ms=151, position=6, high_watermark=6) == ([later], 0)


def test_nothing_fetched_yet_holds() -> None:
    gate = InputGate()
    assert gate.judge([TIMEOUT, USER], now_ms=100, position=-1001, high_watermark=UNKNOWN) == ([USER], 1)
    assert gate.judge([TIMEOUT], now_ms=130, position=12, high_watermark=12) == ([TIMEOUT], 0)
