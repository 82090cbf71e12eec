"""Avro in the Confluent Schema Registry wire format: a value is the magic byte 0x00, the writer's schema id (4 bytes,
big-endian), then the Avro binary body; the schema is fetched from the registry by id and decoded with fastavro.

Two kinds of failure are kept apart, because they call for opposite handling by the ingress:
- `BadRecord`: the record itself cannot be read (no magic byte, a schema id the registry does not have, a truncated
  or corrupt body, a schema that is not Avro). It becomes a dead letter with this reason.
- `RegistryUnavailable`: the registry could not answer (down, refusing our credentials, a 5xx, a URL that does not
  lead to a registry). Nothing is wrong with the record: the ingress takes the batch back and retries with backoff,
  so records are never dead-lettered because of an outage.

Schema ids are immutable in a registry, so a schema fetched once is cached for the life of the process. Secrets
never live in the ingress file: `username_env` and `password_env` name environment variables.
"""

from __future__ import annotations

import base64
import io
import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

MAGIC = 0
HEADER_BYTES = 5
_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
# The registry API's own "not found" codes (Confluent's; Karapace and Apicurio's ccompat API agree): subject, version,
# schema. A 404 without one of them is not the registry speaking (a wrong URL), so it never blames the record.
_NOT_FOUND = (40401, 40402, 40403)
_MAX_REFERENCE_DEPTH = 32
UNKNOWN_ID_TTL_S = 60.0
_SETTINGS = {"url", "username_env", "password_env", "ca_file", "cert_file", "key_file", "timeout_s"}


class BadRecord(ValueError):
    """The record cannot be decoded; the message is the dead letter's reason."""


class RegistryUnavailable(RuntimeError):
    """The registry did not answer usefully: a transient failure, retried, never a dead letter."""


class RegistryConfigError(ValueError):
    """The `registry:` settings are wrong (raised when the ingress file is read)."""


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to reach it. Paths are absolute (resolved against the ingress file)."""

    url: str
    username_env: str = ""
    password_env: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    timeout_s: float = 10.0

    @classmethod
    def parse(cls, entry: Any, base: Path, where: str) -> RegistrySettings:
        """A `registry:` setting: a URL, or a mapping of `url` and the optional auth and TLS settings."""
        if isinstance(entry, str):
            entry = {"url": entry}
        if not isinstance(entry, dict):
            raise RegistryConfigError(f"{where}: registry is a URL or a mapping with `url`")
        unknown = sorted(set(entry) - _SETTINGS)
        if unknown:
            hint = " (secrets come from the environment: username_env, password_env)" if {
                "username", "password"} & set(unknown) else ""
            raise RegistryConfigError(f"{where}: registry: unknown setting(s) {', '.join(unknown)}{hint} "
                                      f"(known: {', '.join(sorted(_SETTINGS))})")
        url = entry.get("url")
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise RegistryConfigError(f"{where}: registry: url must be an http:// or https:// URL, not {url!r}")
        values: dict[str, Any] = {"url": url.rstrip("/")}
        for name in ("username_env", "password_env", "ca_file", "cert_file", "key_file"):
            value = entry.get(name, "")
            if not isinstance(value, str):
                raise RegistryConfigError(f"{where}: registry: {name} must be a string")
            values[name] = str(base / value) if value and name.endswith("_file") else value
        if bool(values["username_env"]) != bool(values["password_env"]):
            raise RegistryConfigError(f"{where}: registry: basic auth needs both username_env and password_env")
        for name in ("username_env", "password_env"):
            if values[name] and values[name] not in os.environ:
                raise RegistryConfigError(f"{where}: registry: {name} names ${values[name]}, which is not set")
        if bool(values["cert_file"]) != bool(values["key_file"]):
            raise RegistryConfigError(f"{where}: registry: a client certificate needs both cert_file and key_file")
        timeout = entry.get("timeout_s", 10.0)
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise RegistryConfigError(f"{where}: registry: timeout_s must be a positive number")
        return cls(**values, timeout_s=float(timeout))


class SchemaRegistry:
    """Fetches writer schemas by id (`GET /schemas/ids/{id}`) and keeps them; safe to share between threads."""

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self._schemas: dict[int, Any] = {}
        self._not_avro: dict[int, str] = {}
        self._unknown: dict[int, tuple[float, str]] = {}  # id -> (until, reason): a flood of bad ids asks once a minute
        self._lock = threading.Lock()
        self._ssl = _ssl_context(settings) if settings.url.startswith("https:") else None

    def schema(self, schema_id: int) -> Any:
        """The parsed schema of `schema_id`; BadRecord when the registry has no such Avro schema."""
        with self._lock:
            if schema_id in self._schemas:
                return self._schemas[schema_id]
            if schema_id in self._not_avro:
                raise BadRecord(self._not_avro[schema_id])
            until, reason = self._unknown.get(schema_id, (0.0, ""))
            if time.monotonic() < until:
                raise BadRecord(reason)
        try:
            answer = self.get(f"/schemas/ids/{schema_id}", f"schema id {schema_id}")
        except BadRecord as exc:
            with self._lock:
                self._unknown[schema_id] = (time.monotonic() + UNKNOWN_ID_TTL_S, str(exc))
            raise
        kind = answer.get("schemaType") or "AVRO"  # absent means Avro, as in every registry's API
        if kind != "AVRO":
            reason = f"schema id {schema_id} is a {kind} schema, not Avro"
            with self._lock:
                self._not_avro[schema_id] = reason
            raise BadRecord(reason)
        named: dict[str, Any] = {}
        self._referenced(answer.get("references") or [], named, f"schema id {schema_id}", 0)
        try:
            parsed = parse_schema(json.loads(answer["schema"]), named_schemas=named)
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRecord(f"schema id {schema_id} from the registry is not a valid Avro schema: {exc}") from None
        with self._lock:
            self._schemas[schema_id] = parsed
        return parsed

    def _referenced(self, references: list[Any], named: dict[str, Any], what: str, depth: int) -> None:
        """Parse the schemas `references` name (each `{name, subject, version}`, depth first) into `named`, so the
        referring schema can use their types."""
        if depth > _MAX_REFERENCE_DEPTH:
            raise BadRecord(f"{what}: schema references nest more than {_MAX_REFERENCE_DEPTH} deep")
        for ref in references:
            try:
                subject, version = str(ref["subject"]), int(ref["version"])
            except (KeyError, TypeError, ValueError):
                raise BadRecord(f"{what}: a schema reference without subject and version: {ref!r}") from None
            path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
            answer = self.get(path, f"{what}'s reference {subject} version {version}")
            self._referenced(answer.get("references") or [], named, what, depth + 1)
            try:
                parse_schema(json.loads(answer["schema"]), named_schemas=named)
            except (KeyError, TypeError, ValueError) as exc:
                raise BadRecord(f"{what}'s reference {subject} version {version} is not valid Avro: {exc}") from None

    def get(self, path: str, what: str) -> dict[str, Any]:
        """One JSON answer of the registry's API; the API's own "not found" is BadRecord, any other failure
        RegistryUnavailable."""
        url = self.settings.url + path
        request = urllib.request.Request(url, headers={"Accept": _ACCEPT, **self._auth()})
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s, context=self._ssl) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc, url, what) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise RegistryUnavailable(f"the schema registry at {self.settings.url} is unavailable: {reason}") from None
        if not isinstance(body, dict):
            raise RegistryUnavailable(f"the schema registry at {url} answered {type(body).__name__}, not an object")
        return body

    def _refusal(self, exc: urllib.error.HTTPError, url: str, what: str) -> Exception:
        try:
            detail = json.loads(exc.read() or b"{}")
        except (ValueError, OSError):
            detail = {}
        code = detail.get("error_code") if isinstance(detail, dict) else None
        message = detail.get("message", "") if isinstance(detail, dict) else ""
        if exc.code == 404 and code in _NOT_FOUND:
            return BadRecord(f"{what} is not in the schema registry at {self.settings.url} (404: {message})")
        if exc.code == 404:  # not the registry's own "not found": most likely a wrong URL, so never the record's fault
            return RegistryUnavailable(f"{url} answered 404 without the registry's error code 40403: is the "
                                       "registry URL right?")
        return RegistryUnavailable(f"the schema registry at {self.settings.url} answered {exc.code} "
                                   f"{message or exc.reason} for {what}")

    def _auth(self) -> dict[str, str]:
        if not self.settings.username_env:
            return {}
        user = os.environ.get(self.settings.username_env, "")
        password = os.environ.get(self.settings.password_env, "")
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _ssl_context(settings: RegistrySettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.ca_file or None)
    if settings.cert_file:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    return context


def split_frame(data: bytes, what: str = "value") -> tuple[int, bytes]:
    """(schema id, Avro body) of a Confluent-framed record part; BadRecord when it is not framed."""
    if len(data) < HEADER_BYTES:
        raise BadRecord(f"the {what} is {len(data)} byte(s), shorter than the 5-byte Confluent header "
                        "(magic byte 0x00 and a schema id)")
    if data[0] != MAGIC:
        raise BadRecord(f"the {what} is not in the Confluent wire format: its first byte is 0x{data[0]:02x}, not "
                        "the magic byte 0x00")
    return int.from_bytes(data[1:HEADER_BYTES], "big"), data[HEADER_BYTES:]


def decode(data: bytes, registry: SchemaRegistry, what: str = "value") -> Any:
    """The Avro datum a framed record part carries, read with the writer's schema from the registry."""
    schema_id, body = split_frame(data, what)
    schema = registry.schema(schema_id)
    stream = io.BytesIO(body)
    try:
        datum = schemaless_reader(stream, schema, None)
    except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on truncated or corrupt input
        raise BadRecord(f"the {what} is truncated or corrupt Avro for schema id {schema_id}: "
                        f"{type(exc).__name__}: {exc}") from None
    if stream.tell() != len(body):
        raise BadRecord(f"the {what} has {len(body) - stream.tell()} byte(s) after the Avro datum of schema id "
                        f"{schema_id} (corrupt, or written with another schema)")
    return datum


def encode(schema_id: int, schema: Any, datum: Any) -> bytes:
    """A framed record part (what Confluent's serializers write), e.g. for `ingress check` samples and tests."""
    stream = io.BytesIO()
    stream.write(bytes([MAGIC]) + schema_id.to_bytes(4, "big"))
    schemaless_writer(stream, schema, datum)
    return stream.getvalue()
