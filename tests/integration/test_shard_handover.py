"""Shards move quickly: a server stopped with SIGTERM hands its shards over at once, and servers killed together
and restarted take their shards back within a few seconds (issue 16: "Faster recovery").

The figures are printed; the assertions hold generous bounds (a loaded CI machine), the acceptance figures of
the issue are measured by the chaos suite (docs/reliability.md).
"""

from __future__ import annotations

import time
from pathlib import Path

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.tools.servers import ServerProcess, two_servers
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 4
QUEUE = "handover"


def test_sigterm_hands_the_shards_over_at_once(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    with two_servers(kafka.bootstrap, topic_prefix, tmp_path) as (a, b), \
            TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
        ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 50, "hello", QUEUE)
        wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60)
        stopped = time.monotonic()
        a.stop()
        stop_s = time.monotonic() - stopped
        b.wait_owning(SHARDS, timeout=60)
        handover_s = time.monotonic() - stopped
        print(f"SIGTERM: server exited in {stop_s:.2f}s, the other owned every shard {handover_s:.2f}s after")
        after = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE)
        wait_closed(kafka.bootstrap, topic_prefix, after, timeout=60)
    assert handover_s < 8, handover_s  # was ~10-20 s: the group waited out a session, the API its long-polls


def test_servers_killed_together_resume_quickly(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    servers = [ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / n, tmp_path / f"{n}.log").start()
               for n in ("a", "b")]
    try:
        for server in servers:
            server.wait_owning(1)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            wait_closed(kafka.bootstrap, topic_prefix,
                        start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE), timeout=60)
            for server in servers:
                server.kill()
            restarted = time.monotonic()
            for server in servers:
                server.start()
            ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE)
            wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=120)
            resumed_s = time.monotonic() - restarted
        print(f"both killed: every workflow started after the restart completed {resumed_s:.2f}s after it")
    finally:
        for server in servers:
            server.stop()
    assert resumed_s < 20, resumed_s
