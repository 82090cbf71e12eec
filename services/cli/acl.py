"""`ostinato acl ...`: the Kafka ACLs of a role (print, grant, revoke) and SCRAM users, through Kafka's Admin API."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from ostinato.kafka.clients import admin_client, wait_for_brokers
from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.admin.acls import (
    AclError,
    Grant,
    IngressTopics,
    Role,
    bindings,
    delete_scram_user,
    grant,
    kafka_acls_commands,
    principal_of,
    revoke,
    role_grants,
    set_scram_user,
)
from ostinato.services.cli.check import DEFAULT_BOOTSTRAP, KafkaOpt, PrefixOpt
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

app = typer.Typer(help="Kafka ACLs per role (server, worker of a queue, auditor) and SCRAM users.",
                  no_args_is_help=True)


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    COMMANDS = "commands"  # kafka-acls.sh lines


RoleOpt = Annotated[Role, typer.Option("--role", help="server, worker, auditor or ingress.")]
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="The task queue (worker role only).")]
EgressOpt = Annotated[str, typer.Option("--egress-topics", help="The server's --egress-topics (server role only).")]
IngressOpt = Annotated[Path | None, typer.Option("--ingress", exists=True, dir_okay=False,
                                                 help="The ingress file (ingress role only).")]
PrincipalOpt = Annotated[str, typer.Option("--principal", "-p",
                                           help="Whom to grant: a SCRAM user name, or a principal (User:CN=...).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds to wait for Kafka.")]


T = TypeVar("T")


def _grants(role: Role, prefix: str, queue: str, ingress: Path | None = None, egress: str = "") -> list[Grant]:
    try:
        return role_grants(role, prefix, queue, _ingress_topics(ingress) if ingress is not None else (),
                           [p.strip() for p in egress.split(",") if p.strip()])
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None


def _ingress_topics(path: Path) -> list[IngressTopics]:
    from ostinato.connectors.ingress_mapping import load  # MappingError is a ValueError: reported by _grants

    config = load(path)
    return [*(IngressTopics(m.name, m.topic, m.dead_letters) for m in config.mappings),
            *(IngressTopics(o.name, "", "", outcomes=o.topic) for o in config.outcomes)]


@app.command("print")
def print_acls(
    role: RoleOpt,
    queue: QueueOpt = "",
    ingress: IngressOpt = None,
    egress_topics: EgressOpt = "",
    principal: PrincipalOpt = "",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    output: Annotated[Format, typer.Option("--output", "-o", help="table, json or commands (kafka-acls.sh).")] =
    Format.TABLE,
) -> None:
    """The ACLs a role needs, without touching Kafka."""
    grants = _grants(role, prefix, queue, ingress, egress_topics)
    if output is Format.JSON:
        print(json.dumps([dataclasses.asdict(g) for g in grants], indent=2))
        return
    if output is Format.COMMANDS:
        for line in kafka_acls_commands(grants, principal or f"<{role.value}-principal>", kafka):
            print(line)
        return
    title = f"{role.value}" + (f" of queue {queue}" if queue else "") + f", prefix {prefix}" + \
        (f", for {principal_of(principal)}" if principal else "")
    table = Table(title=title, title_justify="left")  # why each is needed: `-o json` and docs/security.md
    for heading in ("resource", "pattern", "name"):
        table.add_column(heading, no_wrap=True)
    table.add_column("operations")
    for g in grants:
        table.add_row(g.resource.value, g.pattern.value, g.name, ", ".join(g.operations))
    console.print(table)


@app.command("grant")
def grant_acls(
    role: RoleOpt,
    principal: PrincipalOpt,
    queue: QueueOpt = "",
    ingress: IngressOpt = None,
    egress_topics: EgressOpt = "",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create the role's ACLs for a principal (as a user allowed to alter ACLs, e.g. the broker's super user)."""
    use_kafka_config(kafka_config)
    acls = bindings(_grants(role, prefix, queue, ingress, egress_topics), principal)
    admin = admin_client(kafka)
    wait_for_brokers(admin, kafka, timeout)
    _run(lambda: grant(admin, acls, timeout))
    console.print(f"granted {len(acls)} ACLs of role {role.value} to {principal_of(principal)}")


@app.command("revoke")
def revoke_acls(
    role: RoleOpt,
    principal: PrincipalOpt,
    queue: QueueOpt = "",
    ingress: IngressOpt = None,
    egress_topics: EgressOpt = "",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete exactly the role's ACLs of a principal (others it holds stay)."""
    use_kafka_config(kafka_config)
    acls = bindings(_grants(role, prefix, queue, ingress, egress_topics), principal)
    admin = admin_client(kafka)
    wait_for_brokers(admin, kafka, timeout)
    removed = _run(lambda: revoke(admin, acls, timeout))
    console.print(f"removed {removed} ACLs of role {role.value} from {principal_of(principal)}")


@app.command("user-set")
def user_set(
    user: Annotated[str, typer.Argument(help="The SCRAM user name (its principal is User:<name>).")],
    password_file: Annotated[Path | None, typer.Option(
        "--password-file", help="Read the password from this file ('-': standard input); else it is prompted for.")]
    = None,
    mechanism: Annotated[str, typer.Option(help="SCRAM-SHA-512 or SCRAM-SHA-256.")] = "SCRAM-SHA-512",
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create a SCRAM user or change its password (the password is never printed)."""
    use_kafka_config(kafka_config)
    if password_file is None:
        password = typer.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    else:
        text = sys.stdin.read() if str(password_file) == "-" else password_file.read_text()
        password = text.rstrip("\r\n")
    if not password:
        err_console.print("[red]error:[/red] an empty password", highlight=False)
        raise typer.Exit(2)
    admin = admin_client(kafka)
    wait_for_brokers(admin, kafka, timeout)
    _run(lambda: set_scram_user(admin, user, password, mechanism, timeout=timeout))
    console.print(f"SCRAM user {user} set ({mechanism})")


@app.command("user-delete")
def user_delete(
    user: Annotated[str, typer.Argument(help="The SCRAM user name.")],
    mechanism: Annotated[str, typer.Option(help="SCRAM-SHA-512 or SCRAM-SHA-256.")] = "SCRAM-SHA-512",
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete a SCRAM user's credential for one mechanism (its ACLs stay: `ostinato acl revoke` removes them)."""
    use_kafka_config(kafka_config)
    admin = admin_client(kafka)
    wait_for_brokers(admin, kafka, timeout)
    _run(lambda: delete_scram_user(admin, user, mechanism, timeout=timeout))
    console.print(f"SCRAM user {user} deleted ({mechanism})")


def _run(call: Callable[[], T]) -> T:
    try:
        return call()
    except (AclError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
