"""`workflow.wait` and `workflow.as_completed`: asyncio's, with lists where asyncio uses sets, so the order in which
workflow code sees (and reacts to) its futures is the same on every replay."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

T = TypeVar("T")
FutureT = TypeVar("FutureT", bound="asyncio.Future[Any]")
RETURN_WHEN = (asyncio.FIRST_COMPLETED, asyncio.FIRST_EXCEPTION, asyncio.ALL_COMPLETED)


def _seconds(timeout: timedelta | float | None) -> float | None:
    return timeout.total_seconds() if isinstance(timeout, timedelta) else timeout


async def wait(fs: Iterable[FutureT], *, timeout: timedelta | float | None = None,
               return_when: str = asyncio.ALL_COMPLETED) -> tuple[list[FutureT], list[FutureT]]:
    """Wait for tasks or futures as `asyncio.wait` does, but return lists in the order given (asyncio returns
    sets, whose order differs from one process to the next). `timeout` is a durable timer in a workflow; it ends the
    wait without cancelling anything.

    Args:
        fs: tasks or futures (not coroutines: wrap them with `asyncio.create_task` first).
        timeout: the longest to wait; None waits as long as `return_when` needs.
        return_when: `asyncio.FIRST_COMPLETED`, `asyncio.FIRST_EXCEPTION` or `asyncio.ALL_COMPLETED`.

    Returns:
        `(done, pending)`, each in the order of `fs`.

    Raises:
        TypeError: `fs` is a single future or coroutine, or holds a coroutine.
        ValueError: `fs` is empty, or `return_when` is none of the three.
    """
    if asyncio.isfuture(fs) or asyncio.iscoroutine(fs):
        raise TypeError(f"workflow.wait needs an iterable of tasks or futures, not {type(fs).__name__}")
    futures = list(fs)
    if not futures:
        raise ValueError("workflow.wait needs at least one task or future")
    if return_when not in RETURN_WHEN:
        raise ValueError(f"return_when must be one of {', '.join(RETURN_WHEN)}, not {return_when!r}")
    if any(asyncio.iscoroutine(f) for f in futures):
        raise TypeError("workflow.wait takes tasks, not coroutines: wrap each in asyncio.create_task(...)")
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    remaining = len(futures)

    def on_done(future: asyncio.Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        failed = not future.cancelled() and future.exception() is not None
        if remaining <= 0 or return_when == asyncio.FIRST_COMPLETED or (
                return_when == asyncio.FIRST_EXCEPTION and failed):
            release()

    def release() -> None:
        if not waiter.done():
            waiter.set_result(None)

    seconds = _seconds(timeout)
    timer = loop.call_later(seconds, release) if seconds is not None else None
    for future in futures:
        future.add_done_callback(on_done)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for future in futures:
            future.remove_done_callback(on_done)
    return [f for f in futures if f.done()], [f for f in futures if not f.done()]


def as_completed(aws: Iterable[Awaitable[T]], *, timeout: timedelta | float | None = None
                 ) -> Iterator[Awaitable[T]]:
    """Iterate as `asyncio.as_completed` does: each awaitable yielded gives the next result to finish (or raises its
    exception), in the order they finish, and ties resolve in the order given. Coroutines are wrapped in tasks, in
    that order. After `timeout` (a durable timer in a workflow) the ones still to come raise `TimeoutError`.

    Raises:
        TypeError: `aws` is a single future or coroutine.
    """
    if asyncio.isfuture(aws) or asyncio.iscoroutine(aws):
        raise TypeError(f"workflow.as_completed needs an iterable of awaitables, not {type(aws).__name__}")
    loop = asyncio.get_running_loop()
    todo: list[asyncio.Future[T]] = [asyncio.ensure_future(aw, loop=loop) for aw in aws]
    count = len(todo)
    finished: asyncio.Queue[asyncio.Future[T] | None] = asyncio.Queue()
    timer: list[asyncio.TimerHandle] = []

    def on_done(future: asyncio.Future[T]) -> None:
        if future not in todo:  # the timeout came first
            return
        todo.remove(future)
        finished.put_nowait(future)
        if not todo and timer:
            timer[0].cancel()

    def on_timeout() -> None:
        for future in todo:
            future.remove_done_callback(on_done)
            finished.put_nowait(None)
        todo.clear()

    for future in todo:
        future.add_done_callback(on_done)
    seconds = _seconds(timeout)
    if todo and seconds is not None:
        timer.append(loop.call_later(seconds, on_timeout))

    async def next_result() -> T:
        future = await finished.get()
        if future is None:
            raise TimeoutError("workflow.as_completed timed out")
        return future.result()

    return (next_result() for _ in range(count))
