"""Warm an engine before it is measured: hello workflows in a closed loop until its broker's JIT compiler is quiet.

A Kafka broker is a JVM, and a JVM compiles its hot code for the first minute or two of load. In S1 right after
start-up the broker's C2 compiler threads took 48% of its CPU (0.48 of its 1.0 core, `/proc/<pid>/task/*`), falling
to 0.03 core after about 70 s of hello workflows, while the broker's total fell from 1.0 to 0.55 core at a higher
throughput (docs/benchmarks.md, "The broker's JIT"). A benchmark that starts measuring on a fresh broker charges that
compilation to every workflow of its first scenarios; a production broker compiled it weeks ago. So
`bench/compare` runs hello workflows on each engine first, unmeasured, until the broker's compiler threads use
less than `QUIET_CORES` over a look of `LOOK_S` (at least `min_s`, at most `max(min_s, MAX_S)`). An engine with
no JVM of its own to watch (Temporal's Go dev server, or a broker passed with `--kafka`) gets `min_s` of the same
load.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from pathlib import Path

from bench.harness import Engine, Scenario

QUIET_CORES = 0.05  # compiler threads below this share of a core over one look: compiled
LOOK_S = 5.0
MAX_S = 180.0  # a warm-up never runs longer than this (or than its minimum, if that is longer)
CONCURRENCY = 100  # S1's


def compiler_cpu_s(pids: list[int]) -> float:
    """CPU seconds the JIT compiler threads (`C2 CompilerThre`, `C1 CompilerThre`) of these processes have used."""
    ticks = 0
    for pid in pids:
        tasks = Path(f"/proc/{pid}/task")
        try:
            threads = list(tasks.iterdir())
        except OSError:
            continue
        for thread in threads:
            try:
                if "Compiler" not in (thread / "comm").read_text():
                    continue
                fields = (thread / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended between the listing and the read
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def warm(engine: Engine, *, min_s: float, run_id: str) -> str:
    """Run hello workflows on `engine` for at least `min_s`, then until its broker's JIT is quiet (see the module's
    docstring), at most `max(min_s, MAX_S)`; a note of how long it took, how many workflows ran and how busy the
    compiler still was."""
    max_s = max(min_s, MAX_S)
    scenario = Scenario("warm-up", "hello", count=0, concurrency=CONCURRENCY, warmup=0)
    await engine.start(scenario)
    brokers = engine.processes().get("broker", [])
    stop = asyncio.Event()
    counts: Counter[str] = Counter()

    async def lane(k: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                await engine.run_one(scenario, f"{run_id}-warm-{k}-{i}")
                counts["done"] += 1
            except Exception:  # noqa: BLE001 - a warm-up failure is counted and shown, the measured runs judge
                counts["failed"] += 1
                await asyncio.sleep(0.1)
            i += 1

    lanes = [asyncio.create_task(lane(k)) for k in range(CONCURRENCY)]
    began, before = time.monotonic(), compiler_cpu_s(brokers)
    jit = float("nan")
    try:
        while True:
            await asyncio.sleep(LOOK_S)
            elapsed, spent = time.monotonic() - began, compiler_cpu_s(brokers)
            jit, before = (spent - before) / LOOK_S, spent
            shown = f", broker JIT {jit:.2f} core" if brokers else ""
            print(f"  warm-up {engine.name}: {elapsed:.0f} s, {counts['done']:,} workflows{shown}", file=sys.stderr,
                  flush=True)
            if elapsed >= max_s or (elapsed >= min_s and (not brokers or jit < QUIET_CORES)):
                break
    finally:
        stop.set()
        await asyncio.gather(*lanes)
    note = f"warmed {time.monotonic() - began:.0f} s with {counts['done']:,} hello workflows"
    if counts["failed"]:
        note += f" ({counts['failed']:,} failed)"
    return note + (f", broker JIT {jit:.2f} core at the end" if brokers else "")
