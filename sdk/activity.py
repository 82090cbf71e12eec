"""The activity API: `@activity.defn`, and thin functions over the running activity's context (STYLE.md 11)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar, overload

Record = dict[str, Any]

__all__ = [
    "ActivityDefinition",
    "ActivityInfo",
    "Info",
    "LoggerAdapter",
    "client",
    "definition_of",
    "defn",
    "heartbeat",
    "in_activity",
    "info",
    "is_cancelled",
    "is_worker_shutdown",
    "logger",
    "raise_complete_async",
    "wait_for_cancelled",
    "wait_for_cancelled_sync",
    "wait_for_worker_shutdown",
    "wait_for_worker_shutdown_sync",
]

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__ostinato_activity__"
CANCEL_POLL_S = 0.05  # how often wait_for_cancelled looks at the cancellation flag the heartbeats set


@dataclass(frozen=True)
class ActivityDefinition:
    """What `@activity.defn` records on a function: the activity type name workflows schedule, and how to run it.

    Attributes:
        name: the activity type, as workflows name it in `execute_activity`.
        fn: the function (or bound method) to call.
        is_async: True for `async def` activities (run on the worker's event loop), False for plain functions
            (run in the worker's thread pool).
    """

    name: str
    fn: Callable[..., Any]
    is_async: bool


@overload
def defn(fn: F, /) -> F: ...


@overload
def defn(*, name: str | None = None) -> Callable[[F], F]: ...


def defn(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Make a function an activity, as `@activity.defn` or `@activity.defn(name="charge-card")`.

    `async def` activities run on the worker's event loop and must not block it; plain functions run in the
    worker's thread pool. Arguments and the result travel through the data converter, guided by the type hints.

    Args:
        fn: the function, when used without parentheses.
        name: the activity type workflows schedule; the function's `__name__` by default.

    Returns:
        The function itself, unchanged apart from the definition stored on it.
    """

    def decorate(f: F) -> F:
        if not callable(f):
            raise TypeError(f"@activity.defn needs a function, not {type(f).__name__}")
        activity_name = name if name is not None else getattr(f, "__name__", None)
        if not activity_name:
            raise TypeError(f"@activity.defn cannot name {f!r}: pass name=...")
        setattr(f, ATTRIBUTE, ActivityDefinition(activity_name, f, _is_async(f)))
        return f

    return decorate(fn) if fn is not None else decorate


def definition_of(fn: Callable[..., Any]) -> ActivityDefinition:
    """The definition `@activity.defn` stored on `fn`; for a bound method it calls that bound method.

    Raises:
        TypeError: `fn` is not decorated with `@activity.defn`.
    """
    found = getattr(fn, ATTRIBUTE, None)
    if not isinstance(found, ActivityDefinition):
        label = getattr(fn, "__qualname__", None) or repr(fn)
        raise TypeError(f"{label} is not an activity: decorate it with @activity.defn")
    if found.fn is not fn and inspect.ismethod(fn):
        return replace(found, fn=fn)  # registered as `obj.method`: call it bound to that object
    return found


def _is_async(fn: Callable[..., Any]) -> bool:
    """`async def` functions and methods, and objects whose `__call__` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    return not (inspect.isroutine(fn) or inspect.isclass(fn)) and inspect.iscoroutinefunction(type(fn).__call__)


@dataclass(frozen=True)
class ActivityInfo:
    """What the running activity knows about itself (`activity.info()`).

    Attributes:
        activity_id: the id the workflow gave this activity (unique within the run).
        activity_type: the activity's registered name.
        attempt: 1 for the first attempt, then 2, 3, ... as the retry policy retries it.
        namespace: the workflow's namespace.
        workflow_id: the id of the workflow that scheduled the activity.
        run_id: the run of that workflow.
        workflow_type: the type of that workflow.
        task_queue: the queue the task came from.
        scheduled_time: when the workflow scheduled the activity (UTC).
        current_attempt_scheduled_time: when this attempt was scheduled (UTC; later than `scheduled_time` on a
            retry).
        start_to_close_timeout: how long one attempt may run.
        schedule_to_close_timeout: how long all attempts together may take.
        heartbeat_timeout: the longest allowed gap between heartbeats.
        heartbeat_details: the details of the last heartbeat of a previous attempt (decoded without type hints,
            so a dataclass arrives as a dict), for a retried activity to resume from; empty on a first attempt.
        task_token: opaque bytes naming this attempt, for completing it from elsewhere (`raise_complete_async`).
        is_local: whether this is a local activity, run inside its workflow's task on the workflow's worker.
    """

    activity_id: str
    activity_type: str
    attempt: int
    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    scheduled_time: datetime
    current_attempt_scheduled_time: datetime
    start_to_close_timeout: timedelta | None
    schedule_to_close_timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    heartbeat_details: Sequence[Any]
    task_token: bytes = b""  # names this attempt for `client.get_async_activity_handle(task_token=...)`
    is_local: bool = False  # a local activity (`workflow.execute_local_activity`): run by the workflow's worker

    # Temporal's names for the workflow's run and namespace.
    @property
    def workflow_run_id(self) -> str:
        return self.run_id

    @property
    def workflow_namespace(self) -> str:
        return self.namespace

    def logger_details(self) -> dict[str, Any]:
        """What `activity.logger` adds to each line (Temporal's keys)."""
        return {"activity_id": self.activity_id, "activity_type": self.activity_type, "attempt": self.attempt,
                "namespace": self.namespace, "task_queue": self.task_queue, "workflow_id": self.workflow_id,
                "workflow_run_id": self.run_id, "workflow_type": self.workflow_type}


Info = ActivityInfo  # Temporal's name for it


@dataclass(frozen=True)
class ActivityContext:
    """What the worker gives a running activity; the module functions read it. Not for user code.

    Attributes:
        info: the activity's info.
        heartbeat: records details and sends them (throttled); may raise `CancelledError` in a sync activity
            whose cancellation was requested.
        is_cancelled: whether the activity was asked to stop.
        worker_shutdown: set once the worker running the activity starts shutting down (before it stops its running
            activities), so an activity can tell a shutdown from a cancellation request.
    """

    info: ActivityInfo
    heartbeat: Callable[[Sequence[Any]], None]
    is_cancelled: Callable[[], bool]
    worker_shutdown: threading.Event = field(default_factory=threading.Event)
    client: Any = None  # the worker's `ostinato.client.Client` (`activity.client()`)
    outbound: Any = None  # the attempt's ActivityOutboundInterceptor chain, when the worker has interceptors


_current: contextvars.ContextVar[ActivityContext] = contextvars.ContextVar("ostinato_activity")


def set_context(context: ActivityContext) -> contextvars.Token[ActivityContext]:
    """Make `context` the current activity's (the executor does this in the activity's own context copy)."""
    return _current.set(context)


def _context() -> ActivityContext:
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("not in an activity: this function can only be called from an activity "
                           "running on a worker") from None


class _CompleteAsyncError(BaseException):
    """Raised by `raise_complete_async()`: not an error, so `except Exception` in the activity lets it through."""


def raise_complete_async() -> NoReturn:
    """End the activity function without answering: something else completes the attempt later, through
    `client.get_async_activity_handle(task_token=activity.info().task_token)` (`complete`, `fail`, `heartbeat`,
    `report_cancellation`). The attempt's timeouts still apply, as in Temporal."""
    raise _CompleteAsyncError()


TOKEN_VERSION = 1


def task_token(task: Record) -> bytes:
    """The token of an activity task's attempt: what an answer to it must name. Opaque to users (JSON inside)."""
    return json.dumps({"v": TOKEN_VERSION, "namespace": task["namespace"], "workflow_id": task["workflow_id"],
                       "run_id": task["run_id"], "scheduled_event_id": task["scheduled_event_id"],
                       "attempt": task["attempt"], "activity_id": task["activity_id"]},
                      separators=(",", ":")).encode()


def parse_task_token(token: bytes) -> Record:
    """The attempt a token names; ValueError for bytes that are not a token."""
    try:
        fields = json.loads(token)
        if not isinstance(fields, dict) or fields.get("v") != TOKEN_VERSION:
            raise ValueError("not a version 1 token")
        return {k: fields[k] for k in ("namespace", "workflow_id", "run_id", "scheduled_event_id", "attempt",
                                       "activity_id")}
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"not an Ostinato activity task token: {error}") from None


def client() -> Any:
    """The client of the worker running this activity (Temporal's `activity.client()`): to signal or start
    workflows from an activity, or complete another activity asynchronously."""
    found = _context().client
    if found is None:
        raise RuntimeError("this activity runs without a client (an ActivityEnvironment given none)")
    return found


def in_activity() -> bool:
    """Whether the caller runs inside an activity (on the event loop or in a worker thread)."""
    return _current.get(None) is not None


def info() -> ActivityInfo:
    """The running activity's info.

    Raises:
        RuntimeError: not in an activity.
    """
    context = _context()
    return context.info if context.outbound is None else context.outbound.info()


def heartbeat(*details: Any) -> None:
    """Tell the workflow engine the activity is alive, with progress `details` a retry can resume from.

    Cheap to call often: the latest details are kept and sent at most every 0.8 x heartbeat timeout (every 30 s
    without one), the first at once. A heartbeat's answer is how a cancellation request reaches the activity:
    an `async` activity is then cancelled (`asyncio.CancelledError` is raised where it awaits), and in a
    plain-function activity the next `heartbeat()` raises `ostinato.exceptions.CancelledError`.

    Args:
        *details: values to record (converted like any payload).

    Raises:
        RuntimeError: not in an activity.
        CancelledError: (plain-function activities) the workflow asked the activity to stop.
    """
    context = _context()
    if context.outbound is None:
        context.heartbeat(details)
    else:
        context.outbound.heartbeat(*details)


def is_cancelled() -> bool:
    """Whether cancellation of this activity was requested (learnt from a heartbeat's answer).

    Raises:
        RuntimeError: not in an activity.
    """
    return _context().is_cancelled()


async def wait_for_cancelled() -> None:
    """Return once cancellation of this activity is requested (learnt, like `is_cancelled()`, from a heartbeat's
    answer, so the activity must keep heartbeating). In an `async` activity the request also cancels the activity's
    task, so this await usually ends in `asyncio.CancelledError`, as in Temporal.

    The flag is looked at every 50 ms.

    Raises:
        RuntimeError: not in an activity.
    """
    context = _context()
    while not context.is_cancelled():
        await asyncio.sleep(CANCEL_POLL_S)


def wait_for_cancelled_sync(timeout: timedelta | float | None = None) -> None:
    """Block a plain-function activity until its cancellation is requested, or `timeout` passes (it returns then
    too: check `is_cancelled()`). The request is learnt from a heartbeat's answer, so heartbeat while waiting, e.g.
    from another thread. The flag is looked at every 50 ms.

    Raises:
        RuntimeError: not in an activity.
    """
    context = _context()
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    deadline = None if seconds is None else time.monotonic() + seconds
    while not context.is_cancelled():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        time.sleep(CANCEL_POLL_S if left is None else min(CANCEL_POLL_S, left))


def is_worker_shutdown() -> bool:
    """Whether the worker running this activity is shutting down. A worker shutdown stops running activities as a
    cancellation does (an `async` activity's task is cancelled, a plain function's next `heartbeat()` raises), so
    this is how an activity tells the two apart; unlike a cancellation request, the attempt is then retried on
    another worker.

    Raises:
        RuntimeError: not in an activity.
    """
    return _context().worker_shutdown.is_set()


async def wait_for_worker_shutdown() -> None:
    """Return once the worker running this activity starts shutting down (the flag is looked at every 50 ms). The
    shutdown also cancels an `async` activity's task, so this await may end in `asyncio.CancelledError`, as in
    Temporal once its graceful shutdown timeout has passed.

    Raises:
        RuntimeError: not in an activity.
    """
    shutdown = _context().worker_shutdown
    while not shutdown.is_set():
        await asyncio.sleep(CANCEL_POLL_S)


def wait_for_worker_shutdown_sync(timeout: timedelta | float | None = None) -> None:
    """Block a plain-function activity until the worker running it starts shutting down, or `timeout` passes (it
    returns then too: check `is_worker_shutdown()`).

    Raises:
        RuntimeError: not in an activity.
    """
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    _context().worker_shutdown.wait(seconds)


class LoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """`activity.logger`: in an activity, each line carries the activity's details, appended to the message and as
    `extra["temporal_activity"]` (as Temporal's adapter names it, so log pipelines built for Temporal read it).

    Attributes:
        activity_info_on_message: append the details to the message (default True).
        activity_info_on_extra: add `temporal_activity` to the record (default True).
        full_activity_info_on_extra: add the whole `activity.info()` as `activity_info` (default False).
    """

    def __init__(self, logger: logging.Logger, extra: dict[str, Any] | None = None) -> None:
        super().__init__(logger, extra or {})
        self.activity_info_on_message = True
        self.activity_info_on_extra = True
        self.full_activity_info_on_extra = False

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        context = _current.get(None)
        if context is None:
            return msg, kwargs
        details = context.info.logger_details()
        if self.activity_info_on_message:
            msg = f"{msg} ({details})"
        extra = dict(kwargs.get("extra") or {})  # a copy: the caller's dict may be reused
        if self.activity_info_on_extra:
            extra.setdefault("temporal_activity", details)
        if self.full_activity_info_on_extra:
            extra.setdefault("activity_info", context.info)
        kwargs["extra"] = extra
        return msg, kwargs

    @property
    def base_logger(self) -> logging.Logger:
        """The logger underneath, to add handlers or formatters to."""
        return self.logger


logger = LoggerAdapter(logging.getLogger("ostinato.activity"))
"""Logs with the running activity's details (see `LoggerAdapter`)."""
