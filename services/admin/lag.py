"""How far behind the cluster's readers are, from Kafka's own bookkeeping: the brokers, each shard's processor (its
group's committed offsets on the commands topic against the partition's end) and a visibility feeder.

Figures are offsets, not records: transaction markers occupy offsets too, so a shard that has read everything can
show a lag of one or two until its next command (a marker written after the last command it consumed).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ostinato.kafka.clients import base_config
from ostinato.services.admin.cluster import BrokerInfo


@dataclass(frozen=True)
class PartitionLag:
    """One partition: where its reader is (the next offset it will read; None when it never said), where the
    partition starts and ends (read_committed: the last stable offset, as far as a reader can get), and the
    offsets in between."""

    partition: int
    position: int | None
    start: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - max(self.start, self.position if self.position is not None else self.start))


def brokers(admin: AdminClient, timeout: float) -> tuple[str | None, list[BrokerInfo]]:
    """The cluster id and the brokers the cluster's metadata lists (registered and not fenced), controller marked.

    Raises:
        KafkaException: no broker answered within `timeout`.
    """
    described = admin.describe_cluster(request_timeout=timeout).result(timeout)
    controller = described.controller.id if described.controller else None
    return described.cluster_id, sorted((BrokerInfo(n.id, n.host, n.port, n.id == controller) for n in described.nodes),
                                        key=lambda b: b.node_id)


def offsets(admin: AdminClient, topic: str, partitions: list[int], spec: OffsetSpec,
            timeout: float) -> dict[int, int]:
    """Each partition's earliest or latest offset (`spec`), read_committed.

    Raises:
        KafkaException: the broker did not answer within `timeout`, or the topic is missing.
    """
    futures = admin.list_offsets({TopicPartition(topic, p): spec for p in partitions},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout)
    return {tp.partition: future.result(timeout).offset for tp, future in futures.items()}


class GroupPositions:
    """The offsets consumer groups committed, each group read through a consumer of its own configured with that
    group's id and never subscribed, so it never joins the group (an OffsetFetch is all it sends).

    Not `AdminClient.list_consumer_group_offsets`: when the group's coordinator moves, librdkafka handles the
    answer's NOT_COORDINATOR by asking the client's own consumer group to look for the coordinator, and an
    AdminClient has none: the process dies of a SIGSEGV in `rd_kafka_cgrp_op` (confluentinc/librdkafka#5040, open;
    seen here as both servers dying at once in the chaos suite's server wipe, from the backlog collector). A
    consumer has its group, and looks for the new coordinator. It also asks for stable offsets (KIP-447), so an
    offset pending in an open transaction is waited for rather than read as the previous one."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.bootstrap, self.client_id = bootstrap, client_id
        self._readers: dict[str, Consumer] = {}
        self._lock = threading.Lock()  # one reader per group, made once even when two threads ask at once

    def read(self, group: str, topic: str, partitions: list[int], timeout: float) -> dict[int, int]:
        """The offsets `group` committed on `topic` (partitions it never committed are left out).

        Raises:
            KafkaException: the group coordinator did not answer within `timeout`.
        """
        with self._lock:
            reader = self._readers.get(group)
            if reader is None:
                reader = self._readers[group] = Consumer({**base_config(self.bootstrap, self.client_id),
                                                          "group.id": group, "enable.auto.commit": False})
        answer = reader.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0 and tp.error is None}

    def close(self) -> None:
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.close()


def partition_lags(positions: Mapping[int, int], starts: Mapping[int, int],
                   ends: Mapping[int, int]) -> list[PartitionLag]:
    """Each partition of `ends` with its reader's position and its lag."""
    return [PartitionLag(p, positions.get(p), starts.get(p, 0), end) for p, end in sorted(ends.items())]


def topic_lags(admin: AdminClient, topic: str, partitions: list[int], positions: Mapping[int, int],
               timeout: float) -> list[PartitionLag]:
    """The lag of a reader at `positions` on `topic`."""
    starts = offsets(admin, topic, partitions, OffsetSpec.earliest(), timeout)
    ends = offsets(admin, topic, partitions, OffsetSpec.latest(), timeout)
    return partition_lags(positions, starts, ends)
