"""Which workflow, if any, the current thread is running an activation of: set by the workflow runtime, asked by
the determinism guards and by the data converter (which lifts the guards for the blob store's I/O)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol


class Activation(Protocol):
    """What the guards need of the workflow running on a thread (a `WorkflowInstance` is one)."""

    def record_violation(self, error: BaseException) -> None:
        """Fail the running workflow task with `error`, even if the workflow code swallows the exception."""
        ...


class _Running(threading.local):
    activation: Activation | None = None


_running = _Running()


def running() -> Activation | None:
    """The workflow whose activation runs on this thread, or None outside workflow code."""
    return _running.activation


def set_running(activation: Activation | None) -> None:
    _running.activation = activation


def in_workflow() -> bool:
    return _running.activation is not None


@contextlib.contextmanager
def outside_workflow() -> Iterator[None]:
    """Lift the determinism guards for the SDK's own I/O on the workflow's behalf: blob store reads and writes
    of content-addressed, checksummed data, whose outcome does not depend on when they run."""
    saved = _running.activation
    _running.activation = None
    try:
        yield
    finally:
        _running.activation = saved
