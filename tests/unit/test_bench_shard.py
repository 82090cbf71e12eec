"""`bench/shard.py` (the processor thread's work per command without Kafka) runs on small numbers and prints its
figures; the time figures are never asserted, what the commands wrote is."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_bench_shard_prints_its_figures() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.shard", "--commands", "400", "--rounds", "2", "--batch", "50",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["us_per_command"] > 0 and figures["commands_per_cpu_s"] > 0
    # Half starts (six records: two events, the run's state, the workflow's pointer, the workflow task and the
    # visibility record) and half signals to runs whose task is pending (two: the event and the state). A change
    # here is a change in the path measured, not noise.
    assert "| records written per command | 4.00 |" in done.stdout, done.stdout
