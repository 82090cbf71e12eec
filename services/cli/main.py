"""The `ostinato` command line (DESIGN.md §9): readable tables by default, `--output json` for scripts."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ostinato.infra import defaults
from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import KafkaCluster, fetch
from ostinato.kafka.clients import KafkaConfigError, KafkaUnavailable
from ostinato.schemas import codec
from ostinato.schemas.topics import DEFAULT_PREFIX
from ostinato.services.admin.cluster import ClusterError, cluster_status, init_cluster
from ostinato.services.cli.acl import app as acl_app
from ostinato.services.cli.batch import app as batch_app
from ostinato.services.cli.check import app as check_app
from ostinato.services.cli.deployment import app as deployment_app
from ostinato.services.cli.ingress import app as ingress_app
from ostinato.services.cli.kafka_options import KafkaConfigOpt, use_kafka_config
from ostinato.services.cli.operator import app as operator_app
from ostinato.services.cli.replay import replay as replay_command
from ostinato.services.cli.schedule import app as schedule_app
from ostinato.services.cli.visibility import app as visibility_app
from ostinato.services.cli.workflow import app as workflow_app
from ostinato.services.cli.workflow import namespace_app, task_queue_app
from ostinato.services.server import DEFAULT_API_PORT, DEFAULT_HOST

# soft_wrap: long lines (errors, topic lists) stay whole for copy-paste and grep instead of folding at 80 columns.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

app = typer.Typer(help="Ostinato: durable workflows on Apache Kafka.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
cluster_app = typer.Typer(help="Create and inspect an Ostinato cluster on Kafka.", no_args_is_help=True)
dev_app = typer.Typer(help="A local broker, cluster and server for development.")
infra_app = typer.Typer(help="Local servers started from Maven Central jars (no Docker).", no_args_is_help=True)
kafka_app = typer.Typer(help="A local Apache Kafka (KRaft) cluster.", no_args_is_help=True)
opensearch_app = typer.Typer(help="A local single-node OpenSearch (plain HTTP).", no_args_is_help=True)
s3_app = typer.Typer(help="A local S3-compatible server (s3proxy over a directory).", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(dev_app, name="dev")
app.add_typer(infra_app, name="infra")
app.add_typer(check_app, name="check")
app.add_typer(workflow_app, name="workflow")
app.add_typer(schedule_app, name="schedule")
app.add_typer(task_queue_app, name="task-queue")
app.add_typer(namespace_app, name="namespace")
app.add_typer(operator_app, name="operator")
app.add_typer(deployment_app, name="deployment")
app.add_typer(visibility_app, name="visibility")
app.add_typer(acl_app, name="acl")
app.add_typer(ingress_app, name="ingress")
app.add_typer(batch_app, name="batch")
app.command("replay")(replay_command)
infra_app.add_typer(kafka_app, name="kafka")
infra_app.add_typer(opensearch_app, name="opensearch")
infra_app.add_typer(s3_app, name="s3")


class ProcessorMode(StrEnum):
    auto = "auto"
    thread = "thread"
    process = "process"


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


KafkaOpt = Annotated[str, typer.Option("--kafka", envvar="OSTINATO_KAFKA", help="Kafka bootstrap servers.")]
PrefixOpt = Annotated[str, typer.Option("--prefix", envvar="OSTINATO_TOPIC_PREFIX", help="Topic prefix.")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds to wait for Kafka.")]
DEFAULT_BOOTSTRAP = f"127.0.0.1:{defaults.KAFKA_PORT}"


def _say(message: str) -> None:
    err_console.print(f"[dim]·[/dim] {message}", highlight=False)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


# -- cluster ---------------------------------------------------------------------------------------------------


@cluster_app.command("init")
def cluster_init(
    shards: Annotated[int | None, typer.Option(help="Number of shards (fixed for the cluster's life).")] = None,
    replication_factor: Annotated[int | None, typer.Option(help="Default: min(3, brokers).")] = None,
    reply_partitions: Annotated[int | None, typer.Option(help="Partitions of the replies topic.")] = None,
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    output: OutputOpt = Output.TABLE,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create every topic and record the cluster settings. Safe to repeat; the shard count cannot change."""
    use_kafka_config(kafka_config)
    result = init_cluster(kafka, prefix, shards, replication_factor, reply_partitions, timeout=timeout)
    if output is Output.JSON:
        _print_json(dataclasses.asdict(result))
        return
    s = result.settings
    console.print(f"Cluster [bold]{prefix}[/bold] at {kafka}: {s.shards} shards, replication {s.replication_factor}")
    for label, names in (("created", result.created), ("reconfigured", result.reconfigured),
                         ("unchanged", result.unchanged)):
        if names:
            console.print(f"  {label}: {', '.join(names)}")
    console.print("  settings recorded" if result.recorded else "  settings already recorded")


@cluster_app.command("status")
def cluster_status_cmd(kafka: KafkaOpt = DEFAULT_BOOTSTRAP, kafka_config: KafkaConfigOpt = None,
                       prefix: PrefixOpt = DEFAULT_PREFIX, output: OutputOpt = Output.TABLE,
                       timeout: TimeoutOpt = 15.0) -> None:
    """Brokers, shard count and topics of the cluster."""
    use_kafka_config(kafka_config)
    status = cluster_status(kafka, prefix, timeout=timeout)
    if output is Output.JSON:
        _print_json(dataclasses.asdict(status))
        return
    s = status.settings
    console.print(f"Kafka {status.bootstrap} (cluster id {status.cluster_id})")
    console.print(f"Ostinato cluster [bold]{prefix}[/bold]: " + (
        f"{s.shards} shards, replication {s.replication_factor}" if s else "[yellow]not initialised[/yellow]"))
    brokers = Table("broker", "address", "role", title="Brokers", title_justify="left")
    for b in status.brokers:
        brokers.add_row(str(b.node_id), f"{b.host}:{b.port}", "controller" if b.controller else "")
    console.print(brokers)
    topics = Table(title="Topics", title_justify="left")
    topics.add_column("topic", no_wrap=True)
    for heading in ("partitions", "RF", "cleanup", "retention", "min ISR", "URP"):
        topics.add_column(heading, justify="right")
    for t in status.topics:
        retention = t.configs.get("retention.ms", "")
        topics.add_row(t.name, str(t.partitions), str(t.replication_factor), t.configs.get("cleanup.policy", ""),
                       _human_ms(retention) if t.configs.get("cleanup.policy") == "delete" else "",
                       t.configs.get("min.insync.replicas", ""), str(t.under_replicated or ""))
    console.print(topics)


def _human_ms(value: str) -> str:
    try:
        ms = int(value)
    except ValueError:
        return value
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


# -- server and dev --------------------------------------------------------------------------------------------


@app.command()
def server(
    kafka: KafkaOpt = DEFAULT_BOOTSTRAP,
    kafka_config: KafkaConfigOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    host: Annotated[str, typer.Option(envvar="OSTINATO_HOST")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(envvar="OSTINATO_PORT")] = DEFAULT_API_PORT,
    shards: Annotated[int | None, typer.Option(help="Refuse to start unless the cluster has this many.")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", envvar="OSTINATO_DATA_DIR",
                                                  help="Shard stores (default ~/.ostinato/data).")] = None,
    processor: Annotated[bool, typer.Option("--processor/--no-processor",
                                            help="Run the history processor in this process.")] = True,
    advertise: Annotated[str, typer.Option(envvar="OSTINATO_ADVERTISE",
                                           help="URL other servers redirect owner reads to "
                                                "(default http://HOST:PORT).")] = "",
    auth_config: Annotated[Path | None, typer.Option("--auth-config", envvar="OSTINATO_AUTH_CONFIG",
                                                     help="JSON tokens -> {namespace: role}; off if absent.")] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", envvar="OSTINATO_TLS_CERT")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", envvar="OSTINATO_TLS_KEY")] = None,
    archive_uri: Annotated[str, typer.Option(
        "--archive-uri", envvar="OSTINATO_ARCHIVE_URI",
        help="s3://bucket or s3://bucket/prefix: archive closed runs there and delete them after retention only "
             "once archived (every server of the cluster needs the same value). S3 endpoint and keys: "
             "OSTINATO_S3_ENDPOINT, "
             "OSTINATO_S3_ACCESS_KEY, OSTINATO_S3_SECRET_KEY, else boto3's usual chain.")] = "",
    opensearch_url: Annotated[str, typer.Option(
        "--opensearch-url", envvar="OSTINATO_OPENSEARCH_URL",
        help="Keep visibility (list/count) in OpenSearch at this URL instead of the embedded SQLite store.")] = "",
    archiver: Annotated[bool, typer.Option(
        "--archiver/--no-archiver", envvar="OSTINATO_ARCHIVER",
        help="Run the archiver in this process (with --archive-uri). Without it, closed runs wait, undeleted, "
             "for an archiver elsewhere.")] = True,
    processors: Annotated[int, typer.Option(
        "--processors", envvar="OSTINATO_PROCESSORS", min=1,
        help="History processors in this process, each with its own shards and Kafka transactions, so commits "
             "overlap under load (see docs/architecture.md). More than the cluster's shards leaves some idle.")] = 1,
    processor_mode: Annotated[ProcessorMode, typer.Option(
        "--processor-mode", envvar="OSTINATO_PROCESSOR_MODE",
        help="process: each processor in a child process of its own (its own interpreter and CPU core), reads "
             "relayed to it; thread: all in this process, sharing one interpreter with the API; auto: process for "
             "more than one processor.")] = ProcessorMode.auto,
    processor_nice: Annotated[int, typer.Option(
        "--processor-nice", envvar="OSTINATO_PROCESSOR_NICE", min=-20, max=19,
        help="Added to the processor processes' nice value and their session's CPU group at start: negative gives "
             "them the CPU before the API, workers and others on a contended host, so timers fire on time "
             "(docs/benchmarks.md, \"Sessions\"). Negative needs CAP_SYS_NICE or root; without it the server "
             "warns and runs them at its own priority. Processes only (--processor-mode process).")] = 0,
    egress_topics: Annotated[str, typer.Option(
        "--egress-topics", envvar="OSTINATO_EGRESS_TOPICS",
        help="Topics workflows may publish to with workflow.publish, as comma-separated patterns ('orders.*,"
             "shop.events'); none by default. Every server of the cluster needs the same value.")] = "",
    ingress: Annotated[Path | None, typer.Option(
        "--ingress", envvar="OSTINATO_INGRESS", exists=True, dir_okay=False,
        help="Run these ingress mappings here (YAML; `ostinato ingress check` tries them): records of Kafka "
             "topics start and signal workflows, exactly once.")] = None,
) -> None:
    """Run the Ostinato server: HTTP API and history processor against an initialised cluster."""
    import ssl

    from ostinato.services.frontend.auth import Auth, AuthConfigError
    from ostinato.services.server import load_context, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_kafka_config(kafka_config)
    try:
        auth = Auth.load(auth_config) if auth_config is not None else None
    except AuthConfigError as exc:
        raise ClusterError(str(exc)) from None
    context = None
    if tls_cert is not None or tls_key is not None:
        if tls_cert is None or tls_key is None:
            raise ClusterError("TLS needs both --tls-cert and --tls-key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_cert, tls_key)
    serve(load_context(kafka, prefix, shards), host, port, data_dir=data_dir, processor=processor,
          advertise=advertise, auth=auth, ssl_context=context, archive_uri=archive_uri,
          archiver=archiver, opensearch_url=opensearch_url, processors=processors,
          processor_mode=processor_mode.value, ingress=ingress, egress_topics=egress_topics,
          processor_nice=processor_nice)


@app.command("worker")
def worker(
    target: Annotated[str, typer.Argument(help="module:attr naming Worker options or a factory (see docs).")],
    server: Annotated[str, typer.Option("--server", envvar="OSTINATO_SERVER",
                                        help="The Ostinato API.")] = f"http://{DEFAULT_HOST}:{DEFAULT_API_PORT}",
    namespace: Annotated[str, typer.Option("--namespace", "-n", envvar="OSTINATO_NAMESPACE")] = "default",
    kafka_config: KafkaConfigOpt = None,
) -> None:
    """Run a worker (workflows and activities of one task queue) until Ctrl-C; running activities finish first.
    Its Kafka credentials come from --kafka-config or OSTINATO_KAFKA_* (the server never hands any out)."""
    import asyncio

    from ostinato.sdk.exceptions import RPCError
    from ostinato.sdk.run import WorkerTargetError, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_kafka_config(kafka_config)
    try:
        asyncio.run(run(target, server, namespace))
    except (WorkerTargetError, RPCError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None


HomeOpt = Annotated[Path | None, typer.Option("--home", help="Dev state directory (default ~/.ostinato/dev).")]


@dev_app.callback(invoke_without_command=True)
def dev(
    ctx: typer.Context,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Return once everything is ready.")] = False,
    shards: Annotated[int | None, typer.Option(help="Shards of a new dev cluster (default 4).")] = None,
    port: Annotated[int, typer.Option(envvar="OSTINATO_PORT", help="API port.")] = DEFAULT_API_PORT,
    kafka_port: Annotated[int, typer.Option(help="Port of the local broker.")] = defaults.KAFKA_PORT,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = None,
    with_opensearch: Annotated[bool, typer.Option("--with-opensearch", help="Also run a local OpenSearch.")] = False,
    with_s3: Annotated[bool, typer.Option("--with-s3", help="Also run a local S3 (s3proxy).")] = False,
    opensearch_port: Annotated[int, typer.Option(help="OpenSearch HTTP port.")] = defaults.OPENSEARCH_PORT,
    s3_port: Annotated[int, typer.Option(help="S3 port.")] = defaults.S3_PORT,
    kafka_config: KafkaConfigOpt = None,
) -> None:
    """Start a local Kafka (or use OSTINATO_KAFKA), initialise the cluster and run the server on port 7243.
    --kafka-config is for a broker of your own (OSTINATO_KAFKA): the local one has no SASL."""
    if ctx.invoked_subcommand is not None:
        return
    import os

    if use_kafka_config(kafka_config) and not os.environ.get("OSTINATO_KAFKA"):
        raise KafkaConfigError("Kafka security settings (--kafka-config, OSTINATO_KAFKA_*) need a broker of your own "
                               "(OSTINATO_KAFKA): the local broker of `ostinato dev` speaks PLAINTEXT")

    from ostinato.services.cli.dev import DevOptions, dev_home, run_detached, run_foreground

    opts = DevOptions(home=home or dev_home(), shards=shards, port=port, kafka_port=kafka_port, prefix=prefix,
                      external_kafka=os.environ.get("OSTINATO_KAFKA") or None, with_opensearch=with_opensearch,
                      with_s3=with_s3, opensearch_port=opensearch_port, s3_port=s3_port)
    if not detach:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        run_foreground(opts, _say)
        return
    running = run_detached(opts, _say)
    console.print(f"[green]Ostinato dev is running[/green] in {running.seconds:.1f}s: API {running.api}, "
                  f"Kafka {running.bootstrap}, {running.shards} shards. Stop it with [bold]ostinato dev stop[/bold].")
    for name, value in running.extra.items():  # what the server was given, in a form to paste into a shell
        console.print(f"  {name}={value}", highlight=False)


@app.command("demo")
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Leave the cluster and server running afterwards.")] = False,
    port: Annotated[int, typer.Option(envvar="OSTINATO_PORT", help="API port.")] = DEFAULT_API_PORT,
    kafka_port: Annotated[int, typer.Option(help="Port of the local broker.")] = defaults.KAFKA_PORT,
    home: HomeOpt = None,
) -> None:
    """Order fulfilment end to end: a local cluster, a worker, six orders, the server killed and restarted in the
    middle, every order finishing correctly, and one order's history."""
    import os

    from ostinato.services.cli.demo import run_demo
    from ostinato.services.cli.dev import DevOptions, dev_home

    opts = DevOptions(home=home or dev_home(), port=port, kafka_port=kafka_port,
                      external_kafka=os.environ.get("OSTINATO_KAFKA") or None)
    run_demo(opts, _say, keep)


@dev_app.command("stop")
def dev_stop(
    wipe: Annotated[bool, typer.Option("--wipe", help="Also delete the local broker's data.")] = False,
    home: HomeOpt = None,
) -> None:
    """Stop everything `ostinato dev` started."""
    from ostinato.services.cli.dev import dev_home, stop

    stop(home or dev_home(), wipe, _say)


# -- infra -----------------------------------------------------------------------------------------------------

KafkaHomeOpt = Annotated[Path, typer.Option("--home", help="Cluster directory (data, logs, pid files).")]
_DEFAULT_KAFKA_HOME = defaults.home_dir() / "kafka"


@kafka_app.command("fetch")
def kafka_fetch(version: Annotated[str | None, typer.Option(help="Kafka version.")] = None) -> None:
    """Download Kafka's jars into the cache (done automatically by start)."""
    console.print(str(fetch(version)))


@kafka_app.command("start")
def kafka_start(
    home: KafkaHomeOpt = _DEFAULT_KAFKA_HOME,
    nodes: Annotated[int, typer.Option(help="1 for development, 3 for fault tests.")] = 1,
    port: Annotated[int, typer.Option(help="Port of node 1 (node i uses port+i-1).")] = defaults.KAFKA_PORT,
    sasl: Annotated[bool | None, typer.Option(
        "--sasl/--no-sasl", help="SASL_PLAINTEXT (SCRAM-SHA-512/256) with ACLs enforced instead of PLAINTEXT; fixed "
                                 "when the cluster is first started (default: as recorded, else PLAINTEXT).")] = None,
) -> None:
    """Start a local KRaft cluster and wait until every broker answers."""
    started = time.monotonic()
    cluster = KafkaCluster(home, nodes=nodes, port=port, sasl=sasl).start()
    console.print(f"Kafka ready on {cluster.bootstrap} in {time.monotonic() - started:.1f}s (home {home})")
    if cluster.layout.sasl:
        console.print(f"SASL/SCRAM with ACLs: the super user's settings are in {cluster.admin_properties} (pass it "
                      "as --kafka-config; `ostinato acl` makes users and grants roles)", highlight=False)


@kafka_app.command("stop")
def kafka_stop(home: KafkaHomeOpt = _DEFAULT_KAFKA_HOME) -> None:
    """Stop the local cluster under --home."""
    cluster = KafkaCluster.existing(home)
    stopped = cluster.stop() if cluster else []
    console.print(f"Stopped node(s) {', '.join(map(str, stopped))}" if stopped else "Nothing was running")


@kafka_app.command("status")
def kafka_status(home: KafkaHomeOpt = _DEFAULT_KAFKA_HOME, output: OutputOpt = Output.TABLE) -> None:
    """Nodes of the local cluster under --home and whether they run."""
    cluster = KafkaCluster.existing(home)
    rows = cluster.status() if cluster else []
    if output is Output.JSON:
        _print_json(rows)
        return
    if not rows:
        console.print(f"No cluster under {home}")
        return
    table = Table("node", "port", "controller port", "pid", "log")
    for r in rows:
        table.add_row(str(r["node_id"]), str(r["port"]), str(r["controller_port"]),
                      str(r["pid"]) if r["pid"] else "[red]stopped[/red]", str(r["log"]))
    console.print(table)


OpenSearchHomeOpt = Annotated[Path, typer.Option("--home", help="Node directory (server.json, log, pid file).")]
S3HomeOpt = Annotated[Path, typer.Option("--home", help="Server directory (data, log, pid file).")]
_DEFAULT_OPENSEARCH_HOME = defaults.home_dir() / "opensearch"
_DEFAULT_S3_HOME = defaults.home_dir() / "s3"


def _print_server_status(row: dict[str, object] | None, home: Path, output: Output, what: str) -> None:
    if output is Output.JSON:
        _print_json(row or {})
        return
    if row is None:
        console.print(f"No {what} under {home}")
        return
    table = Table("field", "value", title=str(home), title_justify="left")
    for key, value in row.items():
        table.add_row(key, "[red]stopped[/red]" if key == "running" and not value else str(value))
    console.print(table)


@opensearch_app.command("fetch")
def opensearch_fetch(version: Annotated[str | None, typer.Option(help="OpenSearch version.")] = None) -> None:
    """Download OpenSearch's zip into the cache and unpack it (done automatically by start)."""
    from ostinato.infra.opensearch import install

    console.print(str(install(version)))


@opensearch_app.command("start")
def opensearch_start(
    home: OpenSearchHomeOpt = _DEFAULT_OPENSEARCH_HOME,
    port: Annotated[int, typer.Option(help="HTTP port (transport uses port+100).")] = defaults.OPENSEARCH_PORT,
) -> None:
    """Start a single-node OpenSearch on 127.0.0.1 and wait until the cluster is yellow or green."""
    from ostinato.infra.opensearch import OpenSearchServer

    started = time.monotonic()
    node = OpenSearchServer(home, port=port).start()
    console.print(f"OpenSearch ready on {node.url} in {time.monotonic() - started:.1f}s (home {home})")


@opensearch_app.command("stop")
def opensearch_stop(home: OpenSearchHomeOpt = _DEFAULT_OPENSEARCH_HOME) -> None:
    """Stop the node under --home."""
    from ostinato.infra.opensearch import OpenSearchServer

    node = OpenSearchServer.existing(home)
    stopped = node.stop() if node else []
    console.print(f"Stopped OpenSearch (pids {', '.join(map(str, stopped))})" if stopped else "Nothing was running")


@opensearch_app.command("status")
def opensearch_status(home: OpenSearchHomeOpt = _DEFAULT_OPENSEARCH_HOME, output: OutputOpt = Output.TABLE) -> None:
    """URL, pid, directories of the node under --home and whether it runs."""
    from ostinato.infra.opensearch import OpenSearchServer

    node = OpenSearchServer.existing(home)
    _print_server_status(node.status() if node else None, home, output, "OpenSearch")


@s3_app.command("fetch")
def s3_fetch(version: Annotated[str | None, typer.Option(help="s3proxy version.")] = None) -> None:
    """Download the s3proxy jar into the cache (done automatically by start)."""
    from ostinato.infra.s3 import fetch as fetch_s3proxy

    console.print(str(fetch_s3proxy(version)))


@s3_app.command("start")
def s3_start(
    home: S3HomeOpt = _DEFAULT_S3_HOME,
    port: Annotated[int, typer.Option(help="HTTP port.")] = defaults.S3_PORT,
) -> None:
    """Start s3proxy on 127.0.0.1 and wait until it answers."""
    from ostinato.infra.s3 import S3Server

    started = time.monotonic()
    s3 = S3Server(home, port=port).start()
    console.print(f"S3 ready on {s3.url} in {time.monotonic() - started:.1f}s (access key {s3.access_key}, "
                  f"secret {s3.secret_key}, path-style; home {home})")


@s3_app.command("stop")
def s3_stop(home: S3HomeOpt = _DEFAULT_S3_HOME) -> None:
    """Stop the server under --home."""
    from ostinato.infra.s3 import S3Server

    s3 = S3Server.existing(home)
    stopped = s3.stop() if s3 else []
    console.print(f"Stopped s3proxy (pid {', '.join(map(str, stopped))})" if stopped else "Nothing was running")


@s3_app.command("status")
def s3_status(home: S3HomeOpt = _DEFAULT_S3_HOME, output: OutputOpt = Output.TABLE) -> None:
    """URL, credentials, pid and data directory of the server under --home."""
    from ostinato.infra.s3 import S3Server

    s3 = S3Server.existing(home)
    _print_server_status(s3.status() if s3 else None, home, output, "S3 server")


def main() -> None:
    """Entry point: expected failures print one clear line, never a stack trace."""
    codec.settings_from_environment(os.environ)
    try:
        app()
    except (InfraError, ClusterError, KafkaUnavailable, KafkaConfigError) as exc:
        err_console.print("[bold red]error:[/bold red]", Text(str(exc)), highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
