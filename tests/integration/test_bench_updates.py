"""`bench/updates.py` runs end to end on small numbers and prints its figures (timings are never asserted)."""

from __future__ import annotations

import subprocess
import sys

from ostinato.infra.kafka import KafkaCluster
from tests.conftest import REPO

FIGURES = ("update, accepted and completed", "update, rejected by its validator", "signal, for scale",
           "updates/s")


def test_bench_updates_prints_its_figures(kafka: KafkaCluster) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "updates.py"), "--kafka", kafka.bootstrap, "--quick"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = [f for f in FIGURES if f not in done.stdout]
    assert not missing, f"missing {missing} in:\n{done.stdout}\n{done.stderr}"
