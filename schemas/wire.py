"""The wire vocabulary: the names of the record types on every topic (DESIGN.md §3) and the command envelope.

Every producer and reader (the core, the processor, the gateway, the workers, the connectors, the tests) names
records through this module, so a type is spelled once. The names are the Avro full names in `avro/*.avsc`; a
unit test checks each against the codec's registry.
"""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]

COMMAND_PREFIX = "ostinato.command."
REPLY_PREFIX = "ostinato.reply."

# -- one record type per topic ------------------------------------------------------------------------------------
COMMAND = COMMAND_PREFIX + "Command"  # <prefix>.commands
HISTORY_EVENT = "ostinato.history.HistoryEvent"  # <prefix>.history
MUTABLE_STATE = "ostinato.state.MutableState"  # <prefix>.state, run keys
CURRENT_RUN = "ostinato.state.CurrentRun"  # <prefix>.state, workflow keys
VISIBILITY = "ostinato.visibility.VisibilityRecord"  # <prefix>.visibility
WORKFLOW_TASK = "ostinato.task.WorkflowTask"  # <prefix>.tasks.<queue>.workflow
QUERY_TASK = "ostinato.task.QueryTask"  # <prefix>.tasks.<queue>.workflow, beside workflow tasks
ACTIVITY_TASK = "ostinato.task.ActivityTask"  # <prefix>.tasks.<queue>.activity
REPLY = REPLY_PREFIX + "Reply"  # <prefix>.replies
CLUSTER_SETTINGS = "ostinato.cluster.ClusterSettings"  # <prefix>.cluster, key `settings`
SHARD_OWNER = "ostinato.cluster.ShardOwner"  # <prefix>.cluster, keys `shard/<n>`
NAMESPACE = "ostinato.cluster.Namespace"  # <prefix>.cluster, keys `namespace/<name>`
SEARCH_ATTRIBUTE = "ostinato.cluster.SearchAttribute"  # <prefix>.cluster, keys `search_attribute/<namespace>/<name>`
TASK_QUEUE_RATE_LIMIT = "ostinato.cluster.TaskQueueRateLimit"  # <prefix>.cluster, keys `task_queue_rate_limit/<queue>`
TASK_QUEUE_VERSIONING = "ostinato.cluster.TaskQueueVersioning"  # <prefix>.cluster, keys `deployment/<ns>/<queue>`

# -- branches of Reply.body ---------------------------------------------------------------------------------------
ACCEPTED = REPLY_PREFIX + "Accepted"
REJECTED = REPLY_PREFIX + "Rejected"
WORKFLOW_STARTED = REPLY_PREFIX + "WorkflowStarted"
QUERY_RESULT = REPLY_PREFIX + "QueryResult"
REDRIVEN = REPLY_PREFIX + "Redriven"


def command_type(name: str) -> str:
    """The full type name of a command body: `"Start..."` becomes `"ostinato.command.Start..."`; full names pass."""
    return name if "." in name else COMMAND_PREFIX + name


def short_name(type_name: str) -> str:
    """A command or reply type without its namespace, for messages: `"StartWorkflowExecution"`."""
    return type_name.rpartition(".")[2]


def command(namespace: str, workflow_id: str, body: tuple[str, Record], *, request_id: str, identity: str,
            time_ms: int, run_id: str = "", reply_partition: int | None = None) -> Record:
    """An `ostinato.command.Command` envelope around `body` (whose type may be given short).

    `request_id` is the idempotency key; `reply_partition`, when set, is the partition of `<prefix>.replies` the
    sender reads for the answer (None: nobody waits for one).
    """
    name, record = body
    return {"namespace": namespace, "workflow_id": workflow_id, "run_id": run_id, "request_id": request_id,
            "identity": identity, "time_ms": time_ms, "reply_partition": reply_partition,
            "body": (command_type(name), record)}


def rejected(code: str, message: str, existing_run_id: str = "") -> tuple[str, Record]:
    """A `Rejected` reply body."""
    return REJECTED, {"code": code, "message": message, "existing_run_id": existing_run_id}


def reply(request_id: str, namespace: str, workflow_id: str, body: tuple[str, Record]) -> Record:
    """An `ostinato.reply.Reply` record: the answer to `request_id`."""
    return {"request_id": request_id, "namespace": namespace, "workflow_id": workflow_id, "body": body}
