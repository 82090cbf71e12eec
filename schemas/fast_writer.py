"""Avro binary writers compiled from the schemas into Python functions, for the processor's hot path.

fastavro's writer walks the schema for every datum: each field costs a dispatch on its type name, and each
union a search among its branches. A run's state record (about 50 fields) took 50 µs to write that way and
the Avro work was 40% of the processor's time per command (issue 15, `bench/processor.py --profile`). A writer
compiled once per record type does the same work in straight-line code, three to four times faster.

The compiled writer is a fast path, never the judge: any datum it is not sure of (a type it does not expect,
a missing field, an unknown key, an int out of range, a union branch it cannot name) raises `Unsure`, and
the codec then writes the datum the careful way (the datum check, then fastavro), which either writes it or
says exactly what is wrong. So a record written here is one fastavro writes too, byte for byte; the tests
run every encode both ways (`OSTINATO_CODEC_CROSSCHECK`) to keep it so.

Only what Ostinato's schemas use is compiled: records, enums, arrays, maps, primitives (double and float
included), unions of null and one type, and unions of records given as `(type name, record)` tuples. A schema
with anything else (fixed, unions of several primitives) gets no compiled writer (`compile_writer` returns
None) and always takes the careful way.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

Writer = Callable[[Any, bytearray], None]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_SMALL = 1 << 14  # zigzag values below this are looked up, not computed: ids, counts, lengths, attempts
_TABLE: list[bytes] = []


class Unsure(Exception):
    """The compiled writer does not vouch for this datum; the careful path decides."""


class NotCompiled(Exception):
    """The schema has a construct the compiled writers leave to fastavro."""


class Encoded(dict):  # type: ignore[type-arg]
    """A record that was already written once, carrying its Avro body: a compiled writer meeting it where a record of
    its type goes copies the body instead of writing the record again. A workflow task carries the history events
    the same batch wrote to the history topic (or read back from the store): each was written field by field twice
    (issue 15: 3% of the shard path's instructions a command, `bench/shard.py` under callgrind).

    Read-only by contract: the body is what the record held when it was written, so a change would be written stale.
    History is append-only and its events are never changed once written; the test suite's crosscheck
    (`OSTINATO_CODEC_CROSSCHECK`) writes every record the careful way too, from the dict, and fails on a difference.
    fastavro, and everything else, sees a plain dict."""

    __slots__ = ("body", "type_name")

    def __init__(self, record: dict[str, Any], type_name: str, body: bytes) -> None:
        super().__init__(record)
        self.type_name = type_name
        self.body = body


def _varint(z: int) -> bytes:
    """The varint of a non-negative (zigzagged) value. Unrolled for up to 7 bytes: a millisecond timestamp
    takes 6, and timestamps are most of the values past the table."""
    if z < 1 << 21:
        return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14)) if z >= 1 << 14 else \
            bytes((z & 0x7F | 0x80, z >> 7)) if z > 0x7F else bytes((z,))
    if z < 1 << 49:
        if z < 1 << 28:
            return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21))
        if z < 1 << 35:
            return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21 & 0x7F | 0x80,
                          z >> 28))
        if z < 1 << 42:
            return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21 & 0x7F | 0x80,
                          z >> 28 & 0x7F | 0x80, z >> 35))
        return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21 & 0x7F | 0x80,
                      z >> 28 & 0x7F | 0x80, z >> 35 & 0x7F | 0x80, z >> 42))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_TABLE.extend(_varint(z) for z in range(_SMALL))


class NamedTypes:
    """The named types of an expanded schema: fastavro inlines a named type at its first use and leaves its
    name elsewhere (and some names it does not expand at all), so generated code resolves names here."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.functions: dict[str, str] = {}  # record full name -> generated function name
        self.schemas: dict[str, Any] = {}  # full name -> the schema dict seen first
        self.pending: list[str] = []  # record types whose function is named but not yet generated
        self.constants: dict[str, Any] = {"Unsure": Unsure}
        self.pending_tables: list[tuple[str, dict[Any, Any]]] = []  # filled with functions once they exist
        self.prefix = "_f"

    def const(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def register(self, s: Any) -> None:
        """Remember every named type's definition (first occurrence in the expanded schema)."""
        if isinstance(s, list):
            for x in s:
                self.register(x)
        elif isinstance(s, dict):
            t = s.get("type")
            if t in ("record", "enum", "fixed") and s["name"] not in self.schemas:
                self.schemas[s["name"]] = s
                for f in s.get("fields", ()):
                    self.register(f["type"])
            elif t == "array":
                self.register(s["items"])
            elif t == "map":
                self.register(s["values"])
            elif isinstance(t, dict | list):
                self.register(t)

    def resolve(self, s: Any) -> Any:
        if isinstance(s, str) and s not in _PRIMITIVES:
            if s not in self.schemas and s in self.named:
                self.register(self.named[s])
            return self.schemas.get(s, s)
        if isinstance(s, dict) and isinstance(s.get("type"), dict | list):
            return self.resolve(s["type"])
        return s

    def record_function(self, s: dict[str, Any]) -> str:
        name = s["name"]
        if name not in self.functions:
            self.functions[name] = f"{self.prefix}{len(self.functions)}"
            self.pending.append(name)
        return self.functions[name]

    def build(self, parsed: dict[str, Any], body: Callable[[str], list[str]]) -> Any:
        """The function generated for the record schema `parsed`, or None (a construct left to fastavro)."""
        self.register(parsed)
        top = self.record_function(parsed)
        source: list[str] = []
        try:
            while self.pending:
                source += body(self.pending.pop())
        except NotCompiled:
            return None
        namespace: dict[str, Any] = dict(self.constants)
        exec(compile("\n".join(source), f"<avro {self.prefix} {parsed['name']}>", "exec"), namespace)
        for table_name, table in self.pending_tables:  # union tables name functions defined only now
            namespace[table_name] = {k: (tag, namespace[fn]) for k, (tag, fn) in table.items()}
        return namespace[top]


class _Compiler(NamedTypes):
    """Generates one writer per named record type; primitives, enums and null unions are inlined."""

    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__(named)
        self.prefix = "_w"
        self.constants.update({"_TABLE": _TABLE, "_SMALL": _SMALL, "_varint": _varint, "_Encoded": Encoded,
                               "_pack_d": struct.Struct("<d").pack, "_pack_f": struct.Struct("<f").pack})

    def emit(self, s: Any, var: str, out: list[str], ind: str, depth: int) -> None:
        """Lines writing the datum in `var` of schema `s` to `b`."""
        s = self.resolve(s)
        kind = s if isinstance(s, str) else s["type"] if isinstance(s, dict) else "union"
        if kind == "null":
            out.append(f"{ind}if {var} is not None: raise Unsure")
        elif kind == "boolean":
            out.append(f"{ind}if {var} is True: b.append(1)")
            out.append(f"{ind}elif {var} is False: b.append(0)")
            out.append(f"{ind}else: raise Unsure")
        elif kind in ("int", "long"):
            low, high = (_INT_MIN, _INT_MAX) if kind == "int" else (_LONG_MIN, _LONG_MAX)
            out.append(f"{ind}if {var}.__class__ is not int or not {low} <= {var} <= {high}: raise Unsure")
            out.append(f"{ind}z = ({var} << 1) ^ ({var} >> 63)")
            out.append(f"{ind}b += _TABLE[z] if z < _SMALL else _varint(z)")
        elif kind in ("double", "float"):
            pack = "_pack_d" if kind == "double" else "_pack_f"
            out.append(f"{ind}if {var}.__class__ is not float and {var}.__class__ is not int: raise Unsure")
            out.append(f"{ind}b += {pack}({var})")
        elif kind in ("string", "bytes"):
            if kind == "string":
                out.append(f"{ind}if {var}.__class__ is not str: raise Unsure")
                out.append(f"{ind}e = {var}.encode()")
            else:
                out.append(f"{ind}if {var}.__class__ is not bytes: raise Unsure")
                out.append(f"{ind}e = {var}")
            out.append(f"{ind}z = len(e) << 1")
            out.append(f"{ind}b += _TABLE[z] if z < _SMALL else _varint(z)")
            out.append(f"{ind}b += e")
        elif kind == "enum":
            index = self.const({sym: _TABLE[i << 1] for i, sym in enumerate(s["symbols"])})
            out.append(f"{ind}b += {index}[{var}]")  # KeyError (unknown symbol, unhashable) -> careful path
        elif kind == "record":
            out.append(f"{ind}{self.record_function(s)}({var}, b)")
        elif kind in ("array", "map"):
            item = f"i{depth}"
            out.append(f"{ind}if {var}:")
            if kind == "array":
                out.append(f"{ind}    if {var}.__class__ is not list and {var}.__class__ is not tuple: raise Unsure")
            else:
                out.append(f"{ind}    if {var}.__class__ is not dict: raise Unsure")
            out.append(f"{ind}    z = len({var}) << 1")
            out.append(f"{ind}    b += _TABLE[z] if z < _SMALL else _varint(z)")
            if kind == "array":
                out.append(f"{ind}    for {item} in {var}:")
                self.emit(s["items"], item, out, ind + "        ", depth + 1)
            else:
                key = f"k{depth}"
                out.append(f"{ind}    for {key}, {item} in {var}.items():")
                self.emit("string", key, out, ind + "        ", depth + 1)
                self.emit(s["values"], item, out, ind + "        ", depth + 1)
            if kind == "array":  # an empty one of the wrong kind ({} for an array, [] for a map) is refused too
                out.append(f"{ind}elif {var}.__class__ is not list and {var}.__class__ is not tuple: raise Unsure")
            else:
                out.append(f"{ind}elif {var}.__class__ is not dict: raise Unsure")
            out.append(f"{ind}b.append(0)")
        elif kind == "union":
            self.emit_union(s, var, out, ind, depth)
        else:
            raise NotCompiled(f"{kind}")

    def emit_union(self, branches: list[Any], var: str, out: list[str], ind: str, depth: int) -> None:
        resolved = [self.resolve(x) for x in branches]
        kinds = [x if isinstance(x, str) else x["type"] for x in resolved]
        if len(branches) == 2 and kinds[0] == "null":
            other = resolved[1]
            out.append(f"{ind}if {var} is None: b.append(0)")
            out.append(f"{ind}else:")
            out.append(f"{ind}    b.append(2)")
            if kinds[1] == "record":  # fastavro also takes a tagged (name, record) for any union
                out.append(f"{ind}    if {var}.__class__ is tuple:")
                out.append(f"{ind}        if len({var}) != 2 or {var}[0] != {other['name']!r}: raise Unsure")
                out.append(f"{ind}        {var} = {var}[1]")
            self.emit(other, var, out, ind + "    ", depth + 1)
            return
        if all(k == "record" for k in kinds):
            table = {x["name"]: (_TABLE[i << 1], self.record_function(x)) for i, x in enumerate(resolved)}
            name = self.const(table)
            self.pending_tables.append((name, table))
            out.append(f"{ind}if {var}.__class__ is not tuple or len({var}) != 2: raise Unsure")
            out.append(f"{ind}t = {name}.get({var}[0])")
            out.append(f"{ind}if t is None: raise Unsure")
            out.append(f"{ind}b += t[0]")
            out.append(f"{ind}t[1]({var}[1], b)")
            return
        raise NotCompiled(f"union of {kinds}")

    def record_body(self, name: str) -> list[str]:
        s = self.schemas[name]
        fields = s["fields"]
        keys = self.const(frozenset(f["name"] for f in fields))
        out = [f"def {self.functions[name]}(v, b):",
               "    if v.__class__ is not dict:",
               f"        if v.__class__ is _Encoded and v.type_name == {name!r}:",
               "            b += v.body",
               "            return",
               "        raise Unsure",
               f"    if not v.keys() <= {keys}: raise Unsure"]
        for f in fields:
            var = "x"
            if "default" in f:
                default = f["default"]
                # A bytes field's default is a str in Avro's JSON, which fastavro refuses to write: so does
                # this writer (the class check below), and the careful path says so.
                literal = repr(default) if _simple(default) else self.const(default)
                out.append(f"    {var} = v.get({f['name']!r}, {literal})")
            else:
                out.append(f"    {var} = v[{f['name']!r}]")  # KeyError -> careful path, which names it
            self.emit(f["type"], var, out, "    ", 0)
        return out


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str) or value in ([], {})


def compile_writer(parsed: dict[str, Any], named: dict[str, Any]) -> Writer | None:
    """A writer of records of the expanded (fastavro-parsed) record schema `parsed`, or None when the schema
    uses a construct left to fastavro. `named`: fastavro's named schemas, for the names the expansion left as
    names. The writer appends to a bytearray and raises `Unsure` (or a KeyError, TypeError...) for a datum it
    does not vouch for."""
    compiler = _Compiler(named)
    writer: Writer | None = compiler.build(parsed, compiler.record_body)
    return writer
