"""The history checker against a real broker: it reads every partition read_committed, so aborted records are
never seen, an open transaction is named instead of waited on forever, and the CLI exits by what it found."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.keys import history_key, shard_for
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.checker import CheckerError, check_history, read_history
from ostinato.services.admin.cluster import init_cluster
from ostinato.services.cli.check import app
from ostinato.streams.engine import InMemoryEngine

Record = dict[str, Any]
Placed = tuple[int, str, bytes | None]  # (partition, key, value)
NS, Q, SHARDS = "default", "orders", 2


def _histories() -> InMemoryEngine:
    """`done` completed in one workflow task; `waiting` and `lost` wait for their first."""
    engine = InMemoryEngine(shards=SHARDS)
    engine.start_workflow(NS, "done", "Done", Q)
    polled = engine.poll_workflow_task(Q)
    assert polled is not None
    engine.complete_workflow_task(polled[1], [("CompleteWorkflowExecutionCommand", {})])
    engine.start_workflow(NS, "waiting", "Waiting", Q)
    engine.start_workflow(NS, "lost", "Lost", Q)
    return engine


def _placed(engine: InMemoryEngine, workflow_id: str, partition: int | None = None) -> list[Placed]:
    """A run's records on the partition of its shard, as the owning processor writes them (or on `partition`)."""
    run = (NS, workflow_id, engine.current_run_id(NS, workflow_id))
    p = shard_for(NS, workflow_id, SHARDS) if partition is None else partition
    return [(p, history_key(*run, e["event_id"]), codec.encode("ostinato.history.HistoryEvent", e))
            for e in engine.histories[run]]


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    return producer


def _send(producer: Producer, topic: str, records: list[Placed]) -> None:
    for partition, key, value in records:
        producer.produce(topic, key=key.encode(), value=value, partition=partition)
    producer.flush(30)  # in the log before the commit or abort: the test is about the broker filtering them


def _write(bootstrap: str, prefix: str, committed: list[list[Placed]], aborted: list[Placed]) -> None:
    topic = topic_name(prefix, Topic.HISTORY)
    producer = _producer(bootstrap, f"{prefix}-writer")
    for batch in committed:
        producer.begin_transaction()
        _send(producer, topic, batch)
        producer.commit_transaction(30)
    if aborted:
        producer.begin_transaction()
        _send(producer, topic, aborted)
        producer.abort_transaction(30)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["history", *args])


def test_a_clean_history_passes_and_aborted_records_are_not_read(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    engine = _histories()
    done, waiting = _placed(engine, "done"), _placed(engine, "waiting")
    # Aborted last, so each partition ends in aborted records and a marker the consumer never delivers.
    junk = [(done[0][0], done[1][1], b"junk"), (waiting[0][0], waiting[0][1], b"junk"),
            *[(p, f"{NS}/done/run/{'9' * 20}", b"junk") for p in range(SHARDS)]]
    _write(kafka.bootstrap, topic_prefix, [done, waiting], junk)

    report = check_history(kafka.bootstrap, topic_prefix, timeout=20)

    assert report.ok, [str(p) for p in report.problems]
    # done: started, task scheduled/started/completed, completed; waiting: started, its task scheduled (and out).
    assert (report.runs, report.events, report.open_runs, dict(report.closed_runs)) == (2, 7, 1, {"COMPLETED": 1})
    assert sorted(read_history(kafka.bootstrap, topic_prefix)) == sorted((k, v) for _, k, v in done + waiting)
    result = _cli("--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--output", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "ok": True, "runs": 2, "events": 7, "records": 7, "open_runs": 1, "closed_runs": {"COMPLETED": 1},
        "deleted_runs": 0, "problem_count": 0, "problems": []}


def test_a_broken_history_is_reported_exactly(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    engine = _histories()
    done, waiting = _placed(engine, "done"), _placed(engine, "waiting")
    wrong = 1 - shard_for(NS, "lost", SHARDS)
    lost = _placed(engine, "lost", partition=wrong)
    done_run, waiting_run = done[0][1].rsplit("/", 1)[0], waiting[0][1].rsplit("/", 1)[0]
    _write(kafka.bootstrap, topic_prefix,
           committed=[done, [waiting[1]], lost, [done[2]]],  # waiting lacks its start; done's event 3 comes twice
           aborted=[waiting[0], done[2]])  # what would repair waiting and duplicate more: never committed

    report = check_history(kafka.bootstrap, topic_prefix, timeout=20)

    problems = sorted(("/".join(p.run), p.event_id, p.message) for p in report.problems)
    assert problems == sorted([
        (done_run, 3, "duplicate: the key was written again (identical bytes)"),
        (waiting_run, 2, "gap: event(s) 1 missing before it"),
        ("/".join((NS, "lost", engine.current_run_id(NS, "lost"))), 1,
         f"in partition {wrong}, but {NS}/lost belongs to shard {1 - wrong}"),
    ])
    assert (report.runs, report.events, report.records) == (3, 8, 9)

    table = _cli("--kafka", kafka.bootstrap, "--prefix", topic_prefix)
    assert table.exit_code == 1, table.output
    assert "duplicate: the key was written again" in table.output and "history has problems" in table.output
    as_json = _cli("--kafka", kafka.bootstrap, "--prefix", topic_prefix, "-o", "json", "--max-problems", "1")
    assert as_json.exit_code == 1
    data = json.loads(as_json.output)
    assert (data["ok"], data["problem_count"], len(data["problems"])) == (False, 3, 1)


def test_an_open_transaction_is_named_then_its_abort_lets_the_check_finish(kafka: KafkaCluster,
                                                                           topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    engine = _histories()
    done = _placed(engine, "done")
    _write(kafka.bootstrap, topic_prefix, [done], [])
    producer = _producer(kafka.bootstrap, f"{topic_prefix}-open")
    producer.begin_transaction()
    _send(producer, topic_name(topic_prefix, Topic.HISTORY), [(done[0][0], done[0][1], b"pending")])

    started = time.monotonic()
    with pytest.raises(CheckerError) as stuck:
        check_history(kafka.bootstrap, topic_prefix, timeout=3)
    assert time.monotonic() - started < 30
    assert f"{topic_prefix}.history: partition {done[0][0]} at offset" in str(stuck.value)
    assert "transaction" in str(stuck.value)
    cli = _cli("--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--timeout", "3")
    assert cli.exit_code == 2 and "error:" in cli.output

    producer.abort_transaction(30)
    report = check_history(kafka.bootstrap, topic_prefix, timeout=20)
    assert report.ok and report.runs == 1, [str(p) for p in report.problems]


def test_a_missing_history_topic_is_a_clear_error(kafka: KafkaCluster, topic_prefix: str) -> None:
    with pytest.raises(CheckerError, match=f"topic {topic_prefix}.history does not exist"):
        check_history(kafka.bootstrap, topic_prefix, timeout=10)
