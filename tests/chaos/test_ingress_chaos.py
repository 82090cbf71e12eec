"""Kafka ingress exactly once (issue 22): records of a source topic become workflows and signals while the server
that runs the ingress is killed with SIGKILL three times. Every record becomes exactly one command (none twice on
the commands topic), every order workflow starts once, every account gets its signals once and in order, the
records that do not map land on the dead-letter topic once each, with the reason, and every completed order's
outcome is on the outcomes topic once (a Kafka shop's path: a topic of orders -> workflows -> orders completed).

The short form runs in CI; `-m chaos_full` runs the issue's 10,000 records of each kind.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import admin_client
from ostinato.schemas import codec
from ostinato.schemas.keys import split_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.checker import check_history, read_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess
from tests.tools.topics import read_committed
from tests.tools.worker import TestWorker
from tests.tools.workload import wait_closed

SHARDS = 4
SOURCE_PARTITIONS = 4
QUEUE = "ingress"
ACCOUNTS = 50
BAD_EVERY = 500  # every 500th order record is not JSON: a dead letter


def _config(path: Path, orders: str, events: str, completed: str) -> Path:
    path.write_text(f"""
outcomes:
  - name: completed
    topic: {completed}
    workflow_types: [done]
mappings:
  - name: orders
    topic: {orders}
    action: start
    workflow_id: "order-{{value.n}}"
    workflow_type: done
    task_queue: {QUEUE}
  - name: accounts
    topic: {events}
    action: signal-with-start
    workflow_id: "account-{{key}}"
    workflow_type: idle
    task_queue: {QUEUE}
    signal: step
    input: value.seq
""")
    return path


class _Source:
    """The shop's two source topics and a producer that writes their records in order, a chunk at a time, while
    the test kills and restarts the server: the records keep coming as they would from a live shop."""

    def __init__(self, kafka: KafkaCluster, orders: str, events: str, count: int) -> None:
        admin = admin_client(kafka.bootstrap)
        for future in admin.create_topics([NewTopic(t, SOURCE_PARTITIONS, 1) for t in (orders, events)]).values():
            future.result(30)
        self.orders, self.events, self.count = orders, events, count
        self.produced = 0
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 1})

    def produce(self, upto: int) -> None:
        """Order records (every BAD_EVERY-th one not JSON) and account events, keyed by account, with per-account
        sequence numbers, up to record `upto`, acknowledged when this returns."""
        for n in range(self.produced, min(upto, self.count)):
            if n % BAD_EVERY == BAD_EVERY - 1:
                self.producer.produce(self.orders, b"{not json", str(n).encode())
            else:
                self.producer.produce(self.orders, json.dumps({"n": n}).encode(), str(n).encode())
            self.producer.produce(self.events, json.dumps({"seq": n // ACCOUNTS}).encode(), str(n % ACCOUNTS).encode())
        assert self.producer.flush(60) == 0
        self.produced = max(self.produced, min(upto, self.count))

    @property
    def bad(self) -> int:
        return self.count // BAD_EVERY


def _taken(kafka: KafkaCluster, group: str, topic: str) -> tuple[int, int]:
    """(records the group committed past, records on the topic)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(SOURCE_PARTITIONS)]
        committed = sum(max(0, tp.offset) for tp in consumer.committed(tps, timeout=30))
        total = sum(consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in tps)
        return committed, total
    finally:
        consumer.close()


def _run(kafka: KafkaCluster, prefix: str, tmp_path: Path, count: int) -> None:
    init_cluster(kafka.bootstrap, prefix, shards=SHARDS)
    source = _Source(kafka, f"{prefix}-shop-orders", f"{prefix}-shop-events", count)
    orders, events = source.orders, source.events
    good, bad = count - source.bad, source.bad
    completed = f"{prefix}-orders-completed"
    config = _config(tmp_path / "ingress.yaml", orders, events, completed)
    server = ServerProcess(kafka.bootstrap, prefix, tmp_path / "data", tmp_path / "server.log",
                           extra_args=("--ingress", str(config))).start()
    group = f"{prefix}-ingress-orders"
    left_behind: list[tuple[int, int]] = []
    try:
        with TestWorker(kafka.bootstrap, prefix, SHARDS, QUEUE):
            # Three SIGKILLs while records arrive: the records come a chunk at a time, and each incarnation is
            # killed once it has taken some of them and a quarter more of the records are out, right after one more
            # chunk is acknowledged: no ingress fetches, maps and commits a chunk in the microseconds between the
            # flush and the kill, so each kill leaves records behind (in an open transaction or not yet fetched) for
            # the next incarnation. While it waits for a restarted incarnation to take its first records, the
            # source writes at most an eighth of the records ahead of the quarter: CI saw the third restart take
            # so long that all 2,000 records were out and taken before its kill. The next chunk is written while
            # the server is down. Each restarted ingress must get going before Kafka's default session (45 s)
            # would have let its dead incarnation go: the groups' session is the brokers' minimum
            # (`group_session_timeout_ms`).
            chunk = max(1, count // 80)
            taken_at_start = 0
            for quarter in (1, 2, 3):
                deadline = time.monotonic() + 40
                ahead = quarter * count // 4 + count // 8
                while source.produced < quarter * count // 4 or _taken(kafka, group, orders)[0] <= taken_at_start:
                    server.check_alive()
                    assert time.monotonic() < deadline, f"ingress stalled at {_taken(kafka, group, orders)}: " \
                                                        f"{server.tail()}"
                    if source.produced < ahead:
                        source.produce(source.produced + chunk)
                    time.sleep(0.02)
                source.produce(source.produced + chunk)
                server.kill()
                taken_at_start, on_topic = _taken(kafka, group, orders)
                left_behind.append((taken_at_start, on_topic))
                source.produce(source.produced + chunk)
                server.start()
            while source.produced < count:
                source.produce(source.produced + chunk)
                time.sleep(0.02)
            deadline = time.monotonic() + 300
            while any(a < b for a, b in (_taken(kafka, group, orders),
                                         _taken(kafka, f"{prefix}-ingress-accounts", events))):
                server.check_alive()
                assert time.monotonic() < deadline, server.tail()
                time.sleep(0.5)
            order_ids = [f"order-{n}" for n in range(count) if n % BAD_EVERY != BAD_EVERY - 1]
            closed = wait_closed(kafka.bootstrap, prefix, order_ids, timeout=300)
            assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": good}
            _wait_signals(kafka, prefix, count)
            _wait_outcomes(kafka, completed, good)
            metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
            for line in ('ostinato_ingress_lag{mapping="orders"} 0.0', 'ostinato_ingress_lag{mapping="accounts"} 0.0'):
                assert line in metrics, [m for m in metrics.splitlines() if m.startswith("ostinato_ingress")]
            assert re.search(r'^ostinato_outcomes_records_total\{stream="completed"\} [1-9]', metrics, re.M)
    finally:
        server.stop()
    assert len(left_behind) == 3
    assert all(taken < on_topic for taken, on_topic in left_behind), \
        f"a kill found every record taken (taken, on the topic): {left_behind}"

    # The commands topic: each source record made exactly one command.
    commands = [codec.decode(m.value())[1] for m in read_committed(kafka.bootstrap, topic_name(prefix, Topic.COMMANDS))]
    by_mapping = defaultdict(Counter)
    for command in commands:
        if command["identity"].startswith("ingress/"):
            by_mapping[command["identity"]][command["request_id"]] += 1
    assert len(by_mapping["ingress/orders"]) == good and set(by_mapping["ingress/orders"].values()) == {1}
    assert len(by_mapping["ingress/accounts"]) == count and set(by_mapping["ingress/accounts"].values()) == {1}

    # History: one run per order and per account, signals once each and in order per account.
    report = check_history(kafka.bootstrap, prefix, timeout=60)
    assert report.ok, report.problems[:20]
    assert report.runs == good + ACCOUNTS

    # The outcomes stream: each completed order once, with its result.
    outcomes = [json.loads(m.value()) for m in read_committed(kafka.bootstrap, completed)]
    assert Counter(o["workflow_id"] for o in outcomes) == Counter(order_ids)
    for outcome in outcomes:
        assert outcome["status"] == "COMPLETED" and outcome["workflow_type"] == "done", outcome
        assert outcome["result"] == {"n": int(outcome["workflow_id"].removeprefix("order-"))}, outcome

    # Dead letters: each bad record once, with the reason.
    letters = read_committed(kafka.bootstrap, f"{orders}.dlq")
    assert sorted(int(m.key()) for m in letters) == [n for n in range(count) if n % BAD_EVERY == BAD_EVERY - 1]
    assert len(letters) == bad
    for letter in letters:
        headers = dict(letter.headers() or [])
        assert headers["ostinato.error"].startswith(b"the value is not JSON"), headers
        assert headers["ostinato.mapping"] == b"orders"


def _wait_outcomes(kafka: KafkaCluster, topic: str, count: int) -> None:
    deadline = time.monotonic() + 300
    while (seen := len(read_committed(kafka.bootstrap, topic))) < count:
        assert time.monotonic() < deadline, f"{seen} of {count} outcomes on {topic}"
        time.sleep(1)


def _signals(kafka: KafkaCluster, prefix: str) -> dict[str, list[int]]:
    seqs: dict[str, list[int]] = defaultdict(list)
    for key, value in read_history(kafka.bootstrap, prefix):
        if value is None:
            continue
        workflow_id = split_key(key)[1]
        if not workflow_id.startswith("account-"):
            continue
        _, event = codec.decode(value)
        if event["event_type"] == "WORKFLOW_EXECUTION_SIGNALED":
            seqs[workflow_id].append(json.loads(event["attributes"][1]["input"][0]["data"]))
    return seqs


def _wait_signals(kafka: KafkaCluster, prefix: str, count: int) -> None:
    deadline = time.monotonic() + 300
    while True:
        seqs = _signals(kafka, prefix)
        seen = sum(len(s) for s in seqs.values())
        if seen >= count:
            break
        assert time.monotonic() < deadline, f"{seen} of {count} signals in history"
        time.sleep(1)
    per_account = count // ACCOUNTS
    assert sorted(seqs) == sorted(f"account-{a}" for a in range(ACCOUNTS))
    for account, received in seqs.items():
        assert received == list(range(per_account)), f"{account}: {received[:20]}..."


def test_ingress_is_exactly_once_across_three_kills(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=2_000)


@pytest.mark.chaos_full
def test_ingress_is_exactly_once_across_three_kills_full(kafka: KafkaCluster, topic_prefix: str,
                                                         tmp_path: Path) -> None:
    _run(kafka, topic_prefix, tmp_path, count=10_000)
