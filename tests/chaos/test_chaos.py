"""Issue 16's chaos suite: two servers, two SDK workers and three brokers under a mixed workload (retried and
heartbeating activities, timers, signals, children), one fault per test.

Server faults strike while the victim holds a transaction open. Always asserted (true today): nothing lost, stuck
or wrong; the whole history topic passes the independent checker; every shard store equals the fold of its history;
no process exits on its own. Always measured and printed (`-s`), and written to `<tmp>/report.json`: activity
re-executions counted by a ledger outside the engine, the longest gap in progress and the longest workflow task and
activity wait on the healthy server's shards, the first completion after both servers restart, HTTP 5xx seen by
clients and workers, `result()` raises. Issue 16's thresholds on those figures are asserted only with
OSTINATO_CHAOS_STRICT=1. The short forms run by default; the full forms (`-m chaos_full`) are the acceptance run.
Figures and how to run them: docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ostinato.infra.kafka import KafkaCluster
from tests.tools.chaos_run import FORMS, SCENARIOS, format_report, invariant_violations, run, strict_violations

# server_stop (SIGSTOP, a frozen owner) runs in its full form only: tests/chaos/test_processor_faults.py's frozen
# owner test covers the fencing it relies on in CI, and each short form costs about a minute.
SHORT = ("server_kill", "server_term", "both_servers_kill")
STRICT = os.environ.get("OSTINATO_CHAOS_STRICT") == "1"
REPORT_DIR = os.environ.get("OSTINATO_CHAOS_REPORT_DIR")  # where to keep a copy of every report (and the logs)

CASES = [pytest.param(name, "short", id=f"short-{name}") for name in SHORT] + [
    pytest.param(name, "full", id=f"full-{name}", marks=pytest.mark.chaos_full) for name in SCENARIOS]


@pytest.mark.kafka3
@pytest.mark.parametrize(("scenario", "form"), CASES)
def test_chaos(kafka3: KafkaCluster, tmp_path: Path, scenario: str, form: str) -> None:
    report = run(kafka3, tmp_path, SCENARIOS[scenario], FORMS[form])
    print("\n" + format_report(report))
    if REPORT_DIR:
        keep = Path(REPORT_DIR) / f"{form}-{scenario}"
        shutil.copytree(tmp_path, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("server-a", "server-b"))
    assert invariant_violations(report) == [], json.dumps(report, indent=1, default=str)[:4000]
    if STRICT:
        assert strict_violations(report) == []
