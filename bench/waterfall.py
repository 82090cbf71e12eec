"""The hop waterfall of a workflow, assembled from timestamps only (no I/O): what `bench/hops.py` prints.

A workflow is a chain of commands (start, workflow task completion, activity start, activity completion, ...).
Each command is one *step*: produced to the commands topic by a client or a worker, taken into a processor batch,
decided, its outputs produced, the batch's offsets sent, the transaction committed and its markers written, after
which readers (workers, the gateway's replies reader) see the outputs and produce the next command. Every boundary
is a time some process or the broker wrote down:

| boundary | source |
| --- | --- |
| client called, start returned, result in hand | the benchmark's wall clock |
| command produced | the command record's CreateTime (set by librdkafka at `produce()`) |
| taken into a batch | the history events' `event_time_ms` (the batch's `now`), else a task start time in the state |
| first / last output produced | CreateTime of the workflow's output records of that transaction |
| offsets sent | the TxnOffsetCommit record's append time in `__consumer_offsets` |
| EndTxn handled | the PrepareCommit record of `__transaction_state` |
| readable | the last commit marker of the transaction |

All processes share one machine and so one clock; times are whole milliseconds, so a hop is +-1 ms.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

ARRIVE_FIRST = "client → gateway (HTTP) → commands topic"
ARRIVE_NEXT = "previous step readable → worker fetch + handling → command produced"
TAKEN = "commands topic → processor batch (fetch, queue)"
DECIDE = "decide + encode (the whole batch)"
PRODUCE = "produce (this workflow's records)"
OFFSETS = "send offsets (AddOffsetsToTxn + TxnOffsetCommit)"
FLUSH = "commit: produce acks + EndTxn reaches the coordinator"
MARKERS = "commit: EndTxn → markers written (readable)"
STEP_TOTAL = "step total: command produced → readable"
RESULT = "EndTxn → client has the result (store write, wake-up, HTTP)"
HANDLE = "branch: start reply readable → client has the handle"
END_TO_END = "end to end: client call → result"
HOPS = (ARRIVE_FIRST, ARRIVE_NEXT, TAKEN, DECIDE, PRODUCE, OFFSETS, FLUSH, MARKERS)


@dataclass(frozen=True)
class Written:
    """One record read back (read_committed) from a topic, attributed to a workflow."""

    topic: str  # the full topic name
    role: str  # commands, history, state, visibility, replies, tasks.workflow, tasks.activity
    partition: int
    offset: int
    create_time: int  # ms
    size: int  # key + value + headers bytes
    workflow_id: str
    kind: str  # command type, history event type or record type (short names)
    time_ms: int | None = None  # history: event_time_ms; state: the latest task start or close time in it


class Txn(Protocol):
    """What the waterfall needs of a transaction (bench/kafka_logs.py `Transaction`)."""

    @property
    def offsets_committed(self) -> int | None: ...

    @property
    def prepared(self) -> int | None: ...

    @property
    def visible(self) -> int | None: ...


TxnOf = Callable[[str, int, int], Txn | None]  # (topic, partition, offset) -> the transaction


@dataclass(frozen=True)
class ClientTimes:
    """The benchmark's own clock for one workflow (ms since the epoch)."""

    workflow_id: str
    called: float
    started: float  # the start call returned
    result: float  # the result is in hand


@dataclass
class Step:
    """One command of a workflow and the transaction that consumed it."""

    command: Written
    txn: Txn | None
    outputs: list[Written] = field(default_factory=list)

    @property
    def taken(self) -> int | None:
        """The batch's `now`: the history events' time, else a task start time the state recorded for this step.
        Not a WORKFLOW_TASK_STARTED's: written with the answer, it carries the time the worker took the task."""
        events = [o.time_ms for o in self.outputs if o.role == "history" and o.time_ms is not None
                  and o.kind != "WORKFLOW_TASK_STARTED"]
        if events:
            return min(events)
        states = [o.time_ms for o in self.outputs if o.role == "state" and o.time_ms is not None
                  and o.time_ms >= self.command.create_time]
        return max(states) if states else None

    @property
    def first_out(self) -> int | None:
        return min((o.create_time for o in self.outputs), default=None)

    @property
    def last_out(self) -> int | None:
        return max((o.create_time for o in self.outputs), default=None)


def steps(commands: Sequence[Written], outputs: Iterable[Written], consumed_by: TxnOf, written_by: TxnOf) -> list[Step]:
    """A workflow's steps in order: each command with the transaction that consumed it and the workflow's records
    that transaction wrote."""
    chain = [Step(c, consumed_by(c.topic, c.partition, c.offset)) for c in sorted(commands, key=lambda c: c.offset)]
    by_txn: dict[int, Step] = {}
    for step in chain:
        if step.txn is not None:
            by_txn[id(step.txn)] = step  # two commands in one transaction: the outputs go to the later one
    for out in outputs:
        txn = written_by(out.topic, out.partition, out.offset)
        if txn is not None and id(txn) in by_txn:
            by_txn[id(txn)].outputs.append(out)
    return chain


def _gap(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else float(later - earlier)


def hops(chain: Sequence[Step], client: ClientTimes | None) -> list[tuple[int, str, str, float | None, bool]]:
    """(step number, step label, hop, ms, in series) for one workflow. The hops in series add up to the end-to-end
    latency: the last step's markers run beside the client's wake-up, the start reply beside the first task."""
    out: list[tuple[int, str, str, float | None, bool]] = []
    previous: Step | None = None
    for n, step in enumerate(chain, 1):
        label = f"{n} {step.command.kind}"
        txn = step.txn
        prepared = txn.prepared if txn else None
        visible = txn.visible if txn else None
        if previous is None:
            out.append((n, label, ARRIVE_FIRST, _gap(step.command.create_time, client.called if client else None),
                        True))
        else:
            ready = previous.txn.visible if previous.txn else None
            out.append((n, label, ARRIVE_NEXT, _gap(step.command.create_time, ready), True))
        last = n == len(chain)
        out += [
            (n, label, TAKEN, _gap(step.taken, step.command.create_time), True),
            (n, label, DECIDE, _gap(step.first_out, step.taken), True),
            (n, label, PRODUCE, _gap(step.last_out, step.first_out), True),
            (n, label, OFFSETS, _gap(txn.offsets_committed if txn else None, step.last_out), True),
            (n, label, FLUSH, _gap(prepared, txn.offsets_committed if txn else None), True),
            (n, label, MARKERS, _gap(visible, prepared), not last),
            (n, label, STEP_TOTAL, _gap(visible, step.command.create_time), False),
        ]
        previous = step
    if chain and client is not None:
        final = chain[-1].txn
        out.append((len(chain) + 1, "result", RESULT, _gap(client.result, final.prepared if final else None), True))
        first = chain[0].txn
        out.append((1, f"1 {chain[0].command.kind}", HANDLE, _gap(client.started, first.visible if first else None),
                    False))
        out.append((len(chain) + 2, "total", END_TO_END, client.result - client.called, False))
    return out


@dataclass
class Row:
    """One line of the waterfall: a hop of a step, over every workflow measured."""

    order: tuple[int, int]
    step: str
    hop: str
    in_series: bool
    values: list[float] = field(default_factory=list)

    def p(self, q: float) -> float:
        return percentile(self.values, q)


def waterfall(per_workflow: Iterable[Sequence[tuple[int, str, str, float | None, bool]]]) -> list[Row]:
    """Rows in series order (by step, then hop), each with every workflow's value for it. Workflows whose chains
    differ (a retried task) add rows of their own."""
    hop_rank = {h: i for i, h in enumerate((*HOPS, STEP_TOTAL, RESULT, HANDLE, END_TO_END))}
    rows: dict[tuple[str, str], Row] = {}
    for timeline in per_workflow:
        for number, step, hop, value, in_series in timeline:
            key = (step, hop)
            row = rows.get(key)
            if row is None:
                row = rows[key] = Row((number, hop_rank.get(hop, 99)), step, hop, in_series)
            if value is not None:
                row.values.append(value)
    return sorted(rows.values(), key=lambda r: r.order)


def series_p50(rows: Iterable[Row]) -> float:
    """Sum of the p50s of the hops in series (below the end-to-end p50 when hops have long tails)."""
    return sum(r.p(50) for r in rows if r.in_series and r.values)


def where_the_time_goes(rows: Iterable[Row]) -> dict[str, float]:
    """Mean ms per hop kind, summed over the steps, for the hops in series: means add up, so these add up to the
    mean end-to-end latency (when every workflow has every boundary), which p50s do not."""
    out: dict[str, float] = {}
    for r in rows:
        if r.in_series and r.values:
            out[r.hop] = out.get(r.hop, 0.0) + sum(r.values) / len(r.values)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


# -- what a workflow writes --------------------------------------------------------------------------------------


@dataclass
class Writes:
    """Records and bytes by topic over a set of workflows, as a consumer reads them (key + value + headers)."""

    workflows: int
    records: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)

    def add(self, written: Iterable[Written]) -> None:
        for w in written:
            self.records[w.role] += 1
            self.bytes[w.role] += w.size

    def per_workflow(self) -> dict[str, tuple[float, float]]:
        n = max(1, self.workflows)
        return {t: (self.records[t] / n, self.bytes[t] / n) for t in sorted(self.records)}


def partitions_by_topic(partitions: Iterable[tuple[str, int]], role: Callable[[str], str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for topic, _ in partitions:
        out[role(topic)] += 1
    return out


def group_by_workflow(records: Iterable[Written]) -> dict[str, list[Written]]:
    out: dict[str, list[Written]] = defaultdict(list)
    for r in records:
        out[r.workflow_id].append(r)
    return out
