"""What a Kafka record means to Ostinato: the declarative mappings of `ingress.yaml`, and the pure translation of one
source record into one command or one dead letter (`connectors/ingress.py` does the Kafka part).

```yaml
mappings:
  - name: orders                       # consumer group <prefix>-ingress-orders; names the metrics and request ids
    topic: shop.orders                 # the source topic
    action: start                      # start | signal | signal-with-start | update | update-with-start
    workflow_id: "order-{value.id}"    # templates: {key} {value} {value.a.b} {headers.h} {topic} {partition} {offset}
    workflow_type: OrderWorkflow       # start and signal-with-start
    task_queue: orders                 # start and signal-with-start
    signal: "{value.kind}"             # signal and signal-with-start
    update: "{value.kind}"             # update and update-with-start: the update's name (its id is the request id)
    input: value                       # value (the default) | value.<path> | none: the one argument passed
    format: json                       # json (the default) | avro: single-object encoding with `schema`, or
    schema: order.avsc                 #   Confluent's wire format with `registry` (the writer's schema by id)
    registry: http://127.0.0.1:8081    # or {url, username_env, password_env, ca_file, ...}; or the file's top level
    key_format: string                 # string (the default) | avro: the key in Confluent's wire format too
    namespace: default
    dead_letter_topic: shop.orders.dlq # records that do not map (default: <topic>.dlq)
    id_reuse_policy: ALLOW_DUPLICATE   # start: Ostinato's/Temporal's policies; an id that is taken is not started
    id_conflict_policy: FAIL
```

Each record becomes exactly one command whose request id is derived from where the record is
(`ingress/<mapping>/<topic>/<partition>/<offset>`), so the engine recognises a command it has seen; the ingress
produces it in one transaction with the source offsets, so none is lost or produced twice. A record that cannot
be mapped (not JSON, a missing field, an output over the record limit) becomes a dead letter with the reason.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import io
import json
import string
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader

from ostinato.connectors import schema_registry
from ostinato.connectors.outcomes import OutcomesError, OutcomeSpec
from ostinato.connectors.schema_registry import RegistryConfigError, RegistrySettings, SchemaRegistry
from ostinato.schemas import codec, partition_for, wire
from ostinato.schemas.keys import workflow_key
from ostinato.schemas.topics import MAX_RECORD_BYTES

ACTIONS = ("start", "signal", "signal-with-start", "update", "update-with-start")
FORMATS = ("json", "avro")
KEY_FORMATS = ("string", "avro")
JSON_ENCODING = b"json/plain"  # the SDK's JSON payload converter: inputs arrive as the workflow's arguments
AVRO_MAGIC = b"\xc3\x01"
_POLICIES = {
    "id_reuse_policy": ("UNSPECIFIED", "ALLOW_DUPLICATE", "ALLOW_DUPLICATE_FAILED_ONLY", "REJECT_DUPLICATE",
                        "TERMINATE_IF_RUNNING"),
    "id_conflict_policy": ("UNSPECIFIED", "FAIL", "USE_EXISTING", "TERMINATE_EXISTING"),
}
_KEYS = {"name", "topic", "action", "workflow_id", "workflow_type", "task_queue", "signal", "update", "input",
         "format",
         "schema", "registry", "key_format", "namespace", "dead_letter_topic", *_POLICIES}
_NOT_STRINGS = ("schema", "registry")


class MappingError(ValueError):
    """The ingress configuration is wrong (raised at start, naming the mapping and the setting)."""


class Unmappable(ValueError):
    """This record cannot become a command; the message is the dead letter's reason."""


@dataclass(frozen=True)
class Record:
    """A source record as the translation sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class IngressMapping:
    name: str
    topic: str
    action: str
    workflow_id: str
    workflow_type: str = ""
    task_queue: str = ""
    signal: str = ""
    update: str = ""
    input: str = "value"
    format: str = "json"
    namespace: str = "default"
    dead_letter_topic: str = ""
    id_reuse_policy: str = "UNSPECIFIED"
    id_conflict_policy: str = "UNSPECIFIED"
    key_format: str = "string"
    avro_schema: Any = field(default=None, compare=False, repr=False)
    avro_fingerprint: bytes = b""
    registry: SchemaRegistry | None = field(default=None, compare=False, repr=False)

    @property
    def confluent_value(self) -> bool:
        """Values in Confluent's wire format: Avro without a schema of its own, read through the registry."""
        return self.format == "avro" and self.avro_schema is None

    @property
    def group(self) -> str:
        return f"ingress-{self.name}"

    @property
    def dead_letters(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.dlq"


@dataclass(frozen=True)
class Command:
    """A command to produce: to `<prefix>.commands`, partition `partition`."""

    key: bytes
    partition: int
    value: bytes
    request_id: str
    namespace: str = "default"


@dataclass(frozen=True)
class IngressConfig:
    """An ingress file: mappings (records in) and outcomes streams (closed runs out)."""

    mappings: list[IngressMapping]
    outcomes: list[OutcomeSpec]


def load(path: Path) -> IngressConfig:
    """An ingress file; MappingError names what is wrong."""
    import yaml  # the one user-written YAML file of the product

    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise MappingError(f"{path}: {exc}") from None
    return parse(document, base=Path(path).parent, source=str(path))


def parse(document: Any, base: Path = Path(), source: str = "the ingress config") -> IngressConfig:
    if not isinstance(document, dict) or not (document.get("mappings") or document.get("outcomes")):
        raise MappingError(f"{source}: expected a `mappings:` list, an `outcomes:` list, or both")
    unknown = sorted(set(document) - {"mappings", "outcomes", "registry"})
    if unknown:
        raise MappingError(f"{source}: unknown section(s) {', '.join(unknown)} (known: mappings, outcomes, registry)")
    for section in ("mappings", "outcomes"):
        if not isinstance(document.get(section, []), list):
            raise MappingError(f"{source}: `{section}:` must be a list")
    registries = _Registries(document.get("registry"), base, source)
    mappings = [_mapping(entry, i, base, source, registries)
                for i, entry in enumerate(document.get("mappings") or [])]
    try:
        outcomes = [OutcomeSpec.parse(entry, f"{source}, outcomes {i + 1}")
                    for i, entry in enumerate(document.get("outcomes") or [])]
    except OutcomesError as exc:
        raise MappingError(str(exc)) from None
    for kind, names in (("mappings", [m.name for m in mappings]), ("outcomes streams", [o.name for o in outcomes])):
        for name in names:
            if names.count(name) > 1:
                raise MappingError(f"{source}: two {kind} are named {name!r}; names key consumer groups")
    return IngressConfig(mappings, outcomes)


class _Registries:
    """One client per distinct `registry:` of a file (the top level's by default), so mappings share its cache."""

    def __init__(self, top: Any, base: Path, source: str) -> None:
        self.base = base
        self.clients: dict[RegistrySettings, SchemaRegistry] = {}
        self.top = None if top is None else self.settings(top, source)

    def settings(self, entry: Any, where: str) -> RegistrySettings:
        try:
            return RegistrySettings.parse(entry, self.base, where)
        except RegistryConfigError as exc:
            raise MappingError(str(exc)) from None

    def client(self, entry: Any, where: str) -> SchemaRegistry | None:
        settings = self.top if entry is None else self.settings(entry, where)
        if settings is None:
            return None
        return self.clients.setdefault(settings, SchemaRegistry(settings))


def _mapping(entry: Any, index: int, base: Path, source: str, registries: _Registries) -> IngressMapping:
    where = f"{source}, mapping {index + 1}"
    if not isinstance(entry, dict):
        raise MappingError(f"{where}: expected a mapping of settings, not {type(entry).__name__}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise MappingError(f"{where}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    values = {k: v for k, v in entry.items() if k not in _NOT_STRINGS}
    for k, v in values.items():
        if not isinstance(v, str):
            raise MappingError(f"{where}: {k} must be a string, not {type(v).__name__}")
    for required in ("name", "topic", "action", "workflow_id"):
        if not values.get(required):
            raise MappingError(f"{where}: `{required}` is required")
    where = f"{source}, mapping {values['name']!r}"
    if not values["name"].replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise MappingError(f"{where}: a name is letters, digits, '.', '_' and '-' (it names a consumer group)")
    action = values["action"]
    if action not in ACTIONS:
        raise MappingError(f"{where}: action must be one of {', '.join(ACTIONS)}, not {action!r}")
    needs = {"start": ("workflow_type", "task_queue"), "signal": ("signal",),
             "signal-with-start": ("workflow_type", "task_queue", "signal"), "update": ("update",),
             "update-with-start": ("workflow_type", "task_queue", "update")}[action]
    for required in needs:
        if not values.get(required):
            raise MappingError(f"{where}: action {action} needs `{required}`")
    fmt = values.get("format", "json")
    if fmt not in FORMATS:
        raise MappingError(f"{where}: format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    for name, allowed in _POLICIES.items():
        if name in values and values[name] not in allowed:
            raise MappingError(f"{where}: {name} must be one of {', '.join(allowed)}")
    choice = values.get("input", "value")
    if choice not in ("value", "none") and not choice.startswith("value."):
        raise MappingError(f"{where}: input is value, value.<path> or none, not {choice!r}")
    if action == "update-with-start" and values.get("id_conflict_policy", "USE_EXISTING") not in (
            "USE_EXISTING", "FAIL"):
        raise MappingError(f"{where}: update-with-start takes id_conflict_policy USE_EXISTING (the default) or FAIL")
    for name in ("workflow_id", "workflow_type", "task_queue", "signal", "update", "namespace"):
        if name in values:
            _check_template(values[name], f"{where}: {name}")
    key_format = values.get("key_format", "string")
    if key_format not in KEY_FORMATS:
        raise MappingError(f"{where}: key_format must be one of {', '.join(KEY_FORMATS)}, not {key_format!r}")
    registry = registries.client(entry.get("registry"), where)
    schema, fp = None, b""
    if fmt == "avro" and "schema" in entry:
        if "registry" in entry:
            raise MappingError(f"{where}: format avro takes `schema` (single-object encoding) or `registry` "
                               "(Confluent's wire format), not both")
        schema, fp = _avro_schema(entry.get("schema"), base, where)
    elif fmt == "avro" and registry is None:
        raise MappingError(f"{where}: format avro needs `schema`: the writer's schema (a .avsc file or inline) "
                           "for single-object encoding, or `registry`: a schema registry URL for Confluent's wire "
                           "format")
    if key_format == "avro" and registry is None:
        raise MappingError(f"{where}: key_format avro needs a `registry` (the mapping's or the file's)")
    return IngressMapping(**values, avro_schema=schema, avro_fingerprint=fp, registry=registry)


def _avro_schema(named: Any, base: Path, where: str) -> tuple[Any, bytes]:
    if not isinstance(named, str | dict) or not named:
        raise MappingError(f"{where}: format avro needs `schema`: the writer's schema (a .avsc file or inline)")
    try:
        raw = json.loads((base / named).read_text()) if isinstance(named, str) else named
        parsed = parse_schema(raw)
        fp = codec.fingerprint(codec.canonical_form(raw, {}))  # little-endian CRC-64-AVRO, as Java writes it
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise MappingError(f"{where}: schema: {exc}") from None
    return parsed, fp


def _check_template(template: str, where: str) -> None:
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise MappingError(f"{where}: bad template {template!r}: {exc}") from None
    for name in fields:
        root = name.split(".", 1)[0]
        if root not in ("key", "value", "headers", "topic", "partition", "offset"):
            raise MappingError(f"{where}: unknown template field {{{name}}} (use key, value, value.<path>, "
                               "headers.<name>, topic, partition, offset)")


# -- translation (pure) -------------------------------------------------------------------------------------------


def request_id(mapping: IngressMapping, record: Record) -> str:
    """Where the record is, as the command's idempotency key: the same record always makes the same command."""
    return f"ingress/{mapping.name}/{record.topic}/{record.partition}/{record.offset}"


def decode_value(mapping: IngressMapping, value: bytes | None) -> Any:
    if value is None:
        raise Unmappable("the record has no value (a tombstone)")
    if mapping.format == "json":
        try:
            return json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise Unmappable(f"the value is not JSON: {exc}") from None
        except RecursionError:  # `[[[[...` a hundred thousand deep
            raise Unmappable("the value is JSON nested too deeply to read") from None
    if mapping.confluent_value:
        assert mapping.registry is not None  # parse() gives every Confluent-format mapping a registry
        try:
            return _jsonable(schema_registry.decode(value, mapping.registry))
        except schema_registry.BadRecord as exc:
            raise Unmappable(str(exc)) from None
    if value[:2] != AVRO_MAGIC or len(value) < 10:
        raise Unmappable("the value is not Avro single-object encoded (no C3 01 header)")
    if value[2:10] != mapping.avro_fingerprint:
        raise Unmappable(f"the value was written with schema fingerprint {value[2:10].hex()}, not the mapping's "
                         f"{mapping.avro_fingerprint.hex()}")
    body = io.BytesIO(value[10:])
    try:
        decoded = schemaless_reader(body, mapping.avro_schema, None)
    except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on corrupt input
        raise Unmappable(f"the value is corrupt Avro: {type(exc).__name__}: {exc}") from None
    if body.tell() != len(value) - 10:
        raise Unmappable("trailing bytes after the Avro value")
    return _jsonable(decoded)


def _jsonable(value: Any) -> Any:
    """Avro's richer values as JSON: bytes as base64, times as ISO 8601, decimals as strings."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value


def _lookup(context: Mapping[str, Any], path: str) -> Any:
    parts = path.split(".")
    current: Any = context
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            raise Unmappable(f"the record has no {here}")
        if current is None:
            raise Unmappable(f"{here} is null")
    return current


def render(template: str, context: Mapping[str, Any]) -> str:
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            value = _lookup(context, name)
            out.append(value if isinstance(value, str) else json.dumps(value, separators=(",", ":")))
    return "".join(out)


def context_of(mapping: IngressMapping, record: Record) -> dict[str, Any]:
    headers: dict[str, str] = {}
    for name, raw in record.headers:
        try:
            headers[name] = raw.decode() if raw is not None else ""
        except UnicodeDecodeError:
            continue  # a binary header cannot be used in a template; the others still can
    key = _key(mapping, record.key)
    context: dict[str, Any] = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                               "headers": headers, "value": decode_value(mapping, record.value)}
    if key is not None:
        context["key"] = key
    return context


def _key(mapping: IngressMapping, raw: bytes | None) -> Any:
    """The key as templates see it: text, or (key_format avro) the decoded datum; None when there is none."""
    if raw is None:
        return None
    if mapping.key_format == "avro":
        assert mapping.registry is not None
        try:
            return _jsonable(schema_registry.decode(raw, mapping.registry, "key"))
        except schema_registry.BadRecord as exc:
            raise Unmappable(str(exc)) from None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None  # a binary key cannot be used in a template; the rest of the record still can


def prefetch_schemas(mapping: IngressMapping, parts: list[tuple[bytes | None, bytes | None]]) -> None:
    """Fetch the writer schemas that these (key, value) pairs name, so the translation finds them cached; raises
    RegistryUnavailable, and leaves what is wrong with a record (BadRecord) for the translation to report."""
    if mapping.registry is None:
        return
    ids: set[int] = set()
    for key, value in parts:
        for part, framed in ((key, mapping.key_format == "avro"), (value, mapping.confluent_value)):
            if framed and part is not None and len(part) >= schema_registry.HEADER_BYTES and \
                    part[0] == schema_registry.MAGIC:
                ids.add(schema_registry.split_frame(part)[0])
    for schema_id in sorted(ids):
        with contextlib.suppress(schema_registry.BadRecord):
            mapping.registry.schema(schema_id)


def _payloads(mapping: IngressMapping, context: Mapping[str, Any]) -> list[dict[str, Any]]:
    if mapping.input == "none":
        return []
    value = context["value"] if mapping.input == "value" else _lookup(context, mapping.input)
    return [{"metadata": {"encoding": JSON_ENCODING}, "data": json.dumps(value, separators=(",", ":")).encode()}]


def _non_empty(mapping: IngressMapping, name: str, context: Mapping[str, Any]) -> str:
    value = render(getattr(mapping, name), context)
    if not value:
        raise Unmappable(f"{name} {getattr(mapping, name)!r} renders empty")
    return value


def translate(mapping: IngressMapping, record: Record, shards: int, now_ms: int) -> Command:
    """The one command `record` becomes; raises Unmappable (the dead letter's reason) when it cannot."""
    context = context_of(mapping, record)
    namespace = _non_empty(mapping, "namespace", context)
    workflow_id = _non_empty(mapping, "workflow_id", context)
    args = _payloads(mapping, context)
    rid = request_id(mapping, record)
    # An update's id is the record's request id: a record read again after a crash joins the same update.
    update = {"update_id": rid, "name": _non_empty(mapping, "update", context), "input": args, "header": {},
              "first_execution_run_id": ""} if mapping.action.startswith("update") else {}
    if mapping.action == "signal":
        body: tuple[str, dict[str, Any]] = ("SignalWorkflowExecution", {
            "signal_name": _non_empty(mapping, "signal", context), "input": args, "header": {}, "external": None})
    elif mapping.action == "update":
        body = ("UpdateWorkflowExecution", update)
    else:
        start = {
            "workflow_type": _non_empty(mapping, "workflow_type", context),
            "task_queue": _non_empty(mapping, "task_queue", context),
            "input": args if mapping.action == "start" else [], "execution_timeout_ms": None,
            "run_timeout_ms": None, "task_timeout_ms": 0, "id_reuse_policy": mapping.id_reuse_policy,
            "id_conflict_policy": mapping.id_conflict_policy, "retry_policy": None, "memo": {},
            "search_attributes": {}, "header": {}, "parent": None}
        if mapping.action == "start":
            body = ("StartWorkflowExecution", start)
        elif mapping.action == "update-with-start":
            body = ("UpdateWithStartWorkflowExecution", {"start": {
                **start, "id_conflict_policy": "FAIL" if mapping.id_conflict_policy == "FAIL" else "USE_EXISTING"},
                "update": update})
        else:
            body = ("SignalWithStartWorkflowExecution", {
                "start": start, "signal_name": _non_empty(mapping, "signal", context), "signal_input": args,
                "signal_header": {}})
    command = wire.command(namespace, workflow_id, body, request_id=rid, identity=f"ingress/{mapping.name}",
                           time_ms=now_ms)
    try:
        value = codec.encode(wire.COMMAND, command)
    except ValueError as exc:
        raise Unmappable(f"the record makes no valid {body[0]}: {exc}") from None
    if len(value) > MAX_RECORD_BYTES:
        raise Unmappable(f"the {body[0]} command would be {len(value):,} bytes, above the "
                         f"{MAX_RECORD_BYTES:,}-byte record limit")
    key = workflow_key(namespace, workflow_id)
    return Command(key.encode(), partition_for(key, shards), value, rid, namespace)


def dead_letter_headers(mapping: IngressMapping, record: Record, reason: str) -> list[tuple[str, bytes]]:
    """The source record's headers, and why and where from."""
    return [*record.headers, ("ostinato.error", reason.encode()), ("ostinato.mapping", mapping.name.encode()),
            ("ostinato.source", f"{record.topic}/{record.partition}/{record.offset}".encode())]
