"""Ostinato and Temporal side by side: every scenario on every engine, alternately, in one invocation.

Absolute figures drift on shared machines, so what matters is the ratio measured minutes apart on the same box.
Each scenario runs on each engine before the next scenario starts, and the engine order flips every scenario, so
a slow minute of the machine does not always land on the same engine. Servers stay up between scenarios (their
idle cost is in the CPU columns). Before the first scenario each engine runs hello workflows, unmeasured, until its
broker's JIT compiler is quiet (`bench/warmup.py`, `--warm`): the figures are of a warm engine, as in production.
Run `bench/compare --quick` (a few minutes) or `bench/compare` (the full run);
`--help` lists the knobs. Nothing here asserts a timing: the goals table says met or not met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import Engine, ProcessMeter, Result, Scenario, markdown, run_scenario, write_json
from bench.warmup import warm

ROOT = Path(__file__).resolve().parents[1]

# S0 (hello, one at a time) comes after S1: a broker's JVM spends its first minute compiling, and a lone workflow
# right after start-up would measure that (Temporal's dev server is Go, nothing to warm).
QUICK = [
    Scenario("S1", "hello", count=300, concurrency=50, warmup=30),
    Scenario("S0", "hello", count=50, concurrency=1, warmup=10),
    Scenario("S2", "seq10", count=60, concurrency=20, warmup=10, activities_per_workflow=10),
    Scenario("S3", "fanout100", count=6, concurrency=3, warmup=1, activities_per_workflow=100),
    Scenario("S4", "sleep1s", count=500, concurrency=500, warmup=20),
    Scenario("S5", "signal", count=200, concurrency=50, warmup=20),
    Scenario("S6", "start_only", count=1000, concurrency=100, warmup=50),
]
FULL = [  # sized for about half an hour with three engines on a 2-core machine; raise with --scale
    Scenario("S1", "hello", count=1500, concurrency=100, warmup=100),
    Scenario("S0", "hello", count=200, concurrency=1, warmup=50),
    Scenario("S2", "seq10", count=200, concurrency=50, warmup=20, activities_per_workflow=10),
    Scenario("S3", "fanout100", count=20, concurrency=5, warmup=2, activities_per_workflow=100),
    Scenario("S4", "sleep1s", count=3000, concurrency=3000, warmup=50),
    Scenario("S5", "signal", count=1000, concurrency=100, warmup=50),
    Scenario("S6", "start_only", count=5000, concurrency=200, warmup=200),
]
SAME_RATE_SECONDS = {True: 10.0, False: 30.0}  # quick, full: length of each open-loop run of SAME_RATE
# Scenarios run again in an open loop at one rate for every engine, taken from the slowest engine's closed-loop
# throughput: name of the rerun, share of that throughput. A closed loop measures each engine at its own peak, and
# latency at five times the load is not latency compared: S1½ is hello at half load, S4= the timers at the rate
# the slowest engine fired them.
SAME_RATE = {"S1": ("S1½", 0.5), "S4": ("S4=", 1.0)}


def make_engines(names: list[str], home: Path, kafka: str | None = None, processors: int | None = None,
                 ) -> list[Engine]:
    engines: list[Engine] = []
    for name in names:
        if name == "ostinato":
            from bench.engine_ostinato import OstinatoEngine

            engines.append(OstinatoEngine(home=home / "ostinato", kafka=kafka, processors=processors))
        elif name in ("temporal", "temporal-sqlite"):
            from bench.engine_temporal import TemporalEngine

            engines.append(TemporalEngine(persistent=name == "temporal-sqlite", home=home / name))
        else:
            raise SystemExit(f"unknown engine {name!r}: ostinato, temporal, temporal-sqlite")
    return engines


async def run_all(engines: list[Engine], scenarios: list[Scenario], quick: bool, idle: int,
                  warm_s: float = 0.0, scale: float = 1.0) -> list[Result]:
    results: list[Result] = []
    run_id = uuid.uuid4().hex[:6]
    warmed: dict[str, str] = {}
    try:
        if warm_s > 0:
            for engine in engines:
                print(f"== warm-up on {engine.name}", file=sys.stderr, flush=True)
                warmed[engine.name] = await warm(engine, min_s=warm_s, run_id=run_id)
                print(f"  {warmed[engine.name]}", file=sys.stderr, flush=True)
        for n, scenario in enumerate(scenarios):
            order = engines if n % 2 == 0 else list(reversed(engines))
            measured: list[Result] = []
            for engine in order:
                print(f"== {scenario.name} {scenario.shape} on {engine.name}", file=sys.stderr, flush=True)
                await engine.start(scenario)
                others = _meter_others(engines, engine)
                started = time.monotonic()
                result = await run_scenario(engine, scenario, run_id)
                if n == 0 and engine.name in warmed:
                    result.note = warmed[engine.name]
                if others is not None:
                    result.note = "; ".join(n for n in (result.note, _others_note(others, started)) if n)
                await _note_processors(engine, result)
                measured.append(result)
                print(markdown([result]).splitlines()[-1], file=sys.stderr, flush=True)
            results += measured
            if scenario.name in SAME_RATE:  # S0 is hello one at a time: no throughput to share
                name, share = SAME_RATE[scenario.name]
                rate = max(1.0, min(r.workflows_per_s for r in measured) * share)
                for engine in order:
                    await engine.start(scenario)
                    results.append(await _same_rate(engine, scenario, name, rate, run_id, quick, scale))
        if idle:
            results += await _s7(engines, scenarios, run_id, idle)
    finally:
        for engine in engines:
            await engine.stop()
    return results


def _meter_others(engines: list[Engine], measured: Engine) -> ProcessMeter | None:
    """The other engines stay up (warm) while one is measured, on the same cores: what their idle processes take
    is said beside each result (idle, Ostinato's broker and server take about 0.13 core, Temporal's 0.01)."""
    pids = {f"{e.name}:{role}": found for e in engines if e is not measured
            for role, found in e.processes().items() if found}
    return ProcessMeter(pids) if pids else None


def _others_note(meter: ProcessMeter, started: float) -> str:
    elapsed = max(1e-3, time.monotonic() - started)
    figures = meter.finish()
    cpu = sum(f.cpu_s for role, f in figures.items() if role != "generator")
    return f"the other engines' processes meanwhile: {cpu / elapsed:.2f} core"


async def _note_processors(engine: Engine, result: Result) -> None:
    """Ostinato's own view of the run (transactions, their length, timers): the hop that holds a figure."""
    figures = getattr(engine, "processor_figures", None)  # Ostinato's engine only: Temporal has no such page
    if figures is not None:
        result.note = "; ".join(n for n in (result.note, await figures()) if n)
        print(f"  {result.note}", file=sys.stderr, flush=True)


async def _same_rate(engine: Engine, closed: Scenario, name: str, rate: float, run_id: str, quick: bool,
                     scale: float = 1.0) -> Result:
    """A closed-loop scenario again in an open loop at a rate shared by every engine (SAME_RATE): the latency
    users see at a given load, compared like for like (each engine at a share of its own rate would compare a
    loaded engine with an idle one). S1½ runs hello at half the slowest engine's S1; S4= the 1 s timer at the
    slowest engine's S4 rate, so both engines fire timers as often as the slower one did in S4. `--scale` shortens
    the run as it shrinks every other count."""
    count = max(20, int(rate * SAME_RATE_SECONDS[quick] * scale))
    again = replace(closed, name=name, count=count, concurrency=count, rate=round(rate, 1), warmup=10)
    print(f"== {closed.name} at {again.rate}/s ({name}) on {engine.name}", file=sys.stderr, flush=True)
    result = await run_scenario(engine, again, run_id)
    await _note_processors(engine, result)
    print(markdown([result]).splitlines()[-1], file=sys.stderr, flush=True)
    return result


async def _s7(engines: list[Engine], scenarios: list[Scenario], run_id: str, idle: int) -> list[Result]:
    """S7: `idle` open workflows waiting on every engine, then S1 again; compare with S1 on an empty engine."""
    s1 = next((s for s in scenarios if s.name == "S1"), None) or next(s for s in scenarios if s.shape == "hello")
    out = []
    for engine in engines:
        print(f"== S7: starting {idle:,} idle workflows on {engine.name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        await engine.start(replace(s1, name="S7", idle_before=idle))
        await engine.start_idle(idle, _idle_progress(engine.name, idle))
        took = time.perf_counter() - started
        result = await run_scenario(engine, replace(s1, name="S7"), run_id + "s7")
        result.note = f"after {idle:,} idle workflows (started in {took:.0f}s, {idle / took:.0f}/s)"
        print(markdown([result]).splitlines()[-1], file=sys.stderr, flush=True)
        out.append(result)
    return out


def _idle_progress(name: str, total: int) -> Any:
    last = [0.0]

    def progress(n: int) -> None:
        if time.monotonic() - last[0] > 10 or n == total:
            last[0] = time.monotonic()
            print(f"  {name} idle: {n:,}/{total:,}", file=sys.stderr, flush=True)

    return progress


def ratio_table(results: list[Result], base: str) -> str:
    """Ostinato against each other engine, scenario by scenario: >1 means Ostinato is better."""
    lines = ["| scenario | against | throughput x | p50 latency x (their/ours) | p99 latency x | metric p99 x |",
             "| --- | --- | --- | --- | --- | --- |"]
    by = {(r.scenario, r.engine): r for r in results}
    for (scenario, engine), other in by.items():
        ours = by.get((scenario, base))
        if engine == base or ours is None:
            continue
        metric = ""
        if ours.metric_ms and other.metric_ms:
            metric = _x(other.metric_ms["p99"], ours.metric_ms["p99"])
        lines.append(f"| {scenario} {ours.shape} | {engine} | {_x(ours.workflows_per_s, other.workflows_per_s)} | "
                     f"{_x(other.latency_ms['p50'], ours.latency_ms['p50'])} | "
                     f"{_x(other.latency_ms['p99'], ours.latency_ms['p99'])} | {metric} |")
    return "\n".join(lines)


def _x(num: float, den: float) -> str:
    return f"{num / den:.2f}" if den and den == den and num == num else "n/a"


def goals(results: list[Result], processor_cps: float | None) -> str:
    """The issue's targets, each reported met or not met from this run's figures."""
    get = {(r.scenario, r.engine): r for r in results}
    ours = {r.scenario: r for r in results if r.engine == "ostinato"}
    temporal = next((get[(s, e)] for (s, e) in get if s == "S1" and e == "temporal"), None)
    rows: list[tuple[str, str, bool | None]] = []

    def add(goal: str, value: float | None, ok: bool | None, unit: str = "") -> None:
        rows.append((goal, "n/a" if value is None else f"{value:,.1f}{unit}", ok))

    s1 = ours.get("S1")
    if s1 and temporal:
        x = s1.workflows_per_s / temporal.workflows_per_s if temporal.workflows_per_s else None
        add("S1 >= 10x Temporal's throughput", x, x is not None and x >= 10, "x")
    add("S1 >= 1,000 wf/s", s1.workflows_per_s if s1 else None, bool(s1 and s1.workflows_per_s >= 1000))
    half = ours.get("S1½")
    add("p50 hello <= 15 ms at half load", half.latency_ms["p50"] if half else None,
        bool(half and half.latency_ms["p50"] <= 15), " ms")
    s2 = ours.get("S2")
    add("S2 >= 150 wf/s", s2.workflows_per_s if s2 else None, bool(s2 and s2.workflows_per_s >= 150))
    s3 = ours.get("S3")
    add("S3 >= 5,000 activities/s", s3.activities_per_s if s3 else None, bool(s3 and s3.activities_per_s >= 5000))
    s4 = ours.get("S4")
    p99 = s4.metric_ms["p99"] if s4 and s4.metric_ms else None
    add("S4 timer lateness p99 <= 50 ms", p99, p99 is not None and p99 <= 50, " ms")
    s6 = ours.get("S6")
    add("S6 >= 5,000 starts/s", s6.workflows_per_s if s6 else None, bool(s6 and s6.workflows_per_s >= 5000))
    add("processor >= 10k commands/s", processor_cps, processor_cps is not None and processor_cps >= 10_000)
    lines = ["| goal | measured | met |", "| --- | --- | --- |"]
    lines += [f"| {g} | {v} | {'yes' if ok else 'no' if ok is not None else 'n/a'} |" for g, v, ok in rows]
    return "\n".join(lines)


def latency_targets(results: list[Result]) -> str:
    """Issue 15's acceptance, each reported met or not from this run: Ostinato beside Temporal (in memory) and the
    ratio. Latency ratios are theirs / ours, throughput ratios ours / theirs: above 1, Ostinato is ahead."""
    ours = {r.scenario: r for r in results if r.engine == "ostinato"}
    theirs = {r.scenario: r for r in results if r.engine == "temporal"}
    lines = ["| target | Ostinato | Temporal | ratio | met |", "| --- | --- | --- | --- | --- |"]
    targets = [  # (target, scenario, figure, ratio needed, unit, absolute bound on ours or None)
        ("S0 p50 <= 1/3 of Temporal's", "S0", "p50", 3.0, " ms", None),
        ("S1½ p50 <= Temporal's at the same rate", "S1½", "p50", 1.0, " ms", None),
        ("S4 lateness p99 <= Temporal's and <= 50 ms", "S4", "metric p99", 1.0, " ms", 50.0),
        ("S4= (S4 at the same rate) lateness p99 <= Temporal's and <= 50 ms", "S4=", "metric p99", 1.0, " ms", 50.0),
        ("S2 >= 3x Temporal's throughput", "S2", "wf/s", 3.0, " wf/s", None),
        ("S1 >= 5x Temporal's throughput", "S1", "wf/s", 5.0, " wf/s", None),
    ]
    for target, scenario, figure, need, unit, bound in targets:
        mine, other = _figure(ours.get(scenario), figure), _figure(theirs.get(scenario), figure)
        ratio = None
        if mine == mine and other == other and min(mine, other) > 0:  # NaN-safe: a missing figure stays n/a
            ratio = mine / other if figure == "wf/s" else other / mine
        met = ratio is not None and ratio >= need and (bound is None or mine <= bound)
        shown = [f"{v:,.1f}{unit}" if v == v else "n/a" for v in (mine, other)]
        lines.append(f"| {target} | {shown[0]} | {shown[1]} | {f'{ratio:.2f}x' if ratio else 'n/a'} | "
                     f"{'yes' if met else 'no' if ratio is not None else 'n/a'} |")
    return "\n".join(lines)


def _figure(result: Result | None, figure: str) -> float:
    if result is None:
        return float("nan")
    if figure == "wf/s":
        return result.workflows_per_s
    if figure == "metric p99":
        return result.metric_ms["p99"] if result.metric_ms else float("nan")
    return result.latency_ms[figure]


def processor_bench(quick: bool) -> float | None:
    """bench/processor.py in a child process (it starts its own broker); its commands/s figure."""
    argv = [sys.executable, str(ROOT / "bench" / "processor.py"), "--json"] + (["--quick"] if quick else [])
    print("== processor alone (bench/processor.py)", file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode != 0:
        print(f"  processor bench failed: {done.stderr[-800:]}", file=sys.stderr)
        return None
    figure = float(json.loads(done.stdout.strip().splitlines()[-1])["commands_per_s"])
    print(f"  {figure:,.0f} commands/s", file=sys.stderr)
    return figure


def machine() -> dict[str, Any]:
    import psutil

    return {"when": datetime.now(UTC).isoformat(timespec="seconds"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a few minutes in all")
    parser.add_argument("--engines", default="", help="comma-separated: ostinato,temporal,temporal-sqlite "
                        "(default: ostinato,temporal for --quick, all three otherwise)")
    parser.add_argument("--scenarios", default="", help="comma-separated subset, e.g. S1,S4")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count (e.g. 0.01 for a smoke)")
    parser.add_argument("--s7", type=int, default=0, metavar="N",
                        help="also run S7: N idle open workflows, then S1 again (e.g. 1000000; takes long)")
    parser.add_argument("--no-processor", action="store_true", help="skip the processor-alone figure")
    parser.add_argument("--out", default="", help="JSON results file (default bench/results/compare-<time>.json)")
    parser.add_argument("--home", default="", help="working directory for servers (default: a temp dir)")
    parser.add_argument("--kafka", default=None, help="use this running broker for Ostinato instead of starting one")
    parser.add_argument("--warm", type=float, default=None, metavar="S",
                        help="warm each engine with at least S s of hello workflows, then until its broker's JIT "
                        "compiler is quiet, at most max(S, 180) s (default 30; 10 with --quick; 0: no warm-up)")
    parser.add_argument("--processors", type=int, default=None,
                        help="ostinato server --processors (default: one per core, at most one per shard)")
    args = parser.parse_args(argv)
    names = [n for n in (args.engines or ("ostinato,temporal" if args.quick else
                                           "ostinato,temporal,temporal-sqlite")).split(",") if n]
    scenarios = QUICK if args.quick else FULL
    if args.scenarios:
        wanted = set(args.scenarios.split(","))
        scenarios = [s for s in scenarios if s.name in wanted]
    if args.scale != 1.0:
        scenarios = [replace(s, count=max(2, int(s.count * args.scale)), warmup=max(1, int(s.warmup * args.scale)),
                             concurrency=max(1, min(s.concurrency, int(s.count * args.scale) or 1)))
                     for s in scenarios]
    import tempfile

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="ostinato-bench-"))
    started = time.monotonic()
    warm_s = args.warm if args.warm is not None else (10.0 if args.quick else 30.0)
    results = asyncio.run(run_all(make_engines(names, home, args.kafka, args.processors), scenarios, args.quick,
                                  args.s7, warm_s, args.scale))
    processor = None if args.no_processor else processor_bench(args.quick)
    meta = {**machine(), "args": vars(args), "engines": names, "elapsed_s": round(time.monotonic() - started),
            "processor_commands_per_s": processor}
    out = args.out or str(ROOT / "bench" / "results" / f"compare-{datetime.now(UTC):%Y%m%dT%H%M%S}.json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_json(out, results, meta)
    print(f"\n## Results ({meta['cpus']} CPUs, Python {meta['python']}, {meta['elapsed_s']} s)\n")
    print(markdown(results))
    notes = [f"- {r.scenario} on {r.engine}: {r.note}" for r in results if r.note]
    if notes:
        print("\nNotes:\n" + "\n".join(notes))
    if "ostinato" in names and len(names) > 1:
        print("\n## Ratios (Ostinato against each engine; above 1 is better for Ostinato)\n")
        print(ratio_table(results, "ostinato"))
    if "ostinato" in names:
        print("\n## Goals\n")
        print(goals(results, processor))
    if "ostinato" in names and "temporal" in names:
        print("\n## Latency targets (issue 15)\n")
        print(latency_targets(results))
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
