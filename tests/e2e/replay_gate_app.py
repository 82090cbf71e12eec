"""Workflow code for the replay gate tests (issue 23): what is deployed today (`WORKFLOWS`), and the candidate new
versions the gate must judge, each a list of workflow classes as `ostinato replay module:attr` takes them."""

from __future__ import annotations

from datetime import timedelta

from ostinato import activity, workflow
from ostinato.worker import Replayer

TIMEOUT = timedelta(seconds=10)


@activity.defn
async def greet(name: str) -> str:
    return f"hello {name}"


@activity.defn
async def prepare(n: int) -> int:
    return n


@workflow.defn(name="Greeter")
class Greeter:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=TIMEOUT)


@workflow.defn(name="Waiter")
class Waiter:
    """Prepares, then waits for `finish`: the runs never signalled stay open, the ones new code must continue."""

    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self, n: int) -> int:
        await workflow.execute_activity(prepare, n, start_to_close_timeout=TIMEOUT)
        await workflow.wait_condition(lambda: self.done)
        return n


@workflow.defn(name="Greeter")
class GreeterWithTimer:
    """Incompatible: the activity replaced by a timer, so every recorded Greeter run diverges at its first command."""

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.sleep(timedelta(seconds=1))
        return f"hello {name}"


@workflow.defn(name="Greeter")
class GreeterPatched:
    """Compatible: the new behaviour (a second greeting) is guarded by a patch, so recorded runs take the old path."""

    @workflow.run
    async def run(self, name: str) -> str:
        out = await workflow.execute_activity(greet, name, start_to_close_timeout=TIMEOUT)
        if workflow.patched("greet-twice"):
            out += " / " + await workflow.execute_activity(greet, name + " again", start_to_close_timeout=TIMEOUT)
        return out


WORKFLOWS = [Greeter, Waiter]
INCOMPATIBLE = [GreeterWithTimer, Waiter]
COMPATIBLE = [GreeterPatched, Waiter]
WAITER_REMOVED = [Greeter]  # Waiter still has open runs: the gate must fail
GREETER_REMOVED = [Waiter]  # Greeter's runs are all closed: skipped, the gate passes
REPLAYER = Replayer(workflows=COMPATIBLE)  # a configured Replayer (its converter, interceptors) serves as well
