"""`bench/hops.py --quick` end to end on a real broker, server and worker (CI's smoke; figures are printed, never
asserted): every hop of the hello workflow gets values, beside the floor, the writes and the transactions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.kafka_floor import STAGES
from bench.waterfall import (
    ARRIVE_FIRST,
    ARRIVE_NEXT,
    DECIDE,
    END_TO_END,
    FLUSH,
    MARKERS,
    OFFSETS,
    PRODUCE,
    RESULT,
    TAKEN,
)
from ostinato.infra.kafka import KafkaCluster
from tests.conftest import REPO

EVERY_HOP = (ARRIVE_FIRST, ARRIVE_NEXT, TAKEN, DECIDE, PRODUCE, OFFSETS, FLUSH, MARKERS, RESULT, END_TO_END)


def test_hops_quick_prints_every_hop_beside_the_floor(kafka: KafkaCluster, tmp_path: Path) -> None:
    out = tmp_path / "hops.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "hops.py"), "--quick", "--kafka", kafka.bootstrap,
         "--home", str(tmp_path / "home"), "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = " ".join(done.stdout.split())  # rich wraps long cells
    for hop in EVERY_HOP:
        assert hop.split(" (")[0] in text, f"{hop!r} not printed:\n{done.stdout}"
    for stage in STAGES:
        assert stage.split(" (")[0] in text, f"floor stage {stage!r} not printed"
    report = json.loads(out.read_text())
    for name in ("lone", "half load"):
        phase = report["phases"][name]
        assert phase["workflows"] > 0 and phase["failures"] == 0, phase
        measured = {row["hop"] for row in phase["waterfall"] if row["n"] > 0}
        assert set(EVERY_HOP) <= measured, set(EVERY_HOP) - measured
        assert phase["floor"][STAGES[-1]]["n"] > 0
        assert phase["transactions"]["count"] > 0 and phase["transactions"]["partitions_p50"] > 0
        assert {"commands", "history", "state"} <= set(phase["writes_per_workflow"])
        assert {"broker", "server", "worker"} <= set(phase["cpu_ms_per_workflow"])
    assert report["closed_loop"]["workflows_per_s"] > 0
