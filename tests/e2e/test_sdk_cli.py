"""`ostinato worker` and `ostinato replay` as a user runs them, against a real broker and server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from ostinato.client import Client
from ostinato.infra.kafka import KafkaCluster
from ostinato.sdk._http import HttpService
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import REPO, run_cli
from tests.e2e.cli_app import Shout, SlowJob
from tests.tools.servers import ServerProcess

HISTORIES = REPO / "tests" / "e2e" / "sdk_scenarios" / "histories"
TODAY = "tests.e2e.sdk_scenarios.test_replay:TODAYS_WORKFLOWS"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ostinato", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_replay_of_saved_histories_fails_on_non_determinism() -> None:
    clean = [str(HISTORIES / "hello.json"), str(HISTORIES / "saga.json")]
    ok = _cli("replay", TODAY, *clean, "-o", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["replayed"] == 2
    bad = _cli("replay", TODAY, str(HISTORIES))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "hello_legacy" in bad.stdout and "NondeterminismError" in bad.stdout
    nothing = _cli("replay", TODAY)
    assert nothing.returncode == 2 and "nothing was replayed" in nothing.stderr
    wrong = _cli("replay", "no_such_module:X", str(HISTORIES))
    assert wrong.returncode == 2 and "cannot import" in wrong.stderr


def test_worker_command_serves_workflows_and_the_topic_replays(kafka: KafkaCluster, topic_prefix: str,
                                                               tmp_path: Path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    log = (tmp_path / "worker.log").open("wb")
    # Started beside the server, as people do: the worker waits for the server to answer.
    worker = subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.cli_app:worker", "--server",
                               server.url], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        server.wait_owning(2)

        async def run() -> str:
            async with await HttpService.connect(server.url) as service:
                client = Client(service)
                return await client.execute_workflow(Shout.run, "quiet", id=f"cli-{uuid.uuid4().hex[:6]}",
                                                     task_queue="cli-q")

        assert asyncio.run(asyncio.wait_for(run(), 90)) == "QUIET"
        replayed = run_cli("replay", "tests.e2e.cli_app:WORKFLOWS", "--from-kafka", "--kafka", kafka.bootstrap,
                           "--prefix", topic_prefix, "-o", "json")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert json.loads(replayed.stdout)["replayed"] == 1
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        log.close()
        server.stop()
    assert "serving task queue 'cli-q'" in (tmp_path / "worker.log").read_text()


def test_a_worker_killed_mid_activity_hands_it_to_another(kafka: KafkaCluster, topic_prefix: str,
                                                          tmp_path: Path) -> None:
    """kill -9, not a graceful stop: the heartbeat timeout notices, and the retry lands on the surviving worker."""
    init_cluster(kafka.bootstrap, topic_prefix, shards=2)
    server = ServerProcess(kafka.bootstrap, topic_prefix, tmp_path / "data", tmp_path / "server.log").start()
    workers = [subprocess.Popen([sys.executable, "-m", "ostinato", "worker", "tests.e2e.cli_app:slow_worker",
                                 "--server", server.url], cwd=REPO, stdout=(tmp_path / f"w{i}.log").open("wb"),
                                stderr=subprocess.STDOUT) for i in range(2)]
    marker = tmp_path / "first-attempt.pid"
    try:
        server.wait_owning(2)

        async def run() -> str:
            async with await HttpService.connect(server.url) as service:
                handle = await Client(service).start_workflow(SlowJob.run, str(marker), task_queue="cli-slow",
                                                              id=f"slow-{uuid.uuid4().hex[:6]}")
                while not marker.exists():
                    await asyncio.sleep(0.1)
                victim = int(marker.read_text())
                next(w for w in workers if w.pid == victim).kill()
                return await handle.result()

        result = asyncio.run(asyncio.wait_for(run(), 120))
        survivor = next(w for w in workers if w.poll() is None)
        assert result == f"done by {survivor.pid} on attempt 2"
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        server.stop()
