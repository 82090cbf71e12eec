"""The worker (`from ostinato.worker import Worker`): runs a task queue's workflows and activities.

It is transport-agnostic: the client's service names the worker transport that polls the tasks (Kafka task topics
for a server, the in-memory engine in `WorkflowEnvironment`) and hands them to the workflow task handler and the
activity executor here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import timedelta
from typing import Any

from ostinato.schemas.topics import task_queue_problem
from ostinato.sdk._local_activities import LocalActivityRunner
from ostinato.sdk._workflow_worker import WorkflowTaskHandler
from ostinato.sdk.activity_executor import ActivityExecutor
from ostinato.sdk.client import Client
from ostinato.sdk.interceptor import *  # noqa: F403 - Temporal exports the interceptor classes from `worker`
from ostinato.sdk.interceptor import Interceptor
from ostinato.sdk.interceptor import __all__ as _interceptor_names
from ostinato.sdk.replayer import (
    Replayer,
    WorkflowHistory,
    WorkflowReplayResult,
    WorkflowReplayResults,
    sample_histories,
)
from ostinato.sdk.versioning import WorkerDeploymentConfig, resolve
from ostinato.sdk.workflow_sandbox import UnsandboxedWorkflowRunner, WorkflowRunner
from ostinato.streams.versioning import versioned_queue

__all__ = ["Replayer", "UnsandboxedWorkflowRunner", "Worker", "WorkerDeploymentConfig", "WorkflowHistory",
           "WorkflowReplayResult", "WorkflowReplayResults", "WorkflowRunner", "sample_histories",
           *_interceptor_names]
log = logging.getLogger("ostinato.worker")


class Worker:
    """Runs `workflows` and `activities` of `task_queue` until shut down.

    Args:
        client: a connected client (its service decides where tasks come from).
        task_queue: the queue to serve.
        workflows: `@workflow.defn` classes.
        activities: `@activity.defn` functions.
        max_cached_workflows: running workflows kept in memory between tasks (others replay from history).
        max_concurrent_activities: activities run at once (the rest wait in the topic).
        max_concurrent_workflow_tasks: workflow tasks handled at once (a task runs its local activities).
        max_concurrent_local_activities: local activity attempts run at once (the rest wait for a slot, which counts
            against their schedule-to-start timeout).
        activity_executor: Temporal's `concurrent.futures` executor for plain-function (non-async) activities; a
            thread pool (a process pool is refused). Optional here: without one they run in a pool of the
            worker's own (16 threads). The worker does not shut a given executor down.
        graceful_shutdown_timeout: how long running activities may go on finishing once `shutdown()` is called
            before they are asked to stop (default zero: at once, as Temporal).
        workflow_runner: accepted for Temporal's `UnsandboxedWorkflowRunner()` / `SandboxedWorkflowRunner()`;
            Ostinato has no sandbox, every runner runs workflows in-process under the determinism guards.
        identity: how this worker appears in history (default host@pid).
        kafka_config: librdkafka security settings of this worker's Kafka clients (`security.protocol`, `sasl.*`,
            `ssl.*`), over those of the environment (`OSTINATO_KAFKA_CONFIG`, `OSTINATO_KAFKA_<PROPERTY>`); e.g.
            `{"security.protocol": "SASL_SSL", "sasl.username": "orders-worker", "sasl.password": ...}`. The server
            never hands out credentials: each worker brings its own (docs/security.md).
        interceptors: worker interceptors (`ostinato.worker.Interceptor`), after those of the client that are worker
            interceptors too, as in Temporal; the first is outermost.
        max_activities_per_second: at most this many activities started per second by this worker (temporalio's
            name); the tasks beyond wait in the topic, or in hand, not started. Enforced by this worker alone: to
            protect a downstream API from every worker of the queue, use the queue's limit below.
        max_task_queue_activities_per_second: the activity rate of the whole task queue, across all its workers
            (temporalio's name). The worker sets it on the server when it starts (the latest setting wins, as in
            Temporal), and the engine enforces it: the queue's activity tasks are released to workers at that rate
            whatever the workers do (`ostinato task-queue set-rate-limit` sets it without a worker). The time-skipping
            environment accepts both limits and enforces neither.
        build_id: this worker's build, recorded on every workflow task it completes (Temporal's name).
        use_worker_versioning: read only this build's tasks (worker versioning): the queue's pinned runs of this
            build, and its new and auto-upgrade work while this build is current (or ramping). Needs `build_id`.
        deployment_config: Temporal's newer spelling of the two above, with a default versioning behaviour for
            workflow types that declare none (`ostinato.worker.WorkerDeploymentConfig`).
    """

    def __init__(self, client: Client, *, task_queue: str, workflows: Sequence[type] = (),
                 activities: Sequence[Callable[..., Any]] = (), max_cached_workflows: int = 1000,
                 max_concurrent_activities: int = 100, identity: str = "",
                 kafka_config: Mapping[str, str] | None = None, activity_executor: Executor | None = None,
                 max_concurrent_workflow_tasks: int = 100, max_concurrent_local_activities: int = 100,
                 graceful_shutdown_timeout: timedelta = timedelta(), workflow_runner: WorkflowRunner | None = None,
                 interceptors: Sequence[Interceptor] = (), max_activities_per_second: float | None = None,
                 max_task_queue_activities_per_second: float | None = None, build_id: str = "",
                 use_worker_versioning: bool = False, deployment_config: WorkerDeploymentConfig | None = None,
                 ) -> None:
        if not workflows and not activities:
            raise ValueError("a worker needs at least one workflow or activity")
        self.versioning = resolve(build_id, use_worker_versioning, deployment_config)
        self.routed_build = self.versioning.routed_build
        self.routed_queue = versioned_queue(task_queue, self.routed_build)  # the queue whose topics it reads
        if self.routed_build and (problem := task_queue_problem(self.routed_queue)) is not None:
            raise ValueError(f"build {self.routed_build!r} of queue {task_queue!r}: {problem}")
        if isinstance(activity_executor, ProcessPoolExecutor):
            raise TypeError("activity_executor: Ostinato runs plain-function activities in threads; pass a "
                            "ThreadPoolExecutor (or none)")
        if graceful_shutdown_timeout < timedelta():
            raise ValueError("graceful_shutdown_timeout must not be negative")
        for name, rate in (("max_activities_per_second", max_activities_per_second),
                           ("max_task_queue_activities_per_second", max_task_queue_activities_per_second)):
            if rate is not None and not rate > 0:
                raise ValueError(f"{name} must be positive (or None for no limit), not {rate}")
        self.client = client
        self.task_queue = task_queue
        self.max_activities_per_second = max_activities_per_second
        self.max_task_queue_activities_per_second = max_task_queue_activities_per_second
        self.identity = identity or f"{socket.gethostname()}@{os.getpid()}"
        self.max_concurrent_activities = max_concurrent_activities
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.workflow_runner = workflow_runner or UnsandboxedWorkflowRunner()
        self.kafka_config = dict(kafka_config or {})
        self.interceptors = [i for i in client.interceptors if isinstance(i, Interceptor)] + list(interceptors)
        # `activity_executor` is Temporal's keyword (the thread pool); the attribute is the executor of tasks.
        self.activity_executor = ActivityExecutor(
            activities, client.data_converter, identity=self.identity, client=client,
            thread_pool=activity_executor, interceptors=self.interceptors) if activities else None
        local_activities = LocalActivityRunner(self.activity_executor, client.data_converter,
                                               max_concurrent_local_activities)
        self.workflow_handler = WorkflowTaskHandler(
            workflows, client.data_converter, max_cached=max_cached_workflows, identity=self.identity,
            local_activities=local_activities, max_concurrent=max_concurrent_workflow_tasks,
            interceptors=self.interceptors, versioning=self.versioning) if workflows else None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._stopped = asyncio.Event()  # set when run() returns, for shutdown() of a worker started by run()

    async def run(self) -> None:
        """Serve until `shutdown()` (or cancellation). Temporal's two ways of starting a worker both work:
        `async with worker:` and `await worker.run()` (often in a task, with `shutdown()` from elsewhere)."""
        if self._running:
            raise RuntimeError("the worker is already running")
        self._running = True
        self._stopped.clear()
        transport = self.client.service.worker_transport()
        try:
            if self.max_task_queue_activities_per_second is not None:
                await self.client.service.set_task_queue_rate_limit(
                    self.client.namespace, self.task_queue, self.max_task_queue_activities_per_second, self.identity)
            await transport.run_worker(self, self._stopping)
        finally:
            try:
                if self.activity_executor is not None:
                    await self.activity_executor.shutdown()
            finally:
                self._running = False
                self._stopped.set()

    @property
    def is_running(self) -> bool:
        """Whether the worker serves its queue now (started, by `run()` or `async with`, and not shut down)."""
        started = self._running or (self._task is not None and not self._task.done())
        return started and not self._stopping.is_set()

    async def shutdown(self) -> None:
        """Stop taking tasks, stop running activities (each answers a retryable WorkerShutdown failure, so another
        worker retries it; `activity.is_worker_shutdown()` tells them why), and return when the worker has
        stopped."""
        if self.activity_executor is not None:
            self.activity_executor.notify_shutdown()
        self._stopping.set()
        if self._task is not None:
            await self._task
        elif self._running:  # started by `run()`, awaited elsewhere
            await self._stopped.wait()

    async def __aenter__(self) -> Worker:
        self._task = asyncio.ensure_future(self.run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()
