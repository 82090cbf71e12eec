"""The HTTP API's error model and JSON rendering, shared by every route of the frontend (and archival's)."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web


def error(status: int, code: str, message: str, **details: Any) -> web.Response:
    """An error answer in the API's model: `{"code", "message", "details"}`."""
    return web.json_response({"code": code, "message": message, "details": details}, status=status)


def jsonable(value: Any) -> Any:
    """Avro records as JSON: bytes as base64, a union branch `(name, record)` as the record with its `@type`."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        inner = jsonable(value[1])
        return {"@type": value[0], **inner} if isinstance(inner, dict) else inner
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
