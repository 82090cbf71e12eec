"""Figures of a chaos run, from sources outside the engine's own bookkeeping: the history topic (read back by the
independent checker), the client's outcomes and the side-effect ledger.

- `verdict`: lost, stuck and wrong workflows.
- `longest_gap`: the longest stretch without a recorded history event (all, or only `PROGRESS` events) on some
  shards within a time window (event times are the owner's clock when it decided the event).
- `step_waits`: the longest workflow task and activity dispatch on some shards (a stall that the gap, which any
  progress ends, can hide).
- `first_completion_after`: how long after a moment the first workflow completed.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ostinato.schemas.keys import shard_for
from ostinato.sdk.data import DEFAULT
from ostinato.services.admin.checker import CheckReport
from tests.tools.chaos_load import Outcome
from tests.tools.chaos_programs import expected_result

__all__ = ["PROGRESS", "StepWaits", "Verdict", "event_times_by_shard", "first_completion_after", "first_event_after",
           "longest_gap", "scrape_server_log", "step_waits", "verdict"]

Record = dict[str, Any]
RunId = tuple[str, str, str]
CLOSING = frozenset({"WORKFLOW_EXECUTION_COMPLETED", "WORKFLOW_EXECUTION_FAILED", "WORKFLOW_EXECUTION_TIMED_OUT",
                     "WORKFLOW_EXECUTION_CANCELED", "WORKFLOW_EXECUTION_TERMINATED"})
UNHANDLED = "Error handling request"  # aiohttp's log line for a handler that raised: the request got a 500
# Events that record progress made through the pipeline (a worker's answer, or another shard's notice about a child),
# as opposed to what a shard writes on its own or on a client's word (starts, signals, dispatches, timers, timeouts):
# a shard whose inputs are held behind a dead server's open transaction still records the latter.
PROGRESS = frozenset({
    "WORKFLOW_TASK_COMPLETED", "WORKFLOW_TASK_FAILED", "ACTIVITY_TASK_COMPLETED", "ACTIVITY_TASK_FAILED",
    "ACTIVITY_TASK_CANCELED", "CHILD_WORKFLOW_EXECUTION_STARTED", "CHILD_WORKFLOW_EXECUTION_COMPLETED",
    "CHILD_WORKFLOW_EXECUTION_FAILED",
})


@dataclass
class Verdict:
    """Per top-level workflow of the plan, judged from the history topic; examples name a few of each."""

    workflows: int = 0
    closed: int = 0
    start_failed: int = 0  # the client never got the start acknowledged (and history has no run either)
    lost: int = 0  # acknowledged, yet history has no run
    stuck: int = 0  # a run in history that never closed (top-level), or any open run at all (children too)
    wrong: int = 0  # closed otherwise than completed, a result that is not the expected one, or two runs
    client_wrong: int = 0  # the value `result()` returned differs from the expected one
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def note(self, what: str, text: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        if len(self.examples[what]) < 5:
            self.examples[what].append(text)

    def figures(self) -> dict[str, Any]:
        return {"workflows": self.workflows, "closed": self.closed, "lost": self.lost, "stuck": self.stuck,
                "wrong": self.wrong, "start_failed": self.start_failed, "client_wrong": self.client_wrong,
                "examples": dict(self.examples)}


def verdict(outcomes: Sequence[Outcome], report: CheckReport, namespace: str = "default") -> Verdict:
    runs_of: dict[str, list[RunId]] = defaultdict(list)
    for run in report.histories:
        if run[0] == namespace:
            runs_of[run[1]].append(run)
    out = Verdict(workflows=len(outcomes))
    for outcome in outcomes:
        spec = outcome.spec
        runs = runs_of.get(spec.workflow_id, [])
        if not runs:
            if outcome.started:
                out.note("lost", f"{spec.workflow_id}: start acknowledged (run {outcome.run_id}), no history")
            else:
                out.note("start_failed", f"{spec.workflow_id}: {outcome.start_errors[-1:]}")
            continue
        if len(runs) > 1:
            out.note("wrong", f"{spec.workflow_id}: {len(runs)} runs")
            continue
        closing = next((e for e in reversed(report.histories[runs[0]]) if e["event_type"] in CLOSING), None)
        if closing is None:
            out.note("stuck", f"{spec.workflow_id}: open, last event "
                              f"{report.histories[runs[0]][-1]['event_type']}")
            continue
        out.closed += 1
        expected = expected_result(spec)
        if closing["event_type"] != "WORKFLOW_EXECUTION_COMPLETED":
            out.note("wrong", f"{spec.workflow_id}: {closing['event_type']}")
            continue
        got = DEFAULT.decode_one(closing["attributes"][1]["result"])
        if got != expected:
            out.note("wrong", f"{spec.workflow_id}: {got!r} != {expected!r}")
        if outcome.done and not outcome.failure and outcome.result != expected:
            out.note("client_wrong", f"{spec.workflow_id}: result() gave {outcome.result!r}")
    mine = {o.spec.workflow_id for o in outcomes}
    for run, events in report.histories.items():
        if run[1] not in mine and not any(e["event_type"] in CLOSING for e in events):
            out.note("stuck", f"{run[1]} (child): open, last event {events[-1]['event_type']}")
    return out


def event_times_by_shard(histories: Mapping[RunId, Sequence[Record]], shards: int,
                         types: Collection[str] | None = None) -> dict[int, list[int]]:
    """The time (epoch ms) of every event (or only those of `types`), sorted, per shard."""
    times: dict[int, list[int]] = defaultdict(list)
    for (namespace, workflow_id, _), events in histories.items():
        times[shard_for(namespace, workflow_id, shards)].extend(
            e["event_time_ms"] for e in events if types is None or e["event_type"] in types)
    for values in times.values():
        values.sort()
    return times


def longest_gap(times: Mapping[int, Sequence[int]], shards: Iterable[int], start_ms: int, end_ms: int) -> float:
    """Seconds of the longest stretch of [start_ms, end_ms] in which none of `shards` recorded an event."""
    if end_ms <= start_ms:
        return 0.0
    inside: list[int] = []
    for shard in shards:
        values = times.get(shard, [])
        inside.extend(values[bisect.bisect_left(values, start_ms):bisect.bisect_right(values, end_ms)])
    points = [start_ms, *sorted(inside), end_ms]
    return max(b - a for a, b in itertools.pairwise(points)) / 1000


@dataclass(frozen=True)
class StepWaits:
    """The longest single steps of workflows on some shards, for steps that began within a window (seconds).

    Attributes:
        workflow_task: from WORKFLOW_TASK_SCHEDULED to its COMPLETED, FAILED or TIMED_OUT (dispatch, the worker,
            the completion): no step of the workload waits on purpose here.
        activity: from ACTIVITY_TASK_SCHEDULED to the first execution in the side-effect ledger (dispatch and the
            worker's start handshake, before any retry).
    """

    workflow_task: float
    activity: float


def step_waits(histories: Mapping[RunId, Sequence[Record]], first_run: Mapping[tuple[str, str], int],
               shards: Collection[int], shard_count: int, start_ms: int, end_ms: int) -> StepWaits:
    """The longest steps that began in [start_ms, end_ms] on `shards`; `first_run` maps (workflow id, activity id)
    to the time of its first execution in the ledger."""
    task = activity = 0
    for (namespace, workflow_id, _), events in histories.items():
        if shard_for(namespace, workflow_id, shard_count) not in shards:
            continue
        scheduled = 0
        for event in events:
            kind, at = event["event_type"], event["event_time_ms"]
            if kind == "WORKFLOW_TASK_SCHEDULED":
                scheduled = at
            elif kind in ("WORKFLOW_TASK_COMPLETED", "WORKFLOW_TASK_FAILED", "WORKFLOW_TASK_TIMED_OUT") and scheduled:
                if start_ms <= scheduled <= end_ms:
                    task = max(task, at - scheduled)
                scheduled = 0
            elif kind == "ACTIVITY_TASK_SCHEDULED" and start_ms <= at <= end_ms:
                ran = first_run.get((workflow_id, event["attributes"][1]["activity_id"]))
                if ran is not None:
                    activity = max(activity, ran - at)
    return StepWaits(task / 1000, activity / 1000)


def first_completion_after(histories: Mapping[RunId, Sequence[Record]], at_ms: int) -> float | None:
    """Seconds from `at_ms` to the first WORKFLOW_EXECUTION_COMPLETED decided at or after it (None: none)."""
    first = min((e["event_time_ms"] for events in histories.values() for e in events
                 if e["event_type"] == "WORKFLOW_EXECUTION_COMPLETED" and e["event_time_ms"] >= at_ms), default=None)
    return None if first is None else (first - at_ms) / 1000


def first_event_after(histories: Mapping[RunId, Sequence[Record]], at_ms: int) -> float | None:
    """Seconds from `at_ms` to the first event of any kind decided at or after it (None: none)."""
    first = min((e["event_time_ms"] for events in histories.values() for e in events if e["event_time_ms"] >= at_ms),
                default=None)
    return None if first is None else (first - at_ms) / 1000


def scrape_server_log(path: Path) -> list[str]:
    """The lines of a server log that report an unhandled error in an HTTP handler (each one answered 500)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if UNHANDLED in line]
