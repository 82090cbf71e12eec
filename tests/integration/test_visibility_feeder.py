"""The SQLite visibility feeder on a real broker: committed records only, tombstones, exact resume, rebuild."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from ostinato.connectors.visibility_sqlite import SqliteVisibilityFeeder, SqliteVisibilityStore
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.codec import encode
from ostinato.schemas.keys import run_key, shard_for
from ostinato.schemas.wire import VISIBILITY as VISIBILITY_RECORD
from ostinato.services.admin.cluster import init_cluster

NS = "default"
SHARDS = 2


def record(workflow_id: str, version: int, status: str = "RUNNING", **fields: Any) -> dict[str, Any]:
    return {
        "namespace": NS, "workflow_id": workflow_id, "run_id": "run-1", "workflow_type": "Order",
        "task_queue": "orders", "status": status, "start_time_ms": 1_700_000_000_000 + version,
        "execution_time_ms": 1_700_000_000_000, "close_time_ms": None, "history_length": version,
        "history_size_bytes": 0, "memo": {}, "search_attributes": {}, "parent": None,
        "first_execution_run_id": "run-1", "version": version, **fields,
    }


class Writer:
    """Produces visibility records the way the owning processor does: transactional, keyed, on the run's shard."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = f"{prefix}.visibility"
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-vis-test"})
        self.producer.init_transactions(30)

    def send(self, records: list[dict[str, Any] | tuple[str, None]], commit: bool = True) -> None:
        self.producer.begin_transaction()
        for rec in records:
            if isinstance(rec, tuple):
                workflow_id, value = rec[0], None
            else:
                workflow_id, value = rec["workflow_id"], encode(VISIBILITY_RECORD, rec)
            self.producer.produce(self.topic, key=run_key(NS, workflow_id, "run-1").encode(), value=value,
                                  partition=shard_for(NS, workflow_id, SHARDS))
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.flush(30)  # the records really reach the log before the abort
            self.producer.abort_transaction(30)


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"})
    try:
        return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(SHARDS)}
    finally:
        probe.close()


def statuses(store: SqliteVisibilityStore) -> dict[str, str]:
    rows, token = store.list(NS, "ORDER BY WorkflowId", page_size=1000)
    assert token is None
    return {r["workflow_id"]: r["status"] for r in rows}


def test_feeder_applies_committed_records_tombstones_and_resumes(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    writer = Writer(kafka.bootstrap, topic_prefix)
    ids = [f"wf-{i}" for i in range(8)]
    assert {shard_for(NS, w, SHARDS) for w in ids} == {0, 1}  # both partitions carry records
    writer.send([record(w, 2) for w in ids])
    writer.send([record("wf-0", 9, "FAILED"), record("ghost", 1)], commit=False)

    store = SqliteVisibilityStore(tmp_path / "visibility.db")
    feeder = SqliteVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
    feeder.start()
    try:
        assert feeder.wait_caught_up(30)  # the log ends with an abort marker: caught up all the same
        assert statuses(store) == dict.fromkeys(ids, "RUNNING")  # nothing of the aborted transaction

        writer.send([
            record("wf-1", 5, "COMPLETED", close_time_ms=1_700_000_100_000),
            record("wf-1", 3, "RUNNING"),  # late: an older version after a newer one
            ("wf-2", None),  # tombstone
        ])
        assert feeder.wait_caught_up(30)
        got = statuses(store)
        assert got["wf-1"] == "COMPLETED" and "wf-2" not in got and len(got) == 7
        assert store.count(NS, "CloseTime IS NOT NULL") == 1
    finally:
        feeder.stop()
    assert feeder.error is None
    # Saved offsets reach the end of each partition, transaction markers included, so a restart re-reads nothing.
    assert store.last_offsets() == log_ends(kafka.bootstrap, writer.topic)

    # Records written while no feeder runs are picked up from the saved offsets, and only those are read.
    writer.send([record("wf-3", 4, "TERMINATED"), record("late-comer", 1)])
    store.apply(run_key(NS, "wf-4", "run-1"), None)  # a local change a replay from 0 would undo
    resumed = SqliteVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
    resumed.start()
    try:
        assert resumed.wait_caught_up(30)
    finally:
        resumed.stop()
    got = statuses(store)
    assert got["wf-3"] == "TERMINATED" and "late-comer" in got and "wf-4" not in got  # wf-4 was not re-read
    assert store.last_offsets() == log_ends(kafka.bootstrap, writer.topic)

    # A rebuild replays the topic from offset 0 and ends where the live store was (but with wf-4 back).
    expected = {**got, "wf-4": "RUNNING"}
    store.rebuild()
    replay = SqliteVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
    replay.start()
    try:
        assert replay.wait_caught_up(30)
    finally:
        replay.stop()
    assert statuses(store) == expected
    store.close()


def test_an_open_transaction_is_neither_shown_nor_skipped(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    writer = Writer(kafka.bootstrap, topic_prefix)
    writer.send([record("before", 1)])
    writer.producer.begin_transaction()
    writer.producer.produce(writer.topic, key=run_key(NS, "pending", "run-1").encode(),
                            value=encode(VISIBILITY_RECORD, record("pending", 1)),
                            partition=shard_for(NS, "pending", SHARDS))
    writer.producer.flush(30)

    store = SqliteVisibilityStore(tmp_path / "visibility.db")
    feeder = SqliteVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
    feeder.start()
    try:
        assert feeder.wait_caught_up(30)  # caught up to the last stable offset, before the open transaction
        assert statuses(store) == {"before": "RUNNING"}
        feeder.stop()
        writer.producer.commit_transaction(30)
        feeder = SqliteVisibilityFeeder(kafka.bootstrap, topic_prefix, store)  # resumes from the saved offsets
        feeder.start()
        assert feeder.wait_caught_up(30)
        assert statuses(store) == {"before": "RUNNING", "pending": "RUNNING"}
    finally:
        feeder.stop()
        store.close()
