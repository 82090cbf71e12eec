"""Crash the processor between the steps of a commit, and freeze one owner past its session: nothing is lost,
nothing is doubled, and every store equals the fold of the history topic."""

from __future__ import annotations

import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.checker import check_history
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess
from tests.tools.stores import durable_states, mismatches
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 4
QUEUE = "q"


def _workload(kafka: KafkaCluster, prefix: str) -> list[str]:
    """500 workflows: activities (with retries), timers and a three-step chain."""
    ids = start_workflows(kafka.bootstrap, prefix, SHARDS, 300, "hello", QUEUE)
    ids += start_workflows(kafka.bootstrap, prefix, SHARDS, 100, "sleep", QUEUE, input={"sleep_ms": 500})
    ids += start_workflows(kafka.bootstrap, prefix, SHARDS, 100, "chain", QUEUE, input="c")
    return ids


def _verify(kafka: KafkaCluster, prefix: str, ids: list[str], servers: list[ServerProcess]) -> None:
    closed = wait_closed(kafka.bootstrap, prefix, ids, timeout=240)
    assert Counter(closed.values()) == {"WORKFLOW_EXECUTION_COMPLETED": len(ids)}
    report = check_history(kafka.bootstrap, prefix, timeout=60)
    assert report.ok, report.problems[:20]
    assert report.runs == len(ids)
    for srv in servers:
        srv.stop()
    assert mismatches(report, durable_states([s.data_dir for s in servers], prefix)) == []


@pytest.mark.parametrize("point", ["after-produce", "after-send-offsets", "after-commit"])
def test_kill_at_a_commit_step_loses_and_doubles_nothing(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path,
                                                         point: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log")
    srv.start(env={"OSTINATO_FAULT_POINT": f"{point}:5"})  # the fifth transaction: early in the run
    try:
        srv.wait_owning(SHARDS)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE, activity_failure_rate=0.1, seed=7):
            ids = _workload(kafka, topic_prefix)
            assert srv.wait_exit(180) == -signal.SIGKILL
            assert f"fault point {point} reached" in srv.tail()
            _assert_unfinished(kafka, topic_prefix, ids)
            srv.start(env={"OSTINATO_FAULT_POINT": ""})
            _verify(kafka, topic_prefix, ids, [srv])
    finally:
        srv.stop()


def test_kill_in_the_middle_of_a_restore(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    srv = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log")
    srv.start()
    try:
        srv.wait_owning(SHARDS)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = _workload(kafka, topic_prefix)
            wait_closed(kafka.bootstrap, topic_prefix, ids[:100], timeout=120)
            srv.kill()
            shutil.rmtree(srv.data_dir / topic_prefix)  # every shard restores from scratch, in small batches
            srv.start(env={"OSTINATO_FAULT_POINT": "mid-restore:2", "OSTINATO_RESTORE_WRITE_EVERY": "100"})
            assert srv.wait_exit(120) == -signal.SIGKILL
            assert "fault point mid-restore reached" in srv.tail()
            _assert_unfinished(kafka, topic_prefix, ids)
            srv.start(env={"OSTINATO_FAULT_POINT": "", "OSTINATO_RESTORE_WRITE_EVERY": "100"})
            _verify(kafka, topic_prefix, ids, [srv])
    finally:
        srv.stop()


def test_a_frozen_owner_is_fenced(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    """SIGSTOP one of two processors past its session timeout: the other takes its shards; after SIGCONT the
    zombie's transaction fails (its generation is stale or its epoch was bumped) and none of its writes shows."""
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    env = {"OSTINATO_SESSION_TIMEOUT_MS": "6000"}
    a = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "a", tmp_path / "a.log", env=env).start()
    b = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "b", tmp_path / "b.log", env=env).start()
    try:
        a.wait_owning(1)
        b.wait_owning(1)
        _wait_split(a, b)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = _workload(kafka, topic_prefix)
            wait_closed(kafka.bootstrap, topic_prefix, ids[:50], timeout=120)
            a.signal(signal.SIGSTOP)
            b.wait_owning(SHARDS, timeout=90)  # the session expired and b restored a's shards
            time.sleep(12)  # past the transaction timeout: a's open transaction, if any, was aborted
            a.signal(signal.SIGCONT)
            _verify(kafka, topic_prefix, ids, [a, b])
        log = a.tail(400)
        assert re.search(r"released|aborted|fatal", log), log
    finally:
        a.stop()
        b.stop()


def _assert_unfinished(kafka: KafkaCluster, prefix: str, ids: list[str]) -> None:
    """The crash came in the middle of the run, not after it (or the test would prove nothing)."""
    with pytest.raises(TimeoutError):
        wait_closed(kafka.bootstrap, prefix, ids, timeout=2)


def _wait_split(a: ServerProcess, b: ServerProcess, timeout: float = 60) -> None:
    """Until the two servers own all shards between them (the second join rebalanced)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mine_a, mine_b = a.wait_owning(), b.wait_owning()
        if mine_a and mine_b and len(set(mine_a) | set(mine_b)) == SHARDS and not set(mine_a) & set(mine_b):
            return
        time.sleep(0.3)
    raise TimeoutError("the shards were not split between the two servers")
