"""A shard's committed deadlines, earliest first, in memory.

Deadlines are written and deleted all the time: every activity and workflow task arms timeouts that its
completion cancels a few milliseconds later. RocksDB keeps a deleted key as a tombstone until compaction, and a
forward scan steps over every tombstone in its way, so "the earliest deadline" read from the store costs time in
proportion to the deadlines cancelled since the last compaction: 3 µs with none, about 1 ms with 10,000
(`bench/timer_index.py`). The processor asks several times a batch (the poll timeout, the due timers, the batch's
stop), and in a ten-activity workflow benchmark those scans were 13% of the server's samples.

So the index reads the store once (when first asked), and then follows the commits. It holds about `window` keys,
the earliest ones, and never more than twice that after a commit. `bound` is the last key it read from the store
when it stopped early (None: it holds them all); deadlines after the bound stay in the store until a walk reaches
them, and are read then, again `window` at a time. Memory stays bounded however many workflows sleep for a month.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping

WINDOW = 4_096

Load = Callable[[bytes], Iterable[bytes]]  # the store's timer keys from a key (inclusive), in order


class TimerIndex:
    """Sorted committed timer keys (big-endian deadline first, `changelog.timer_key`) of one shard store."""

    def __init__(self, load: Load, window: int = WINDOW) -> None:
        self._load = load
        self._window = window
        self._keys: list[bytes] = []
        self._bound: bytes | None = None
        self._loaded = False

    def walk(self, start: bytes = b"") -> Iterator[bytes]:
        """The committed keys from `start` (inclusive), in order. A walk that goes on past the bound reads the
        store's next keys into the index (they are all after the ones held, so they are appended and the position
        of this walk stays valid); a walk that starts past the bound is the store's alone, and keeps nothing (a
        backlog of overdue deadlines is not loaded to look behind it)."""
        self._ensure_loaded()
        index = bisect.bisect_left(self._keys, start)
        while True:
            if index < len(self._keys):
                key = self._keys[index]
                index += 1
                if key >= start:  # keys read on from the bound may still come before `start`
                    yield key
            elif self._bound is not None and start > self._bound:
                yield from self._load(start)
                return
            elif self._bound is not None:
                self._extend(self._bound, inclusive=False)
            else:
                return

    def apply(self, writes: Mapping[bytes, bytes | None]) -> None:
        """What a commit wrote to the store's timer family (None: deleted)."""
        if not self._loaded:
            return  # read from the store when first asked, with these writes in it
        for key, value in writes.items():
            at = bisect.bisect_left(self._keys, key)
            present = at < len(self._keys) and self._keys[at] == key
            if value is None:
                if present:
                    del self._keys[at]
            elif not present and (self._bound is None or key <= self._bound):
                self._keys.insert(at, key)  # past the bound it is read from the store in its turn
        if len(self._keys) > 2 * self._window:
            del self._keys[self._window:]
            self._bound = self._keys[-1]

    def __len__(self) -> int:
        """Keys held in memory (not all of the store's when `bounded`): at most twice the window after a commit."""
        return len(self._keys)

    @property
    def bounded(self) -> bool:
        return self._bound is not None

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._extend(b"", inclusive=True)
            self._loaded = True  # only once read: a failed read is tried again

    def _extend(self, start: bytes, inclusive: bool) -> None:
        """Append the store's next `window` keys from `start`; the index then ends at a new bound, or holds all."""
        taken: list[bytes] = []
        for key in self._load(start):
            if not inclusive and key == start:
                continue
            taken.append(key)
            if len(taken) >= self._window:
                break
        self._keys.extend(taken)
        self._bound = taken[-1] if len(taken) >= self._window else None
