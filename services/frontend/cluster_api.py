"""`GET /api/v1/cluster/brokers` and `GET /api/v1/cluster/lag`: the brokers (and whether this server reaches each),
each shard's processor lag and this server's visibility lag, read from Kafka (`services/admin/lag.py`).

Both are open like `/api/v1/cluster/owners` (the cluster page and scrapers read them), so each answer is kept for
CACHE_S and computed once however many requests ask at the same moment: a page refreshing every few seconds, or
many of them, cost the brokers one round of requests per CACHE_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ostinato.kafka.clients import admin_client
from ostinato.schemas.topics import Topic, topic_name
from ostinato.services.admin.lag import GroupPositions, PartitionLag, brokers, topic_lags
from ostinato.services.frontend.http import RETRY_AFTER_S, error
from ostinato.services.frontend.visibility_api import FEEDER, Feeder

CACHE_S = 2.0
TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 1.0  # a broker that takes longer to accept a connection from here counts as unreachable


class _Cached:
    """One figure computed at most once per CACHE_S, a failure included (so a Kafka that does not answer is asked
    once per CACHE_S, not once per request); concurrent callers share the computation in flight."""

    def __init__(self, compute: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._compute = compute
        self._value: dict[str, Any] | Exception | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> dict[str, Any]:
        async with self._lock:
            if self._value is None or time.monotonic() - self._at >= CACHE_S:
                try:
                    self._value = await self._compute()
                except (KafkaException, TimeoutError) as exc:
                    self._value = exc
                self._at = time.monotonic()
            if isinstance(self._value, Exception):
                raise self._value
            return self._value


class ClusterWatch:
    """The figures of one cluster. Holds its AdminClient for life: a collected AdminClient cancels its futures."""

    def __init__(self, bootstrap: str, prefix: str, shards: int) -> None:
        self.bootstrap, self.prefix, self.shards = bootstrap, prefix, shards
        self.feeder: Feeder | None = None  # this server's visibility feeder, when it runs one
        self._admin: AdminClient | None = None  # made on first use: an app built for its routes alone connects nowhere
        self._admin_lock = threading.Lock()  # brokers and lag are read on two executor threads at once
        self._brokers: _Cached | None = None
        self._lag: _Cached | None = None
        self._groups = GroupPositions(bootstrap, "ostinato-lag")  # its consumers are made on first use

    def _client(self) -> AdminClient:
        with self._admin_lock:
            if self._admin is None:
                self._admin = admin_client(self.bootstrap)
            return self._admin

    async def brokers(self) -> dict[str, Any]:
        if self._brokers is None:
            self._brokers = _Cached(self._read_brokers)
        return await self._brokers.get()

    async def lag(self) -> dict[str, Any]:
        """Each shard's processor lag, and the lag of this server's visibility store when it runs one."""
        if self._lag is None:
            self._lag = _Cached(self._read_lag)
        return await self._lag.get()

    async def _read_brokers(self) -> dict[str, Any]:
        cluster_id, found = await asyncio.get_running_loop().run_in_executor(
            None, brokers, self._client(), TIMEOUT_S)
        reachable = await asyncio.gather(*(_reachable(b.host, b.port) for b in found))
        return {"cluster_id": cluster_id, "bootstrap": self.bootstrap, "measured_at_ms": time.time_ns() // 1_000_000,
                "brokers": [{**asdict(b), "reachable": ok} for b, ok in zip(found, reachable, strict=True)]}

    async def _read_lag(self) -> dict[str, Any]:
        loop, feeder = asyncio.get_running_loop(), self.feeder
        shards = await loop.run_in_executor(None, self._processor_lags)
        visibility = None
        if feeder is not None:
            partitions = await loop.run_in_executor(None, self._visibility_lags, feeder)
            visibility = {"store": feeder.kind, "lag": sum(p.lag for p in partitions),
                          "partitions": [_row(p) for p in partitions]}
        return {"measured_at_ms": time.time_ns() // 1_000_000,
                "processor": {"group": f"{self.prefix}-history", "topic": topic_name(self.prefix, Topic.COMMANDS),
                              "lag": sum(p.lag for p in shards), "shards": [_row(p, "shard") for p in shards]},
                "visibility": visibility}

    def _processor_lags(self) -> list[PartitionLag]:
        topic, shards = topic_name(self.prefix, Topic.COMMANDS), list(range(self.shards))
        committed = self._groups.read(f"{self.prefix}-history", topic, shards, TIMEOUT_S)
        return topic_lags(self._client(), topic, shards, committed, TIMEOUT_S)

    def _visibility_lags(self, feeder: Feeder) -> list[PartitionLag]:
        positions = feeder.positions(TIMEOUT_S)
        known = {p: o for p, o in positions.items() if o >= 0}
        return topic_lags(self._client(), topic_name(self.prefix, Topic.VISIBILITY), sorted(positions), known,
                          TIMEOUT_S)


def _row(lag: PartitionLag, name: str = "partition") -> dict[str, Any]:
    return {name: lag.partition, "position": lag.position, "start": lag.start, "end": lag.end, "lag": lag.lag}


async def _reachable(host: str, port: int) -> bool:
    """Whether this server opens a TCP connection to the broker (its advertised address) within the timeout."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


WATCH = web.AppKey("cluster_watch", ClusterWatch)


def _kafka_unavailable(exc: Exception) -> web.Response:
    why = str(exc) or type(exc).__name__
    return error(503, "kafka_unavailable", f"Kafka did not answer within {TIMEOUT_S:g}s ({why}); "
                 f"retry in {RETRY_AFTER_S}s")


async def get_brokers(request: web.Request) -> web.Response:
    try:
        return web.json_response(await request.app[WATCH].brokers())
    except (KafkaException, TimeoutError) as exc:
        return _kafka_unavailable(exc)


async def get_lag(request: web.Request) -> web.Response:
    try:
        return web.json_response(await request.app[WATCH].lag())
    except (KafkaException, TimeoutError) as exc:
        return _kafka_unavailable(exc)


def install(app: web.Application, bootstrap: str, prefix: str, shards: int) -> None:
    watch = app[WATCH] = ClusterWatch(bootstrap, prefix, shards)

    async def find_feeder(app: web.Application) -> None:
        watch.feeder = app.get(FEEDER)  # installed with the visibility API, after this (absent in an API-only app)

    app.on_startup.insert(0, find_feeder)
    app.router.add_get("/api/v1/cluster/brokers", get_brokers)
    app.router.add_get("/api/v1/cluster/lag", get_lag)
