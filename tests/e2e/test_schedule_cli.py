"""`ostinato schedule ...` as a user types it, against a real server and broker (the JSON schedules API beneath)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ostinato.infra.kafka import KafkaCluster
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli
from tests.tools.servers import ServerProcess
from tests.tools.worker import TestWorker


def _until(check: Any, what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_the_schedule_verbs(kafka: KafkaCluster, topic_prefix: str, tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    sid = f"nightly-{uuid.uuid4().hex[:6]}"
    opts = ["--server", server.url]

    def described() -> dict[str, Any]:
        """What `schedule describe -o json` prints, read from its endpoint directly (polling through the CLI would
        start a process per look)."""
        with urllib.request.urlopen(f"{server.url}/api/v1/namespaces/default/schedules/{sid}", timeout=30) as resp:
            found: dict[str, Any] = json.loads(resp.read())
        return found

    try:
        server.wait_owning(2)
        with TestWorker(kafka.bootstrap, topic_prefix, 2, "sched-q"):
            created = run_cli("schedule", "create", sid, "-t", "hello", "-q", "sched-q", "-w", f"hello-{sid}",
                              "--every", "3600", "--offset", "300", "--paused", "--note", "set up", "--input", "Ada",
                              *opts)
            assert created.returncode == 0, created.stderr
            again = run_cli("schedule", "create", sid, "-t", "hello", "-q", "sched-q", "-w", "x", "--every", "60",
                            *opts)
            assert again.returncode == 1 and "already_started" in again.stderr
            shown = run_cli("schedule", "describe", sid, "-o", "json", *opts)
            assert shown.returncode == 0, shown.stderr
            first = json.loads(shown.stdout)
            assert first == described() | {"info": first["info"]}
            assert first["state"] == {"note": "set up", "paused": True, "limited_actions": False,
                                      "remaining_actions": 0}
            assert first["info"]["next_action_times_ms"] == [] and first["action"]["input"] == ["Ada"]
            assert run_cli("schedule", "trigger", sid, *opts).returncode == 0
            done = _until(lambda: [a for a in described()["info"]["recent_actions"] if a["status"] == "COMPLETED"],
                          "the triggered action")
            assert done[0]["workflow_id"].startswith(f"hello-{sid}-")
            result = run_cli("workflow", "result", done[0]["workflow_id"], "-o", "json", *opts)
            assert json.loads(result.stdout)["result"] == "Hello, Ada"
            assert run_cli("schedule", "backfill", sid, "--start-at", "2024-01-01T00:00:00",
                           "--end-at", "2024-01-01T03:00:00", "--overlap", "ALLOW_ALL", *opts).returncode == 0
            _until(lambda: described()["info"]["num_actions"] == 4, "three backfilled actions")
            assert run_cli("schedule", "unpause", sid, "--note", "live", *opts).returncode == 0
            live = _until(lambda: (d := described())["state"]["note"] == "live" and d, "the unpause")
            times = live["info"]["next_action_times_ms"]
            assert len(times) == 10 and all(t % 3_600_000 == 300_000 for t in times)
            assert run_cli("schedule", "pause", sid, "--note", "quiet", *opts).returncode == 0
            _until(lambda: sid in run_cli("schedule", "list", *opts).stdout, "the schedule in the list")
            assert run_cli("schedule", "delete", sid, *opts).returncode == 0
            _until(lambda: _status(f"{server.url}/api/v1/namespaces/default/schedules/{sid}") == 404, "the deletion")
            gone = run_cli("schedule", "describe", sid, *opts)
            assert gone.returncode == 1 and "not_found" in gone.stderr
        bad = run_cli("schedule", "create", "bad", "-t", "hello", "-q", "q", "-w", "w", "--cron", "61 * * * *",
                      *opts)
        assert bad.returncode == 1 and "minute" in bad.stderr
    finally:
        server.stop()
