"""Runs activity tasks: decodes the arguments, calls the activity, relays its heartbeats, builds the answer."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import typing
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from ostinato.schemas.wire import command_type
from ostinato.sdk import exceptions as exc
from ostinato.sdk.activity import (
    ActivityContext,
    ActivityDefinition,
    ActivityInfo,
    _CompleteAsyncError,
    definition_of,
    set_context,
    task_token,
)
from ostinato.sdk.data import DEFAULT, DataConverter
from ostinato.sdk.interceptor import ExecuteActivityInput, Interceptor, activity_chain, headers_of

Record = dict[str, Any]
Answer = tuple[str, Record]  # (full command record name, body)
HeartbeatSender = Callable[[Record, list[Record]], Awaitable[bool]]

COMPLETED = command_type("RespondActivityTaskCompleted")
FAILED = command_type("RespondActivityTaskFailed")
CANCELED = command_type("RespondActivityTaskCanceled")
HEARTBEAT_FRACTION = 0.8  # of the heartbeat timeout: a heartbeat goes out well before the engine gives up
DEFAULT_HEARTBEAT_INTERVAL = 30.0  # seconds, when the activity has no heartbeat timeout

# Why an attempt was asked to stop: the workflow asked (answer Canceled), the worker is shutting down (answer
# Failed, retryable, so another worker takes over), or whoever awaits `execute` cancelled it (no answer).
REQUESTED, SHUTDOWN, ABANDONED = "requested", "shutdown", "abandoned"

log = logging.getLogger("ostinato.activity")


class ActivityExecutor:
    """Runs the activity tasks of one worker, independent of how tasks arrive and answers leave.

    `async def` activities run on the caller's event loop; plain functions run in a thread pool. The worker
    calls `execute` once per ActivityTask (after its RecordActivityTaskStarted is accepted) and produces the
    returned command.

    Args:
        activities: functions decorated with `@activity.defn` (bound methods too).
        data_converter: how arguments, results, heartbeat details and failures travel.
        identity: the worker's identity, named in errors.
        max_threads: how many plain-function activities run at once (in a pool of the executor's own).
        thread_pool: where plain-function activities run instead (Temporal's `activity_executor`); its owner shuts
            it down.

    Raises:
        TypeError: a callable is not an activity, or its type hints cannot be resolved.
        ValueError: two activities share a name, or `max_threads` is below 1.
    """

    def __init__(self, activities: Sequence[Callable[..., Any]], data_converter: DataConverter = DEFAULT, *,
                 identity: str = "", max_threads: int = 16, client: Any = None,
                 thread_pool: Executor | None = None, interceptors: Sequence[Interceptor] = ()) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, not {max_threads}")
        self.converter = data_converter
        self.client = client  # what `activity.client()` gives the activities
        self.identity = identity
        self.interceptors = list(interceptors)
        self._definitions: dict[str, ActivityDefinition] = {}
        self._hints: dict[str, _Hints] = {}
        for fn in activities:
            definition = definition_of(fn)
            if definition.name in self._definitions:
                raise ValueError(f"two activities are named {definition.name!r}")
            self._definitions[definition.name] = definition
            self._hints[definition.name] = _Hints.of(definition.fn)
        self._max_threads = max_threads
        self._given_pool = thread_pool  # the user's (Worker(activity_executor=...)): used, never shut down here
        self._pool: ThreadPoolExecutor | None = None
        self._running: set[_Attempt] = set()
        self._closed = False
        self._worker_shutdown = threading.Event()  # what `activity.is_worker_shutdown()` reads

    @property
    def activity_types(self) -> list[str]:
        """The names of the registered activities, sorted."""
        return sorted(self._definitions)

    async def execute(self, task: Record, heartbeat: HeartbeatSender) -> Answer | None:
        """Run one ActivityTask to its end and return the answer to produce.

        Args:
            task: the `ostinato.task.ActivityTask` record.
            heartbeat: sends a RecordActivityTaskHeartbeat for `task` with the given (encoded) details and
                returns whether the workflow requested cancellation. It should give up in bounded time.

        Returns:
            `(record name, body)` of RespondActivityTaskCompleted, RespondActivityTaskFailed or
            RespondActivityTaskCanceled, the body carrying the task's scheduled_event_id and attempt; None when the
            activity called `activity.raise_complete_async()` (something else answers it).

        Raises:
            RuntimeError: the executor is shut down.
        """
        if self._closed:
            raise RuntimeError("the activity executor is shut down")
        definition = self._definitions.get(task["activity_type"])
        if definition is None:
            return self._failed(task, self._not_registered(task["activity_type"]))
        attempt = _Attempt(task, definition, self.converter, heartbeat)
        self._running.add(attempt)
        try:
            return await self._run(attempt)
        finally:
            attempt.heartbeats.close()
            self._running.discard(attempt)
            attempt.finished.set()

    def notify_shutdown(self) -> None:
        """The worker is shutting down: `activity.is_worker_shutdown()` answers True from now on, in running
        activities and any started later."""
        self._worker_shutdown.set()

    def cancel_all(self) -> None:
        """Stop every running activity (worker shutdown): async ones are cancelled, plain functions see it at
        their next heartbeat. Each answers Failed (type WorkerShutdown, retryable) so another worker retries."""
        self.notify_shutdown()
        for attempt in list(self._running):
            attempt.request_cancel(SHUTDOWN)

    async def shutdown(self) -> None:
        """Refuse new tasks, wait for the running ones to finish, and close the thread pool."""
        self._closed = True
        while self._running:
            await asyncio.gather(*(a.finished.wait() for a in list(self._running)))
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown)

    # -- one attempt ----------------------------------------------------------------------------------------------

    async def _run(self, attempt: _Attempt) -> Answer | None:
        task, definition = attempt.task, attempt.definition
        try:
            args = self.converter.decode(task["input"], self._hints[definition.name].for_count(len(task["input"])))
            details = self.converter.decode(task["heartbeat_details"])
        except Exception as err:  # noqa: BLE001 - becomes the attempt's failure, retried (a newer worker may read it)
            return await self._finish(attempt, self._failed(task, exc.ApplicationError(
                f"cannot decode the input of activity {definition.name!r}: {err}", type="PayloadConversionError",
                cause=err)))
        context = contextvars.copy_context()
        info = _info(task, details)
        inbound, outbound = activity_chain(self.interceptors, definition.is_async, info, attempt.heartbeat)
        context.run(set_context, ActivityContext(info, attempt.heartbeat, attempt.cancelled.is_set,
                                                   self._worker_shutdown, self.client,
                                                   outbound if self.interceptors else None))
        try:
            if self.interceptors:
                # The chain runs in the activity's context, so what interceptors set there reaches the activity.
                run = asyncio.get_running_loop().create_task(inbound.execute_activity(ExecuteActivityInput(
                    definition.fn, args, None if definition.is_async else self._threads(),
                    headers_of(task.get("header")))), context=context)
                if definition.is_async:
                    attempt.runner = run
                result = await run
            elif definition.is_async:
                attempt.runner = asyncio.get_running_loop().create_task(_call_async(definition.fn, args),
                                                                        context=context)
                result = await attempt.runner
            else:
                result = await asyncio.get_running_loop().run_in_executor(
                    self._threads(), context.run, definition.fn, *args)
        except _CompleteAsyncError:
            await attempt.heartbeats.drain(flush=True)  # what it reported so far reaches the engine first
            return None
        except (asyncio.CancelledError, exc.CancelledError) as err:
            current = asyncio.current_task()
            if isinstance(err, asyncio.CancelledError) and current is not None and current.cancelling():
                attempt.request_cancel(ABANDONED)  # our caller gave up on it: a thread stops at its next heartbeat
                raise
            return await self._finish(attempt, self._cancelled(attempt, err))
        except Exception as err:  # noqa: BLE001 - any failure of user code is the attempt's failure
            return await self._finish(attempt, self._failed(task, err))
        try:
            answer = COMPLETED, {**_attempt_of(task), "result": self.converter.encode([result])}
        except Exception as err:  # noqa: BLE001 - a result that cannot be converted fails the attempt
            answer = self._failed(task, err)
        return await self._finish(attempt, answer)

    async def _finish(self, attempt: _Attempt, answer: Answer) -> Answer:
        # A failed attempt's last details must reach the engine first: the retry resumes from them.
        await attempt.heartbeats.drain(flush=answer[0] == FAILED)
        return answer

    def _cancelled(self, attempt: _Attempt, err: BaseException) -> Answer:
        task = attempt.task
        if attempt.reason == REQUESTED:
            given = err.details if isinstance(err, exc.CancelledError) else ()
            details = self.converter.encode(given) if given else attempt.heartbeats.latest
            return CANCELED, {**_attempt_of(task), "details": details}
        if attempt.reason == SHUTDOWN:
            return self._failed(task, exc.ApplicationError("the worker is shutting down", type="WorkerShutdown",
                                                           cause=err))
        if isinstance(err, exc.CancelledError):
            return self._failed(task, err)
        return self._failed(task, exc.ApplicationError("activity cancelled without a cancellation request",
                                                       type="CancelledError"))

    def _failed(self, task: Record, error: BaseException) -> Answer:
        log.warning("activity %s (%s) attempt %s of workflow %s failed", task["activity_id"],
                    task["activity_type"], task["attempt"], task["workflow_id"], exc_info=error)
        try:
            failure = self.converter.encode_failure(error)
        except Exception as err:  # noqa: BLE001 - the failure must go out even when its details cannot
            failure = self.converter.encode_failure(exc.ApplicationError(
                f"{error} (its details could not be converted: {err})", type=type(error).__name__,
                non_retryable=bool(getattr(error, "non_retryable", False))))
        return FAILED, {**_attempt_of(task), "failure": failure}

    def _not_registered(self, name: str) -> exc.ApplicationError:
        worker = f" on worker {self.identity!r}" if self.identity else ""
        known = ", ".join(self.activity_types) or "none"
        return exc.ApplicationError(f"activity type {name!r} is not registered{worker} (registered: {known})",
                                    type="ActivityNotRegistered", non_retryable=True)

    def _threads(self) -> Executor:
        if self._given_pool is not None:
            return self._given_pool
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_threads, thread_name_prefix="ostinato-activity")
        return self._pool


async def _call_async(fn: Callable[..., Any], args: list[Any]) -> Any:
    return await fn(*args)  # called inside the task, so a TypeError for wrong arguments fails the attempt


class _Attempt:
    """One running activity attempt: its cancellation state and its heartbeats. Created on the event loop."""

    def __init__(self, task: Record, definition: ActivityDefinition, converter: DataConverter,
                 sender: HeartbeatSender) -> None:
        self.task, self.definition, self.converter = task, definition, converter
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.cancelled = threading.Event()  # read by activity threads
        self.reason: str | None = None
        self.runner: asyncio.Task[Any] | None = None
        self.finished = asyncio.Event()
        interval = _heartbeat_interval(task.get("heartbeat_timeout_ms"))
        self.heartbeats = _Heartbeats(self.loop, lambda details: sender(task, details), interval,
                                      lambda: self.request_cancel(REQUESTED))

    def request_cancel(self, reason: str) -> None:
        """Ask the activity to stop (on the event loop); the first reason given is the one answered."""
        if self.reason is None:
            self.reason = reason
        self.cancelled.set()
        if self.runner is not None:
            self.runner.cancel()

    def heartbeat(self, details: Sequence[Any]) -> None:
        """`activity.heartbeat`, from the event loop or an activity thread."""
        records = self.converter.encode(list(details))  # in the caller, so unconvertible details raise there
        if threading.get_ident() == self.loop_thread:
            self.heartbeats.record(records)
            return
        self.loop.call_soon_threadsafe(self.heartbeats.record, records)  # queued before the thread's result
        if self.cancelled.is_set():
            raise exc.CancelledError("activity cancelled")


class _Heartbeats:
    """Throttles an attempt's heartbeats: the first goes out at once, then at most one per `interval` and one
    at a time, always with the latest details, so the last ones recorded are sent eventually."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Callable[[list[Record]], Awaitable[bool]],
                 interval: float, on_cancel: Callable[[], None]) -> None:
        self.loop, self.send, self.interval, self.on_cancel = loop, send, interval, on_cancel
        self.latest: list[Record] = []
        self.unsent = False
        self.last_sent: float | None = None
        self.in_flight: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False

    def record(self, details: list[Record]) -> None:
        if self.closed:
            return
        self.latest, self.unsent = details, True
        self._pump()

    def _pump(self) -> None:
        if self.closed or not self.unsent or self.in_flight is not None or self.timer is not None:
            return
        due = self.loop.time() if self.last_sent is None else self.last_sent + self.interval
        if due <= self.loop.time():
            self.in_flight = self.loop.create_task(self._send())
        else:
            self.timer = self.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        self._pump()

    async def _send(self) -> None:
        try:
            await self._deliver()
        finally:
            self.in_flight = None
        self._pump()

    async def _deliver(self) -> None:
        details, self.unsent, self.last_sent = self.latest, False, self.loop.time()
        try:
            cancel_requested = await self.send(details)
        except Exception:
            log.warning("an activity heartbeat could not be sent", exc_info=True)
            return
        if cancel_requested and not self.closed:
            self.on_cancel()

    async def drain(self, *, flush: bool) -> None:
        """Stop throttling; wait for the heartbeat in flight, then (if `flush`) send details not sent yet."""
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.in_flight is not None:
            await asyncio.wait({self.in_flight})
        if flush and self.unsent:
            await self._deliver()

    def close(self) -> None:
        """Drop whatever is still pending (the attempt is over, or abandoned)."""
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        if self.in_flight is not None:
            self.in_flight.cancel()


class _Hints:
    """The type hints of an activity's positional parameters, for decoding its arguments."""

    def __init__(self, positional: list[Any], rest: Any) -> None:
        self.positional, self.rest = positional, rest

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> _Hints:
        target = fn if inspect.isroutine(fn) else type(fn).__call__
        try:
            hints = typing.get_type_hints(target)
        except Exception as err:
            raise TypeError(f"cannot resolve the type hints of activity {fn!r}: {err}") from err
        parameters = inspect.signature(fn).parameters.values()
        positional = [hints.get(p.name) for p in parameters
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        rest = next((hints.get(p.name) for p in parameters if p.kind == p.VAR_POSITIONAL), None)
        return cls(positional, rest)

    def for_count(self, count: int) -> list[Any]:
        return [self.positional[i] if i < len(self.positional) else self.rest for i in range(count)]


def _info(task: Record, heartbeat_details: list[Any]) -> ActivityInfo:
    return ActivityInfo(
        activity_id=task["activity_id"], activity_type=task["activity_type"], attempt=task["attempt"],
        namespace=task["namespace"], workflow_id=task["workflow_id"], run_id=task["run_id"],
        workflow_type=task["workflow_type"], task_queue=task["task_queue"],
        scheduled_time=_time(task["scheduled_time_ms"]),
        current_attempt_scheduled_time=_time(task["current_attempt_scheduled_time_ms"]),
        start_to_close_timeout=_duration(task["start_to_close_timeout_ms"] or None),
        schedule_to_close_timeout=_duration(task.get("schedule_to_close_timeout_ms")),
        heartbeat_timeout=_duration(task.get("heartbeat_timeout_ms")),
        heartbeat_details=tuple(heartbeat_details), task_token=b"" if task.get("is_local") else task_token(task),
        is_local=bool(task.get("is_local")))


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _duration(ms: int | None) -> timedelta | None:
    return None if ms is None else timedelta(milliseconds=ms)


def _heartbeat_interval(timeout_ms: int | None) -> float:
    return DEFAULT_HEARTBEAT_INTERVAL if not timeout_ms else timeout_ms / 1000 * HEARTBEAT_FRACTION


def _attempt_of(task: Record) -> Record:
    return {"scheduled_event_id": task["scheduled_event_id"], "attempt": task["attempt"]}
