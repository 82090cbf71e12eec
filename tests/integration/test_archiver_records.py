"""The archiver's decisions record by record, on the real broker and S3 server, with a history source the test
controls: what it skips, when it waits, and that a repeat writes the same object and confirms again."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from ostinato.connectors.archive import S3Archive
from ostinato.connectors.archiver import Archiver, NotReady
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.keys import run_key
from ostinato.sdk.blobstore_s3 import ensure_bucket, s3_client
from ostinato.services.admin.cluster import init_cluster

SHARDS = 2
CLOSE_MS = 1_780_000_000_000


def _event(event_id: int, event_type: str, attributes: tuple[str, dict[str, Any]]) -> bytes:
    return codec.encode("ostinato.history.HistoryEvent", {
        "event_id": event_id, "event_time_ms": CLOSE_MS - 1000 + event_id, "event_type": event_type,
        "attributes": attributes})


HISTORY = [
    _event(1, "WORKFLOW_EXECUTION_STARTED", ("ostinato.history.WorkflowExecutionStartedEventAttributes", {
        "workflow_type": "t", "task_queue": "q", "task_timeout_ms": 10_000, "first_execution_run_id": "r1",
        "attempt": 1})),
    _event(2, "WORKFLOW_EXECUTION_TERMINATED", ("ostinato.history.WorkflowExecutionTerminatedEventAttributes", {
        "reason": "test", "identity": "me"})),
]


def _visibility(run_id: str, closed: bool, length: int = 2) -> bytes:
    return codec.encode("ostinato.visibility.VisibilityRecord", {
        "namespace": "default", "workflow_id": "w/1", "run_id": run_id, "workflow_type": "t", "task_queue": "q",
        "status": "TERMINATED" if closed else "RUNNING", "start_time_ms": CLOSE_MS - 1000,
        "execution_time_ms": CLOSE_MS - 1000, "close_time_ms": CLOSE_MS if closed else None,
        "history_length": length, "version": length})


@pytest.fixture
def archiver(kafka: KafkaCluster, s3: Any, topic_prefix: str) -> Any:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    client = s3_client(s3.url, s3.access_key, s3.secret_key)
    ensure_bucket(client, f"rec-{topic_prefix.lower()}")
    histories: dict[str, list[bytes] | None] = {}
    store = S3Archive(client, f"rec-{topic_prefix.lower()}", "x")
    arch = Archiver(kafka.bootstrap, topic_prefix, SHARDS, store, lambda ns, wf, rid: histories.get(rid))
    yield arch, histories
    arch.stop()


def _confirmations(kafka: KafkaCluster, prefix: str) -> list[dict[str, Any]]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "peek", "enable.auto.commit": False})
    found = []
    try:
        for p in range(SHARDS):
            low, high = consumer.get_watermark_offsets(TopicPartition(f"{prefix}.commands", p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(f"{prefix}.commands", p, low)])
            while len([m for m in found if m["_p"] == p]) < high - low:
                msg = consumer.poll(5)
                assert msg is not None and msg.error() is None
                found.append({**codec.decode(msg.value())[1], "_p": p})
    finally:
        consumer.close()
    return found


def test_decisions(archiver: Any, kafka: KafkaCluster, topic_prefix: str) -> None:
    arch, histories = archiver
    key = run_key("default", "w/1", "r1").encode()
    assert arch.archive_record(key, None) is None  # a tombstone
    assert arch.archive_record(key, _visibility("r1", closed=False)) is None  # still running
    assert arch.archive_record(key, b"garbage") is None and arch.skipped == 1
    assert arch.archive_record(key, _visibility("gone", closed=True)) is None  # deleted meanwhile: nothing to do

    histories["r1"] = HISTORY[:1]  # the owner's store is behind the visibility record
    with pytest.raises(NotReady, match="1 of 2 events"):
        arch.archive_record(key, _visibility("r1", closed=True))
    histories["r1"] = HISTORY
    uri = arch.archive_record(key, _visibility("r1", closed=True))
    assert uri == f"{arch.archive.uri}default/2026/05/28/w%2F1/r1.avro"
    first = arch.archive.get(uri.split("/", 3)[3])
    assert arch.archive_record(key, _visibility("r1", closed=True)) == uri  # a repeat: same object, same bytes
    assert arch.archive.get(uri.split("/", 3)[3]) == first
    assert [e for e in arch.archive.read(uri).events] == [codec.decode(e)[1] for e in HISTORY]

    confirmations = _confirmations(kafka, topic_prefix)
    assert len(confirmations) == 2
    for command in confirmations:
        assert command["body"] == ("ostinato.command.ArchivalCompleted", {"uri": uri, "event_count": 2})
        assert command["workflow_id"] == "w/1" and command["run_id"] == "r1"
    assert arch.archived == 2
    assert [e.run_id for e in arch.archive.find("default", "w/1")] == ["r1"]
