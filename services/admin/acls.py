"""The Kafka ACLs each role needs (docs/security.md), and SCRAM users: `ostinato acl print|grant|revoke|user-set`.

A role's grants are data, derived from the topic prefix (and a worker's queue) with the same functions that name the
topics and groups, so a renamed group cannot drift away from its ACL. Grants name literal resources wherever the set
of names is known (a worker's two task topics, its group): a prefixed ACL on `<p>.tasks.orders` would also cover
the queue `orders.eu`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs do not re-export the SCRAM types
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from ostinato.kafka.clients import reader_group
from ostinato.kafka.task_topics import worker_group
from ostinato.schemas.topics import TaskKind, Topic, task_queue_problem, task_topic_name, topic_name

TIMEOUT_S = 30.0
SCRAM_ITERATIONS = 8192  # what kafka-configs uses by default for SCRAM-SHA-512
CLUSTER_RESOURCE = "kafka-cluster"  # Kafka's name for the one cluster resource


class Role(StrEnum):
    SERVER = "server"  # `ostinato server` (processor, frontend, connectors) and its set-up commands
    WORKER = "worker"  # the workers of one task queue
    AUDITOR = "auditor"  # reads the history topic, writes nothing
    INGRESS = "ingress"  # Kafka ingress mappings (`--ingress FILE`), in a server or on their own


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"


class Pattern(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class AclError(RuntimeError):
    """The broker refused or failed an ACL or SCRAM change."""


@dataclass(frozen=True)
class Grant:
    """Operations allowed on one resource (or every resource whose name starts with `name`, when prefixed)."""

    resource: Resource
    pattern: Pattern
    name: str
    operations: tuple[str, ...]  # Kafka's names: READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    why: str


@dataclass(frozen=True)
class IngressTopics:
    """What an ingress mapping touches outside the cluster's own topics."""

    name: str
    source: str
    dead_letters: str
    outcomes: str = ""  # an outcomes stream (source and dead letters empty): the topic it writes


def role_grants(role: Role, prefix: str, queue: str = "", ingress: Sequence[IngressTopics] = (),
                egress: Sequence[str] = ()) -> list[Grant]:
    """What `role` needs on the cluster of `prefix` (a worker: of `queue`; the ingress: of its mappings). READ, WRITE
    and the other operations each imply DESCRIBE in Kafka, so DESCRIBE is listed only where nothing else is granted.

    Raises:
        ValueError: a worker without a valid queue name, an ingress without mappings, or a queue or mappings given
            for another role.
    """
    if role is Role.INGRESS:
        if not ingress:
            raise ValueError("the ingress role's ACLs are per mapping: give --ingress FILE")
        if queue:
            raise ValueError("--queue is for the worker role, not ingress")
        return _ingress(prefix, ingress)
    if ingress:
        raise ValueError(f"--ingress is for the ingress role, not {role.value}")
    if egress and role is not Role.SERVER:
        raise ValueError(f"--egress-topics is for the server role, not {role.value}")
    if egress:
        return [*_server(prefix), *_egress(egress)]
    if role is Role.WORKER:
        problem = task_queue_problem(queue) if queue else "a worker's ACLs are per task queue: give --queue"
        if problem:
            raise ValueError(problem)
        return _worker(prefix, queue)
    if queue:
        raise ValueError(f"--queue is for the worker role, not {role.value}")
    return _server(prefix) if role is Role.SERVER else _auditor(prefix)


def _server(prefix: str) -> list[Grant]:
    return [
        Grant(Resource.TOPIC, Pattern.PREFIXED, f"{prefix}.",
              ("READ", "WRITE", "CREATE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
              "every topic of the cluster: reads commands, writes history, state, visibility, tasks and replies; "
              "creates task topics on first use; `cluster init` creates the topics and sets their configs"),
        Grant(Resource.GROUP, Pattern.PREFIXED, f"{prefix}-", ("READ",),
              f"{prefix}-history (the processor), {prefix}-archiver, {prefix}-visibility-opensearch, the "
              f"manual readers' *-unused groups, and reading {prefix}-worker-* for `task-queue describe`"),
        Grant(Resource.TRANSACTIONAL_ID, Pattern.PREFIXED, f"{prefix}-processor-", ("WRITE",),
              "the processor's transactions (one id per data directory, so a restart fences its predecessor)"),
        Grant(Resource.CLUSTER, Pattern.LITERAL, CLUSTER_RESOURCE, ("DESCRIBE", "DESCRIBE_CONFIGS"),
              "`cluster status` lists brokers and the controller; the server reads the brokers' "
              "group.min.session.timeout.ms, its groups' session"),
    ]


def _worker(prefix: str, queue: str) -> list[Grant]:
    group = worker_group(prefix, queue)
    return [
        Grant(Resource.TOPIC, Pattern.LITERAL, task_topic_name(prefix, queue, TaskKind.WORKFLOW), ("READ",),
              "its workflow and query tasks"),
        Grant(Resource.TOPIC, Pattern.LITERAL, task_topic_name(prefix, queue, TaskKind.ACTIVITY), ("READ",),
              "its activity tasks"),
        Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.COMMANDS), ("WRITE",),
              "completions, activity starts and heartbeats"),
        Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.REPLIES), ("READ", "WRITE"),
              "the engine's answers to its activity starts and heartbeats; its answers to queries"),
        Grant(Resource.GROUP, Pattern.LITERAL, group, ("READ",), "the queue's consumer group"),
        Grant(Resource.GROUP, Pattern.LITERAL, reader_group(group), ("DESCRIBE",),
              "its replies reader (assigned by hand, never joins the group)"),
    ]


def _egress(patterns: Sequence[str]) -> list[Grant]:
    """WRITE on the topics workflows may publish to (`--egress-topics`): a pattern ending in one `*` is a prefixed
    ACL, a plain name a literal one; Kafka's ACLs cannot express other wildcards."""
    grants = []
    for pattern in patterns:
        stem = pattern[:-1] if pattern.endswith("*") else pattern
        if not stem or any(ch in stem for ch in "*?[]"):
            raise ValueError(f"Kafka ACLs cannot express the egress pattern {pattern!r}: use topic names or a "
                             "prefix followed by one '*'")
        grants.append(Grant(Resource.TOPIC, Pattern.PREFIXED if pattern.endswith("*") else Pattern.LITERAL, stem,
                            ("WRITE",), "records workflows publish (workflow.publish, --egress-topics)"))
    return grants


def _ingress(prefix: str, mappings: Sequence[IngressTopics]) -> list[Grant]:
    grants: list[Grant] = [
        Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.CLUSTER), ("READ",),
              "the cluster's settings (shard count), read at start"),
        Grant(Resource.GROUP, Pattern.LITERAL, reader_group(f"{prefix}-cluster-reader"), ("DESCRIBE",),
              "the settings reader (assigned by hand, never joins the group)"),
        Grant(Resource.GROUP, Pattern.LITERAL, reader_group(f"{prefix}-ownership"), ("DESCRIBE",),
              "the reader of registered namespaces (assigned by hand, never joins the group)"),
        Grant(Resource.CLUSTER, Pattern.LITERAL, CLUSTER_RESOURCE, ("DESCRIBE_CONFIGS",),
              "the brokers' group.min.session.timeout.ms, its groups' session (a restarted ingress resumes within "
              "seconds)"),
    ]
    if not all(m.outcomes for m in mappings):  # outcomes streams alone write no command
        grants.insert(0, Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.COMMANDS), ("WRITE",),
                               "the commands each record becomes"))
    for m in mappings:
        if m.outcomes:
            grants += [
                Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.VISIBILITY), ("READ",),
                      f"outcomes {m.name}: the closing records it reports"),
                Grant(Resource.TOPIC, Pattern.LITERAL, m.outcomes, ("WRITE", "CREATE"),
                      f"outcomes {m.name}: one record per closed run (created at start when missing)"),
                Grant(Resource.GROUP, Pattern.LITERAL, f"{prefix}-outcomes-{m.name}", ("READ",),
                      f"outcomes {m.name}: its consumer group, whose offsets commit with its transactions"),
                Grant(Resource.TRANSACTIONAL_ID, Pattern.PREFIXED, f"{prefix}-outcomes-{m.name}-", ("WRITE",),
                      f"outcomes {m.name}: its transactions"),
            ]
            continue
        grants += [
            Grant(Resource.TOPIC, Pattern.LITERAL, m.source, ("READ",), f"mapping {m.name}: its source records"),
            Grant(Resource.TOPIC, Pattern.LITERAL, m.dead_letters, ("WRITE", "CREATE"),
                  f"mapping {m.name}: records that do not map (created at start when missing)"),
            Grant(Resource.GROUP, Pattern.LITERAL, f"{prefix}-ingress-{m.name}", ("READ",),
                  f"mapping {m.name}: its consumer group, whose offsets commit with its transactions"),
            Grant(Resource.TRANSACTIONAL_ID, Pattern.PREFIXED, f"{prefix}-ingress-{m.name}-", ("WRITE",),
                  f"mapping {m.name}: its transactions (one id per server or `--instance`)"),
        ]
    return grants


def _auditor(prefix: str) -> list[Grant]:
    return [
        Grant(Resource.TOPIC, Pattern.LITERAL, topic_name(prefix, Topic.HISTORY), ("READ",),
              "every event of every run (`check history`, `replay --from-kafka`)"),
        Grant(Resource.GROUP, Pattern.LITERAL, reader_group(f"{prefix}-checker"), ("DESCRIBE",),
              "the history reader (assigned by hand, never joins the group)"),
    ]


def principal_of(name: str) -> str:
    """`User:<name>` unless `name` already names its principal type."""
    return name if ":" in name else f"User:{name}"


_RESOURCE_TYPES = {Resource.TOPIC: ResourceType.TOPIC, Resource.GROUP: ResourceType.GROUP,
                   Resource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID, Resource.CLUSTER: ResourceType.BROKER}
_PATTERN_TYPES = {Pattern.LITERAL: ResourcePatternType.LITERAL, Pattern.PREFIXED: ResourcePatternType.PREFIXED}


def bindings(grants: Iterable[Grant], principal: str, host: str = "*") -> list[AclBinding]:
    """One ALLOW binding per operation of each grant, for `principal` (e.g. `User:orders-worker`)."""
    return [AclBinding(_RESOURCE_TYPES[g.resource], g.name, _PATTERN_TYPES[g.pattern], principal_of(principal), host,
                       AclOperation[op], AclPermissionType.ALLOW)
            for g in grants for op in g.operations]


def grant(admin: AdminClient, acls: Sequence[AclBinding], timeout: float = TIMEOUT_S) -> None:
    """Create `acls` (creating one that exists changes nothing)."""
    _wait(admin.create_acls(list(acls), request_timeout=timeout), timeout)


def revoke(admin: AdminClient, acls: Sequence[AclBinding], timeout: float = TIMEOUT_S) -> int:
    """Delete exactly `acls`; how many bindings the broker removed."""
    filters = [AclBindingFilter(a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation,
                                a.permission_type) for a in acls]
    removed = _wait(admin.delete_acls(filters, request_timeout=timeout), timeout)
    return sum(len(found or ()) for found in removed)


def set_scram_user(admin: AdminClient, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                   iterations: int = SCRAM_ITERATIONS, timeout: float = TIMEOUT_S) -> None:
    """Create the SCRAM credential of `user` for `mechanism`, or replace its password."""
    info = ScramCredentialInfo(_mechanism(mechanism), iterations)
    _wait(admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())],
                                             request_timeout=timeout), timeout)


def delete_scram_user(admin: AdminClient, user: str, mechanism: str = "SCRAM-SHA-512",
                      timeout: float = TIMEOUT_S) -> None:
    _wait(admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, _mechanism(mechanism))],
                                             request_timeout=timeout), timeout)


def _mechanism(name: str) -> ScramMechanism:
    try:
        return ScramMechanism[name.upper().replace("-", "_")]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {name!r}: SCRAM-SHA-256 or SCRAM-SHA-512") from None


def _wait(futures: Mapping[Any, Future[Any]], timeout: float) -> list[Any]:
    results, problems = [], []
    for key, future in futures.items():
        try:
            results.append(future.result(timeout))
        except KafkaException as exc:
            problems.append(f"{key}: {exc.args[0].str() if exc.args else exc}")
    if problems:
        raise AclError("; ".join(problems))
    return results


_TOOL_RESOURCE = {Resource.TOPIC: "--topic", Resource.GROUP: "--group", Resource.TRANSACTIONAL_ID: "--transactional-id"}


def kafka_acls_commands(grants: Iterable[Grant], principal: str, bootstrap: str) -> list[str]:
    """The same grants as `kafka-acls.sh` command lines, for operators who manage ACLs with Kafka's own tools."""
    lines = []
    for g in grants:
        resource = "--cluster" if g.resource is Resource.CLUSTER else f"{_TOOL_RESOURCE[g.resource]} '{g.name}'"
        pattern = " --resource-pattern-type prefixed" if g.pattern is Pattern.PREFIXED else ""
        ops = " ".join(f"--operation {_tool_operation(op)}" for op in g.operations)
        lines.append(f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties --add "
                     f"--allow-principal '{principal_of(principal)}' {ops} {resource}{pattern}")
    return lines


def _tool_operation(op: str) -> str:
    return "".join(part.capitalize() for part in op.split("_"))
