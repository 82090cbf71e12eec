"""`ostinato server --opensearch-url`: list and count from OpenSearch agree with a server on the embedded SQLite
store for the same cluster, the lag is a metric, and `ostinato visibility rebuild` re-indexes from offset 0."""

from __future__ import annotations

import os
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker
from tests.tools.workload import start_workflows, wait_closed

SHARDS = 2
QUEUE = "osq"
QUERIES = (
    "",
    "WorkflowType = 'hello'",
    "WorkflowType = 'chain' ORDER BY WorkflowId ASC",
    "ExecutionStatus = 'Completed' AND WorkflowId STARTS_WITH 'vis/a'",
    "WorkflowId IN ('vis/a-1', 'vis/b-2', 'nope') ORDER BY StartTime ASC",
    "NOT WorkflowType = 'hello' ORDER BY CloseTime DESC",
    "ExecutionDuration >= 0 ORDER BY ExecutionDuration DESC, WorkflowId ASC",
)


def _all(server: ServerProcess, query: str) -> list[str]:
    ids: list[str] = []
    token = ""
    while True:
        q = urllib.parse.urlencode({"query": query, "page_size": 7, "next_page_token": token})
        status, page = server.get(f"/api/v1/namespaces/default/workflows?{q}")
        assert status == 200, page
        ids += [f"{e['workflow_id']}/{e['run_id']}" for e in page["executions"]]
        token = page["next_page_token"]
        if not token:
            return ids


def _count(server: ServerProcess, query: str) -> int:
    status, body = server.get("/api/v1/namespaces/default/workflow-count?" + urllib.parse.urlencode({"query": query}))
    assert status == 200, body
    return int(body["count"])


def _eventually(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_opensearch_server_answers_like_sqlite_and_rebuilds(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path,
                                                            opensearch: Any) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=SHARDS)
    with_os = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "a", tmp_path / "a.log",
                            extra_args=("--opensearch-url", opensearch.url)).start()
    embedded = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "b", tmp_path / "b.log",
                             processor=False).start()
    try:
        with_os.wait_owning(SHARDS)
        with TestWorker(kafka.bootstrap, topic_prefix, SHARDS, QUEUE):
            ids = start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "hello", QUEUE, input="x",
                                  id_prefix="vis/a")
            ids += start_workflows(kafka.bootstrap, topic_prefix, SHARDS, 20, "chain", QUEUE, input="y",
                                   id_prefix="vis/b")
            wait_closed(kafka.bootstrap, topic_prefix, ids, timeout=60)

        def same() -> None:
            assert _count(with_os, "ExecutionStatus = 'Completed'") == 40
            assert _count(embedded, "ExecutionStatus = 'Completed'") == 40
            for query in QUERIES:
                assert _all(with_os, query) == _all(embedded, query), query
                assert _count(with_os, query) == _count(embedded, query), query

        _eventually(same)

        def caught_up() -> None:
            # The store answers as soon as the records are indexed; the group's offsets pass each partition's last
            # transaction marker a fetch later (at the partition's end), so the gauge reaches 0 just after.
            with urllib.request.urlopen(with_os.url + "/metrics", timeout=10) as resp:
                metrics = resp.read().decode()
            assert "ostinato_visibility_lag_records 0.0" in metrics, metrics[-2000:]

        _eventually(caught_up)

        rebuilt = run_cli("visibility", "rebuild", "--kafka", kafka.bootstrap, "--prefix", topic_prefix,
                          "--opensearch-url", opensearch.url, env={**os.environ})
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "re-indexed" in rebuilt.stdout
        _eventually(same)
        bad = with_os.get("/api/v1/namespaces/default/workflows?query=" + urllib.parse.quote("Foo = = 1"))
        assert bad[0] == 400 and bad[1]["code"] == "invalid_query"
    finally:
        with_os.stop()
        embedded.stop()
