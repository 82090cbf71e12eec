"""What the broker wrote, read back from its own log files after a benchmark: transactions, markers, offsets.

A consumer never sees a transaction: not its markers, not the coordinator's bookkeeping, not which records it
held. The broker's files do. Kafka's own `kafka.tools.DumpLogSegments` prints them (the broker's jars are already
in the cache), and this module turns that text into `Transaction`s of one transactional producer (the processor):

- `__transaction_state` (with `--transaction-log-decoder`): per transaction, when the coordinator saw
  AddOffsetsToTxn and AddPartitionsToTxn (Ongoing), EndTxn (PrepareCommit) and the end of the markers
  (CompleteCommit), and every partition the transaction touched;
- data partitions (batch lines): the producer's batches and its commit markers, with their sizes and times;
- `__consumer_offsets` (with `--offsets-decoder`): the offsets each transaction committed for the commands topic,
  so each command is tied to the transaction that consumed it.

Markers are tied to transactions exactly, without trusting clocks: one producer's transactions are serial, and each
writes one marker to every partition it touched, so the i-th marker on a partition closes the i-th transaction that
names that partition. A batch belongs to the transaction of the next marker after it on its partition.
"""

from __future__ import annotations

import bisect
import json
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"
# TransactionState ids as the transaction log decoder prints them (org.apache.kafka.coordinator.transaction).
ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 1, 2, 3, 4, 5

_DUMPING = re.compile(r"^Dumping (.+)$")
_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?producerId: (-?\d+) producerEpoch: (-?\d+) "
                    r".*?isTransactional: (true|false) isControl: (true|false) .*?CreateTime: (-?\d+) size: (\d+)")
_RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (-?\d+) .*?key: (\{.*\}) payload: (\{.*\}|<DELETE>|null)\s*$")


@dataclass(frozen=True)
class Batch:
    """One record batch of a partition's log (a commit or abort marker is a control batch)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    count: int
    producer_id: int
    transactional: bool
    control: bool
    create_time: int  # the batch's max CreateTime; for a marker, when the broker wrote it
    size: int  # bytes on disk, batch header included


@dataclass(frozen=True)
class LogRecord:
    """One decoded record of `__transaction_state` or `__consumer_offsets`, under its batch."""

    batch: Batch
    offset: int
    create_time: int
    key: dict[str, Any]  # the decoder's JSON
    value: dict[str, Any] | None


@dataclass
class Transaction:
    """One transaction of one producer, from the coordinator's log and the markers it wrote."""

    transactional_id: str
    index: int  # 0, 1, 2... in this producer's order
    started: int  # the first Ongoing record (the first AddOffsetsToTxn or AddPartitionsToTxn handled)
    add_offsets: int | None = None  # AddOffsetsToTxn handled (the coordinator's time)
    add_partitions: int | None = None  # the first AddPartitionsToTxn handled
    prepared: int | None = None  # EndTxn handled: PrepareCommit (or PrepareAbort)
    completed: int | None = None  # CompleteCommit written, after every marker
    committed: bool = True
    partitions: frozenset[tuple[str, int]] = frozenset()
    markers: dict[tuple[str, int], int] = field(default_factory=dict)  # partition -> marker time
    marker_offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # partition -> marker offset
    offsets_committed: int | None = None  # TxnOffsetCommit appended by the group coordinator
    consumed: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> next offset committed
    records: Counter[str] = field(default_factory=Counter)  # topic -> records written
    log_bytes: Counter[str] = field(default_factory=Counter)  # topic -> batch bytes written (markers excluded)

    @property
    def visible(self) -> int | None:
        """When read_committed readers can see all of it: the last marker (the CompleteCommit if none was read)."""
        return max(self.markers.values()) if self.markers else self.completed


# -- parsing ----------------------------------------------------------------------------------------------------


def _topic_partition(path: str) -> tuple[str, int]:
    name = Path(path).parent.name
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


def parse_dump(text: str) -> tuple[list[Batch], list[LogRecord]]:
    """Batches and decoded records of DumpLogSegments output (one or many files; records only with a decoder)."""
    batches: list[Batch] = []
    records: list[LogRecord] = []
    where = ("", -1)
    batch: Batch | None = None
    for line in text.splitlines():
        if m := _DUMPING.match(line):
            where, batch = _topic_partition(m.group(1)), None
        elif m := _BATCH.match(line):
            base, last, count, pid, _epoch, txn, control, ts, size = m.groups()
            batch = Batch(where[0], where[1], int(base), int(last), int(count), int(pid), txn == "true",
                          control == "true", int(ts), int(size))
            batches.append(batch)
        elif batch is not None and (m := _RECORD.match(line)):
            value = m.group(4)
            try:
                key = json.loads(m.group(3))
                decoded = json.loads(value) if value.startswith("{") else None
            except json.JSONDecodeError:
                continue
            records.append(LogRecord(batch, int(m.group(1)), int(m.group(2)), key, decoded))
    return batches, records


# -- assembling transactions ----------------------------------------------------------------------------------------


def _data(record: LogRecord) -> dict[str, Any]:
    found = (record.value or {}).get("data")
    return found if isinstance(found, dict) else {}


def transactions(state_records: Iterable[LogRecord], transactional_id: str) -> list[Transaction]:
    """The transactions of one transactional id, in order, from its `__transaction_state` records."""
    out: list[Transaction] = []
    current: Transaction | None = None
    ordered = sorted((r for r in state_records if r.batch.topic == TXN_STATE_TOPIC),
                     key=lambda r: (r.batch.partition, r.offset))
    for record in ordered:
        if (record.key.get("data") or {}).get("transactionalId") != transactional_id:
            continue
        data = _data(record)
        status = int(data.get("transactionStatus", -1))
        handled = int(data.get("transactionLastUpdateTimestampMs", record.create_time))
        parts = frozenset((str(tp["topic"]), int(p)) for tp in data.get("transactionPartitions") or []
                          for p in tp["partitionIds"])
        if status == ONGOING:
            if current is None:
                current = Transaction(transactional_id, len(out), started=handled)
                out.append(current)
            topics = {t for t, _ in parts}
            if OFFSETS_TOPIC in topics and current.add_offsets is None:
                current.add_offsets = handled
            if topics - {OFFSETS_TOPIC} and current.add_partitions is None:
                current.add_partitions = handled
            current.partitions = current.partitions | parts
        elif status in (PREPARE_COMMIT, PREPARE_ABORT) and current is not None:
            current.prepared = handled
            current.committed = status == PREPARE_COMMIT
            current.partitions = current.partitions | parts
        elif status in (COMPLETE_COMMIT, COMPLETE_ABORT) and current is not None:
            current.completed = record.create_time  # its "last update" is the prepare's; the append is the end
            current = None
    return out


def attach_markers(txns: Sequence[Transaction], batches: Iterable[Batch], producer_id: int,
                   dumped: set[tuple[str, int]]) -> None:
    """Give each transaction the time of its marker on every dumped partition it touched, and the records and
    bytes of the producer's batches before each marker. The i-th marker of a partition closes the i-th
    transaction naming it (a producer's transactions are serial)."""
    by_partition: dict[tuple[str, int], list[Batch]] = defaultdict(list)
    for b in batches:
        if b.producer_id == producer_id and b.transactional:
            by_partition[(b.topic, b.partition)].append(b)
    naming: dict[tuple[str, int], list[Transaction]] = defaultdict(list)
    for txn in txns:
        for tp in sorted(txn.partitions):
            naming[tp].append(txn)
    for tp, log in by_partition.items():
        if tp not in dumped:
            continue
        owners = iter(naming.get(tp, []))
        pending: list[Batch] = []
        for b in sorted(log, key=lambda b: b.base_offset):
            if not b.control:
                pending.append(b)
                continue
            owner = next(owners, None)
            if owner is None:
                break  # more markers than transactions: the log did not start at this producer's first
            owner.markers[tp] = b.create_time
            owner.marker_offsets[tp] = b.base_offset
            for data in pending:
                owner.records[tp[0]] += data.count
                owner.log_bytes[tp[0]] += data.size
            pending = []


def attach_offset_commits(txns: Sequence[Transaction], records: Iterable[LogRecord], producer_id: int) -> None:
    """Tie the offsets each transaction committed (`send_offsets_to_transaction`) to it, and when the group
    coordinator appended them: an offset record belongs to the transaction whose marker follows it (call
    `attach_markers` first, with the `__consumer_offsets` partitions dumped)."""
    closing: dict[int, list[tuple[int, Transaction]]] = defaultdict(list)
    for txn in txns:
        for (topic, partition), offset in txn.marker_offsets.items():
            if topic == OFFSETS_TOPIC:
                closing[partition].append((offset, txn))
    for ends in closing.values():
        ends.sort(key=lambda e: e[0])
    for r in records:
        if r.batch.topic != OFFSETS_TOPIC or r.batch.producer_id != producer_id or not r.batch.transactional:
            continue
        ends = closing.get(r.batch.partition, [])
        i = bisect.bisect_right([offset for offset, _ in ends], r.offset)
        key, value = r.key.get("data"), _data(r)
        if i >= len(ends) or not isinstance(key, dict) or "offset" not in value:
            continue
        txn = ends[i][1]
        txn.consumed[(str(key["topic"]), int(key["partition"]))] = int(value["offset"])
        txn.offsets_committed = max(txn.offsets_committed or 0, r.create_time)


class ConsumedBy:
    """Which transaction consumed a command: the first that committed an offset past it."""

    def __init__(self, txns: Iterable[Transaction]) -> None:
        ends: dict[tuple[str, int], list[tuple[int, int, Transaction]]] = defaultdict(list)
        for txn in txns:
            for tp, upto in txn.consumed.items():
                ends[tp].append((upto, txn.index, txn))
        self._ends = {}
        for tp, found in ends.items():
            found.sort(key=lambda e: (e[0], e[1]))
            self._ends[tp] = ([upto for upto, _, _ in found], [t for _, _, t in found])

    def __call__(self, topic: str, partition: int, offset: int) -> Transaction | None:
        uptos, owners = self._ends.get((topic, partition), ([], []))
        i = bisect.bisect_right(uptos, offset)
        return owners[i] if i < len(owners) else None


def offset_commits_by_group(records: Iterable[LogRecord], since: int, until: int) -> Counter[str]:
    """OffsetCommit records per consumer group appended in [since, until] (workers commit outside transactions)."""
    out: Counter[str] = Counter()
    for r in records:
        key = r.key.get("data")
        if r.batch.topic != OFFSETS_TOPIC or not isinstance(key, dict) or "topic" not in key:
            continue
        if since <= r.create_time <= until:
            out[str(key["group"])] += 1
    return out


@dataclass
class LogWrites:
    """What the broker appended to each topic in a time window, every producer: batches, markers, bytes on disk."""

    batches: Counter[str] = field(default_factory=Counter)
    records: Counter[str] = field(default_factory=Counter)
    markers: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)  # batches and markers, headers included


def log_writes(batches: Iterable[Batch], since: int, until: int) -> LogWrites:
    """Totals by topic of the batches whose CreateTime falls in [since, until]."""
    out = LogWrites()
    for b in batches:
        if not since <= b.create_time <= until:
            continue
        out.bytes[b.topic] += b.size
        if b.control:
            out.markers[b.topic] += 1
        else:
            out.batches[b.topic] += 1
            out.records[b.topic] += b.count
    return out


def producers(state_records: Iterable[LogRecord], prefix: str) -> dict[str, int]:
    """Transactional id -> producer id, for the transactional ids starting with `prefix` (the last one seen)."""
    out: dict[str, int] = {}
    for r in state_records:
        key = r.key.get("data")
        tid = key.get("transactionalId") if isinstance(key, dict) else None
        pid = _data(r).get("producerId")
        if isinstance(tid, str) and tid.startswith(prefix) and isinstance(pid, int):
            out[tid] = pid
    return out


# -- running the tool ---------------------------------------------------------------------------------------------


def segment_files(log_dir: Path, topics: Iterable[str]) -> dict[str, list[Path]]:
    """The `.log` segment files of every partition of `topics` (and of `__consumer_offsets`/`__transaction_state`
    when named) under a broker's log directory, by topic."""
    out: dict[str, list[Path]] = defaultdict(list)
    wanted = set(topics)
    for part in sorted(log_dir.iterdir()):
        topic, _, number = part.name.rpartition("-")
        if topic in wanted and number.isdigit():
            out[topic] += sorted(p for p in part.glob("*.log") if p.stat().st_size > 0)
    return out


def dump(files: Sequence[Path], decoder: str | None = None, timeout: float = 300) -> str:
    """DumpLogSegments over `files` with the broker's own jars; `decoder`: "transaction-log" or "offsets"."""
    return dump_all([(files, decoder)], timeout)[0]


def dump_all(jobs: Sequence[tuple[Sequence[Path], str | None]], timeout: float = 300) -> list[str]:
    """Several DumpLogSegments runs at once (one JVM each: a decoder applies to every file of a run)."""
    from ostinato.infra.kafka import class_data_archive, fetch, java_executable, template

    java, libs = java_executable(), fetch()
    jvm = [java, "-Xmx512m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={template('log4j2.properties')}"]
    archive = class_data_archive(libs, java)
    if archive.exists():  # the broker's class archive fits the same classpath: a start in half the time
        jvm += [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"]
    procs: list[subprocess.Popen[str] | None] = []
    for files, decoder in jobs:
        if not files:
            procs.append(None)
            continue
        argv = [*jvm, "-cp", f"{libs}/*", "kafka.tools.DumpLogSegments", "--files", ",".join(str(f) for f in files)]
        if decoder is not None:
            argv.append(f"--{decoder}-decoder")
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for proc in procs:
        if proc is None:
            out.append("")
            continue
        stdout, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"DumpLogSegments failed ({proc.returncode}): {stderr[-2000:]}")
        out.append(stdout)
    return out


class Ledger:
    """One processor's transactions with the lookups the waterfall needs: which transaction consumed a command
    (from the offsets it committed) and which wrote a record (from the marker after it on its partition)."""

    def __init__(self, txns: Sequence[Transaction]) -> None:
        self.txns = list(txns)
        self.consumed_by = ConsumedBy(self.txns)
        self._closing: dict[tuple[str, int], tuple[list[int], list[Transaction]]] = {}
        ends: dict[tuple[str, int], list[tuple[int, Transaction]]] = defaultdict(list)
        for txn in self.txns:
            for tp, offset in txn.marker_offsets.items():
                ends[tp].append((offset, txn))
        for tp, pairs in ends.items():
            pairs.sort(key=lambda e: e[0])
            self._closing[tp] = ([o for o, _ in pairs], [t for _, t in pairs])

    def written_by(self, topic: str, partition: int, offset: int) -> Transaction | None:
        offsets, owners = self._closing.get((topic, partition), ([], []))
        i = bisect.bisect_right(offsets, offset)
        return owners[i] if i < len(owners) else None

    def between(self, since: int, until: int) -> list[Transaction]:
        """The transactions that became readable in [since, until]."""
        return [t for t in self.txns if t.visible is not None and since <= t.visible <= until]
