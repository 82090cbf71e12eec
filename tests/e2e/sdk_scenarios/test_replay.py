"""Today's workflow code against checked-in histories (STYLE.md 12), as users run the Replayer in their CI.

The histories in `histories/` were recorded on the in-memory engine by `record_histories` below. To record them
again (after a deliberate, patched change of a workflow, or of the history format):

    OSTINATO_REGENERATE_HISTORIES=1 .venv/bin/pytest -p no:cacheprovider tests/e2e/sdk_scenarios/test_replay.py

`hello_legacy.json` was written by older code of `Hello` (kept here as `HelloLegacy`): replaying it with today's
`Hello` must be reported as non-deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ostinato import workflow
from ostinato.client import Client, WorkflowHandle
from ostinato.exceptions import NondeterminismError, WorkflowFailureError
from ostinato.sdk.replayer import load_events, save_history
from ostinato.testing import WorkflowEnvironment
from ostinato.worker import Replayer, Worker
from tests.e2e.sdk_scenarios.workflows import (
    ALL_ACTIVITIES,
    ALL_WORKFLOWS,
    SHORT,
    Counter,
    Hello,
    OrderedA,
    Parent,
    PatchyV1,
    PatchyV2,
    Retrying,
    Saga,
    Shipment,
    greet,
    step_one,
    step_two,
)

HISTORIES = Path(__file__).parent / "histories"
TODAYS_WORKFLOWS = [*ALL_WORKFLOWS, PatchyV2, OrderedA]
REPLAY_CLEANLY = ["hello", "saga", "retrying", "shipment_signal", "shipment_timeout", "parent_abandon",
                  "counter_first_run", "ordered", "patchy_v1"]
NON_DETERMINISTIC = {"hello_legacy": "history has TIMER_STARTED"}


@workflow.defn(name="Hello")
class HelloLegacy:
    """How `Hello` used to be: a minute's pause before greeting. Today's `Hello` greets at once."""

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.sleep(timedelta(minutes=1))
        return await workflow.execute_activity(greet, name, start_to_close_timeout=SHORT)


# -- recording ----------------------------------------------------------------------------------------------------

async def _record(handle: WorkflowHandle, name: str, directory: Path) -> None:
    """Wait for the run to close and save its history (at once: later time skips pass the run's retention)."""
    with contextlib.suppress(WorkflowFailureError):  # failed, or continued as new: a history all the same
        await handle.result(follow_runs=False)
    save_history(directory / f"{name}.json", handle.id, handle.run_id, await handle.fetch_history())


async def record_histories(directory: Path) -> None:
    """Run each workflow once on the in-memory engine and save its history as `<name>.json`."""
    directory.mkdir(exist_ok=True)
    async with await WorkflowEnvironment.start_time_skipping() as env:
        client = Client(env.service, identity="history-recorder")
        queue = "histories"

        async def start(workflow_run: Any, *args: Any, workflow_id: str) -> WorkflowHandle:
            return await client.start_workflow(workflow_run, *args, id=workflow_id, task_queue=queue,
                                              request_id=f"record-{workflow_id}")  # a stable run id

        activities = [*ALL_ACTIVITIES, step_one, step_two]
        async with Worker(client, task_queue=queue, workflows=[*ALL_WORKFLOWS, OrderedA], activities=activities,
                          identity="history-recorder"):
            await _record(await start(Hello.run, "Ada", workflow_id="hello"), "hello", directory)
            await _record(await start(Saga.run, "o-1", workflow_id="saga"), "saga", directory)
            await _record(await start(Retrying.run, workflow_id="retrying"), "retrying", directory)
            shipped = await start(Shipment.run, workflow_id="shipment-signal")
            await shipped.signal(Shipment.shipped, "T-1")
            await _record(shipped, "shipment_signal", directory)
            await _record(await start(Shipment.run, workflow_id="shipment-timeout"), "shipment_timeout", directory)
            await _record(await start(Parent.run, "ABANDON", workflow_id="parent"), "parent_abandon", directory)
            await _record(await start(Counter.run, 0, 3, [], workflow_id="counter"), "counter_first_run", directory)
            ordered = await start(OrderedA.run, workflow_id="ordered")
            await ordered.signal(OrderedA.proceed)
            await _record(ordered, "ordered", directory)
        async with Worker(client, task_queue=queue, workflows=[PatchyV1, HelloLegacy], activities=[greet],
                          identity="history-recorder"):
            await _record(await start(PatchyV1.run, workflow_id="patchy"), "patchy_v1", directory)
            await _record(await start(HelloLegacy.run, "Ada", workflow_id="hello-legacy"), "hello_legacy", directory)


@pytest.fixture(scope="module", autouse=True)
def _regenerate() -> Iterator[None]:
    if os.environ.get("OSTINATO_REGENERATE_HISTORIES") == "1":
        for old in HISTORIES.glob("*.json"):
            old.unlink()
        asyncio.run(record_histories(HISTORIES))
    yield


# -- replaying ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", REPLAY_CLEANLY)
def test_checked_in_history_replays_with_todays_code(name: str) -> None:
    result = Replayer(workflows=TODAYS_WORKFLOWS).replay_file(HISTORIES / f"{name}.json")
    assert result.ok, f"{name}: {result.failure}"


def test_history_of_older_code_is_non_deterministic() -> None:
    result = Replayer(workflows=TODAYS_WORKFLOWS).replay_file(HISTORIES / "hello_legacy.json")
    assert isinstance(result.failure, NondeterminismError)
    assert NON_DETERMINISTIC["hello_legacy"] in str(result.failure)
    assert "ScheduleActivityTask(activity_id='1', activity_type='greet')" in str(result.failure)
    # The code that wrote it still replays it.
    assert Replayer(workflows=[HelloLegacy]).replay_file(HISTORIES / "hello_legacy.json").ok


def test_patched_history_replays_with_both_versions_of_its_era() -> None:
    """patchy_v1 was written before the patch: v1 and the patched v2 both replay it."""
    for version in (PatchyV1, PatchyV2):
        assert Replayer(workflows=[version]).replay_file(HISTORIES / "patchy_v1.json").ok


def test_changed_activity_order_fails_the_checked_in_history() -> None:
    from tests.e2e.sdk_scenarios.workflows import OrderedB

    result = Replayer(workflows=[OrderedB]).replay_file(HISTORIES / "ordered.json")
    assert isinstance(result.failure, NondeterminismError)
    assert "'step_one'" in str(result.failure) and "'step_two'" in str(result.failure)


def test_every_checked_in_history_is_accounted_for() -> None:
    on_disk = sorted(p.stem for p in HISTORIES.glob("*.json"))
    assert on_disk == sorted([*REPLAY_CLEANLY, *NON_DETERMINISTIC])


def test_replay_all_reports_the_non_deterministic_one() -> None:
    def histories() -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
        for path in sorted(HISTORIES.glob("*.json")):
            data = json.loads(path.read_text())
            yield data["workflow_id"], data["run_id"], load_events(data["events"])

    results = Replayer(workflows=TODAYS_WORKFLOWS).replay_all(histories())
    assert [r.workflow_id for r in results.failed] == ["hello-legacy"]
    assert results.summary() == f"{len(REPLAY_CLEANLY) + 1} histories replayed, 1 non-deterministic"
