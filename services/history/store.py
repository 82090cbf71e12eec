"""A shard's local stores: mutable state, history and the timer index, in RocksDB (rocksdict) or in memory.

A store only ever holds committed data. The processor writes it once per committed transaction, in one atomic
batch together with the changelog offsets that batch reflects, so after any crash it resumes restoring from
exactly where its content ends. Both implementations pass one contract suite (tests/unit/test_store.py).
"""

from __future__ import annotations

import bisect
import shutil
import struct
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


def pack_int(value: int) -> bytes:
    return struct.pack(">q", value)


def unpack_int(data: bytes | None, default: int = 0) -> int:
    return default if data is None else int(struct.unpack(">q", data)[0])


class ShardStore(Protocol):
    def get(self, family: Family, key: bytes) -> bytes | None: ...

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Keys from `start` on, in byte order, while they begin with `prefix`."""
        ...

    def write(self, writes: Writes) -> None:
        """Apply every write atomically (meta checkpoint included)."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """The contract on dicts, for unit tests of everything above the store."""

    def __init__(self) -> None:
        self._data: dict[Family, dict[bytes, bytes]] = {f: {} for f in Family}
        self._keys: dict[Family, list[bytes]] = {f: [] for f in Family}

    def get(self, family: Family, key: bytes) -> bytes | None:
        return self._data[family].get(key)

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        keys, data = self._keys[family], self._data[family]
        i = bisect.bisect_left(keys, max(start, prefix))
        snapshot = keys[i:]  # writes during iteration do not disturb it
        for key in snapshot:
            if not key.startswith(prefix):
                return
            value = data.get(key)
            if value is not None:
                yield key, value

    def write(self, writes: Writes) -> None:
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
        pass


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    return opts


class RocksStore:
    """One RocksDB per shard directory; column families per `Family`. Reads are thread-safe, so the owner's read
    API serves from the same store the processor thread writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(str(path), _options(),
                             column_families={f.value: Options(raw_mode=True) for f in Family})
            self._families = {f: self._db.get_column_family(f.value) for f in Family}
            self._handles = {f: self._db.get_column_family_handle(f.value) for f in Family}
        except Exception as exc:  # rocksdict raises plain Exceptions for corruption and lock errors alike
            if "/LOCK" in str(exc) or "lock hold" in str(exc):  # not "block checksum mismatch": that is corruption
                raise StoreLocked(f"the store at {path} is in use by another process ({exc}); each processor "
                                  "needs its own --data-dir") from None
            raise StoreCorrupt(f"cannot open the store at {path}: {exc}") from exc
        fmt = self.get(Family.META, FORMAT)
        if fmt is None and self.get(Family.META, CHECKPOINT_STATE) is None:
            self.write({Family.META: {FORMAT: FORMAT_VERSION}})
        elif fmt != FORMAT_VERSION:
            self.close()
            raise StoreCorrupt(f"the store at {path} has format {fmt!r}, expected {FORMAT_VERSION!r}")

    def get(self, family: Family, key: bytes) -> bytes | None:
        value: bytes | None = self._families[family].get(key)
        return value

    def scan(self, family: Family, start: bytes = b"", prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for key, value in self._families[family].items(from_key=max(start, prefix)):
            if not key.startswith(prefix):
                return
            yield key, value

    def write(self, writes: Writes) -> None:
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
        # Column family views and handles each keep the database (and its LOCK file) alive: drop them all.
        for family in self._families.values():
            family.close()
        self._families.clear()
        self._handles.clear()
        self._db.close()


def open_rocks(path: Path) -> RocksStore:
    """Open a shard's store; an unreadable one is wiped (the changelog topics rebuild it)."""
    try:
        return RocksStore(path)
    except StoreCorrupt:
        wipe(path)
        return RocksStore(path)


def wipe(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
