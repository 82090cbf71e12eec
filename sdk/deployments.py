"""Worker versioning in the SDK (Temporal's worker deployments): build ids, behaviours, and a queue's current build.

A versioned worker (`Worker(build_id="B", use_worker_versioning=True)`, or Temporal's newer
`deployment_config=WorkerDeploymentConfig(version=WorkerDeploymentVersion("orders", "B"), use_worker_versioning=True,
default_versioning_behavior=VersioningBehavior.PINNED)`) reads only its build's tasks. Which build gets a queue's new
work is the queue's current build, set with `client.set_current_deployment_version(task_queue, build_id)`; pinned
runs stay on the build that started them, auto-upgrade runs move at their next task (docs/architecture.md,
"Worker versioning").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import ClientTransport
from ostinato.sdk.versioning import (
    VersioningBehavior,
    WorkerDeploymentConfig,
    WorkerDeploymentVersion,
    WorkerVersioning,
    resolve,
)
from ostinato.streams.versioning import build_id_problem


class Client(Protocol):
    """What these calls need of `ostinato.client.Client` (not imported: the client imports this module)."""

    @property
    def service(self) -> ClientTransport: ...

    @property
    def namespace(self) -> str: ...

__all__ = ["TaskQueueVersioningInfo", "VersioningBehavior", "WorkerDeploymentConfig", "WorkerDeploymentVersion",
           "WorkerVersioning", "WorkflowVersioningInfo", "describe", "resolve", "set_current_build",
           "set_ramping_build"]

Record = dict[str, Any]


@dataclass(frozen=True)
class TaskQueueVersioningInfo:
    """A task queue's current build and ramp (Temporal's `WorkerDeploymentInfo` routing config, per queue)."""

    task_queue: str
    current_build: str
    ramping_build: str
    ramping_percentage: float
    revision: int

    @classmethod
    def from_json(cls, body: Record) -> TaskQueueVersioningInfo:
        return cls(str(body["task_queue"]), str(body["current_build"]), str(body["ramping_build"]),
                   float(body["ramping_percentage"]), int(body["revision"]))


@dataclass(frozen=True)
class WorkflowVersioningInfo:
    """A run's versioning as describe shows it (Temporal's `WorkflowExecutionVersioningInfo`)."""

    behavior: VersioningBehavior
    build_id: str  # the build that completed the run's last workflow task
    pinned_build: str  # a pinned run's build ("" otherwise)

    @classmethod
    def from_state(cls, state: Record) -> WorkflowVersioningInfo:
        return cls(VersioningBehavior(state.get("versioning_behavior") or ""), str(state.get("build_id") or ""),
                   str(state.get("pinned_build") or ""))


async def set_current_build(client: Client, task_queue: str, build_id: str) -> TaskQueueVersioningInfo:
    """Make `build_id` the queue's current build ("" to stop routing by build); a ramp of that build ends."""
    return await _change(client, task_queue, {"current_build": build_id})


async def set_ramping_build(client: Client, task_queue: str, build_id: str,
                            percentage: float) -> TaskQueueVersioningInfo:
    """Send `percentage` percent of the queue's workflow ids' new and auto-upgrade tasks to `build_id` ("" or 0
    ends the ramp)."""
    return await _change(client, task_queue, {"ramping_build": build_id, "ramping_percentage": percentage})


async def describe(client: Client, task_queue: str) -> TaskQueueVersioningInfo:
    return TaskQueueVersioningInfo.from_json(await client.service.versioning(client.namespace, task_queue, None))


async def _change(client: Client, task_queue: str, change: Record) -> TaskQueueVersioningInfo:
    for key in ("current_build", "ramping_build"):
        build = change.get(key)
        if build and (problem := build_id_problem(build)) is not None:
            raise exc.RPCError(problem, status=400, code="invalid_argument")
    return TaskQueueVersioningInfo.from_json(await client.service.versioning(client.namespace, task_queue, change))
