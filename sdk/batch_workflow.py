"""The batch operation job: a workflow of the engine's own (type `ostinato.BatchOperation`, queue `ostinato-batch`)
that pages through a visibility query and terminates, cancels, signals or resets every run it selects.

Being a workflow is what makes the job durable engine state: its cursor, counters and rate-limit pauses are in its
history, its timers are the engine's durable timers, and after a server crash it resumes where its history ends. Its
I/O is in activities: reading a page of the query (the visibility store is the frontend's, not the core's), and
sending one command per run with the request id `batch/<job id>/<run id>`, so an activity retried after a crash
sends the same commands again and each target drops the duplicate (a run remembers its recent request ids; a reset
derives its new run's id from it). Temporal runs its batch operations as system workflows in the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from ostinato.schemas.wire import REJECTED, command_type
from ostinato.sdk import activity, workflow
from ostinato.sdk.common import RetryPolicy
from ostinato.sdk.exceptions import ActivityError, CancelledError
from ostinato.streams.schedules import SCHEDULE_WORKFLOW_TYPE

Record = dict[str, Any]
BATCH_WORKFLOW_TYPE = "ostinato.BatchOperation"
# Runs of the engine's own that a query may select but no batch acts on: batch jobs and schedules (which the
# schedules API manages; terminating one would delete the schedule).
ENGINE_TYPES = frozenset({BATCH_WORKFLOW_TYPE, SCHEDULE_WORKFLOW_TYPE})
BATCH_TASK_QUEUE = "ostinato-batch"
PAGE_SIZE = 1000  # run ids per page of the query: one activity result, far under the payload limit
MAX_CHUNK = 200  # commands per activity when no rate limit is set
ACTIVITY_TIMEOUT = timedelta(seconds=10)  # a chunk takes well under a second; a dead worker's is retried soon
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


@workflow.defn(name=BATCH_WORKFLOW_TYPE)
class BatchOperation:
    """One batch job. Its argument is the job's spec (see `sdk/batch.py:start_batch_operation`); its result and its
    `progress` query are `{"state", "total", "done", "failed", "errors"}`."""

    def __init__(self) -> None:
        self.state = "RUNNING"
        self.total = 0
        self.done = 0
        self.failed = 0
        self.errors: list[str] = []  # the first few failures, for describe

    @workflow.query
    def progress(self) -> Record:
        return {"state": self.state, "total": self.total, "done": self.done, "failed": self.failed,
                "errors": list(self.errors)}

    @workflow.run
    async def run(self, spec: Record) -> Record:
        # The job acts in its own namespace under its own id, whatever the spec says: the server's batch worker
        # calls the API with a token that may write every namespace, so the job's namespace is its authority.
        info = workflow.info()
        spec = {**spec, "namespace": info.namespace, "job_id": info.workflow_id}
        options: Record = {"start_to_close_timeout": ACTIVITY_TIMEOUT, "retry_policy": _RETRY}
        rps = float(spec.get("rps") or 0)
        chunk = max(1, min(MAX_CHUNK, int(rps))) if rps else MAX_CHUNK
        try:
            self.total = int(await workflow.execute_activity("ostinato.batch.count", spec, **options))
            token = ""
            while True:
                page: Record = await workflow.execute_activity("ostinato.batch.page", {"spec": spec, "token": token},
                                                       **options)
                targets: list[list[str]] = page["targets"]
                for i in range(0, len(targets), chunk):
                    part = targets[i:i + chunk]
                    outcome: Record = await workflow.execute_activity("ostinato.batch.act",
                                                              {"spec": spec, "targets": part}, **options)
                    self.done += int(outcome["done"])
                    self.failed += int(outcome["failed"])
                    self.errors = (self.errors + list(outcome["errors"]))[:10]
                    if rps:
                        await workflow.sleep(timedelta(seconds=len(part) / rps))  # a durable timer
                token = page["token"]
                if not token:
                    break
            self.state = "COMPLETED"
        except asyncio.CancelledError:
            self.state = "CANCELED"  # the job was canceled: what was done stays done, the rest is left alone
        except ActivityError as error:  # canceled while a chunk ran: the chunk's outcome is unknown, not counted
            if not isinstance(error.cause, CancelledError):
                raise
            self.state = "CANCELED"
        self.total = max(self.total, self.done + self.failed)
        return self.progress()


def batch_activities(client: Any) -> list[Callable[..., Awaitable[Any]]]:
    """The job's activities, bound to a connected `Client` (the server's own, or a test's)."""
    service = client.service

    @activity.defn(name="ostinato.batch.count")
    async def count(spec: Record) -> int:
        return int(await service.count(spec["namespace"], spec["query"]))

    @activity.defn(name="ostinato.batch.page")
    async def page(args: Record) -> Record:
        spec = args["spec"]
        rows, token = await service.list_page(spec["namespace"], spec["query"], PAGE_SIZE, args["token"])
        targets = [[r["workflow_id"], r["run_id"]] for r in rows
                   if r["workflow_type"] not in ENGINE_TYPES and r["workflow_id"] != spec["job_id"]]
        return {"targets": targets, "token": token}

    @activity.defn(name="ostinato.batch.act")
    async def act(args: Record) -> Record:
        spec = args["spec"]
        body = _command_body(client, spec["operation"])
        done = failed = 0
        errors: list[str] = []
        for workflow_id, run_id in args["targets"]:
            request_id = f"batch/{spec['job_id']}/{run_id}"
            kind, record = await service.send(spec["namespace"], workflow_id, run_id, body, request_id,
                                              f"batch/{spec['job_id']}")
            if kind == REJECTED:
                failed += 1
                if len(errors) < 10:
                    errors.append(f"{workflow_id}/{run_id}: {record['code']}: {record['message']}")
            else:
                done += 1
        return {"done": done, "failed": failed, "errors": errors}

    return [count, page, act]


def _command_body(client: Any, operation: Record) -> tuple[str, Record]:
    """The command each selected run gets."""
    kind = operation["kind"]
    reason = operation.get("reason") or "batch operation"
    if kind == "terminate":
        return command_type("TerminateWorkflowExecution"), {"reason": reason, "details": [],
                                                             "first_execution_run_id": ""}
    if kind == "cancel":
        return command_type("RequestCancelWorkflowExecution"), {"reason": reason, "external": None,
                                                                 "first_execution_run_id": ""}
    if kind == "signal":
        return command_type("SignalWorkflowExecution"), {
            "signal_name": operation["signal"], "input": client.data_converter.encode(list(operation["args"])),
            "header": {}, "external": None}
    if kind == "reset":
        return command_type("ResetWorkflowExecution"), {
            "event_id": 0, "reset_type": operation["reset_type"], "reason": reason,
            "reapply_signals": bool(operation.get("reapply", True))}
    raise ValueError(f"unknown batch operation {kind!r}")
