"""Temporal workflows and activities with the same shapes as the Ostinato ones, so a table row compares engines.

Activities are async and trivial: the benchmark measures the engine's round trips, not the work.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

ACTIVITY_TIMEOUT = timedelta(seconds=30)


@activity.defn
async def say_hello(name: str) -> str:
    return f"hello {name}"


@activity.defn
async def step(index: int) -> int:
    return index + 1


@workflow.defn(name="hello")
class Hello:
    """S1: one activity."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(say_hello, name, start_to_close_timeout=ACTIVITY_TIMEOUT)


@workflow.defn(name="seq10")
class Seq10:
    """S2: ten activities, one after the other."""

    @workflow.run
    async def run(self) -> int:
        value = 0
        for _ in range(10):
            value = await workflow.execute_activity(step, value, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return value


@workflow.defn(name="fanout100")
class Fanout100:
    """S3: a hundred activities started at once, then joined."""

    @workflow.run
    async def run(self) -> int:
        results = await asyncio.gather(*(workflow.execute_activity(step, i, start_to_close_timeout=ACTIVITY_TIMEOUT)
                                         for i in range(100)))
        return sum(results)


@workflow.defn(name="sleep1s")
class Sleep1s:
    """S4: a 1 s durable timer; returns how late it fired in ms, by workflow time (the task's start time)."""

    @workflow.run
    async def run(self) -> float:
        before = workflow.now()
        await asyncio.sleep(1)
        return (workflow.now() - before).total_seconds() * 1000 - 1000


@workflow.defn(name="signal")
class Signal:
    """S5: waits until the signal "go" arrives."""

    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.released)

    @workflow.signal(name="go")
    def go(self) -> None:
        self.released = True


@workflow.defn(name="idle")
class Idle:
    """S7: waits for a signal that never comes (an open workflow that costs only storage)."""

    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.released)

    @workflow.signal(name="go")
    def go(self) -> None:
        self.released = True


WORKFLOWS = [Hello, Seq10, Fanout100, Sleep1s, Signal, Idle]
ACTIVITIES = [say_hello, step]
