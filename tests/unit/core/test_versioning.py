"""Worker versioning's routing decisions as tables: where a run's workflow tasks, queries and activities go, the
ramp's share, the `BuildIds` values, and the applier that pins a run."""

from __future__ import annotations

import pytest

from ostinato.streams import routing, versioning
from ostinato.streams.appliers.workflow_task import completed_v2
from ostinato.streams.config import Config
from ostinato.streams.model import RunState, Workflow, WorkflowTaskState
from ostinato.streams.versioning import AUTO_UPGRADE, PINNED, QueueVersioning

Q = "orders"
CURRENT_B = {Q: QueueVersioning(current_build="B")}
RAMP_ALL_C = {Q: QueueVersioning(current_build="B", ramping_build="C", ramping_percentage=100.0)}


@pytest.mark.parametrize(("behavior", "pinned", "deployments", "expected"), [
    ("", "", None, ""),  # no versioning anywhere: the plain queue
    ("", "", CURRENT_B, "B"),  # a run no versioned worker answered yet: the current build
    (PINNED, "A", CURRENT_B, "A"),  # pinned: its own build, whatever is current
    (PINNED, "A", None, "A"),  # pinned, and the queue's deployment was cleared: still its build
    (PINNED, "", CURRENT_B, "B"),  # pinned behaviour recorded without a build (cannot pin): the current build
    (AUTO_UPGRADE, "", CURRENT_B, "B"),  # auto-upgrade: the current build at each task
    (AUTO_UPGRADE, "", None, ""),  # auto-upgrade with no current build: the plain queue
    (AUTO_UPGRADE, "", RAMP_ALL_C, "C"),  # a 100% ramp takes every workflow id
    (PINNED, "A", RAMP_ALL_C, "A"),  # a ramp never moves a pinned run
    ("", "", {"other": QueueVersioning(current_build="X")}, ""),  # another queue's deployment changes nothing
])
def test_workflow_tasks_go_to_the_pinned_build_else_the_current_one(
        behavior: str, pinned: str, deployments: dict[str, QueueVersioning] | None, expected: str) -> None:
    assert versioning.workflow_build("wf-1", behavior, pinned, Q, deployments) == expected


@pytest.mark.parametrize(("behavior", "pinned", "activity_queue", "deployments", "expected"), [
    (PINNED, "A", Q, CURRENT_B, "A"),  # a pinned run's activity on its own queue: its build's workers
    (PINNED, "A", "payments", CURRENT_B, ""),  # on another queue: that queue's routing (here none)
    (PINNED, "A", "payments", {"payments": QueueVersioning("P")}, "P"),
    (AUTO_UPGRADE, "", Q, CURRENT_B, "B"),
    ("", "", Q, None, ""),
])
def test_activities_follow_their_run_on_its_own_queue(behavior: str, pinned: str, activity_queue: str,
                                                      deployments: dict[str, QueueVersioning] | None,
                                                      expected: str) -> None:
    assert versioning.activity_build("wf-1", behavior, pinned, Q, activity_queue, deployments) == expected


def test_a_ramp_takes_a_stable_share_of_workflow_ids() -> None:
    ids = [f"order-{i}" for i in range(4000)]
    ramp = QueueVersioning(current_build="B", ramping_build="C", ramping_percentage=25.0)
    chosen = [versioning.current_target(i, ramp) for i in ids]
    share = chosen.count("C") / len(ids)
    assert 0.22 < share < 0.28, share
    assert chosen == [versioning.current_target(i, ramp) for i in ids]  # the same id always goes the same way
    assert not versioning.ramped("x", 0.0)
    assert all(versioning.ramped(i, 100.0) for i in ids[:100])
    # a wider ramp keeps every id the narrower one had
    wider = QueueVersioning("B", "C", 50.0)
    assert all(versioning.current_target(i, wider) == "C" for i, c in zip(ids, chosen, strict=True) if c == "C")


@pytest.mark.parametrize(("queue", "build", "expected"), [
    ("orders", "", "orders"),
    ("orders", "v2", "orders.build-v2"),
    ("orders", "1.4.0-rc1", "orders.build-1.4.0-rc1"),
])
def test_a_build_reads_the_topics_of_a_derived_queue(queue: str, build: str, expected: str) -> None:
    assert versioning.versioned_queue(queue, build) == expected


@pytest.mark.parametrize(("build", "ok"), [("v2", True), ("1.4.0_rc-1", True), ("", False), ("a/b", False),
                                           ("x" * 65, False), ("a b", False)])
def test_build_ids_are_what_a_topic_name_can_carry(build: str, ok: bool) -> None:
    assert (versioning.build_id_problem(build) is None) == ok


@pytest.mark.parametrize(("behavior", "pinned", "last", "expected"), [
    ("", "", "", []),
    (PINNED, "A", "A", ["pinned:A", "versioned:A"]),
    (AUTO_UPGRADE, "", "B", ["versioned:B"]),
    (AUTO_UPGRADE, "", "", ["unversioned"]),
])
def test_build_ids_search_attribute(behavior: str, pinned: str, last: str, expected: list[str]) -> None:
    assert versioning.build_ids(behavior, pinned, last) == expected


def _run(**kwargs: object) -> RunState:
    run = RunState(namespace="default", workflow_id="wf-1", run_id="r1", workflow_type="T", task_queue=Q,
                   status="RUNNING", start_time_ms=0, execution_time_ms=0, task_timeout_ms=10_000,
                   first_execution_run_id="r1")
    for name, value in kwargs.items():
        setattr(run, name, value)
    return run


@pytest.mark.parametrize(("before", "behavior", "build", "after"), [
    # (behaviour, pinned build) before -> the completion -> (behaviour, pinned build, last build) after
    (("", ""), PINNED, "A", (PINNED, "A", "A")),  # the first pinned completion pins the run to its build
    ((PINNED, "A"), PINNED, "B", (PINNED, "A", "B")),  # a pinned run stays pinned to the build that started it
    ((PINNED, "A"), AUTO_UPGRADE, "A", (AUTO_UPGRADE, "", "A")),  # an auto-upgrade completion unpins it
    (("", ""), "", "X", ("", "", "X")),  # an unversioned worker's build is recorded, nothing is pinned
    ((AUTO_UPGRADE, ""), PINNED, "B", (PINNED, "B", "B")),
])
def test_the_completed_applier_pins_and_unpins(before: tuple[str, str], behavior: str, build: str,
                                               after: tuple[str, str, str]) -> None:
    run = _run(versioning_behavior=before[0], pinned_build=before[1],
               workflow_task=WorkflowTaskState(5, 6, 1, Q, 0, 0, 10_000))
    wf = Workflow("default", "wf-1", runs={"r1": run})
    completed_v2(wf, "r1", {"started_event_id": 6, "build_id": build, "versioning_behavior": behavior}, {})
    assert (run.versioning_behavior, run.pinned_build, run.build_id) == after
    assert run.workflow_task is None


@pytest.mark.parametrize(("run_kwargs", "deployments", "worker_build", "serves"), [
    ({"versioning_behavior": PINNED, "pinned_build": "A"}, CURRENT_B, "A", True),  # eager stays on the pinned build
    ({"versioning_behavior": PINNED, "pinned_build": "A"}, CURRENT_B, "B", False),
    ({"versioning_behavior": AUTO_UPGRADE}, CURRENT_B, "A", False),  # A is no longer current: the topic, to B
    ({"versioning_behavior": AUTO_UPGRADE}, CURRENT_B, "B", True),
    ({}, None, "", True),  # no versioning: as before
])
def test_eager_paths_never_take_a_run_off_its_build(run_kwargs: dict[str, str], deployments: dict[str, QueueVersioning]
                                                    | None, worker_build: str, serves: bool) -> None:
    config = Config(deployments=deployments)
    run = _run(**run_kwargs)
    assert routing.worker_serves_workflow(run, config, worker_build) == serves
    assert routing.worker_serves_activity(run, Q, config, worker_build) == serves


@pytest.mark.parametrize(("body", "build"), [
    ({"build_id": "A", "versioning_behavior": PINNED}, "A"),
    ({"build_id": "A", "versioning_behavior": ""}, ""),  # an unversioned worker that names its build
    ({"build_id": "A"}, "A"),  # an activity answer names only a routed build
    ({}, ""),
])
def test_the_answering_workers_build(body: dict[str, object], build: str) -> None:
    assert routing.answering_build(body) == build
