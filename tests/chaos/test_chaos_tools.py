"""The chaos suite's own instruments, without Kafka: the workload gives what its input says on the in-memory
engine, the ledger counts re-executions against the retry design, and the gap measure sees what it should."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ostinato.schemas.keys import shard_for
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Worker
from tests.tools.chaos_load import Entry, FrontDoor, Load
from tests.tools.chaos_measure import StepWaits, longest_gap, step_waits
from tests.tools.chaos_programs import ACTIVITIES, KINDS, WORKFLOWS, design, expected_result, plan, use_ledger
from tests.tools.ledger import Execution, Ledger, read_ledger, tally


def test_the_workload_completes_as_designed_on_the_in_memory_engine(tmp_path: Path) -> None:
    specs = plan(len(KINDS) * 3, "wl")  # every kind with 0, 1 and 2 designed failures
    ledger = Ledger(tmp_path, "w")
    use_ledger(ledger)

    async def go() -> Load:
        async with await WorkflowEnvironment.start_time_skipping() as env, \
                Worker(env.client, task_queue="chaos", workflows=WORKFLOWS, activities=ACTIVITIES):
            load = Load(FrontDoor([Entry("mem", env.client)]), "chaos", specs, rate=100)
            await load.run(time.monotonic() + 120)
            return load

    try:
        load = asyncio.run(go())
    finally:
        use_ledger(None)
        ledger.close()
    assert [o.result for o in load.outcomes] == [expected_result(s) for s in specs]
    assert not any(o.raises or o.start_errors or o.signal_errors for o in load.outcomes)
    figures = tally(read_ledger(tmp_path), design(specs)).figures()
    assert figures["executions"] == sum(design(specs).values())
    assert {k: v for k, v in figures.items() if k != "executions"} == dict.fromkeys(figures.keys() - {"executions"}, 0)


def test_tally_counts_executions_beyond_the_design() -> None:
    def ran(wf: str, attempt: int, at: int) -> Execution:
        return Execution(at, "w", wf, "greet", attempt)

    executions = [
        ran("a", 1, 1), ran("a", 2, 2),  # designed: fails once, then succeeds
        ran("b", 1, 3), ran("b", 1, 4),  # the same attempt delivered twice
        ran("c", 2, 5),  # attempt 1 was marked started and never ran: attempt 2 did the work
        ran("d", 1, 6), ran("d", 2, 7), ran("d", 3, 8),  # one attempt timed out and was retried
        Execution(9, "w", "x", "other", 1),
    ]
    result = tally(executions, {("a", "greet"): 2, ("b", "greet"): 1, ("c", "greet"): 1, ("d", "greet"): 2,
                                ("e", "greet"): 1})
    assert result.figures() == {"executions": 9, "re_executions": 2, "repeated_attempts": 1, "extra_attempts": 2,
                                "skipped_attempts": 1, "missing_activities": 1, "unexpected_executions": 1}
    assert [e.at_ms for e in result.extras] == [4, 8]


def test_ledger_lines_survive_in_order(tmp_path: Path) -> None:
    first, second = Ledger(tmp_path, "w1"), Ledger(tmp_path, "w2")
    first.record("wf-1", "greet", 1)
    second.record("wf-2", "crunch", 3)
    (tmp_path / "w2.ledger").open("a").write("123\tw2\ttorn")  # a writer killed mid-line
    assert [(e.writer, e.workflow_id, e.activity_id, e.attempt) for e in read_ledger(tmp_path)] == [
        ("w1", "wf-1", "greet", 1), ("w2", "wf-2", "crunch", 3)]


def test_longest_gap_within_a_window() -> None:
    times = {0: [1000, 1500, 9000], 1: [4000], 2: [2000, 2500]}
    assert longest_gap(times, [0, 1], 1000, 10_000) == 5.0  # 4000 -> 9000
    assert longest_gap(times, [0], 1000, 10_000) == 7.5
    assert longest_gap(times, [0, 1, 2], 0, 1200) == 1.0  # from the window's start to the first event
    assert longest_gap(times, [1], 5000, 6000) == 1.0  # nothing at all inside


def test_step_waits_take_steps_that_began_in_the_window_on_the_given_shards() -> None:
    def event(kind: str, at: int, **attrs: object) -> dict[str, object]:
        return {"event_type": kind, "event_time_ms": at, "attributes": ("x", attrs)}

    run = ("default", "wf-1", "r")
    histories = {run: [
        event("WORKFLOW_TASK_SCHEDULED", 1000), event("WORKFLOW_TASK_COMPLETED", 1500),
        event("ACTIVITY_TASK_SCHEDULED", 1500, activity_id="greet"),
        event("WORKFLOW_TASK_SCHEDULED", 5000), event("WORKFLOW_TASK_TIMED_OUT", 9000),  # began after the window
    ]}
    shard = shard_for("default", "wf-1", 4)
    waits = step_waits(histories, {("wf-1", "greet"): 4000}, [shard], 4, 0, 3000)
    assert (waits.workflow_task, waits.activity) == (0.5, 2.5)
    assert step_waits(histories, {}, [shard], 4, 0, 10_000).workflow_task == 4.0
    assert step_waits(histories, {}, [(shard + 1) % 4], 4, 0, 10_000) == StepWaits(0.0, 0.0)
