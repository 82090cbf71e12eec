"""The `env` the SDK scenarios run against, one param per way of running the engine.

Tests are `async def` and take `env` (a `ScenarioEnv`): a client, workers on the test's own task queue, and time
that passes (`sleep`, `now`). Every scenario runs twice: `time-skipping` (WorkflowEnvironment: the in-memory
engine with virtual time) and `kafka` (an `ostinato server` on the session's real broker, the client over HTTP,
workers on Kafka, wall-clock time). A backend is an entry in BACKENDS: a function taking the pytest request (for
session fixtures such as `kafka`) and returning an async context manager that yields its `ScenarioEnv`.

The fixture runs each test on its own event loop (`asyncio.Runner`): the backend is opened, the test runs and
the backend is closed on that one loop, under a time limit so a stuck scenario fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import pytest

from ostinato.testing import WorkflowEnvironment
from tests.e2e.sdk_scenarios.envs import ScenarioEnv, TimeSkippingEnv
from tests.e2e.sdk_scenarios.kafka_backend import (
    kafka_backend,
    scenario_server,  # noqa: F401 - a fixture, found here
)

T = TypeVar("T")
Record = dict[str, Any]
SCENARIO_TIMEOUT_S = 60.0
POLL_S = 0.005


@asynccontextmanager
async def _time_skipping() -> AsyncIterator[ScenarioEnv]:
    async with await WorkflowEnvironment.start_time_skipping() as environment:
        yield TimeSkippingEnv(environment)


# name -> (request -> async context manager yielding the env).
BACKENDS: dict[str, Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[ScenarioEnv]]] = {
    "time-skipping": lambda request: _time_skipping(),
    "kafka": kafka_backend,
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
