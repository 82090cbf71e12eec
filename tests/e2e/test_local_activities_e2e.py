"""Local activities end to end (issue 17): a real broker, `ostinato server`, a worker process and the SDK client. A
local activity that fails twice then succeeds leaves one marker and no activity task events; one that outlasts 80%
of the workflow task timeout heartbeats the task instead of letting it time out; what is in the history topic
replays with the same code. The worker runs one activity at a time (max_concurrent_activities=1), even when a
fetched batch holds several."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.sdk.data import DEFAULT
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import REPO, run_cli
from tests.e2e.local_activity_app import Crowd, LocalGreeting
from tests.tools.servers import ServerProcess

Q = "local-q"


def _start_worker(url: str, log_path: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    log = log_path.open("wb")
    return subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.local_activity_app:worker",
                             "--server", url], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ)), log


def _markers(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [DEFAULT.decode(e["attributes"][1]["details"]["data"])[0] for e in history
            if e["event_type"] == "MARKER_RECORDED" and e["attributes"][1]["marker_name"] == "core_local_activity"]


def test_local_activities_and_max_concurrent_activities(kafka: KafkaCluster, topic_prefix: str,
                                                         tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    worker, log = _start_worker(server.url, tmp_path / "worker.log")
    wf = f"local-{uuid.uuid4().hex[:6]}"
    try:
        server.wait_owning(2)

        async def sdk() -> tuple[list[str], list[dict[str, Any]], int]:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                handle = await client.start_workflow(LocalGreeting.run, args=["Ada", 2.5], id=wf, task_queue=Q,
                                                     task_timeout=timedelta(seconds=2))
                result = await handle.result()
                crowd = await client.execute_workflow(Crowd.run, 3, id=f"{wf}-crowd", task_queue=Q)
                return result, await handle.fetch_history(), crowd

        result, history, crowd = asyncio.run(asyncio.wait_for(sdk(), 120))
        assert result == ["hello Ada (attempt 3, local=True)", "slept 2.5"]
        kinds = [event["event_type"] for event in history]
        assert not [kind for kind in kinds if kind.startswith("ACTIVITY_TASK")]
        assert "WORKFLOW_TASK_TIMED_OUT" not in kinds
        assert [(m["activity_type"], m["attempt"]) for m in _markers(history)] == [("flaky", 3), ("slow", 1)]
        # The 2.5 s local activity outlasted 80% of the 2 s task timeout: the task that started it was answered (with
        # the first marker) before it ended, and its marker came with a later task's answer.
        first, second = [i for i, kind in enumerate(kinds) if kind == "MARKER_RECORDED"]
        assert kinds[first + 1:second].count("WORKFLOW_TASK_COMPLETED") >= 1
        assert crowd == 1  # three activities fetched together, run one after the other

        replayed = run_cli("replay", "tests.e2e.local_activity_app:WORKFLOWS", "--from-kafka", "--kafka",
                           kafka.bootstrap, "--prefix", topic_prefix, "-o", "json")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert json.loads(replayed.stdout)["replayed"] == 2
    finally:
        worker.kill()
        worker.wait(30)
        log.close()
        server.stop()
