"""The side-effect ledger: every activity execution appends one line to a file the test owns, outside the engine.

The engine's own history records only the last attempt of an activity (attempt state stays out of history), so it
cannot say how often an activity really ran. The ledger can: each worker process appends to its own file with
O_APPEND (a line survives a kill -9 of the writer once `write` returned), and `tally` compares what ran with what
the workflow's retry design asks for.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Execution", "Ledger", "Tally", "read_ledger", "tally"]

Key = tuple[str, str]  # (workflow id, activity id)
SUFFIX = ".ledger"


@dataclass(frozen=True, slots=True)
class Execution:
    """One activity execution as its worker recorded it, before the activity's code ran."""

    at_ms: int
    writer: str
    workflow_id: str
    activity_id: str
    attempt: int

    @property
    def key(self) -> Key:
        return self.workflow_id, self.activity_id


class Ledger:
    """Appends executions to `<directory>/<writer>.ledger`; one writer (a worker process) per file."""

    def __init__(self, directory: Path, writer: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.writer = writer
        self.path = directory / f"{writer}{SUFFIX}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, workflow_id: str, activity_id: str, attempt: int) -> None:
        for text in (workflow_id, activity_id):
            if "\t" in text or "\n" in text:
                raise ValueError(f"ledger fields cannot hold tabs or newlines: {text!r}")
        line = f"{time.time_ns() // 1_000_000}\t{self.writer}\t{workflow_id}\t{activity_id}\t{attempt}\n"
        os.write(self._fd, line.encode())  # one write of a short line: whole or not at all

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(directory: Path) -> list[Execution]:
    """Every execution recorded under `directory`, oldest first. A torn last line (the writer was killed inside
    `write`, which a short O_APPEND write makes very unlikely) is skipped."""
    out: list[Execution] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) != 5 or not parts[0].isdigit() or not parts[4].isdigit():
                continue
            out.append(Execution(int(parts[0]), parts[1], parts[2], parts[3], int(parts[4])))
    out.sort(key=lambda e: e.at_ms)
    return out


@dataclass
class Tally:
    """What the ledger says against the retry design (`design[key]` = executions the workflow asks for).

    Attributes:
        executions: lines in the ledger.
        re_executions: executions beyond the design, summed over activities (the headline figure).
        repeated_attempts: executions of an attempt number that already ran (a task delivered twice).
        extra_attempts: attempt numbers above the design's last (an attempt was timed out and retried).
        skipped_attempts: attempt numbers below the highest seen that never ran (marked started, never executed).
        missing: activities of the design that never ran at all.
        unexpected: executions of activities the design does not know.
        extras: the executions counted in `re_executions` (the latest ones of each activity), for attribution.
    """

    executions: int = 0
    re_executions: int = 0
    repeated_attempts: int = 0
    extra_attempts: int = 0
    skipped_attempts: int = 0
    missing: int = 0
    unexpected: int = 0
    extras: list[Execution] = field(default_factory=list, repr=False)

    def figures(self) -> dict[str, int]:
        return {"executions": self.executions, "re_executions": self.re_executions,
                "repeated_attempts": self.repeated_attempts, "extra_attempts": self.extra_attempts,
                "skipped_attempts": self.skipped_attempts, "missing_activities": self.missing,
                "unexpected_executions": self.unexpected}


def tally(executions: Iterable[Execution], design: Mapping[Key, int]) -> Tally:
    """Compare executions with the design: an activity designed to fail `k` times runs `k + 1` times."""
    by_key: dict[Key, list[Execution]] = defaultdict(list)
    result = Tally()
    for execution in executions:
        result.executions += 1
        if execution.key not in design:
            result.unexpected += 1
            continue
        by_key[execution.key].append(execution)
    for key, wanted in design.items():
        runs: Sequence[Execution] = by_key.get(key, [])
        if not runs:
            result.missing += 1
            continue
        extra = len(runs) - wanted
        if extra > 0:
            result.re_executions += extra
            result.extras.extend(runs[-extra:])
        attempts = Counter(e.attempt for e in runs)
        result.repeated_attempts += sum(n - 1 for n in attempts.values())
        highest = max(attempts)
        result.extra_attempts += max(0, highest - wanted)
        result.skipped_attempts += sum(1 for a in range(1, highest) if a not in attempts)
    return result
