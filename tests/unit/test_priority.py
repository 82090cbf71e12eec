"""`services/history/priority.py`, `--processor-nice`: the process's nice value and its autogroup move by the
delta, clamped to Linux's range, and what cannot be applied is said, not raised. Each case runs in a child process
in a session of its own, so neither the test runner's priority nor its session's autogroup changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, os, sys
from pathlib import Path
from ostinato.services.history.priority import renice
delta, autogroup = int(sys.argv[1]), Path(sys.argv[2])
if sys.argv[3] == "drop" and os.geteuid() == 0:  # root has CAP_SYS_NICE: be nobody for the refused case
    os.setgid(65534)
    os.setuid(65534)
before = os.getpriority(os.PRIO_PROCESS, 0)
problems = renice(delta, autogroup)
print(json.dumps({"before": before, "after": os.getpriority(os.PRIO_PROCESS, 0), "problems": problems,
                  "autogroup": autogroup.read_text() if autogroup.exists() else None}))
"""


def _run(delta: int, autogroup: Path, as_nobody: bool = False) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(delta), str(autogroup), "drop" if as_nobody else "keep"],
                          capture_output=True, text=True, start_new_session=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_positive_delta_moves_the_nice_value_and_the_autogroup(tmp_path: Path) -> None:
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-42 nice 1\n")
    found = _run(3, autogroup)
    assert found["problems"] == []
    assert found["after"] == min(19, int(str(found["before"])) + 3)
    assert found["autogroup"] == "4"


def test_the_range_is_clamped(tmp_path: Path) -> None:
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-42 nice 17\n")
    found = _run(19, autogroup)
    assert found["problems"] == []
    assert found["after"] == 19 and found["autogroup"] == "19"


def test_no_autogroup_file_is_not_a_problem(tmp_path: Path) -> None:
    found = _run(2, tmp_path / "absent")
    assert found["problems"] == [] and found["autogroup"] is None


def test_zero_changes_nothing(tmp_path: Path) -> None:
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-42 nice 0\n")
    found = _run(0, autogroup)
    assert found["after"] == found["before"] and found["autogroup"] == "/autogroup-42 nice 0\n"


@pytest.mark.skipif(sys.platform != "linux", reason="nice values and autogroups are Linux's here")
def test_a_refused_raise_is_said_and_leaves_the_priority(tmp_path: Path) -> None:
    found = _run(-5, Path("/nonexistent-ostinato/autogroup"), as_nobody=True)  # nobody cannot reach tmp_path
    problems = [str(p) for p in found["problems"]]  # type: ignore[attr-defined]
    assert found["after"] == found["before"]
    assert problems and problems[0].startswith("nice -5:") and "CAP_SYS_NICE" in problems[0], problems
