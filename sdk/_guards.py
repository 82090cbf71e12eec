"""Catch calls that break determinism in workflow code (wall clock, global random, uuid4, threads, sockets,
subprocesses) with a message that says what to use instead.

The guards are installed once, process-wide, and only act on the thread running a workflow activation, so
activities and the rest of the application are untouched. The violation is also recorded on the workflow, so
code that swallows the exception still fails its workflow task instead of silently diverging on replay.
"""

from __future__ import annotations

import functools
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ostinato.sdk import _context
from ostinato.sdk.exceptions import RestrictedWorkflowAccessError

_ALLOWED_CALLERS = ("logging", "ostinato.sdk", "asyncio", "traceback", "linecache")
_AUDITED = {"socket.connect": "network I/O", "socket.bind": "network I/O", "subprocess.Popen": "subprocesses",
            "os.system": "subprocesses", "os.posix_spawn": "subprocesses", "os.fork": "subprocesses"}
_installed = False
_lock = threading.Lock()


def _violation(what: str, instead: str) -> RestrictedWorkflowAccessError:
    error = RestrictedWorkflowAccessError(
        f"workflow code called {what}, which is not deterministic (a replay would see a different value); "
        f"use {instead}")
    activation = _context.running()
    if activation is not None:
        activation.record_violation(error)
    return error


def _guard(fn: Callable[..., Any], what: str, instead: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _context.in_workflow():
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith(_ALLOWED_CALLERS):
                raise _violation(what, instead)
        return fn(*args, **kwargs)

    guarded.__ostinato_guarded__ = True  # type: ignore[attr-defined]
    return guarded


def _audit(event: str, args: tuple[Any, ...]) -> None:
    what = _AUDITED.get(event)
    if what is not None and _context.in_workflow():
        raise _violation(f"{event} ({what})", "an activity for anything that talks to the outside world")


def install() -> None:
    """Idempotent; called when the first workflow runs in this process."""
    global _installed
    with _lock:
        if _installed:
            return
        clock = "workflow.now() (or workflow.sleep / asyncio.sleep to wait)"
        for name in ("time", "time_ns"):
            setattr(time, name, _guard(getattr(time, name), f"time.{name}()", clock))
        time.sleep = _guard(time.sleep, "time.sleep()", "await workflow.sleep(...) or await asyncio.sleep(...)")
        for name in ("random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform",
                     "getrandbits"):
            setattr(random, name, _guard(getattr(random, name), f"random.{name}()", "workflow.random()"))
        uuid.uuid4 = _guard(uuid.uuid4, "uuid.uuid4()", "workflow.uuid4()")
        uuid.uuid1 = _guard(uuid.uuid1, "uuid.uuid1()", "workflow.uuid4()")
        threading.Thread.start = _guard(threading.Thread.start, "threading.Thread.start()",  # type: ignore[method-assign]
                                        "asyncio tasks (workflow.start_activity for real work)")
        socket.getaddrinfo = _guard(socket.getaddrinfo, "socket.getaddrinfo()", "an activity")
        sys.addaudithook(_audit)
        _installed = True
