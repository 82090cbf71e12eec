"""Waiting out a schema registry that is down: backoff between retries of the same batch, a metric and a log line
when it goes and when it comes back (not one per retry, so a long outage does not flood the log)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

log = logging.getLogger("ostinato.ingress")
FIRST_DELAY_S = 0.2
MAX_DELAY_S = 5.0
REMIND_EVERY_S = 30.0


class _Count(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Level(Protocol):
    def set(self, value: float) -> None: ...


class RegistryWait:
    """One mapping's view of its registry: `failed()` after a batch was taken back, `succeeded()` after a commit."""

    def __init__(self, mapping: str, retries: _Count, waiting: _Level, stop: threading.Event) -> None:
        self.mapping, self.retries, self.waiting, self.stop = mapping, retries, waiting, stop
        self.delay = 0.0
        self.since = 0.0
        self.reminded = 0.0

    def failed(self, reason: BaseException, first: str) -> None:
        """Count it, say so (at the start and every REMIND_EVERY_S), and sleep the backoff (woken by a stop)."""
        now = time.monotonic()
        self.retries.inc()
        if not self.delay:
            self.since = self.reminded = now
            self.waiting.set(1)
            log.warning("ingress %s: %s; nothing is dead-lettered: retrying the batch from %s with backoff",
                        self.mapping, reason, first)
        elif now - self.reminded >= REMIND_EVERY_S:
            self.reminded = now
            log.warning("ingress %s: still waiting for the schema registry (%.0fs): %s", self.mapping,
                        now - self.since, reason)
        self.delay = min(MAX_DELAY_S, self.delay * 2) if self.delay else FIRST_DELAY_S
        self.stop.wait(self.delay)

    def succeeded(self) -> None:
        if self.delay:
            log.info("ingress %s: the schema registry answers again after %.1fs; resuming", self.mapping,
                     time.monotonic() - self.since)
            self.delay = 0.0
            self.waiting.set(0)
