"""Where a run's tasks go (streams/versioning.py's rules applied to a run and its namespace's config): the queue
whose topics carry them, and whether the worker answering a command may be handed the run's next task eagerly."""

from __future__ import annotations

from ostinato.streams import versioning
from ostinato.streams.config import Config
from ostinato.streams.model import RunState


def workflow_build(run: RunState, config: Config) -> str:
    """The build whose workers get the run's next workflow task or query (UNVERSIONED: the plain queue)."""
    return versioning.workflow_build(run.workflow_id, run.versioning_behavior, run.pinned_build, run.task_queue,
                                     config.deployments)


def workflow_queue(run: RunState, config: Config) -> str:
    """The queue whose workflow task topic carries the run's next workflow task (and its queries)."""
    return versioning.versioned_queue(run.task_queue, workflow_build(run, config))


def activity_queue(run: RunState, task_queue: str, config: Config) -> str:
    """The queue whose activity topic carries an activity of the run scheduled on `task_queue`."""
    return versioning.versioned_queue(task_queue, versioning.activity_build(
        run.workflow_id, run.versioning_behavior, run.pinned_build, run.task_queue, task_queue, config.deployments))


def worker_serves_workflow(run: RunState, config: Config, worker_build: str) -> bool:
    """Whether a worker of `worker_build` (on the run's queue) would get the run's next workflow task from the
    topic: only then may it be handed the task eagerly, so an eager path never takes a run off its build."""
    return workflow_build(run, config) == worker_build


def worker_serves_activity(run: RunState, task_queue: str, config: Config, worker_build: str) -> bool:
    """Whether a worker of `worker_build` would get this activity from the topic (for eager activity dispatch)."""
    return activity_queue(run, task_queue, config) == versioning.versioned_queue(task_queue, worker_build)


def answering_build(body: dict[str, object]) -> str:
    """The build whose topics the answering worker reads: a workflow task answer's `build_id` counts only with a
    behaviour (an unversioned worker may still name its build, as Temporal records it); an activity answer names
    only a routed build."""
    build = str(body.get("build_id") or "")
    if "versioning_behavior" in body and not body.get("versioning_behavior"):
        return versioning.UNVERSIONED
    return build


def waits_for_build(run: RunState, config: Config) -> bool:
    """Whether the run's workflow tasks go to a build's topic, whose workers may be gone for a while."""
    return workflow_build(run, config) != versioning.UNVERSIONED


def run_build_ids(run: RunState) -> list[str]:
    """The run's `BuildIds` search attribute values (drain visibility)."""
    return versioning.build_ids(run.versioning_behavior, run.pinned_build, run.build_id)
