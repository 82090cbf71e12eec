"""Worker versioning's types for workers and workflow definitions: builds, behaviours, and what a worker declares
(Temporal's names); the runtime and definitions import them, so they import nothing of the client."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ostinato.streams.versioning import AUTO_UPGRADE, PINNED, build_id_problem


class VersioningBehavior(Enum):
    """How a workflow type's runs follow builds (Temporal's `VersioningBehavior`)."""

    UNSPECIFIED = ""
    PINNED = PINNED  # every task on the build that started the run
    AUTO_UPGRADE = AUTO_UPGRADE  # each task on the queue's current build


@dataclass(frozen=True)
class WorkerDeploymentVersion:
    """A deployment's build (Temporal's name). Tasks are routed by `build_id` per task queue; `deployment_name` is
    kept for Temporal's shape and shown nowhere else."""

    deployment_name: str
    build_id: str


@dataclass(frozen=True)
class WorkerDeploymentConfig:
    """Temporal's worker deployment options: a worker of `version` with `default_versioning_behavior` for the
    workflow types that declare none (`@workflow.defn(versioning_behavior=...)`)."""

    version: WorkerDeploymentVersion
    use_worker_versioning: bool = True
    default_versioning_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED


@dataclass(frozen=True)
class WorkerVersioning:
    """What a worker declares: its build and the behaviour of workflow types that name none (resolved from
    Temporal's two spellings by `resolve`)."""

    build_id: str = ""
    use_worker_versioning: bool = False
    default_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED

    @property
    def routed_build(self) -> str:
        """The build whose tasks the worker reads ("" unversioned: the queue's plain topics)."""
        return self.build_id if self.use_worker_versioning else ""

    def behavior_of(self, declared: VersioningBehavior) -> str:
        """The behaviour a completion records for a workflow type (empty for an unversioned worker). A versioned
        worker with neither a declared nor a default behaviour records AUTO_UPGRADE (Temporal refuses such a worker;
        moving with the current build is the choice that never strands a run)."""
        if not self.use_worker_versioning:
            return ""
        chosen = declared if declared is not VersioningBehavior.UNSPECIFIED else self.default_behavior
        return str((chosen if chosen is not VersioningBehavior.UNSPECIFIED else VersioningBehavior.AUTO_UPGRADE).value)


def resolve(build_id: str, use_worker_versioning: bool,
            deployment_config: WorkerDeploymentConfig | None) -> WorkerVersioning:
    """A worker's versioning from `Worker(build_id=..., use_worker_versioning=...)` or `deployment_config=...`.

    Raises:
        ValueError: both spellings, versioning without a build id, or a build id a topic name cannot carry.
    """
    if deployment_config is not None:
        if build_id or use_worker_versioning:
            raise ValueError("give either build_id/use_worker_versioning or deployment_config, not both")
        found = WorkerVersioning(deployment_config.version.build_id, deployment_config.use_worker_versioning,
                                 deployment_config.default_versioning_behavior)
    else:
        found = WorkerVersioning(build_id, use_worker_versioning)
    if found.use_worker_versioning and not found.build_id:
        raise ValueError("use_worker_versioning needs a build_id")
    if found.build_id and (problem := build_id_problem(found.build_id)) is not None:
        raise ValueError(problem)
    return found
