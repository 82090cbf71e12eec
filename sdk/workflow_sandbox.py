"""`ostinato.worker.workflow_sandbox`: Temporal's workflow runner names, so `Worker(workflow_runner=...)` ports.

Ostinato does not sandbox workflows: every runner runs them in the worker's interpreter, with its determinism guards
(`RestrictedWorkflowAccessError` for the clock, randomness, I/O and threads in workflow code), and imports are not
re-done per run. The names exist so Temporal code that picks a runner keeps working unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

__all__ = ["SandboxRestrictions", "SandboxedWorkflowRunner", "UnsandboxedWorkflowRunner", "WorkflowRunner"]


class WorkflowRunner:
    """How a worker runs its workflows. Every runner of Ostinato runs them the same way (see the module)."""


class UnsandboxedWorkflowRunner(WorkflowRunner):
    """Temporal's runner without a sandbox: what Ostinato always does."""


@dataclass(frozen=True)
class SandboxRestrictions:
    """Accepted for Temporal's `SandboxedWorkflowRunner(restrictions=...)`; Ostinato imports nothing per run, so
    pass-through modules change nothing."""

    passthrough_modules: frozenset[str] = field(default_factory=frozenset)
    passthrough_all_modules: bool = False

    default: ClassVar[SandboxRestrictions]

    def with_passthrough_modules(self, *modules: str) -> SandboxRestrictions:
        return replace(self, passthrough_modules=self.passthrough_modules | frozenset(modules))

    def with_passthrough_all_modules(self) -> SandboxRestrictions:
        return replace(self, passthrough_all_modules=True)


SandboxRestrictions.default = SandboxRestrictions()


class SandboxedWorkflowRunner(WorkflowRunner):
    """Temporal's default runner. Ostinato has no sandbox: workflows run as with `UnsandboxedWorkflowRunner`, under
    the determinism guards; `restrictions` are kept, not enforced."""

    def __init__(self, *, restrictions: SandboxRestrictions = SandboxRestrictions.default,
                 runner_class: type[WorkflowRunner] = UnsandboxedWorkflowRunner) -> None:
        self.restrictions = restrictions
        self.runner_class = runner_class
