"""`ostinato workflow ...` as a user types it, against a real server and broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker


def test_the_workflow_verbs(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    wf = f"cli-{uuid.uuid4().hex[:6]}"
    opts = ["--server", server.url]
    try:
        server.wait_owning(2)
        with TestWorker(kafka.bootstrap, topic_prefix, 2, "cli-q"):
            started = run_cli("workflow", "start", "hello", "--id", wf, "--task-queue", "cli-q", "--input", "Ada",
                              "--wait", *opts)
        assert started.returncode == 0, started.stderr
        assert "ACTIVITY_TASK_COMPLETED" in started.stdout and "Hello, Ada" in started.stdout
        shown = run_cli("workflow", "show", wf, *opts)
        assert shown.returncode == 0 and "WORKFLOW_EXECUTION_COMPLETED" in shown.stdout
        assert "activity_type=greet" in shown.stdout
        history = json.loads(run_cli("workflow", "show", wf, "-o", "json", *opts).stdout)
        assert [e["event_id"] for e in history] == list(range(1, len(history) + 1))
        described = json.loads(run_cli("workflow", "describe", wf, "-o", "json", *opts).stdout)
        assert described["status"] == "COMPLETED" and described["workflow_type"] == "hello"
        outcome = run_cli("workflow", "result", wf, "-o", "json", *opts)
        assert outcome.returncode == 0 and json.loads(outcome.stdout)["result"] == "Hello, Ada"

        waiting = f"{wf}-waits"
        assert run_cli("workflow", "start", "sleep", "--id", waiting, "--task-queue", "idle-q", "--input",
                       '{"sleep_ms": 600000}', *opts).returncode == 0
        assert run_cli("workflow", "signal", waiting, "poke", "--input", "1", *opts).returncode == 0
        no_worker = run_cli("workflow", "query", waiting, "state", "--timeout-ms", "300", *opts)
        assert no_worker.returncode == 1 and "timeout" in no_worker.stderr
        assert run_cli("workflow", "terminate", waiting, "--reason", "test over", *opts).returncode == 0
        ended = run_cli("workflow", "result", waiting, "-o", "json", *opts)
        assert ended.returncode == 1 and json.loads(ended.stdout)["status"] == "TERMINATED"

        missing = run_cli("workflow", "signal", "nobody", "x", *opts)
        assert missing.returncode == 1 and "not_found" in missing.stderr
    finally:
        server.stop()
    unreachable = run_cli("workflow", "describe", wf, "--server", "http://127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot reach the Ostinato API" in unreachable.stderr
