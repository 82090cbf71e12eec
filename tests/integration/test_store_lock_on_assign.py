"""A shard whose store is still locked when it is assigned is opened once the lock goes, not given up.

Sibling processors of one server share its data directory, so a shard moving between them can meet its store
still held by the one that lost it (closing it, or frozen). The processor used to raise out of the assignment,
which stopped it and with it the server. It now waits for the lock (`STORE_LOCKED_WAIT_S`), on a real broker and
a real RocksDB here: the test holds the shard's store open itself, as the sibling would.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster, read_settings
from ostinato.services.history.processor import Processor, ProcessorOptions
from ostinato.services.history.store import RocksStore
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

QUEUE = "q"


def test_a_locked_store_is_opened_when_its_holder_lets_go(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ostinato.processor")
    init_cluster(kafka.bootstrap, topic_prefix, shards=1)
    settings = read_settings(kafka.bootstrap, topic_prefix)
    assert settings is not None
    data_dir = tmp_path / "server"
    holder = RocksStore(data_dir / topic_prefix / "shard-0")  # the sibling that has not closed it yet
    proc = Processor(kafka.bootstrap, settings, ProcessorOptions(data_dir=data_dir))
    failed: list[BaseException] = []

    def run() -> None:
        try:
            proc.run()
        except Exception as exc:  # noqa: BLE001 - the old behaviour: the assignment raised, the processor stopped
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert proc.ready.wait(60)
        deadline = time.monotonic() + 60
        while not _retried(caplog) and not failed and time.monotonic() < deadline:
            time.sleep(0.1)  # until the assignment arrives and meets the lock
        assert _retried(caplog), failed
        assert not proc.restored.is_set() and not failed
        holder.close()
        assert proc.restored.wait(30), failed
        with TestWorker(kafka.bootstrap, topic_prefix, 1, QUEUE):
            ids = start_workflows(kafka.bootstrap, topic_prefix, 1, 5, "hello", QUEUE)
            closed = wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60)
        assert set(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED"}
        assert not failed
    finally:
        proc.stop()
        thread.join(30)
        if not holder._closed:
            holder.close()


def _retried(caplog: pytest.LogCaptureFixture) -> bool:
    return any("shard 0:" in r.getMessage() and "trying again" in r.getMessage() for r in caplog.records)
