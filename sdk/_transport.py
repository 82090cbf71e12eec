"""The SDK's transports as interfaces: `ClientTransport`, what a `Client` needs of the engine, and `WorkerTransport`,
what serves a `Worker` its tasks. A server's HTTP API (`_http.HttpService`, whose workers read Kafka) and the
in-memory engine of `WorkflowEnvironment` (`testing.EngineService`) implement both."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from ostinato.sdk import exceptions as exc
from ostinato.sdk._workflow_worker import WorkflowTaskHandler
from ostinato.sdk.activity_executor import ActivityExecutor
from ostinato.streams.schedules import SCHEDULES_QUERY

__all__ = ["CLOSING_EVENTS", "Body", "ClientTransport", "ServedWorker", "WorkerTransport"]

Record = dict[str, Any]
Body = tuple[str, Record]  # a record's full type name and the record: a command body, or a reply body
CLOSING_EVENTS = frozenset({"WORKFLOW_EXECUTION_COMPLETED", "WORKFLOW_EXECUTION_FAILED", "WORKFLOW_EXECUTION_CANCELED",
                            "WORKFLOW_EXECUTION_TERMINATED", "WORKFLOW_EXECUTION_TIMED_OUT",
                            "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"})  # what ends a run; `result()` waits for one


class ClientTransport(ABC):
    """What a client needs from the engine. Replies are `ostinato.reply.Reply` bodies: (type name, record).

    `send`, `query`, `describe`, `history` and `wait_closed` are required; listing and counting need a visibility
    store and running workers needs task queues, so their defaults raise a clear error for transports without
    them."""

    @abstractmethod
    async def send(self, namespace: str, workflow_id: str, run_id: str, body: Body, request_id: str,
                   identity: str) -> Body:
        """Send a command (`body` named in full) and return the answer: WorkflowStarted, Accepted or Rejected."""

    @abstractmethod
    async def query(self, namespace: str, workflow_id: str, run_id: str, query_type: str, args: list[Record],
                    timeout: timedelta, *, header: Mapping[str, Record] | None = None) -> Body:
        """Ask a worker `query_type` of the run (`header`: the interceptors' payloads for the workflow's); QueryResult
        or Rejected. RPCError when no answer comes in time."""

    @abstractmethod
    async def describe(self, namespace: str, workflow_id: str, run_id: str) -> Record | None:
        """The run's `ostinato.state.MutableState` ("" for the current run), None when there is no such run."""

    @abstractmethod
    async def history(self, namespace: str, workflow_id: str, run_id: str) -> list[Record]:
        """Every event of the run so far (empty when there is no such run)."""

    @abstractmethod
    async def wait_closed(self, namespace: str, workflow_id: str, run_id: str) -> Record:
        """The closing event of the run (waits for it)."""

    async def list_page(self, namespace: str, query: str, page_size: int, token: str) -> tuple[list[Record], str]:
        """A page of the visibility store's runs matching `query`, and the next page's token ("" at the end).

        Raises:
            RPCError: by default: the transport has no visibility store.
        """
        raise exc.RPCError(f"{type(self).__name__} has no visibility store (list needs a server)")

    async def count(self, namespace: str, query: str) -> int:
        """How many runs match `query` in the visibility store.

        Raises:
            RPCError: by default: the transport has no visibility store.
        """
        raise exc.RPCError(f"{type(self).__name__} has no visibility store (count needs a server)")

    async def now_ms(self) -> int:
        """The engine's time (epoch ms): a server's clock is the caller's; a time-skipping engine's is virtual."""
        return time.time_ns() // 1_000_000

    async def list_schedule_workflows(self, namespace: str, query: str) -> list[str]:
        """The workflow ids of the namespace's schedules (`streams.schedules`), from the visibility store;
        `query` narrows them further.

        Raises:
            RPCError: the transport has no visibility store.
        """
        full = SCHEDULES_QUERY + (f" AND ({query})" if query else "")
        found, token = [], ""
        while True:
            rows, token = await self.list_page(namespace, full, 1000, token)
            found += [row["workflow_id"] for row in rows]
            if not token:
                return found

    async def poll_update(self, namespace: str, workflow_id: str, run_id: str, update_id: str, wait_stage: str,
                          wait: timedelta) -> Record | None:
        """Where update `update_id` stands (`streams.update_status`), waiting up to `wait` for `wait_stage`; its
        outcome as {"result": payloads} or {"failure": record}. None when the run does not know the update.

        Raises:
            RPCError: by default: the transport has no updates.
        """
        raise exc.RPCError(f"{type(self).__name__} does not support updates")

    async def add_search_attributes(self, namespace: str, attributes: dict[str, str]) -> dict[str, str]:
        """Register custom search attributes (name -> type) in a namespace; the namespace's custom attributes.

        Raises:
            RPCError: by default: the transport has no registry; or the server refused (a type clash is a 409).
        """
        raise exc.RPCError(f"{type(self).__name__} cannot register search attributes")

    async def set_task_queue_rate_limit(self, namespace: str, task_queue: str, activities_per_second: float,
                                        set_by: str = "") -> None:
        """Set the engine-enforced activity rate of a task queue across all its workers (0 lifts it).

        The default (an in-memory engine) accepts it and enforces nothing: one process has no fleet of workers to
        hold to a shared rate, and virtual time would make any rate meaningless.

        Raises:
            RPCError: the server refused it or did not answer.
        """
        return None

    async def list_search_attributes(self, namespace: str) -> dict[str, str]:
        """The namespace's custom search attributes, name -> type.

        Raises:
            RPCError: by default: the transport has no registry.
        """
        raise exc.RPCError(f"{type(self).__name__} has no search attribute registry")

    async def versioning(self, namespace: str, task_queue: str, change: Record | None) -> Record:
        """A task queue's current and ramping build, after applying `change` (None: only read it); the JSON of
        `/api/v1/namespaces/{ns}/task-queues/{queue}/versioning`.

        Raises:
            RPCError: by default: the transport has no deployments; or the server refused the change.
        """
        raise exc.RPCError(f"{type(self).__name__} has no worker deployments")

    def worker_transport(self) -> WorkerTransport:
        """What serves the tasks of this client's workers.

        Raises:
            TypeError: by default: the transport cannot run workers.
        """
        raise TypeError(f"{type(self).__name__} cannot run workers")

    async def close(self) -> None:  # noqa: B027  # an optional capability: nothing to release by default
        """Release the transport's connections; by default there are none."""


class ServedWorker(Protocol):
    """What a worker transport needs of the worker it serves (`Worker` is one)."""

    task_queue: str
    routed_queue: str  # the queue whose topics it reads: `task_queue`, or its build's (worker versioning)
    routed_build: str  # the build it serves ("" unversioned), sent with answers that may be handed work eagerly
    identity: str
    max_concurrent_activities: int
    max_activities_per_second: float | None  # this worker's own activity start rate, None for no limit
    graceful_shutdown_timeout: timedelta  # how long running activities may finish on shutdown before being stopped
    kafka_config: dict[str, str]  # the worker's own Kafka security settings (a Kafka transport's concern)
    workflow_handler: WorkflowTaskHandler | None
    activity_executor: ActivityExecutor | None


class WorkerTransport(ABC):
    """Hands a worker its task queue's tasks and delivers their answers to the engine."""

    @abstractmethod
    async def run_worker(self, worker: ServedWorker, stopping: asyncio.Event) -> None:
        """Serve `worker` until `stopping` is set; return once the tasks in hand are answered and its running
        activities were asked to stop (each answers a retryable WorkerShutdown failure) and have answered."""
