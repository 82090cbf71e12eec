"""`ostinato dev --detach` as a user runs it: a broker, a cluster and the API, then a clean stop."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from ostinato.infra.kafka import KafkaCluster
from ostinato.infra.process import free_ports, pid_alive
from tests.conftest import run_cli


def _dev_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OSTINATO_KAFKA"}
    env["OSTINATO_HOME"] = str(home)
    return env


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (our dev home is unique to this test)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and pid_alive(int(proc.name)):
                found.append(int(proc.name))
    return found


def test_dev_detach_starts_everything_and_stop_leaves_nothing(tmp_path: Path) -> None:
    kafka_port, _controller_port = free_ports(2, consecutive=True)  # the broker's controller takes port + 1
    (api_port,) = free_ports(1)
    env = _dev_env(tmp_path)
    up = run_cli("dev", "--detach", "--kafka-port", str(kafka_port), "--port", str(api_port), "--shards", "3",
                 env={**env, "OSTINATO_HOME": str(tmp_path)})
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Ostinato dev is running" in up.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v1/cluster", timeout=5) as resp:
            body = json.load(resp)
        assert body == {**body, "shards": 3, "kafka_bootstrap": f"127.0.0.1:{kafka_port}", "topic_prefix": "ostinato"}
        kafka = KafkaCluster.existing(tmp_path / "dev" / "kafka")
        assert kafka is not None and kafka.running()
        server_pid = int((tmp_path / "dev" / "server.pid").read_text().split()[0])
        broker_pid = kafka.pid(1)
        assert pid_alive(server_pid) and broker_pid is not None

        again = run_cli("dev", "--detach", "--kafka-port", str(kafka_port), "--port", str(api_port), env=env)
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stderr
    finally:
        down = run_cli("dev", "stop", env=env)
    assert down.returncode == 0, down.stderr
    assert "Stopped the Ostinato server" in down.stderr and "Stopped Kafka" in down.stderr
    # Not even a <defunct> entry: stop returns once the processes have left the process table.
    assert not Path(f"/proc/{server_pid}").exists()
    assert not Path(f"/proc/{broker_pid}").exists()
    assert _processes_mentioning(str(tmp_path)) == []


def test_dev_uses_an_existing_broker_from_ostinato_kafka(kafka: KafkaCluster, tmp_path: Path) -> None:
    (api_port,) = free_ports(1)
    env = {**_dev_env(tmp_path), "OSTINATO_KAFKA": kafka.bootstrap, "OSTINATO_TOPIC_PREFIX": "devext"}
    up = run_cli("dev", "--detach", "--port", str(api_port), env=env)
    try:
        assert up.returncode == 0, up.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v1/cluster", timeout=5) as resp:
            body = json.load(resp)
        assert (body["kafka_bootstrap"], body["topic_prefix"], body["shards"]) == (kafka.bootstrap, "devext", 4)
        assert not (tmp_path / "dev" / "kafka").exists()  # no broker of its own
    finally:
        down = run_cli("dev", "stop", env=env)
    assert down.returncode == 0
    assert kafka.running()  # the borrowed broker is left alone
