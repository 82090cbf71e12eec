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


def _sample_record(line: dict[str, Any], default_topic: str, offset: int, mapping: Any) -> Any:
    """A sample line as a source record: `value` (JSON, or a string; `value_base64` for bytes), `key` (`key_base64`),
    `headers`. With a registry, `schema_id` (`key_schema_id`) writes `value` (`key`) in Confluent's wire format
    with that schema, fetched from the registry, as a producer with Confluent's serializer would."""
    from ostinato.connectors.ingress_mapping import Record

    if "value_base64" in line:
        value: bytes | None = base64.b64decode(line["value_base64"])
    elif "schema_id" in line:
        value = _framed(mapping, int(line["schema_id"]), line.get("value"))
    elif "value" in line:
        raw = line["value"]
        value = None if raw is None else (raw if isinstance(raw, str) else json.dumps(raw)).encode()
    else:
        value = None
    if "key_base64" in line:
        key: bytes | None = base64.b64decode(line["key_base64"])
    elif "key_schema_id" in line:
        key = _framed(mapping, int(line["key_schema_id"]), line.get("key"))
    else:
        key = None if line.get("key") is None else str(line["key"]).encode()
    headers = tuple((str(k), str(v).encode()) for k, v in (line.get("headers") or {}).items())
    return Record(line.get("topic", default_topic), int(line.get("partition", 0)), int(line.get("offset", offset)),
                  key, value, headers)


class _UnknownSampleSchema(ValueError):
    """The sample names a schema id the registry does not have: such a record would be a dead letter."""


def _framed(mapping: Any, schema_id: int, datum: Any) -> bytes:
    from ostinato.connectors import schema_registry

    if mapping.registry is None:
        raise ValueError("schema_id needs a mapping with a `registry`")
    try:
        schema = mapping.registry.schema(schema_id)
    except schema_registry.BadRecord as exc:
        raise _UnknownSampleSchema(str(exc)) from None
    try:
        return schema_registry.encode(schema_id, schema, datum)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"the sample does not fit schema id {schema_id}: {type(exc).__name__}: {exc}") from None


@app.command("check")
def check(
    config: ConfigArg,
    sample: Annotated[Path, typer.Option("--sample", exists=True, dir_okay=False, help=(
        "JSON Lines: {\"value\": ..., \"key\": ..., \"headers\": {...}}; raw bytes as value_base64/key_base64; "
        "with a registry, {\"schema_id\": N, \"value\": ...} is written with schema N in Confluent's wire format"))],
    mapping_name: Annotated[str, typer.Option("--mapping", help="Which mapping (default: the first).")] = "",
    shards: Annotated[int, typer.Option(help="The cluster's shard count (for the partition shown).")] = 4,
) -> None:
    """Show, for every sample record, the command it would become or why it would be a dead letter. Exits 1 when
    any sample would be a dead letter."""
    from ostinato.connectors.ingress_mapping import Unmappable, translate
    from ostinato.connectors.schema_registry import RegistryUnavailable

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
            record = _sample_record(json.loads(text), mapping.topic, number - 1, mapping)
            command = translate(mapping, record, shards, 0)
        except (Unmappable, _UnknownSampleSchema) as why:
            dead += 1
            console.print(f"{number}: dead letter to {mapping.dead_letters}: {why}")
            continue
        except RegistryUnavailable as exc:
            err_console.print(f"[red]error:[/red] {sample}:{number}: {exc} (the ingress would wait and retry, not "
                              "dead-letter the record)")
            raise typer.Exit(2) from None
        except (ValueError, TypeError, AttributeError) as exc:
            err_console.print(f"[red]error:[/red] {sample}:{number}: not a sample line: {exc}")
            raise typer.Exit(2) from None
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
