"""The OpenSearch visibility feeder on a real broker and a real OpenSearch: an outage loses nothing, commits wait."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ostinato.connectors.visibility_opensearch import (
    OpenSearchUnavailableError,
    OpenSearchVisibilityFeeder,
    OpenSearchVisibilityStore,
)
from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas.keys import run_key, shard_for
from ostinato.services.admin.cluster import init_cluster
from tests.integration.test_visibility_feeder import NS, SHARDS, Writer, record

Outage = Callable[[], AbstractContextManager[None]]


@pytest.fixture(scope="session")
def opensearch_url(request: pytest.FixtureRequest) -> str:
    """An OpenSearch of the environment's choosing, else the session's `opensearch` fixture."""
    url = os.environ.get("OSTINATO_TEST_OPENSEARCH_URL")
    return url if url else str(request.getfixturevalue("opensearch").url)


@pytest.fixture
def outage(request: pytest.FixtureRequest, opensearch_url: str) -> Outage:
    """Takes OpenSearch away for the length of a `with`: the session node is stopped and started again; an
    outside node (OSTINATO_TEST_OPENSEARCH_URL) is frozen with SIGSTOP/SIGCONT if OSTINATO_TEST_OPENSEARCH_PID
    names its JVM, so requests time out instead of being refused."""
    if not os.environ.get("OSTINATO_TEST_OPENSEARCH_URL"):
        node = request.getfixturevalue("opensearch")

        @contextmanager
        def stopped() -> Iterator[None]:
            node.stop()
            try:
                yield
            finally:
                node.start()
        return stopped
    pid = os.environ.get("OSTINATO_TEST_OPENSEARCH_PID")
    if not pid:
        pytest.skip("an outside OpenSearch without OSTINATO_TEST_OPENSEARCH_PID cannot be taken away")

    @contextmanager
    def frozen() -> Iterator[None]:
        os.kill(int(pid), signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(int(pid), signal.SIGCONT)
    return frozen


def committed(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(SHARDS)], timeout=30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


def statuses(store: OpenSearchVisibilityStore) -> dict[str, str]:
    """Every run's status. A search that times out is asked again (a few times): just after an outage, on a loaded
    machine, OpenSearch's first searches can outlast the store's 3 s read timeout; that is not what is tested."""
    for attempt in range(5):
        try:
            rows, token = store.list(NS, "ORDER BY WorkflowId", page_size=1000)
            break
        except OpenSearchUnavailableError:
            if attempt == 4:
                raise
            time.sleep(2)
    assert token is None
    return {r["workflow_id"]: r["status"] for r in rows}


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce_garbage(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=run_key(NS, "junk", "run-1").encode(), value=b"not avro", partition=0)
    producer.flush(30)


def test_feeder_indexes_survives_an_outage_and_rebuilds(
        kafka: KafkaCluster, topic_prefix: str, opensearch_url: str, outage: Outage) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    writer = Writer(kafka.bootstrap, topic_prefix)
    expected: dict[str, str] = {f"wf-{i}": "RUNNING" for i in range(40)}
    assert {shard_for(NS, w, SHARDS) for w in expected} == {0, 1}
    writer.send([record(w, 2) for w in expected])
    writer.send([record("wf-0", 9, "FAILED"), record("ghost", 1)], commit=False)
    produce_garbage(kafka.bootstrap, writer.topic)

    # A short request timeout, so a frozen node shows up as a failure within the test's patience.
    store = OpenSearchVisibilityStore(opensearch_url, f"vis-feeder-{uuid.uuid4().hex[:10]}", timeout=3)
    feeder = OpenSearchVisibilityFeeder(kafka.bootstrap, topic_prefix, store, max_backoff=2.0)
    started = time.monotonic()
    feeder.start()
    try:
        assert feeder.wait_caught_up(60)
        print(f"first catch-up {time.monotonic() - started:.2f}s")
        assert statuses(store) == expected  # nothing of the aborted transaction
        assert store.skipped == 1 and feeder.lag() == 0
        before = committed(kafka.bootstrap, feeder.group_id, writer.topic)

        with outage():
            updates: list[dict[str, Any] | tuple[str, None]] = [
                *(record(f"wf-{i}", 5, "COMPLETED", close_time_ms=1_700_000_100_000) for i in range(10)),
                record("wf-1", 3, "RUNNING"),  # late: an older version after a newer one
                ("wf-2", None),  # tombstone
                *(record(f"new-{i}", 1) for i in range(30)),
            ]
            writer.send(updates)
            writer.send([record("wf-3", 99, "TERMINATED")], commit=False)
            wait_for(lambda: feeder.unavailable, 30, "the feeder to notice the outage")
            time.sleep(4)  # several back-off rounds
            assert committed(kafka.bootstrap, feeder.group_id, writer.topic) == before  # nothing committed
            assert feeder.lag() >= len(updates)
            down_at = time.monotonic()
        expected.update({f"wf-{i}": "COMPLETED" for i in range(10)})
        del expected["wf-2"]
        expected.update({f"new-{i}": "RUNNING" for i in range(30)})

        assert feeder.wait_caught_up(120)
        print(f"caught up {time.monotonic() - down_at:.2f}s after the outage ended")
        assert statuses(store) == expected
        assert feeder.lag() == 0 and not feeder.unavailable and feeder.failures > 0 and feeder.error is None
        assert store.count(NS, "CloseTime IS NOT NULL") == 9  # wf-0..9 closed, wf-2 deleted

        feeder.rebuild()  # the index from nothing, the group back to offset 0
        assert feeder.wait_caught_up(60)
        assert statuses(store) == expected and feeder.lag() == 0
    finally:
        feeder.stop()
        store.rebuild()
        store._client.indices.delete(index=store.index, ignore_unavailable=True)
        store.close()
    assert feeder.error is None


def test_a_restarted_feeder_resumes_from_the_group_offsets(
        kafka: KafkaCluster, topic_prefix: str, opensearch_url: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    writer = Writer(kafka.bootstrap, topic_prefix)
    writer.send([record("a", 1), record("b", 1)])
    store = OpenSearchVisibilityStore(opensearch_url, f"vis-feeder-{uuid.uuid4().hex[:10]}")
    try:
        feeder = OpenSearchVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
        feeder.start()
        assert feeder.wait_caught_up(60)
        feeder.stop()
        store.rebuild()
        writer.send([record("c", 1)])
        feeder = OpenSearchVisibilityFeeder(kafka.bootstrap, topic_prefix, store)
        feeder.start()
        assert feeder.wait_caught_up(60)
        feeder.stop()
        assert statuses(store) == {"c": "RUNNING"}  # only what came after the committed offsets was read
    finally:
        store._client.indices.delete(index=store.index, ignore_unavailable=True)
        store.close()
