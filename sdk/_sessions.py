"""HTTP sessions a client never closed, closed for it (Temporal code never closes its client): each is closed when
its event loop shuts down (`asyncio.run` closes the loop's async generators before closing the loop), or soon after
the client that owned it is garbage-collected, so no "Unclosed client session" warning is left behind."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import weakref
from collections.abc import AsyncGenerator

import aiohttp

__all__ = ["close", "keep"]


class _Keeper:
    """The open sessions of one event loop, and the async generator that closes them when the loop shuts down."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sessions: set[aiohttp.ClientSession] = set()
        self.closing: set[asyncio.Task[None]] = set()  # closes of sessions whose owners were garbage-collected
        self.closer = self._close_at_shutdown()

    async def _close_at_shutdown(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            _keepers.pop(self.loop, None)
            sessions, self.sessions = self.sessions, set()
            if self.loop.is_closed():  # at exit, after a loop closed without shutting its generators down
                for session in sessions:
                    _close_without_loop(session)
            else:
                await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


# A keeper's generator is only weakly held by its loop; this holds it until it has closed its sessions.
_keepers: dict[asyncio.AbstractEventLoop, _Keeper] = {}


async def keep(owner: object, session: aiohttp.ClientSession) -> None:
    """Close `session` if `owner` never does (`close(session)`): once `owner` is garbage-collected, or when the
    running event loop shuts down, whichever comes first."""
    loop = asyncio.get_running_loop()
    keeper = _keepers.get(loop)
    if keeper is None:
        keeper = _keepers[loop] = _Keeper(loop)
        await anext(keeper.closer)  # its first step registers it with the loop, which closes it at shutdown
    keeper.sessions.add(session)
    weakref.finalize(owner, _dropped, keeper, session)


async def close(session: aiohttp.ClientSession) -> None:
    """Close `session` now (its owner closes it)."""
    keeper = _keepers.get(asyncio.get_running_loop())
    if keeper is not None:
        keeper.sessions.discard(session)
    await session.close()


def _dropped(keeper: _Keeper, session: aiohttp.ClientSession) -> None:
    """The owner was garbage-collected (from any thread): close its session on its loop, if that still runs; a close
    that never gets to run (the loop shuts down first) is left to the keeper."""
    if session not in keeper.sessions or keeper.loop.is_closed():
        return

    async def close_dropped() -> None:
        await session.close()
        keeper.sessions.discard(session)

    def start() -> None:
        task = keeper.loop.create_task(close_dropped())
        keeper.closing.add(task)  # the loop holds its tasks weakly
        task.add_done_callback(keeper.closing.discard)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        keeper.loop.call_soon_threadsafe(start)


def _close_without_loop(session: aiohttp.ClientSession) -> None:
    """Close a session whose loop is closed. Nothing can be awaited then, and closing only marks the session and
    its connector closed, so its coroutine is run as far as it goes without a loop (to its end, as aiohttp is now)."""
    closing = session.close()
    try:
        closing.send(None)
    except StopIteration:
        return
    except Exception:  # noqa: BLE001 - best effort at exit; detached, the session at least says nothing
        pass
    closing.close()
    session.detach()


@atexit.register
def _close_left_over() -> None:
    """Keepers of loops closed without shutting their async generators down: finish them now, so that no generator
    is left for the garbage collector to hand to a closed loop."""
    for keeper in list(_keepers.values()):
        if keeper.loop.is_closed():
            with contextlib.suppress(StopIteration, RuntimeError):
                keeper.closer.aclose().send(None)
