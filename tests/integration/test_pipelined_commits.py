"""Pipelined transactions on a real broker (issue 15): the next batch is decided while the last one's commit is in
flight, and a moment that falls due meanwhile fires into it at its own time instead of after the commit.

Every commit is slowed by 0.4 s (what a loaded broker does to the round trip: S4 measured send offsets + commit at
p99 250-400 ms), and signals arrive every 20 ms, so a batch is always in flight while three one-shot timers fall
due. What must hold: with the pipeline, the timers fired while a commit was in flight; in series, never; in both,
every signal is decided exactly once and in order, each timer fires once and never early, and the histories check
clean.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ostinato.infra.kafka import KafkaCluster
from ostinato.kafka.clients import base_config
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster, read_settings
from ostinato.services.history.processor import ProcessorOptions
from tests.tools.held_commits import HeldCommitProcessor
from tests.tools.programs import from_payload, to_payload
from tests.tools.worker import TestWorker, command_record, produce_command
from tests.tools.workload import start_workflows, timer_fired_once, wait_closed, wait_for_events

QUEUE = "q"
SLOW_COMMIT_S = 0.4
SIGNAL_EVERY_S = 0.02


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "in-series"])
def test_moments_due_while_a_commit_is_in_flight_fire_into_the_next_batch_once_and_on_their_own_time(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path, pipeline: bool) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    settings = read_settings(kafka.bootstrap, topic_prefix)
    assert settings is not None
    proc = HeldCommitProcessor(kafka.bootstrap, settings,
                               ProcessorOptions(data_dir=tmp_path / "processor", pipeline=pipeline),
                               hold_s=SLOW_COMMIT_S)
    thread = threading.Thread(target=proc.run, daemon=True)
    thread.start()
    signalling = threading.Event()
    sent: list[int] = []
    try:
        assert proc.restored.wait(60)
        with TestWorker(kafka.bootstrap, topic_prefix, 1, QUEUE):
            [target] = start_workflows(kafka.bootstrap, topic_prefix, 1, 1, "idle", "nobody-polls-this-queue")
            sleepers = start_workflows(kafka.bootstrap, topic_prefix, 1, 3, "sleep", QUEUE,
                                       input=lambda i: {"sleep_ms": 2_500 + 300 * i})
            proc.hold.set()
            signaller = threading.Thread(target=_signal_until, args=(kafka.bootstrap, topic_prefix, target, signalling,
                                                                      sent), daemon=True)
            signaller.start()
            closed = wait_closed(kafka.bootstrap, topic_prefix, sleepers, timeout=90)
            signalling.set()
            signaller.join(30)
            proc.hold.clear()
            wait_for_events(kafka.bootstrap, topic_prefix, [target], "WORKFLOW_EXECUTION_SIGNALED", len(sent),
                            timeout=60)
    finally:
        signalling.set()
        proc.stop()
        thread.join(30)
    assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 3}
    in_flight = proc.metrics.timers_fired_in_flight._value.get()
    assert (in_flight >= 1) if pipeline else (in_flight == 0)
    report = check_history(kafka.bootstrap, topic_prefix)
    assert report.ok, report.problems[:20]
    histories = {wf: events for (_, wf, _), events in report.histories.items()}
    received = [from_payload(e["attributes"][1]["input"][0]) for e in histories[target]
                if e["event_type"] == "WORKFLOW_EXECUTION_SIGNALED"]
    assert len(sent) > 50 and received == sent  # once each, in order, while commits were slow
    for wf in sleepers:
        events = histories[wf]
        fired, due = timer_fired_once(events)
        times = [e["event_time_ms"] for e in events]
        assert times == sorted(times)  # a workflow's events go forward in time
        print(f"{wf}: fired {fired - due} ms after its deadline ({in_flight:.0f} in flight)")


def _signal_until(bootstrap: str, prefix: str, workflow_id: str, stop: threading.Event, sent: list[int]) -> None:
    producer = Producer({**base_config(bootstrap, f"{prefix}-signaller"), "enable.idempotence": True})
    n = 0
    while not stop.is_set():
        body: dict[str, Any] = {"signal_name": "n", "input": [to_payload(n)]}
        produce_command(producer, prefix, 1, command_record("default", workflow_id, "SignalWorkflowExecution", body,
                                                           identity="test"))
        sent.append(n)
        n += 1
        time.sleep(SIGNAL_EVERY_S)
    assert producer.flush(30) == 0

