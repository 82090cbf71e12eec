"""The workflow API (`from ostinato import workflow`): decorators for workflow classes and thin functions over
the running workflow, named as in Temporal's Python SDK.

Workflow code must be deterministic: it runs again from history after a crash or a cache eviction and must
make the same decisions. Time, randomness and ids come from here (`workflow.now()`, `workflow.random()`,
`workflow.uuid4()`); waiting is `workflow.sleep`, `asyncio.sleep` or `workflow.wait_condition`, and
`workflow.wait` / `workflow.as_completed` replace `asyncio.wait` / `asyncio.as_completed`; I/O belongs in activities.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any, NoReturn, TypeVar, cast, overload

from ostinato.sdk import _context
from ostinato.sdk import _definitions as defs
from ostinato.sdk import _instance as runtime
from ostinato.sdk import exceptions as exc
from ostinato.sdk import interceptor as icpt
from ostinato.sdk._instance import ContinueAsNew, ReadOnlyContextError, WorkflowInfo
from ostinato.sdk._wait import as_completed, wait
from ostinato.sdk.common import RetryPolicy, to_ms
from ostinato.sdk.search_attributes import (
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
    encode_updates,
    to_payloads,
)
from ostinato.sdk.versioning import VersioningBehavior

__all__ = [
    "ActivityCancellationType",
    "ChildWorkflowCancellationType",
    "ChildWorkflowHandle",
    "ExternalWorkflowHandle",
    "HandlerUnfinishedPolicy",
    "Info",
    "LoggerAdapter",
    "ParentClosePolicy",
    "ReadOnlyContextError",
    "WorkflowInfo",
    "all_handlers_finished",
    "as_completed",
    "continue_as_new",
    "continue_as_new_suggested",
    "defn",
    "deprecate_patch",
    "execute_activity",
    "execute_activity_method",
    "execute_child_workflow",
    "execute_local_activity",
    "execute_local_activity_method",
    "get_external_workflow_handle",
    "get_last_completion_result",
    "get_last_failure",
    "has_last_completion_result",
    "history_length",
    "in_workflow",
    "info",
    "init",
    "logger",
    "memo",
    "memo_value",
    "now",
    "patched",
    "publish",
    "query",
    "random",
    "run",
    "set_dynamic_query_handler",
    "set_dynamic_signal_handler",
    "set_query_handler",
    "set_signal_handler",
    "set_update_handler",
    "signal",
    "sleep",
    "start_activity",
    "start_activity_method",
    "start_child_workflow",
    "start_local_activity",
    "start_local_activity_method",
    "time",
    "unsafe",
    "update",
    "upsert_memo",
    "upsert_search_attributes",
    "uuid4",
    "wait",
    "wait_condition",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
Record = dict[str, Any]
Info = WorkflowInfo  # Temporal's name for it


class ActivityCancellationType(StrEnum):
    TRY_CANCEL = "TRY_CANCEL"  # ask the activity to stop and raise CancelledError in the workflow at once
    WAIT_CANCELLATION_COMPLETED = "WAIT_CANCELLATION_COMPLETED"  # ask, and wait until the activity has stopped
    ABANDON = "ABANDON"  # do not tell the activity; raise CancelledError in the workflow at once


class ChildWorkflowCancellationType(StrEnum):
    """What cancelling the wait for a child (its handle's `cancel()`, or the parent's own cancellation reaching the
    `await`) does; Temporal's names, and its default, WAIT_CANCELLATION_COMPLETED."""

    ABANDON = "ABANDON"  # do not tell the child; the wait raises CancelledError at once
    TRY_CANCEL = "TRY_CANCEL"  # ask the child to cancel; the wait raises CancelledError at once
    WAIT_CANCELLATION_COMPLETED = "WAIT_CANCELLATION_COMPLETED"  # ask, and wait for the child's own outcome
    WAIT_CANCELLATION_REQUESTED = "WAIT_CANCELLATION_REQUESTED"  # ask, and raise once the child has the request


class ParentClosePolicy(StrEnum):
    TERMINATE = "TERMINATE"
    ABANDON = "ABANDON"
    REQUEST_CANCEL = "REQUEST_CANCEL"


# -- decorators -------------------------------------------------------------------------------------------------

@overload
def defn(cls: type[T]) -> type[T]: ...
@overload
def defn(*, name: str | None = None, sandboxed: bool = True,
         versioning_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED) -> Callable[[type[T]], type[T]]: ...


def defn(cls: type[T] | None = None, *, name: str | None = None, sandboxed: bool = True,
         versioning_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED) -> Any:
    """Mark a class as a workflow; its name (the class name unless given) is the workflow type.

    `sandboxed` is accepted for Temporal's `@workflow.defn(sandboxed=False)` and changes nothing: Ostinato has no
    sandbox, every workflow runs under the same determinism guards. `versioning_behavior` (worker versioning) says
    whether the type's runs stay on the build that started them (PINNED) or move to the queue's current build at
    their next task (AUTO_UPGRADE); unspecified takes the versioned worker's default."""
    def wrap(target: type[T]) -> type[T]:
        setattr(target, defs.DEFN_ATTR, defs.build(target, name, versioning_behavior))
        return target

    return wrap(cls) if cls is not None else wrap


def init(fn: F) -> F:
    """Mark `__init__` as taking the workflow's arguments (the same as `run`'s), so state can be set up before any
    signal or update handler runs (Temporal's `@workflow.init`)."""
    setattr(fn, defs.INIT_ATTR, True)
    return fn


def set_signal_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Handle signal `name` with `handler` (a plain callable) from now on; None removes it. Signals that came before
    a handler existed are delivered to it at once."""
    runtime.current().set_signal_handler(name, handler)


def set_query_handler(name: str, handler: Callable[..., Any] | None) -> None:
    runtime.current().set_query_handler(name, handler)


def set_dynamic_signal_handler(handler: Callable[..., Any] | None) -> None:
    """Handle every signal without a handler of its own with `handler(name, args)` from now on (None removes it);
    signals that waited for a handler are delivered to it at once."""
    runtime.current().set_signal_handler("", handler)


def set_dynamic_query_handler(handler: Callable[..., Any] | None) -> None:
    """Answer every query without a handler of its own with `handler(name, args)` (None removes it)."""
    runtime.current().set_query_handler("", handler)


def set_update_handler(name: str, handler: Callable[..., Any] | None, *,
                       validator: Callable[..., None] | None = None) -> None:
    runtime.current().set_update_handler(name, handler, validator)


def run(fn: F) -> F:
    """The workflow's entry point: an async method whose arguments are the workflow's input."""
    setattr(fn, defs.RUN_ATTR, True)
    return fn


@overload
def signal(fn: F) -> F: ...
@overload
def signal(*, name: str | None = None, dynamic: bool = False,
           unfinished_policy: HandlerUnfinishedPolicy | None = None) -> Callable[[F], F]: ...


def signal(fn: F | None = None, *, name: str | None = None, dynamic: bool = False,
           unfinished_policy: HandlerUnfinishedPolicy | None = None) -> Any:
    """A method called when the workflow receives the signal (the method name unless given). `dynamic=True` handles
    every signal without a handler of its own, called as `(self, name, args)` with the arguments as plain JSON
    values (Temporal passes raw payloads there)."""
    if dynamic and name:
        raise TypeError("a dynamic signal handler has no name")

    def wrap(target: F) -> F:
        setattr(target, defs.SIGNAL_ATTR, "" if dynamic else (name or target.__name__))
        if unfinished_policy is not None:
            setattr(target, defs.UNFINISHED_ATTR, int(unfinished_policy))
        return target

    return wrap(fn) if fn is not None else wrap


@overload
def query(fn: F) -> F: ...
@overload
def query(*, name: str | None = None, dynamic: bool = False) -> Callable[[F], F]: ...


def query(fn: F | None = None, *, name: str | None = None, dynamic: bool = False) -> Any:
    """A plain (non-async) method answering questions about the workflow's state; it must not change it.
    `dynamic=True` answers every query without a handler of its own, called as `(self, name, args)`."""
    if dynamic and name:
        raise TypeError("a dynamic query handler has no name")

    def wrap(target: F) -> F:
        setattr(target, defs.QUERY_ATTR, "" if dynamic else (name or target.__name__))
        return target

    return wrap(fn) if fn is not None else wrap


class HandlerUnfinishedPolicy(IntEnum):
    """What a run that finishes while a signal or update handler still runs does (Temporal's values): log a warning
    and abandon it (the default), or abandon it silently."""

    WARN_AND_ABANDON = 1
    ABANDON = 2


@overload
def update(fn: F) -> F: ...
@overload
def update(*, name: str | None = None, dynamic: bool = False,
           unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON,
           ) -> Callable[[F], F]: ...


def update(fn: F | None = None, *, name: str | None = None, dynamic: bool = False,
           unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON) -> Any:
    """A method (sync or async; it may run activities and wait) called when a client updates the workflow; its
    return value is the update's result, a `FailureError` it raises the update's failure. `@<method>.validator`
    registers a plain method that runs first with the same arguments and rejects the update by raising: a
    rejected update leaves nothing in history. `dynamic=True` handles every update without a handler of its own,
    called as `(self, name, args)` with `args` the decoded values (plain JSON types; Temporal passes raw
    payloads)."""
    if dynamic and name:
        raise TypeError("a dynamic update handler has no name")

    def wrap(target: F) -> F:
        update_name = "" if dynamic else (name or target.__name__)
        setattr(target, defs.UPDATE_ATTR, update_name)
        setattr(target, defs.UNFINISHED_ATTR, unfinished_policy)

        def validator(check: Callable[..., None]) -> Callable[..., None]:
            setattr(check, defs.VALIDATOR_ATTR, update_name)
            return check

        cast(Any, target).validator = validator  # `@<handler>.validator`, as in Temporal's SDK
        return target

    return wrap(fn) if fn is not None else wrap


def all_handlers_finished() -> bool:
    """Whether no signal or update handler is running: `await workflow.wait_condition(workflow.all_handlers_finished)`
    before returning lets every accepted update complete instead of being abandoned."""
    return runtime.current().all_handlers_finished()


# -- the running workflow ---------------------------------------------------------------------------------------

def info() -> WorkflowInfo:
    return _outbound(runtime.current()).info()


def _outbound(instance: runtime.WorkflowInstance) -> icpt.WorkflowOutboundInterceptor:
    """The run's outbound interceptor chain (its end, `OUTBOUND_ROOT`, when the worker has no interceptors)."""
    outbound: icpt.WorkflowOutboundInterceptor = instance.outbound or OUTBOUND_ROOT
    return outbound


def get_last_failure() -> BaseException | None:
    """Why the previous run of this chain failed (a retry, or a cron run after a failed one), None otherwise:
    Temporal's `workflow.get_last_failure()`."""
    record = runtime.current().last_failure
    return None if record is None else runtime.current().converter.decode_failure(record)


def has_last_completion_result() -> bool:
    """Whether an earlier run of this cron chain completed (`get_last_completion_result` has its result)."""
    return bool(runtime.current().last_completion_result)


def get_last_completion_result(type_hint: Any = None) -> Any:
    """The result of the last run of this cron chain that completed (None if none did), decoded as `type_hint`:
    Temporal's `workflow.get_last_completion_result()`."""
    instance = runtime.current()
    return instance.converter.decode_one(instance.last_completion_result, type_hint)


def now() -> datetime:
    """The workflow's time (UTC): when the current workflow task started, the same on every replay."""
    return runtime.current().now


def time() -> float:
    """`now()` as seconds since the epoch, for code written against `time.time()`."""
    return runtime.current().now.timestamp()


def random() -> Any:
    """A `random.Random` seeded from the run, so replays draw the same numbers."""
    instance = runtime.current()
    instance.check_writable("workflow.random()")
    return instance.random


def uuid4() -> uuid.UUID:
    instance = runtime.current()
    instance.check_writable("workflow.uuid4()")
    return uuid.UUID(int=instance.random.getrandbits(128), version=4)


def in_workflow() -> bool:
    return _context.in_workflow()


def history_length() -> int:
    return runtime.current().history_length


def continue_as_new_suggested() -> bool:
    """True when history grew past the warning threshold: continue as new soon, carrying the state over."""
    return runtime.current().suggest_continue_as_new


class unsafe:  # lower case: Temporal's name, used as `workflow.unsafe.imports_passed_through()`
    """What Temporal keeps for advanced cases, as static methods.

    Ostinato runs workflow code without a sandbox (determinism is kept by guards on the clock, randomness, threads
    and I/O), so there is nothing to pass imports through: `imports_passed_through()` is there so Temporal code
    ports unchanged, and does nothing.
    """

    def __init__(self) -> None:
        raise NotImplementedError("workflow.unsafe is a namespace of static methods")

    @staticmethod
    def is_replaying() -> bool:
        """Whether the running activation replays history (its commands were already recorded) rather than
        deciding anew.

        Raises:
            RuntimeError: not in a workflow.
        """
        return runtime.current().replaying

    @staticmethod
    def in_sandbox() -> bool:
        """Always False: Ostinato has no workflow sandbox."""
        return False

    @staticmethod
    @contextlib.contextmanager
    def imports_passed_through() -> Iterator[None]:
        """Does nothing: without a sandbox every import is already the process's own module."""
        yield


class LoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """`workflow.logger`: silent while the workflow replays history (a line is logged once, when its code first
    runs), and each line carries the workflow's details, appended to the message and as `extra["temporal_workflow"]`
    (as Temporal's adapter names it, so log pipelines built for Temporal read it).

    Attributes:
        workflow_info_on_message: append the details to the message (default True).
        workflow_info_on_extra: add `temporal_workflow` to the record (default True).
        full_workflow_info_on_extra: add the whole `workflow.info()` as `workflow_info` (default False).
        log_during_replay: log while replaying too (default False).
    """

    def __init__(self, logger: logging.Logger, extra: dict[str, Any] | None = None) -> None:
        super().__init__(logger, extra or {})
        self.workflow_info_on_message = True
        self.workflow_info_on_extra = True
        self.full_workflow_info_on_extra = False
        self.log_during_replay = False

    def isEnabledFor(self, level: int) -> bool:
        replaying = _context.in_workflow() and runtime.current().replaying
        return (self.log_during_replay or not replaying) and self.logger.isEnabledFor(level)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        if not _context.in_workflow():
            return msg, kwargs
        instance = runtime.current()
        details = _logger_details(instance)
        if self.workflow_info_on_message:
            msg = f"{msg} ({details})"
        extra = dict(kwargs.get("extra") or {})  # a copy: the caller's dict may be reused
        if self.workflow_info_on_extra:
            extra.setdefault("temporal_workflow", details)
        if self.full_workflow_info_on_extra and instance.info is not None:
            extra.setdefault("workflow_info", instance.info)
        kwargs["extra"] = extra
        return msg, kwargs

    @property
    def base_logger(self) -> logging.Logger:
        """The logger underneath, to add handlers or formatters to."""
        return self.logger


def _logger_details(instance: runtime.WorkflowInstance) -> dict[str, Any]:
    """Temporal's keys; before the run's start event is applied only the ids are known."""
    details: dict[str, Any] = {"namespace": instance.namespace, "run_id": instance.run_id,
                               "workflow_id": instance.workflow_id}
    if instance.info is not None:
        details.update(attempt=instance.info.attempt, task_queue=instance.info.task_queue,
                       workflow_type=instance.info.workflow_type)
    return dict(sorted(details.items()))


logger = LoggerAdapter(logging.getLogger("ostinato.workflow"))
"""Logs with the running workflow's details, and not while it replays (see `LoggerAdapter`)."""


async def sleep(duration: timedelta | float) -> None:
    """A durable timer: survives restarts, fires once, and takes no worker while it waits."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    await asyncio.sleep(seconds)


async def wait_condition(predicate: Callable[[], bool], *, timeout: timedelta | float | None = None) -> None:
    """Wait until `predicate()` is true (checked whenever the workflow wakes). Raises `asyncio.TimeoutError` after
    `timeout` (a durable timer)."""
    future = runtime.current().condition(predicate)
    if timeout is None:
        await future
        return
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    await asyncio.wait_for(future, seconds)


def patched(patch_id: str) -> bool:
    """True on runs that reach this point with the new code, False when replaying a history written before it:
    `if workflow.patched("x"): new() else: old()` changes running workflows safely."""
    instance = runtime.current()
    instance.check_writable("workflow.patched()")
    return instance.patched(patch_id)


def deprecate_patch(patch_id: str) -> None:
    """Once no history without the patch remains: keep only the new branch and call this instead of patched()."""
    runtime.current().patched(patch_id, deprecated=True)


def continue_as_new(*args: Any, workflow: type | str | None = None, task_queue: str | None = None,
                    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
                    memo: dict[str, Any] | None = None,
                    search_attributes: TypedSearchAttributes | Mapping[str, Any] | None = None) -> Any:
    """End this run and start a fresh one of the same workflow id with `args` (history starts empty); memo and
    search attributes carry over unless given."""
    instance = runtime.current()
    workflow_type = workflow if isinstance(workflow, str) else (
        defs.definition_of(workflow).name if workflow is not None else None)
    _outbound(instance).continue_as_new(icpt.ContinueAsNewInput(
        workflow_type, args, task_queue, run_timeout, task_timeout, memo, {}, search_attributes=search_attributes))


def upsert_search_attributes(updates: Sequence[SearchAttributeUpdate[Any]] | Mapping[str, Any]) -> None:
    """Set or unset search attributes of this run: `[key.value_set(v), other.value_unset()]` (Temporal's typed
    form). The engine refuses an unregistered attribute or a wrong type by failing the workflow task (BAD_COMMAND),
    so the run waits for fixed code. The dictionary form (`{name: value}`, typed by the engine from the namespace's
    registry) still works but is deprecated, as in Temporal."""
    instance = runtime.current()
    if isinstance(updates, Mapping):
        warnings.warn("dictionary search attributes are deprecated: pass [key.value_set(value), ...]",
                      DeprecationWarning, stacklevel=2)
        payloads = {k: instance.converter.encode([v])[0] for k, v in updates.items()}
        instance.command("UpsertWorkflowSearchAttributesCommand", {"search_attributes": payloads})
        return
    instance.command("UpsertWorkflowSearchAttributesCommand", {
        "search_attributes": encode_updates(updates)})
    assert instance.info is not None
    unset = {u.key.name for u in updates if u.value is None}
    kept = [p for p in instance.info.typed_search_attributes if p.key.name not in unset]
    instance.info = replace(instance.info, typed_search_attributes=TypedSearchAttributes(kept).updated(
        *(SearchAttributePair(u.key, u.value) for u in updates if u.value is not None)))


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if what == "key":
        raise TypeError(f"a record key is str, bytes or None, not {type(value).__name__}")
    try:
        return json.dumps(value, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a published value is bytes, str or JSON-serialisable: {exc}") from None


async def publish(topic: str, value: Any, *, key: str | bytes | None = None,
                  headers: Mapping[str, str | bytes] | None = None) -> None:
    """Publish one record to a Kafka topic, exactly once and in workflow order: the engine produces it in the
    transaction that records it in history (RECORD_PUBLISHED), so a crash never loses or doubles it and a replay
    never produces it again. An Ostinato extension (Temporal has none): Kafka consumers of `topic` see the record
    once this workflow task completes.

    `value` is bytes, a str (UTF-8) or any JSON value (written as compact JSON); `key` picks the partition with
    Kafka's default partitioner (records without a key go to the workflow's own partition, so they keep their
    order). The servers must allow the topic (`--egress-topics`), else the workflow task fails with the reason;
    a topic that does not exist keeps the completion in the run (`describe` shows it) until it is created and the
    run is redriven."""
    current = runtime.current()
    header_bytes = {name: v.encode() if isinstance(v, str) else v for name, v in (headers or {}).items()}
    current.command("PublishRecordCommand", {"topic": topic, "key": _as_bytes(key, "key"),
                                             "value": _as_bytes(value, "value"), "headers": header_bytes})


def upsert_memo(memo: dict[str, Any]) -> None:
    """Add, replace or (with a value of None) remove memo entries, at the first level only, as Temporal does.
    `memo()` and `memo_value()` see the change at once."""
    instance = runtime.current()
    instance.upsert_memo({k: instance.converter.encode([v])[0] for k, v in memo.items()})


def memo() -> dict[str, Any]:
    """The run's memo: what it was started with, as `upsert_memo` changed it since, decoded without type hints (a
    dataclass comes back as a dict; use `memo_value(key, type_hint=...)` for the type).

    Raises:
        RuntimeError: not in a workflow.
    """
    instance = runtime.current()
    return {key: instance.converter.decode([payload])[0] for key, payload in instance.memo.items()}


class _Unset:
    pass


_UNSET: Any = _Unset()


@overload
def memo_value(key: str, default: Any = _UNSET) -> Any: ...
@overload
def memo_value(key: str, *, type_hint: type[T]) -> T: ...
@overload
def memo_value(key: str, default: Any, *, type_hint: type[T]) -> Any: ...


def memo_value(key: str, default: Any = _UNSET, *, type_hint: Any = None) -> Any:
    """One value of the run's memo, decoded with `type_hint` when given.

    Args:
        key: the memo key.
        default: what to return when the memo has no `key`.
        type_hint: the type to decode the value as.

    Raises:
        KeyError: the memo has no `key` and no default was given.
        RuntimeError: not in a workflow.
    """
    instance = runtime.current()
    payload = instance.memo.get(key)
    if payload is None:
        if default is _UNSET:
            raise KeyError(f"the memo has no value for key {key!r}")
        return default
    return instance.converter.decode([payload], [type_hint])[0]


# -- activities -------------------------------------------------------------------------------------------------

def _activity_name(activity: Callable[..., Any] | str) -> tuple[str, Any]:
    if isinstance(activity, str):
        return activity, None
    from ostinato.sdk.activity import definition_of

    definition = definition_of(activity)
    hints = defs._hints(definition.fn)
    return definition.name, hints.get("return")


def start_activity(activity: Callable[..., Awaitable[T]] | Callable[..., T] | str, *args_: Any,
                   task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
                   schedule_to_start_timeout: timedelta | None = None,
                   start_to_close_timeout: timedelta | None = None, heartbeat_timeout: timedelta | None = None,
                   retry_policy: RetryPolicy | None = None, activity_id: str | None = None,
                   cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
                   result_type: Any = None, args: Sequence[Any] | None = None) -> asyncio.Task[T]:
    """Schedule an activity; the returned task resolves to its result, raises `ActivityError` when it fails for
    good, and cancelling it asks the activity to stop (see `cancellation_type`). Arguments go positionally or, as
    in Temporal's SDK, as `args=[...]`."""
    if schedule_to_close_timeout is None and start_to_close_timeout is None:
        raise ValueError("an activity needs start_to_close_timeout or schedule_to_close_timeout")
    instance = runtime.current()
    name, hint = _activity_name(activity)
    return _outbound(instance).start_activity(icpt.StartActivityInput(
        name, defs.call_arguments(args_, args), activity_id, task_queue, schedule_to_close_timeout,
        schedule_to_start_timeout, start_to_close_timeout, heartbeat_timeout, retry_policy, cancellation_type, {},
        ret_type=result_type or hint))


async def execute_activity(activity: Callable[..., Awaitable[T]] | Callable[..., T] | str, *args: Any,
                           **options: Any) -> T:
    """`start_activity` and wait for its result."""
    return await start_activity(activity, *args, **options)


start_activity_method = start_activity  # Temporal's names for an activity that is a method of a class instance
execute_activity_method = execute_activity


class _Activity:
    def __init__(self, instance: runtime.WorkflowInstance, body: Record, hint: Any,
                 cancellation: ActivityCancellationType) -> None:
        self.instance = instance
        self.body = body
        self.hint = hint
        self.cancellation = cancellation
        self.done: asyncio.Future[Any] = instance.loop.create_future()
        self.scheduled_event_id = 0
        self.pending = instance.command("ScheduleActivityTaskCommand", body, self._scheduled)

    def _scheduled(self, event: Record) -> None:
        self.scheduled_event_id = event["event_id"]
        self.instance.on("activity", event["event_id"], self._resolved)

    def _resolved(self, event: Record) -> None:
        kind, attrs = event["event_type"], event["attributes"][1]
        if self.done.done() or kind == "ACTIVITY_TASK_STARTED":
            return
        converter = self.instance.converter
        if kind == "ACTIVITY_TASK_COMPLETED":
            self.done.set_result(converter.decode_one(attrs["result"], self.hint))
            return
        if kind == "ACTIVITY_TASK_CANCELED":
            cause: BaseException = exc.CancelledError("activity cancelled", *converter.decode(attrs["details"]))
            retry_state = "CANCEL_REQUESTED"
        else:
            cause = converter.decode_failure(attrs["failure"])
            retry_state = attrs.get("retry_state", "UNSPECIFIED")
        error = exc.ActivityError(f"activity {self.body['activity_type']} failed", activity_id=self.body["activity_id"],
                                  activity_type=self.body["activity_type"],
                                  scheduled_event_id=self.scheduled_event_id, retry_state=retry_state, cause=cause)
        self.done.set_exception(error)

    async def run(self) -> Any:
        """The activity's result. Cancelled (its handle, or the workflow awaiting it), it raises what Temporal's
        SDK raises: `ActivityError` whose cause is `CancelledError`, at once (TRY_CANCEL, ABANDON, or an activity
        never scheduled) or once the activity has acknowledged (WAIT_CANCELLATION_COMPLETED, which gives the
        activity's own outcome if it finished first). So `except ActivityError` sees every way an activity ends,
        and a workflow that lets it out is canceled, not failed, when its own cancellation caused it."""
        try:
            return await asyncio.shield(self.done)
        except asyncio.CancelledError:
            if not self.instance.flag(runtime.ACTIVITY_CANCEL_IS_ACTIVITY_ERROR):
                await self._cancel_as_before()  # a run begun by an SDK before the change: what it saw then
                raise
            if self.done.done():  # settled in the same step as the cancellation: that outcome stands
                return self.done.result()
            sent = self._request_cancel()
            if sent and self.cancellation == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED:
                return await self.done
            if self.done.done() and not self.done.cancelled():
                return self.done.result()
            raise self._cancelled()  # noqa: B904 - `from` would replace the error's cause, the CancelledError

    async def _cancel_as_before(self) -> None:
        if not self.done.done():
            self._request_cancel()
            if self.cancellation == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED and not self.done.done():
                with contextlib.suppress(exc.ActivityError):
                    await self.done

    def _cancelled(self) -> exc.ActivityError:
        return exc.ActivityError(f"activity {self.body['activity_type']} cancelled",
                                 activity_id=self.body["activity_id"], activity_type=self.body["activity_type"],
                                 scheduled_event_id=self.scheduled_event_id, retry_state="CANCEL_REQUESTED",
                                 cause=exc.CancelledError("activity cancelled"))

    def _request_cancel(self) -> bool:
        """Ask the engine to cancel the activity; False when there is nothing to ask (never sent, or ABANDON)."""
        if self.instance.withdraw(self.pending):  # never sent: it simply does not happen
            self.done.cancel()
            return False
        if self.cancellation != ActivityCancellationType.ABANDON and self.scheduled_event_id:
            self.instance.command("RequestCancelActivityTaskCommand", {"scheduled_event_id": self.scheduled_event_id})
            return True
        return False


def start_local_activity(activity: Callable[..., Awaitable[T]] | Callable[..., T] | str, *args_: Any,
                         schedule_to_close_timeout: timedelta | None = None,
                         schedule_to_start_timeout: timedelta | None = None,
                         start_to_close_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
                         local_retry_threshold: timedelta | None = None,
                         cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
                         activity_id: str | None = None, result_type: Any = None,
                         args: Sequence[Any] | None = None) -> asyncio.Task[T]:
    """Run an activity inside the workflow task, on this worker (one of its registered activities), as Temporal's
    local activities: no activity task goes through the engine; the outcome is recorded as a `core_local_activity`
    marker with the task's answer, and replay returns it without running the function again.

    Failed attempts are retried here, with the retry policy's backoff, while the next backoff is at most
    `local_retry_threshold` (default 1 minute); a longer one records the failure with its backoff, waits on a
    workflow timer and runs the next attempt in a later task. A local activity that outlasts 80% of the workflow
    task's timeout keeps the task alive: the worker answers with what it has and asks for a new task at once, and
    the marker comes with a later answer. Raises `ActivityError` (its cause says why) when it fails for good."""
    if schedule_to_close_timeout is None and start_to_close_timeout is None:
        raise ValueError("a local activity needs start_to_close_timeout or schedule_to_close_timeout")
    instance = runtime.current()
    name, hint = _activity_name(activity)
    seq = instance.next_seq("activity")
    options = {
        "schedule_to_close_timeout_ms": to_ms(schedule_to_close_timeout),
        "schedule_to_start_timeout_ms": to_ms(schedule_to_start_timeout),
        "start_to_close_timeout_ms": to_ms(start_to_close_timeout),
        "retry_policy": None if retry_policy is None else retry_policy.to_record(),
        "local_retry_threshold_ms": to_ms(local_retry_threshold),
    }
    local = _LocalActivity(instance, seq, activity_id or str(seq), name,
                           instance.converter.encode(defs.call_arguments(args_, args)), options, result_type or hint,
                           cancellation_type)
    task = instance.loop.create_task(local.run(), name=f"local activity {local.activity_id}")
    task.add_done_callback(local.task_done)
    return task


async def execute_local_activity(activity: Callable[..., Awaitable[T]] | Callable[..., T] | str, *args: Any,
                                 **options: Any) -> T:
    """`start_local_activity` and wait for its result."""
    return await start_local_activity(activity, *args, **options)


start_local_activity_method = start_local_activity  # Temporal's names for an activity that is a method
execute_local_activity_method = execute_local_activity


class _LocalActivity:
    """A local activity, attempt after attempt: the worker runs it (live) or its marker says how it went (replay)."""

    def __init__(self, instance: runtime.WorkflowInstance, seq: int, activity_id: str, activity_type: str,
                 payloads: list[Record], options: Record, hint: Any, cancellation: ActivityCancellationType) -> None:
        self.instance, self.seq, self.activity_id, self.activity_type = instance, seq, activity_id, activity_type
        self.payloads, self.options, self.hint, self.cancellation = payloads, options, hint, cancellation
        self.attempt = 1
        self.original_schedule_time_ms = _ms(instance.now)
        self.requested = False
        self.cancel_backoff: Callable[[], None] | None = None  # set while a timer waits for the next attempt
        self.done: asyncio.Future[Any] = instance.loop.create_future()
        instance.schedule_local(self)

    def request(self) -> Record:
        self.requested = True
        return {"seq": self.seq, "activity_id": self.activity_id, "activity_type": self.activity_type,
                "input": self.payloads, "attempt": self.attempt,
                "original_schedule_time_ms": self.original_schedule_time_ms,
                "elapsed_ms": _ms(self.instance.now) - self.original_schedule_time_ms, **self.options}

    def resolve(self, resolution: Record) -> None:
        self.requested = False
        if self.done.done():
            return
        converter = self.instance.converter
        if resolution["result"] is not None:
            self.done.set_result(converter.decode_one(resolution["result"], self.hint))
        elif resolution["backoff_ms"] is not None:
            self.attempt = resolution["attempt"] + 1
            self.cancel_backoff = self.instance.start_timer(resolution["backoff_ms"] / 1000, self._next_attempt)
        else:
            self.done.set_exception(exc.ActivityError(
                f"local activity {self.activity_type} failed", activity_id=self.activity_id,
                activity_type=self.activity_type, scheduled_event_id=0, retry_state=resolution["retry_state"],
                cause=converter.decode_failure(resolution["failure"])))

    def _next_attempt(self) -> None:
        self.cancel_backoff = None
        self.instance.schedule_local(self)

    async def run(self) -> Any:
        """As for an activity (`_Activity.run`): cancelled, it raises `ActivityError` caused by `CancelledError`."""
        try:
            return await asyncio.shield(self.done)
        except asyncio.CancelledError:
            if self.done.done() and not self.done.cancelled():  # settled in the same step: that outcome stands
                return self.done.result()
            if self._stop(wait=self.cancellation == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED):
                return await self.done
            raise exc.ActivityError(  # noqa: B904 - `from` would replace the error's cause, the CancelledError
                f"local activity {self.activity_type} cancelled", activity_id=self.activity_id,
                activity_type=self.activity_type, scheduled_event_id=0, retry_state="CANCEL_REQUESTED",
                cause=exc.CancelledError("local activity cancelled"))

    def task_done(self, task: asyncio.Task[Any]) -> None:
        """A task cancelled before it ran `run` stops the local activity all the same (it cannot wait for it)."""
        if task.cancelled():
            self._stop(wait=False)

    def _stop(self, *, wait: bool) -> bool:
        """Cancel: True when the outcome of the stopped attempt is to be waited for."""
        if self.done.done():
            return False
        if self.cancel_backoff is not None:
            self.cancel_backoff()
            self.cancel_backoff = None
        elif self.instance.cancel_local(self, wait=wait):
            return True
        self.done.cancel()
        return False


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


# -- child workflows and other workflows ------------------------------------------------------------------------

class ChildWorkflowHandle:
    """A started child: await it for its result; `id` and `run_id` name it; `cancel()` asks it to cancel, as its
    cancellation type says (the parent's own cancellation reaching an `await` of the handle does the same)."""

    def __init__(self, instance: runtime.WorkflowInstance, body: Record, hint: Any,
                 cancellation_type: ChildWorkflowCancellationType = (
                     ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED)) -> None:
        self.instance = instance
        self.id = body["workflow_id"]
        self.run_id = ""
        self.hint = hint
        self.cancellation_type = ChildWorkflowCancellationType(cancellation_type)
        self._cancelled = False  # cancel() was called, or a wait on the handle was cancelled
        self._requested: asyncio.Future[None] | None = None  # the cancel request, once sent
        self.started: asyncio.Future[None] = instance.loop.create_future()
        self.result_future: asyncio.Future[Any] = instance.loop.create_future()
        self.body = body
        self.pending = instance.command("StartChildWorkflowExecutionCommand", body, self._initiated)

    def _initiated(self, event: Record) -> None:
        self.instance.on("child", event["event_id"], self._event)

    def _event(self, event: Record) -> None:
        kind, attrs = event["event_type"], event["attributes"][1]
        converter = self.instance.converter
        if kind == "CHILD_WORKFLOW_EXECUTION_STARTED":
            self.run_id = attrs["workflow_execution"]["run_id"]
            if not self.started.done():
                self.started.set_result(None)
            return
        if kind == "START_CHILD_WORKFLOW_EXECUTION_FAILED":
            error = exc.WorkflowAlreadyStartedError(self.id, self.body["workflow_type"])
            for future in (self.started, self.result_future):
                if not future.done():
                    future.set_exception(error)
            return
        if self.result_future.done():
            return
        if kind == "CHILD_WORKFLOW_EXECUTION_COMPLETED":
            self.result_future.set_result(converter.decode_one(attrs["result"], self.hint))
            return
        cause: BaseException
        if kind == "CHILD_WORKFLOW_EXECUTION_FAILED":
            cause = converter.decode_failure(attrs["failure"])
        elif kind == "CHILD_WORKFLOW_EXECUTION_CANCELED":
            cause = exc.CancelledError("child workflow cancelled")
        elif kind == "CHILD_WORKFLOW_EXECUTION_TIMED_OUT":
            cause = exc.TimeoutError("child workflow timed out", type="START_TO_CLOSE")
        else:
            cause = exc.TerminatedError("child workflow terminated")
        self.result_future.set_exception(exc.ChildWorkflowError(
            f"child workflow {self.id} did not complete", workflow_id=self.id, run_id=self.run_id,
            workflow_type=self.body["workflow_type"], retry_state=attrs.get("retry_state", ""), cause=cause))

    def __await__(self) -> Any:
        return self._outcome().__await__()

    def cancel(self) -> bool:
        """Ask the child to cancel (unless the cancellation type is ABANDON); False when it already finished or was
        asked. Awaiting the handle then raises CancelledError, or (WAIT_CANCELLATION_COMPLETED, the default) gives
        the child's own outcome: a ChildWorkflowError caused by its cancellation, unless it finished otherwise."""
        if self.result_future.done() or self._cancelled:
            return False
        self._cancelled = True
        if self.cancellation_type != ChildWorkflowCancellationType.ABANDON:
            self._request_cancel()
        return True

    async def _outcome(self) -> Any:
        kind = self.cancellation_type
        if not self._cancelled:
            try:
                return await asyncio.shield(self.result_future)
            except asyncio.CancelledError:
                if self.result_future.done():
                    raise
                self.cancel()  # the wait was cancelled (the parent is): the child is asked as its type says
        if kind in (ChildWorkflowCancellationType.ABANDON, ChildWorkflowCancellationType.TRY_CANCEL) \
                and not self.result_future.done():
            raise asyncio.CancelledError()
        if kind == ChildWorkflowCancellationType.WAIT_CANCELLATION_REQUESTED and not self.result_future.done():
            assert self._requested is not None
            await self._requested
            raise asyncio.CancelledError()
        return await self.result_future

    def _request_cancel(self) -> None:
        requested: asyncio.Future[None] = self.instance.loop.create_future()
        self._requested = requested

        def resolved(event: Record) -> None:
            if not requested.done():
                requested.set_result(None)  # delivered, or the child was gone already: either way, not waiting on

        self.instance.command("RequestCancelExternalWorkflowExecutionCommand", {
            "namespace": self.body["namespace"], "execution": {"workflow_id": self.id, "run_id": self.run_id},
            "child_workflow_only": True, "reason": "cancelled by its parent"},
            lambda event: self.instance.on("external", event["event_id"], resolved))

    async def signal(self, signal_name: str | Callable[..., Any], *args: Any) -> None:
        name = signal_name if isinstance(signal_name, str) else getattr(signal_name, defs.SIGNAL_ATTR)
        await _outbound(self.instance).signal_child_workflow(icpt.SignalChildWorkflowInput(name, args, self.id, {}))


async def start_child_workflow(workflow: type | Callable[..., Any] | str, *args_: Any, id: str | None = None,
                               task_queue: str | None = None, execution_timeout: timedelta | None = None,
                               run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
                               parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
                               retry_policy: RetryPolicy | None = None, memo: dict[str, Any] | None = None,
                               search_attributes: TypedSearchAttributes | Mapping[str, Any] | None = None,
                               result_type: Any = None, args: Sequence[Any] | None = None,
                               cron_schedule: str = "",
                               cancellation_type: ChildWorkflowCancellationType = (
                                   ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED),
                               ) -> ChildWorkflowHandle:
    """Start a child workflow and return once it has started (raises WorkflowAlreadyStartedError if its id is
    taken). Arguments go positionally or, as in Temporal's SDK, as `args=[...]`. A `retry_policy` retries the
    child's failed runs and a `cron_schedule` repeats it; either way the handle resolves with the chain's final
    outcome only."""
    instance = runtime.current()
    if isinstance(workflow, str):
        name, hint = workflow, None
    else:
        definition = defs.definition_of(workflow)
        name, hint = definition.name, definition.result_hint()
    # The id is drawn here (not in the outbound chain) so an interceptor sees the id the child gets.
    seq = instance.next_seq("child")
    handle: ChildWorkflowHandle = await _outbound(instance).start_child_workflow(icpt.StartChildWorkflowInput(
        name, defs.call_arguments(args_, args), id or f"{instance.workflow_id}/child-{seq}", task_queue,
        cancellation_type, parent_close_policy, execution_timeout, run_timeout, task_timeout, retry_policy, memo,
        {}, ret_type=result_type or hint, search_attributes=search_attributes, cron_schedule=cron_schedule))
    return handle


async def execute_child_workflow(workflow: type | Callable[..., Any] | str, *args: Any, **options: Any) -> Any:
    """Start a child workflow and wait for its result (raises ChildWorkflowError if it does not complete)."""
    handle = await start_child_workflow(workflow, *args, **options)
    return await handle


class ExternalWorkflowHandle:
    """Another workflow, by id: signal it or ask it to cancel."""

    def __init__(self, workflow_id: str, run_id: str = "", namespace: str | None = None) -> None:
        self.id = workflow_id
        self.run_id = run_id
        self.namespace = namespace

    async def signal(self, signal_name: str | Callable[..., Any], *args: Any) -> None:
        instance = runtime.current()
        name = signal_name if isinstance(signal_name, str) else getattr(signal_name, defs.SIGNAL_ATTR)
        await _outbound(instance).signal_external_workflow(icpt.SignalExternalWorkflowInput(
            name, args, self.namespace or instance.namespace, self.id, self.run_id or None, {}))

    async def cancel(self) -> None:
        instance = runtime.current()
        await self._external(instance, "RequestCancelExternalWorkflowExecutionCommand", {
            "namespace": self.namespace or instance.namespace,
            "execution": {"workflow_id": self.id, "run_id": self.run_id}, "child_workflow_only": False,
            "reason": ""})

    async def _external(self, instance: runtime.WorkflowInstance, name: str, body: Record) -> None:
        done: asyncio.Future[None] = instance.loop.create_future()

        def resolved(event: Record) -> None:
            if done.done():
                return
            if event["event_type"].endswith("_FAILED"):
                done.set_exception(exc.ApplicationError(
                    f"{name.removesuffix('Command')} to {self.id} failed: {event['attributes'][1]['cause']}",
                    type="ExternalWorkflowExecutionNotFound", non_retryable=True))
            else:
                done.set_result(None)

        instance.command(name, body, lambda event: instance.on("external", event["event_id"], resolved))
        await done


def get_external_workflow_handle(workflow_id: str, run_id: str = "", *,
                                 namespace: str | None = None) -> ExternalWorkflowHandle:
    return ExternalWorkflowHandle(workflow_id, run_id, namespace)



class _OutboundRoot(icpt.WorkflowOutboundInterceptor):
    """The end of every run's outbound chain: turns the (possibly intercepted) calls into workflow commands, the
    inputs' `headers` into the commands' header maps."""

    def __init__(self) -> None:
        pass  # the end of the chain has no next

    def info(self) -> WorkflowInfo:
        instance = runtime.current()
        assert instance.info is not None
        return instance.info

    def start_activity(self, input: icpt.StartActivityInput) -> asyncio.Task[Any]:
        instance = runtime.current()
        seq = instance.next_seq("activity")
        body = {
            "activity_id": input.activity_id or str(seq), "activity_type": input.activity,
            "task_queue": input.task_queue or "", "input": instance.converter.encode(list(input.args)),
            "header": icpt.header_records(input.headers),
            "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            "schedule_to_start_timeout_ms": to_ms(input.schedule_to_start_timeout),
            "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout),
            "heartbeat_timeout_ms": to_ms(input.heartbeat_timeout),
            "retry_policy": None if input.retry_policy is None else input.retry_policy.to_record(),
        }
        cancellation = ActivityCancellationType(input.cancellation_type)
        return instance.loop.create_task(_Activity(instance, body, input.ret_type, cancellation).run(),
                                         name=f"activity {body['activity_id']}")

    async def start_child_workflow(self, input: icpt.StartChildWorkflowInput) -> ChildWorkflowHandle:
        instance = runtime.current()
        assert instance.info is not None
        converter = instance.converter
        body = {
            "namespace": instance.namespace, "workflow_id": input.id, "workflow_type": input.workflow,
            "task_queue": input.task_queue or instance.info.task_queue,
            "input": converter.encode(list(input.args)),
            "execution_timeout_ms": to_ms(input.execution_timeout), "run_timeout_ms": to_ms(input.run_timeout),
            "task_timeout_ms": to_ms(input.task_timeout),
            "parent_close_policy": ParentClosePolicy(input.parent_close_policy).value,
            "id_reuse_policy": "UNSPECIFIED",
            "retry_policy": None if input.retry_policy is None else input.retry_policy.to_record(),
            "memo": {k: converter.encode([v])[0] for k, v in (input.memo or {}).items()},
            "search_attributes": to_payloads(input.search_attributes, lambda v: converter.encode([v])[0]),
            "header": icpt.header_records(input.headers), "cron_schedule": input.cron_schedule,
        }
        handle = ChildWorkflowHandle(instance, body, input.ret_type,
                                     ChildWorkflowCancellationType(input.cancellation_type))
        await handle.started
        return handle

    async def signal_child_workflow(self, input: icpt.SignalChildWorkflowInput) -> None:
        instance = runtime.current()
        await self.signal_external_workflow(icpt.SignalExternalWorkflowInput(
            input.signal, input.args, instance.namespace, input.child_workflow_id, None, input.headers))

    async def signal_external_workflow(self, input: icpt.SignalExternalWorkflowInput) -> None:
        instance = runtime.current()
        await ExternalWorkflowHandle(input.workflow_id, input.workflow_run_id or "", input.namespace)._external(
            instance, "SignalExternalWorkflowExecutionCommand", {
                "namespace": input.namespace, "execution": {"workflow_id": input.workflow_id,
                                                            "run_id": input.workflow_run_id or ""},
                "signal_name": input.signal, "input": instance.converter.encode(list(input.args)),
                "child_workflow_only": False, "header": icpt.header_records(input.headers)})

    def continue_as_new(self, input: icpt.ContinueAsNewInput) -> NoReturn:
        instance = runtime.current()
        assert instance.info is not None
        converter = instance.converter
        raise ContinueAsNew({
            "workflow_type": input.workflow or instance.defn.name,
            "task_queue": input.task_queue or instance.info.task_queue, "input": converter.encode(list(input.args)),
            "run_timeout_ms": to_ms(input.run_timeout), "task_timeout_ms": to_ms(input.task_timeout),
            "backoff_start_interval_ms": 0, "retry_policy": None,
            "memo": None if input.memo is None else {k: converter.encode([v])[0] for k, v in input.memo.items()},
            "search_attributes": None if input.search_attributes is None else to_payloads(
                input.search_attributes, lambda v: converter.encode([v])[0]),
            "header": icpt.header_records(input.headers),
        })


OUTBOUND_ROOT = _OutboundRoot()
