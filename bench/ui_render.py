"""How long the web UI takes to render a run of 10,000 events (issue 20), against a running server.

Run: `ostinato dev --detach`, then `.venv/bin/python bench/ui_render.py [--server URL] [--events N]`. An SDK worker
in this process runs a workflow that starts and awaits N/2 short timers in batches (two events each: a signal per
event would meet the 2,000-signal limit), then the script times (median of 5) the run part, the first history
page and the whole history download, as a browser fetches them. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import aiohttp

from ostinato import workflow
from ostinato.client import Client
from ostinato.worker import Worker

REPEATS = 5
BATCH = 500  # timers started together: one workflow task per batch
QUEUE = "ui-bench"


@workflow.defn
class UiBench:
    @workflow.run
    async def run(self, timers: int) -> int:
        for first in range(0, timers, BATCH):
            await asyncio.gather(*(workflow.sleep(0.01) for _ in range(min(BATCH, timers - first))))
        return timers


async def _fill(server: str, workflow_id: str, events: int) -> None:
    """Run UiBench to its end: about `events` events in its history."""
    client = await Client.connect(server)
    async with Worker(client, task_queue=QUEUE, workflows=[UiBench]):
        await client.execute_workflow(UiBench.run, events // 2, id=workflow_id, task_queue=QUEUE)


async def _timed(session: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(REPEATS):
        began = time.perf_counter()
        async with session.get(url) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {url}: HTTP {resp.status} {body[:300]!r}")
        times.append(time.perf_counter() - began)
        size = len(body)
    return statistics.median(times), size


async def main(server: str, events: int) -> None:
    workflow_id = f"ui-bench-{uuid.uuid4().hex[:6]}"
    api = f"{server}/api/v1/namespaces/default/workflows"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        began = time.perf_counter()
        await _fill(server, workflow_id, events)
        async with session.get(f"{api}/{workflow_id}") as resp:
            length = (await resp.json())["next_event_id"] - 1
        print(f"ran {workflow_id}: {length:,} events in {time.perf_counter() - began:.1f}s")
        part = f"{server}/ui-parts/namespaces/default/workflows/{workflow_id}"
        for name, url in (("run part", part), ("history page (200 rows, timeline)", f"{part}/history"),
                          ("history download (every event)", f"{part}/history.json"),
                          ("run page (layout only)", f"{server}/ui/namespaces/default/workflows/{workflow_id}")):
            seconds, size = await _timed(session, url)
            print(f"{name:<36} {seconds * 1000:8.1f} ms  {size:>10,} bytes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="http://127.0.0.1:7243")
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(main(args.server.rstrip("/"), args.events))
