"""The benchmark harness end to end on tiny numbers (CI's smoke; figures are printed, never asserted): every
scenario runs on a real broker, server and worker, and the tables and JSON come out whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.warmup import compiler_cpu_s
from ostinato.infra.kafka import KafkaCluster
from tests.conftest import REPO


def test_compare_runs_every_scenario_on_ostinato(kafka: KafkaCluster, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.compare", "--quick", "--engines", "ostinato", "--scale", "0.02",
         "--warm", "2", "--no-processor", "--kafka", kafka.bootstrap, "--home", str(tmp_path / "home"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [r["scenario"] for r in results] == ["S1", "S1½", "S0", "S2", "S3", "S4", "S4=", "S5", "S6"]
    for r in results:
        assert r["failures"] == 0, r
        assert r["workflows_per_s"] > 0 and r["latency_ms"]["p50"] > 0, r
        assert {"server", "worker", "generator"} <= set(r["processes"]), r
    assert results[5]["metric_ms"] is not None and results[7]["metric_ms"] is not None  # lateness, signal
    same_rate = results[6]  # S4 again, in an open loop at the rate S4 ran at
    assert same_rate["metric_ms"] is not None and same_rate["mode"].startswith("open@"), same_rate
    assert results[2]["concurrency"] == 1  # S0: one hello at a time
    assert "| S0 hello | ostinato | closed |" in done.stdout
    assert "| S4 sleep1s | ostinato | closed |" in done.stdout
    assert "| S1 >= 1,000 wf/s |" in done.stdout  # the goals table, met or not


def test_the_warm_up_sees_the_brokers_jit_compiler_and_nothing_in_a_python_process(kafka: KafkaCluster) -> None:
    """`bench/warmup.py` waits for a broker's compiler threads to go quiet: it must find them in a real JVM (a
    started broker has compiled code), and find none in a process that has no JIT."""
    pids = [pid for node in kafka.nodes if (pid := kafka.pid(node.node_id)) is not None]
    assert pids
    assert compiler_cpu_s(pids) > 0
    assert compiler_cpu_s([os.getpid()]) == 0
    assert compiler_cpu_s([2**22 + 12345]) == 0  # no such process: nothing, not an error
