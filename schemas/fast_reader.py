"""Avro binary readers compiled from the schemas into Python functions: the read side of `fast_writer`.

Every command the processor takes, every task a worker takes and every state record a shard loads is decoded;
fastavro's reader walks the schema per datum as its writer does (a Command took 25 µs). A compiled reader is
used only when the record was written with the schema the reader holds (no resolution between versions),
and only as a fast path: anything unexpected (a branch index out of range, a varint too long, bytes left
over or missing, bad UTF-8) raises, and the codec reads the record the careful way, with fastavro, which
says what is wrong. What it returns is what fastavro returns with Ostinato's options: records as dicts in
schema order, a union of null and one record as the plain record, a union of records as (name, record).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ostinato.schemas.fast_writer import NamedTypes, NotCompiled, Unsure

Reader = Callable[[bytes, int], tuple[Any, int]]


def _varint_rest(d: bytes, p: int, x: int) -> tuple[int, int]:
    """The rest of a varint whose first byte `x` had its continuation bit set."""
    x &= 0x7F
    shift = 7
    while True:
        c = d[p]
        p += 1
        if shift == 63 and c > 1:  # past 64 bits: fastavro wraps such a value, this reader does not guess
            raise Unsure
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, p
        shift += 7
        if shift > 63:
            raise Unsure


class _ReaderCompiler(NamedTypes):
    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__(named)
        self.prefix = "_r"
        self.constants.update({"_rest": _varint_rest, "_unpack_d": struct.Struct("<d").unpack_from,
                               "_unpack_f": struct.Struct("<f").unpack_from})

    def long(self, var: str, out: list[str], ind: str) -> None:
        out.append(f"{ind}{var} = d[p]")
        out.append(f"{ind}p += 1")
        out.append(f"{ind}if {var} > 127: {var}, p = _rest(d, p, {var})")
        out.append(f"{ind}{var} = ({var} >> 1) ^ -({var} & 1)")

    def emit(self, s: Any, var: str, out: list[str], ind: str, depth: int) -> None:
        """Lines reading a datum of schema `s` at `d[p:]` into `var`, advancing `p`."""
        s = self.resolve(s)
        kind = s if isinstance(s, str) else s["type"] if isinstance(s, dict) else "union"
        if kind == "null":
            out.append(f"{ind}{var} = None")
        elif kind == "boolean":
            out.append(f"{ind}{var} = d[p]")
            out.append(f"{ind}p += 1")
            out.append(f"{ind}if {var} > 1: raise Unsure")
            out.append(f"{ind}{var} = {var} == 1")
        elif kind in ("int", "long"):
            self.long(var, out, ind)
        elif kind in ("double", "float"):
            unpack, size = ("_unpack_d", 8) if kind == "double" else ("_unpack_f", 4)
            out.append(f"{ind}{var} = {unpack}(d, p)[0]")
            out.append(f"{ind}p += {size}")
        elif kind in ("string", "bytes"):
            n = f"n{depth}"
            self.long(n, out, ind)
            out.append(f"{ind}if {n} < 0 or p + {n} > len(d): raise Unsure")
            out.append(f"{ind}{var} = d[p:p + {n}]{'.decode()' if kind == 'string' else ''}")
            out.append(f"{ind}p += {n}")
        elif kind == "enum":
            symbols = self.const(tuple(s["symbols"]))
            i = f"n{depth}"
            self.long(i, out, ind)
            out.append(f"{ind}if {i} < 0: raise Unsure")
            out.append(f"{ind}{var} = {symbols}[{i}]")
        elif kind == "record":
            out.append(f"{ind}{var}, p = {self.record_function(s)}(d, p)")
        elif kind in ("array", "map"):
            n, item, key = f"n{depth}", f"i{depth}", f"k{depth}"
            out.append(f"{ind}{var} = {'[]' if kind == 'array' else '{}'}")
            out.append(f"{ind}while True:")
            self.long(n, out, ind + "    ")
            out.append(f"{ind}    if {n} == 0: break")
            out.append(f"{ind}    if {n} < 0:")  # a block with its size in bytes, as Java writers may write
            out.append(f"{ind}        {n} = -{n}")
            self.long(item, out, ind + "        ")
            out.append(f"{ind}    for _ in range({n}):")
            if kind == "array":
                self.emit(s["items"], item, out, ind + "        ", depth + 1)
                out.append(f"{ind}        {var}.append({item})")
            else:
                self.emit("string", key, out, ind + "        ", depth + 1)
                self.emit(s["values"], item, out, ind + "        ", depth + 1)
                out.append(f"{ind}        {var}[{key}] = {item}")
        elif kind == "union":
            self.emit_union(s, var, out, ind, depth)
        else:
            raise NotCompiled(kind)

    def emit_union(self, branches: list[Any], var: str, out: list[str], ind: str, depth: int) -> None:
        resolved = [self.resolve(x) for x in branches]
        kinds = [x if isinstance(x, str) else x["type"] for x in resolved]
        i = f"n{depth}"
        self.long(i, out, ind)
        if len(branches) == 2 and kinds[0] == "null":
            out.append(f"{ind}if {i} == 0: {var} = None")
            out.append(f"{ind}elif {i} == 1:")
            self.emit(resolved[1], var, out, ind + "    ", depth + 1)
            out.append(f"{ind}else: raise Unsure")
            return
        if all(k == "record" for k in kinds):
            table = {n: (x["name"], self.record_function(x)) for n, x in enumerate(resolved)}
            name = self.const(table)
            self.pending_tables.append((name, table))
            out.append(f"{ind}t = {name}[{i}]")
            out.append(f"{ind}{var}, p = t[1](d, p)")
            out.append(f"{ind}{var} = (t[0], {var})")
            return
        raise NotCompiled(f"union of {kinds}")

    def record_body(self, name: str) -> list[str]:
        fields = self.schemas[name]["fields"]
        out = [f"def {self.functions[name]}(d, p):"]
        for n, f in enumerate(fields):
            self.emit(f["type"], f"x{n}", out, "    ", 0)
        out.append("    return {" + ", ".join(f"{f['name']!r}: x{n}" for n, f in enumerate(fields)) + "}, p")
        return out


def compile_reader(parsed: dict[str, Any], named: dict[str, Any]) -> Reader | None:
    """A reader of records written with the expanded record schema `parsed` (from offset p of the bytes, to
    (record, end)), or None when the schema uses a construct left to fastavro."""
    compiler = _ReaderCompiler(named)
    reader: Reader | None = compiler.build(parsed, compiler.record_body)
    return reader
