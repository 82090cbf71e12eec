"""How long the web UI takes to render a run of 10,000 events (issue 20), against a running server.

Run: `ostinato dev --detach`, then `.venv/bin/python bench/ui_render.py [--server URL] [--events N]`. It starts a
workflow on a queue no worker serves and signals it until its history holds N events, then times (median of 5)
the run part, the first history page and the whole history download, as a browser would fetch them. Figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import aiohttp

CONCURRENCY = 64
REPEATS = 5


async def _fill(session: aiohttp.ClientSession, base: str, events: int) -> None:
    """Signals until the run's history holds `events` events (each signal writes one)."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(events):
        queue.put_nowait(i)

    async def sender() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            async with session.post(f"{base}/signal", json={"signal_name": "tick", "input": [i]}) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"signal {i}: HTTP {resp.status} {await resp.text()}")

    await asyncio.gather(*(sender() for _ in range(CONCURRENCY)))


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
        async with session.post(api, json={"workflow_id": workflow_id, "workflow_type": "Bench",
                                           "task_queue": "ui-bench-nobody"}) as resp:
            assert resp.status == 201, await resp.text()
        began = time.perf_counter()
        await _fill(session, f"{api}/{workflow_id}", events)
        print(f"filled {workflow_id} with {events:,} signals in {time.perf_counter() - began:.1f}s")
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
