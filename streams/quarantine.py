"""Commands the core failed on, kept in the run they were for, so no run is left silently stranded.

A command whose decision raised (a bug in the core) or whose outputs no record could hold is rejected alone, and
the rest of the batch goes on. If nobody learns of that rejection, the run may wait for ever for what the
command would have recorded (an activity's outcome, a timer's firing). So the shell also calls `quarantine`: the
command is kept in its run's state (`RunState.quarantine`, ephemeral like attempt state: written to the state
changelog in the same transaction, never to history), `describe` shows it, both shells count it, and
`RedriveWorkflowExecution` (`redrive`) decides the kept commands again with the code running then, keeping only
those that still fail. Both shells call the same two functions, so the Kafka shard and the in-memory engine
behave alike.

```
  command ──decide──► raises / output too large ──► Rejected (INTERNAL | TOO_LARGE), as before
                                                        │ a run to attach to, and nobody was told
                                                        ▼
                                       run.quarantine += {command, error, offset, times}   (last 10)
                                                        │ RedriveWorkflowExecution, after an upgrade
                                                        ▼
                     decide(command) again: APPLIED or REJECTED ──► out;  FAILED ──► stays (failures + 1)
```
"""

from __future__ import annotations

import copy
from typing import Any

from ostinato.schemas import codec, wire
from ostinato.streams.config import Config
from ostinato.streams.deciders.common import addressed_run
from ostinato.streams.model import RunState, Workflow
from ostinato.streams.writer import Step, Writer

Record = dict[str, Any]

MAX_QUARANTINED = 10  # per run: the oldest leave first
MAX_KEPT_BYTES = 2**20  # the kept commands of a run, encoded, in all: its state record must stay well below 4 MiB
MAX_MESSAGE_CHARS = 2_000
REDRIVE = wire.command_type("RedriveWorkflowExecution")


def quarantinable(command: Record, code: str) -> bool:
    """Whether a failed command is kept in its run.

    A bug (`INTERNAL`) always: whoever sent it may not be waiting for an answer, and the run may wait for what it
    would have recorded. An output over the record limit (`TOO_LARGE`), or a published record whose topic cannot
    take it (`EGRESS_REFUSED`), only when nobody waits for the answer: a sender that waits is told. A re-drive never:
    its sender is told, and the quarantine stays as it was.
    """
    if command["body"][0] == REDRIVE:
        return False
    return code == "INTERNAL" or (code in ("TOO_LARGE", "EGRESS_REFUSED") and command.get("reply_partition") is None)


def quarantine(workflow: Workflow, command: Record, offset: int, code: str, error_type: str, message: str,
               now_ms: int, config: Config) -> Step | None:
    """Keep `command`, which failed with `code`, in the run it addresses (the current run when it names none).

    `workflow` must be as the previous command left it (the failed decision discarded). Returns the step that
    writes the run's new state (no events, no deadlines moved), or None when there is no run to attach the
    command to: then the failure stays a rejection only.
    """
    run = _target(workflow, command)
    if run is None:
        return None
    w = Writer(workflow, now_ms, config, command, offset)
    edited = w.edit(run.run_id)
    entry = {
        "command": command, "command_type": wire.short_name(command["body"][0]),
        "request_id": command["request_id"], "offset": offset, "code": code, "error_type": error_type,
        "error_message": message[:MAX_MESSAGE_CHARS], "first_failed_time_ms": now_ms, "last_failed_time_ms": now_ms,
        "failures": 1,
    }
    edited.quarantine = _bounded(_with(edited.quarantine, entry))
    return w.finish()


def quarantined_message(message: str, run_id: str) -> str:
    """The rejection's message for a command that was also quarantined."""
    return f"{message} (quarantined in run {run_id}: describe shows it, redrive decides it again)"


def _target(workflow: Workflow, command: Record) -> RunState | None:
    if command["run_id"]:
        return workflow.runs.get(command["run_id"])
    return workflow.current_run()


def _same(a: Record, b: Record) -> bool:
    return (a["request_id"], a["command_type"], a["offset"]) == (b["request_id"], b["command_type"], b["offset"])


def _with(entries: list[Record], entry: Record) -> list[Record]:
    """`entries` with `entry` added last, counted again if the same command is already kept (it moves last)."""
    for i, kept in enumerate(entries):
        if _same(kept, entry):
            again = {**entry, "first_failed_time_ms": kept["first_failed_time_ms"], "failures": kept["failures"] + 1}
            return [*entries[:i], *entries[i + 1:], again]
    return [*entries, entry]


def _bounded(entries: list[Record]) -> list[Record]:
    """The last MAX_QUARANTINED entries, the oldest dropped while the kept commands exceed MAX_KEPT_BYTES; a
    command larger than that on its own is kept without its body (it shows, but cannot be re-driven)."""
    entries = entries[-MAX_QUARANTINED:]
    sizes = [_size(e["command"]) for e in entries]
    if sizes[-1] > MAX_KEPT_BYTES:
        entries[-1] = {**entries[-1], "command": None}
        sizes[-1] = 0
    while sum(sizes) > MAX_KEPT_BYTES:
        entries, sizes = entries[1:], sizes[1:]
    return entries


def _size(command: Record | None) -> int:
    if command is None:
        return 0
    try:
        return len(codec.encode(wire.COMMAND, command))
    except ValueError:  # cannot be written at all: keep it without its body
        return MAX_KEPT_BYTES + 1


# -- RedriveWorkflowExecution ---------------------------------------------------------------------------------------

def redrive(w: Writer, body: Record) -> Step:
    """Decide the run's quarantined commands again, oldest first, each at its original offset and with no reply
    (its sender has long stopped waiting). Each that decides without raising (applied, or rejected as today's code
    sees it) leaves the quarantine; each that raises again stays, its workflow left as before it. Returns the
    composition of their steps, plus the run's new quarantine and the answer."""
    run = addressed_run(w)
    if run is None:
        return w.reject("NOT_FOUND", f"no run {w.command['run_id'] or '(current)'} of workflow "
                                     f"{w.workflow.workflow_id}")
    from ostinato.streams.deciders import decide

    run_id, workflow = run.run_id, w.workflow
    composed = Step()
    outcomes: list[Record] = []
    still: list[Record] = []
    for entry in run.quarantine:
        command = entry["command"]
        if command is None:
            outcomes.append(_outcome(entry, "REJECTED", "it was too large to keep, so it cannot be decided again"))
            continue
        before = copy.deepcopy(workflow)
        try:
            step = decide(workflow, {**command, "reply_partition": None}, w.now_ms, w.config, entry["offset"],
                          w.history)
        except Exception as exc:  # noqa: BLE001 - still a bug: the command stays, the workflow as it was
            workflow.runs, workflow.current = before.runs, before.current
            message = f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE_CHARS]
            still.append({**entry, "error_type": type(exc).__name__, "error_message": message,
                          "last_failed_time_ms": w.now_ms, "failures": entry["failures"] + 1})
            outcomes.append(_outcome(entry, "FAILED", message))
            continue
        rejection = step.rejection
        outcomes.append(_outcome(entry, "APPLIED") if rejection is None
                        else _outcome(entry, "REJECTED", f"{rejection['code']}: {rejection['message']}"))
        _compose(composed, step)
    target = workflow.runs.get(run_id)
    if target is not None:  # gone if a re-driven command deleted it (its retention)
        target.quarantine = still
        if run_id not in composed.changed_runs:
            composed.changed_runs.append(run_id)
    w.reply((wire.REDRIVEN, {"run_id": run_id, "outcomes": outcomes}))
    composed.actions.extend(w.step.actions)
    return composed


def _outcome(entry: Record, outcome: str, message: str = "") -> Record:
    return {"request_id": entry["request_id"], "command_type": entry["command_type"], "outcome": outcome,
            "message": message[:MAX_MESSAGE_CHARS]}


def _compose(into: Step, step: Step) -> None:
    """Append one decision to a composed step: its actions (timer changes included) apply in order, so the result
    is what deciding the commands one after the other would have produced. A rejection changed nothing, but its
    actions stand, as the shells perform them (a refused child start still notifies its parent)."""
    into.actions.extend(step.actions)
    if step.rejection is not None:
        return
    into.events.extend(step.events)
    into.changed_runs.extend(r for r in step.changed_runs if r not in into.changed_runs)
    into.pointer_changed = into.pointer_changed or step.pointer_changed
