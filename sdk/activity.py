"""The activity API: `@activity.defn`, and thin functions over the running activity's context (STYLE.md 11)."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

__all__ = [
    "ActivityDefinition",
    "ActivityInfo",
    "definition_of",
    "defn",
    "heartbeat",
    "in_activity",
    "info",
    "is_cancelled",
]

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__ostinato_activity__"


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


@dataclass(frozen=True)
class ActivityContext:
    """What the worker gives a running activity; the module functions read it. Not for user code.

    Attributes:
        info: the activity's info.
        heartbeat: records details and sends them (throttled); may raise `CancelledError` in a sync activity
            whose cancellation was requested.
        is_cancelled: whether the activity was asked to stop.
    """

    info: ActivityInfo
    heartbeat: Callable[[Sequence[Any]], None]
    is_cancelled: Callable[[], bool]


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


def in_activity() -> bool:
    """Whether the caller runs inside an activity (on the event loop or in a worker thread)."""
    return _current.get(None) is not None


def info() -> ActivityInfo:
    """The running activity's info.

    Raises:
        RuntimeError: not in an activity.
    """
    return _context().info


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
    _context().heartbeat(details)


def is_cancelled() -> bool:
    """Whether cancellation of this activity was requested (learnt from a heartbeat's answer).

    Raises:
        RuntimeError: not in an activity.
    """
    return _context().is_cancelled()
