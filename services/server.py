"""`ostinato server`: the HTTP API on port 7243 (today: cluster discovery; later issues add the rest)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from ostinato import __version__
from ostinato.infra.process import check_port_free
from ostinato.schemas.cluster import ClusterSettings
from ostinato.services.cluster import ClusterError, read_settings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_API_PORT = 7243

log = logging.getLogger("ostinato.server")

@dataclass(frozen=True)
class ServerContext:
    bootstrap: str
    settings: ClusterSettings


_CLUSTER = web.AppKey("cluster", ServerContext)


async def get_cluster(request: web.Request) -> web.Response:
    """What a worker needs to find its topics: bootstrap servers, topic prefix and shard count."""
    ctx = request.app[_CLUSTER]
    return web.json_response({
        "kafka_bootstrap": ctx.bootstrap,
        "topic_prefix": ctx.settings.topic_prefix,
        "shards": ctx.settings.shards,
        "replication_factor": ctx.settings.replication_factor,
        "reply_partitions": ctx.settings.reply_partitions,
        "server_version": __version__,
    })


def create_app(ctx: ServerContext) -> web.Application:
    app = web.Application()
    app[_CLUSTER] = ctx
    app.router.add_get("/api/v1/cluster", get_cluster)
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


def serve(ctx: ServerContext, host: str = DEFAULT_HOST, port: int = DEFAULT_API_PORT) -> None:
    """Run until SIGINT or SIGTERM."""
    check_port_free(port, host, what="the Ostinato API")
    log.info("Ostinato %s listening on http://%s:%d (Kafka %s, prefix %s, %d shards)", __version__, host, port,
             ctx.bootstrap, ctx.settings.topic_prefix, ctx.settings.shards)
    web.run_app(create_app(ctx), host=host, port=port, print=None, access_log=None)
