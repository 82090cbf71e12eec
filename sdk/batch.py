"""Batch operations (Ostinato's own client API; temporalio has none): terminate, cancel, signal or reset every run a
visibility query selects, as a durable job with an id, progress, a rate limit and cancellation.

The job is a run of the engine's `ostinato.BatchOperation` workflow (`sdk/batch_workflow.py`), served by every
`ostinato server` (and by `batch_worker` in tests): this module only starts, describes and cancels it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from ostinato.sdk.batch_workflow import BATCH_TASK_QUEUE, BATCH_WORKFLOW_TYPE
from ostinato.sdk.exceptions import WorkflowFailureError

Record = dict[str, Any]


@dataclass(frozen=True)
class BatchTerminate:
    reason: str = ""


@dataclass(frozen=True)
class BatchCancel:
    reason: str = ""


@dataclass(frozen=True)
class BatchSignal:
    signal: str
    args: list[Any] = field(default_factory=list)  # JSON values, encoded by the job's data converter


@dataclass(frozen=True)
class BatchReset:
    reset_type: str = "LAST_WORKFLOW_TASK"  # or FIRST_WORKFLOW_TASK
    reason: str = ""
    reapply: bool = True


BatchAction = BatchTerminate | BatchCancel | BatchSignal | BatchReset


@dataclass(frozen=True)
class BatchOperationDescription:
    """Where a job stands: `state` RUNNING, COMPLETED or CANCELED (or the job run's status if it ended otherwise),
    `total` (runs the query selected when the job began), `done` and `failed` so far, the first `errors`."""

    job_id: str
    state: str
    total: int
    done: int
    failed: int
    errors: list[str]


def operation_record(action: BatchAction) -> Record:
    """The job spec's `operation`."""
    if isinstance(action, BatchTerminate):
        return {"kind": "terminate", "reason": action.reason}
    if isinstance(action, BatchCancel):
        return {"kind": "cancel", "reason": action.reason}
    if isinstance(action, BatchSignal):
        return {"kind": "signal", "signal": action.signal, "args": list(action.args)}
    kind = action.reset_type.upper()
    if not kind.endswith("_WORKFLOW_TASK"):
        kind += "_WORKFLOW_TASK"
    if kind not in ("FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK"):
        raise ValueError(f"reset_type must be FIRST_WORKFLOW_TASK or LAST_WORKFLOW_TASK, not {action.reset_type!r}")
    return {"kind": "reset", "reset_type": kind, "reason": action.reason, "reapply": action.reapply}


class BatchOperationHandle:
    """A batch job, by id: `describe()` and `cancel()`."""

    def __init__(self, client: Any, job_id: str) -> None:
        self.client = client
        self.job_id = job_id

    @property
    def _workflow(self) -> Any:
        return self.client.get_workflow_handle(self.job_id)

    async def describe(self) -> BatchOperationDescription:
        """The job's progress: its result once it ended, else its `progress` query (a worker answers)."""
        handle = self._workflow
        status = (await handle.describe()).status
        name = getattr(status, "name", str(status))
        if name == "COMPLETED":
            progress: Record = await handle.result()
        elif name == "RUNNING":
            progress = await handle.query("progress")
        else:
            progress = {"state": name, "total": 0, "done": 0, "failed": 0, "errors": []}
        return BatchOperationDescription(self.job_id, str(progress["state"]), int(progress["total"]),
                                         int(progress["done"]), int(progress["failed"]), list(progress["errors"]))

    async def cancel(self) -> None:
        """Stop the job: runs already acted on stay so, the rest are left alone; `describe()` says CANCELED."""
        await self._workflow.cancel()

    async def result(self) -> BatchOperationDescription:
        """Wait for the job to end, then describe it."""
        with contextlib.suppress(WorkflowFailureError):  # canceled or terminated: describe says so
            await self._workflow.result()
        return await self.describe()


async def start_batch_operation(client: Any, query: str, action: BatchAction, *, job_id: str,
                                rps: float | None = None, namespace: str = "") -> BatchOperationHandle:
    """Start a job acting on every run `query` selects (a job id already in use raises
    `WorkflowAlreadyStartedError`). `rps` bounds the operations per second (durable pauses between chunks)."""
    if rps is not None and rps <= 0:
        raise ValueError(f"rps must be positive, not {rps}")
    spec = {"namespace": namespace or client.namespace, "query": query, "operation": operation_record(action),
            "job_id": job_id, "rps": rps or 0}
    await client.start_workflow(BATCH_WORKFLOW_TYPE, spec, id=job_id, task_queue=BATCH_TASK_QUEUE)
    return BatchOperationHandle(client, job_id)


def list_batch_operations_query() -> str:
    """The visibility query that finds batch jobs (`client.list_workflows(...)`)."""
    return f"WorkflowType = '{BATCH_WORKFLOW_TYPE}'"
