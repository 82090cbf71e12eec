"""Count what a client's HTTP connection sees (statuses, redirects, refused connections), without touching the SDK:
an aiohttp trace config on the session the SDK's `HttpService` uses."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp

from ostinato.client import Client
from ostinato.sdk._http import MAX_CONNECTIONS, HttpService

__all__ = ["HttpTally", "connect_counted"]


@dataclass
class HttpTally:
    """Responses by status, redirects followed, and requests that got no answer (refused, reset, timed out).

    `five_xx` counts every 5xx; `hard_five_xx` leaves out a 503 that carries `Retry-After` (the documented answer
    while a shard moves, which clients are meant to retry). `log`, when set, gets one JSON line per 5xx and per
    failed request as it happens, so a killed process leaves its figures behind.
    """

    statuses: Counter[int] = field(default_factory=Counter)
    redirects: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    five_xx: int = 0
    hard_five_xx: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    log: Path | None = None

    def trace_config(self) -> aiohttp.TraceConfig:
        config = aiohttp.TraceConfig()
        config.on_request_end.append(self._ended)
        config.on_request_redirect.append(self._redirected)
        config.on_request_exception.append(self._failed)
        return config

    async def _ended(self, _session: aiohttp.ClientSession, _ctx: SimpleNamespace,
                     params: aiohttp.TraceRequestEndParams) -> None:
        status = params.response.status
        self.statuses[status] += 1
        if status >= 500:
            self.five_xx += 1
            soft = status == 503 and "Retry-After" in params.response.headers
            if not soft:
                self.hard_five_xx += 1
            self._note({"status": status, "retry_after": soft, "method": params.method,
                        "url": str(params.url)})

    async def _redirected(self, _session: aiohttp.ClientSession, _ctx: SimpleNamespace,
                          params: aiohttp.TraceRequestRedirectParams) -> None:
        self.redirects += 1
        self.statuses[params.response.status] += 1

    async def _failed(self, _session: aiohttp.ClientSession, _ctx: SimpleNamespace,
                      params: aiohttp.TraceRequestExceptionParams) -> None:
        kind = type(params.exception).__name__
        self.failures[kind] += 1
        self._note({"failure": kind, "message": str(params.exception)[:200], "method": params.method,
                    "url": str(params.url)})

    def _note(self, sample: dict[str, Any]) -> None:
        sample = {"at_ms": time.time_ns() // 1_000_000, **sample}
        if len(self.samples) < 200:
            self.samples.append(sample)
        if self.log is not None:
            with self.log.open("a") as out:
                out.write(json.dumps(sample) + "\n")

    def figures(self) -> dict[str, Any]:
        return {"http_5xx": self.hard_five_xx, "http_5xx_all": self.five_xx,
                "http_statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "http_redirects": self.redirects, "http_failures": dict(self.failures)}

    def reset(self) -> None:
        """Forget everything counted so far (the trace config stays attached)."""
        self.statuses.clear()
        self.failures.clear()
        self.redirects = self.five_xx = self.hard_five_xx = 0
        self.samples.clear()

    @staticmethod
    def read_log(path: Path, since_ms: int = 0) -> HttpTally:
        """A tally rebuilt from a `log` file (what another process saw), from `since_ms` on."""
        tally = HttpTally()
        if not path.exists():
            return tally
        for line in path.read_text().splitlines():
            try:
                sample = json.loads(line)
            except ValueError:
                continue
            if sample.get("at_ms", 0) < since_ms:
                continue
            if "status" in sample:
                tally.statuses[sample["status"]] += 1
                tally.five_xx += 1
                tally.hard_five_xx += 0 if sample.get("retry_after") else 1
            else:
                tally.failures[sample.get("failure", "?")] += 1
            tally.samples.append(sample)
        return tally

    def merge(self, other: HttpTally) -> None:
        self.statuses.update(other.statuses)
        self.failures.update(other.failures)
        self.redirects += other.redirects
        self.five_xx += other.five_xx
        self.hard_five_xx += other.hard_five_xx
        self.samples.extend(other.samples[: max(0, 200 - len(self.samples))])


async def connect_counted(target: str, tally: HttpTally, *, namespace: str = "default", identity: str = "",
                          timeout: float = 60.0) -> Client:
    """A `Client` of the server at `target` whose every HTTP exchange lands in `tally`; waits for the server to
    answer `GET /api/v1/cluster` (up to `timeout` seconds)."""
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
                                    trace_configs=[tally.trace_config()])
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                async with session.get(target.rstrip("/") + "/api/v1/cluster",
                                       timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        cluster = await resp.json()
                        break
            except (aiohttp.ClientError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Ostinato server answered at {target} in {timeout:.0f}s")
            await asyncio.sleep(0.2)
    except BaseException:
        await session.close()
        raise
    return Client(HttpService(target, session, cluster), namespace=namespace, identity=identity)
