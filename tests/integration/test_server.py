"""`ostinato server` answers cluster discovery, and refuses clusters it must not serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

from ostinato.infra.kafka import KafkaCluster
from ostinato.infra.process import free_ports
from ostinato.services.admin.cluster import init_cluster
from tests.conftest import run_cli


def test_server_answers_cluster_discovery(kafka: KafkaCluster, topic_prefix: str, tmp_path) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=3)
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "ostinato", "server", "--kafka", kafka.bootstrap, "--prefix", topic_prefix,
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        body = _get_json(f"http://127.0.0.1:{port}/api/v1/cluster", server)
    finally:
        server.terminate()
        server.wait(30)
    assert body["kafka_bootstrap"] == kafka.bootstrap
    assert body["topic_prefix"] == topic_prefix
    assert body["shards"] == 3


def _get_json(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "server exited"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return json.load(resp)
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def test_server_refuses_another_shard_count(kafka: KafkaCluster, topic_prefix: str) -> None:
    init_cluster(kafka.bootstrap, topic_prefix, shards=3)
    (port,) = free_ports(1)
    cli = run_cli("server", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--port", str(port),
                  "--shards", "4", timeout=60)
    assert cli.returncode == 1
    assert "configured for 4 shards but cluster" in cli.stderr and "has 3" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_server_refuses_an_uninitialised_cluster(kafka: KafkaCluster, topic_prefix: str) -> None:
    (port,) = free_ports(1)
    cli = run_cli("server", "--kafka", kafka.bootstrap, "--prefix", topic_prefix, "--port", str(port),
                  env={**os.environ, "OSTINATO_KAFKA": kafka.bootstrap}, timeout=60)
    assert cli.returncode == 1
    assert "ostinato cluster init" in cli.stderr
