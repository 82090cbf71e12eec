"""`bench/timer_looks.py` runs on small numbers and prints its figures; the time is never asserted, that the
overlays held the deadlines it says it looked through is."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_bench_timer_looks_looks_through_the_deadlines_it_armed() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.timer_looks", "--armed", "0,40", "--looks", "5"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("|")[1:4] for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    figures = [(int(a.strip()), int(d.strip())) for a, d, _ in rows[1:]]
    assert figures == [(0, 0), (40, 40)], done.stdout  # one task timeout a start, half sealed, half open
