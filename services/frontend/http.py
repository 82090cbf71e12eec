"""The HTTP API's error model and JSON rendering, shared by every route of the frontend (and archival's)."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from ostinato.schemas.topics import MAX_RECORD_BYTES

# The largest request body any route reads (aiohttp's `client_max_size`). A body larger than a Kafka record cannot
# become a command, and a JSON body this size carries one value at the payload hard limit (2 MiB) with room to spare.
MAX_BODY_BYTES = MAX_RECORD_BYTES


RETRY_AFTER_S = 1  # what every 503 tells clients: Kafka or a shard is away for a moment, asking again is cheap


def error(status: int, code: str, message: str, **details: Any) -> web.Response:
    """An error answer in the API's model: `{"code", "message", "details"}`. Every 503 carries `Retry-After`, so
    clients and proxies back off the same way whatever part of the server was unavailable."""
    response = web.json_response({"code": code, "message": message, "details": details}, status=status)
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


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


@web.middleware
async def size_refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp refuses a body over `client_max_size` with a plain-text 413: answer it in the error model, with the
    limit stated, like every other size refusal."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        size = request.content_length
        return error(413, "too_large", f"the request body{f' is {size:,} bytes,' if size else ' is'} over the "
                     f"{MAX_BODY_BYTES:,}-byte limit", limit_bytes=MAX_BODY_BYTES,
                     **({"size_bytes": size} if size else {}))
