"""A small application with local activities, for the end-to-end test: `ostinato worker
tests.e2e.local_activity_app:worker`. Its worker runs one activity at a time (max_concurrent_activities=1)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from ostinato import activity, workflow
from ostinato.common import RetryPolicy

FAST = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_interval=timedelta(milliseconds=100))


class Crowding:
    """How many `crowded` activities run at once in this worker process, and the most there were."""

    now = most = 0


@activity.defn
async def flaky(name: str) -> str:
    attempt = activity.info().attempt
    if attempt < 3:
        raise RuntimeError(f"attempt {attempt} failed")
    return f"hello {name} (attempt {attempt}, local={activity.info().is_local})"


@activity.defn
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@activity.defn
async def crowded(seconds: float) -> int:
    Crowding.now += 1
    Crowding.most = max(Crowding.most, Crowding.now)
    try:
        await asyncio.sleep(seconds)
    finally:
        Crowding.now -= 1
    return Crowding.most


@workflow.defn
class LocalGreeting:
    @workflow.run
    async def run(self, name: str, seconds: float) -> list[str]:
        greeting = await workflow.execute_local_activity(flaky, name, start_to_close_timeout=timedelta(seconds=10),
                                                         retry_policy=FAST)
        # Longer than 80% of the task timeout the test gives: the task is heartbeated, the marker comes later.
        slept = await workflow.execute_local_activity(slow, seconds, start_to_close_timeout=timedelta(seconds=30))
        return [greeting, slept]


@workflow.defn
class Crowd:
    @workflow.run
    async def run(self, count: int) -> int:
        most = await asyncio.gather(*(workflow.execute_activity(crowded, 0.5,
                                                                start_to_close_timeout=timedelta(seconds=30))
                                      for _ in range(count)))
        return max(most)


WORKFLOWS = [LocalGreeting, Crowd]
worker = {"task_queue": "local-q", "workflows": WORKFLOWS, "activities": [flaky, slow, crowded],
          "max_concurrent_activities": 1}
