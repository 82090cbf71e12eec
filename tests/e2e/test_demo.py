"""The README's first command: the order-fulfilment demo runs to the end on its own broker and server."""

from __future__ import annotations

from pathlib import Path

from ostinato.infra.process import free_ports
from tests.conftest import run_cli


def test_the_demo_runs_to_the_end(tmp_path: Path) -> None:
    api_port, kafka_port = free_ports(2)
    done = run_cli("demo", "--home", str(tmp_path / "dev"), "--port", str(api_port), "--kafka-port",
                   str(kafka_port), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.count("│ shipped ") == 4, out
    assert "refunded (out of stock)" in out and "never shipped: support case opened" in out
    assert "Killing the Ostinato server (kill -9" in done.stderr and "Restarting it" in done.stderr
    assert "WORKFLOW_EXECUTION_COMPLETED" in out and "attempt=2" in out
    assert "Stopped Kafka" in done.stderr  # nothing left running
