"""Reading `<prefix>.history` read_committed, whole or from a point: the history checker, restore-like audits and the
pre-deploy replay gate (and the SDK's `sample_histories`) all read it through this one loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from ostinato.kafka.clients import admin_client, reader, wait_for_brokers
from ostinato.schemas.topics import Topic, topic_name

__all__ = ["HistoryReadError", "high_watermarks", "offsets_at", "read_history_partitions"]

POLL_SECONDS = 0.2
BATCH = 1000


class HistoryReadError(RuntimeError):
    """The history could not be read to its end (missing topic, a transaction that stays open)."""


def read_history_partitions(bootstrap: str, prefix: str, timeout: float = 30.0, *,
                            starts: Mapping[int, int] | None = None, stops: Mapping[int, int] | None = None,
                            progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, str, bytes | None]]:
    """(partition, key, value) of every committed history record, each partition read past its end as of the start.

    The ends are the high watermarks, asked for read_uncommitted: a read_committed consumer's own "end" is the
    last stable offset, which an open transaction holds back, so stopping there could miss records about to
    commit. A partition is done at its first end-of-partition event at or past its end; records after that are
    left out, because an end-of-partition event is the one point where a partition's records are whole
    transactions (a run that continued as new is never cut from its successor). Keys that are not UTF-8 come
    through with surrogate escapes, which the checker reports.

    `starts` (partition -> first offset) reads from a point rather than the beginning: the replay gate seeks to a
    time (`offsets_at`). `stops` (partition -> offset) reads only those partitions and only below those offsets,
    so an older slice can be read without reading again what was already read. `progress` is told how many offsets
    have been passed so far, after every batch (a long read shows a progress bar).

    Raises:
        KafkaUnavailable: no broker answers at `bootstrap`.
        HistoryReadError: the topic does not exist, or a partition makes no progress towards its end for
            `timeout` seconds (the usual cause: a transaction that stays open).
    """
    topic = topic_name(prefix, Topic.HISTORY)
    ends = dict(stops) if stops is not None else high_watermarks(bootstrap, topic, timeout)
    first = {p: (starts or {}).get(p, 0) for p in ends}
    # Its group is in the auditor's ACLs (docs/security.md). A start that retention deleted meanwhile reads from the
    # earliest record left rather than the end (librdkafka's default), which would silently skip the partition.
    consumer = reader(bootstrap, f"{prefix}-checker", overrides={"auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, first[p] or OFFSET_BEGINNING) for p in ends])
        reached = dict(first)  # the next offset to read, per partition
        done = {p for p, end in ends.items() if end <= first[p]}
        deadline = time.monotonic() + timeout
        while len(done) < len(ends):
            for msg in consumer.consume(BATCH, POLL_SECONDS):
                p, error, offset = msg.partition(), msg.error(), msg.offset()
                if p is None or offset is None:  # a client-wide event, not a partition's
                    if error is not None and not error.retriable() and error.code() != KafkaError._PARTITION_EOF:
                        raise HistoryReadError(f"reading {topic}: {error.str()}")
                    continue
                if p in done:
                    continue
                if stops is not None and error is None and offset >= ends[p]:
                    done.add(p)  # a hard stop: what lies beyond was read already
                    continue
                if error is None:
                    key = msg.key()
                    yield p, "" if key is None else key.decode("utf-8", "surrogateescape"), msg.value()
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    # An end-of-partition event carries the position: past transaction markers and aborted records.
                    at = offset + 1 if error is None else offset
                    if at > reached[p]:
                        reached[p], deadline = at, time.monotonic() + timeout
                    if at >= ends[p] and (error is not None or stops is not None):
                        done.add(p)
                elif not error.retriable():
                    raise HistoryReadError(f"reading {topic}: {error.str()}")
            if progress is not None:
                progress(sum(min(reached[p], ends[p]) - first[p] for p in ends))
            if len(done) < len(ends) and time.monotonic() > deadline:
                raise HistoryReadError(_stuck(topic, {p: (reached[p], ends[p]) for p in sorted(set(ends) - done)},
                                              timeout))
    finally:
        consumer.close()


def _stuck(topic: str, partitions: dict[int, tuple[int, int]], timeout: float) -> str:
    where = ", ".join(f"partition {p} at offset {at} of {end}" for p, (at, end) in partitions.items())
    return (f"{topic}: {where}, with no progress for {timeout:g}s. With read_committed a partition ends at its first "
            "open transaction: a producer is mid-transaction (or died in one, which holds the partition until its "
            "transaction.timeout.ms passes).")


def high_watermarks(bootstrap: str, topic: str, timeout: float) -> dict[int, int]:
    """The end offset of each partition of `topic`, read_uncommitted (see `read_history_partitions`)."""
    admin = admin_client(bootstrap)
    wait_for_brokers(admin, bootstrap, timeout)
    # Listing every topic, not asking for this one: a metadata request naming a topic may auto-create it.
    metadata = admin.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None:
        raise HistoryReadError(f"topic {topic} does not exist at {bootstrap}: is the cluster initialised "
                               "(`ostinato cluster init`) and the prefix right?")
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(topic, p): latest for p in metadata.partitions},
                                 isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout)
    try:
        return {tp.partition: future.result().offset for tp, future in sorted(futures.items(),
                                                                                key=lambda i: i[0].partition)}
    except KafkaException as exc:
        raise HistoryReadError(f"cannot read the end offsets of {topic}: {exc}") from None


def offsets_at(bootstrap: str, prefix: str, ends: Mapping[int, int], at_ms: int, timeout: float) -> dict[int, int]:
    """Per partition of `ends`, the offset of the first history record written at or after `at_ms` (the partition's
    end in `ends` if none is): where a read from a point in time starts."""
    if at_ms <= 0:
        return dict.fromkeys(ends, 0)
    topic = topic_name(prefix, Topic.HISTORY)
    consumer = reader(bootstrap, f"{prefix}-checker")
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, at_ms) for p in ends], timeout)
    except KafkaException as exc:
        raise HistoryReadError(f"cannot look up the offsets of {topic} at {at_ms}: {exc}") from None
    finally:
        consumer.close()
    out: dict[int, int] = {}
    for tp in found:
        if tp.error is not None:
            raise HistoryReadError(f"cannot look up the offset of {topic} partition {tp.partition}: {tp.error}")
        out[tp.partition] = tp.offset if tp.offset >= 0 else ends[tp.partition]  # -1: nothing that recent
    return out
