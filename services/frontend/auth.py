"""Bearer-token auth for the API (off unless a config file is given; `ostinato dev` runs without it).

The config is JSON: `{"tokens": {"<token>": {"<namespace or *>": "reader|writer|admin"}}}`. Readers may GET,
writers may also POST (workflow operations, the SDK's command path), admins everything, including registering
namespaces. Cluster discovery (and shard owners), the OpenAPI document
and metrics stay open (workers and scrapers need them before they hold a token), and so do the web UI's pages
(`/` and `/ui/...`: layout only, no data; the parts they load under `/ui-parts/` need a token like the API).
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from ostinato.services.frontend.http import error

ROLES = ("reader", "writer", "admin")
OPEN_PATHS = ("/api/v1/cluster", "/api/v1/cluster/owners", "/api/v1/cluster/brokers", "/api/v1/cluster/lag",
              "/api/v1/openapi.json", "/metrics", "/")
OPEN_PREFIXES = ("/ui/",)  # the web UI's pages and static files: a browser cannot send a bearer token on navigation
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AuthConfigError(ValueError):
    pass


class Auth:
    def __init__(self, tokens: dict[str, dict[str, str]]) -> None:
        for token, grants in tokens.items():
            if not token or not isinstance(grants, dict):
                raise AuthConfigError("each token maps to {namespace: role}")
            for namespace, role in grants.items():
                if role not in ROLES:
                    raise AuthConfigError(f"role {role!r} of namespace {namespace!r} is not one of {', '.join(ROLES)}")
        self.tokens = tokens

    @classmethod
    def load(cls, path: Path) -> Auth:
        try:
            data: Any = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise AuthConfigError(f"cannot read the auth config {path}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), dict):
            raise AuthConfigError(f"{path}: expected {{\"tokens\": {{token: {{namespace: role}}}}}}")
        return cls(data["tokens"])

    def role(self, token: str, namespace: str) -> str | None:
        for known, grants in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return grants.get(namespace) or grants.get("*")
        return None

    def internal_token(self) -> str:
        """A token only this process knows, a writer of every namespace, kept in memory and never written anywhere:
        the server's own batch worker calls the API with it, so batch jobs run on a server with auth as without."""
        token = secrets.token_urlsafe(32)
        self.tokens[token] = {"*": "writer"}
        return token

    def reader_of_everything(self) -> str | None:
        """A token that may read every namespace (for the server's own calls to its API), or None."""
        return next((t for t, grants in self.tokens.items() if grants.get("*") in ROLES), None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or request.path.startswith(OPEN_PREFIXES):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return error(401, "unauthenticated", "send Authorization: Bearer <token>")
        namespace = request.match_info.get("namespace", "*")
        role = self.role(header.removeprefix("Bearer ").strip(), namespace)
        if role is None:
            return error(401, "unauthenticated", "unknown token, or no access to this namespace")
        needed = "reader" if request.method in ("GET", "HEAD") else "writer"
        if request.method == "POST" and request.path == "/api/v1/namespaces":
            needed = "admin"  # registering namespaces is administration
        if ROLES.index(role) < ROLES.index(needed):
            return error(403, "permission_denied", f"this token is a {role} of {namespace!r}; {needed} is needed",
                         role=role, needed=needed)
        return await handler(request)
