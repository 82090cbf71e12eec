"""Worker versioning: which build's workers a run's tasks go to, decided at dispatch from the run and its queue.

A versioned worker of build `B` on queue `q` reads the task topics of the derived queue `versioned_queue(q, B)`
(`q.build-B`), so routing a task to a build is choosing a topic, and Kafka keeps each build's tasks apart: a task
is produced once, to one topic, in the transaction that decided it, so changing a queue's current build can
neither lose nor double a task already dispatched (it waits in the topic it went to).

The rules (Temporal's): a PINNED run's workflow tasks go to the build whose worker completed its first task with
that behaviour (`RunState.pinned_build`), whatever the queue's current build is later; every other run (auto-upgrade,
or one whose workers recorded no behaviour) goes to the queue's current build at each dispatch, or to the ramping
build for the share of workflow ids the ramp names, or, while the queue has no current build, to the unversioned
topics. Activities follow their run: those of a pinned run on the run's own queue go to its build's workers; others
follow the current build of their queue. Pure functions of state and `Config.deployments`, so the in-memory engine
and the Kafka shell route alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ostinato.schemas.partitioner import partition_for

PINNED = "PINNED"
AUTO_UPGRADE = "AUTO_UPGRADE"
BEHAVIORS = (PINNED, AUTO_UPGRADE)
UNVERSIONED = ""  # the build of a task that goes to the queue's unversioned topics
MAX_BUILD_ID = 64
_BUILD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_SEPARATOR = ".build-"


@dataclass(frozen=True, slots=True)
class QueueVersioning:
    """A task queue's deployment: the build new and auto-upgrade work goes to, and an optional ramping build that
    takes `ramping_percentage` percent of workflow ids (chosen by a hash of the id, so a workflow keeps its side)."""

    current_build: str = UNVERSIONED
    ramping_build: str = UNVERSIONED
    ramping_percentage: float = 0.0
    revision: int = 0  # grows with every change, so a reader keeps the newest


def build_id_problem(build_id: str) -> str | None:
    """Why `build_id` cannot name a build (it becomes part of a Kafka topic name), or None."""
    if not build_id or len(build_id) > MAX_BUILD_ID:
        return f"a build id is 1-{MAX_BUILD_ID} characters, not {len(build_id)}"
    bad = sorted(set(build_id) - _BUILD_CHARS)
    if bad:
        return (f"build id {build_id[:40]!r} has characters a Kafka topic name cannot carry ({''.join(bad)[:10]!r}); "
                "use letters, digits, '.', '_' and '-'")
    return None


def versioned_queue(task_queue: str, build_id: str) -> str:
    """The queue whose task topics the workers of `build_id` on `task_queue` read (the queue itself, unversioned)."""
    return f"{task_queue}{_SEPARATOR}{build_id}" if build_id else task_queue


def unversioned_queue(queue: str) -> str:
    """The task queue a build's derived queue belongs to (the queue itself when it is no build's): a queue's rate
    limit holds its builds' tasks too."""
    return queue.split(_SEPARATOR, 1)[0]


def ramped(workflow_id: str, percentage: float) -> bool:
    """Whether `workflow_id` falls in a ramp of `percentage` percent: a stable hash (Kafka's murmur2, as for
    partitions), so a workflow does not flip between builds from one task to the next, and every language agrees."""
    if percentage <= 0:
        return False
    return partition_for(workflow_id, 10_000) < round(percentage * 100)


def current_target(workflow_id: str, versioning: QueueVersioning | None) -> str:
    """The build the queue's new and auto-upgrade work goes to now (UNVERSIONED without a current build)."""
    if versioning is None:
        return UNVERSIONED
    if versioning.ramping_build and ramped(workflow_id, versioning.ramping_percentage):
        return versioning.ramping_build
    return versioning.current_build


def workflow_build(workflow_id: str, behavior: str, pinned_build: str, task_queue: str,
                   deployments: Mapping[str, QueueVersioning] | None) -> str:
    """The build whose workers get the run's next workflow task (or query)."""
    if behavior == PINNED and pinned_build:
        return pinned_build
    return current_target(workflow_id, (deployments or {}).get(task_queue))


def activity_build(workflow_id: str, behavior: str, pinned_build: str, run_queue: str, activity_queue: str,
                   deployments: Mapping[str, QueueVersioning] | None) -> str:
    """The build whose workers get an activity task: a pinned run's own build on the run's queue, else the
    activity queue's current build."""
    if behavior == PINNED and pinned_build and activity_queue == run_queue:
        return pinned_build
    return current_target(workflow_id, (deployments or {}).get(activity_queue))


def build_ids(behavior: str, pinned_build: str, last_build: str) -> list[str]:
    """The run's `BuildIds` search attribute (Temporal's spelling): `pinned:<build>` while pinned, so
    `BuildIds = 'pinned:A' AND ExecutionStatus = 'Running'` counts what keeps build A's workers needed; and
    `versioned:<build>` for the build that completed its last task (`unversioned` if that worker had none)."""
    ids = [f"pinned:{pinned_build}"] if behavior == PINNED and pinned_build else []
    if last_build:
        ids.append(f"versioned:{last_build}")
    elif behavior or pinned_build:
        ids.append("unversioned")
    return ids
