"""The pure parts of bench/hops.py: the broker's log dumps turned into transactions, the hop waterfall assembled
from timestamps, Prometheus histograms read back, and the issue 15 targets reported met or not."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from bench.compare import latency_targets
from bench.harness import Result
from bench.kafka_logs import (
    Ledger,
    LogRecord,
    attach_markers,
    attach_offset_commits,
    log_writes,
    offset_commits_by_group,
    parse_dump,
    producers,
    transactions,
)
from bench.prometheus_text import delta, histogram, quantile, samples
from bench.waterfall import (
    ARRIVE_FIRST,
    ARRIVE_NEXT,
    DECIDE,
    END_TO_END,
    FLUSH,
    HANDLE,
    MARKERS,
    OFFSETS,
    PRODUCE,
    RESULT,
    STEP_TOTAL,
    TAKEN,
    ClientTimes,
    Writes,
    Written,
    hops,
    percentile,
    series_p50,
    steps,
    waterfall,
    where_the_time_goes,
)

TID = "p-processor-processor-1"
PID = 3


def _json(found: object) -> str:
    return json.dumps(found, separators=(",", ":"))


def _batch(base: int, last: int, pid: int, txn: bool, control: bool, ts: int, size: int = 100) -> str:
    return (f"baseOffset: {base} lastOffset: {last} count: {last - base + 1} baseSequence: 0 lastSequence: 0 "
            f"producerId: {pid} producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: {str(txn).lower()} "
            f"isControl: {str(control).lower()} deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {ts} "
            f"size: {size} magic: 2 compresscodec: none crc: 1 isvalid: true")


def _txn_state(offset: int, ts: int, status: int, parts: dict[str, list[int]], handled: int) -> str:
    value = {"version": "1", "data": {
        "producerId": PID, "producerEpoch": 0, "transactionTimeoutMs": 2000, "transactionStatus": status,
        "transactionPartitions": [{"topic": t, "partitionIds": p} for t, p in parts.items()],
        "transactionLastUpdateTimestampMs": handled, "transactionStartTimestampMs": 100}}
    key = {"type": "0", "data": {"transactionalId": TID}}
    return "\n".join([_batch(offset, offset, -1, False, False, ts),
                      f"| offset: {offset} CreateTime: {ts} keySize: 48 valueSize: 149 sequence: -1 headerKeys: [] "
                      f"key: {_json(key)} payload: {_json(value)}"])


def _offset_commit(offset: int, ts: int, pid: int, group: str, partition: int, committed: int) -> str:
    key = {"type": "1", "data": {"group": group, "topic": "p.commands", "partition": partition}}
    value = {"version": "4", "data": {"offset": committed, "leaderEpoch": -1, "metadata": "", "commitTimestamp": ts}}
    return "\n".join([_batch(offset, offset, pid, pid == PID, False, ts, 142),
                      f"| offset: {offset} CreateTime: {ts} keySize: 49 valueSize: 24 sequence: 0 headerKeys: [] "
                      f"key: {_json(key)} payload: {_json(value)}"])


def _marker(offset: int, ts: int) -> str:
    return "\n".join([_batch(offset, offset, PID, True, True, ts, 78),
                      f"| offset: {offset} CreateTime: {ts} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                      "endTxnMarker: COMMIT coordinatorEpoch: 0"])


OFFSETS_PART = {"__consumer_offsets": [7]}
STATE_DUMP = "\n".join([
    "Dumping /data/__transaction_state-3/00000000000000000000.log", "Log starting offset: 0",
    _txn_state(0, 100, 1, OFFSETS_PART, 100),  # AddOffsetsToTxn first (librdkafka sends it before the partitions)
    _txn_state(1, 103, 1, {"p.history": [0], "p.tasks.q.workflow": [1], **OFFSETS_PART}, 102),
    _txn_state(2, 121, 2, {"p.history": [0], "p.tasks.q.workflow": [1], **OFFSETS_PART}, 120),
    _txn_state(3, 125, 4, {}, 121),
    _txn_state(4, 200, 1, {"p.history": [0], **OFFSETS_PART}, 200),
    _txn_state(5, 231, 2, {"p.history": [0], **OFFSETS_PART}, 230),
    _txn_state(6, 236, 4, {}, 231),
])
DATA_DUMP = "\n".join([
    "Dumping /data/p.history-0/00000000000000000000.log", "Log starting offset: 0",
    _batch(0, 2, PID, True, False, 105, 300), _batch(3, 3, PID, True, True, 123, 78),
    _batch(4, 4, PID, True, False, 205, 150), _batch(5, 5, PID, True, True, 233, 78),
    "Dumping /data/p.tasks.q.workflow-1/00000000000000000000.log", "Log starting offset: 0",
    _batch(0, 0, PID, True, False, 105, 400), _batch(1, 1, PID, True, True, 122, 78),
    "Dumping /data/p.commands-2/00000000000000000000.log", "Log starting offset: 0",
    _batch(0, 9, 9, False, False, 90, 1000),  # the gateway's and workers' commands: idempotent, not transactional
])
OFFSETS_DUMP = "\n".join([
    "Dumping /data/__consumer_offsets-7/00000000000000000000.log", "Log starting offset: 0",
    _offset_commit(10, 110, PID, "p-history", 2, 8), _marker(11, 124),
    _offset_commit(12, 215, PID, "p-history", 2, 9), _marker(13, 234),
    _offset_commit(14, 216, -1, "p-worker-q", 1, 5),  # a worker's own commit, outside any transaction
])


def _ledger() -> tuple[Ledger, list[LogRecord]]:
    _, state = parse_dump(STATE_DUMP)
    data, _ = parse_dump(DATA_DUMP)
    offset_batches, offset_records = parse_dump(OFFSETS_DUMP)
    assert producers(state, "p-processor-") == {TID: PID}
    txns = transactions(state, TID)
    batches = data + offset_batches
    attach_markers(txns, batches, PID, {(b.topic, b.partition) for b in batches})
    attach_offset_commits(txns, offset_records, PID)
    return Ledger(txns), offset_records


def test_transactions_are_read_from_the_coordinators_log_and_the_markers() -> None:
    ledger, _ = _ledger()
    first, second = ledger.txns
    assert (first.started, first.add_offsets, first.add_partitions, first.prepared, first.completed) == \
        (100, 100, 102, 120, 125)
    assert first.partitions == {("p.history", 0), ("p.tasks.q.workflow", 1), ("__consumer_offsets", 7)}
    assert first.markers == {("p.history", 0): 123, ("p.tasks.q.workflow", 1): 122, ("__consumer_offsets", 7): 124}
    assert first.visible == 124 and first.committed
    assert dict(first.records) == {"p.history": 3, "p.tasks.q.workflow": 1, "__consumer_offsets": 1}
    assert first.offsets_committed == 110 and first.consumed == {("p.commands", 2): 8}
    assert (second.prepared, second.visible, second.offsets_committed) == (230, 234, 215)
    assert second.consumed == {("p.commands", 2): 9} and dict(second.records)["p.history"] == 1


def test_each_command_and_record_is_tied_to_its_transaction() -> None:
    ledger, offset_records = _ledger()
    first, second = ledger.txns
    assert ledger.consumed_by("p.commands", 2, 7) is first
    assert ledger.consumed_by("p.commands", 2, 8) is second
    assert ledger.consumed_by("p.commands", 2, 9) is None  # not consumed yet
    assert ledger.written_by("p.history", 0, 2) is first
    assert ledger.written_by("p.history", 0, 4) is second
    assert ledger.written_by("p.tasks.q.workflow", 1, 0) is first
    assert ledger.between(120, 200) == [first]
    assert offset_commits_by_group(offset_records, 0, 1000) == {"p-history": 2, "p-worker-q": 1}


def test_log_writes_count_batches_markers_and_bytes_of_every_producer_in_a_window() -> None:
    data, _ = parse_dump(DATA_DUMP)
    found = log_writes(data, 90, 130)
    assert found.records == {"p.history": 3, "p.tasks.q.workflow": 1, "p.commands": 10}
    assert found.markers == {"p.history": 1, "p.tasks.q.workflow": 1}
    assert found.bytes["p.history"] == 300 + 78


def _w(role: str, offset: int, created: int, kind: str, time_ms: int | None = None) -> Written:
    topic = {"commands": "p.commands"}.get(role, f"p.{role}")
    return Written(topic, role, 2 if role == "commands" else 0, offset, created, 50, "wf-1", kind, time_ms)


@dataclass(frozen=True)
class _Txn:
    offsets_committed: int | None
    prepared: int | None
    visible: int | None


def _timeline() -> tuple[list[tuple[int, str, str, float | None, bool]], ClientTimes]:
    """A start and one workflow task completion, with every boundary known."""
    t1, t2 = _Txn(130, 140, 145), _Txn(230, 242, 250)
    commands = [_w("commands", 8, 180, "RespondWorkflowTaskCompleted"),
                _w("commands", 7, 105, "StartWorkflowExecution")]
    outputs = [_w("history", 0, 120, "WORKFLOW_EXECUTION_STARTED", 110), _w("state", 0, 121, "MutableState", 110),
               _w("replies", 0, 122, "WorkflowStarted"),
               _w("history", 3, 215, "WORKFLOW_EXECUTION_COMPLETED", 200), _w("visibility", 0, 219, "VisibilityRecord")]
    consumed = {7: t1, 8: t2}
    written = {("p.history", 0): t1, ("p.state", 0): t1, ("p.replies", 0): t1, ("p.history", 3): t2,
               ("p.visibility", 0): t2}
    chain = steps(commands, outputs, lambda _t, _p, offset: consumed.get(offset),
                  lambda topic, _p, offset: written.get((topic, offset)))
    client = ClientTimes("wf-1", called=100.0, started=160.0, result=260.0)
    return hops(chain, client), client


def test_hops_follow_the_timestamps_and_add_up_to_the_end_to_end_latency() -> None:
    timeline, client = _timeline()
    got = {(label, hop): value for _, label, hop, value, _ in timeline}
    start, done = "1 StartWorkflowExecution", "2 RespondWorkflowTaskCompleted"
    assert got[(start, ARRIVE_FIRST)] == 5  # client call -> command produced
    assert got[(start, TAKEN)] == 5 and got[(start, DECIDE)] == 10 and got[(start, PRODUCE)] == 2
    assert got[(start, OFFSETS)] == 8 and got[(start, FLUSH)] == 10 and got[(start, MARKERS)] == 5
    assert got[(start, STEP_TOTAL)] == 40 and got[(start, HANDLE)] == 15
    assert got[(done, ARRIVE_NEXT)] == 35  # readable at 145, the worker's completion produced at 180
    assert got[(done, TAKEN)] == 20 and got[(done, DECIDE)] == 15 and got[(done, PRODUCE)] == 4
    assert got[("result", RESULT)] == 18 and got[("total", END_TO_END)] == 160
    in_series = sum(value for _, _, _, value, series in timeline if series and value is not None)
    assert in_series == client.result - client.called  # the last markers run beside the client's wake-up


def test_the_waterfall_orders_rows_by_step_and_hop_and_keeps_every_value() -> None:
    timeline, _ = _timeline()
    rows = waterfall([timeline, timeline])
    assert [r.hop for r in rows[:3]] == [ARRIVE_FIRST, TAKEN, DECIDE]
    assert rows[-1].hop == END_TO_END and rows[-1].values == [160.0, 160.0]
    assert series_p50(rows) == 160.0


def test_mean_latency_by_hop_kind_adds_up_to_the_mean_end_to_end() -> None:
    timeline, client = _timeline()
    faster = [(n, label, hop, None if ms is None else ms / 2, series) for n, label, hop, ms, series in timeline]
    shares = where_the_time_goes(waterfall([timeline, faster]))
    assert shares[TAKEN] == (5 + 20 + 2.5 + 10) / 2  # both steps, averaged over the two workflows
    assert STEP_TOTAL not in shares and HANDLE not in shares  # beside the series, not in it
    assert sum(shares.values()) == (client.result - client.called) * 0.75


def test_a_step_without_history_takes_its_batch_time_from_the_state_record() -> None:
    txn = _Txn(50, 60, 65)
    chain = steps([_w("commands", 1, 10, "RecordActivityTaskStarted")],
                  [_w("state", 0, 30, "MutableState", 20), _w("replies", 0, 31, "Accepted")],
                  lambda *_: txn, lambda *_: txn)
    assert chain[0].taken == 20 and chain[0].first_out == 30 and chain[0].last_out == 31
    stale = steps([_w("commands", 1, 10, "RecordActivityTaskStarted")], [_w("state", 0, 30, "MutableState", 5)],
                  lambda *_: txn, lambda *_: txn)
    assert stale[0].taken is None  # a time from before the command is another step's


def test_writes_per_workflow_by_topic() -> None:
    writes = Writes(workflows=2)
    writes.add([_w("history", 0, 1, "X"), _w("history", 1, 1, "Y"), _w("state", 0, 1, "MutableState")])
    assert writes.per_workflow() == {"history": (1.0, 50.0), "state": (0.5, 25.0)}


def test_percentiles_by_nearest_rank() -> None:
    assert percentile([float(v) for v in range(1, 11)], 90) == 9.0
    assert math.isnan(percentile([], 50))


def test_histogram_quantiles_from_two_scrapes() -> None:
    before = samples('ostinato_processor_commit_seconds_bucket{le="0.01"} 1.0\n'
                     'ostinato_processor_commit_seconds_bucket{le="0.02"} 1.0\n'
                     'ostinato_processor_commit_seconds_bucket{le="+Inf"} 1.0\n'
                     'ostinato_processor_commit_seconds_count 1.0\nostinato_processor_commit_seconds_sum 0.005\n')
    after = samples('# HELP x\nostinato_processor_commit_seconds_bucket{le="0.01"} 3.0\n'
                    'ostinato_processor_commit_seconds_bucket{le="0.02"} 5.0\n'
                    'ostinato_processor_commit_seconds_bucket{le="+Inf"} 5.0\n'
                    'ostinato_processor_commit_seconds_count 5.0\nostinato_processor_commit_seconds_sum 0.065\n')
    buckets, count, total = histogram(delta(before, after), "ostinato_processor_commit_seconds")
    assert buckets == [(0.01, 2.0), (0.02, 4.0), (math.inf, 4.0)] and count == 4.0 and math.isclose(total, 0.06)
    assert math.isclose(quantile(buckets, 0.5), 0.01)
    assert math.isclose(quantile(buckets, 0.75), 0.015)
    assert math.isnan(quantile([], 0.5))


def _result(engine: str, scenario: str, wfs: float, p50: float, metric_p99: float | None = None) -> Result:
    return Result(engine=engine, scenario=scenario, shape="hello", mode="closed", count=10, concurrency=1,
                  elapsed_s=1.0, workflows_per_s=wfs, activities_per_s=wfs,
                  latency_ms={"p50": p50, "p95": p50, "p99": p50, "max": p50},
                  metric_ms=None if metric_p99 is None else {"p50": 1.0, "p99": metric_p99}, failures=0)


def test_latency_targets_put_ostinato_beside_temporal() -> None:
    table = latency_targets([_result("ostinato", "S0", 7, 40), _result("temporal", "S0", 6, 150),
                             _result("ostinato", "S4", 100, 0, 60), _result("temporal", "S4", 30, 0, 80),
                             _result("ostinato", "S4=", 30, 0, 20), _result("temporal", "S4=", 30, 0, 40),
                             _result("ostinato", "S1", 100, 500), _result("temporal", "S1", 25, 900)])
    assert "| S0 p50 <= 1/3 of Temporal's | 40.0 ms | 150.0 ms | 3.75x | yes |" in table
    assert "| S4 lateness p99 <= Temporal's and <= 50 ms | 60.0 ms | 80.0 ms | 1.33x | no |" in table  # over 50 ms
    assert "| S4= (S4 at the same rate) lateness p99 <= Temporal's and <= 50 ms | 20.0 ms | 40.0 ms | 2.00x | yes |" \
        in table
    assert "| S1 >= 5x Temporal's throughput | 100.0 wf/s | 25.0 wf/s | 4.00x | no |" in table
    assert "| S2 >= 3x Temporal's throughput | n/a | n/a | n/a | n/a |" in table
