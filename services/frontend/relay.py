"""The server's side of processors in processes of their own (`--processor-mode process`): owner reads relayed
to the process that owns the shard, and its metrics merged into the server's `/metrics`.

A process's shard stores and long-poll waiters live where its commits happen (`services/processor_process.py`),
so a read is relayed, not redirected: clients, other servers and the auth middleware see one server and one port,
as with processor threads. The relay is one local hop over a Unix socket: the reads share one WebSocket per
process (`read_channel.py`), the metrics scrape is an HTTP request. A process that is down or restarting answers
as a moving shard does, a 503 with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from yarl import URL

from ostinato.services.frontend.read_channel import ReadChannel
from ostinato.services.frontend.reads import MAX_WAIT_S

_METRICS_TIMEOUT_S = 5.0


class ProcessRelay:
    """Owner id -> the Unix socket its processor process serves owner reads on."""

    def __init__(self, sockets: Mapping[str, str], read_timeout_s: float = MAX_WAIT_S + 30) -> None:
        self.sockets = dict(sockets)
        self._read_timeout_s = read_timeout_s  # a long-poll holds a read up to MAX_WAIT_S: answered (or 504) before
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._channels: dict[str, ReadChannel] = {}
        self._last_metrics: dict[str, str] = {}

    def __contains__(self, owner_id: object) -> bool:
        return owner_id in self.sockets

    def _session(self, owner_id: str) -> aiohttp.ClientSession:
        session = self._sessions.get(owner_id)
        if session is None or session.closed:
            session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.sockets[owner_id]))
            self._sessions[owner_id] = session
        return session

    async def forward(self, request: web.Request, owner_id: str) -> web.Response:
        """The process's answer to `request`, status and body as they are (redirects are not followed here)."""
        channel = self._channels.get(owner_id)
        if channel is None:
            channel = self._channels[owner_id] = ReadChannel(lambda: self._session(owner_id), self._read_timeout_s)
        return await channel.read(request)

    async def metrics(self) -> list[str]:
        """Every process's `/metrics` text (the last one it gave, when it does not answer in time)."""
        async def one(owner_id: str) -> str:
            url = URL("http://processor/metrics")
            async with self._session(owner_id).get(url, timeout=aiohttp.ClientTimeout(total=_METRICS_TIMEOUT_S)) \
                    as answer:
                return await answer.text()

        owners = list(self.sockets)
        texts = await asyncio.gather(*(one(o) for o in owners), return_exceptions=True)
        for owner, text in zip(owners, texts, strict=True):
            if isinstance(text, str):
                self._last_metrics[owner] = text
        # A process that does not answer in time counts with its last figures: dropping it from the sum would
        # make every counter fall, which Prometheus reads as a reset.
        return [self._last_metrics[o] for o in owners if o in self._last_metrics]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        for session in self._sessions.values():
            with contextlib.suppress(Exception):
                await session.close()
        self._sessions.clear()


def merge_exposition(texts: Iterable[str]) -> bytes:
    """Several processes' metrics as one process's: samples of the same name and labels are added (counters,
    gauges of owned things and histogram buckets all add up); `_created` times are left out, as meaningless for
    a sum. Families keep their order of first appearance."""
    families: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                sums[family.name] = {}
            totals = sums[family.name]
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                totals[key] = totals.get(key, 0.0) + sample.value
    for name, family in families.items():
        family.samples = [Sample(sample, dict(labels), value) for (sample, labels), value in sums[name].items()]

    class _Merged:
        def collect(self) -> Iterable[Metric]:
            return families.values()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())  # type: ignore[arg-type]
    return generate_latest(registry)
