"""S4 (3,000 one-second timers, all started at once) several times on one warmed engine: the spread of the
closed-loop lateness p99, which one `bench/compare` run draws only once.

On a machine whose cores the broker, server, processors, worker and load generator share, S4's closed-loop p99
is decided by how much CPU the processors get while the burst saturates the box (docs/benchmarks.md, "Where S4's
tail comes from"), and one run's figure moves by a factor of three or four with nothing changed. Judge a change to
the timer path by the median and spread of a series, run alternately against the code before it. Figures are
printed, never asserted. Run: `.venv/bin/python -m bench.s4_series [--runs 5] [--engine ostinato|temporal]
[--count 3000] [--warm 20] [--processors N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from bench.compare import FULL, make_engines
from bench.harness import Result, run_scenario
from bench.warmup import warm


async def series(engine_name: str, runs: int, count: int, warm_s: float, processors: int | None) -> list[Result]:
    s4 = next(s for s in FULL if s.name == "S4")
    s4 = replace(s4, count=count, concurrency=count)
    (engine,) = make_engines([engine_name], Path(tempfile.mkdtemp(prefix="ostinato-s4-series-")),
                             processors=processors)
    results: list[Result] = []
    try:
        if warm_s > 0:
            print(f"  {await warm(engine, min_s=warm_s, run_id='s4series')}", file=sys.stderr, flush=True)
        for i in range(runs):
            await engine.start(s4)
            result = await run_scenario(engine, s4, uuid.uuid4().hex[:6])
            figures = getattr(engine, "processor_figures", None)  # Ostinato only: where the processors' time went
            note = await figures() if figures is not None else ""
            late = result.metric_ms or {}
            print(f"run {i + 1}/{runs}: {result.workflows_per_s:.1f} wf/s, lateness p50/p95/p99/max "
                  f"{late.get('p50')}/{late.get('p95')}/{late.get('p99')}/{late.get('max')} ms"
                  + (f"\n  {note}" if note else ""), flush=True)
            results.append(result)
    finally:
        await engine.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.s4_series", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--engine", default="ostinato", choices=("ostinato", "temporal", "temporal-sqlite"))
    parser.add_argument("--count", type=int, default=3000, help="workflows a run, all started at once")
    parser.add_argument("--warm", type=float, default=20.0, help="seconds of hello workflows first (0: none)")
    parser.add_argument("--processors", type=int, default=None, help="ostinato server --processors")
    args = parser.parse_args(argv)
    results = asyncio.run(series(args.engine, args.runs, args.count, args.warm, args.processors))
    p99s = [r.metric_ms["p99"] for r in results if r.metric_ms and r.metric_ms.get("p99") is not None]
    if p99s:
        print(f"{args.engine} S4 closed, {len(p99s)} runs of {args.count}: lateness p99 median "
              f"{statistics.median(p99s):.0f} ms, min {min(p99s):.0f}, max {max(p99s):.0f} "
              f"({', '.join(f'{p:.0f}' for p in p99s)}); runs with p99 <= 50 ms: "
              f"{sum(p <= 50 for p in p99s)}/{len(p99s)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
