"""How changelog records become store content on restore, and the key layout of the derived families, which live
processing (`shard.py`) writes from the core's actions and restore rebuilds from the records.

The state and history topics are the source of truth; a shard's store is their materialisation plus two derived
families: the timer index (from state) and per-run history sizes (from history). Applying the same record twice
yields the same store, so a restore that resumes from a slightly older checkpoint is harmless.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ostinato.schemas.keys import split_key
from ostinato.services.history.store import Family, pack_int, unpack_int
from ostinato.streams.actions import Deadline
from ostinato.streams.config import Config
from ostinato.streams.deadlines import deadlines
from ostinato.streams.model import decode_run

Lookup = Callable[[Family, bytes], "bytes | None"]
WriteSet = dict[Family, dict[bytes, "bytes | None"]]

_U64 = struct.Struct(">Q")


def _text(value: str) -> bytes:
    # Order-preserving, like FoundationDB's tuple layer: NUL escaped as NUL 0xFF, each text ended by NUL, so a
    # text sorts before every longer text it is a prefix of.
    return value.encode().replace(b"\x00", b"\x00\xff") + b"\x00"


def timer_key(namespace: str, workflow_id: str, d: Deadline) -> bytes:
    """Big-endian fire time first, so a forward scan meets deadlines in the order they fall due; the rest sorts
    exactly like the in-memory engine's index tuples, so deadlines due at once fire in the same order in both."""
    return (_U64.pack(max(0, d.fire_at_ms)) + _text(namespace) + _text(workflow_id) + _text(d.run_id)
            + _text(d.kind) + _text(d.timer_id) + _U64.pack(d.scheduled_event_id) + _U64.pack(d.attempt))


def parse_timer_key(key: bytes) -> tuple[str, str, Deadline]:
    fire_at = _U64.unpack_from(key)[0]
    texts: list[str] = []
    pos = _U64.size
    while len(texts) < 5:
        end = pos
        while True:
            end = key.index(b"\x00", end)
            if key[end + 1:end + 2] == b"\xff":
                end += 2
                continue
            break
        texts.append(key[pos:end].replace(b"\x00\xff", b"\x00").decode())
        pos = end + 1
    sid, attempt = _U64.unpack_from(key, pos)[0], _U64.unpack_from(key, pos + _U64.size)[0]
    ns, wf, run_id, kind, timer_id = texts
    return ns, wf, Deadline(fire_at, kind, run_id, timer_id, sid, attempt)


def fire_at_of(key: bytes) -> int:
    return int(_U64.unpack_from(key)[0])


def timers_from(fire_at_ms: int) -> bytes:
    """The lowest timer key of a deadline: a scan from it meets the deadlines falling due at `fire_at_ms` or later."""
    return _U64.pack(max(0, fire_at_ms))


def empty_writes() -> WriteSet:
    return {f: {} for f in Family}


class ChangelogApplier:
    """Folds state and history changelog records into a write set, reading earlier values through `lookup`
    (the write set itself first, then the store)."""

    def __init__(self, lookup: Lookup, config: Config, config_for: Callable[[str], Config] | None = None) -> None:
        self._lookup = lookup
        self._config_for = config_for or (lambda namespace: config)
        self.writes = empty_writes()

    def get(self, family: Family, key: bytes) -> bytes | None:
        items = self.writes[family]
        return items[key] if key in items else self._lookup(family, key)

    def state(self, key: bytes, value: bytes | None) -> None:
        parts = split_key(key.decode())
        if len(parts) == 3:  # a run (two parts: the workflow's current-run pointer, which has no deadlines)
            ns, wf, _ = parts
            old = self.get(Family.STATE, key)
            timers = self.writes[Family.TIMERS]
            config = self._config_for(ns)
            if old is not None:
                for d in deadlines(decode_run(old), config):
                    timers[timer_key(ns, wf, d)] = None
            if value is not None:
                for d in deadlines(decode_run(value), config):
                    timers[timer_key(ns, wf, d)] = b""
        self.writes[Family.STATE][key] = value

    def history(self, key: bytes, value: bytes | None) -> None:
        run = key[:key.rindex(b"/")]
        if value is None:
            self.writes[Family.SIZES][run] = None  # the run is being deleted, all of its keys follow
        elif self.get(Family.HISTORY, key) is None:
            self.writes[Family.SIZES][run] = pack_int(unpack_int(self.get(Family.SIZES, run)) + len(value))
        self.writes[Family.HISTORY][key] = value
