"""Soak: the chaos suite's workload for minutes or hours, with a random fault every so often, then its figures.

    python -m bench.soak --duration 600                  # ten minutes, a fault every 45 s
    python -m bench.soak --duration 3600 --rate 4 --faults server_kill,server_stop,broker_kill --seed 7

Starts a three-broker Kafka (under --home, reused if it is running), two `ostinato server` processes and two SDK
worker processes (tests/tools/chaos_*), offers `--rate` workflows a second of the mixed workload (retried and
heartbeating activities, timers, signals, children), and does one fault from `--faults` every `--fault-every`
seconds. Progress is printed every 10 s; at the end, the figures of docs/reliability.md as tables: per fault, and
for the whole run. Like every benchmark it asserts no timing; it exits 1 when an invariant broke (something lost,
stuck or wrong, a bad history, a store that is not the fold of its history), and with --strict also when a figure
misses issue 16's acceptance thresholds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ostinato.infra.kafka import KafkaCluster
from tests.tools.chaos_faults import SERVER_NAMES, Faults
from tests.tools.chaos_load import Load
from tests.tools.chaos_run import Inject, invariant_violations, run_load, strict_violations
from tests.tools.ledger import read_ledger

console = Console() if sys.stdout.isatty() else Console(width=160)  # a log file gets whole table rows

FAULTS: dict[str, Inject] = {
    "server_kill": lambda f: f.kill_server(random.choice(SERVER_NAMES)),
    "server_stop": lambda f: f.stop_server(random.choice(SERVER_NAMES)),
    "server_term": lambda f: f.term_server(random.choice(SERVER_NAMES)),
    "server_wipe": lambda f: f.wipe_server(random.choice(SERVER_NAMES)),
    "both_servers_kill": lambda f: f.kill_both(),
    "broker_kill": lambda f: f.kill_broker(),
    "worker_kill": lambda f: f.kill_worker(random.choice(["w1", "w2"])),
}


def _kafka(home: Path) -> KafkaCluster:
    """Three combined nodes as the kafka3 test fixture has them (a dead broker is declared dead after 6 s)."""
    cluster = KafkaCluster.existing(home) or KafkaCluster(
        home, nodes=3, port=None,
        extra_config={"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000"})
    return cluster.start()


def _progress(started: float, ledger: Path) -> Any:
    def show(load: Load, faults: Faults) -> None:
        counts = load.counts()
        executions = len(read_ledger(ledger)) if ledger.exists() else 0
        last = faults.events[-1] if faults.events else None
        console.print(f"[dim]{time.monotonic() - started:7.0f}s[/] scheduled {counts['scheduled']}, started "
                      f"{counts['started']}, closed {counts['closed']}, in flight "
                      f"{counts['started'] - counts['closed']}, result() raised {counts['raises']}, activity "
                      f"executions {executions}, faults {len(faults.events)}"
                      + (f" (last: {last.kind} {last.target})" if last else ""))
    return show


def _fault_table(report: dict[str, Any]) -> Table:
    table = Table(title="faults (gaps and steps on the healthy server's shards; all shards for a broker)")
    for column in ("at (s)", "fault", "target", "open txn", "back after (s)", "longest gap (s)",
                   "longest workflow task / activity wait (s)", "first completion (s)", "note"):
        table.add_column(column)
    for fault in report["faults"]:
        back = f"{(fault['back_ms'] - fault['at_ms']) / 1000:.1f}" if fault["back_ms"] else "-"
        steps = (f"{fault['longest_workflow_task_s']} / {fault['longest_activity_wait_s']}"
                 if "longest_workflow_task_s" in fault else "-")
        in_txn = fault.get("in_transaction")
        table.add_row(f"{(fault['at_ms'] - report['load_started_ms']) / 1000:.0f}", fault["kind"], fault["target"],
                      "-" if in_txn is None else ("yes" if in_txn else "no"), back,
                      str(fault.get("longest_gap_s", "-")), steps, str(fault.get("first_completion_s", "-")),
                      fault["note"].strip())
    return table


def _totals_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"soak: {report['title']} (commit {report['commit']})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("issue 16 asks")
    rows = [
        ("workflows (top level) / child workflows", f"{report['workflows']} / {report['children']}", ""),
        ("lost / stuck / wrong", f"{report['lost']} / {report['stuck']} / {report['wrong']}", "0 / 0 / 0"),
        ("start never acknowledged", report["start_failed"], "0"),
        ("history clean (independent checker)", report["history_ok"], "True"),
        ("stores differing from the fold of history", report["store_mismatches"], "0"),
        ("activity executions", report["executions"], ""),
        ("re-executions beyond the retry design", report["re_executions"], ""),
        ("  by the fault they follow", report["re_executions_by_fault"] or "-", "0 after server faults"),
        ("longest gap in progress during a one-server fault (s)", report["longest_gap_s"], "<= 3"),
        ("longest workflow task / activity wait then (s)",
         f"{report['longest_workflow_task_s']} / {report['longest_activity_wait_s']}", "<= 3 (this suite)"),
        ("first completion after both servers restart (s)", report["first_completion_s"], "<= 5"),
        ("HTTP 5xx (503 with Retry-After aside) / all 5xx", f"{report['http_5xx']} / {report['http_5xx_all']}",
         "0"),
        ("requests without an answer", report["http_failures"] or "-", ""),
        ("unhandled errors in server logs", report["server_unhandled_errors"], "0"),
        ("result() raised, its server up / down", f"{report['result_raises']} / "
                                                   f"{report['result_raises_entry_down']}", "0 / -"),
        ("start / signal retries", f"{report['start_retries']} / {report['signal_retries']}", ""),
        ("duration (s), machine load before -> after", f"{report['duration_s']}, {report['loadavg_before']} -> "
                                                        f"{report['loadavg_after']}", ""),
    ]
    for label, value, goal in rows:
        table.add_row(label, str(value), goal)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600, help="seconds of offered load (default 600)")
    parser.add_argument("--rate", type=float, default=4.0, help="workflows started per second (default 4)")
    parser.add_argument("--fault-every", type=float, default=45.0, help="seconds between faults (default 45)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, from {', '.join(FAULTS)}")
    parser.add_argument("--seed", type=int, default=None, help="for the choice of faults and victims")
    parser.add_argument("--home", type=Path, default=Path("bench/results/soak"),
                        help="Kafka, server and worker data and logs, and report.json (default bench/results/soak)")
    parser.add_argument("--drain", type=float, default=300, help="seconds to wait for the last results")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure misses issue 16's thresholds")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    unknown = sorted(set(kinds) - FAULTS.keys())
    if unknown:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    random.seed(seed)
    times = [args.fault_every * i for i in range(1, int(args.duration // args.fault_every) + 1)
             if args.fault_every * i < args.duration - 10]
    plan = [(at, random.choice(kinds)) for at in times]
    console.print(f"soak: {args.duration:.0f}s at {args.rate}/s, faults every {args.fault_every:.0f}s "
                  f"({', '.join(k for _, k in plan) or 'none'}), seed {seed}")

    kafka = _kafka(args.home / "kafka3")
    run_home = args.home / f"run-{int(time.time())}"
    report = run_load(
        kafka, run_home, {"scenario": "soak", "title": f"{args.duration:.0f}s, a fault every {args.fault_every:.0f}s",
                          "form": "soak", "seed": seed},
        entries=SERVER_NAMES, workers={"w1": "a", "w2": "b"}, workflows=int(args.duration * args.rate),
        rate=args.rate, faults=[(at, FAULTS[kind]) for at, kind in plan],
        window_s=min(30.0, args.fault_every), drain_s=args.drain,
        progress=_progress(time.monotonic(), run_home / "ledger"))
    console.print(_fault_table(report))
    console.print(_totals_table(report))
    console.print(f"report: {run_home / 'report.json'}")
    broken = invariant_violations(report)
    missed = strict_violations(report)
    for line in broken:
        console.print(f"[red]invariant broken:[/] {line}")
    for line in missed:
        console.print(f"[yellow]threshold missed:[/] {line}")
    return 1 if broken or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
