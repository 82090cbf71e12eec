"""The load generator behind `bench/compare`: the same scenarios, the same loop and the same measurements for
every engine, so the only thing that differs between two rows of a table is the engine.

An engine is an `Engine` (bench/engine_ostinato.py, bench/engine_temporal.py): it starts its own servers and
workers as child processes, names them for CPU/RSS accounting, and runs one workflow of a scenario from this
(the generator) process. The loop here decides how many run at once and measures.

Modes:
- closed loop: `concurrency` workflows in flight; as one finishes the next starts. Throughput = measured
  workflows / the measured window. Latency = start call -> result, per workflow.
- open loop: starts at a fixed `rate` per second regardless of completions (latency then includes queueing, as
  users see it under a given load).

Every run has a warm-up (not measured: JIT-free Python still fills caches, connections and topic metadata)
and then `count` measured workflows. Figures are printed and written as JSON; nothing here asserts a timing.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import psutil

SHAPES = ("hello", "seq10", "fanout100", "sleep1s", "signal", "start_only")
"""S1 hello (one activity), S2 ten sequential activities, S3 fan-out of 100 activities and join, S4 a 1 s timer,
S5 a workflow waiting for a signal, S6 starts with no worker (ingestion)."""
# Both engines' workers keep this many workflows cached between tasks: more than the most any scenario holds in
# flight (S4: 3,000 sleeping at once), so no engine's workers replay histories the other's do not.
WORKER_CACHE = 4000


@dataclass(frozen=True)
class Scenario:
    name: str  # S1..S7, as in docs/benchmarks.md
    shape: str  # one of SHAPES
    count: int  # measured workflows
    concurrency: int = 50  # closed loop: in flight at once
    warmup: int = 20
    rate: float | None = None  # open loop: starts per second (None: closed loop)
    activities_per_workflow: int = 1  # for activities/s figures
    idle_before: int = 0  # S7: this many idle open workflows are started before the measured run


@dataclass
class Outcome:
    """What one workflow of a scenario measured, besides its start->result latency. `later` reads a metric after
    the scenario's window: S4's lateness comes from each run's history, and reading 3,000 histories while the
    other runs' timers fall due loaded the very engine whose timers it measured (a request per workflow more,
    at the burst's peak)."""

    latency_s: float
    metric_ms: float | None = None  # S4: timer lateness; S5: signal -> observed
    later: Callable[[], Awaitable[float]] | None = None  # read after the window, into metric_ms


class Engine(Protocol):
    """One engine under test. All methods are called from the generator's event loop."""

    name: str

    async def start(self, scenario: Scenario) -> None:
        """Start servers and workers able to run `scenario` (a scenario with shape start_only runs no worker)."""

    async def run_one(self, scenario: Scenario, workflow_id: str) -> Outcome:
        """Run one workflow of the scenario to its result (start_only: until the start is acknowledged)."""

    async def start_idle(self, count: int, progress: Callable[[int], None]) -> None:
        """S7: start `count` workflows that wait (for a signal that never comes), as fast as it can."""

    def processes(self) -> dict[str, list[int]]:
        """Role ("broker", "server", "worker") -> pids, for CPU seconds and peak RSS."""

    async def stop(self) -> None:
        """Stop everything `start` started."""


@dataclass
class ProcessFigures:
    cpu_s: float = 0.0
    peak_rss_mib: float = 0.0


@dataclass
class Result:
    engine: str
    scenario: str
    shape: str
    mode: str
    count: int
    concurrency: int
    elapsed_s: float
    workflows_per_s: float
    activities_per_s: float
    latency_ms: dict[str, float]
    metric_ms: dict[str, float] | None
    failures: int
    processes: dict[str, ProcessFigures] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/max by nearest rank; empty input gives NaN, so a table shows the gap instead of a zero."""
    if not values:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan, "max": math.nan}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "max": ordered[-1]}


TREE_REFRESH_S = 2.0  # how often the meter looks for a role's new child processes


class ProcessMeter:
    """CPU seconds over the measured window and peak RSS (sampled every 100 ms) of each role's processes and
    their children, plus this generator process itself."""

    def __init__(self, roles: dict[str, list[int]]) -> None:
        self.roles = {**roles, "generator": [os.getpid()]}
        self._procs = {role: [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
                       for role, pids in self.roles.items()}
        self._trees = {role: self._tree(role) for role in self._procs}
        self._trees_at = time.monotonic()
        self._cpu0 = {role: self._cpu(role) for role in self._procs}
        self.peak = {role: 0.0 for role in self._procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._thread.start()

    def _tree(self, role: str) -> list[psutil.Process]:
        """The role's processes and their children; the generator's children are the other roles, so not it."""
        out = []
        for proc in self._procs[role]:
            try:
                out += [proc] if role == "generator" else [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
        return out

    def _cpu(self, role: str) -> float:
        total = 0.0
        for proc in self._trees[role]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return total

    def _refresh_trees(self) -> None:
        """Who is in each role now. Finding children scans all of /proc (psutil's `ppid_map`): done every 100 ms
        for each role it took a quarter of the generator's CPU in S1 (py-spy), on the box being measured and
        under the client's GIL. A role's processes start with it, so every `TREE_REFRESH_S` is enough."""
        self._trees = {role: self._tree(role) for role in self._procs}
        self._trees_at = time.monotonic()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            if time.monotonic() - self._trees_at >= TREE_REFRESH_S:
                self._refresh_trees()
            for role in self._procs:
                rss = 0
                for proc in self._trees[role]:
                    try:
                        rss += proc.memory_info().rss
                    except psutil.Error:
                        continue
                self.peak[role] = max(self.peak[role], rss / 2**20)

    def finish(self) -> dict[str, ProcessFigures]:
        self._stop.set()
        self._thread.join(1)
        self._refresh_trees()
        return {role: ProcessFigures(round(self._cpu(role) - self._cpu0[role], 2), round(self.peak[role], 1))
                for role in self._procs}


class Progress:
    """One line on stderr, rewritten at most twice a second: long runs show they are alive."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self._last = label, total, 0, 0.0
        self._tty = sys.stderr.isatty()

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= (0.5 if self._tty else 10.0) or self.done == self.total:
            self._last = now
            end = "\r" if self._tty and self.done < self.total else "\n"
            print(f"  {self.label}: {self.done:,}/{self.total:,}", end=end, file=sys.stderr, flush=True)


async def run_scenario(engine: Engine, scenario: Scenario, run_id: str) -> Result:
    """Warm up, then measure `scenario.count` workflows; the engine must already be started."""
    failures = 0

    async def one(index: int, measured: list[Outcome] | None) -> None:
        nonlocal failures
        try:
            outcome = await engine.run_one(scenario, f"{run_id}-{scenario.name}-{index}")
        except Exception as exc:  # noqa: BLE001 - a failed workflow is a figure, not a crash of the benchmark
            failures += 1
            if failures <= 3:
                print(f"  {engine.name} {scenario.name}: workflow {index} failed: {exc!r}", file=sys.stderr)
            return
        if measured is not None:
            measured.append(outcome)

    warm = Progress(f"{engine.name} {scenario.name} warm-up", scenario.warmup)
    await _closed_loop(range(scenario.warmup), min(scenario.concurrency, max(1, scenario.warmup)),
                       lambda i: one(-1 - i, None), warm)
    failures = 0
    outcomes: list[Outcome] = []
    meter = ProcessMeter(engine.processes())
    progress = Progress(f"{engine.name} {scenario.name}", scenario.count)
    started = time.perf_counter()
    if scenario.rate is None:
        await _closed_loop(range(scenario.count), scenario.concurrency, lambda i: one(i, outcomes), progress)
    else:
        await _open_loop(range(scenario.count), scenario.rate, lambda i: one(i, outcomes), progress)
    elapsed = time.perf_counter() - started
    figures = meter.finish()
    await _read_later(outcomes)
    done = len(outcomes)
    metrics = [o.metric_ms for o in outcomes if o.metric_ms is not None]
    return Result(
        engine=engine.name, scenario=scenario.name, shape=scenario.shape,
        mode="closed" if scenario.rate is None else f"open@{scenario.rate:g}/s", count=scenario.count,
        concurrency=scenario.concurrency, elapsed_s=round(elapsed, 3),
        workflows_per_s=round(done / elapsed, 1) if elapsed > 0 else 0.0,
        activities_per_s=round(done * scenario.activities_per_workflow / elapsed, 1) if elapsed > 0 else 0.0,
        latency_ms={k: round(v * 1000, 1) for k, v in percentiles([o.latency_s for o in outcomes]).items()},
        metric_ms={k: round(v, 1) for k, v in percentiles(metrics).items()} if metrics else None,
        failures=failures, processes=figures)


async def _read_later(outcomes: list[Outcome], concurrency: int = 50) -> None:
    """The metrics the outcomes left for after the window, a few reads at a time. A read that fails leaves its
    metric out (said on stderr), as a workflow that failed is left out of the latencies."""
    pending = iter([o for o in outcomes if o.later is not None])
    failed = 0

    async def lane() -> None:
        nonlocal failed
        for outcome in pending:
            assert outcome.later is not None
            try:
                outcome.metric_ms = await outcome.later()
            except Exception as exc:  # noqa: BLE001 - a figure missing, not a crash of the benchmark
                failed += 1
                if failed <= 3:
                    print(f"  a metric could not be read after the window: {exc!r}", file=sys.stderr)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


async def _closed_loop(indices: range, concurrency: int, run: Callable[[int], Awaitable[None]],
                       progress: Progress) -> None:
    it = iter(indices)

    async def lane() -> None:
        for index in it:  # shared iterator: each lane takes the next index as it frees up
            await run(index)
            progress.step()

    await asyncio.gather(*(lane() for _ in range(max(1, concurrency))))


async def _open_loop(indices: range, rate: float, run: Callable[[int], Awaitable[None]], progress: Progress) -> None:
    tasks = []
    t0 = time.perf_counter()
    for n, index in enumerate(indices):
        delay = t0 + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

        async def go(i: int = index) -> None:
            await run(i)
            progress.step()

        tasks.append(asyncio.create_task(go()))
    await asyncio.gather(*tasks)


def markdown(results: list[Result]) -> str:
    """One row per engine and scenario."""
    head = ("| scenario | engine | mode | wf/s | act/s | p50 ms | p95 ms | p99 ms | metric p50/p99 ms | failures "
            "| CPU s (server+worker / broker) | CPU ms per workflow (server+worker / broker) "
            "| peak RSS MiB (server+worker) |")
    lines = [head, "|" + " --- |" * 13]
    for r in results:
        engine_cpu = sum(f.cpu_s for role, f in r.processes.items() if role in ("server", "worker"))
        broker_cpu = sum(f.cpu_s for role, f in r.processes.items() if role == "broker")
        done = max(1, r.count - r.failures)  # Temporal's dev server has no broker: its column is its server's
        rss = sum(f.peak_rss_mib for role, f in r.processes.items() if role in ("server", "worker"))
        metric = f"{r.metric_ms['p50']:g} / {r.metric_ms['p99']:g}" if r.metric_ms else ""
        lines.append(f"| {r.scenario} {r.shape} | {r.engine} | {r.mode} | {r.workflows_per_s:g} | "
                     f"{r.activities_per_s:g} | {r.latency_ms['p50']:g} | {r.latency_ms['p95']:g} | "
                     f"{r.latency_ms['p99']:g} | {metric} | {r.failures} | {engine_cpu:.1f} / {broker_cpu:.1f} | "
                     f"{engine_cpu * 1000 / done:.1f} / {broker_cpu * 1000 / done:.1f} | {rss:.0f} |")
    return "\n".join(lines)


def write_json(path: str, results: list[Result], meta: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": [r.to_json() for r in results]}, f, indent=2, default=str)
