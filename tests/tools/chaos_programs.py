"""The chaos workload: SDK workflows whose result and activity executions follow from their input alone.

Five kinds, mixed: one activity that fails on purpose a given number of times (retries), a heartbeating activity,
a timer then an activity, a workflow waiting for two signals, and a parent with two children. Every activity
records each execution in the side-effect ledger (`tests.tools.ledger`) before it does anything, and fails while
`attempt <= fail`, so the retry design asks for exactly `fail + 1` executions; `design` lists them and
`expected_result` says what each workflow must return. Activities carry explicit ids, so ledger keys are known
in advance.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ostinato import RetryPolicy, activity, workflow
from ostinato.exceptions import ApplicationError
from tests.tools.ledger import Key, Ledger

__all__ = ["ACTIVITIES", "KINDS", "LEDGER_ENV", "WORKFLOWS", "Spec", "child_ids", "design", "expected_result",
           "plan", "signal_values", "use_ledger"]

LEDGER_ENV = "OSTINATO_CHAOS_LEDGER"  # <directory>:<writer>, set by the worker process
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=2))  # unlimited attempts: nothing fails for good
START_TO_CLOSE = timedelta(seconds=10)
CRUNCH_START_TO_CLOSE = timedelta(seconds=20)
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
CRUNCH_STEPS, CRUNCH_STEP_S = 8, 0.25  # two seconds of heartbeats
SIGNAL = "add"
SIGNALS_WANTED = 2
KINDS = ("greet", "crunch", "timer", "greet", "signal", "parent", "greet", "timer", "crunch", "parent")
_ledger: Ledger | None = None


def use_ledger(ledger: Ledger | None) -> None:
    """Record executions in `ledger` from now on (None: configure from LEDGER_ENV at the next execution)."""
    global _ledger
    _ledger = ledger


def _record_execution() -> activity.ActivityInfo:
    """Append this execution to the ledger (configured from LEDGER_ENV on first use) and return the info."""
    global _ledger
    info = activity.info()
    if _ledger is None:
        setting = os.environ.get(LEDGER_ENV)
        if not setting:
            raise RuntimeError(f"{LEDGER_ENV} is not set: the chaos activities need a ledger")
        directory, _, writer = setting.rpartition(":")
        _ledger = Ledger(Path(directory), writer)
    _ledger.record(info.workflow_id, info.activity_id, info.attempt)
    return info


def _maybe_fail(info: activity.ActivityInfo, fail: int) -> None:
    if info.attempt <= fail:
        raise ApplicationError(f"attempt {info.attempt} of {info.activity_id} fails on purpose", type="Designed")


# -- activities -------------------------------------------------------------------------------------------------

@activity.defn
async def greet(name: str, fail: int) -> str:
    _maybe_fail(_record_execution(), fail)
    return f"Hello, {name}"


@activity.defn
async def crunch(steps: int, fail: int) -> int:
    """Heartbeats through `steps` quarter seconds and returns the sum of the steps."""
    info = _record_execution()
    total = 0
    for i in range(steps):
        activity.heartbeat(i)
        await asyncio.sleep(CRUNCH_STEP_S)
        total += i
    _maybe_fail(info, fail)
    return total


# -- workflows --------------------------------------------------------------------------------------------------

async def _greet(name: str, fail: int) -> str:
    return await workflow.execute_activity(greet, name, fail, activity_id="greet",
                                           start_to_close_timeout=START_TO_CLOSE, retry_policy=RETRY)


@workflow.defn(name="chaos-greet")
class Greet:
    @workflow.run
    async def run(self, spec: dict[str, Any]) -> str:
        return await _greet(spec["name"], spec["fail"])


@workflow.defn(name="chaos-crunch")
class Crunch:
    @workflow.run
    async def run(self, spec: dict[str, Any]) -> int:
        return await workflow.execute_activity(
            crunch, spec["steps"], spec["fail"], activity_id="crunch", start_to_close_timeout=CRUNCH_START_TO_CLOSE,
            heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=RETRY)


@workflow.defn(name="chaos-timer")
class Timer:
    @workflow.run
    async def run(self, spec: dict[str, Any]) -> str:
        await workflow.sleep(timedelta(milliseconds=spec["sleep_ms"]))
        return f"{await _greet(spec['name'], spec['fail'])} after {spec['sleep_ms']} ms"


@workflow.defn(name="chaos-signal")
class Signalled:
    def __init__(self) -> None:
        self.values: list[str] = []

    @workflow.signal(name=SIGNAL)
    def add(self, value: str) -> None:
        self.values.append(value)

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> str:
        await workflow.wait_condition(lambda: len(self.values) >= SIGNALS_WANTED)
        greeting = await _greet("+".join(self.values[:SIGNALS_WANTED]), spec["fail"])
        return f"{greeting} ({len(self.values)} signals)"  # a doubled signal shows as a wrong result


@workflow.defn(name="chaos-child")
class Child:
    @workflow.run
    async def run(self, spec: dict[str, Any]) -> str:
        return await _greet(spec["name"], spec["fail"])


@workflow.defn(name="chaos-parent")
class Parent:
    @workflow.run
    async def run(self, spec: dict[str, Any]) -> str:
        me = workflow.info().workflow_id
        children = [await workflow.start_child_workflow(Child.run, child, id=child_id)
                    for child_id, child in zip(child_ids(me), spec["children"], strict=True)]
        return " & ".join([await child for child in children])


WORKFLOWS = [Greet, Crunch, Timer, Signalled, Child, Parent]
ACTIVITIES = [greet, crunch]


# -- the plan and what it must give -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One top-level workflow of the workload: its id, type and input."""

    workflow_id: str
    kind: str
    input: dict[str, Any]

    @property
    def workflow_type(self) -> str:
        return f"chaos-{self.kind}"


def child_ids(workflow_id: str) -> list[str]:
    return [f"{workflow_id}-c{j}" for j in range(2)]


def signal_values(spec: Spec) -> list[str]:
    """The signals the workload sends a `signal` workflow, in order."""
    return [f"{letter}{spec.input['n']}" for letter in "ab"[:SIGNALS_WANTED]]


def plan(count: int, id_prefix: str, first: int = 0) -> list[Spec]:
    """`count` workflows numbered from `first`; kinds cycle through KINDS and failures through 0, 1, 2."""
    specs = []
    for n in range(first, first + count):
        kind = KINDS[n % len(KINDS)]
        fail = (n // len(KINDS)) % 3
        wf = f"{id_prefix}-{n}-{kind}"
        spec: dict[str, Any] = {"n": n, "name": f"w{n}", "fail": fail}
        if kind == "crunch":
            spec.update(steps=CRUNCH_STEPS, fail=min(fail, 1))
        elif kind == "timer":
            spec["sleep_ms"] = 1000 * (1 + n % 3)
        elif kind == "parent":
            spec["children"] = [{"name": f"w{n}.{j}", "fail": (fail + j) % 3} for j in range(2)]
        specs.append(Spec(wf, kind, spec))
    return specs


def expected_result(spec: Spec) -> Any:
    """What the workflow must return, from its input alone."""
    s = spec.input
    if spec.kind == "greet":
        return f"Hello, {s['name']}"
    if spec.kind == "crunch":
        return sum(range(s["steps"]))
    if spec.kind == "timer":
        return f"Hello, {s['name']} after {s['sleep_ms']} ms"
    if spec.kind == "signal":
        return f"Hello, {'+'.join(signal_values(spec))} ({SIGNALS_WANTED} signals)"
    if spec.kind == "parent":
        return " & ".join(f"Hello, {c['name']}" for c in s["children"])
    raise ValueError(f"unknown kind {spec.kind!r}")


def design(specs: list[Spec]) -> dict[Key, int]:
    """The executions each activity of the workload must have: (workflow id, activity id) -> fail + 1."""
    out: dict[Key, int] = {}
    for spec in specs:
        if spec.kind == "parent":
            for child_id, child in zip(child_ids(spec.workflow_id), spec.input["children"], strict=True):
                out[(child_id, "greet")] = child["fail"] + 1
        else:
            activity_id = "crunch" if spec.kind == "crunch" else "greet"
            out[(spec.workflow_id, activity_id)] = spec.input["fail"] + 1
    return out
