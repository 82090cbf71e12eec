"""Test-only crash points: `OSTINATO_FAULT_POINT=<name>[:<n>]` kills the process with SIGKILL at the n-th time
(default first) it passes the named point, so chaos tests can stop it exactly between two steps of a commit."""

from __future__ import annotations

import os
import signal
import sys

FAULT_ENV = "OSTINATO_FAULT_POINT"
POINTS = ("after-produce", "after-send-offsets", "after-commit", "mid-restore")


class FaultPoints:
    def __init__(self, spec: str = "") -> None:
        self.point = ""
        self.at = 0
        self._hits = 0
        if spec:
            name, _, count = spec.partition(":")
            if name not in POINTS:
                raise ValueError(f"{FAULT_ENV}={spec!r}: unknown fault point {name!r}; known: {', '.join(POINTS)}")
            try:
                self.at = int(count or "1")
            except ValueError:
                raise ValueError(f"{FAULT_ENV}={spec!r}: the count after ':' must be a whole number") from None
            self.point = name

    @classmethod
    def from_env(cls) -> FaultPoints:
        return cls(os.environ.get(FAULT_ENV, ""))

    def hit(self, name: str) -> None:
        if name != self.point:
            return
        self._hits += 1
        if self._hits >= self.at:
            print(f"ostinato: fault point {name} reached ({self._hits}): killing the process", file=sys.stderr,
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
