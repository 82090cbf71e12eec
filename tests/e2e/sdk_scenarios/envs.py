"""The environments scenarios run in: the same calls on the in-memory engine and on a real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ostinato.client import Client
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker

T = TypeVar("T")
POLL_S = 0.005


class ScenarioEnv(ABC):
    """What a scenario may use: the same calls whichever engine runs underneath.

    Attributes:
        name: the backend's name (the pytest param id).
        client: a connected client.
        task_queue: a queue no other test uses; `worker()` serves it unless told otherwise.
        skips_time: virtual time that jumps ahead whenever everything waits (a 14-day timer takes no wall time).
        clock_slack: how much later than asked an engine timestamp may be (zero on a virtual clock, where a
            1-second backoff is exactly 1 s apart in history).
        runner: the event loop the test body runs on (set by the fixture).
    """

    name: str
    runner: asyncio.Runner
    client: Client
    task_queue: str
    skips_time: bool
    clock_slack: timedelta
    long_wait: timedelta

    def worker(self, *, workflows: Sequence[type] = (), activities: Sequence[Callable[..., Any]] = (),
               task_queue: str | None = None, identity: str = "", max_cached_workflows: int = 1000) -> Worker:
        """A worker of this engine, not yet running: use it as `async with env.worker(...) as worker:`."""
        return Worker(self.client, task_queue=task_queue or self.task_queue, workflows=workflows,
                      activities=activities, identity=identity, max_cached_workflows=max_cached_workflows)

    def workflow_id(self, stem: str) -> str:
        """A workflow id unique to this test (a real engine outlives one test)."""
        return f"{stem}-{uuid.uuid4().hex[:8]}"

    @abstractmethod
    def now(self) -> datetime:
        """The engine's time (UTC)."""

    @abstractmethod
    async def sleep(self, duration: timedelta) -> None:
        """Let `duration` of engine time pass, firing the timers due meanwhile."""

    async def wait_until(self, check: Callable[[], Awaitable[T | None]], *, what: str, timeout_s: float = 10.0) -> T:
        """Poll `check` (in wall time, without moving engine time) until it returns something other than None."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = await check()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
            await asyncio.sleep(POLL_S)


class TimeSkippingEnv(ScenarioEnv):
    """`WorkflowEnvironment.start_time_skipping()`: the in-memory engine, in-process workers, virtual time."""

    def __init__(self, environment: WorkflowEnvironment) -> None:
        self.environment = environment
        self.name = "time-skipping"
        self.client = environment.client
        self.task_queue = f"q-{uuid.uuid4().hex[:8]}"
        self.skips_time = True
        self.clock_slack = timedelta(0)
        self.long_wait = timedelta(days=14)

    def now(self) -> datetime:
        return self.environment.now()

    async def sleep(self, duration: timedelta) -> None:
        await self.environment.sleep(duration)
