"""`GET /api/v1/cluster/brokers` and `GET /api/v1/cluster/lag` against the real broker: a shard nobody processes
shows its commands as lag until a processor takes it, the visibility store catches up, answers are cached, and a
Kafka that does not answer is a 503 with `Retry-After`."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from ostinato.connectors.visibility_opensearch import OpenSearchVisibilityFeeder
from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas.cluster import ClusterSettings
from ostinato.schemas.keys import shard_for
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.admin.lag import partition_lags
from ostinato.services.frontend import cluster_api
from ostinato.services.server import ServerContext, create_app
from tests.tools.servers import ServerProcess

SHARDS = 2


def _start(server: ServerProcess, workflow_id: str) -> None:
    """A start the gateway hands to Kafka without waiting for a processor (`wait: false`)."""
    body = json.dumps({"workflow_id": workflow_id, "workflow_type": "Nobody", "task_queue": "lag-q",
                       "wait": False}).encode()
    request = urllib.request.Request(f"{server.url}/api/v1/namespaces/default/workflows", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 202


def _eventually(server: ServerProcess, path: str, test: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: Any = None
    while time.monotonic() < deadline:
        status, body = server.get(path)
        if status == 200 and test(body):
            return dict(body)
        time.sleep(0.5)
    raise AssertionError(f"{path} never passed the test; last answer {body}\n{server.tail()}")


def test_brokers_processor_lag_and_visibility_lag_from_the_broker(kafka: KafkaCluster, tmp_path: Path) -> None:
    prefix = f"lag{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    api_only = ServerProcess(kafka.bootstrap, prefix, tmp_path / "a", tmp_path / "a.log", processor=False).start()
    worker: ServerProcess | None = None
    try:
        api_only.wait_owning()
        status, brokers = api_only.get("/api/v1/cluster/brokers")
        assert status == 200, brokers
        host, port = kafka.bootstrap.split(",")[0].rsplit(":", 1)
        assert [(b["host"], b["port"], b["controller"], b["reachable"]) for b in brokers["brokers"]] == [
            (host, int(port), True, True)]
        assert brokers["cluster_id"]

        workflow_id = f"waits-{uuid.uuid4().hex[:6]}"
        shard = shard_for("default", workflow_id, SHARDS)
        for n in range(3):
            _start(api_only, f"{workflow_id}-{n}" if n else workflow_id)
        lag = _eventually(api_only, "/api/v1/cluster/lag",
                          lambda b: b["processor"]["shards"][shard]["lag"] >= 1)
        rows = lag["processor"]["shards"]
        assert [r["shard"] for r in rows] == list(range(SHARDS))
        assert rows[shard]["position"] is None  # no processor ever committed on this cluster
        assert lag["processor"]["lag"] == sum(r["end"] - r["start"] for r in rows) == 3
        assert lag["processor"]["group"] == f"{prefix}-history"
        assert lag["visibility"]["store"] == "sqlite" and lag["visibility"]["lag"] == 0  # nothing written yet

        worker = ServerProcess(kafka.bootstrap, prefix, tmp_path / "b", tmp_path / "b.log").start()
        worker.wait_owning(SHARDS)
        # The processor takes the starts: its group's offsets reach the ends; the visibility records it wrote reach
        # the API-only server's store.
        caught_up = _eventually(api_only, "/api/v1/cluster/lag", lambda b: b["processor"]["lag"] == 0 and all(
            r["position"] == r["end"] for r in b["processor"]["shards"] if r["end"] > 0) and b["visibility"]["lag"]
            == 0 and sum(p["end"] for p in b["visibility"]["partitions"]) > 0)
        assert sum(p["position"] for p in caught_up["visibility"]["partitions"]) > 0
    finally:
        if worker is not None:
            worker.stop()
        api_only.stop()


def test_answers_are_cached_and_a_kafka_that_does_not_answer_is_a_503(tmp_path: Path) -> None:
    settings = ClusterSettings("p", 2, 1, 8, 0, "test")

    async def scenario() -> None:
        app = create_app(ServerContext("127.0.0.1:1", settings))  # nothing listens on port 1
        async with TestClient(TestServer(app)) as client:
            started = time.monotonic()
            answers = await asyncio.gather(*(client.get("/api/v1/cluster/lag") for _ in range(5)))
            assert [a.status for a in answers] == [503] * 5
            assert all(a.headers["Retry-After"] for a in answers)
            assert (await answers[0].json())["code"] == "kafka_unavailable"
            # Five requests at once waited for one computation, not five in a row.
            assert time.monotonic() - started < 2.5 * cluster_api.TIMEOUT_S
            brokers = await client.get("/api/v1/cluster/brokers")
            assert brokers.status == 503

    asyncio.run(scenario())


def test_lag_counts_from_the_partition_start_when_the_reader_never_committed() -> None:
    rows = partition_lags({0: 7}, {0: 2, 1: 5}, {0: 10, 1: 9})
    assert [(r.partition, r.position, r.lag) for r in rows] == [(0, 7, 3), (1, None, 4)]
    assert partition_lags({0: 12}, {}, {0: 10})[0].lag == 0  # a position past a stale end is no lag


def test_the_opensearch_feeder_tells_its_groups_committed_positions(kafka: KafkaCluster) -> None:
    """Its positions are Kafka's (the group's committed offsets), so no OpenSearch is needed to read them."""
    prefix = f"lago{uuid.uuid4().hex[:8]}"
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    feeder = OpenSearchVisibilityFeeder(kafka.bootstrap, prefix, None)  # type: ignore[arg-type] # never started
    topic = topic_name(prefix, Topic.VISIBILITY)
    assert _positions(feeder) == {0: -1, 1: -1}
    request = ConsumerGroupTopicPartitions(feeder.group_id, [TopicPartition(topic, 1, 0)])
    admin = admin_client(kafka.bootstrap)  # held while its futures are pending: a collected one cancels them
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(30)
    assert _positions(feeder) == {0: -1, 1: 0}


def _positions(feeder: OpenSearchVisibilityFeeder) -> dict[int, int]:
    """The positions, asked again while the group's coordinator is still being found (a fresh group's first
    request can meet NOT_COORDINATOR: the lag endpoint answers 503 then)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return feeder.positions()
        except KafkaException as exc:
            if time.monotonic() > deadline or exc.args[0].code() != KafkaError.NOT_COORDINATOR:
                raise
            time.sleep(0.2)
