"""The history processor on a real broker: workflows complete, histories are clean, stores equal their fold."""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.keys import shard_for, workflow_key
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.history.store import CHECKPOINT_HISTORY, CHECKPOINT_STATE, Family, unpack_int
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess
from tests.tools.stores import dump_store, durable_states, mismatches, shard_dirs
from tests.tools.worker import TestWorker, command_record
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 4
QUEUE = "q"


@pytest.fixture
def server(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path):
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    srv.wait_owning(SHARDS)
    yield srv
    srv.stop()


def _end_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checkpoint-check"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def _metric(srv: ServerProcess, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(srv.url + "/metrics", timeout=10).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^({name}[^ ]*) (\S+)$", text, re.M)}


def test_a_thousand_workflows_complete_with_clean_histories(kafka: KafkaCluster, topic_prefix: str,
                                                            server: ServerProcess) -> None:
    with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 700, "hello", QUEUE)
        ids += start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 300, "chain", QUEUE, input="x")
        closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=180)
    assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 1000}
    report = check_history(kafka.bootstrap, topic_prefix)
    assert report.ok, report.problems[:20]
    assert report.runs == 1000 and report.closed_runs == {"COMPLETED": 1000}
    cli = run_cli("check", "history", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "-o", "json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["runs"] == 1000
    server.stop()
    assert mismatches(report, durable_states([server.data_dir], topic_prefix)) == []
    # Each store's checkpoint is just past its shard's last changelog record (only that record reports its
    # delivery): the partition's end is one further, the commit marker of the transaction that wrote it.
    for path in shard_dirs(server.data_dir, topic_prefix):
        shard = int(path.name.rpartition("-")[2])
        meta = dump_store(path)[Family.META]
        for topic, checkpoint in ((Topic.STATE, CHECKPOINT_STATE), (Topic.HISTORY, CHECKPOINT_HISTORY)):
            end = _end_offset(kafka.bootstrap, topic_name(topic_prefix, topic), shard)
            assert unpack_int(meta[checkpoint]) == end - 1, (path.name, topic, end)


def test_a_thousand_one_second_timers_fire_exactly_once(kafka: KafkaCluster, topic_prefix: str,
                                                       server: ServerProcess) -> None:
    with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 1000, "sleep", QUEUE, input={"sleep_ms": 1000})
        closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=180)
    assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 1000}
    report = check_history(kafka.bootstrap, topic_prefix)
    assert report.ok, report.problems[:20]
    fired = Counter(e["event_type"] for events in report.histories.values() for e in events)
    assert fired["TIMER_STARTED"] == fired["TIMER_FIRED"] == 1000
    lateness = _metric(server, "ostinato_processor_timer_lateness_seconds")
    print("timer lateness histogram:", {k: v for k, v in lateness.items() if "bucket" in k})


def test_a_deleted_store_is_restored_identically(kafka: KafkaCluster, topic_prefix: str,
                                                 server: ServerProcess) -> None:
    with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 200, "hello", QUEUE)
        wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=120)
    server.stop()
    before = {p.name: dump_store(p) for p in shard_dirs(server.data_dir, topic_prefix)}
    shutil.rmtree(server.data_dir / topic_prefix / "shard-1")
    server.start()
    server.wait_owning(SHARDS)
    server.stop()
    after = {p.name: dump_store(p) for p in shard_dirs(server.data_dir, topic_prefix)}
    for family in (Family.STATE, Family.HISTORY, Family.TIMERS, Family.SIZES):
        assert after["shard-1"][family] == before["shard-1"][family], family
    assert len(after["shard-1"][Family.HISTORY]) > 0
    assert re.search(r"shard 1: restored [1-9]\d* records", server.tail(400))


def test_bad_input_is_rejected_and_the_shard_keeps_going(kafka: KafkaCluster, topic_prefix: str,
                                                         server: ServerProcess) -> None:
    topic = f"{topic_prefix}.commands"
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    key = workflow_key("default", "bad-1")
    partition = shard_for("default", "bad-1", SHARDS)
    producer.produce(topic, b"\x00garbage", key.encode(), partition=partition)
    producer.produce(topic, codec.encode("ostinato.reply.Rejected", {"code": "MALFORMED", "message": "x",
                                                                    "existing_run_id": ""}),
                     key.encode(), partition=partition)
    stale = command_record("default", "bad-1", "RespondActivityTaskCompleted",
                           {"scheduled_event_id": 5, "attempt": 1, "result": []}, run_id="no-such-run",
                           identity="test")
    producer.produce(topic, codec.encode("ostinato.command.Command", stale), key.encode(), partition=partition)
    other = (partition + 1) % SHARDS
    wrong = command_record("default", "bad-1", "SignalWorkflowExecution", {"signal_name": "s", "input": []},
                           identity="test")
    producer.produce(topic, codec.encode("ostinato.command.Command", wrong), key.encode(), partition=other)
    producer.flush(10)
    with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE)
        closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60)
    assert set(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rejections = _metric(server, "ostinato_processor_rejections_total")
        if sum(rejections.values()) >= 4:
            break
        time.sleep(0.2)
    assert rejections == {'ostinato_processor_rejections_total{reason="MALFORMED"}': 2.0,
                          'ostinato_processor_rejections_total{reason="NOT_FOUND"}': 1.0,
                          'ostinato_processor_rejections_total{reason="WRONG_SHARD"}': 1.0}, rejections
