"""The `env` the SDK scenarios run against, one param per way of running the engine.

Tests are `async def` and take `env` (a `ScenarioEnv`): a client, workers on the test's own task queue, and time
that passes (`sleep`, `now`). Today the only backend is `time-skipping` (WorkflowEnvironment: the in-memory
engine with virtual time). A backend against a real broker (a server process and Kafka workers) is one more
entry in BACKENDS: a function taking the pytest request (for session fixtures such as `kafka`) and returning an
async context manager that yields its `ScenarioEnv`. The tests do not change.

The fixture runs each test on its own event loop (`asyncio.Runner`): the backend is opened, the test runs and
the backend is closed on that one loop, under a time limit so a stuck scenario fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest

from ostinato.client import Client
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker

T = TypeVar("T")
Record = dict[str, Any]
SCENARIO_TIMEOUT_S = 60.0
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

    def now(self) -> datetime:
        return self.environment.now()

    async def sleep(self, duration: timedelta) -> None:
        await self.environment.sleep(duration)


@asynccontextmanager
async def _time_skipping() -> AsyncIterator[ScenarioEnv]:
    async with await WorkflowEnvironment.start_time_skipping() as environment:
        yield TimeSkippingEnv(environment)


# name -> (request -> async context manager yielding the env). A real-broker backend is added here.
BACKENDS: dict[str, Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[ScenarioEnv]]] = {
    "time-skipping": lambda request: _time_skipping(),
}


@pytest.fixture(params=list(BACKENDS))
def env(request: pytest.FixtureRequest) -> Iterator[ScenarioEnv]:
    opener = BACKENDS[request.param](request)
    with asyncio.Runner() as runner:
        scenario_env = runner.run(opener.__aenter__())
        scenario_env.runner = runner
        try:
            yield scenario_env
        finally:
            runner.run(opener.__aexit__(None, None, None))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run `async def` tests on the loop of their `env`, under SCENARIO_TIMEOUT_S."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    scenario_env = pyfuncitem.funcargs.get("env")
    if not isinstance(scenario_env, ScenarioEnv):
        raise TypeError(f"{pyfuncitem.name}: an async scenario needs the `env` fixture")
    names = pyfuncitem._fixtureinfo.argnames
    coroutine = pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names})
    scenario_env.runner.run(asyncio.wait_for(coroutine, SCENARIO_TIMEOUT_S))
    return True
