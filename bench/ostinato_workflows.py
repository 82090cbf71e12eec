"""The benchmark's workflow shapes for Ostinato (bench/temporal_workflows.py has the same ones for Temporal).

Run them with `ostinato worker bench.ostinato_workflows:worker --server URL`. Activities are async and
trivial on purpose: what is measured is the engine's round trips, not the work.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bench.harness import WORKER_CACHE
from ostinato import activity, workflow
from ostinato.client import Client
from ostinato.worker import Worker

TASK_QUEUE = "bench"
TIMEOUT = timedelta(seconds=30)
MAX_CONCURRENT_ACTIVITIES = 200  # Temporal's Python worker defaults to 100; 200 keeps S3's fan-out from queueing


@activity.defn
async def greet(name: str) -> str:
    return f"hello {name}"


@activity.defn
async def step(n: int) -> int:
    return n + 1


@workflow.defn(name="hello")  # the shape's name, as in bench/temporal_workflows.py
class Hello:
    """S1: one activity."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=TIMEOUT)


@workflow.defn(name="seq10")
class Seq10:
    """S2: ten activities, one after the other."""

    @workflow.run
    async def run(self) -> int:
        n = 0
        for _ in range(10):
            n = await workflow.execute_activity(step, n, start_to_close_timeout=TIMEOUT)
        return n


@workflow.defn(name="fanout100")
class Fanout100:
    """S3: a hundred activities scheduled together (one workflow task), then joined."""

    @workflow.run
    async def run(self) -> int:
        tasks = [workflow.start_activity(step, i, start_to_close_timeout=TIMEOUT) for i in range(100)]
        return sum(await asyncio.gather(*tasks))


@workflow.defn(name="sleep1s")
class Sleep1s:
    """S4: a 1 s durable timer; returns how late it fired in ms, as the workflow's own clock saw it."""

    @workflow.run
    async def run(self) -> float:
        before = workflow.now()
        await workflow.sleep(1.0)
        return (workflow.now() - before).total_seconds() * 1000 - 1000


@workflow.defn(name="signal")
class SignalWait:
    """S5: waits until the signal "go" arrives."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def go(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.released)


@workflow.defn(name="idle")
class Idle:
    """S7: open forever (its signal never comes), to measure what many open workflows cost."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def go(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.released)


@workflow.defn(name="counter")
class Counter:
    """bench/updates.py: adds what each update asks, refusing negative amounts (validator), until "go"."""

    def __init__(self) -> None:
        self.total = 0
        self.released = False

    @workflow.update
    def add(self, amount: int) -> int:
        self.total += amount
        return self.total

    @add.validator
    def check_add(self, amount: int) -> None:
        if amount < 0:
            raise ValueError("amounts are not negative")

    @workflow.signal
    def go(self) -> None:
        self.released = True

    @workflow.signal
    def ping(self) -> None:
        """For scale: a signal that changes nothing."""

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.released)
        return self.total


WORKFLOWS = [Hello, Seq10, Fanout100, Sleep1s, SignalWait, Idle, Counter]
ACTIVITIES = [greet, step]


def worker(client: Client) -> Worker:
    """The worker `ostinato worker bench.ostinato_workflows:worker` runs: every shape on one task queue."""
    return Worker(client, task_queue=TASK_QUEUE, workflows=WORKFLOWS, activities=ACTIVITIES,
                  max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES, max_cached_workflows=WORKER_CACHE)
