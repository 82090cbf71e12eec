"""The UI's way to its data: the server's own HTTP API, called on its own address with the browser's token.

Going through the API (rather than the stores) keeps one path for every reader: the auth middleware checks the
token, reads of shards owned by a processor process are relayed to it, and reads of shards owned by another server
are redirected there, as for any other client.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import aiohttp
from aiohttp import web

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 3  # the API redirects at most once (`owner_hop`); more means a loop
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Answer:
    """An API answer: its status and its JSON body (the error model's `{code, message, details}` on errors)."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The API's own message for an error, shown to the user as it is."""
        if isinstance(self.body, dict):
            return str(self.body.get("message") or self.body.get("code") or self.body)
        return str(self.body)


class ApiClient:
    """Calls this server's API on `base_url`, forwarding the browser's `Authorization` header.

    Redirects are followed by hand so the header goes along to the shard's owner (aiohttp drops it on a redirect
    to another origin, as browsers do); the owner endpoints come from the cluster's own ownership table.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        # The server calls itself on its advertised address; with TLS that certificate may not name that address.
        self._ssl: ssl.SSLContext | bool = ssl._create_unverified_context() if base_url.startswith("https") else True
        self._session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))

    async def close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, request: web.Request, path: str, params: dict[str, str] | None = None) -> Answer:
        return await self._call(request, "GET", path, params=params)

    async def post(self, request: web.Request, path: str, body: dict[str, Any]) -> Answer:
        return await self._call(request, "POST", path, body=body)

    async def _call(self, request: web.Request, method: str, path: str, *, params: dict[str, str] | None = None,
                    body: dict[str, Any] | None = None) -> Answer:
        if self._session is None:
            return Answer(503, {"code": "unavailable", "message": "the UI is starting; retry in a moment"})
        headers = {"Authorization": request.headers["Authorization"]} if "Authorization" in request.headers else {}
        url = self.base_url + path
        try:
            for _ in range(MAX_REDIRECTS + 1):
                async with self._session.request(method, url, params=params, json=body, headers=headers,
                                                 allow_redirects=False, ssl=self._ssl) as resp:
                    if resp.status in REDIRECTS and "Location" in resp.headers:
                        url, params = urljoin(url, resp.headers["Location"]), None  # the target carries the query
                        if resp.status == 303:  # See Other (an update's wait): GET it, without the body
                            method, body = "GET", None
                        continue
                    try:
                        payload = await resp.json(content_type=None)
                    except ValueError:
                        payload = {"code": "bad_answer", "message": (await resp.text())[:500]}
                    return Answer(resp.status, payload)
        except (TimeoutError, aiohttp.ClientError) as exc:
            why = str(exc) or type(exc).__name__
            return Answer(503, {"code": "unavailable", "message": f"the API did not answer: {why}"})
        return Answer(502, {"code": "redirect_loop", "message": f"more than {MAX_REDIRECTS} redirects for {path}"})
