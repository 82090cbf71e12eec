"""`ostinato server`: the HTTP API on port 7243, the history processor and the owner's read API in one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST as METRICS_CONTENT_TYPE
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from ostinato import __version__
from ostinato.infra.process import check_port_free
from ostinato.kafka.clients import describe_security, public_security, security_config
from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.admin.archival import add_routes as add_archive_routes
from ostinato.services.admin.backlog import INTERVAL_S as BACKLOG_INTERVAL_S
from ostinato.services.admin.backlog import BacklogCollector
from ostinato.services.admin.cluster import ClusterError, read_settings
from ostinato.services.admin.ownership import DEFAULT_NAMESPACE, OwnershipTable
from ostinato.services.frontend.auth import Auth
from ostinato.services.frontend.cluster_api import install as install_cluster_api
from ostinato.services.frontend.http import MAX_BODY_BYTES, size_refusals
from ostinato.services.frontend.openapi import install as install_openapi
from ostinato.services.frontend.rate_limits_api import install as install_rate_limits
from ostinato.services.frontend.reads import ReadContext, add_routes
from ostinato.services.frontend.relay import ProcessRelay, merge_exposition
from ostinato.services.history.collector import Collector, serve_collections
from ostinato.services.history.metrics import LATENCY_BUCKETS
from ostinato.services.history.waiters import HistoryWaiters
from ostinato.services.ratelimit.forwarder import RateLimiter

DEFAULT_HOST = "127.0.0.1"
DEFAULT_API_PORT = 7243
SHUTDOWN_GRACE_S = 2.0
AUTO, THREAD, PROCESS = "auto", "thread", "process"  # `--processor-mode`: where the processors decide

log = logging.getLogger("ostinato.server")


@dataclass(frozen=True)
class ServerContext:
    bootstrap: str
    settings: ClusterSettings


_CLUSTER = web.AppKey("cluster", ServerContext)
_REGISTRY = web.AppKey("registry", CollectorRegistry)
_KAFKA_SECURITY = web.AppKey("kafka_security", dict)
_RELAY = web.AppKey("relay", ProcessRelay)
_API_GC_SECONDS = Histogram(
    "ostinato_api_gc_seconds", "Full garbage collections the API process ran itself when it has no processor thread "
    "(processors in processes of their own, or none): when quiet, or ten minutes after the last under unbroken load "
    "(the interpreter's own are off: services/history/collector.py).",
    buckets=LATENCY_BUCKETS, registry=REGISTRY)


async def _api_collections(app: web.Application) -> AsyncIterator[None]:
    """The API's full garbage collections on the processors' schedule, while the app runs (`serve_collections`)."""
    task = asyncio.create_task(serve_collections(Collector(_API_GC_SECONDS)), name="ostinato-api-gc")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def get_cluster(request: web.Request) -> web.Response:
    """What a worker needs to find its topics: bootstrap servers, topic prefix and shard count; of the server's Kafka
    security settings only the protocol and the SASL mechanism, never a credential (each worker brings its own)."""
    ctx = request.app[_CLUSTER]
    return web.json_response({
        "kafka_bootstrap": ctx.bootstrap,
        "kafka_security": request.app[_KAFKA_SECURITY],
        "topic_prefix": ctx.settings.topic_prefix,
        "shards": ctx.settings.shards,
        "replication_factor": ctx.settings.replication_factor,
        "reply_partitions": ctx.settings.reply_partitions,
        "server_version": __version__,
    })


async def get_metrics(request: web.Request) -> web.Response:
    """This process's metrics, and its processor processes' added up as if they were threads of it."""
    body = generate_latest(request.app[_REGISTRY])
    relay = request.app.get(_RELAY)
    if relay is not None:
        body += merge_exposition(await relay.metrics())
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def create_app(ctx: ServerContext, reads: ReadContext | None = None,
               registry: CollectorRegistry = REGISTRY, auth: Auth | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES,
                          middlewares=[size_refusals, *([auth.middleware] if auth is not None else [])])
    app[_CLUSTER] = ctx
    app[_REGISTRY] = registry
    app[_KAFKA_SECURITY] = public_security(security_config())
    app.router.add_get("/api/v1/cluster", get_cluster)
    install_cluster_api(app, ctx.bootstrap, ctx.settings.topic_prefix, ctx.settings.shards)  # brokers and lag
    app.router.add_get("/metrics", get_metrics)
    add_routes(app, reads or ReadContext(ctx.settings.shards, None, None, frozenset()))
    relay = reads.relay if reads is not None else None
    if isinstance(relay, ProcessRelay):
        app[_RELAY] = relay

        async def close_relay(app: web.Application) -> None:
            await relay.close()

        app.on_cleanup.append(close_relay)
    add_archive_routes(app)
    install_openapi(app)
    return app


def load_context(bootstrap: str, prefix: str, expect_shards: int | None, timeout: float = 60.0) -> ServerContext:
    """Read the cluster settings; refuse to serve a cluster that is missing or sharded differently."""
    settings = read_settings(bootstrap, prefix, timeout=timeout)
    if settings is None:
        raise ClusterError(
            f"no Ostinato cluster '{prefix}' at {bootstrap}: run `ostinato cluster init --shards N` first"
        )
    if expect_shards is not None and expect_shards != settings.shards:
        raise ClusterError(
            f"this server is configured for {expect_shards} shards but cluster '{prefix}' has {settings.shards}; "
            "refusing to start (workflow ids would be routed to the wrong shards)"
        )
    return ServerContext(bootstrap, settings)


def default_data_dir() -> Path:
    from ostinato.infra import defaults

    return defaults.home_dir() / "data"


def serve(ctx: ServerContext, host: str = DEFAULT_HOST, port: int = DEFAULT_API_PORT, *,
          data_dir: Path | None = None, processor: bool = True, advertise: str = "", auth: Auth | None = None,
          ssl_context: ssl.SSLContext | None = None, archive_uri: str = "", archiver: bool = True,
          opensearch_url: str = "", processors: int = 1, processor_mode: str = AUTO,
          ingress: Path | None = None, egress_topics: str = "", processor_nice: int = 0) -> None:
    """Run until SIGINT or SIGTERM. A processor that dies takes the server down with it (exit status 1), so a
    supervisor restarts the whole process instead of leaving an API up whose shards nobody processes.

    `processor_mode` AUTO runs a lone processor as a thread (one process, nothing to relay) and several as processes
    of their own: deciding is Python, and threads of one interpreter decide one at a time, behind the API's work
    too (docs/benchmarks.md measures both). `processor_nice` moves the processor processes' CPU priority
    (`services/history/priority.py`); processor threads share the server's."""
    from ostinato.services.frontend.api import install as install_api
    from ostinato.services.frontend.batch_api import install as install_batch_api
    from ostinato.services.frontend.gateway import CommandGateway
    from ostinato.services.frontend.namespaces_api import Namespaces
    from ostinato.services.frontend.namespaces_api import config_for as namespace_config
    from ostinato.services.frontend.namespaces_api import install as install_namespaces
    from ostinato.services.frontend.schedules_api import install as install_schedules
    from ostinato.services.frontend.ui import install as install_ui
    from ostinato.services.frontend.visibility_api import install as install_visibility
    from ostinato.services.history.processes import ProcessorProcesses
    from ostinato.services.history.processor import ProcessorOptions, owner_id_of
    from ostinato.services.history.processors import Processors
    from ostinato.streams.config import Config

    check_port_free(port, host, what="the Ostinato API")
    mappings = _ingress_mappings(ingress) if ingress is not None else None
    if mappings is not None and mappings.outcomes and auth is not None and auth.reader_of_everything() is None:
        raise ClusterError("outcomes streams read results through the API: the auth config needs a token that is "
                           'at least a reader of "*"')
    from ostinato.services.history.processor import EGRESS_ENV, egress_conflicts, egress_patterns

    conflicts = egress_conflicts(egress_patterns(egress_topics), ctx.settings.topic_prefix)
    if conflicts:
        raise ClusterError(f"--egress-topics {', '.join(conflicts)} would let workflows write into the cluster's own "
                           f"topics ({ctx.settings.topic_prefix}.*); name the topics they may publish to")
    os.environ[EGRESS_ENV] = egress_topics  # the processors read it (processor processes inherit it)
    endpoint = advertise or f"{'https' if ssl_context else 'http'}://{host}:{port}"
    ownership = OwnershipTable(ctx.bootstrap, ctx.settings.topic_prefix).start()
    if not ownership.caught_up.wait(30):  # namespaces' retention must be known before any shard restores
        log.warning("%s.cluster was not read to its end in 30s; namespaces may be missing for a moment",
                    ctx.settings.topic_prefix)
    procs: Processors | ProcessorProcesses | None = None
    relay: ProcessRelay | None = None
    waiters = HistoryWaiters()  # long-polls on history, woken by this process's commits
    failed = threading.Event()

    def part_failed(what: str, why: str, exc: BaseException | None = None) -> None:
        """A processor or an ingress mapping that stops ends the server (status 1): a supervisor restarts it
        whole instead of leaving an API up while shards or source topics go unprocessed."""
        log.error("%s %s; shutting the server down", what, why, exc_info=exc)
        failed.set()
        os.kill(os.getpid(), signal.SIGTERM)

    running_ingress = None
    limiter: RateLimiter | None = None
    backlog: BacklogCollector | None = None

    def stop_on_term(signum: int, frame: object) -> None:
        raise SystemExit(1 if failed.is_set() else 128 + signum)

    # Until the app runs (it installs its own handlers), SIGTERM (also a part that failed) ends the start in order:
    # the finally below stops the processor processes and the ingress, rather than the default action killing
    # the server with its children left to PR_SET_PDEATHSIG.
    signal.signal(signal.SIGTERM, stop_on_term)
    try:
        if processor:
            options = ProcessorOptions.from_env(data_dir or default_data_dir(), endpoint)
            if archive_uri:  # closed runs outlive their retention until their archive is confirmed
                options.config = replace(options.config, archive=True)
            if processors > ctx.settings.shards:
                log.warning("%d processors for %d shards: %d will own nothing unless other servers leave",
                            processors, ctx.settings.shards, processors - ctx.settings.shards)
            in_processes = processor_mode == PROCESS or (processor_mode == AUTO and processors > 1)
            if processor_nice and not in_processes:
                log.warning("--processor-nice %+d ignored: it applies to processors in processes of their own "
                            "(--processor-mode process, or --processors N > 1); a processor thread shares the "
                            "server's priority", processor_nice)
            if in_processes:
                procs = ProcessorProcesses(ctx.bootstrap, ctx.settings.topic_prefix, options, processors,
                                           archive=bool(archive_uri), nice=processor_nice)
                procs.start(lambda owner, status: part_failed(f"the history processor {owner}",
                                                              f"process exited with status {status}"))
                if not procs.wait_listening(60):
                    raise ClusterError("the processor processes did not start (their errors are above)")
                relay = ProcessRelay(procs.sockets)
            else:
                options.config_for = namespace_config(ownership, options.config)
                options.on_history = waiters.notify
                options.on_release = waiters.release
                procs = Processors(ctx.bootstrap, ctx.settings, options, processors, registry=REGISTRY)
                procs.start(lambda proc, exc: part_failed(f"the history processor {proc.owner_id}",
                                                          "stopped with an error", exc))
        owner_ids = procs.owner_ids if procs is not None else frozenset()
        source = procs if isinstance(procs, Processors) else None  # processes serve their stores' reads themselves
        reads = ReadContext(ctx.settings.shards, source, ownership, owner_ids, waiters, relay)
        log.info("Kafka security: %s", describe_security(security_config()))  # secrets hidden
        log.info("Ostinato %s listening on http://%s:%d (Kafka %s, prefix %s, %d shards%s)", __version__, host, port,
                 ctx.bootstrap, ctx.settings.topic_prefix, ctx.settings.shards,
                 f", {processors} processor{'s' if processors > 1 else ''}" if procs else "")
        app = create_app(ctx, reads, auth=auth)

        async def bind_waiters(app: web.Application) -> None:
            waiters.bind(asyncio.get_running_loop())

        app.on_startup.append(bind_waiters)

        async def hand_over_shards(app: web.Application) -> None:
            """First thing on SIGTERM: finish the open transaction and leave the group, so the other servers take
            the shards at once; requests still in flight then get redirects or 503s, and the rest shuts down
            after."""
            if procs is not None:
                await asyncio.get_running_loop().run_in_executor(None, procs.stop, 30)

        app.on_shutdown.append(hand_over_shards)
        gateway = CommandGateway(ctx.bootstrap, ctx.settings)
        gateway.install(app)  # POST /api/v1/commands; started and stopped with the app
        install_api(app, gateway)  # the JSON workflow API, over the same gateway
        install_batch_api(app)  # batch operations: commands for the job's run, over the same gateway
        install_schedules(app)  # the JSON schedules API, over it too
        default_retention = procs.options.config.retention_ms if procs is not None else Config().retention_ms
        install_namespaces(app, Namespaces(ownership, gateway, ctx.settings.topic_prefix, default_retention))
        install_visibility(app, ctx.bootstrap, ctx.settings.topic_prefix,
                           (data_dir or default_data_dir()) / ctx.settings.topic_prefix / "visibility.sqlite",
                           opensearch_url=opensearch_url)
        install_ui(app, endpoint, auth_on=auth is not None)  # the web UI at /, reading through this API
        if ssl_context is None:  # with TLS, run a worker for the batch queue yourself (the SDK trusts system CAs only)
            from ostinato.services.batch_runner import install as install_batch_worker

            install_batch_worker(app, f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}",
                                 api_key=auth.internal_token() if auth is not None else None)
        if archive_uri and archiver:
            _install_archival(app, ctx, archive_uri, endpoint, auth)
        if mappings is not None:
            from ostinato.connectors.ingress import Ingress
            from ostinato.services.admin.archival import OutcomeOverApi

            instance = owner_id_of((data_dir or default_data_dir()) / ctx.settings.topic_prefix)
            token = (auth.reader_of_everything() or "") if auth is not None else ""
            running_ingress = Ingress(
                ctx.bootstrap, ctx.settings, mappings, instance, REGISTRY,
                on_failure=lambda name, exc: part_failed(f"ingress {name}", "stopped with an error", exc),
                outcome_source=OutcomeOverApi(endpoint, token),
                namespace_known=lambda ns: ns == DEFAULT_NAMESPACE or ownership.namespace(ns) is not None)
            running_ingress.start()
        limiter, backlog = _start_queue_services(ctx, ownership, data_dir or default_data_dir(), part_failed)
        install_rate_limits(app, ownership, gateway, ctx.settings.topic_prefix)
        if not isinstance(procs, Processors):  # no processor thread in this process schedules its collections
            app.cleanup_ctx.append(_api_collections)
        # A short grace for requests in flight: long-polls are answered (redirect, 503) once the shards are gone.
        web.run_app(app, host=host, port=port, print=None, access_log=None, ssl_context=ssl_context,
                    shutdown_timeout=SHUTDOWN_GRACE_S)
    finally:
        if limiter is not None:
            limiter.stop(10)
        if backlog is not None:
            backlog.stop()
            REGISTRY.unregister(backlog)
        if running_ingress is not None:
            running_ingress.stop()
        if procs is not None:
            procs.stop(30)
        ownership.stop()
    if failed.is_set():
        raise SystemExit(1)


def _start_queue_services(ctx: ServerContext, ownership: OwnershipTable, data_dir: Path,
                          part_failed: Callable[[str, str, BaseException | None], None],
                          ) -> tuple[RateLimiter, BacklogCollector]:
    """The rate limiter (its share of releasing rate-limited queues' held activity tasks) and the backlog metrics,
    which every server runs."""
    from ostinato.kafka.task_topics import TaskTopics
    from ostinato.services.history.processor import owner_id_of

    prefix = ctx.settings.topic_prefix
    instance = owner_id_of(data_dir / prefix)
    topics = TaskTopics(ctx.bootstrap, prefix, ctx.settings.replication_factor)
    limiter = RateLimiter(ctx.bootstrap, prefix, topics, ownership.rate_limits, instance,
                          on_failure=lambda name, exc: part_failed("the rate limiter", "stopped with an error", exc))
    limiter.start()
    interval = float(os.environ.get("OSTINATO_BACKLOG_INTERVAL_S", BACKLOG_INTERVAL_S))
    backlog = BacklogCollector(ctx.bootstrap, prefix, interval).start()
    REGISTRY.register(backlog)
    return limiter, backlog


def _ingress_mappings(path: Path) -> Any:
    from ostinato.connectors.ingress_mapping import MappingError, load

    try:
        return load(path)
    except MappingError as exc:
        raise ClusterError(str(exc)) from None


def _install_archival(app: web.Application, ctx: ServerContext, archive_uri: str, endpoint: str,
                      auth: Auth | None) -> None:
    """Archive closed runs to `archive_uri` (S3 settings from `OSTINATO_S3_*` or boto3's usual chain)."""
    from ostinato.connectors.archive import S3Archive
    from ostinato.connectors.archiver import Archiver
    from ostinato.sdk.blobstore_s3 import ensure_bucket, s3_client
    from ostinato.services.admin.archival import HistoryOverApi
    from ostinato.services.admin.archival import install as install_archival

    try:
        archive = S3Archive.from_uri(s3_client(), archive_uri)
        ensure_bucket(archive.client, archive.bucket)
    except Exception as exc:  # noqa: BLE001 - refuse to start rather than run without the archive asked for
        raise ClusterError(f"archival to {archive_uri} is not possible: {exc}") from None
    token = auth.reader_of_everything() if auth is not None else ""
    if token is None:
        raise ClusterError("archival reads histories through the API: the auth config needs a token that is at "
                           'least a reader of "*"')
    archiver = Archiver(ctx.bootstrap, ctx.settings.topic_prefix, ctx.settings.shards, archive,
                        HistoryOverApi(endpoint, token))
    install_archival(app, archiver, archive)
