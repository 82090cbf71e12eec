"""Drive the chaos workload through the SDK client as a user would: start at a steady rate, signal, wait for results.

Starts follow a fixed schedule (one every 1/rate seconds, each in its own task), so a stalled server does not slow
the offered load, and every workflow then waits for its result with `handle.result()`. Whatever the client sees is
recorded per workflow: start retries, signal retries, and each time `result()` raised, with whether the server the
request went to was itself down meanwhile (then no single-server client could have done better).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ostinato.client import Client
from ostinato.exceptions import WorkflowAlreadyStartedError, WorkflowFailureError
from ostinato.schemas.wire import REJECTED, command_type
from tests.tools.chaos_programs import SIGNAL, Spec, signal_values

__all__ = ["Entry", "FrontDoor", "Load", "Outcome", "Raise"]

RETRY_PAUSE_S = 0.5
MAX_RETRY_PAUSE_S = 2.0
SIGNAL_DELAY_S = 0.3


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Entry:
    """A server the workload may send requests to, and when the harness took it down."""

    name: str
    client: Client
    down: bool = False
    downs: list[int] = field(default_factory=list)  # when each fault began (epoch ms)


class FrontDoor:
    """The servers clients use, round robin over those up; it plays the load balancer in front of the servers.

    `fallback` entries are used only while every entry is down: when the one server a scenario sends clients to
    dies on its own, the workload goes on through the other (and the report names the crash).
    """

    def __init__(self, entries: Sequence[Entry], fallback: Sequence[Entry] = ()) -> None:
        self.entries = list(entries)
        self.fallback = list(fallback)
        self._turn = itertools.cycle(range(len(self.entries)))

    def mark_down(self, name: str) -> None:
        for entry in self.entries + self.fallback:
            if entry.name == name and not entry.down:
                entry.down = True
                entry.downs.append(now_ms())

    def mark_up(self, name: str) -> None:
        for entry in self.entries + self.fallback:
            if entry.name == name:
                entry.down = False

    async def pick(self, prefer: Entry | None = None) -> Entry:
        """`prefer` while it is up (a client reads its own writes at once), else the next server up."""
        if prefer is not None and not prefer.down:
            return prefer
        while True:
            for _ in self.entries:
                entry = self.entries[next(self._turn)]
                if not entry.down:
                    return entry
            for entry in self.fallback:
                if not entry.down:
                    return entry
            await asyncio.sleep(0.1)

    @staticmethod
    def went_down(entry: Entry, since_ms: int) -> bool:
        return entry.down or any(at >= since_ms for at in entry.downs)

    async def close(self) -> None:
        for entry in self.entries + self.fallback:
            await entry.client.service.close()


@dataclass(frozen=True)
class Raise:
    """`handle.result()` raised: when, through which server, and whether that server was down meanwhile."""

    at_ms: int
    entry: str
    entry_down: bool
    error: str


@dataclass
class Outcome:
    spec: Spec
    scheduled_ms: int = 0
    run_id: str = ""
    started_ms: int = 0  # when the start was acknowledged
    start_errors: list[str] = field(default_factory=list)
    signal_errors: list[str] = field(default_factory=list)
    result: Any = None
    failure: str = ""  # the workflow closed, but not completed
    closed_ms: int = 0  # when the client got the result
    raises: list[Raise] = field(default_factory=list)
    entry: Entry | None = None  # the server that acknowledged the start: signals and result() go there first

    @property
    def started(self) -> bool:
        return bool(self.run_id)

    @property
    def done(self) -> bool:
        return bool(self.closed_ms)


class Load:
    """Runs `specs` through `door` at `rate` workflows a second; gives up on any workflow at `deadline` (monotonic)."""

    def __init__(self, door: FrontDoor, task_queue: str, specs: Sequence[Spec], rate: float) -> None:
        self.door = door
        self.task_queue = task_queue
        self.specs = list(specs)
        self.rate = rate
        self.outcomes = [Outcome(spec) for spec in self.specs]
        self.deadline = float("inf")
        self.first_ms = 0
        self.last_scheduled_ms = 0

    def counts(self) -> dict[str, int]:
        """Progress so far: scheduled, started, closed, and raises seen."""
        return {"scheduled": sum(1 for o in self.outcomes if o.scheduled_ms),
                "started": sum(1 for o in self.outcomes if o.started),
                "closed": sum(1 for o in self.outcomes if o.done),
                "raises": sum(len(o.raises) for o in self.outcomes)}

    async def run(self, deadline: float) -> list[Outcome]:
        """Schedule every workflow, then wait for all of them (or the deadline)."""
        self.deadline = deadline
        self.first_ms = now_ms()
        began = time.monotonic()
        tasks = []
        for i, outcome in enumerate(self.outcomes):
            delay = began + i / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            outcome.scheduled_ms = self.last_scheduled_ms = now_ms()
            tasks.append(asyncio.ensure_future(self._one(outcome)))
        remaining = max(0.0, deadline - time.monotonic())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=remaining)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        return self.outcomes

    async def _one(self, outcome: Outcome) -> None:
        if not await self._start(outcome):
            return
        if outcome.spec.kind == "signal":
            for value in signal_values(outcome.spec):
                await asyncio.sleep(SIGNAL_DELAY_S)
                if not await self._signal(outcome, value):
                    return
        await self._result(outcome)

    async def _start(self, outcome: Outcome) -> bool:
        spec = outcome.spec
        request_id = uuid.uuid4().hex  # the same on every retry: the engine answers a repeated start with its run
        pause = RETRY_PAUSE_S
        while time.monotonic() < self.deadline:
            entry = await self.door.pick()
            try:
                handle = await entry.client.start_workflow(spec.workflow_type, spec.input, id=spec.workflow_id,
                                                           task_queue=self.task_queue, request_id=request_id)
            except WorkflowAlreadyStartedError as exc:  # only if the request id was lost: it did start
                outcome.start_errors.append(f"{entry.name}: {exc}")
                outcome.run_id = exc.run_id or "?"
            except Exception as exc:  # noqa: BLE001 - whatever the client raised is a figure, then a retry
                outcome.start_errors.append(f"{entry.name}: {type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(pause)
                pause = min(MAX_RETRY_PAUSE_S, pause * 2)
                continue
            else:
                outcome.run_id = handle.run_id
            outcome.started_ms = now_ms()
            outcome.entry = entry
            return True
        return False

    async def _signal(self, outcome: Outcome, value: str) -> bool:
        request_id = uuid.uuid4().hex  # retried with the same id: the engine records the signal once
        while time.monotonic() < self.deadline:
            entry = await self.door.pick(outcome.entry)
            client = entry.client
            body = {"signal_name": SIGNAL, "input": client.data_converter.encode([value]), "header": {},
                    "external": None}
            try:
                kind, record = await client.service.send(client.namespace, outcome.spec.workflow_id, "",
                                                         (command_type("SignalWorkflowExecution"), body), request_id,
                                                         client.identity)
            except Exception as exc:  # noqa: BLE001
                outcome.signal_errors.append(f"{entry.name}: {type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if kind == REJECTED:
                outcome.signal_errors.append(f"{entry.name}: rejected {record['code']}: {record['message']}"[:300])
                return False
            return True
        return False

    async def _result(self, outcome: Outcome) -> None:
        spec = outcome.spec
        while time.monotonic() < self.deadline:
            entry = await self.door.pick(outcome.entry)
            asked = now_ms()
            handle = entry.client.get_workflow_handle(spec.workflow_id)
            try:
                outcome.result = await handle.result()
            except WorkflowFailureError as exc:
                outcome.failure = f"{exc.status}: {exc.cause!r}"[:300]
            except Exception as exc:  # noqa: BLE001 - the figure "result() raised", then ask again
                outcome.raises.append(Raise(now_ms(), entry.name, FrontDoor.went_down(entry, asked),
                                            f"{type(exc).__name__}: {exc}"[:300]))
                await asyncio.sleep(min(MAX_RETRY_PAUSE_S, RETRY_PAUSE_S * len(outcome.raises)))
                continue
            outcome.closed_ms = now_ms()
            return
