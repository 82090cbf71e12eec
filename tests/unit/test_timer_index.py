"""The in-memory timer index walks exactly the store's keys, whatever its window and the commits in between."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.services.history.timer_index import TimerIndex

KEYS = st.binary(min_size=1, max_size=3)
WRITES = st.dictionaries(KEYS, st.one_of(st.none(), st.just(b"")), max_size=8)


class Store:
    """The shard store's timer family: sorted keys, read from a key on."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()
        self.reads = 0

    def load(self, start: bytes) -> Iterator[bytes]:
        self.reads += 1
        return iter(sorted(k for k in self.keys if k >= start))

    def commit(self, writes: dict[bytes, bytes | None]) -> None:
        for key, value in writes.items():
            if value is None:
                self.keys.discard(key)
            else:
                self.keys.add(key)


@settings(max_examples=300)
@given(before=WRITES, commits=st.lists(st.tuples(WRITES, KEYS), max_size=12), window=st.integers(1, 4))
def test_a_walk_meets_every_committed_key_in_order(before: dict[bytes, bytes | None],
                                                   commits: list[tuple[dict[bytes, bytes | None], bytes]],
                                                   window: int) -> None:
    store = Store()
    store.commit(before)
    index = TimerIndex(store.load, window=window)
    for writes, start in commits:
        assert list(index.walk(start)) == sorted(k for k in store.keys if k >= start)
        store.commit(writes)  # the store is written first, then the index follows (Shard.committed)
        index.apply(writes)
        assert len(index) <= max(2 * window, len(store.keys))
    assert list(index.walk()) == sorted(store.keys)


def test_the_store_is_read_once_while_the_window_holds_every_key() -> None:
    store = Store()
    store.commit({bytes([i]): b"" for i in range(10)})
    index = TimerIndex(store.load, window=100)
    for i in range(50):  # armed and cancelled: the tombstones a store scan would step over
        writes: dict[bytes, bytes | None] = {bytes([20, i]): b""}
        store.commit(writes)
        index.apply(writes)
        writes = {bytes([20, i]): None}
        store.commit(writes)
        index.apply(writes)
        assert next(index.walk()) == b"\x00"
    assert store.reads == 1
    assert not index.bounded


def test_keys_past_the_window_are_read_when_the_walk_reaches_them() -> None:
    store = Store()
    store.commit({bytes([i]): b"" for i in range(10)})
    index = TimerIndex(store.load, window=3)
    assert list(index.walk()) == [bytes([i]) for i in range(10)]
    assert store.reads == 4  # 3 + 3 + 3 + the last one
    assert next(index.walk(b"\x08")) == b"\x08"


def test_a_key_committed_past_the_bound_waits_in_the_store_for_its_turn() -> None:
    store = Store()
    store.commit({bytes([i]): b"" for i in range(1, 6)})
    index = TimerIndex(store.load, window=2)
    assert next(index.walk()) == b"\x01"  # holds 1 and 2
    writes: dict[bytes, bytes | None] = {b"\x09": b"", b"\x04": None}
    store.commit(writes)
    index.apply(writes)
    assert list(index.walk()) == [b"\x01", b"\x02", b"\x03", b"\x05", b"\x09"]


def test_a_walk_from_past_the_bound_keeps_nothing() -> None:
    """A backlog of overdue deadlines is not loaded to look behind it (the batch's stop asks for the first
    deadline after now)."""
    store = Store()
    store.commit({bytes([i]): b"" for i in range(100)})
    index = TimerIndex(store.load, window=4)
    assert next(index.walk()) == b"\x00"
    assert next(index.walk(bytes([90]))) == bytes([90])
    assert len(index) <= 8


def test_a_failed_first_read_is_tried_again() -> None:
    store = Store()
    store.commit({b"\x01": b""})
    failing = True

    def load(start: bytes) -> Iterator[bytes]:
        if failing:
            raise RuntimeError("the store is closed")
        return store.load(start)

    index = TimerIndex(load, window=4)
    with pytest.raises(RuntimeError):
        next(index.walk())
    failing = False
    assert list(index.walk()) == [b"\x01"]
