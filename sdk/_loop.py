"""A deterministic asyncio event loop for workflow code: it runs only when an activation drives it, its clock is
the workflow's clock, and `call_later` becomes a durable timer (so `asyncio.sleep` and `asyncio.wait_for` work in
workflows and replay identically)."""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Callable
from typing import Any, Protocol


class TimerFactory(Protocol):
    def start_timer(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Start a durable timer; returns the function that cancels it."""
        ...


class _TimerHandle(asyncio.TimerHandle):
    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...], loop: WorkflowLoop,
                 context: contextvars.Context | None) -> None:
        super().__init__(when, callback, args, loop, context=context)
        self._cancel_timer: Callable[[], None] | None = None

    def cancel(self) -> None:
        if not self.cancelled() and self._cancel_timer is not None:
            self._cancel_timer()
            self._cancel_timer = None
        super().cancel()


class WorkflowLoop(asyncio.AbstractEventLoop):
    """Only the parts of the event loop that tasks, futures, sleeps and timeouts use; I/O is refused."""

    def __init__(self, timers: TimerFactory) -> None:
        self._ready: collections.deque[asyncio.Handle] = collections.deque()
        self._timers = timers
        self._now_s = 0.0
        self._closed = False
        self._exceptions: list[BaseException] = []

    # -- driving ---------------------------------------------------------------------------------------------------

    def set_time(self, seconds: float) -> None:
        self._now_s = seconds

    def run_ready(self) -> None:
        """Run callbacks until none is ready: the workflow has done all it can until something new arrives."""
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        try:
            while self._ready:
                handle = self._ready.popleft()
                if not handle._cancelled:
                    handle._run()
        finally:
            asyncio.events._set_running_loop(previous)
        if self._exceptions:
            error, self._exceptions = self._exceptions[0], []
            raise error

    @property
    def idle(self) -> bool:
        return not self._ready

    # -- what asyncio needs ----------------------------------------------------------------------------------------

    def time(self) -> float:
        return self._now_s

    def call_soon(self, callback: Callable[..., Any], *args: Any,  # type: ignore[override]  # typeshed: TypeVarTuple
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if delay <= 0:
            handle = _TimerHandle(self._now_s, callback, args, self, context)
            self._ready.append(handle)
            return handle
        handle = _TimerHandle(self._now_s + delay, callback, args, self, context)

        def fire() -> None:
            if not handle.cancelled():
                self._ready.append(handle)

        handle._cancel_timer = self._timers.start_timer(delay, fire)
        return handle

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        return self.call_later(when - self._now_s, callback, *args, context=context)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None,
                    context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return asyncio.events._get_running_loop() is self

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.clear()

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, BaseException) and not isinstance(error, asyncio.CancelledError):
            self._exceptions.append(error)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        # Every other loop method is I/O or threads: not deterministic, so not available to workflow code.
        if name.startswith("_"):
            raise AttributeError(name)

        def refused(*args: Any, **kwargs: Any) -> Any:
            from ostinato.sdk.exceptions import RestrictedWorkflowAccessError

            raise RestrictedWorkflowAccessError(f"the workflow event loop has no {name}(): workflows cannot do I/O "
                                                "or use threads; do it in an activity")

        return refused
