"""The worker commits a partition only up to its first unfinished task, whatever order tasks finish in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ostinato.sdk._kafka_worker import OffsetTracker

T = "q.activity"


def _committed(tracker: OffsetTracker) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in tracker.committable()}


def test_commits_up_to_the_first_pending_task() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.begin(T, 0, offset)
    assert _committed(tracker) == {(T, 0): 10}  # nothing done: the position before the first
    tracker.done(T, 0, 12)
    assert _committed(tracker) == {}  # 10 and 11 still pending: no progress to report
    tracker.done(T, 0, 10)
    assert _committed(tracker) == {(T, 0): 11}
    tracker.done(T, 0, 11)
    assert _committed(tracker) == {(T, 0): 13}


def test_partitions_are_independent_and_revoked_ones_are_forgotten() -> None:
    from confluent_kafka import TopicPartition

    tracker = OffsetTracker()
    tracker.begin(T, 0, 5)
    tracker.begin(T, 1, 7)
    tracker.done(T, 1, 7)
    assert _committed(tracker) == {(T, 0): 5, (T, 1): 8}
    tracker.forget([TopicPartition(T, 0)])
    tracker.done(T, 0, 5)  # finished after the revocation: its next owner commits it
    assert _committed(tracker) == {}


@given(st.permutations(list(range(20))), st.integers(min_value=0, max_value=20))
def test_never_commits_past_an_unfinished_task(order: list[int], finished: int) -> None:
    tracker = OffsetTracker()
    for offset in range(20):
        tracker.begin(T, 0, offset)
    done = set(order[:finished])
    for offset in order[:finished]:
        tracker.done(T, 0, offset)
    expected = next((o for o in range(20) if o not in done), 20)
    assert _committed(tracker) == {(T, 0): expected}
