"""The faust audit example (examples/audit) as an analyst runs it: one-shot, as a child process, against a real
broker, over histories that include an aborted transaction it must not count.

The histories are made by the real core (`InMemoryEngine`: deciders and appliers, a fake clock for activity
durations) and written to `<prefix>.history` with the project's codec and keys, on each workflow's shard, in
Kafka transactions as the processor writes them. Running them through a server and workers would not reach
compensations, slow or timed-out activities in a test this short; the events are the core's own, with the
processor's keys, partitions, codec and transactions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from ostinato.infra.kafka import KafkaCluster
from ostinato.schemas import codec
from ostinato.schemas.keys import history_key, shard_for
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.cluster import init_cluster
from ostinato.streams.engine import InMemoryEngine

REPO = Path(__file__).resolve().parents[2]
NS, SHARDS = "default", 3
HISTORY_EVENT = "ostinato.history.HistoryEvent"
Record = dict[str, Any]
Placed = tuple[int, str, bytes]
Step = tuple[str, int, str]  # (activity type, how long it takes in ms, "ok" | "fail" | "time out")


def _task(engine: InMemoryEngine, queue: str) -> Record:
    polled = engine.poll_workflow_task(queue)
    assert polled is not None and polled[0] == "ostinato.task.WorkflowTask"
    return polled[1]


def _run(engine: InMemoryEngine, workflow_id: str, workflow_type: str, steps: list[Step], close: str) -> None:
    """One workflow: its activities one after another, each final after one attempt, then `close`.

    Each workflow has its own task queue, so a run left open (or terminated) leaves no task in another's way.
    """
    engine.start_workflow(NS, workflow_id, workflow_type, workflow_id)
    if close == "open":
        return
    for i, (activity_type, took_ms, outcome) in enumerate(steps):
        engine.complete_workflow_task(_task(engine, workflow_id), [("ScheduleActivityTaskCommand", {
            "activity_id": f"a{i}", "activity_type": activity_type, "input": [],
            "start_to_close_timeout_ms": 8_000, "retry_policy": {"maximum_attempts": 1}})])
        activity = engine.poll_activity_task(workflow_id)
        assert activity is not None
        engine.start_activity(activity)
        engine.advance(took_ms)
        if outcome == "ok":
            engine.complete_activity(activity)
        elif outcome == "fail":
            engine.fail_activity(activity, "declined")
    if close == "terminate":
        engine.terminate(NS, workflow_id, "by the test")
        return
    command = ("CompleteWorkflowExecutionCommand", {}) if close == "complete" else (
        "FailWorkflowExecutionCommand", {"failure": {"message": "saga rolled back"}})
    engine.complete_workflow_task(_task(engine, workflow_id), [command])


def _placed(engine: InMemoryEngine, workflow_id: str) -> list[Placed]:
    """A run's records on its shard's partition, keyed as the owning processor keys them."""
    run = (NS, workflow_id, engine.current_run_id(NS, workflow_id))
    return [(shard_for(NS, workflow_id, SHARDS), history_key(*run, e["event_id"]), codec.encode(HISTORY_EVENT, e))
            for e in engine.histories[run]]


def _write(bootstrap: str, topic: str, committed: list[Placed], aborted: list[Placed]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-audit-writer"})
    producer.init_transactions(30)
    for records, commit in ((committed, True), (aborted, False)):
        producer.begin_transaction()
        for partition, key, value in records:
            producer.produce(topic, key=key.encode(), value=value, partition=partition)
        producer.flush(30)  # in the log before the abort: the reader, not the producer, must drop them
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


# What the report must say, worked out by hand from the scenario below (not by the code under test).
EXPECTED = {
    "Order": {"started": 3, "completed": 2, "failed": 1, "timed_out": 0, "canceled": 0, "terminated": 0,
              "continued_as_new": 0, "still_open": 0, "activities_run": 7, "activities_failed": 1,
              "activities_timed_out": 0, "activities_canceled": 0, "compensations_run": 1,
              "activities_over_sla": 2},
    "Refund": {"started": 2, "completed": 1, "failed": 0, "timed_out": 0, "canceled": 0, "terminated": 1,
               "continued_as_new": 0, "still_open": 0, "activities_run": 1, "activities_failed": 0,
               "activities_timed_out": 0, "activities_canceled": 0, "compensations_run": 1,
               "activities_over_sla": 0},
    "Report": {"started": 2, "completed": 0, "failed": 1, "timed_out": 0, "canceled": 0, "terminated": 0,
               "continued_as_new": 0, "still_open": 1, "activities_run": 1, "activities_failed": 0,
               "activities_timed_out": 1, "activities_canceled": 0, "compensations_run": 0,
               "activities_over_sla": 1},
}


def test_one_shot_report_counts_committed_history_only(kafka: KafkaCluster, topic_prefix: str,
                                                       tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    engine = InMemoryEngine(shards=SHARDS)
    _run(engine, "order-1", "Order", [("charge", 100, "ok"), ("ship", 6_000, "ok")], "complete")  # ship: slow
    _run(engine, "order-2", "Order", [("charge", 100, "ok"), ("ship", 5_500, "ok")], "complete")  # ship: slow
    _run(engine, "order-3", "Order",  # the saga: shipping fails, the charge is compensated, the order fails
         [("charge", 100, "ok"), ("ship", 100, "fail"), ("compensate_charge", 100, "ok")], "fail")
    _run(engine, "refund-1", "Refund", [("undo_reserve", 200, "ok")], "complete")
    _run(engine, "refund-2", "Refund", [], "terminate")
    _run(engine, "report-1", "Report", [], "open")
    _run(engine, "report-2", "Report", [("render", 9_000, "time out")], "fail")  # times out at 8 s: slow too
    _run(engine, "ghost-1", "Order", [("charge", 100, "ok")], "complete")  # only ever written aborted
    committed = [r for wf in ("order-1", "order-2", "order-3", "refund-1", "refund-2", "report-1", "report-2")
                 for r in _placed(engine, wf)]
    # A processor that crashed mid-batch: a whole run, and a second start of `report-1`, rolled back at the tail.
    partition, _, start = _placed(engine, "report-1")[0]
    restart = history_key(NS, "report-1", engine.current_run_id(NS, "report-1"), 99)
    aborted = [*_placed(engine, "ghost-1"), (partition, restart, start)]
    topic = topic_name(topic_prefix, Topic.HISTORY)
    _write(kafka.bootstrap, topic, committed, aborted)

    output = tmp_path / "audit.json"
    env = {**os.environ, "OSTINATO_KAFKA": kafka.bootstrap, "OSTINATO_TOPIC_PREFIX": topic_prefix,
           "OSTINATO_AUDIT_OUTPUT": str(output), "OSTINATO_AUDIT_SLA_MS": "5000"}
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "examples.audit", "--once"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=45)
    took = time.monotonic() - began
    assert proc.returncode == 0, f"exit {proc.returncode} after {took:.1f}s\n{proc.stdout}\n{proc.stderr[-3000:]}"

    report = json.loads(output.read_text())
    assert report["workflow_types"] == EXPECTED
    assert report["events"] == len(committed)
    assert report["skipped_records"] == 0
    assert (report["sla_ms"], report["sla_measure"]) == (5000, "schedule_to_close")
    printed, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])  # faust adds a tty escape
    assert printed == report  # printed too, for a one-shot run
    print(f"audit example replayed {report['events']} events in {took:.1f}s")
