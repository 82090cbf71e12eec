"""Avro single-object encoding of every record Ostinato writes: `C3 01`, CRC-64-AVRO fingerprint, body.

Any reader with the schemas (shipped in `schemas/avro/`, published in `<prefix>.schemas`) can decode any
record without the SDK. Records written with an older schema decode into today's shape by Avro resolution once
the older schema is known to the registry (`add_writer_schema`).

Records are plain dicts. A union of several record types (a command's `body`, an event's `attributes`) holds
a `(full type name, dict)` tuple, both when encoding and when decoding, so the branch is never guessed; a
union of null and one record holds the dict or None.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
# Load order matters: a file may refer to named types defined in the files before it.
SCHEMA_FILES = (
    "common.avsc", "commands.avsc", "history.avsc", "tasks.avsc", "visibility.avsc", "replies.avsc", "state.avsc",
    "cluster.avsc",
)

_EMPTY64 = 0xC15D213AA4D7A795


def _rabin_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _rabin_table()


def crc64_avro(data: bytes) -> int:
    """The 64-bit Rabin fingerprint of the Avro specification ("CRC-64-AVRO")."""
    fp = _EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def fingerprint(canonical: str) -> bytes:
    """The 8 header bytes for a schema: its CRC-64-AVRO in little-endian order, as the spec lays them out."""
    return crc64_avro(canonical.encode()).to_bytes(8, "little")


def canonical_form(schema: Any, named: dict[str, Any], namespace: str = "", seen: set[str] | None = None) -> str:
    """Avro's Parsing Canonical Form, with named types defined at first use and referenced by name after.

    fastavro's own function cannot inline types that live in other files, and its `expand` mode repeats a
    definition at every use, which is not canonical: fingerprints would differ from Java's.
    """
    seen = set() if seen is None else seen

    def full(name: str, ns: str) -> str:
        return name if "." in name or not ns else f"{ns}.{name}"

    def walk(s: Any, ns: str) -> str:
        if isinstance(s, list):
            return "[" + ",".join(walk(b, ns) for b in s) + "]"
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return json.dumps(s)
            name = full(s, ns)
            if name in seen:
                return json.dumps(name)
            return walk(named[name], name.rpartition(".")[0])
        kind = s["type"]
        if kind in _PRIMITIVES and len(s) >= 1 and "name" not in s:
            return json.dumps(kind)
        if kind == "array":
            return '{"type":"array","items":' + walk(s["items"], ns) + "}"
        if kind == "map":
            return '{"type":"map","values":' + walk(s["values"], ns) + "}"
        name = full(s["name"], s.get("namespace", ns))
        if name in seen:
            return json.dumps(name)
        seen.add(name)
        inner_ns = name.rpartition(".")[0]
        head = '{"name":' + json.dumps(name) + ',"type":' + json.dumps(kind)
        if kind == "record":
            fields = ",".join(
                '{"name":' + json.dumps(f["name"]) + ',"type":' + walk(f["type"], inner_ns) + "}" for f in s["fields"]
            )
            return head + ',"fields":[' + fields + "]}"
        if kind == "enum":
            return head + ',"symbols":' + json.dumps(s["symbols"], separators=(",", ":")) + "}"
        if kind == "fixed":
            return head + ',"size":' + str(s["size"]) + "}"
        raise ValueError(f"unknown Avro type {kind!r}")

    return walk(schema, namespace)


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class DecodeError(ValueError):
    """Bytes that are not a record Ostinato can read: wrong magic, unknown schema or a corrupt body."""


Checker = Callable[[Any, str], None]


def union_tag_checker(schema: Any) -> Checker | None:
    """A check that every union of several record types in a datum is given as a `(type name, record)` tuple.

    fastavro guesses the branch of an untagged dict by its fields, and two commands with the same fields
    (`{"reason": ...}` fits three of them) would be written as whichever comes first: a silent misroute. The
    check visits only the paths that can hold such a union. Returns None when the schema has none.
    """
    defined: dict[str, Any] = {}
    plans: dict[str, Checker | None] = {}

    def named(name: str) -> Checker | None:
        return plans[name] if name in plans else plan(defined[name], name.rpartition(".")[0])

    def plan(s: Any, ns: str) -> Checker | None:
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return None
            return named(s if "." in s or not ns else f"{ns}.{s}")
        if isinstance(s, list):
            return _union_plan(s, ns)
        kind = s["type"]
        if kind in ("array", "map"):
            inner = plan(s["items" if kind == "array" else "values"], ns)
            if inner is None:
                return None
            if kind == "array":
                def each_item(v: Any, path: str) -> None:
                    for i, x in enumerate(v):
                        inner(x, f"{path}[{i}]")

                return each_item

            def each_value(v: Any, path: str) -> None:
                for k, x in v.items():
                    inner(x, f"{path}[{k!r}]")

            return each_value
        if kind != "record":
            return None
        full = s["name"] if "." in s["name"] else f"{s.get('namespace', ns)}.{s['name']}".lstrip(".")
        defined.setdefault(full, s)
        if full in plans:
            return plans[full]
        plans[full] = None  # a recursive reference (Failure.cause) holds no multi-record union of its own
        inner_ns = full.rpartition(".")[0]
        fields = [(f["name"], c) for f in s["fields"] if (c := plan(f["type"], inner_ns)) is not None]
        if not fields:
            return None

        def check_record(v: Any, path: str) -> None:
            if isinstance(v, dict):
                for name, check in fields:
                    if name in v:
                        check(v[name], f"{path}.{name}")

        plans[full] = check_record
        return check_record

    def _union_plan(branches: list[Any], ns: str) -> Checker | None:
        records = {}
        for b in branches:
            if isinstance(b, dict) and b.get("type") == "record":
                full = b["name"] if "." in b["name"] else f"{b.get('namespace', ns)}.{b['name']}".lstrip(".")
                defined.setdefault(full, b)
                records[full] = b
            elif isinstance(b, str) and b not in _PRIMITIVES:
                full = b if "." in b or not ns else f"{ns}.{b}"
                if full in defined and defined[full].get("type") == "record":
                    records[full] = defined[full]
        checks = {name: plan(rec, ns) for name, rec in records.items()}
        if len(records) < 2:
            only = next(iter(checks.values()), None)
            return None if only is None else lambda v, path: None if v is None else only(v, path)

        def check_union(v: Any, path: str) -> None:
            if v is None:
                return
            if not (isinstance(v, tuple) and len(v) == 2 and v[0] in records):
                raise ValueError(
                    f"{path} is a union of record types: give it as (type name, record) with one of "
                    f"{', '.join(sorted(records))}, not {type(v).__name__}"
                )
            check = checks[v[0]]
            if check is not None:
                check(v[1], f"{path}<{v[0].rpartition('.')[2]}>")

        return check_union

    _collect(schema, "", defined)
    return plan(schema, "")


def _collect(s: Any, ns: str, defined: dict[str, Any]) -> None:
    """Register every named type defined anywhere in a canonical schema, so later references resolve."""
    if isinstance(s, list):
        for b in s:
            _collect(b, ns, defined)
    elif isinstance(s, dict):
        if s.get("type") in ("record", "enum", "fixed"):
            full = s["name"] if "." in s["name"] else f"{s.get('namespace', ns)}.{s['name']}".lstrip(".")
            defined.setdefault(full, s)
            ns = full.rpartition(".")[0]
        for f in s.get("fields", []):
            _collect(f["type"], ns, defined)
        for key in ("items", "values"):
            if key in s:
                _collect(s[key], ns, defined)


@dataclass(frozen=True)
class SchemaInfo:
    name: str
    fingerprint: bytes
    canonical: str
    source: dict[str, Any]  # the schema as written, with docs and defaults (what `<prefix>.schemas` publishes)
    parsed: Any  # fastavro's parsed form, every named type inlined
    check_unions: Checker | None = None


class SchemaRegistry:
    """Current schemas by name, and every known writer schema by fingerprint."""

    def __init__(self, files: tuple[str, ...] = SCHEMA_FILES, load_released: bool = True) -> None:
        self._named: dict[str, Any] = {}
        self._sources: dict[str, dict[str, Any]] = {}
        for file in files:
            raw = json.loads((resources.files("ostinato.schemas") / "avro" / file).read_text())
            parse_schema(raw, named_schemas=self._named)  # registers every named type, checks references
            for item in raw if isinstance(raw, list) else [raw]:
                name = item["name"] if "." in item["name"] else f"{item.get('namespace', '')}.{item['name']}"
                self._sources[name.lstrip(".")] = item
        self._by_name: dict[str, SchemaInfo] = {}
        self._writers: dict[bytes, SchemaInfo] = {}
        for name, source in self._sources.items():
            if source["type"] != "record":
                continue
            info = self._info(name, source)
            self._by_name[name] = info
            self._writers[info.fingerprint] = info
        if load_released:
            from ostinato.schemas.release import released

            for fp, entry in released().items():
                if bytes.fromhex(fp) not in self._writers and entry["name"] in self._by_name:
                    self.add_writer_schema(json.loads(entry["canonical"]))

    def _info(self, name: str, source: dict[str, Any]) -> SchemaInfo:
        canonical = canonical_form(source, self._named, name.rpartition(".")[0])
        parsed = parse_schema(source, named_schemas=dict(self._named), expand=True, _force=True)
        checker = union_tag_checker(json.loads(canonical))
        return SchemaInfo(name, fingerprint(canonical), canonical, source, parsed, checker)

    @property
    def schemas(self) -> list[SchemaInfo]:
        return list(self._by_name.values())

    def schema(self, name: str) -> SchemaInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise ValueError(f"no Avro record type {name!r}; known: {', '.join(sorted(self._by_name))}") from None

    def add_writer_schema(self, source: dict[str, Any]) -> SchemaInfo:
        """Teach the registry a schema records were written with (an older version, from `<prefix>.schemas`)."""
        name = source["name"] if "." in source["name"] else f"{source.get('namespace', '')}.{source['name']}"
        self.schema(name)  # only versions of a type we can read into
        info = self._info(name, source)
        self._writers.setdefault(info.fingerprint, info)
        return info

    def knows_writer(self, fingerprint: bytes) -> bool:
        """Whether records carrying this schema fingerprint decode here."""
        return fingerprint in self._writers

    def encode(self, type_name: str, record: dict[str, Any]) -> bytes:
        """Encode `record` as `type_name`; a record that does not fit the schema raises ValueError.

        Writes are strict: an unknown field (a typo) or a missing field without a default is an error, not
        silently dropped or zeroed.
        """
        info = self.schema(type_name)
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(info.fingerprint)
        try:
            if info.check_unions is not None:
                info.check_unions(record, type_name.rpartition(".")[2])
            schemaless_writer(out, info.parsed, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ValueError(f"record does not match {type_name}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise DecodeError(f"not an Avro single-object record (starts {bytes(data[:4]).hex() or 'empty'})")
        writer = self._writers.get(bytes(data[2:HEADER_LEN]))
        if writer is None:
            raise DecodeError(
                f"unknown schema fingerprint {bytes(data[2:HEADER_LEN]).hex()}: written by a newer Ostinato, or a "
                "schema not loaded from the schemas topic"
            )
        reader = self._by_name[writer.name]
        body = io.BytesIO(data[HEADER_LEN:])
        try:
            record = schemaless_reader(body, writer.parsed, None, **_NAMED_UNIONS)
            if reader is not writer:
                # fastavro cannot name union branches while resolving against another schema (it fails when
                # one side inlines a type the other references), so resolve without names, then put the
                # names back from the writer-only read: the two reads have the same shape where it matters.
                body.seek(0)
                record = _restore_union_names(record, schemaless_reader(body, writer.parsed, reader.parsed))
        except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on corrupt input; callers need one
            raise DecodeError(f"corrupt {writer.name} record: {type(exc).__name__}: {exc}") from None
        if body.tell() != len(data) - HEADER_LEN:
            raise DecodeError(f"{len(data) - HEADER_LEN - body.tell()} trailing bytes after a {writer.name} record")
        if not isinstance(record, dict):
            raise DecodeError(f"{writer.name} decoded to {type(record).__name__}, not a record")
        return writer.name, record


_NAMED_UNIONS: dict[str, Any] = {"return_record_name": True, "return_record_name_override": True}


def _restore_union_names(named: Any, resolved: Any) -> Any:
    """`resolved` (read with the reader schema) with each union branch tagged by name as in `named`."""
    if isinstance(named, tuple):
        return (named[0], _restore_union_names(named[1], resolved))
    if isinstance(named, dict) and isinstance(resolved, dict):
        return {k: _restore_union_names(named[k], v) if k in named else v for k, v in resolved.items()}
    if isinstance(named, list) and isinstance(resolved, list):
        return [_restore_union_names(a, b) for a, b in zip(named, resolved, strict=True)]
    return resolved


@functools.cache
def registry() -> SchemaRegistry:
    """The process-wide registry of the shipped schemas (built on first use)."""
    return SchemaRegistry()


def encode(type_name: str, record: dict[str, Any]) -> bytes:
    """Encode `record` as the named Avro type, with the single-object header."""
    return registry().encode(type_name, record)


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """Decode single-object bytes into (type name, record); anything unreadable raises DecodeError."""
    return registry().decode(data)
