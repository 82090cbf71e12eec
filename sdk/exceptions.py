"""Exceptions of the SDK, named as Temporal's Python SDK names them (DESIGN.md §9)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

__all__ = [
    "ActivityError", "ApplicationError", "CancelledError", "ChildWorkflowError", "FailureError",
    "NondeterminismError", "OstinatoError", "QueryRejectedError", "RPCError", "RestrictedWorkflowAccessError",
    "ScheduleAlreadyRunningError", "ServerError", "TerminatedError", "TimeoutError", "WorkflowAlreadyStartedError",
    "WorkflowFailureError",
    "is_cancelled_exception",
]


class OstinatoError(Exception):
    """Base of every error the SDK raises on purpose."""


class FailureError(OstinatoError):
    """An error that travels between workflows, activities and clients as an `ostinato.Failure` record."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        if cause is not None:
            self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class ApplicationError(FailureError):
    """Raised by user code to fail an activity or a workflow on purpose.

    Args:
        message: what went wrong.
        *details: values carried with the failure (converted like any payload).
        type: a name retry policies match in `non_retryable_error_types` (default: the class name).
        non_retryable: never retry, whatever the retry policy says.
        next_retry_delay: for activities, wait this long before the next attempt instead of the policy's backoff.
    """

    def __init__(self, message: str, *details: Any, type: str | None = None, non_retryable: bool = False,
                 next_retry_delay: timedelta | None = None, cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        self.details: Sequence[Any] = details
        self.type = type
        self.non_retryable = non_retryable
        self.next_retry_delay = next_retry_delay


class CancelledError(FailureError):
    """The workflow or activity was cancelled (not `asyncio.CancelledError`, which stays internal)."""

    def __init__(self, message: str = "cancelled", *details: Any) -> None:
        super().__init__(message)
        self.details: Sequence[Any] = details


class TerminatedError(FailureError):
    """The workflow was terminated."""


class TimeoutError(FailureError):  # Temporal's name; use it qualified, exceptions.TimeoutError
    """An activity or workflow ran out of time; `type` is START_TO_CLOSE, SCHEDULE_TO_START, SCHEDULE_TO_CLOSE or
    HEARTBEAT."""

    def __init__(self, message: str, *, type: str, last_heartbeat_details: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.type = type
        self.last_heartbeat_details = last_heartbeat_details


class ServerError(FailureError):
    """The engine failed something on its own account (for example a limit was exceeded)."""


class ActivityError(FailureError):
    """An activity failed for good; `cause` says why (ApplicationError, TimeoutError, CancelledError, ...)."""

    def __init__(self, message: str, *, activity_id: str, activity_type: str, scheduled_event_id: int,
                 retry_state: str, cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        self.activity_id = activity_id
        self.activity_type = activity_type
        self.scheduled_event_id = scheduled_event_id
        self.retry_state = retry_state


class ChildWorkflowError(FailureError):
    """A child workflow failed, timed out, was cancelled or terminated; `cause` says which."""

    def __init__(self, message: str, *, workflow_id: str, run_id: str, workflow_type: str, retry_state: str = "",
                 cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = workflow_type
        self.retry_state = retry_state


class WorkflowFailureError(OstinatoError):
    """Raised by a client waiting on a workflow that did not complete; `cause` is the workflow's failure."""

    def __init__(self, message: str = "workflow execution failed", *, cause: BaseException | None = None,
                 status: str = "FAILED") -> None:
        super().__init__(message)
        self.status = status
        if cause is not None:
            self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class WorkflowAlreadyStartedError(OstinatoError):
    def __init__(self, workflow_id: str, workflow_type: str = "", run_id: str = "") -> None:
        super().__init__(f"workflow {workflow_id!r} is already started" + (f" (run {run_id})" if run_id else ""))
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.run_id = run_id


class NondeterminismError(OstinatoError):
    """Workflow code did something different from what its history records: the workflow task fails and is
    retried (history is untouched) until the code is fixed or the change is guarded with `workflow.patched`."""


class RestrictedWorkflowAccessError(NondeterminismError):
    """Workflow code called something that breaks determinism (wall clock, random, uuid4, threads, I/O)."""


class QueryRejectedError(OstinatoError):
    pass


class RPCError(OstinatoError):
    """The server refused or could not answer a request; `status` is the HTTP status, `code` its error code."""

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def is_cancelled_exception(exception: BaseException) -> bool:
    """Whether `exception` means "cancelled": asyncio's CancelledError, ours, or an activity or child workflow error
    caused by a cancellation (Temporal's helper, so a workflow can tell a cancellation from a failure)."""
    return isinstance(exception, asyncio.CancelledError | CancelledError) or (
        isinstance(exception, ActivityError | ChildWorkflowError) and isinstance(exception.cause, CancelledError))


class ScheduleAlreadyRunningError(OstinatoError):
    """A schedule with this id already exists (temporalio's name)."""

    def __init__(self, message: str = "schedule already running") -> None:
        super().__init__(message)
