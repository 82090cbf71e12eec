"""Record keys of DESIGN.md §3: `/`-joined components, each escaped so that any workflow id splits cleanly."""

from __future__ import annotations

from ostinato.schemas.partitioner import partition_for

__all__ = [
    "EVENT_ID_WIDTH",
    "activity_task_key",
    "history_key",
    "history_key_in",
    "join_key",
    "run_key",
    "shard_for",
    "split_key",
    "workflow_key",
]

# Twenty digits hold every non-negative Avro long (2**63 - 1 has 19), so history keys sort in event order.
EVENT_ID_WIDTH = 20
_MAX_EVENT_ID = 2**63 - 1


def _escape(component: str) -> str:
    # `%` first, or the `%` of `%2F` would be escaped again.
    return component.replace("%", "%25").replace("/", "%2F")


def _unescape(component: str) -> str:
    if "%" not in component:
        return component
    first, *rest = component.split("%")
    out = [first]
    for piece in rest:
        escape = piece[:2]
        if escape == "25":
            out.append("%")
        elif escape == "2F":
            out.append("/")
        else:
            # Only the two upper-case escapes exist: a key has exactly one spelling, so it has exactly one shard.
            raise ValueError(f"malformed escape {'%' + escape!r} in key component {component!r}: expected %25 or %2F")
        out.append(piece[2:])
    return "".join(out)


def join_key(*components: str) -> str:
    """Join components into a record key, escaping `%` as `%25` and `/` as `%2F` in each.

    Workflow ids are user text and may contain `/`; escaping keeps the component boundaries, so `split_key`
    recovers them and no two different component lists share a key (or, by accident, a shard).

    Raises:
        ValueError: if no component is given (the empty key would split to one empty component).
    """
    if not components:
        raise ValueError("a key needs at least one component")
    for c in components:
        if "%" in c or "/" in c:
            return "/".join([_escape(c) for c in components])
    return "/".join(components)  # nothing to escape: the common case, and a hot path of the processor


def split_key(key: str) -> list[str]:
    """The components of a key made by `join_key`, unescaped: `split_key(join_key(*parts)) == list(parts)`.

    Raises:
        ValueError: if a `%` is not followed by `25` or `2F` (lower-case hex is refused too, because the same
            components spelled differently would hash to a different partition).
    """
    return [_unescape(c) for c in key.split("/")]


def workflow_key(namespace: str, workflow_id: str) -> str:
    """`ns/workflow_id`: the key of commands and workflow tasks, and what the shard of a workflow is hashed from."""
    return join_key(namespace, workflow_id)


def run_key(namespace: str, workflow_id: str, run_id: str) -> str:
    """`ns/workflow_id/run_id`: the key of a run's state and visibility records."""
    return join_key(namespace, workflow_id, run_id)


def history_key(namespace: str, workflow_id: str, run_id: str, event_id: int) -> str:
    """`ns/workflow_id/run_id/event_id`, the event id zero-padded to 20 digits so a run's keys sort in event order.

    Raises:
        ValueError: if `event_id` is negative or beyond an Avro long (it would break the fixed width).
    """
    return history_key_in(run_key(namespace, workflow_id, run_id), event_id)


def history_key_in(run: str, event_id: int) -> str:
    """`history_key` below a `run_key` already made: a step writing several events of a run escapes its
    components once.

    Raises:
        ValueError: if `event_id` is negative or beyond an Avro long (it would break the fixed width).
    """
    if not 0 <= event_id <= _MAX_EVENT_ID:
        raise ValueError(f"event_id must be in [0, 2**63 - 1], not {event_id}")
    return f"{run}/{event_id:0{EVENT_ID_WIDTH}d}"


def activity_task_key(namespace: str, workflow_id: str, activity_id: str) -> str:
    """`ns/workflow_id/activity_id`: one key per activity, so a workflow's fan-out spreads over all partitions."""
    return join_key(namespace, workflow_id, activity_id)


def shard_for(namespace: str, workflow_id: str, shards: int) -> int:
    """The shard (partition of commands, history, state and visibility) that owns a workflow.

    Hashed from `workflow_key`, never from a run key: every run of a workflow id lives on the same shard.
    """
    return partition_for(workflow_key(namespace, workflow_id), shards)
