"""The shard store contract, run against MemoryStore and RocksStore alike; then what only RocksDB can do: survive
a reopen, refuse a second opener, and be wiped (only) when it cannot be trusted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ostinato.services.history.store import (
    CHECKPOINT_STATE,
    FORMAT,
    FORMAT_VERSION,
    Family,
    MemoryStore,
    RocksStore,
    ShardStore,
    StoreClosed,
    StoreCorrupt,
    StoreLocked,
    open_rocks,
    pack_int,
    unpack_int,
)

KEYS = [b"", b"\x00", b"a", b"a/", b"a/1", b"a/2", b"a0", b"a\xff", b"b", b"\xff", b"\xff\xff"]


@pytest.fixture(params=["memory", "rocks"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShardStore]:
    opened: ShardStore = MemoryStore() if request.param == "memory" else RocksStore(tmp_path / "shard-0")
    yield opened
    opened.close()


def keys(pairs: Iterator[tuple[bytes, bytes]]) -> list[bytes]:
    return [k for k, _ in pairs]


# -- the contract ----------------------------------------------------------------------------------------------------

def test_get_write_delete(store: ShardStore) -> None:
    assert store.get(Family.STATE, b"k") is None
    store.write({Family.STATE: {b"k": b"v1"}})
    assert store.get(Family.STATE, b"k") == b"v1"
    store.write({Family.STATE: {b"k": b"v2"}})
    assert store.get(Family.STATE, b"k") == b"v2"
    store.write({Family.STATE: {b"k": None, b"never-there": None}})  # deleting an absent key is no error
    assert store.get(Family.STATE, b"k") is None
    assert store.get(Family.STATE, b"never-there") is None


def test_an_empty_value_is_a_value_not_a_deletion(store: ShardStore) -> None:
    store.write({Family.TIMERS: {b"t": b""}})  # the timer index stores b"" values
    assert store.get(Family.TIMERS, b"t") == b""
    assert list(store.scan(Family.TIMERS)) == [(b"t", b"")]


def test_families_are_separate(store: ShardStore) -> None:
    store.write({f: {b"same-key": f.value.encode()} for f in Family})
    assert {f: store.get(f, b"same-key") for f in Family} == {f: f.value.encode() for f in Family}
    store.write({Family.HISTORY: {b"same-key": None}})
    assert store.get(Family.HISTORY, b"same-key") is None
    assert store.get(Family.STATE, b"same-key") == b"state"
    assert keys(store.scan(Family.SIZES)) == [b"same-key"]


def test_scan_returns_keys_in_byte_order(store: ShardStore) -> None:
    store.write({Family.HISTORY: {k: b"v" + k for k in reversed(KEYS)}})
    assert list(store.scan(Family.HISTORY)) == [(k, b"v" + k) for k in sorted(KEYS)]
    assert keys(store.scan(Family.HISTORY, start=b"a0")) == [b"a0", b"a\xff", b"b", b"\xff", b"\xff\xff"]
    assert keys(store.scan(Family.HISTORY, start=b"a00")) == [b"a\xff", b"b", b"\xff", b"\xff\xff"]  # not a key
    assert keys(store.scan(Family.HISTORY, start=b"\xff\xff\xff")) == []


def test_scan_with_a_prefix_stops_at_its_end(store: ShardStore) -> None:
    store.write({Family.STATE: dict.fromkeys(KEYS, b"v")})
    assert keys(store.scan(Family.STATE, prefix=b"a/")) == [b"a/", b"a/1", b"a/2"]
    assert keys(store.scan(Family.STATE, prefix=b"a")) == [b"a", b"a/", b"a/1", b"a/2", b"a0", b"a\xff"]
    assert keys(store.scan(Family.STATE, prefix=b"\xff")) == [b"\xff", b"\xff\xff"]
    assert keys(store.scan(Family.STATE, prefix=b"c")) == []
    assert keys(store.scan(Family.STATE, prefix=b"a/", start=b"a/1")) == [b"a/1", b"a/2"]  # start inside the prefix
    assert keys(store.scan(Family.STATE, prefix=b"a/", start=b"")) == [b"a/", b"a/1", b"a/2"]  # start before it
    assert keys(store.scan(Family.STATE, prefix=b"a/", start=b"a0")) == []  # start past it


def test_scan_leaves_out_deleted_keys(store: ShardStore) -> None:
    store.write({Family.STATE: dict.fromkeys(KEYS, b"v")})
    store.write({Family.STATE: {b"a/1": None, b"a": None, b"\xff\xff": None}})
    assert keys(store.scan(Family.STATE)) == [k for k in sorted(KEYS) if k not in (b"a/1", b"a", b"\xff\xff")]
    assert keys(store.scan(Family.STATE, prefix=b"a/")) == [b"a/", b"a/2"]
    store.write({Family.STATE: {b"a/1": b"back"}})
    assert list(store.scan(Family.STATE, prefix=b"a/")) == [(b"a/", b"v"), (b"a/1", b"back"), (b"a/2", b"v")]


def test_keys_under_a_prefix_are_those_the_scan_finds(store: ShardStore) -> None:
    store.write({Family.STATE: dict.fromkeys(KEYS, b"v")})
    store.write({Family.STATE: {b"a/1": None}})
    for prefix in (b"a/", b"a", b"\xff", b"c", b"", b"a/2", b"a/3"):
        assert store.keys(Family.STATE, prefix) == keys(store.scan(Family.STATE, prefix=prefix)), prefix
    assert store.keys(Family.STATE, b"a/") == [b"a/", b"a/2"]
    assert store.keys(Family.HISTORY, b"a/") == []  # families are separate
    store.close()
    with pytest.raises(StoreClosed):
        store.keys(Family.STATE, b"a/")


def test_big_endian_keys_scan_in_numeric_order(store: ShardStore) -> None:
    times = [0, 1, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 1_704_067_200_000]
    store.write({Family.TIMERS: {pack_int(t): b"" for t in reversed(times)}})
    assert [unpack_int(k) for k in keys(store.scan(Family.TIMERS))] == times
    assert [unpack_int(k) for k in keys(store.scan(Family.TIMERS, start=pack_int(257)))] == times[4:]


def test_one_write_spans_every_family(store: ShardStore) -> None:
    store.write({Family.STATE: {b"s": b"1", b"gone": b"x"}, Family.TIMERS: {b"t": b""}})
    store.write({
        Family.STATE: {b"s": b"2", b"gone": None},
        Family.HISTORY: {b"h/1": b"e1", b"h/2": b"e2"},
        Family.TIMERS: {b"t": None, b"t2": b""},
        Family.SIZES: {b"h": pack_int(4)},
        Family.META: {CHECKPOINT_STATE: pack_int(17)},
    })
    assert list(store.scan(Family.STATE)) == [(b"s", b"2")]
    assert keys(store.scan(Family.HISTORY)) == [b"h/1", b"h/2"]
    assert keys(store.scan(Family.TIMERS)) == [b"t2"]
    assert unpack_int(store.get(Family.SIZES, b"h")) == 4
    assert unpack_int(store.get(Family.META, CHECKPOINT_STATE)) == 17


@pytest.mark.parametrize("store", [
    "memory",
    "rocks",
], indirect=True)
def test_a_write_that_fails_changes_nothing(store: ShardStore) -> None:
    store.write({Family.STATE: {b"k": b"old"}})
    with pytest.raises((TypeError, KeyError, ValueError)):
        store.write({Family.STATE: {b"k": None, b"new": b"1"}, Family.HISTORY: {"not bytes": b"x"}})  # type: ignore[dict-item]
    assert list(store.scan(Family.STATE)) == [(b"k", b"old")]


def test_a_closed_store_raises_store_closed_even_in_a_scan_under_way(store: ShardStore) -> None:
    store.write({Family.HISTORY: dict.fromkeys(KEYS, b"v")})
    scan = store.scan(Family.HISTORY)
    assert next(scan) == (b"", b"v")
    store.close()
    with pytest.raises(StoreClosed):
        next(scan)  # a reader holding the store when its shard moves meets StoreClosed, not a half-closed database
    with pytest.raises(StoreClosed):
        store.get(Family.STATE, b"k")
    with pytest.raises(StoreClosed):
        list(store.scan(Family.STATE))
    with pytest.raises(StoreClosed):
        store.write({Family.STATE: {b"k": b"v"}})
    store.close()  # closing again is harmless


def test_unpack_int_defaults_for_a_missing_value() -> None:
    assert unpack_int(None) == 0 and unpack_int(None, default=-1) == -1
    assert unpack_int(pack_int(-5)) == -5


# -- RocksDB on disk -------------------------------------------------------------------------------------------------

def test_close_and_reopen_keeps_everything_and_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "shard-3"
    store = RocksStore(path)
    store.write({Family.STATE: {b"a/b/r": b"run"}, Family.HISTORY: {b"a/b/r/1": b"e"}, Family.TIMERS: {b"t": b""},
                 Family.META: {CHECKPOINT_STATE: pack_int(9)}})
    store.close()

    for _ in range(3):  # the LOCK goes with close every time, not just once
        again = RocksStore(path)
        assert again.get(Family.STATE, b"a/b/r") == b"run"
        assert list(again.scan(Family.HISTORY)) == [(b"a/b/r/1", b"e")]
        assert list(again.scan(Family.TIMERS)) == [(b"t", b"")]
        assert unpack_int(again.get(Family.META, CHECKPOINT_STATE)) == 9
        assert again.get(Family.META, FORMAT) == FORMAT_VERSION
        again.close()


def test_closing_drops_the_iterator_of_an_unfinished_scan_so_the_lock_goes_too(tmp_path: Path) -> None:
    path = tmp_path / "shard-6"
    store = RocksStore(path)
    store.write({Family.HISTORY: dict.fromkeys(KEYS, b"v")})
    unfinished = store.scan(Family.HISTORY)
    next(unfinished)  # a reader stopped mid-scan (a RocksDB iterator alive would keep the LOCK)
    store.close()
    again = RocksStore(path)  # the shard comes back to this process at once
    assert len(list(again.scan(Family.HISTORY))) == len(KEYS)
    again.close()
    with pytest.raises(StoreClosed):
        next(unfinished)


def test_readers_on_another_thread_see_answers_or_store_closed_never_another_error(tmp_path: Path) -> None:
    """The owner's read API reads on the event loop while the processor thread closes a revoked shard's store."""
    for attempt in range(5):
        store = RocksStore(tmp_path / f"shard-{attempt}")
        store.write({Family.HISTORY: {f"k{i:04}".encode(): b"v" * 100 for i in range(500)}})
        seen: list[BaseException] = []
        started = threading.Event()

        def read(store: RocksStore = store, seen: list[BaseException] = seen, started: threading.Event = started,
                 ) -> None:
            try:
                while True:
                    started.set()
                    assert store.get(Family.HISTORY, b"k0001") == b"v" * 100
                    assert len(list(store.scan(Family.HISTORY, prefix=b"k0"))) == 500
            except BaseException as exc:  # noqa: BLE001 - the test inspects whatever the reader met
                seen.append(exc)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for reader in readers:
            reader.start()
        started.wait(5)
        store.close()
        for reader in readers:
            reader.join(10)
        assert [type(e) for e in seen] == [StoreClosed, StoreClosed], seen


def test_a_second_opener_is_refused_and_open_rocks_does_not_wipe_a_locked_store(tmp_path: Path) -> None:
    path = tmp_path / "shard-0"
    owner = open_rocks(path)
    owner.write({Family.STATE: {b"k": b"precious"}})

    with pytest.raises(StoreLocked, match="in use"):
        RocksStore(path)
    with pytest.raises(StoreLocked):
        open_rocks(path)

    assert owner.get(Family.STATE, b"k") == b"precious"  # the owner still works on an intact store
    owner.write({Family.STATE: {b"k2": b"more"}})
    owner.close()
    reopened = open_rocks(path)
    assert keys(reopened.scan(Family.STATE)) == [b"k", b"k2"]
    reopened.close()


def _filled(path: Path) -> None:
    store = RocksStore(path)
    for i in range(50):
        store.write({Family.STATE: {f"ns/wf-{i}/run".encode(): b"x" * 200},
                     Family.META: {CHECKPOINT_STATE: pack_int(i)}})
    store.close()
    RocksStore(path).close()  # a reopen flushes what the log held into table files


def _reopened_empty(path: Path) -> None:
    store = open_rocks(path)
    assert list(store.scan(Family.STATE)) == []
    assert store.get(Family.META, CHECKPOINT_STATE) is None  # restore starts from scratch
    assert store.get(Family.META, FORMAT) == FORMAT_VERSION
    store.write({Family.STATE: {b"k": b"v"}})
    store.close()
    store = open_rocks(path)
    assert store.get(Family.STATE, b"k") == b"v"
    store.close()


@pytest.mark.parametrize("victims", ["CURRENT", "MANIFEST-*", "*"])
def test_garbage_over_its_files_is_wiped_by_open_rocks(tmp_path: Path, victims: str) -> None:
    path = tmp_path / "shard-1"
    _filled(path)
    for file in path.glob(victims):
        if file.name != "LOCK":
            file.write_bytes(b"\x13garbage" * 40)

    with pytest.raises(StoreCorrupt):
        RocksStore(path)
    _reopened_empty(path)


@pytest.mark.parametrize("fmt", [b"0", b"2", b""])
def test_a_foreign_format_is_wiped_by_open_rocks(tmp_path: Path, fmt: bytes) -> None:
    path = tmp_path / "shard-2"
    _filled(path)
    store = RocksStore(path)
    store.write({Family.META: {FORMAT: fmt}})
    store.close()

    with pytest.raises(StoreCorrupt, match="format"):
        RocksStore(path)
    _reopened_empty(path)  # the refusing open closed the store: its LOCK does not stop the wipe and reopen


def test_a_checkpoint_without_a_format_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "shard-4"
    _filled(path)
    store = RocksStore(path)
    store.write({Family.META: {FORMAT: None}})
    store.close()

    with pytest.raises(StoreCorrupt):
        RocksStore(path)
    _reopened_empty(path)


def test_a_corrupt_table_file_is_wiped_by_open_rocks(tmp_path: Path) -> None:
    path = tmp_path / "shard-5"
    _filled(path)
    tables = list(path.glob("*.sst"))
    assert tables
    for table in tables:  # flip every block, keep the footer (and its magic number) intact
        data = bytearray(table.read_bytes())
        for i in range(len(data) - 64):
            data[i] ^= 0xFF
        table.write_bytes(bytes(data))

    with pytest.raises(StoreCorrupt):
        RocksStore(path)
    _reopened_empty(path)
