"""Ingress of Avro in Confluent's Schema Registry wire format (issue 22), end to end on a real broker and a real
server: schemas registered through the registry's HTTP API, framed records produced to a real topic, workflows
started with the decoded fields; a record with an unknown schema id and one that is not framed become dead letters
with the reason; while the registry is stopped nothing is dead-lettered and nothing is committed past the first
record that needs it, and ingestion resumes when it is back.

The registry is the loopback stand-in of tests/tools/schema_registry.py (no real registry installs here; see there).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from fastavro import parse_schema

from ostinato.connectors.schema_registry import encode
from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas import codec
from ostinato.schemas.keys import split_key
from ostinato.services.admin.checker import read_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.schema_registry import StandInRegistry, register
from tests.tools.servers import ServerProcess
from tests.tools.topics import read_committed

PARTITIONS = 2
V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "gift", "type": "boolean", "default": False}]}


def _committed(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(records the group committed past, records on the topic)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = sum(max(0, tp.offset) for tp in consumer.committed(tps, timeout=30))
        return committed, sum(consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in tps)
    finally:
        consumer.close()


def _until(condition: Callable[[], bool], what: str, server: ServerProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        server.check_alive()
        assert time.monotonic() < deadline, f"{what}: {server.tail()}"
        time.sleep(0.2)


def _started(bootstrap: str, prefix: str) -> dict[str, object]:
    """workflow id -> the input its run was started with."""
    inputs = {}
    for key, value in read_history(bootstrap, prefix):
        if value is None:
            continue
        _, event = codec.decode(value)
        if event["event_type"] == "WORKFLOW_EXECUTION_STARTED":
            inputs[split_key(key)[1]] = json.loads(event["attributes"][1]["input"][0]["data"])
    return inputs


def _metric(server: ServerProcess, name: str) -> float:
    import urllib.request
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    found = re.search(rf'^{name}(?:_total)?\{{mapping="orders"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_confluent_framed_records_start_workflows_and_an_outage_dead_letters_nothing(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    bootstrap, prefix = kafka.bootstrap, topic_prefix
    init_cluster(bootstrap, prefix, shards=2)
    topic = f"{prefix}-shop-orders"
    admin = admin_client(bootstrap)  # kept: the futures need their client alive
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    registry = StandInRegistry().start()
    server = None
    try:
        v1 = register(registry.url, f"{topic}-value", V1)
        v2 = register(registry.url, f"{topic}-value", V2)  # registered now, first written while the registry is down
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for n in range(20):
            producer.produce(topic, encode(v1, parse_schema(V1), {"id": n, "customer": f"c{n}"}), str(n).encode())
        producer.produce(topic, b"\x00\x00\x00\x03\xe7" + encode(v1, parse_schema(V1), {"id": 98, "customer": "x"})[5:],
                         b"bad-id")
        producer.produce(topic, json.dumps({"id": 99, "customer": "plain"}).encode(), b"not-framed")
        assert producer.flush(30) == 0
        (tmp_path / "ingress.yaml").write_text(f"""
registry:
  url: {registry.url}
mappings:
  - name: orders
    topic: {topic}
    action: start
    format: avro
    workflow_id: "order-{{value.id}}"
    workflow_type: done
    task_queue: orders
""")
        server = ServerProcess(bootstrap, prefix, tmp_path / "data", tmp_path / "server.log",
                               extra_args=("--ingress", str(tmp_path / "ingress.yaml"))).start()
        group = f"{prefix}-ingress-orders"
        _until(lambda: (lambda c: c[0] == c[1] == 22)(_committed(bootstrap, group, topic)), "first records", server)

        _until(lambda: len(_started(bootstrap, prefix)) >= 20, "first runs started", server)
        assert _started(bootstrap, prefix) == {f"order-{n}": {"id": n, "customer": f"c{n}"} for n in range(20)}
        letters = {m.key(): dict(m.headers() or []) for m in read_committed(bootstrap, f"{topic}.dlq")}
        assert set(letters) == {b"bad-id", b"not-framed"}
        assert letters[b"bad-id"]["ostinato.error"].startswith(b"schema id 999 is not in the schema registry at ")
        assert letters[b"not-framed"]["ostinato.error"] == (
            b"the value is not in the Confluent wire format: its first byte is 0x7b, not the magic byte 0x00")

        # The registry goes away; the producers move to schema v2, which the ingress has not fetched yet.
        registry.stop()
        for n in range(20, 30):
            producer.produce(topic, encode(v2, parse_schema(V2), {"id": n, "customer": f"c{n}", "gift": True}),
                             str(n).encode())
        assert producer.flush(30) == 0
        _until(lambda: _metric(server, "ostinato_ingress_registry_unavailable") >= 3, "retries counted", server)
        assert _metric(server, "ostinato_ingress_registry_waiting") == 1.0
        assert _committed(bootstrap, group, topic) == (22, 32)  # nothing committed past the records that need it
        assert len(read_committed(bootstrap, f"{topic}.dlq")) == 2  # and nothing dead-lettered
        assert "nothing is dead-lettered: retrying the batch from" in server.tail(200)

        registry.start()  # back, same port, same schemas
        _until(lambda: (lambda c: c[0] == c[1] == 32)(_committed(bootstrap, group, topic)), "resumed", server)
        _until(lambda: len(_started(bootstrap, prefix)) >= 30, "later runs started", server)
        started = _started(bootstrap, prefix)
        for n in range(20, 30):
            assert started[f"order-{n}"] == {"id": n, "customer": f"c{n}", "gift": True}
        assert len(started) == 30
        assert len(read_committed(bootstrap, f"{topic}.dlq")) == 2
        assert _metric(server, "ostinato_ingress_registry_waiting") == 0.0
        assert "the schema registry answers again after" in server.tail(200)
    finally:
        if server is not None:
            server.stop()
        registry.stop()
