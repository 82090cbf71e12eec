"""`ostinato ingress run|check`: start and signal workflows from Kafka topics (connectors/ingress.py), and try a
mapping against sample records before it meets real ones."""

from __future__ import annotations

import base64
import json
import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ostinato.schemas import codec, wire
from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.cli.check import DEFAULT_BOOTSTRAP, KafkaOpt, PrefixOpt
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config
from ostinato.services.server import DEFAULT_API_PORT

app = typer.Typer(help="Start and signal workflows from records of any Kafka topic, exactly once.",
                  no_args_is_help=True)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)
ConfigArg = Annotated[Path, typer.Argument(help="The ingress file (YAML: a `mappings:` list; see docs).",
                                           exists=True, dir_okay=False)]


def _load(config: Path) -> Any:
    from ostinato.connectors.ingress_mapping import MappingError, load

    try:
        return load(config)
    except MappingError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command("run")
def run(
    config: ConfigArg,
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    instance: Annotated[str, typer.Option(
        "--instance", envvar="OSTINATO_INGRESS_INSTANCE",
        help="This process's stable name (part of its transactional ids): the same name after a restart aborts "
             "the crashed incarnation's open transaction at once. Unique per running process (default: the host "
             "name).")] = "",
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="Serve /metrics here (0: none).")] = 0,
    server: Annotated[str, typer.Option("--server", envvar="OSTINATO_SERVER",
                                        help="A server of the cluster, for the outcomes streams' results.")] =
    f"http://127.0.0.1:{DEFAULT_API_PORT}",
    token: Annotated[str, typer.Option("--token", envvar="OSTINATO_TOKEN",
                                       help="API token (a reader of every namespace) when auth is on.")] = "",
) -> None:
    """Run the mappings until SIGINT/SIGTERM (`ostinato server --ingress FILE` runs them inside a server)."""
    from prometheus_client import REGISTRY, start_http_server

    from ostinato.connectors.ingress import Ingress
    from ostinato.services.admin.cluster import read_settings
    from ostinato.services.admin.ownership import DEFAULT_NAMESPACE, OwnershipTable

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    instance = instance or socket.gethostname()
    mappings = _load(config)
    use_kafka_config(kafka_config)
    settings = read_settings(kafka, prefix, timeout=60)
    if settings is None:
        err_console.print(f"[red]error:[/red] no Ostinato cluster {prefix!r} at {kafka}: run `ostinato cluster "
                          "init` first")
        raise typer.Exit(1)
    if metrics_port:
        start_http_server(metrics_port)
    failed = threading.Event()
    done = threading.Event()
    from ostinato.services.admin.archival import OutcomeOverApi

    ownership = OwnershipTable(kafka, prefix).start()  # which namespaces are registered
    ownership.caught_up.wait(30)
    ingress = Ingress(kafka, settings, mappings, instance, REGISTRY,
                      on_failure=lambda name, exc: (failed.set(), done.set()),
                      outcome_source=OutcomeOverApi(server, token),
                      namespace_known=lambda ns: ns == DEFAULT_NAMESPACE or ownership.namespace(ns) is not None)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    ingress.start()
    done.wait()
    ingress.stop()
    ownership.stop()
    raise typer.Exit(1 if failed.is_set() else 0)


def _sample_record(line: dict[str, Any], default_topic: str, offset: int) -> Any:
    """A sample line as a source record: `value` (JSON, or a string; `value_base64` for bytes), `key`, `headers`."""
    from ostinato.connectors.ingress_mapping import Record

    if "value_base64" in line:
        value: bytes | None = base64.b64decode(line["value_base64"])
    elif "value" in line:
        raw = line["value"]
        value = None if raw is None else (raw if isinstance(raw, str) else json.dumps(raw)).encode()
    else:
        value = None
    key = line.get("key")
    headers = tuple((str(k), str(v).encode()) for k, v in (line.get("headers") or {}).items())
    return Record(line.get("topic", default_topic), int(line.get("partition", 0)), int(line.get("offset", offset)),
                  None if key is None else str(key).encode(), value, headers)


@app.command("check")
def check(
    config: ConfigArg,
    sample: Annotated[Path, typer.Option("--sample", exists=True, dir_okay=False,
                                         help="JSON Lines: {\"value\": ..., \"key\": ..., \"headers\": {...}}")],
    mapping_name: Annotated[str, typer.Option("--mapping", help="Which mapping (default: the first).")] = "",
    shards: Annotated[int, typer.Option(help="The cluster's shard count (for the partition shown).")] = 4,
) -> None:
    """Show, for every sample record, the command it would become or why it would be a dead letter. Exits 1 when
    any sample would be a dead letter."""
    from ostinato.connectors.ingress_mapping import Unmappable, translate

    mappings = _load(config).mappings
    chosen = [m for m in mappings if not mapping_name or m.name == mapping_name]
    if not chosen:
        err_console.print(f"[red]error:[/red] no mapping {mapping_name or ''!r} in {config}")
        raise typer.Exit(2)
    mapping = chosen[0]
    dead = 0
    for number, text in enumerate(sample.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = _sample_record(json.loads(text), mapping.topic, number - 1)
        except (ValueError, TypeError, AttributeError) as exc:
            err_console.print(f"[red]error:[/red] {sample}:{number}: not a sample line: {exc}")
            raise typer.Exit(2) from None
        try:
            command = translate(mapping, record, shards, 0)
        except Unmappable as why:
            dead += 1
            console.print(f"{number}: dead letter to {mapping.dead_letters}: {why}")
            continue
        _, decoded = codec.decode(command.value)
        kind, body = decoded["body"]
        console.print(f"{number}: {wire.short_name(kind)} {decoded['namespace']}/{decoded['workflow_id']} "
                      f"(shard {command.partition}) {json.dumps(_shown(body), default=str)}")
    raise typer.Exit(1 if dead else 0)


def _shown(body: dict[str, Any]) -> dict[str, Any]:
    """The command body with payloads as the JSON they carry."""
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"metadata", "data"} and isinstance(value["data"], bytes):
                return json.loads(value["data"])
            return {k: walk(v) for k, v in value.items() if v not in (None, {}, [], "UNSPECIFIED")}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value
    shown: dict[str, Any] = walk(body)
    return shown
