"""The pre-deploy replay gate: replay sampled histories against the new workflow code and report per workflow type.

Replay goes through the SDK's `Replayer.workflow_replay_iterator` (what `replay_workflows(...,
raise_on_replay_failure=False)` is built on, and one result per history even when two share a run id), the same
path a user's own CI test takes, so the gate and the SDK can never disagree about what is deterministic.

Workflow types the new code no longer registers: a closed run of such a type is skipped (nothing will ever replay
it again, bar a query, which the new code could not answer anyway); an open run of one fails the gate, because
its next workflow task would find no code to run; a history file named on the command line is always replayed,
so an unregistered type there fails too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ostinato.sdk.replayer import Replayer
from ostinato.services.cli.replay_sources import Candidate

__all__ = ["GateReport", "TypeReport", "replay_candidates"]


@dataclass
class TypeReport:
    """How one workflow type's sampled runs replayed."""

    workflow_type: str
    registered: bool
    replayed: int = 0
    failed: int = 0
    skipped: int = 0  # closed runs of a type the new code does not register
    open_runs: int = 0  # of the runs sampled (replayed or not)
    first_failure: str = ""  # the label of the first run that failed
    first_error: str = ""  # its error, `NondeterminismError: ...`

    @property
    def passed(self) -> int:
        return self.replayed - self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"registered": self.registered, "replayed": self.replayed, "passed": self.passed,
                "failed": self.failed, "skipped": self.skipped, "open_runs": self.open_runs,
                "first_failure": ({"history": self.first_failure, "error": self.first_error}
                                  if self.failed else None)}


@dataclass
class GateReport:
    """Everything the gate found; `exit_code` is what the command exits with (0 pass, 1 non-determinism)."""

    types: dict[str, TypeReport] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (label, error) of every failed run
    unreadable: Counter[str] = field(default_factory=Counter)  # why runs could not be replayed at all -> runs
    considered: int = 0  # runs the sources looked at before sampling

    @property
    def replayed(self) -> int:
        return sum(t.replayed for t in self.types.values())

    @property
    def skipped(self) -> int:
        return sum(t.skipped for t in self.types.values())

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.failures, "exit_code": self.exit_code, "considered": self.considered,
            "replayed": self.replayed, "failed": len(self.failures), "skipped_unknown_types": self.skipped,
            "unreadable": dict(sorted(self.unreadable.items())),
            "types": {name: t.to_dict() for name, t in sorted(self.types.items())},
            "failures": [{"history": label, "error": error} for label, error in self.failures],
        }


def replay_candidates(replayer: Replayer, candidates: Iterable[Candidate]) -> GateReport:
    """Replay every candidate that should be (see the module's note on unregistered types), type by type."""
    report = GateReport()
    by_type: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_type.setdefault(candidate.workflow_type, []).append(candidate)
    for workflow_type, group in by_type.items():
        kind = report.types[workflow_type] = TypeReport(workflow_type, workflow_type in replayer.definitions)
        kind.open_runs = sum(c.open for c in group)
        chosen = group if kind.registered else [c for c in group if c.must_replay]
        kind.skipped = len(group) - len(chosen)
        failures = asyncio.run(_replay(replayer, chosen))
        kind.replayed = len(chosen)
        for label, error in failures:
            text = f"{type(error).__name__}: {error}"
            if not kind.registered:
                text += " (a workflow type with open runs was removed from the new code)"
            report.failures.append((label, text))
            kind.failed += 1
            if not kind.first_failure:
                kind.first_failure, kind.first_error = label, text
    return report


async def _replay(replayer: Replayer, chosen: list[Candidate]) -> list[tuple[str, Exception]]:
    """(label, error) of each history that failed, in the order given (most recent first)."""
    labels = {id(c.history): c.label for c in chosen}
    failed: list[tuple[str, Exception]] = []
    async with replayer.workflow_replay_iterator([c.history for c in chosen]) as results:
        async for result in results:
            if result.replay_failure is not None:
                failed.append((labels[id(result.history)], result.replay_failure))
    return failed
