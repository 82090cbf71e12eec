"""A shard's local stores: mutable state, history and the timer index, in RocksDB (rocksdict) or in memory.

A store only ever holds committed data. The processor writes it once per committed transaction, in one atomic
batch together with the changelog offsets that batch reflects, so after any crash it resumes restoring from
exactly where its content ends. Both implementations pass one contract suite (tests/unit/test_store.py).
"""

from __future__ import annotations

import bisect
import shutil
import struct
import threading
import weakref
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from rocksdict import Options, Rdict, WriteBatch

Value = bytes | None  # None deletes
Writes = Mapping["Family", Mapping[bytes, Value]]


class Family(StrEnum):
    """Column families. `state` and `history` mirror the shard's partition of the changelog topics key for key;
    `timers` and `sizes` are derived from them; `meta` holds the checkpoint."""

    STATE = "state"
    HISTORY = "history"
    TIMERS = "timers"
    SIZES = "sizes"  # run key -> bytes of history written for the run (for visibility's history_size_bytes)
    META = "meta"


CHECKPOINT_STATE = b"offset/state"  # next offset of the shard's state partition not yet in the store
CHECKPOINT_HISTORY = b"offset/history"
CHECKPOINT_TIME = b"checkpoint-time-ms"  # wall clock of the last write: older than tombstone retention -> wipe
FORMAT = b"format"
FORMAT_VERSION = b"1"


class StoreCorrupt(RuntimeError):
    """The store cannot be trusted (unreadable, wrong format); the caller wipes it and restores from scratch."""


class StoreLocked(RuntimeError):
    """Another process (or another open in this one) holds the store: never wipe it."""


class StoreClosed(RuntimeError):
    """The store was closed, typically because its shard moved to another owner while a reader held it: the read
    must be answered by the shard's (new) owner instead. Readers on other threads see this, never a half-closed
    database."""


def pack_int(value: int) -> bytes:
    return struct.pack(">q", value)


def unpack_int(data: bytes | None, default: int = 0) -> int:
    return default if data is None else int(struct.unpack(">q", data)[0])


class ShardStore(Protocol):
    def get(self, family: Family, key: bytes) -> bytes | None: ...

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Keys from `start` on, in byte order, while they begin with `prefix`."""
        ...

    def keys(self, family: Family, prefix: bytes) -> list[bytes]:
        """Every key that begins with `prefix`, in byte order: a short scan read at once (a workflow's runs)."""
        ...

    def write(self, writes: Writes) -> None:
        """Apply every write atomically (meta checkpoint included)."""
        ...

    def close(self) -> None:
        """Release the store; afterwards (and in a scan that was under way) every read raises `StoreClosed`."""
        ...


class MemoryStore:
    """The contract on dicts, for unit tests of everything above the store."""

    def __init__(self) -> None:
        self._data: dict[Family, dict[bytes, bytes]] = {f: {} for f in Family}
        self._keys: dict[Family, list[bytes]] = {f: [] for f in Family}
        self._closed = False

    def get(self, family: Family, key: bytes) -> bytes | None:
        self._check_open()
        return self._data[family].get(key)

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        keys, data = self._keys[family], self._data[family]
        i = bisect.bisect_left(keys, max(start, prefix))
        snapshot = keys[i:]  # writes during iteration do not disturb it
        for key in snapshot:
            self._check_open()
            if not key.startswith(prefix):
                return
            value = data.get(key)
            if value is not None:
                yield key, value

    def keys(self, family: Family, prefix: bytes) -> list[bytes]:
        return [key for key, _ in self.scan(family, prefix=prefix)]

    def write(self, writes: Writes) -> None:
        self._check_open()
        for items in writes.values():  # all or nothing, like a RocksDB WriteBatch
            for key, value in items.items():
                if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
                    raise TypeError(f"store keys and values are bytes, not {type(key).__name__}: "
                                    f"{type(value).__name__}")
        for family, items in writes.items():
            data, keys = self._data[family], self._keys[family]
            for key, value in items.items():
                if value is None:
                    if data.pop(key, None) is not None:
                        del keys[bisect.bisect_left(keys, key)]
                else:
                    if key not in data:
                        bisect.insort(keys, key)
                    data[key] = value

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the shard's store is closed (the shard moved to another owner)")


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    return opts


class _Cursor:
    """A scan's RocksDB iterator, held where `close` can drop it: a live iterator keeps the database (and its
    LOCK file) open, so a reader's unfinished scan must not outlive the store."""

    __slots__ = ("__weakref__", "items")

    def __init__(self, items: Iterator[tuple[bytes, bytes]]) -> None:
        self.items: Iterator[tuple[bytes, bytes]] | None = items


class RocksStore:
    """One RocksDB per shard directory; column families per `Family`. Reads are thread-safe, so the owner's read
    API serves from the same store the processor thread writes.

    The processor thread closes a store when its shard is revoked, while readers on the event loop may hold it.
    Each read step runs under `_guard`, which `close` also takes, so a read either completes on the open database
    or raises `StoreClosed`; it never meets a half-closed one (rocksdict's own errors, or a `KeyError` once the
    families are dropped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard = threading.Lock()
        self._closed = False
        self._cursors: weakref.WeakSet[_Cursor] = weakref.WeakSet()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(str(path), _options(),
                             column_families={f.value: Options(raw_mode=True) for f in Family})
            self._families = {f: self._db.get_column_family(f.value) for f in Family}
            self._handles = {f: self._db.get_column_family_handle(f.value) for f in Family}
        except Exception as exc:  # rocksdict raises plain Exceptions for corruption and lock errors alike
            if "/LOCK" in str(exc) or "lock hold" in str(exc):  # not "block checksum mismatch": that is corruption
                raise StoreLocked(f"the store at {path} is in use ({exc}): by a processor of this server that is "
                                  "still closing it, or by another server on this data directory (each server "
                                  "needs its own --data-dir)") from None
            raise StoreCorrupt(f"cannot open the store at {path}: {exc}") from exc
        fmt = self.get(Family.META, FORMAT)
        if fmt is None and self.get(Family.META, CHECKPOINT_STATE) is None:
            self.write({Family.META: {FORMAT: FORMAT_VERSION}})
        elif fmt != FORMAT_VERSION:
            self.close()
            raise StoreCorrupt(f"the store at {path} has format {fmt!r}, expected {FORMAT_VERSION!r}")

    def get(self, family: Family, key: bytes) -> bytes | None:
        with self._guard:
            self._check_open()
            value: bytes | None = self._families[family].get(key)
            return value

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        with self._guard:
            self._check_open()
            cursor = _Cursor(self._families[family].items(from_key=max(start, prefix)))
            self._cursors.add(cursor)
        while True:
            with self._guard:  # one step at a time: `close` may come between two steps, never during one
                if cursor.items is None:
                    self._check_open()
                    return
                item = next(cursor.items, None)
            if item is None or not item[0].startswith(prefix):
                cursor.items = None
                return
            yield item

    def keys(self, family: Family, prefix: bytes) -> list[bytes]:
        # The processor looks for a workflow's runs whenever it loads one that is not cached (every new workflow):
        # read in one step under the guard, with no cursor to register, it costs half of `scan`'s (1.5 against
        # 2.9 µs when there is none).
        found: list[bytes] = []
        with self._guard:
            self._check_open()
            cursor = self._families[family].iter()
            cursor.seek(prefix)
            while cursor.valid():
                key = cursor.key()
                if not key.startswith(prefix):
                    break
                found.append(key)
                cursor.next()
            del cursor  # a live iterator holds the database open: gone before the guard is released
        return found

    def write(self, writes: Writes) -> None:
        self._check_open()  # only the processor thread writes, and it is the one that closes
        batch = WriteBatch(raw_mode=True)
        for family, items in writes.items():
            handle = self._handles[family]
            for key, value in items.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        self._db.write(batch)

    def close(self) -> None:
        with self._guard:  # waits for a read step in flight on another thread
            if self._closed:
                return
            self._closed = True
            # Column family views, handles and iterators each keep the database (and its LOCK file) alive: drop
            # them all, including the iterators of scans a reader has not finished.
            for cursor in list(self._cursors):
                cursor.items = None
            for family in self._families.values():
                family.close()
            self._families.clear()
            self._handles.clear()
            self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store at {self.path} is closed (its shard moved to another owner)")


def open_rocks(path: Path) -> RocksStore:
    """Open a shard's store; an unreadable one is wiped (the changelog topics rebuild it)."""
    try:
        return RocksStore(path)
    except StoreCorrupt:
        wipe(path)
        return RocksStore(path)


def wipe(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
