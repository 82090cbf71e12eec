"""The compiled writers' and readers' C engine: each record type planned once here, written and read by
`_avro_native` (a C extension).

The generated Python writers (`fast_writer.py`) made Avro encoding three to four times cheaper than fastavro's, and it
was still a fifth of the processor thread's time (issue 15: a run's state record alone, about 50 fields, is written at
every step). The C engine walks a plan (small tuples naming what to write, built here from the expanded schema) with
the same acceptance rules as the generated code, line for line: what it is unsure of raises `Unsure` and takes the
careful path. So the engine is an accelerator, never the judge, and one the product works without: a machine that
could not build it (no C compiler at install) uses the generated Python writers and readers, as does a process
started with `OSTINATO_NATIVE_CODEC=0`. The readers follow `fast_reader.py` the same way (commands, tasks and states
are decoded on every step).
"""

from __future__ import annotations

import functools
from typing import Any

from ostinato.schemas.fast_reader import Reader
from ostinato.schemas.fast_writer import _TABLE, Encoded, NamedTypes, NotCompiled, Unsure, Writer

try:
    from ostinato.schemas import _avro_native  # type: ignore[attr-defined]
except ImportError:  # built at install when a C compiler is there (setup.py: optional)
    _avro_native = None

NULL, BOOLEAN, INT, LONG, FLOAT, DOUBLE, STRING, BYTES, ENUM, RECORD, ARRAY, MAP, NULL_UNION, RECORD_UNION = range(14)
_PRIMITIVE = {"null": NULL, "boolean": BOOLEAN, "int": INT, "long": LONG, "float": FLOAT, "double": DOUBLE,
              "string": STRING, "bytes": BYTES}
MISSING = object()  # a field without a default

if _avro_native is not None:
    _avro_native.configure(Unsure, Encoded, MISSING)


def available() -> bool:
    """Whether the C engine was built here (`codec.settings_from_environment` may still switch it off)."""
    return _avro_native is not None


class _Planner(NamedTypes):
    """Plans of record types, by full name: lists, so a recursive type's plan can hold itself."""

    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__(named)
        self.plans: dict[str, list[Any]] = {}

    def record(self, s: dict[str, Any]) -> list[Any]:
        name = s["name"]
        plan = self.plans.get(name)
        if plan is None:
            plan = self.plans[name] = [name, ()]
            plan[1] = tuple((f["name"], f.get("default", MISSING), self.node(f["type"])) for f in s["fields"])
        return plan

    def node(self, s: Any) -> Any:
        s = self.resolve(s)
        kind = s if isinstance(s, str) else s["type"] if isinstance(s, dict) else "union"
        if kind in _PRIMITIVE:
            return _PRIMITIVE[kind]
        if kind == "enum":
            return (ENUM, {sym: _TABLE[i << 1] for i, sym in enumerate(s["symbols"])}, tuple(s["symbols"]))
        if kind == "record":
            return (RECORD, self.record(s))
        if kind == "array":
            return (ARRAY, self.node(s["items"]))
        if kind == "map":
            return (MAP, self.node(s["values"]))
        if kind == "union":
            return self.union(s)
        raise NotCompiled(kind)

    def union(self, branches: list[Any]) -> Any:
        resolved = [self.resolve(x) for x in branches]
        kinds = [x if isinstance(x, str) else x["type"] for x in resolved]
        if len(branches) == 2 and kinds[0] == "null":
            other = resolved[1]
            return (NULL_UNION, self.node(other), other["name"] if kinds[1] == "record" else None)
        if all(k == "record" for k in kinds):
            return (RECORD_UNION, {x["name"]: (_TABLE[i << 1], self.record(x)) for i, x in enumerate(resolved)},
                    tuple((x["name"], self.record(x)) for x in resolved))
        raise NotCompiled(f"union of {kinds}")


def _plan(parsed: dict[str, Any], named: dict[str, Any]) -> list[Any] | None:
    if _avro_native is None:
        return None
    planner = _Planner(named)
    planner.register(parsed)
    try:
        return planner.record(parsed)
    except NotCompiled:
        return None


def compile_native_writer(parsed: dict[str, Any], named: dict[str, Any]) -> Writer | None:
    """A writer of the expanded record schema `parsed` on the C engine (appends to a bytearray, raises `Unsure`
    for a datum it does not vouch for, as `fast_writer.compile_writer`'s), or None: no engine here, or a schema
    construct left to fastavro."""
    plan = _plan(parsed, named)
    return None if plan is None else functools.partial(_avro_native.write, plan)


def compile_native_reader(parsed: dict[str, Any], named: dict[str, Any]) -> Reader | None:
    """A reader of records written with `parsed` on the C engine (bytes and offset to (record, end), as
    `fast_reader.compile_reader`'s, refusing what they refuse), or None as `compile_native_writer`."""
    plan = _plan(parsed, named)
    return None if plan is None else functools.partial(_avro_native.read, plan)
