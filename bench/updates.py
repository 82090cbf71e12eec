"""Update latency (issue 18): how long `execute_update` takes on a real broker, server and worker, and what a
rejected update costs, beside a signal to the same workflow.

Runs a broker, one `ostinato server` and one worker (bench/engine_ostinato.py), starts `counter` workflows, then:
1. lone: updates to one idle workflow one at a time (each an admitted update, a speculative workflow task carrying
   it, the worker's accept + complete in one answer, and the caller's long-poll woken by the commit);
2. rejected: updates the validator refuses, one at a time (the speculative task leaves no event);
3. signals: the same workflow signalled one at a time (one command, no worker round trip), for scale;
4. concurrent: many workflows updated at once, for updates per second.
Figures are printed, never asserted.

    .venv/bin/python bench/updates.py [--quick] [--kafka HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root must be importable as `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engine_ostinato import OstinatoEngine
from bench.harness import Scenario
from bench.ostinato_workflows import TASK_QUEUE
from ostinato.client import Client, WorkflowHandle, WorkflowUpdateFailedError


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"p50 {statistics.median(ordered) * 1000:6.1f} ms  p90 {p90 * 1000:6.1f} ms  (n={len(ordered)})"


async def _timed(calls: int, call: object) -> list[float]:
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append(time.perf_counter() - began)
    return samples


async def _start(client: Client, tag: str) -> WorkflowHandle:
    return await client.start_workflow("counter", id=f"upd-{tag}-{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE)


async def run(args: argparse.Namespace) -> None:
    lone, workflows, per_workflow = (20, 10, 5) if args.quick else (200, 50, 20)
    engine = OstinatoEngine(kafka=args.kafka)
    try:
        print("== starting broker, server, worker", file=sys.stderr, flush=True)
        await engine.start(Scenario("U", "hello", lone, 1))
        client = engine.client
        assert client is not None
        handle = await _start(client, "lone")
        await _timed(5, lambda: handle.execute_update("add", 1))  # warm up every process
        print(f"update, accepted and completed   {_ms(await _timed(lone, lambda: handle.execute_update('add', 1)))}")

        async def rejected() -> None:
            try:
                await asyncio.wait_for(handle.execute_update("add", -1), 30)
            except WorkflowUpdateFailedError:
                return
            raise AssertionError("the validator should have refused a negative amount")

        print(f"update, rejected by its validator {_ms(await _timed(lone, rejected))}")
        print(f"signal, for scale                 {_ms(await _timed(lone, lambda: handle.signal('ping')))}")
        handles = await asyncio.gather(*(_start(client, "many") for _ in range(workflows)))

        async def updates(h: WorkflowHandle) -> None:
            for _ in range(per_workflow):
                await h.execute_update("add", 1)

        began = time.perf_counter()
        await asyncio.gather(*(updates(h) for h in handles))
        spent = time.perf_counter() - began
        print(f"concurrent: {workflows} workflows x {per_workflow} updates each in {spent:.1f} s: "
              f"{workflows * per_workflow / spent:.0f} updates/s")
        await asyncio.gather(*(h.signal("go") for h in [handle, *handles]))
    finally:
        await engine.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a minute)")
    parser.add_argument("--kafka", default=None, help="use this running broker")
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
