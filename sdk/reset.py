"""Reset (Ostinato's own client API: temporalio's WorkflowHandle has no reset): start a new run of a workflow from a
completed workflow task of one of its runs, so a workflow broken by a bad deploy continues with fixed code."""

from __future__ import annotations

import uuid
from enum import Enum

from ostinato.schemas.wire import ACCEPTED, REJECTED, command_type
from ostinato.sdk import exceptions as exc
from ostinato.sdk._transport import ClientTransport


class ResetType(Enum):
    """Where to cut when no event id is given (Temporal's `ResetType` values)."""

    FIRST_WORKFLOW_TASK = "FIRST_WORKFLOW_TASK"
    LAST_WORKFLOW_TASK = "LAST_WORKFLOW_TASK"


def reset_body(event_id: int | None, reset_type: ResetType | str | None, reason: str, reapply: bool,
               ) -> dict[str, object]:
    """The ResetWorkflowExecution command's body; exactly one of `event_id` and `reset_type`."""
    if (event_id is None) == (reset_type is None):
        raise ValueError("reset needs exactly one of event_id (a WORKFLOW_TASK_COMPLETED event) and reset_type")
    kind = "UNSPECIFIED" if reset_type is None else ResetType(
        reset_type.upper() + ("" if reset_type.upper().endswith("_WORKFLOW_TASK") else "_WORKFLOW_TASK")
        if isinstance(reset_type, str) else reset_type.value).value
    if event_id is not None and event_id <= 0:
        raise ValueError(f"event_id must be a positive event id, not {event_id}")
    return {"event_id": event_id or 0, "reset_type": kind, "reason": reason, "reapply_signals": reapply}


async def reset_run(service: ClientTransport, namespace: str, workflow_id: str, run_id: str, identity: str,
                    body: dict[str, object], request_id: str = "") -> str:
    """Send the reset to the workflow's owner and return the new run's id; a refusal raises `RPCError`."""
    reply_type, record = await service.send(namespace, workflow_id, run_id,
                                            (command_type("ResetWorkflowExecution"), body),
                                            request_id or uuid.uuid4().hex, identity)
    if reply_type == REJECTED:
        raise exc.RPCError(record["message"], code=record["code"],
                           status=404 if record["code"] == "NOT_FOUND" else 400)
    if reply_type != ACCEPTED:
        raise exc.RPCError(f"expected an {ACCEPTED} answer, got {reply_type}", status=200, code="malformed")
    return str(record["run_id"])
