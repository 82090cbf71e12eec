"""Lifecycles as transition tables: each names its states, the moves allowed between them, and fails loudly.

An applier that would make an illegal move is a bug in a decider (deciders reject before they append), so it
raises with both states in the message instead of quietly corrupting state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class IllegalTransition(RuntimeError):
    """A move the lifecycle table does not allow."""


@dataclass(frozen=True)
class Lifecycle:
    name: str
    moves: Mapping[str, frozenset[str]]

    def check(self, current: str, target: str) -> str:
        if target not in self.moves.get(current, frozenset()):
            raise IllegalTransition(f"{self.name}: cannot move from {current} to {target}")
        return target


_CLOSED = frozenset({"COMPLETED", "FAILED", "CANCELED", "TERMINATED", "CONTINUED_AS_NEW", "TIMED_OUT"})

# A run of a workflow.
#
#   (none) ──start──► RUNNING ──complete──────► COMPLETED
#                        │ ├───fail──────────► FAILED
#                        │ ├───cancel────────► CANCELED
#                        │ ├───terminate─────► TERMINATED
#                        │ ├───continue──────► CONTINUED_AS_NEW
#                        │ └───time out──────► TIMED_OUT
#                        └──(nothing leaves a closed state)
RUN = Lifecycle("run", {"NONE": frozenset({"RUNNING"}), "RUNNING": _CLOSED})

# The workflow task of a run (at most one at a time). Ostinato records "started" when it dispatches the task to
# Kafka, so SCHEDULED is only ever seen between the two events of one step.
#
#   NONE ──schedule──► SCHEDULED ──start──► STARTED ──complete / fail / time out──► NONE
WORKFLOW_TASK = Lifecycle("workflow task", {
    "NONE": frozenset({"SCHEDULED"}),
    "SCHEDULED": frozenset({"STARTED"}),
    "STARTED": frozenset({"NONE"}),
})

# An activity, across its attempts. Retries and "started" reports change attempt state, not this lifecycle;
# history records the outcome of the last attempt only.
#
#   NONE ──schedule──► SCHEDULED ──completed / failed / timed out / canceled──► NONE
#                         └──cancel requested──► CANCEL_REQUESTED ──(same outcomes)──► NONE
ACTIVITY = Lifecycle("activity", {
    "NONE": frozenset({"SCHEDULED"}),
    "SCHEDULED": frozenset({"CANCEL_REQUESTED", "NONE"}),
    "CANCEL_REQUESTED": frozenset({"NONE"}),
})

# A user timer.   NONE ──start──► STARTED ──fire / cancel──► NONE
TIMER = Lifecycle("timer", {"NONE": frozenset({"STARTED"}), "STARTED": frozenset({"NONE"})})

# A child workflow, from the parent's side.
#
#   NONE ──initiate──► INITIATED ──started──► STARTED ──completed / failed / canceled / terminated / timed out──► NONE
#                          └──start failed──► NONE
CHILD = Lifecycle("child", {
    "NONE": frozenset({"INITIATED"}),
    "INITIATED": frozenset({"STARTED", "NONE"}),
    "STARTED": frozenset({"NONE"}),
})
