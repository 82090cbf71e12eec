"""Workflows and activities for the rate limit tests: a fan-out whose activities report when a worker started them."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from ostinato import activity, workflow


@activity.defn
async def call_api(i: int) -> float:
    """A call to a downstream API: the wall-clock time a worker started it."""
    started = time.time()
    await asyncio.sleep(0.05)
    return started


@workflow.defn
class FanOut:
    @workflow.run
    async def run(self, n: int) -> list[float]:
        calls = [workflow.execute_activity(call_api, i, start_to_close_timeout=timedelta(seconds=60)) for i in range(n)]
        return list(await asyncio.gather(*calls))
