"""`ostinato dev`: a local broker, an initialised cluster and the server, from one command.

Everything `--detach` leaves running is recorded under the dev home (`~/.ostinato/dev` by default), so
`ostinato dev stop` can find and stop it from any terminal.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ostinato.infra import defaults, process
from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import KafkaCluster
from ostinato.infra.opensearch import OpenSearchServer
from ostinato.infra.s3 import S3Server
from ostinato.services.admin.cluster import ClusterError, init_cluster, read_settings
from ostinato.services.server import DEFAULT_API_PORT, DEFAULT_HOST, load_context, serve

DEFAULT_DEV_SHARDS = 4
Stoppable = OpenSearchServer | S3Server
SERVER_MARKER = "ostinato"


@dataclass(frozen=True)
class DevOptions:
    home: Path
    shards: int | None = None  # None: what the cluster already has, else DEFAULT_DEV_SHARDS
    port: int = DEFAULT_API_PORT
    kafka_port: int = defaults.KAFKA_PORT
    prefix: str = "ostinato"
    external_kafka: str | None = None  # OSTINATO_KAFKA: use that broker instead of starting one
    with_opensearch: bool = False
    with_s3: bool = False
    opensearch_port: int = defaults.OPENSEARCH_PORT
    s3_port: int = defaults.S3_PORT


@dataclass(frozen=True)
class DevRunning:
    api: str
    bootstrap: str
    shards: int
    kafka_started: bool
    seconds: float
    extra: dict[str, str] = field(default_factory=dict)  # OSTINATO_OPENSEARCH_URL, OSTINATO_S3_* when asked for


def dev_home(base: Path | None = None) -> Path:
    return (base or defaults.home_dir()) / "dev"


def _kafka(opts: DevOptions) -> KafkaCluster:
    return KafkaCluster(opts.home / "kafka", nodes=1, port=opts.kafka_port)


def _start_side_servers(opts: DevOptions, say: Callable[[str], None]) -> tuple[dict[str, str], list[Stoppable]]:
    """Start (or reuse) OpenSearch and s3proxy under the dev home when asked for.

    Returns their settings as env vars and the servers this call started (the foreground run stops those).

    The variables are how the server learns the URLs: the detached server inherits them, the foreground one
    reads them from this process's environment.
    """
    env: dict[str, str] = {}
    started: list[Stoppable] = []
    if opts.with_opensearch:
        node = OpenSearchServer(opts.home / "opensearch", port=opts.opensearch_port)
        t0 = time.monotonic()
        if node.running():
            say(f"OpenSearch already running on {node.url}")
        else:
            say(f"Starting OpenSearch on {node.url}")
            started.append(node.start())
            say(f"OpenSearch ready in {time.monotonic() - t0:.1f}s")
        env["OSTINATO_OPENSEARCH_URL"] = node.url
    if opts.with_s3:
        s3 = S3Server(opts.home / "s3", port=opts.s3_port)
        if s3.running():
            say(f"S3 already running on {s3.url}")
        else:
            started.append(s3.start())
            say(f"S3 (s3proxy) on {s3.url}, access key {s3.access_key}, path-style")
        env.update({"OSTINATO_S3_ENDPOINT": s3.url, "OSTINATO_S3_ACCESS_KEY": s3.access_key,
                    "OSTINATO_S3_SECRET_KEY": s3.secret_key,
                    # Closed runs go to the archive bucket (created on first use) before retention deletes them.
                    "OSTINATO_ARCHIVE_URI": os.environ.get("OSTINATO_ARCHIVE_URI", "s3://ostinato-archive")})
        say(f"Archiving closed runs to {env['OSTINATO_ARCHIVE_URI']}")
    return env, started


def _prepare(opts: DevOptions, say: Callable[[str], None]) -> tuple[str, bool, int]:
    """Start (or reuse) the broker and initialise the cluster.

    Returns the bootstrap, whether this call started the broker, and the cluster's shard count.
    """
    if opts.external_kafka:
        bootstrap, started = opts.external_kafka, False
        say(f"Using Kafka at {bootstrap} (OSTINATO_KAFKA)")
    else:
        cluster = _kafka(opts)
        started = not cluster.running()
        t0 = time.monotonic()
        if started:
            say(f"Starting Kafka on {cluster.bootstrap} (data in {cluster.home})")
            cluster.start()
            say(f"Kafka ready in {time.monotonic() - t0:.1f}s")
        else:
            say(f"Kafka already running on {cluster.bootstrap}")
        bootstrap = cluster.bootstrap
    shards = opts.shards
    if shards is None:
        existing = read_settings(bootstrap, opts.prefix)
        shards = existing.shards if existing else DEFAULT_DEV_SHARDS
    try:
        result = init_cluster(bootstrap, opts.prefix, shards)
    except ClusterError as exc:
        raise ClusterError(f"{exc}\n(`ostinato dev stop --wipe` discards the local dev cluster)") from None
    made = f", created {len(result.created)} topics" if result.created else ""
    say(f"Cluster '{opts.prefix}' has {result.settings.shards} shards{made}")
    return bootstrap, started, result.settings.shards


def run_foreground(opts: DevOptions, say: Callable[[str], None]) -> None:
    """Run the server in this process until Ctrl-C, then stop the broker if this command started it."""
    opts.home.mkdir(parents=True, exist_ok=True)
    process.check_port_free(opts.port, what="the Ostinato API")
    bootstrap, started, shards = _prepare(opts, say)
    extra, side_started = _start_side_servers(opts, say)
    os.environ.update(extra)
    pid_file = opts.home / "server.pid"
    process.write_pid_file(pid_file, os.getpid())
    try:
        say(f"Ostinato API on http://{DEFAULT_HOST}:{opts.port}  (Ctrl-C stops everything)")
        ingress = os.environ.get("OSTINATO_INGRESS")  # as `ostinato server` reads them (the detached one does)
        serve(load_context(bootstrap, opts.prefix, shards), DEFAULT_HOST, opts.port, data_dir=opts.home / "data",
              ingress=Path(ingress) if ingress else None, egress_topics=os.environ.get("OSTINATO_EGRESS_TOPICS", ""))
    finally:
        pid_file.unlink(missing_ok=True)
        if started:
            say("Stopping Kafka")
            _kafka(opts).stop()
        for side in side_started:
            side.stop()


def run_detached(opts: DevOptions, say: Callable[[str], None], timeout: float = 90.0) -> DevRunning:
    """Start everything in the background and return once the API answers."""
    t0 = time.monotonic()
    opts.home.mkdir(parents=True, exist_ok=True)
    pid_file = opts.home / "server.pid"
    if process.read_pid(pid_file, SERVER_MARKER) is None:
        process.check_port_free(opts.port, what="the Ostinato API")
    bootstrap, started, shards = _prepare(opts, say)
    extra, _ = _start_side_servers(opts, say)
    if (pid := process.read_pid(pid_file, SERVER_MARKER)) is not None:
        say(f"Server already running (pid {pid})")
    else:
        argv = [sys.executable, "-m", "ostinato", "server", "--kafka", bootstrap, "--prefix", opts.prefix,
                "--port", str(opts.port), "--shards", str(shards), "--data-dir", str(opts.home / "data")]
        log = opts.home / "server.log"
        proc = process.spawn(argv, log, pid_file, env={**os.environ, **extra})
        _wait_for_api(opts.port, proc.pid, log, timeout)
    return DevRunning(f"http://{DEFAULT_HOST}:{opts.port}", bootstrap, shards, started, time.monotonic() - t0,
                      extra)


def _wait_for_api(port: int, pid: int, log: Path, timeout: float) -> None:
    url = f"http://{DEFAULT_HOST}:{port}/api/v1/cluster"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.pid_alive(pid):
            raise InfraError(f"the Ostinato server exited during start-up. Last lines of {log}:\n{process.tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                json.load(resp)
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            time.sleep(0.1)
    raise InfraError(f"the Ostinato server did not answer on {url} within {timeout:.0f}s; see {log}")


def stop(home: Path, wipe: bool, say: Callable[[str], None]) -> None:
    """Stop the server and the local broker recorded under `home`; optionally delete their data."""
    pid_file = home / "server.pid"
    if (pid := process.read_pid(pid_file, SERVER_MARKER)) is not None:
        process.terminate(pid, SERVER_MARKER)
        say(f"Stopped the Ostinato server (pid {pid})")
    pid_file.unlink(missing_ok=True)
    cluster = KafkaCluster.existing(home / "kafka")
    stopped = cluster.stop() if cluster is not None else []
    if stopped:
        say(f"Stopped Kafka node(s) {', '.join(map(str, stopped))}")
    side = _stop_side_servers(home, say)
    if wipe and cluster is not None:
        cluster.wipe()
        say(f"Deleted {cluster.home}")
    if wipe and (node := OpenSearchServer.existing(home / "opensearch")) is not None:
        node.wipe()  # its data may live outside the dev home (under root: /var/lib/ostinato-opensearch)
    if pid is None and not stopped and not side:
        say("Nothing was running")


def _stop_side_servers(home: Path, say: Callable[[str], None]) -> bool:
    """Stop OpenSearch and s3proxy recorded under the dev home; whether anything was running."""
    stopped = False
    if (node := OpenSearchServer.existing(home / "opensearch")) is not None and node.stop():
        say("Stopped OpenSearch")
        stopped = True
    if (s3 := S3Server.existing(home / "s3")) is not None and s3.stop():
        say("Stopped S3 (s3proxy)")
        stopped = True
    return stopped
