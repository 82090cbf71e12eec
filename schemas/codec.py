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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from ostinato.schemas.fast_reader import Reader, compile_reader
from ostinato.schemas.fast_writer import Encoded, Writer, compile_writer
from ostinato.schemas.native_writer import available as native_available
from ostinato.schemas.native_writer import compile_native_reader, compile_native_writer

_F = TypeVar("_F")  # a compiled writer or reader

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
# Load order matters: a file may refer to named types defined in the files before it.
SCHEMA_FILES = (
    "common.avsc", "schedules.avsc", "commands.avsc", "history.avsc", "tasks.avsc", "visibility.avsc", "replies.avsc",
    "state.avsc", "cluster.avsc",
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


Check = Callable[[Any], None]
_MISSING = object()
_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


class _Refused(Exception):
    """A datum the codec must not write. `segments` collect its path from the inside out as the checks unwind,
    so a path is only ever built for a datum that is refused."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.segments: list[str] = []

    def message(self, root: str) -> str:
        return f"{root}{''.join(reversed(self.segments))} {self.problem}"


def _int_problem(v: Any, kind: str) -> str | None:
    """Why `v` cannot be written as an Avro `kind` ("int" or "long"), or None. fastavro writes a bool or a float
    into an int field, and an `int` field takes any value a long can hold, which Java readers refuse."""
    low, high = _RANGES[kind]
    if isinstance(v, bool) or not isinstance(v, int):
        return f"is {v!r}, a {type(v).__name__} where an Avro {kind} is expected"
    if v < low:
        return f"is {v}, too small for an Avro {kind} (at least {low})"
    if v > high:
        return f"is {v}, too large for an Avro {kind} (at most {high})"
    return None


def _int_check(kind: str) -> Check:
    low, high = _RANGES[kind]

    def check(v: Any) -> None:
        if v.__class__ is not int or not low <= v <= high:
            problem = _int_problem(v, kind)
            if problem is not None:
                raise _Refused(problem)

    return check


def datum_checker(schema: Any) -> Check | None:
    """A check of what fastavro would write wrongly or Java readers refuse, run before encoding: every union of
    several record types must be given as a `(type name, record)` tuple, and every int and long must be an
    integer (not a bool or a float) within its type's range. Raises `_Refused` with the path of the first
    offending value. Returns None when the schema has nothing to check.

    fastavro guesses the branch of an untagged dict by its fields, and two commands with the same fields
    (`{"reason": ...}` fits three of them) would be written as whichever comes first: a silent misroute. It also
    writes 2**40 into an `int` field, and a bool or a float (truncated) into int and long fields. The check
    visits only the paths that can hold such a value, and builds a path only for a refused datum.
    """
    defined: dict[str, Any] = {}
    plans: dict[str, Check | None] = {}

    def named(name: str) -> Check | None:
        if name in plans:
            if plans[name] is None and name in building:  # a recursive reference (Failure.cause): bind late
                return lambda v: (plans[name] or _no_check)(v)
            return plans[name]
        return plan(defined[name], name.rpartition(".")[0])

    building: set[str] = set()

    def plan(s: Any, ns: str) -> Check | None:
        if isinstance(s, str):
            if s in _RANGES:
                return _int_check(s)
            if s in _PRIMITIVES:
                return None
            return named(s if "." in s or not ns else f"{ns}.{s}")
        if isinstance(s, list):
            return _union_plan(s, ns)
        kind = s["type"]
        if kind in _RANGES:
            return _int_check(kind)
        if kind in ("array", "map"):
            return _collection_plan(kind, plan(s["items" if kind == "array" else "values"], ns))
        if kind != "record":
            return None
        full = s["name"] if "." in s["name"] else f"{s.get('namespace', ns)}.{s['name']}".lstrip(".")
        defined.setdefault(full, s)
        if full in plans:
            return named(full)
        plans[full] = None
        building.add(full)
        inner_ns = full.rpartition(".")[0]
        ints: list[tuple[str, int, int, bool]] = []  # (field, low, high, nullable): checked inline, the hot path
        nested: list[tuple[str, Check]] = []
        for f in s["fields"]:
            int_type, nullable = _int_type(f["type"])
            if int_type is not None:
                ints.append((f["name"], *_RANGES[int_type], nullable))
            elif (c := plan(f["type"], inner_ns)) is not None:
                nested.append((f["name"], c))
        building.discard(full)
        if not ints and not nested:
            return None
        int_fields, nested_fields = tuple(ints), tuple(nested)

        def check_record(v: Any) -> None:
            if not isinstance(v, dict):
                return  # fastavro says what is wrong with it
            for name, low, high, nullable in int_fields:
                x = v.get(name, _MISSING)
                if (x.__class__ is int and low <= x <= high) or x is _MISSING or (x is None and nullable):
                    continue
                problem = _int_problem(x, "int" if high == _RANGES["int"][1] else "long")
                if problem is not None:
                    error = _Refused(problem)
                    error.segments.append("." + name)
                    raise error
            for name, check in nested_fields:
                if name in v:
                    try:
                        check(v[name])
                    except _Refused as error:
                        error.segments.append("." + name)
                        raise

        plans[full] = check_record
        return check_record

    def _collection_plan(kind: str, inner: Check | None) -> Check | None:
        if inner is None:
            return None
        if kind == "array":
            def each_item(v: Any) -> None:
                if isinstance(v, list | tuple):
                    for i, x in enumerate(v):
                        try:
                            inner(x)
                        except _Refused as error:
                            error.segments.append(f"[{i}]")
                            raise

            return each_item

        def each_value(v: Any) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    try:
                        inner(x)
                    except _Refused as error:
                        error.segments.append(f"[{k!r}]")
                        raise

        return each_value

    def _union_plan(branches: list[Any], ns: str) -> Check | None:
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
        if len(records) < 2:
            others = [b for b in branches if b != "null"]
            only = plan(others[0], ns) if len(others) == 1 else None
            return None if only is None else lambda v: None if v is None else only(v)
        checks = {name: plan(rec, ns) for name, rec in records.items()}

        def check_union(v: Any) -> None:
            if v is None:
                return
            if not (isinstance(v, tuple) and len(v) == 2 and v[0] in records):
                raise _Refused(f"is a union of record types: give it as (type name, record) with one of "
                               f"{', '.join(sorted(records))}, not {type(v).__name__}")
            check = checks[v[0]]
            if check is not None:
                try:
                    check(v[1])
                except _Refused as error:
                    error.segments.append(f"<{v[0].rpartition('.')[2]}>")
                    raise

        return check_union

    _collect(schema, "", defined)
    return plan(schema, "")


def _no_check(v: Any) -> None:
    return None


def _int_type(t: Any) -> tuple[str | None, bool]:
    """("int" or "long", whether null is allowed) for a field of type int, long or a union of null and one of
    them; (None, False) for any other type."""
    if isinstance(t, dict):
        t = t["type"]
    if isinstance(t, str):
        return (t, False) if t in _RANGES else (None, False)
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        other = t[1] if t[0] == "null" else t[0]
        other = other["type"] if isinstance(other, dict) else other
        return (other, True) if isinstance(other, str) and other in _RANGES else (None, False)
    return None, False


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
    check: Check | None = None  # `datum_checker`: what fastavro would write wrongly


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
        # Compiled writers on first use (start-up pays for none of them), each with its record's header (magic and
        # fingerprint), so a write looks up one entry.
        self._compiled: dict[str, tuple[Writer | None, bytes]] = {}
        self._readers: dict[bytes, Reader | None] = {}  # by fingerprint: only for the current schemas
        self.crosscheck = False  # `settings_from_environment`: tests write every record both ways
        self.native = native_available()  # the compiled writers run on the C engine (`native_writer.py`)
        self.fast_paths = True  # False: fastavro alone, as before the compiled code (`bench/processor.py --codec`)
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
        checker = datum_checker(json.loads(canonical))
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

    def prepare(self, type_names: Iterable[str]) -> None:
        """Generate the writer and reader of each type now rather than at its first record. Generating them
        takes tens of milliseconds a type; a processor that did it on the first batch after a start held that
        batch's workflows (and its timers) for most of a second."""
        for type_name in type_names:
            info = self.schema(type_name)
            if type_name not in self._compiled:
                self._compiled[type_name] = (self._compile_writer(info.parsed), MAGIC + info.fingerprint)
            if info.fingerprint not in self._readers:
                self._readers[info.fingerprint] = self._compile_reader(info.parsed)

    def use_native(self, on: bool) -> None:
        """Run the compiled writers and readers on the C engine (where it was built) or as generated Python."""
        native = on and native_available()
        if native != self.native:
            self.native = native
            self._compiled.clear()  # compiled for the other engine: compiled again at their next use
            self._readers.clear()

    def _compile_writer(self, parsed: dict[str, Any]) -> Writer | None:
        return self._compile(compile_native_writer, compile_writer, parsed)

    def _compile_reader(self, parsed: dict[str, Any]) -> Reader | None:
        return self._compile(compile_native_reader, compile_reader, parsed)

    def _compile(self, native: Callable[[Any, Any], _F | None], generated: Callable[[Any, Any], _F | None],
                 parsed: dict[str, Any]) -> _F | None:
        """The C engine's function where it was built (`native_writer`), else the generated Python one."""
        compiled = native(parsed, self._named) if self.native else None
        return compiled if compiled is not None else generated(parsed, self._named)

    def encode(self, type_name: str, record: dict[str, Any]) -> bytes:
        """Encode `record` as `type_name`; a record that does not fit the schema raises ValueError.

        Writes are strict: an unknown field (a typo) or a missing field without a default is an error, not
        silently dropped or zeroed; so is an untagged union of records, and an int or long that is out of its
        type's range, a bool or a float (the message names the field's path).
        """
        try:
            writer, header = self._compiled[type_name]
        except KeyError:
            info = self.schema(type_name)
            writer, header = self._compiled[type_name] = (self._compile_writer(info.parsed),
                                                          MAGIC + info.fingerprint)
        if writer is not None and self.fast_paths:
            out_fast = bytearray(header)
            try:
                writer(record, out_fast)
            except Exception:  # noqa: BLE001 - not vouched for: the careful path below decides and explains
                pass
            else:
                if self.crosscheck:
                    self._crosscheck_equal(type_name, self.schema(type_name), record, out_fast)
                return bytes(out_fast)
        return self._encode_carefully(type_name, self.schema(type_name), record)

    def _crosscheck_equal(self, type_name: str, info: SchemaInfo, record: dict[str, Any], fast: bytearray) -> None:
        """Tests run every encode both ways: the compiled writer must write what fastavro writes, and only
        records the careful path accepts."""
        careful = self._encode_carefully(type_name, info, record)
        if careful != fast:
            raise AssertionError(f"compiled Avro writer of {type_name} wrote {bytes(fast).hex()}, fastavro "
                                 f"{careful.hex()}, for {record!r}")

    def _encode_carefully(self, type_name: str, info: SchemaInfo, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(info.fingerprint)
        try:
            if info.check is not None:
                info.check(record)
            schemaless_writer(out, info.parsed, record, strict_allow_default=True)
        except _Refused as refused:
            raise ValueError(f"record does not match {type_name}: {refused.message(type_name.rpartition('.')[2])}"
                             ) from None
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
        if reader is writer and self.fast_paths:
            fingerprint = writer.fingerprint
            try:
                fast = self._readers[fingerprint]
            except KeyError:
                fast = self._readers[fingerprint] = self._compile_reader(writer.parsed)
            if fast is not None:
                try:
                    record, end = fast(data if data.__class__ is bytes else bytes(data), HEADER_LEN)
                except Exception:  # noqa: BLE001 - not vouched for: fastavro below reads it or says why not
                    pass
                else:
                    if end == len(data):
                        if self.crosscheck:
                            self._crosscheck_read(writer, data, record)
                        return writer.name, record
        return writer.name, self._decode_carefully(writer, reader, data)

    def spliceable(self, type_name: str, record: dict[str, Any], data: bytes) -> dict[str, Any]:
        """`record`, which `data` (single-object bytes) holds, as an `Encoded` record a later write copies from
        `data` rather than writing again (a history event in a workflow task). Only when `data` was written with
        the current schema of `type_name`: an older version's body is not this schema's encoding."""
        info = self._by_name.get(type_name)
        if info is None or not self.fast_paths or data[2:HEADER_LEN] != info.fingerprint:
            return record
        return Encoded(record, type_name, data[HEADER_LEN:])

    def _crosscheck_read(self, writer: SchemaInfo, data: bytes, record: dict[str, Any]) -> None:
        careful = self._decode_carefully(writer, writer, data)
        if repr(careful) != repr(record):  # repr: the same values, types and field order (and NaN equal to NaN)
            raise AssertionError(f"compiled Avro reader of {writer.name} read {record!r}, fastavro {careful!r}")

    def _decode_carefully(self, writer: SchemaInfo, reader: SchemaInfo, data: bytes) -> dict[str, Any]:
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
        return record


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


def settings_from_environment(environ: Mapping[str, str]) -> None:
    """The codec's switches, read by the process's entry points (the deterministic core reads no environment).
    OSTINATO_CODEC_CROSSCHECK=1 (the test suite sets it, and the servers and workers it starts inherit it): every
    record is written by the compiled writer and by fastavro, and a difference raises. OSTINATO_NATIVE_CODEC=0: the
    compiled writers are the generated Python ones even where the C engine was built (to compare the two)."""
    reg = registry()
    reg.crosscheck = environ.get("OSTINATO_CODEC_CROSSCHECK", "") not in ("", "0")
    reg.use_native(environ.get("OSTINATO_NATIVE_CODEC", "1") not in ("", "0"))


def encode(type_name: str, record: dict[str, Any]) -> bytes:
    """Encode `record` as the named Avro type, with the single-object header."""
    return registry().encode(type_name, record)


def spliceable(type_name: str, record: dict[str, Any], data: bytes) -> dict[str, Any]:
    """`record` carrying its encoding `data`, for writes that embed it (`SchemaRegistry.spliceable`)."""
    return registry().spliceable(type_name, record, data)


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """Decode single-object bytes into (type name, record); anything unreadable raises DecodeError."""
    return registry().decode(data)
