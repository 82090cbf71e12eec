"""Restore a shard's store from its changelog partitions before the shard processes a single command.

```
  CHECKPOINT ──► (too old, ahead of the topic, or corrupt) ──► WIPED ──┐
      │                                                                ▼
      └──────────────────────────────────────────────────────────► RESTORING ──► CAUGHT_UP
```

The store holds only committed data plus the offsets it reflects, so restoring means reading `state` and
`history` from those offsets to the end. "The end" is the high watermark, reached with read_committed: an open
transaction (a crashed or zombie owner's) holds the end back until it is aborted, and restoring past it would
miss what its commit adds. Progress is written in batches with the checkpoint, so a crash mid-restore resumes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ostinato.schemas.topics import TOMBSTONE_RETENTION_MS
from ostinato.services.history.changelog import ChangelogApplier
from ostinato.services.history.store import (
    CHECKPOINT_HISTORY,
    CHECKPOINT_STATE,
    CHECKPOINT_TIME,
    Family,
    RocksStore,
    ShardStore,
    open_rocks,
    pack_int,
    unpack_int,
    wipe,
)
from ostinato.streams.config import Config

log = logging.getLogger("ostinato.restore")

WRITE_EVERY = 5_000  # records per store write while restoring
POLL_S = 0.01  # consume() waits this long for a full batch: short, or an empty restore takes that long


class RestoreError(RuntimeError):
    """The changelog could not be read to its end in time."""


@dataclass
class RestoreResult:
    records: int
    seconds: float
    from_scratch: bool
    reason: str = ""


def checkpoint_offsets(store: ShardStore) -> tuple[int, int]:
    return unpack_int(store.get(Family.META, CHECKPOINT_STATE)), unpack_int(store.get(Family.META, CHECKPOINT_HISTORY))


def open_and_restore(path: Path, shard: int, state_topic: str, history_topic: str, consumer: Consumer,
                     config: Config, *, now_ms: Callable[[], int], timeout_s: float = 120.0,
                     write_every: int = WRITE_EVERY, on_batch: Callable[[int], None] = lambda n: None,
                     config_for: Callable[[str], Config] | None = None) -> tuple[RocksStore, RestoreResult]:
    """Open the shard's store at `path` and bring it up to the end of its changelog partitions.

    `consumer` must be a read_committed consumer with `enable.partition.eof` and `auto.offset.reset=error`, so a
    checkpoint the topic no longer has (recreated, or truncated) shows as an error instead of a silent reset.
    """
    started = time.monotonic()
    store = open_rocks(path)
    tps = [TopicPartition(state_topic, shard), TopicPartition(history_topic, shard)]
    reason = _stale_reason(store, now_ms())
    for _ in range(2):
        if reason:
            log.info("shard %d: restoring from scratch (%s)", shard, reason)
            store.close()
            wipe(path)
            store = open_rocks(path)
        try:
            records = _catch_up(store, tps, checkpoint_offsets(store), consumer, config, now_ms,
                                started + timeout_s, write_every, on_batch, config_for)
            break
        except _OutOfRange as exc:
            if reason:
                store.close()
                raise RestoreError(f"shard {shard}: {exc} even when restoring from scratch") from None
            reason = str(exc)
        except BaseException:
            store.close()  # or the store stays locked for the next attempt in this process
            raise
    result = RestoreResult(records, time.monotonic() - started, bool(reason), reason)
    log.info("shard %d: restored %d records in %.2fs%s", shard, records, result.seconds,
             " (from scratch)" if reason else "")
    return store, result


class _OutOfRange(Exception):
    pass


def _stale_reason(store: ShardStore, now_ms: int) -> str:
    """Why the store cannot resume from its checkpoint, or "" when it can (a checkpoint the topic no longer
    holds is found out when reading from it)."""
    if checkpoint_offsets(store) == (0, 0):
        return ""  # empty: reading from the start is what a restore from scratch does anyway
    written = unpack_int(store.get(Family.META, CHECKPOINT_TIME))
    if now_ms - written > TOMBSTONE_RETENTION_MS:
        return f"checkpoint is {(now_ms - written) // 1000}s old, beyond the tombstone retention"
    return ""


def _catch_up(store: ShardStore, tps: list[TopicPartition], offsets: tuple[int, int], consumer: Consumer,
              config: Config, now_ms: Callable[[], int], deadline: float, write_every: int,
              on_batch: Callable[[int], None], config_for: Callable[[str], Config] | None = None) -> int:
    state_tp, history_tp = tps
    consumer.assign([TopicPartition(tp.topic, tp.partition, off) for tp, off in zip(tps, offsets, strict=True)])
    next_offsets = {state_tp.topic: offsets[0], history_tp.topic: offsets[1]}
    reached_eof: dict[str, int] = {}  # topic -> offset of its latest end-of-partition event
    applier = ChangelogApplier(store.get, config, config_for)
    pending = total = 0
    try:
        while not _at_end(consumer, tps, reached_eof, next_offsets):
            if time.monotonic() > deadline:
                raise RestoreError(f"could not read {state_tp.topic}/{history_tp.topic} partition {state_tp.partition} "
                                   f"to its end in time (an open transaction of another owner holds it back?)")
            for msg in consumer.consume(num_messages=1000, timeout=POLL_S):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        reached_eof[msg.topic()] = msg.offset()
                        continue
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise _OutOfRange(f"checkpoint of {msg.topic()}[{msg.partition()}] is out of range "
                                          f"({err.str()}): the topic was recreated or truncated")
                    raise RestoreError(f"reading {msg.topic()}[{msg.partition()}]: {err.str()}")
                key = msg.key() or b""
                if msg.topic() == state_tp.topic:
                    applier.state(key, msg.value())
                else:
                    applier.history(key, msg.value())
                next_offsets[msg.topic()] = msg.offset() + 1
                pending += 1
            if pending >= write_every:
                total += pending
                _flush(store, applier, next_offsets, state_tp.topic, history_tp.topic, now_ms())
                applier = ChangelogApplier(store.get, config, config_for)
                pending = 0
                on_batch(total)
        total += pending
        _flush(store, applier, next_offsets, state_tp.topic, history_tp.topic, now_ms())
    finally:
        consumer.unassign()
    return total


def _flush(store: ShardStore, applier: ChangelogApplier, next_offsets: dict[str, int], state_topic: str,
           history_topic: str, now_ms: int) -> None:
    applier.writes[Family.META].update({
        CHECKPOINT_STATE: pack_int(next_offsets[state_topic]),
        CHECKPOINT_HISTORY: pack_int(next_offsets[history_topic]),
        CHECKPOINT_TIME: pack_int(now_ms),
    })
    store.write(applier.writes)


def _at_end(consumer: Consumer, tps: list[TopicPartition], reached_eof: dict[str, int],
            next_offsets: dict[str, int]) -> bool:
    """Caught up when, after the end-of-partition event, the position reaches the high watermark (cached from the
    last fetch response) of both partitions. With read_committed the end event comes at the last stable offset:
    an open transaction of another owner keeps the position below the watermark until it is resolved.
    """
    if len(reached_eof) < len(tps):
        return False
    for tp in consumer.position(tps):  # -1001 until a record was returned
        _, high = consumer.get_watermark_offsets(tp, cached=True)
        if max(tp.offset, reached_eof[tp.topic], next_offsets[tp.topic]) < high:
            return False
    return True
