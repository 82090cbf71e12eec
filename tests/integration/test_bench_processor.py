"""`bench/processor.py` runs end to end on tiny numbers and prints its figures (timings are never asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ostinato.infra.kafka import KafkaCluster
from tests.conftest import REPO

FIGURES = ("| commands/s (sustained) |", "| commands per batch p50 / p95 / max |",
           "| loop step ms p50 / p95 / p99 (decide, land the last batch, produce) |",
           "| commit_transaction ms p50 / p95 / p99 |", "| records produced per command |",
           "| process CPU (all threads) |", "| group offsets at end of commands | yes |",
           "| where the processor thread's window went |")


@pytest.mark.parametrize("extra", [["--mix", "mixed"], ["--mix", "signal", "--profile"], ["--serial"]])
def test_bench_processor_prints_its_figures(kafka: KafkaCluster, extra: list[str]) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "processor.py"), "--kafka", kafka.bootstrap,
                           "--quick", "--commands", "600", "--workflows", "50", *extra],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = [f for f in FIGURES if f not in done.stdout]
    assert not missing, f"missing {missing} in:\n{done.stdout}\n{done.stderr}"
    if "--profile" in extra:
        assert "top 25 by cumulative time" in done.stdout, done.stdout
