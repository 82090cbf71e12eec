"""How many commands the processor takes in one batch when deadlines are near (issue 15: timers on time)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from ostinato.services.history.processor import MIN_ROOM, TIMER_SLACK_S, batch_room

NOW = 1_000_000


def test_without_a_deadline_or_a_measured_cost_a_batch_takes_everything_allowed() -> None:
    assert batch_room(500, None, 0.001, NOW, holding=False) == 500
    assert batch_room(500, NOW + 10, 0.0, NOW, holding=False) == 500  # nothing measured yet


def test_a_batch_ends_about_when_the_next_deadline_falls_due() -> None:
    # 1 ms a decision, the deadline 100 ms away: 100 commands fit, plus the slack's worth.
    assert batch_room(500, NOW + 100, 0.001, NOW, holding=False) == 100 + int(TIMER_SLACK_S * 1000)
    # Far away: the cap.
    assert batch_room(500, NOW + 10_000, 0.001, NOW, holding=False) == 500


def test_a_deadline_already_due_leaves_room_for_the_slack_only_but_never_less_than_the_minimum() -> None:
    assert batch_room(500, NOW - 50, 0.0005, NOW, holding=False) == int(TIMER_SLACK_S / 0.0005)
    assert batch_room(500, NOW - 50, 0.05, NOW, holding=False) == MIN_ROOM


def test_timeouts_held_for_their_inputs_do_not_shrink_batches() -> None:
    """The held timeouts wait for the consumer to read past a high watermark: small batches would delay that."""
    assert batch_room(500, NOW - 50, 0.001, NOW, holding=True) == 500


@example(max_batch=500, due=2 * NOW, cost=5e-324, holding=False)  # the quotient overflows to infinity (CI found it)
@given(max_batch=st.integers(1, 10_000), due=st.one_of(st.none(), st.integers(0, 2 * NOW)),
       cost=st.floats(0, 10, allow_nan=False), holding=st.booleans())
def test_the_room_is_always_between_the_minimum_and_the_cap(max_batch: int, due: int | None, cost: float,
                                                            holding: bool) -> None:
    room = batch_room(max_batch, due, cost, NOW, holding)
    assert min(MIN_ROOM, max_batch) <= room <= max_batch
