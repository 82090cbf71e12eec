"""A batch stops deciding when a deadline falls due (issue 15, timers on time), on a real broker.

`batch_room` sizes a fetch from the average cost of a decision, but one batch can still run long: a loaded machine
stretches it (S4 measured decide phases of 0.4-1.2 s of wall time for 14-100 ms of CPU), and a timer due meanwhile
waited for the whole batch and its commit. The processor now stops at the deadline and carries the fetched rest
into the next batch. Here deciding is slowed to 10 ms a command, so 400 signals committed at once take 4 s, and
three timers (2.5, 2.8 and 3.1 s after their start) fall due inside them. What must hold: the batch was cut and the
timer that cut it fired at the end of that same batch, every signal is decided exactly once and in order (the carried
ones after the cut), the timers fired once each and never early, and the histories check clean.
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
from ostinato.services.history.processor import Processor, ProcessorOptions
from ostinato.services.history.shard import Shard
from tests.tools.programs import from_payload, to_payload
from tests.tools.worker import TestWorker, command_record, produce_command
from tests.tools.workload import start_workflows, timer_fired_once, wait_closed, wait_for_events

QUEUE = "q"
SIGNALS = 400
SLOW_DECISION_S = 0.01


def test_a_batch_stops_at_a_due_deadline_and_its_rest_follows_once_in_order(
        kafka: KafkaCluster, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    settings = read_settings(kafka.bootstrap, topic_prefix)
    assert settings is not None
    slow = threading.Event()
    real_process = Shard.process

    def process(self: Shard, data: bytes | None, offset: int, now_ms: int) -> None:
        if slow.is_set():  # the core, slowed: what a machine short of cores does to every decision
            time.sleep(SLOW_DECISION_S)
        real_process(self, data, offset, now_ms)

    monkeypatch.setattr(Shard, "process", process)
    proc = Processor(kafka.bootstrap, settings, ProcessorOptions(data_dir=tmp_path / "processor"))
    thread = threading.Thread(target=proc.run, daemon=True)
    thread.start()
    try:
        assert proc.restored.wait(60)
        with TestWorker(kafka.bootstrap, topic_prefix, 1, QUEUE):
            [target] = start_workflows(kafka.bootstrap, topic_prefix, 1, 1, "idle", "nobody-polls-this-queue")
            sleepers = start_workflows(kafka.bootstrap, topic_prefix, 1, 3, "sleep", QUEUE,
                                       input=lambda i: {"sleep_ms": 2_500 + 300 * i})
            wait_for_events(kafka.bootstrap, topic_prefix, sleepers, "TIMER_STARTED", 1, timeout=60)
            # What a warm processor measures (the first decisions after a start cost ~0.3 s and take dozens of
            # batches to average out): batch_room then lets the whole fetch in, and the machine turns slow.
            proc._decide_s = 0.0005
            slow.set()
            _signal_in_one_transaction(kafka.bootstrap, topic_prefix, target, SIGNALS)
            closed = wait_closed(kafka.bootstrap, topic_prefix, sleepers, timeout=60)
            wait_for_events(kafka.bootstrap, topic_prefix, [target], "WORKFLOW_EXECUTION_SIGNALED", SIGNALS,
                             timeout=60)
    finally:
        proc.stop()
        thread.join(30)
    assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": 3}
    assert proc.metrics.batches_cut._value.get() >= 1
    # A cut comes when a deadline falls due mid-batch; these are user timers, so the batch's end fires them.
    assert proc.metrics.timers_fired_late_pass._value.get() >= 1
    report = check_history(kafka.bootstrap, topic_prefix)
    assert report.ok, report.problems[:20]
    histories = {wf: events for (_, wf, _), events in report.histories.items()}
    received = [from_payload(e["attributes"][1]["input"][0]) for e in histories[target]
                if e["event_type"] == "WORKFLOW_EXECUTION_SIGNALED"]
    assert received == list(range(SIGNALS))  # once each, in order, across the cut
    for wf in sleepers:
        fired, _ = timer_fired_once(histories[wf])  # once, and never early, whichever batch fired it
        signalled_after = [e for e in histories[target] if e["event_type"] == "WORKFLOW_EXECUTION_SIGNALED"
                           and e["event_time_ms"] > fired]
        print(f"{wf}: {len(signalled_after)} signals decided after its timer fired")


def _signal_in_one_transaction(bootstrap: str, prefix: str, workflow_id: str, count: int) -> None:
    """All `count` signals become readable at once (read_committed), so one fetch takes them all."""
    producer = Producer({**base_config(bootstrap, f"{prefix}-signaller"), "transactional.id": f"{prefix}-signaller"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        body: dict[str, Any] = {"signal_name": "n", "input": [to_payload(i)]}
        produce_command(producer, prefix, 1, command_record("default", workflow_id, "SignalWorkflowExecution", body,
                                                           identity="test"))
    producer.commit_transaction(30)

