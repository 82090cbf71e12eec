"""The visibility list/count query language (DESIGN.md §7): tokenizer, parser to a typed AST, reference evaluator.

Grammar (keywords are case-insensitive, attribute names are not)::

    query      := [expr] [ORDER BY order_key ("," order_key)*]
    expr       := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | "(" expr ")" | predicate
    predicate  := attr ("=" | "!=" | "<>" | ">" | ">=" | "<" | "<=") literal
                | attr [NOT] IN "(" literal ("," literal)* ")"
                | attr BETWEEN literal AND literal
                | attr STARTS_WITH string
                | attr IS [NOT] NULL
    order_key  := attr [ASC | DESC]
    attr       := identifier | `back-quoted name`
    literal    := 'string' | "string" | number | TRUE | FALSE

Semantics, shared by every store and by `matches` (the brute-force reference):

- A predicate on an attribute the run does not have is false; `NOT` is plain boolean negation, so
  `NOT Score > 5` matches runs without `Score` while `Score <= 5` does not.
- KeywordList: `=`/`IN`/`STARTS_WITH` hold if any element matches; `!=`/`NOT IN` if it is present and no element
  does. An empty list counts as absent. Lists cannot be ordered or range-compared.
- Text: `=` holds if every word of the literal is a word of the value (words are `\\w+` runs, case-folded);
  `!=` if present and not. A text without words counts as absent. Text cannot be ordered or range-compared.
- Datetime literals (StartTime, CloseTime, custom Datetime) are ISO-8601 strings; without an offset they are
  UTC; they compare at millisecond precision.
- ExecutionDuration is CloseTime minus the run's execution time, in milliseconds; the literal is an integer
  (milliseconds) or a duration string such as '250ms', '90s', '5m', '1h30m', '2d'. Running runs have none.
- ExecutionStatus takes Running, Completed, Failed, Canceled, Terminated, ContinuedAsNew, TimedOut (any case,
  `_` ignored); only `=`, `!=`, `IN` and `NOT IN` apply, and it orders by the wire name (`CANCELED` first).
- Bool takes only `=`, `!=`, `IN` and `NOT IN`; Keyword, Int, Double, Datetime and ExecutionDuration take every
  operator (Keyword ranges compare code points). A Double literal may be an integer; an Int one may not be 1.5.
- Ordering puts runs without the attribute last in both directions; ties break on WorkflowId then RunId, and
  without ORDER BY the order is StartTime DESC.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any


class SearchAttributeType(StrEnum):
    """The type of a custom search attribute, as named in a payload's `type` metadata."""

    KEYWORD = "Keyword"
    TEXT = "Text"
    INT = "Int"
    DOUBLE = "Double"
    BOOL = "Bool"
    DATETIME = "Datetime"
    KEYWORD_LIST = "KeywordList"

    @classmethod
    def parse(cls, name: str | SearchAttributeType) -> SearchAttributeType:
        """`Keyword`, `keyword`, `KEYWORD_LIST`, `KeywordList`... to the member; ValueError for anything else."""
        wanted = str(name).replace("_", "").lower()
        for member in cls:
            if member.value.lower() == wanted:
                return member
        raise ValueError(f"unknown search attribute type {name!r}; expected one of {', '.join(m.value for m in cls)}")


class SystemType(StrEnum):
    """Types only system attributes have."""

    STATUS = "ExecutionStatus"
    DURATION = "Duration"


AttrType = SearchAttributeType | SystemType

STATUSES = {
    "running": "RUNNING", "completed": "COMPLETED", "failed": "FAILED", "canceled": "CANCELED",
    "terminated": "TERMINATED", "continuedasnew": "CONTINUED_AS_NEW", "timedout": "TIMED_OUT",
}


@dataclass(frozen=True)
class SystemAttribute:
    name: str
    type: AttrType
    column: str
    nullable: bool = False


_K, _DT = SearchAttributeType.KEYWORD, SearchAttributeType.DATETIME
SYSTEM_ATTRIBUTES: dict[str, SystemAttribute] = {a.name: a for a in (
    SystemAttribute("WorkflowId", _K, "workflow_id"),
    SystemAttribute("RunId", _K, "run_id"),
    SystemAttribute("WorkflowType", _K, "workflow_type"),
    SystemAttribute("ExecutionStatus", SystemType.STATUS, "status"),
    SystemAttribute("StartTime", _DT, "start_time_ms"),
    SystemAttribute("CloseTime", _DT, "close_time_ms", nullable=True),
    SystemAttribute("ExecutionDuration", SystemType.DURATION, "execution_duration_ms", nullable=True),
    SystemAttribute("TaskQueue", _K, "task_queue"),
    SystemAttribute("HistoryLength", SearchAttributeType.INT, "history_length"),
)}


# Built-in attributes the engine sets as typed search attributes of the visibility record (stored and indexed as
# custom ones, never registered): `BuildIds` is worker versioning's drain visibility (`pinned:<build>`...).
ENGINE_ATTRIBUTES: dict[str, SearchAttributeType] = {"BuildIds": SearchAttributeType.KEYWORD_LIST}


class QueryError(ValueError):
    """A query that cannot be parsed or typed; `position` (0-based) and `token` point at the offending token."""

    def __init__(self, message: str, position: int, token: str) -> None:
        self.message = message
        self.position = position
        self.token = token
        super().__init__(f"{message} (at position {position}, near {token!r})" if token else
                         f"{message} (at position {position}, end of query)")


# ---------------------------------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Token:
    kind: str  # "ident", "quoted_ident", "string", "number", "op", "(", ")", ",", "eof"
    text: str
    position: int
    value: Any = None


KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "BETWEEN", "STARTS_WITH", "ORDER", "BY", "ASC", "DESC",
                      "TRUE", "FALSE", "IS", "NULL"})
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = ("!=", "<>", ">=", "<=", "=", ">", "<")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}


def tokenize(text: str) -> list[Token]:
    """Split a query into tokens; the last one is always `eof`."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(),":
            tokens.append(Token(c, c, i))
            i += 1
        elif c in "'\"":
            tokens.append(_string(text, i))
            i = tokens[-1].position + len(tokens[-1].text)
        elif c == "`":
            end = text.find("`", i + 1)
            if end < 0 or end == i + 1:
                raise QueryError("unterminated or empty back-quoted name", i, text[i:i + 20])
            tokens.append(Token("quoted_ident", text[i:end + 1], i, text[i + 1:end]))
            i = end + 1
        elif (m := _NUMBER.match(text, i)) and (c != "-" or (i + 1 < n and text[i + 1] in "0123456789.")):
            if m.end() < n and (text[m.end()].isalpha() or text[m.end()] == "_"):
                raise QueryError("malformed number", i, text[i:m.end() + 1])
            raw = m.group()
            value: int | float = float(raw) if any(ch in raw for ch in ".eE") else int(raw)
            tokens.append(Token("number", raw, i, value))
            i = m.end()
        elif m := _IDENT.match(text, i):
            tokens.append(Token("ident", m.group(), i))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise QueryError(f"unexpected character {c!r}", i, c)
            tokens.append(Token("op", op, i))
            i += len(op)
    tokens.append(Token("eof", "", n))
    return tokens


def _string(text: str, start: int) -> Token:
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                break
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise QueryError(f"unknown escape \\{nxt} in string", i, text[i:i + 2])
            out.append(_ESCAPES[nxt])
            i += 2
        elif c == quote:
            if text[i + 1:i + 2] == quote:  # SQL style: a doubled quote stands for one
                out.append(quote)
                i += 2
                continue
            return Token("string", text[start:i + 1], start, "".join(out))
        else:
            out.append(c)
            i += 1
    raise QueryError("unterminated string", start, text[start:start + 20])


# ---------------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Attribute:
    """An attribute reference, resolved against the system attributes and the search attribute registry."""

    name: str
    type: AttrType
    system: SystemAttribute | None
    position: int


@dataclass(frozen=True)
class Comparison:
    attr: Attribute
    op: str  # one of = != > >= < <=  (<> is normalised to !=)
    value: Any


@dataclass(frozen=True)
class In:
    attr: Attribute
    values: tuple[Any, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    attr: Attribute
    low: Any
    high: Any


@dataclass(frozen=True)
class StartsWith:
    attr: Attribute
    prefix: str


@dataclass(frozen=True)
class IsNull:
    attr: Attribute
    negated: bool = False


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    item: Expr


Expr = Comparison | In | Between | StartsWith | IsNull | And | Or | Not


@dataclass(frozen=True)
class OrderKey:
    attr: Attribute
    descending: bool = False


@dataclass(frozen=True)
class Query:
    """A parsed query; `where` None matches every run."""

    where: Expr | None
    order_by: tuple[OrderKey, ...]


DEFAULT_ORDER = (OrderKey(Attribute("StartTime", _DT, SYSTEM_ATTRIBUTES["StartTime"], 0), descending=True),)

# ---------------------------------------------------------------------------------------------------- parser

_RANGE_TYPES = frozenset({SearchAttributeType.KEYWORD, SearchAttributeType.INT, SearchAttributeType.DOUBLE,
                          SearchAttributeType.DATETIME, SystemType.DURATION})
_UNORDERABLE = frozenset({SearchAttributeType.TEXT, SearchAttributeType.KEYWORD_LIST})


def parse(text: str, search_attributes: Mapping[str, SearchAttributeType | str] | None = None) -> Query:
    """Parse and type-check a list/count query.

    Args:
        text: the query, e.g. `WorkflowType = 'Order' AND ExecutionStatus = 'Running' ORDER BY StartTime DESC`.
        search_attributes: the custom search attributes of the namespace and their types.

    Raises:
        QueryError: with the position and text of the offending token.
    """
    registry = {**ENGINE_ATTRIBUTES,
                **{name: SearchAttributeType.parse(t) for name, t in (search_attributes or {}).items()}}
    clash = sorted(set(registry) & set(SYSTEM_ATTRIBUTES))
    if clash:
        raise ValueError(f"custom search attributes cannot reuse system attribute names: {', '.join(clash)}")
    return _Parser(tokenize(text), registry).query()


class _Parser:
    def __init__(self, tokens: list[Token], registry: dict[str, SearchAttributeType]) -> None:
        self.tokens = tokens
        self.registry = registry
        self.i = 0

    # -- token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def keyword(self, *words: str) -> bool:
        return self.tok.kind == "ident" and self.tok.text.upper() in words

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def expect_keyword(self, word: str) -> Token:
        if not self.keyword(word):
            self.fail(f"expected {word}")
        return self.take()

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            self.fail(f"expected {what}")
        return self.take()

    def fail(self, message: str, token: Token | None = None) -> None:
        t = token or self.tok
        found = "end of query" if t.kind == "eof" else repr(t.text)
        raise QueryError(f"{message}, found {found}" if token is None else message, t.position, t.text)

    # -- grammar
    def query(self) -> Query:
        where = None
        if self.tok.kind != "eof" and not self.keyword("ORDER"):
            where = self.or_expr()
        order: list[OrderKey] = []
        if self.keyword("ORDER"):
            self.take()
            self.expect_keyword("BY")
            order.append(self.order_key())
            while self.tok.kind == ",":
                self.take()
                order.append(self.order_key())
        if self.tok.kind != "eof":
            self.fail("expected AND, OR, ORDER BY or the end of the query")
        return Query(where, tuple(order))

    def order_key(self) -> OrderKey:
        attr = self.attribute()
        if attr.type in _UNORDERABLE:
            raise QueryError(f"cannot ORDER BY {attr.name}: a {attr.type.value} attribute has no order",
                             attr.position, attr.name)
        descending = False
        if self.keyword("ASC", "DESC"):
            descending = self.take().text.upper() == "DESC"
        return OrderKey(attr, descending)

    def or_expr(self) -> Expr:
        items = [self.and_expr()]
        while self.keyword("OR"):
            self.take()
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def and_expr(self) -> Expr:
        items = [self.not_expr()]
        while self.keyword("AND"):
            self.take()
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else And(tuple(items))

    def not_expr(self) -> Expr:
        if self.keyword("NOT"):
            self.take()
            return Not(self.not_expr())
        if self.tok.kind == "(":
            self.take()
            inner = self.or_expr()
            self.expect(")", "')'")
            return inner
        return self.predicate()

    def attribute(self) -> Attribute:
        t = self.tok
        if t.kind == "quoted_ident":
            name = t.value
        elif t.kind == "ident" and t.text.upper() not in KEYWORDS:
            name = t.text
        else:
            self.fail("expected an attribute name")
        self.take()
        if name in SYSTEM_ATTRIBUTES:
            system = SYSTEM_ATTRIBUTES[name]
            return Attribute(name, system.type, system, t.position)
        if name in self.registry:
            return Attribute(name, self.registry[name], None, t.position)
        raise QueryError(f"unknown search attribute {name!r}", t.position, t.text)

    def predicate(self) -> Expr:
        attr = self.attribute()
        t = self.tok
        if t.kind == "op":
            self.take()
            op = "!=" if t.text == "<>" else t.text
            if op not in ("=", "!=") and attr.type not in _RANGE_TYPES:
                raise QueryError(f"operator {t.text} does not apply to {attr.name} ({attr.type.value})",
                                 t.position, t.text)
            return Comparison(attr, op, self.literal(attr))
        if self.keyword("NOT", "IN"):
            negated = self.take().text.upper() == "NOT"
            if negated:
                self.expect_keyword("IN")
            if attr.type is SearchAttributeType.TEXT:
                raise QueryError(f"IN does not apply to {attr.name} (Text)", t.position, t.text)
            self.expect("(", "'(' after IN")
            values = [self.literal(attr)]
            while self.tok.kind == ",":
                self.take()
                values.append(self.literal(attr))
            self.expect(")", "')' or ','")
            return In(attr, tuple(values), negated)
        if self.keyword("BETWEEN"):
            self.take()
            if attr.type not in _RANGE_TYPES:
                raise QueryError(f"BETWEEN does not apply to {attr.name} ({attr.type.value})", t.position, t.text)
            low = self.literal(attr)
            self.expect_keyword("AND")
            return Between(attr, low, self.literal(attr))
        if self.keyword("STARTS_WITH"):
            self.take()
            if attr.type not in (SearchAttributeType.KEYWORD, SearchAttributeType.KEYWORD_LIST):
                raise QueryError(f"STARTS_WITH does not apply to {attr.name} ({attr.type.value})",
                                 t.position, t.text)
            s = self.tok
            if s.kind != "string":
                self.fail("STARTS_WITH needs a string")
            self.take()
            return StartsWith(attr, s.value)
        if self.keyword("IS"):
            self.take()
            negated = self.keyword("NOT")
            if negated:
                self.take()
            self.expect_keyword("NULL")
            return IsNull(attr, negated)
        self.fail(f"expected an operator after {attr.name}")
        raise AssertionError  # unreachable: fail raises

    def literal(self, attr: Attribute) -> Any:
        t = self.tok
        if t.kind == "string":
            raw: Any = t.value
        elif t.kind == "number":
            raw = t.value
        elif self.keyword("TRUE", "FALSE"):
            raw = t.text.upper() == "TRUE"
        else:
            self.fail(f"expected a value for {attr.name}")
        try:
            value = literal_value(attr.type, raw)
        except ValueError as exc:
            raise QueryError(f"{attr.name}: {exc}", t.position, t.text) from None
        self.take()
        return value


# ---------------------------------------------------------------------------------------------------- values


def literal_value(attr_type: AttrType, raw: Any) -> Any:
    """A query literal as the comparable value stores index (see `index_values`); ValueError if it does not fit."""
    if attr_type in (SearchAttributeType.KEYWORD, SearchAttributeType.KEYWORD_LIST):
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, not {json.dumps(raw)}")
        return raw
    if attr_type is SearchAttributeType.TEXT:
        if not isinstance(raw, str) or not words(raw):
            raise ValueError("expected a string with at least one word")
        return tuple(sorted(words(raw)))
    if attr_type is SearchAttributeType.INT:
        if type(raw) is not int:
            raise ValueError(f"expected an integer, not {json.dumps(raw)}")
        return _int64(raw)
    if attr_type is SearchAttributeType.DOUBLE:
        if type(raw) not in (int, float) or not math.isfinite(raw):
            raise ValueError(f"expected a finite number, not {json.dumps(raw)}")
        return float(raw)
    if attr_type is SearchAttributeType.BOOL:
        if type(raw) is not bool:
            raise ValueError(f"expected true or false, not {json.dumps(raw)}")
        return raw
    if attr_type is SearchAttributeType.DATETIME:
        if not isinstance(raw, str):
            raise ValueError(f"expected an ISO-8601 date-time string, not {json.dumps(raw)}")
        return datetime_ms(raw)
    if attr_type is SystemType.DURATION:
        if type(raw) is int:
            return _int64(raw)
        if isinstance(raw, str):
            return _int64(duration_ms(raw))
        raise ValueError(f"expected milliseconds or a duration such as '5m', not {json.dumps(raw)}")
    if not isinstance(raw, str) or raw.replace("_", "").lower() not in STATUSES:
        raise ValueError(f"expected one of Running, Completed, Failed, Canceled, Terminated, ContinuedAsNew, "
                         f"TimedOut, not {json.dumps(raw)}")
    return STATUSES[raw.replace("_", "").lower()]


def _int64(value: int) -> int:
    # Stores keep 64-bit integers (SQLite, OpenSearch longs); a larger literal is an error, not a crash.
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit in a 64-bit integer")
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def datetime_ms(text: str) -> int:
    """An ISO-8601 date-time (UTC unless it has an offset) as milliseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def duration_ms(text: str) -> int:
    """'1h30m', '90s', '250ms', '2d' as milliseconds."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration such as '250ms', '90s', '5m', '1h30m' or '2d'")
    return int(total)


_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    """The case-folded words of a Text value or literal."""
    return set(_WORD.findall(text.casefold()))


def index_values(attr_type: SearchAttributeType, value: Any) -> list[Any]:
    """The comparable values a store indexes for a decoded (JSON) search attribute value; [] means absent.

    Values that do not fit the type (a string for an Int, say) are not indexed, so predicates never match them.
    """
    try:
        if attr_type is SearchAttributeType.KEYWORD_LIST:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
                return []
            return sorted(set(items))
        if attr_type is SearchAttributeType.TEXT:
            return sorted(words(value)) if isinstance(value, str) else []
        return [literal_value(attr_type, value)]
    except ValueError:
        return []


# ---------------------------------------------------------------------------------------------------- evaluator


def row_values(attr: Attribute, row: Mapping[str, Any]) -> list[Any]:
    """What a row holds for an attribute, in indexed form: [] if absent, several for a KeywordList or Text.

    A custom attribute the row's `search_attribute_types` gives another type than the query's counts as absent.
    """
    if attr.system is not None:
        if attr.system.column == "execution_duration_ms":
            close = row.get("close_time_ms")
            return [] if close is None else [close - row["execution_time_ms"]]
        value = row.get(attr.system.column)
        return [] if value is None else [value]
    sa = row.get("search_attributes") or {}
    if attr.name not in sa:
        return []
    indexed_as = (row.get("search_attribute_types") or {}).get(attr.name, attr.type)
    if indexed_as is not attr.type or not isinstance(indexed_as, SearchAttributeType):
        return []
    return index_values(indexed_as, sa[attr.name])


_CMP = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
}


def matches(expr: Query | Expr | None, row: Mapping[str, Any]) -> bool:
    """Whether a row (the dict a visibility store returns) satisfies a query: the brute-force reference."""
    if isinstance(expr, Query):
        expr = expr.where
    if expr is None:
        return True
    if isinstance(expr, And):
        return all(matches(e, row) for e in expr.items)
    if isinstance(expr, Or):
        return any(matches(e, row) for e in expr.items)
    if isinstance(expr, Not):
        return not matches(expr.item, row)
    values = row_values(expr.attr, row)
    if isinstance(expr, IsNull):
        return bool(values) == expr.negated
    if not values:
        return False
    if expr.attr.type is SearchAttributeType.TEXT:
        has_all = all(w in values for w in expr.value)  # type: ignore[union-attr]
        return has_all if expr.op == "=" else not has_all  # type: ignore[union-attr]
    if isinstance(expr, Comparison):
        if expr.op == "!=":
            return expr.value not in values
        return any(_CMP[expr.op](v, expr.value) for v in values)
    if isinstance(expr, In):
        hit = any(v in expr.values for v in values)
        return not hit if expr.negated else hit
    if isinstance(expr, Between):
        return any(expr.low <= v <= expr.high for v in values)
    return any(str(v).startswith(expr.prefix) for v in values)


class _Descending:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and bool(self.value == other.value)

    def __lt__(self, other: _Descending) -> bool:
        return bool(other.value < self.value)

    __hash__ = None  # type: ignore[assignment]


def sort_key(query: Query, row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The key that sorts rows in a query's order: its ORDER BY (absent values last), then WorkflowId, RunId."""
    key: list[Any] = []
    for k in query.order_by or DEFAULT_ORDER:
        values = row_values(k.attr, row)
        value = values[0] if values else None
        key.append(value is None)
        key.append(_Descending(value) if k.descending else value)
    return (*key, row["workflow_id"], row["run_id"])


def evaluate(query: Query, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Brute force: the rows that match, in the query's order."""
    return sorted((r for r in rows if matches(query, r)), key=lambda r: sort_key(query, r))
